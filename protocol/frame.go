package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// MsgType is a frame's type: which message its body holds.
type MsgType uint64

// Message types. The numbers are part of the wire format: never reuse one.
const (
	TypeError          MsgType = 1
	TypeHello          MsgType = 2
	TypeAck            MsgType = 3
	TypeQueryBatch     MsgType = 4
	TypeVoteBatch      MsgType = 5
	TypeLabelRequest   MsgType = 6
	TypeLabelResponse  MsgType = 7
	TypeBudgetRequest  MsgType = 8
	TypeBudgetResponse MsgType = 9
	TypeLedgerSubmit   MsgType = 10
	TypeLedgerResult   MsgType = 11
)

// maxType is the highest known type.
const maxType = TypeLedgerResult

// Per-type body limits: the small control messages cannot be inflated to
// the size of a query batch, so a party reading one never buffers more.
const (
	// MaxControlBody bounds Hello, Ack, Error and BudgetRequest bodies.
	MaxControlBody = 64 << 10
	// MaxLedgerBody bounds LedgerSubmit (one signed ledger command, at most
	// ledger.MaxCommandSize) and LedgerResult (a result with a receipt and
	// a checkpoint) bodies.
	MaxLedgerBody = 2 << 20
	// MaxBudgetBody bounds a BudgetResponse: every hospital's account.
	MaxBudgetBody = 4 << 20
)

// MaxBody is the largest body a frame of type t may have, whatever a
// connection's limit: MaxControlBody, MaxLedgerBody or MaxBudgetBody for
// the messages of bounded size, DefaultMaxBody for the batches.
func (t MsgType) MaxBody() int {
	switch t {
	case TypeError, TypeHello, TypeAck, TypeBudgetRequest:
		return MaxControlBody
	case TypeLedgerSubmit, TypeLedgerResult:
		return MaxLedgerBody
	case TypeBudgetResponse:
		return MaxBudgetBody
	}
	return DefaultMaxBody
}

// Known reports whether t is a message type of this protocol version.
func (t MsgType) Known() bool { return t >= TypeError && t <= maxType }

func (t MsgType) String() string {
	if t.Known() {
		return string(frameMessages[t].ProtoReflect().Descriptor().Name())
	}
	return fmt.Sprintf("MsgType(%d)", uint64(t))
}

// Size limits.
const (
	// DefaultMaxBody is the largest frame body accepted unless a connection
	// sets another limit.
	DefaultMaxBody = 16 << 20
	// MaxHeaderLen is the longest frame header: two 10-byte uvarints.
	MaxHeaderLen = 2 * binary.MaxVarintLen64
	// initialBuf is the first allocation for a body whose length is larger:
	// the buffer then grows as bytes actually arrive, so a peer that
	// announces a large length without sending it costs little memory.
	initialBuf = 64 << 10
)

// Frame errors.
var (
	// ErrFrameTooLarge is matched (errors.Is) by *FrameTooLargeError.
	ErrFrameTooLarge = errors.New("frame too large")
	// ErrTruncated is matched when the stream ends inside a frame.
	ErrTruncated = errors.New("frame truncated")
	// ErrUnknownType is matched (errors.Is) by *UnknownTypeError.
	ErrUnknownType = errors.New("unknown message type")
	// ErrMalformedHeader is matched when a header's varint is invalid.
	ErrMalformedHeader = errors.New("malformed frame header")
)

// FrameTooLargeError says a frame body is longer than the limit.
type FrameTooLargeError struct {
	Type   MsgType
	Length uint64
	Max    int
}

func (e *FrameTooLargeError) Error() string {
	return fmt.Sprintf("%s frame of %d bytes exceeds the limit of %d bytes: send smaller batches", e.Type, e.Length, e.Max)
}

// Is reports whether target is ErrFrameTooLarge.
func (e *FrameTooLargeError) Is(target error) bool { return target == ErrFrameTooLarge }

