package raftnode

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"testing"
	"time"
)

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	if err := writeFrame(w, opJoin, 1234, encodePair("hospital-a", "10.0.0.1:7000")); err != nil {
		t.Fatal(err)
	}
	op, n, body, err := readFrame(bufio.NewReader(&buf))
	if err != nil || op != opJoin || n != 1234 {
		t.Fatalf("got %d %d %v", op, n, err)
	}
	id, addr, err := decodePair(body)
	if err != nil || id != "hospital-a" || addr != "10.0.0.1:7000" {
		t.Fatalf("pair %q %q %v", id, addr, err)
	}
}

func TestResultRoundTrip(t *testing.T) {
	tests := []struct {
		err   error
		check func(error) bool
	}{
		{nil, func(err error) bool { return err == nil }},
		{&RejectedError{Index: 9, Err: errors.New("over budget")}, func(err error) bool {
			var r *RejectedError
			return errors.As(err, &r) && r.Index == 9 && bytes.Contains([]byte(err.Error()), []byte("over budget"))
		}},
		{&NotLeaderError{LeaderID: "b", LeaderAddr: "h:1"}, func(err error) bool {
			var nl *NotLeaderError
			return errors.As(err, &nl) && nl.LeaderID == "b" && nl.LeaderAddr == "h:1"
		}},
		{ErrNoLeader, func(err error) bool { return errors.Is(err, ErrNoLeader) }},
		{ErrTimeout, func(err error) bool { return errors.Is(err, ErrTimeout) }},
		{ErrShutdown, func(err error) bool { return errors.Is(err, ErrShutdown) }},
		{ErrOutcomeUnknown, func(err error) bool { return errors.Is(err, ErrOutcomeUnknown) }},
		{errors.New("disk full"), func(err error) bool {
			var re *RemoteError
			return errors.As(err, &re) && re.Msg == "disk full"
		}},
	}
	for _, tt := range tests {
		code, idx, body := encodeResult([]byte("ok"), 5, tt.err)
		_, _, err := decodeResult("peer:1", code, idx, body)
		if !tt.check(err) {
			t.Errorf("%v came back as %v", tt.err, err)
		}
	}
}

func FuzzReadFrame(f *testing.F) {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	_ = writeFrame(w, opSubmit, 5, []byte("cmd"))
	f.Add(buf.Bytes())
	f.Add([]byte{1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		op, n, body, err := readFrame(bufio.NewReader(bytes.NewReader(b)))
		if err != nil {
			return
		}
		var out bytes.Buffer
		w := bufio.NewWriter(&out)
		if err := writeFrame(w, op, n, body); err != nil {
			t.Fatal(err)
		}
		op2, n2, body2, err := readFrame(bufio.NewReader(&out))
		if err != nil || op2 != op || n2 != n || !bytes.Equal(body, body2) {
			t.Fatalf("frame does not round-trip: %v", err)
		}
	})
}

func FuzzDecodePair(f *testing.F) {
	f.Add(encodePair("a", "b:1"))
	f.Add([]byte{0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, c, err := decodePair(b)
		if err != nil {
			return
		}
		if a2, c2, err := decodePair(encodePair(a, c)); err != nil || a2 != a || c2 != c {
			t.Fatalf("pair does not round-trip")
		}
	})
}

// A forwarded request announced at the largest size and never sent costs
// little memory: the body's buffer grows as bytes arrive (before, the
// announced size was allocated before anything was read).
func TestForwardFrameLyingLength(t *testing.T) {
	in := []byte{opSubmit}
	in = binary.AppendUvarint(in, 0)
	in = binary.AppendUvarint(in, maxFrame)
	in = append(in, "short"...)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, _, _, err := readFrame(bufio.NewReader(bytes.NewReader(in)))
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v, want a truncated frame", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Fatalf("allocated %d bytes for a 5-byte body announced as %d", got, maxFrame)
	}
}

// A peer that starts a forwarded request and stalls is cut off after
// ForwardTimeout (before, the connection's goroutine waited for ever).
func TestForwardStalledRequestTimesOut(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	n := &Node{lifetime: ctx, cfg: Config{Tuning: Tuning{ForwardTimeout: 100 * time.Millisecond}}}
	stalled, server := net.Pipe()
	defer stalled.Close()
	done := make(chan struct{})
	go func() {
		n.serveForwardConn(server)
		close(done)
	}()
	hdr := binary.AppendUvarint(binary.AppendUvarint([]byte{opSubmit}, 0), 1000)
	if _, err := stalled.Write(append(hdr, "part"...)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a stalled forwarded request held its connection")
	}
}
