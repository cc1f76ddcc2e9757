package protocol

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/nzcfed/nzc/protocol/nzcpb"
)

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	fw := NewFrameWriter(&buf, 1000)
	bodies := [][]byte{nil, []byte("x"), bytes.Repeat([]byte{7}, 1000), bytes.Repeat([]byte{9}, 300)}
	for i, b := range bodies {
		if err := fw.WriteFrame(MsgType(i+1), b); err != nil {
			t.Fatal(err)
		}
	}
	fr := NewFrameReader(&buf, 1000)
	for i, want := range bodies {
		if i == 0 {
			// The same frames as AppendFrame makes them.
			var want []byte
			for j, b := range bodies {
				want = AppendFrame(want, MsgType(j+1), b)
			}
			if !bytes.Equal(buf.Bytes(), want) {
				t.Fatal("writer and AppendFrame disagree")
			}
		}
		typ, got, err := fr.Next()
		if err != nil || typ != MsgType(i+1) || !bytes.Equal(got, want) {
			t.Fatalf("frame %d: %v %q %v", i, typ, got, err)
		}
	}
	if _, _, err := fr.Next(); err != io.EOF {
		t.Fatalf("after the last frame: err = %v, want io.EOF", err)
	}
}

func TestFrameReaderReusesBuffer(t *testing.T) {
	var buf bytes.Buffer
	fw := NewFrameWriter(&buf, 0)
	fw.WriteFrame(TypeAck, bytes.Repeat([]byte{1}, 100))
	fw.WriteFrame(TypeAck, bytes.Repeat([]byte{2}, 50))
	fr := NewFrameReader(&buf, 0)
	_, a, _ := fr.Next()
	pa := &a[0]
	_, b, err := fr.Next()
	if err != nil || &b[0] != pa {
		t.Fatalf("second body not read into the first buffer (err %v)", err)
	}
	frame := AppendFrame(nil, TypeAck, []byte("0123456789"))
	in := bytes.NewReader(frame)
	fr.r = in
	allocs := testing.AllocsPerRun(100, func() {
		in.Reset(frame)
		if _, _, err := fr.Next(); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("reading a small frame into a warm reader allocates %v times", allocs)
	}
}

func TestFrameErrors(t *testing.T) {
	hdr := func(typ, n uint64) []byte {
		return binary.AppendUvarint(binary.AppendUvarint(nil, typ), n)
	}
	tests := []struct {
		name string
		in   []byte
		max  int
		want error
	}{
		{"oversized", hdr(uint64(TypeHello), 101), 100, ErrFrameTooLarge},
		{"huge length", hdr(uint64(TypeHello), 1<<62), 0, ErrFrameTooLarge},
		{"unknown type", hdr(99, 1), 0, ErrUnknownType},
		{"type zero", hdr(0, 1), 0, ErrUnknownType},
		{"truncated type", []byte{0x80}, 0, ErrTruncated},
		{"truncated length", []byte{byte(TypeHello)}, 0, ErrTruncated},
		{"truncated body", append(hdr(uint64(TypeHello), 10), 1, 2, 3), 0, ErrTruncated},
		{"varint too long", bytes.Repeat([]byte{0xff}, 11), 0, ErrMalformedHeader},
		{"varint overflow", append(bytes.Repeat([]byte{0xff}, 9), 0x02), 0, ErrMalformedHeader},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := NewFrameReader(bytes.NewReader(tc.in), tc.max).Next()
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	var out bytes.Buffer
	err := NewFrameWriter(&out, 10).WriteFrame(TypeHello, make([]byte, 11))
	var tl *FrameTooLargeError
	if !errors.As(err, &tl) || tl.Length != 11 || tl.Max != 10 || out.Len() != 0 {
		t.Fatalf("writer oversized: err = %v, wrote %d bytes", err, out.Len())
	}
	if err := NewFrameWriter(&out, 10).WriteFrame(0, nil); !errors.Is(err, ErrUnknownType) || out.Len() != 0 {
		t.Fatalf("writer unknown type: err = %v", err)
	}
}

// A peer that announces the maximum length but sends a few bytes must not
// make the reader allocate the maximum.
func TestFrameReaderLyingLength(t *testing.T) {
	in := append(AppendFrame(nil, TypeQueryBatch, nil)[:1], binary.AppendUvarint(nil, DefaultMaxBody)...)
	in = append(in, "short"...)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, _, err := NewFrameReader(bytes.NewReader(in), DefaultMaxBody).Next()
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrTruncated) {
		t.Fatalf("err = %v", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Fatalf("allocated %d bytes for a 5-byte body announced as %d", got, DefaultMaxBody)
	}
}

// Large bodies take the writer's no-copy path.
func TestFrameWriterLargeBody(t *testing.T) {
	body := make([]byte, initialBuf+1)
	body[initialBuf] = 9
	var buf bytes.Buffer
	if err := NewFrameWriter(&buf, 0).WriteFrame(TypeVoteBatch, body); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), AppendFrame(nil, TypeVoteBatch, body)) {
		t.Fatal("large frame encoded differently")
	}
}