// UnknownTypeError says a frame has a type this protocol version does not
// know.
type UnknownTypeError struct{ Type MsgType }

func (e *UnknownTypeError) Error() string {
	return fmt.Sprintf("unknown message type %d: the peer speaks another protocol version; upgrade the older party", uint64(e.Type))
}

// Is reports whether target is ErrUnknownType.
func (e *UnknownTypeError) Is(target error) bool { return target == ErrUnknownType }

// AppendFrame appends a frame to dst. It does not check the body limit:
// writers do.
func AppendFrame(dst []byte, t MsgType, body []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(t))
	dst = binary.AppendUvarint(dst, uint64(len(body)))
	return append(dst, body...)
}

// FrameWriter writes frames, refusing bodies over its limit. It reuses one
// buffer so that each frame is a single Write. It is not safe for
// concurrent use.
type FrameWriter struct {
	w   io.Writer
	max int
	buf []byte
}

// NewFrameWriter returns a writer with the given body limit (≤ 0 means
// DefaultMaxBody).
func NewFrameWriter(w io.Writer, maxBody int) *FrameWriter {
	if maxBody <= 0 {
		maxBody = DefaultMaxBody
	}
	return &FrameWriter{w: w, max: maxBody}
}

// WriteFrame writes one frame. An unknown type or a body over the
// writer's limit or the type's (MsgType.MaxBody) is refused before
// anything is written.
func (fw *FrameWriter) WriteFrame(t MsgType, body []byte) error {
	if !t.Known() {
		return &UnknownTypeError{Type: t}
	}
	if m := min(fw.max, t.MaxBody()); len(body) > m {
		return &FrameTooLargeError{Type: t, Length: uint64(len(body)), Max: m}
	}
	var err error
	if len(body) <= initialBuf {
		// Small frames go out in one write from the reused buffer.
		fw.buf = AppendFrame(fw.buf[:0], t, body)
		_, err = fw.w.Write(fw.buf)
	} else {
		// Large bodies are written as they are, after the header: no copy.
		var hdr [MaxHeaderLen]byte
		h := binary.AppendUvarint(binary.AppendUvarint(hdr[:0], uint64(t)), uint64(len(body)))
		if _, err = fw.w.Write(h); err == nil {
			_, err = fw.w.Write(body)
		}
	}
	if err != nil {
		return fmt.Errorf("write %s frame: %w", t, err)
	}
	return nil
}

// WriteFrameParts writes one frame whose body is parts, one after the
// other, each written as it is: a body most of which several frames share
// (a batch's sealed features, sent to every hospital) is not copied into
// each.
func (fw *FrameWriter) WriteFrameParts(t MsgType, parts ...[]byte) error {
	if !t.Known() {
		return &UnknownTypeError{Type: t}
	}
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	if m := min(fw.max, t.MaxBody()); n > m {
		return &FrameTooLargeError{Type: t, Length: uint64(n), Max: m}
	}
	var hdr [MaxHeaderLen]byte
	_, err := fw.w.Write(binary.AppendUvarint(binary.AppendUvarint(hdr[:0], uint64(t)), uint64(n)))
	for _, p := range parts {
		if err != nil {
			break
		}
		if len(p) > 0 {
			_, err = fw.w.Write(p)
		}
	}
	if err != nil {
		return fmt.Errorf("write %s frame: %w", t, err)
	}
	return nil
}

// FrameReader reads frames. The body returned by Next is valid until the
// next call, which may reuse its buffer. After an error the reader is
// unusable. It is not safe for concurrent use.
type FrameReader struct {
	r   io.Reader
	max int
	buf []byte
	one [1]byte
}

// NewFrameReader returns a reader with the given body limit (≤ 0 means
// DefaultMaxBody). It never allocates more than the limit for a body.
func NewFrameReader(r io.Reader, maxBody int) *FrameReader {
	if maxBody <= 0 {
		maxBody = DefaultMaxBody
	}
	return &FrameReader{r: r, max: maxBody}
}

