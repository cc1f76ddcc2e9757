package relay

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"
)

func TestBadLinks(t *testing.T) {
	for _, l := range []Link{{Delay: -1}, {Jitter: -time.Millisecond}, {Loss: -0.1}, {Loss: 1}, {Loss: 2}} {
		if _, err := UDP("127.0.0.1:9", l, 1); !errors.Is(err, ErrBadLink) {
			t.Errorf("UDP with %+v: got %v, want ErrBadLink", l, err)
		}
		if _, err := TCP("127.0.0.1:9", l, 1); !errors.Is(err, ErrBadLink) {
			t.Errorf("TCP with %+v: got %v, want ErrBadLink", l, err)
		}
	}
	r, err := TCP("127.0.0.1:9", Link{}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.SetLink(Link{Loss: 1.5}); !errors.Is(err, ErrBadLink) {
		t.Errorf("SetLink: got %v, want ErrBadLink", err)
	}
}

func TestLinkString(t *testing.T) {
	for _, tc := range []struct {
		l    Link
		want string
	}{
		{Link{}, "0s"},
		{Link{Delay: 40 * time.Millisecond, Loss: 0.01}, "40ms 1% loss"},
		{Link{Delay: 150 * time.Millisecond, Jitter: 10 * time.Millisecond}, "150ms±10ms"},
	} {
		if got := tc.l.String(); got != tc.want {
			t.Errorf("%+v: got %q, want %q", tc.l, got, tc.want)
		}
	}
}

// udpEcho serves an echo on loopback until the test ends.
func udpEcho(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, maxDatagram)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(buf[:n], from)
		}
	}()
	return pc.LocalAddr().String()
}

func TestUDPForwardsWithTheDelayEachWay(t *testing.T) {
	const delay = 20 * time.Millisecond
	r, c := through(t, UDP, "udp", udpEcho(t), Link{Delay: delay, Jitter: 5 * time.Millisecond}, 7)
	buf := make([]byte, 100)
	for i := range 5 {
		msg := []byte{byte(i), 'x', 'y'}
		start := time.Now()
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := c.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		if rtt := time.Since(start); rtt < 2*(delay-5*time.Millisecond) {
			t.Errorf("round trip %v, below twice the least one-way delay", rtt)
		}
		if !bytes.Equal(buf[:n], msg) {
			t.Errorf("echo %q, want %q", buf[:n], msg)
		}
	}
	if s := r.Stats(); s.Forwarded != 10 || s.Dropped != 0 {
		t.Errorf("stats %+v, want 10 forwarded (5 each way), none dropped", s)
	}
}

// TestUDPLossIsSeeded sends datagrams one way to a sink: with a fixed seed
// the relay drops the same number every run, and that number is near the
// link's loss. Each run is deterministic; the bound would fail by chance
// for a fresh seed with probability below 1e-9 (binomial n=2000, p=0.1:
// mean 200, sd 13.4, bound ±100).
func TestUDPLossIsSeeded(t *testing.T) {
	sink, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	go func() {
		buf := make([]byte, 64)
		for {
			if _, _, err := sink.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	const n = 2000
	drops := func(seed uint64) uint64 {
		r, c := through(t, UDP, "udp", sink.LocalAddr().String(), Link{Loss: 0.1}, seed)
		for i := range n {
			if _, err := c.Write([]byte{byte(i)}); err != nil {
				t.Fatal(err)
			}
			if i%50 == 49 {
				// Keep the relay's socket buffer from overflowing: wait
				// until it has taken every datagram sent so far.
				waitUntil(t, func() bool { s := r.Stats(); return s.Forwarded+s.Dropped == uint64(i+1) })
			}
		}
		return r.Stats().Dropped
	}
	a, b := drops(42), drops(42)
	if a != b {
		t.Errorf("the same seed dropped %d and %d datagrams", a, b)
	}
	if a < 100 || a > 300 {
		t.Errorf("dropped %d of %d at 10%% loss", a, n)
	}
}

func tcpEcho(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// TestTCPKeepsOrderUnderJitter: with jitter larger than the gap between
// writes, every byte still arrives, once and in order, both ways.
func TestTCPKeepsOrderUnderJitter(t *testing.T) {
	_, c := through(t, TCP, "tcp", tcpEcho(t), Link{Delay: 3 * time.Millisecond, Jitter: 3 * time.Millisecond}, 3)
	want := make([]byte, 256<<10)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range want {
		want[i] = byte(rng.Uint32())
	}
	go func() {
		for off := 0; off < len(want); off += 1000 {
			if _, err := c.Write(want[off:min(off+1000, len(want))]); err != nil {
				return
			}
		}
		_ = c.(*net.TCPConn).CloseWrite()
	}()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("echoed %d bytes, not the %d written in order", len(got), len(want))
	}
}

func TestTCPDelaysEachWayAndFollowsSetLink(t *testing.T) {
	r, c := through(t, TCP, "tcp", tcpEcho(t), Link{}, 5)
	rtt := func() time.Duration {
		start := time.Now()
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(c, make([]byte, 4)); err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	}
	rtt()
	const delay = 30 * time.Millisecond
	if err := r.SetLink(Link{Delay: delay}); err != nil {
		t.Fatal(err)
	}
	if d := rtt(); d < 2*delay {
		t.Errorf("round trip %v after SetLink, below twice the one-way delay %v", d, delay)
	}
}

func TestCloseEndsConnections(t *testing.T) {
	r, c := through(t, TCP, "tcp", tcpEcho(t), Link{Delay: time.Millisecond}, 9)
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the connection outlived the relay")
	}
	if err := r.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}

// waitUntil polls cond until it holds, failing the test after 10 s.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(100 * time.Microsecond)
	defer tick.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 10 s")
		}
		<-tick.C
	}
}

// through starts a relay to target with start and dials it over network;
// both close when the test ends.
func through(t *testing.T, start func(string, Link, uint64) (*Relay, error), network, target string, l Link, seed uint64) (*Relay, net.Conn) {
	t.Helper()
	r, err := start(target, l, seed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	c, err := net.Dial(network, r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return r, c
}
