package ledger

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"
)

// ErrMalformed reports bytes that are not the canonical encoding of a ledger
// value: an unknown version or kind, a truncated field, trailing bytes, a
// non-canonical number or list order, or a field outside its limits.
var ErrMalformed = errors.New("ledger: malformed encoding")

// Limits on encoded fields. They bound memory use when decoding untrusted
// input and are part of the canonical form: an encoder refuses to exceed them.
const (
	maxIDLen     = 128     // party, batch, session and parameter-key identifiers
	maxTextLen   = 1024    // origins, mechanism parameter values
	maxListLen   = 4096    // parties, hospitals, parameters, curve values
	maxBlobLen   = 1 << 20 // an embedded command inside an entry
	hashSize     = 32
	signatureLen = 64
	publicKeyLen = 32
)

// encoder appends the canonical encoding of fields to a byte slice. The
// first error is kept and every later call is a no-op, so callers check
// once at the end.
type encoder struct {
	buf []byte
	err error
}

func (e *encoder) fail(format string, args ...any) {
	if e.err == nil {
		e.err = fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
	}
}

func (e *encoder) u8(v uint8) { e.buf = append(e.buf, v) }

func (e *encoder) u32(v uint32) { e.buf = binary.BigEndian.AppendUint32(e.buf, v) }

func (e *encoder) u64(v uint64) { e.buf = binary.BigEndian.AppendUint64(e.buf, v) }

func (e *encoder) i64(v int64) { e.u64(uint64(v)) }

// f64 writes the IEEE 754 bits. NaN and negative zero have no canonical
// form and are refused; ±Inf are allowed (the decoder's caller decides
// whether a value may be infinite).
func (e *encoder) f64(field string, v float64) {
	if math.IsNaN(v) {
		e.fail("%s is NaN", field)
		return
	}
	if v == 0 && math.Signbit(v) {
		v = 0 // -0 and +0 are the same number; encode the one canonical form
	}
	e.u64(math.Float64bits(v))
}

func (e *encoder) str(field string, s string, limit int) {
	if len(s) > limit {
		e.fail("%s is %d bytes, the limit is %d", field, len(s), limit)
		return
	}
	if !validText(s) {
		e.fail("%s is not printable UTF-8", field)
		return
	}
	e.u32(uint32(len(s)))
	e.buf = append(e.buf, s...)
}

func (e *encoder) id(field, s string) {
	if !validID(s) {
		e.fail("%s %q is not an identifier (1 to %d of A-Z a-z 0-9 . _ - : /)", field, s, maxIDLen)
		return
	}
	e.str(field, s, maxIDLen)
}

// optID writes an identifier that may be empty.
func (e *encoder) optID(field, s string) {
	if s == "" {
		e.u32(0)
		return
	}
	e.id(field, s)
}

func (e *encoder) fixed(field string, b []byte, n int) {
	if len(b) != n {
		e.fail("%s is %d bytes, want %d", field, len(b), n)
		return
	}
	e.buf = append(e.buf, b...)
}

func (e *encoder) blob(field string, b []byte) {
	if len(b) > maxBlobLen {
		e.fail("%s is %d bytes, the limit is %d", field, len(b), maxBlobLen)
		return
	}
	e.u32(uint32(len(b)))
	e.buf = append(e.buf, b...)
}

func (e *encoder) count(field string, n int) {
	if n > maxListLen {
		e.fail("%s has %d items, the limit is %d", field, n, maxListLen)
		return
	}
	e.u32(uint32(n))
}

// decoder reads canonical fields. Like encoder it keeps the first error.
type decoder struct {
	buf []byte
	off int
	err error
	// kind is the command kind being decoded, for bodies with more than
	// one encoding (charge and charge-v2).
	kind Kind
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format+" (at byte %d)", append(append([]any{ErrMalformed}, args...), d.off)...)
	}
}

func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || len(d.buf)-d.off < n {
		d.fail("truncated: need %d bytes, have %d", n, len(d.buf)-d.off)
		return nil
	}
	b := d.buf[d.off : d.off+n]
	d.off += n
	return b
}

func (d *decoder) u8() uint8 {
	b := d.take(1)
	if b == nil {
		return 0
	}
	return b[0]
}

func (d *decoder) u32() uint32 {
	b := d.take(4)
	if b == nil {
		return 0
	}
	return binary.BigEndian.Uint32(b)
}

func (d *decoder) u64() uint64 {
	b := d.take(8)
	if b == nil {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

func (d *decoder) i64() int64 { return int64(d.u64()) }

func (d *decoder) f64(field string) float64 {
	bits := d.u64()
	v := math.Float64frombits(bits)
	if d.err != nil {
		return 0
	}
	if math.IsNaN(v) {
		d.fail("%s is NaN", field)
		return 0
	}
	if v == 0 && math.Signbit(v) {
		d.fail("%s is negative zero, which is not canonical", field)
		return 0
	}
	return v
}

func (d *decoder) str(field string, limit int) string {
	n := d.u32()
	if d.err != nil {
		return ""
	}
	if int64(n) > int64(limit) {
		d.fail("%s is %d bytes, the limit is %d", field, n, limit)
		return ""
	}
	b := d.take(int(n))
	if d.err != nil {
		return ""
	}
	s := string(b)
	if !validText(s) {
		d.fail("%s is not printable UTF-8", field)
		return ""
	}
	return s
}

func (d *decoder) id(field string) string {
	s := d.str(field, maxIDLen)
	if d.err == nil && !validID(s) {
		d.fail("%s %q is not an identifier", field, s)
	}
	return s
}

func (d *decoder) optID(field string) string {
	s := d.str(field, maxIDLen)
	if d.err == nil && s != "" && !validID(s) {
		d.fail("%s %q is not an identifier", field, s)
	}
	return s
}

func (d *decoder) fixed(n int) []byte {
	b := d.take(n)
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}

func (d *decoder) blob(field string) []byte {
	n := d.u32()
	if d.err != nil {
		return nil
	}
	if n > maxBlobLen {
		d.fail("%s is %d bytes, the limit is %d", field, n, maxBlobLen)
		return nil
	}
	return d.fixed(int(n))
}

func (d *decoder) count(field string) int {
	n := d.u32()
	if d.err != nil {
		return 0
	}
	if n > maxListLen {
		d.fail("%s has %d items, the limit is %d", field, n, maxListLen)
		return 0
	}
	// Every item takes at least one byte: refuse counts the input cannot hold
	// before allocating for them.
	if int(n) > len(d.buf)-d.off {
		d.fail("%s claims %d items in %d remaining bytes", field, n, len(d.buf)-d.off)
		return 0
	}
	return int(n)
}

// end reports trailing bytes as an error.
func (d *decoder) end() error {
	if d.err == nil && d.off != len(d.buf) {
		d.fail("%d trailing bytes", len(d.buf)-d.off)
	}
	return d.err
}

// validID reports whether s is a non-empty identifier of at most maxIDLen
// bytes drawn from A-Z a-z 0-9 . _ - : /. Identifiers are safe in note key
// names, file names, URLs and log lines without quoting.
func validID(s string) bool {
	if len(s) == 0 || len(s) > maxIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.', c == '_', c == '-', c == ':', c == '/':
		default:
			return false
		}
	}
	return true
}

// validText reports whether s is UTF-8 without control characters.
func validText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return false
		}
	}
	return true
}