// A large frame arriving in pieces is read whole.
func TestFrameReaderLargeBody(t *testing.T) {
	body := make([]byte, 3*initialBuf+17)
	for i := range body {
		body[i] = byte(i * 7)
	}
	frame := AppendFrame(nil, TypeLedgerSubmit, body)
	r := io.MultiReader(bytes.NewReader(frame[:100]), bytes.NewReader(frame[100:5000]), bytes.NewReader(frame[5000:]))
	typ, got, err := NewFrameReader(r, len(body)).Next()
	if err != nil || typ != TypeLedgerSubmit || !bytes.Equal(got, body) {
		t.Fatalf("large body: %v %v", typ, err)
	}
	if cap(got) > len(body) {
		t.Fatalf("buffer of %d bytes for a body of %d", cap(got), len(body))
	}
}

func TestMsgTypeString(t *testing.T) {
	if MsgType(77).String() != "MsgType(77)" {
		t.Fatal(MsgType(77).String())
	}
	names := []string{"Error", "Hello", "Ack", "QueryBatch", "VoteBatch", "LabelRequest", "LabelResponse",
		"BudgetRequest", "BudgetResponse", "LedgerSubmit", "LedgerResult"}
	if int(maxType) != len(names) {
		t.Fatalf("%d types, %d names", maxType, len(names))
	}
	for typ := TypeError; typ <= maxType; typ++ {
		if typ.String() != names[typ-1] {
			t.Errorf("type %d is named %q, want %q", uint64(typ), typ.String(), names[typ-1])
		}
		m, err := New(typ)
		if err != nil || m == nil || !m.ProtoReflect().IsValid() {
			t.Fatalf("New(%v) = %v, %v; want an empty message", typ, m, err)
		}
		if back, err := TypeOf(m); err != nil || back != typ {
			t.Fatalf("TypeOf(New(%v)) = %v, %v", typ, back, err)
		}
	}
	for _, typ := range []MsgType{0, maxType + 1} {
		if _, err := New(typ); !errors.Is(err, ErrUnknownType) {
			t.Fatalf("New(%v): %v, want ErrUnknownType", typ, err)
		}
	}
	for _, m := range []proto.Message{nil, &nzcpb.Features{}, &nzcpb.Receipt{}} {
		if typ, err := TypeOf(m); err == nil {
			t.Errorf("TypeOf(%T) = %v, want an error: it is not a frame message", m, typ)
		}
	}
}

// Control messages have their own, small limits: a Hello announced (or
// written) at the size of a query batch is refused before its body is read,
// while a label request of the same size passes.
func TestPerTypeLimits(t *testing.T) {
	for _, tc := range []struct {
		t    MsgType
		size int
		ok   bool
	}{
		{TypeHello, MaxControlBody, true},
		{TypeHello, MaxControlBody + 1, false},
		{TypeError, MaxControlBody + 1, false},
		{TypeBudgetRequest, MaxControlBody + 1, false},
		{TypeAck, MaxControlBody + 1, false},
		{TypeLedgerSubmit, MaxLedgerBody, true},
		{TypeLedgerSubmit, MaxLedgerBody + 1, false},
		{TypeLedgerResult, MaxLedgerBody + 1, false},
		{TypeBudgetResponse, MaxBudgetBody + 1, false},
		{TypeLabelRequest, MaxLedgerBody + 1, true},
		{TypeQueryBatch, MaxBudgetBody + 1, true},
	} {
		frame := AppendFrame(nil, tc.t, make([]byte, tc.size))
		// The reader sees only the header when it refuses.
		r := &countingReader{r: bytes.NewReader(frame)}
		_, _, err := NewFrameReader(r, DefaultMaxBody).Next()
		if tc.ok != (err == nil) || (!tc.ok && !errors.Is(err, ErrFrameTooLarge)) {
			t.Errorf("read %s of %d bytes: %v", tc.t, tc.size, err)
		}
		if !tc.ok && r.n > MaxHeaderLen {
			t.Errorf("read %d bytes of a refused %s frame", r.n, tc.t)
		}
		var out bytes.Buffer
		err = NewFrameWriter(&out, DefaultMaxBody).WriteFrame(tc.t, make([]byte, tc.size))
		if tc.ok != (err == nil) || (!tc.ok && out.Len() != 0) {
			t.Errorf("write %s of %d bytes: %v (%d bytes written)", tc.t, tc.size, err, out.Len())
		}
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}
