package ledger

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// ExportReader reads an export (the encoding of Export) as a stream: its
// entries one at a time, then its keys and checkpoints. It holds one entry
// at a time, so a log of any length is read in the memory of its largest
// entry. It accepts exactly the bytes DecodeExport accepts.
type ExportReader struct {
	r    *bufio.Reader
	n    int64 // the entries the export states
	read int64 // the entries read
	off  int64 // the bytes read
	err  error
}

// NewExportReader reads the export's header from r.
func NewExportReader(r io.Reader) (*ExportReader, error) {
	x := &ExportReader{r: bufio.NewReaderSize(r, 64<<10)}
	var h [10]byte
	if x.full(h[:]); x.err != nil {
		return nil, x.err
	}
	switch n := binary.BigEndian.Uint64(h[2:]); {
	case h[0] != Version:
		x.fail(0, "version %d, this ledger reads version %d", h[0], Version)
	case h[1] != exportTag:
		x.fail(1, "tag %q, want %q", h[1], exportTag)
	case n > maxEntries:
		x.fail(2, "claims %d entries, the limit is %d", n, uint64(maxEntries))
	default:
		x.n = int64(n)
	}
	if x.err != nil {
		return nil, x.err
	}
	return x, nil
}

// Len is the number of entries the export states.
func (x *ExportReader) Len() int64 { return x.n }

// Next returns the next entry, a slice of its own, and io.EOF after the
// last one. An export cut short or malformed is an error wrapping
// ErrMalformed; an error reading the stream is returned as it is.
func (x *ExportReader) Next() ([]byte, error) {
	if x.err != nil {
		return nil, x.err
	}
	if x.read == x.n {
		return nil, io.EOF
	}
	at := x.off
	l := x.u32()
	if x.err == nil && l > maxEntrySize {
		x.fail(at, "entry %d is %d bytes", x.read, l)
	}
	if x.err != nil {
		return nil, x.err
	}
	b := make([]byte, l)
	if x.full(b); x.err != nil {
		return nil, x.err
	}
	x.read++
	return b, nil
}

// Tail reads what follows the entries — the auditors' keys and the signed
// checkpoints — once Next has returned every entry, and checks that
// nothing follows them.
func (x *ExportReader) Tail() (keys []string, checkpoints [][]byte, err error) {
	if x.err == nil && x.read != x.n {
		x.err = fmt.Errorf("ledger: export: %d of %d entries read before the tail", x.read, x.n)
	}
	n := x.count("keys")
	for i := 0; i < n && x.err == nil; i++ {
		at := x.off
		l := x.u32()
		if x.err == nil && l > maxKeyLen {
			x.fail(at, "key is %d bytes, the limit is %d", l, maxKeyLen)
		}
		if x.err != nil {
			break
		}
		b := make([]byte, l)
		if x.full(b); x.err == nil && !validText(string(b)) {
			x.fail(at, "key is not printable UTF-8")
		}
		keys = append(keys, string(b))
	}
	n = x.count("checkpoints")
	for i := 0; i < n && x.err == nil; i++ {
		at := x.off
		l := x.u32()
		if x.err == nil && l > maxBlobLen {
			x.fail(at, "checkpoint is %d bytes, the limit is %d", l, maxBlobLen)
		}
		if x.err == nil && l > maxNoteLen {
			x.fail(at, "a checkpoint is %d bytes, the limit is %d", l, maxNoteLen)
		}
		if x.err != nil {
			break
		}
		c := make([]byte, l)
		x.full(c)
		checkpoints = append(checkpoints, c)
	}
	if x.err == nil {
		if _, err := x.r.ReadByte(); err == nil {
			x.fail(x.off, "trailing bytes")
		} else if err != io.EOF {
			x.err = fmt.Errorf("ledger: export: reading byte %d: %w", x.off, err)
		}
	}
	if x.err != nil {
		return nil, nil, x.err
	}
	return keys, checkpoints, nil
}

func (x *ExportReader) count(field string) int {
	at := x.off
	n := x.u32()
	if x.err == nil && n > maxListLen {
		x.fail(at, "%s has %d items, the limit is %d", field, n, maxListLen)
	}
	if x.err != nil {
		return 0
	}
	return int(n)
}

func (x *ExportReader) u32() uint32 {
	var b [4]byte
	x.full(b[:])
	return binary.BigEndian.Uint32(b[:])
}

// full fills b from the stream; the end of the stream is a truncation.
func (x *ExportReader) full(b []byte) {
	if x.err != nil {
		return
	}
	n, err := io.ReadFull(x.r, b)
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		x.fail(x.off+int64(n), "truncated: need %d bytes, have %d", len(b), n)
	case err != nil:
		x.err = fmt.Errorf("ledger: export: reading byte %d: %w", x.off+int64(n), err)
	}
	x.off += int64(n)
}

func (x *ExportReader) fail(at int64, format string, args ...any) {
	if x.err == nil {
		x.err = fmt.Errorf("ledger: export: %w: "+format+" (at byte %d)", append(append([]any{ErrMalformed}, args...), at)...)
	}
}