// Reset makes the reader read from r, keeping its buffer for reuse.
func (fr *FrameReader) Reset(r io.Reader) { fr.r = r }

// BufferCap is the capacity of the reader's body buffer, for callers that
// pool readers and want to drop ones that grew large.
func (fr *FrameReader) BufferCap() int { return cap(fr.buf) }

// Next reads one frame. At a clean end of stream, before any byte of a
// frame, it returns io.EOF. Errors match ErrTruncated, ErrFrameTooLarge,
// ErrUnknownType or ErrMalformedHeader, or come from the underlying reader.
// A body over the reader's limit or its type's (MsgType.MaxBody) is
// refused before any of it is read.
func (fr *FrameReader) Next() (MsgType, []byte, error) {
	typ, n, err := fr.Header()
	if err != nil {
		return typ, nil, err
	}
	body, err := fr.Body(n)
	if err != nil {
		return typ, nil, err
	}
	return typ, body, nil
}

// Header reads the next frame's header: its type and body length, checked
// against the limits, so that a server can decide whether to read the body
// at all. Body reads the body. Errors are those of Next.
func (fr *FrameReader) Header() (MsgType, int, error) {
	t, err := fr.uvarint(true)
	if err != nil {
		return 0, 0, err
	}
	typ := MsgType(t)
	if !typ.Known() {
		return typ, 0, &UnknownTypeError{Type: typ}
	}
	n, err := fr.uvarint(false)
	if err != nil {
		return typ, 0, err
	}
	if m := min(fr.max, typ.MaxBody()); n > uint64(m) {
		return typ, 0, &FrameTooLargeError{Type: typ, Length: n, Max: m}
	}
	return typ, int(n), nil
}

// Body reads the n bytes of the body of the frame whose header Header read.
func (fr *FrameReader) Body(n int) ([]byte, error) { return fr.readBody(n) }

func (fr *FrameReader) readBody(n int) ([]byte, error) {
	if n <= cap(fr.buf) {
		fr.buf = fr.buf[:n]
		if _, err := io.ReadFull(fr.r, fr.buf); err != nil {
			return nil, truncated(err, "frame body")
		}
		return fr.buf, nil
	}
	// Grow as the data arrives, never past n.
	buf := fr.buf[:0]
	if cap(buf) < min(n, initialBuf) {
		buf = make([]byte, 0, min(n, initialBuf))
	}
	for len(buf) < n {
		if len(buf) == cap(buf) {
			nb := make([]byte, len(buf), min(2*cap(buf), n))
			copy(nb, buf)
			buf = nb
		}
		m, err := io.ReadFull(fr.r, buf[len(buf):min(cap(buf), n)])
		buf = buf[:len(buf)+m]
		if err != nil {
			return nil, truncated(err, "frame body")
		}
	}
	fr.buf = buf
	return buf, nil
}

// uvarint reads an unsigned varint byte by byte so that the reader never
// consumes more than one frame from r.
func (fr *FrameReader) uvarint(first bool) (uint64, error) {
	var x uint64
	var s uint
	for i := range binary.MaxVarintLen64 {
		if _, err := io.ReadFull(fr.r, fr.one[:]); err != nil {
			if first && i == 0 && errors.Is(err, io.EOF) {
				return 0, io.EOF
			}
			return 0, truncated(err, "frame header")
		}
		b := fr.one[0]
		if b < 0x80 {
			if i == binary.MaxVarintLen64-1 && b > 1 {
				return 0, fmt.Errorf("%w: varint overflows 64 bits", ErrMalformedHeader)
			}
			return x | uint64(b)<<s, nil
		}
		x |= uint64(b&0x7f) << s
		s += 7
	}
	return 0, fmt.Errorf("%w: varint longer than %d bytes", ErrMalformedHeader, binary.MaxVarintLen64)
}

func truncated(err error, where string) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: stream ended inside the %s", ErrTruncated, where)
	}
	return fmt.Errorf("read %s: %w", where, err)
}
