//lint:file-ignore SA1019 the tests write the legacy sender fields (Candidate, Leader) that a peer may still send, and raft's array encoding, to check the guard reads them as raft does

package raftnode

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"math"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
	"github.com/nzcfed/nzc/party/auditor/internal/auditortest"
)

// rogueRPC dials addr's raft channel with cert, sends one RPC and returns
// raft's answer, or the error that ended the connection instead.
func rogueRPC(t *testing.T, ca *testCA, cert tls.Certificate, addr string, typ byte, req any, resp any) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	client := clientTLS(&tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: ca.pool, MinVersion: tls.VersionTLS13})
	c, err := dialChannel(ctx, addr, client, chanRaft)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	w := bufio.NewWriter(c)
	_ = w.WriteByte(typ)
	if err := codec.NewEncoder(w, &codec.MsgpackHandle{}).Encode(req); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	dec := codec.NewDecoder(bufio.NewReader(c), &codec.MsgpackHandle{})
	var rpcErr string
	if err := dec.Decode(&rpcErr); err != nil {
		return err
	}
	if rpcErr != "" {
		return errors.New(rpcErr)
	}
	return dec.Decode(resp)
}

// An auditor's certificate speaks on the raft channel for its own id only:
// the third auditor's certificate asking for votes, or sending entries, as
// another auditor with a higher term is cut off before raft sees the RPC,
// and the target's term does not move; the same request as itself is
// processed as raft always did.
func TestRaftRPCSpeaksOnlyForItsCertificate(t *testing.T) {
	c := newTLSCluster(t, 3)
	leader := c.nodes[0] // the bootstrap node leads until something happens
	rogue := c.ca.issue(t, "auditor", c.ids(2))
	hdr := func(i int) raft.RPCHeader {
		return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(c.ids(i)), Addr: []byte(c.addrs[i])}
	}
	for _, tc := range []struct {
		name   string
		target int
		typ    byte
		req    func(term uint64) any
	}{
		{"a vote for the second auditor", 0, rpcRequestVote, func(term uint64) any {
			return &raft.RequestVoteRequest{RPCHeader: hdr(1), Term: term, Candidate: []byte(c.addrs[1]),
				LastLogIndex: math.MaxUint32, LastLogTerm: term, LeadershipTransfer: true}
		}},
		{"entries from the first auditor", 1, rpcAppendEntries, func(term uint64) any {
			return &raft.AppendEntriesRequest{RPCHeader: hdr(0), Term: term, Leader: []byte(c.addrs[0])}
		}},
		{"a vote for itself at the second auditor's address (raft records votes by address)", 0, rpcRequestVote, func(term uint64) any {
			h := hdr(2)
			h.Addr = []byte(c.addrs[1])
			return &raft.RequestVoteRequest{RPCHeader: h, Term: term, LastLogIndex: math.MaxUint32, LastLogTerm: term, LeadershipTransfer: true}
		}},
		{"entries as itself from the first auditor's address", 1, rpcAppendEntries, func(term uint64) any {
			h := hdr(2)
			h.Addr = []byte(c.addrs[0])
			return &raft.AppendEntriesRequest{RPCHeader: h, Term: term}
		}},
		{"a legacy candidate field naming another address", 0, rpcRequestVote, func(term uint64) any {
			return &raft.RequestVoteRequest{RPCHeader: hdr(2), Term: term, Candidate: []byte(c.addrs[1]),
				LastLogIndex: math.MaxUint32, LastLogTerm: term, LeadershipTransfer: true}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := c.nodes[tc.target]
			before := target.mux.refused.Load()
			term := target.Status().Term + 1000
			var resp raft.RequestVoteResponse
			err := rogueRPC(t, c.ca, rogue, c.addrs[tc.target], tc.typ, tc.req(term), &resp)
			if err == nil {
				t.Fatalf("raft answered an RPC speaking for another server: %+v", resp)
			}
			auditortest.WaitFor(t, 5*time.Second, "the refusal to be counted", func() bool { return target.mux.refused.Load() == before+1 })
			if got := target.Status().Term; got >= term {
				t.Fatalf("the target's term moved to %d, the impersonating RPC's term", got)
			}
		})
	}

	// As itself, the third auditor's vote request reaches raft: the leader
	// adopts its term (and grants the transfer vote).
	term := leader.Status().Term + 1000
	var resp raft.RequestVoteResponse
	req := &raft.RequestVoteRequest{RPCHeader: hdr(2), Term: term, Candidate: []byte(c.addrs[2]),
		LastLogIndex: math.MaxUint32, LastLogTerm: term, LeadershipTransfer: true}
	if err := rogueRPC(t, c.ca, rogue, c.addrs[0], rpcRequestVote, req, &resp); err != nil {
		t.Fatalf("an RPC speaking for its own certificate: %v", err)
	}
	if resp.Term != term || leader.Status().Term < term {
		t.Fatalf("raft did not process the RPC: response term %d, node term %d, want %d", resp.Term, leader.Status().Term, term)
	}
}

// The dialling side: the address raft dials must present the certificate
// of the server the raft configuration places there.
func TestRaftDialChecksThePeersCertificate(t *testing.T) {
	ca := newTestCA(t)
	layer := func(id string) *streamLayer {
		s := ca.streamLayer(t, id)
		go func() { // accept and drop what is dialled
			for {
				c, err := s.Accept()
				if err != nil {
					return
				}
				_ = c.Close()
			}
		}()
		return s
	}
	a, b := layer("a"), layer("b")
	addr := raft.ServerAddress(a.Addr().String())
	for _, tc := range []struct {
		name    string
		servers []raft.Server
		ok      bool
	}{
		{"the configured server", []raft.Server{{ID: "a", Address: addr}}, true},
		{"another server's certificate at its address", []raft.Server{{ID: "c", Address: addr}, {ID: "a", Address: "127.0.0.1:1"}}, false},
		{"an address not in the configuration", []raft.Server{{ID: "a", Address: "127.0.0.1:1"}}, false},
		{"no configuration yet", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b.m.peers.set(func() []raft.Server { return tc.servers })
			before := b.m.refused.Load()
			c, err := b.Dial(addr, 5*time.Second)
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				_ = c.Close()
				return
			}
			if !errors.Is(err, ErrWrongPeer) {
				t.Fatalf("dial: %v, want ErrWrongPeer", err)
			}
			if len(tc.servers) > 0 && tc.servers[0].Address == addr && b.m.refused.Load() != before+1 {
				t.Fatal("the refused peer was not counted")
			}
		})
	}
}

// encodeRPCs returns raft's wire bytes for the given requests.
func encodeRPCs(t testing.TB, rpcs ...any) []byte {
	var buf bytes.Buffer
	enc := codec.NewEncoder(&buf, &codec.MsgpackHandle{})
	for _, r := range rpcs {
		var typ byte
		switch r := r.(type) {
		case *raft.AppendEntriesRequest:
			typ = rpcAppendEntries
		case *raft.RequestVoteRequest:
			typ = rpcRequestVote
		case *raft.InstallSnapshotRequest:
			typ = rpcInstallSnapshot
		case *raft.TimeoutNowRequest:
			typ = rpcTimeoutNow
		case *raft.RequestPreVoteRequest:
			typ = rpcRequestPreVote
		case []byte: // snapshot data
			buf.Write(r)
			continue
		}
		buf.WriteByte(typ)
		if err := enc.Encode(r); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// The guard passes a stream of RPCs on byte for byte, snapshot data
// included, and stops at the first RPC that speaks for someone else, or is
// not written as raft writes it, having passed on none of it.
func TestRPCGuardPassesExactBytes(t *testing.T) {
	h := func(id string) raft.RPCHeader {
		return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(id), Addr: []byte("127.0.0.1:7000")}
	}
	big := bytes.Repeat([]byte{0xc1}, 300<<10)
	good := encodeRPCs(t,
		&raft.AppendEntriesRequest{RPCHeader: h("a1"), Term: 3, Leader: []byte("127.0.0.1:7000"),
			Entries: []*raft.Log{{Index: 1, Term: 3, Type: raft.LogCommand, Data: big, AppendedAt: time.Unix(1, 2)}}},
		&raft.InstallSnapshotRequest{RPCHeader: h("a1"), Term: 3, Size: 5}, []byte("snap!"),
		&raft.RequestVoteRequest{RPCHeader: h("a1"), Term: 4, Candidate: []byte("127.0.0.1:7000")},
		&raft.RequestPreVoteRequest{RPCHeader: h("a1"), Term: 4},
		&raft.TimeoutNowRequest{RPCHeader: h("a1")},
	)
	other := encodeRPCs(t, &raft.AppendEntriesRequest{RPCHeader: h("a2"), Term: 9, Entries: []*raft.Log{{Data: big}}})
	var array bytes.Buffer // the same request, as a msgpack array
	array.WriteByte(rpcRequestVote)
	if err := codec.NewEncoder(&array, &codec.MsgpackHandle{WriteExt: true, BasicHandle: codec.BasicHandle{EncodeOptions: codec.EncodeOptions{StructToArray: true}}}).
		Encode(&raft.RequestVoteRequest{RPCHeader: h("a1"), Term: 4}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		tail    []byte
		wantErr error
	}{
		{"own RPCs", nil, nil},
		{"then one for another id", other, ErrRPCImpersonation},
		{"then an array", array.Bytes(), errRPCNotMap},
		{"then a truncated one", other[:len(other)-1], io.ErrUnexpectedEOF},
		// An id announced at 2 GiB is refused before anything is allocated;
		// one announced at 512 MiB and cut short allocates as bytes arrive.
		{"then one announcing a huge field", []byte{rpcAppendEntries, 0x81, 0xa2, 'I', 'D', 0xc6, 0x7f, 0xff, 0xff, 0xff}, errRPCTooLarge},
		{"then one announcing a large field it does not send", []byte{rpcAppendEntries, 0x81, 0xa2, 'I', 'D', 0xc6, 0x20, 0, 0, 0, 1, 2, 3}, io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newRPCGuard(bytes.NewReader(append(append([]byte{}, good...), tc.tail...)), "a1")
			var refused error
			g.refuse = func(err error) { refused = err }
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			got, err := io.ReadAll(g)
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
				t.Fatalf("reading %d bytes allocated %d MiB", len(good)+len(tc.tail), grew>>20)
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("read: %v, want %v", err, tc.wantErr)
			}
			if !bytes.Equal(got, good) {
				t.Fatalf("passed on %d bytes, want exactly the %d bytes of the accepted RPCs", len(got), len(good))
			}
			if (refused != nil) != errors.Is(tc.wantErr, ErrRPCImpersonation) {
				t.Fatalf("refusal reported: %v", refused)
			}
		})
	}
}

// Whatever arrives, the guard passes on a prefix of it, and nothing of an
// RPC it refuses.
func FuzzRPCGuard(f *testing.F) {
	h := raft.RPCHeader{ID: []byte("a1"), Addr: []byte("x")}
	f.Add(encodeRPCs(f, &raft.RequestVoteRequest{RPCHeader: h, Term: 1}))
	f.Add(encodeRPCs(f, &raft.InstallSnapshotRequest{RPCHeader: h, Size: 3}, []byte("abc")))
	f.Add(encodeRPCs(f, &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("a2")}}))
	f.Add(encodeRPCs(f, &raft.RequestVoteRequest{RPCHeader: h, Term: 1}, &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("a2"), Addr: []byte("y")}}))
	f.Fuzz(func(t *testing.T, in []byte) {
		g := newRPCGuard(bytes.NewReader(in), "a1")
		got, err := io.ReadAll(g)
		if !bytes.HasPrefix(in, got) {
			t.Fatal("passed on bytes that did not arrive")
		}
		if errors.Is(err, ErrRPCImpersonation) && len(got) == len(in) {
			t.Fatal("passed on all of a refused RPC")
		}
		// What the guard passed on, read as raft reads it: every RPC raft
		// decodes speaks for a1.
		for rest := got; len(rest) > 0; {
			var req interface{ GetRPCHeader() raft.RPCHeader }
			var size int64
			switch rest[0] {
			case rpcAppendEntries:
				req = &raft.AppendEntriesRequest{}
			case rpcRequestVote:
				req = &raft.RequestVoteRequest{}
			case rpcInstallSnapshot:
				req = &raft.InstallSnapshotRequest{}
			case rpcTimeoutNow:
				req = &raft.TimeoutNowRequest{}
			case rpcRequestPreVote:
				req = &raft.RequestPreVoteRequest{}
			default:
				return // raft refuses a type it does not know
			}
			dec := codec.NewDecoderBytes(rest[1:], &codec.MsgpackHandle{})
			if dec.Decode(req) != nil {
				return // raft cannot decode it either, and drops the connection
			}
			if h := req.GetRPCHeader(); string(h.ID) != "a1" {
				t.Fatalf("passed on an RPC of type %d speaking for %q", rest[0], h.ID)
			}
			if is, ok := req.(*raft.InstallSnapshotRequest); ok {
				size = is.Size
			}
			rest = rest[1+dec.NumBytesRead():]
			rest = rest[min(int64(len(rest)), max(size, 0)):]
		}
	})
}

var _ net.Conn = (*guardedConn)(nil)

// BenchmarkRPCGuard measures the guard's work on a follower's receive path
// (reading, checking and passing on an AppendEntries of 64 entries of
// 512 bytes) against raft's own decoding of the same RPC, which the guard
// comes on top of.
func BenchmarkRPCGuard(b *testing.B) {
	h := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("a1"), Addr: []byte("127.0.0.1:7000")}
	req := &raft.AppendEntriesRequest{RPCHeader: h, Term: 3, Leader: h.Addr, PrevLogEntry: 10, PrevLogTerm: 3, LeaderCommitIndex: 9}
	for i := range 64 {
		req.Entries = append(req.Entries, &raft.Log{Index: uint64(11 + i), Term: 3, Type: raft.LogCommand,
			Data: bytes.Repeat([]byte{byte(i)}, 512), AppendedAt: time.Unix(1, 0)})
	}
	one := encodeRPCs(b, req)
	const perOp = 16
	stream := bytes.Repeat(one, perOp)
	b.Run("guard", func(b *testing.B) {
		b.SetBytes(int64(len(stream)))
		for b.Loop() {
			g := newRPCGuard(bytes.NewReader(stream), "a1")
			if n, err := io.Copy(io.Discard, g); err != nil || n != int64(len(stream)) {
				b.Fatal(n, err)
			}
		}
	})
	b.Run("raft-decode", func(b *testing.B) {
		b.SetBytes(int64(len(stream)))
		for b.Loop() {
			r := bufio.NewReader(bytes.NewReader(stream))
			dec := codec.NewDecoder(r, &codec.MsgpackHandle{})
			for range perOp {
				if _, err := r.ReadByte(); err != nil {
					b.Fatal(err)
				}
				var q raft.AppendEntriesRequest
				if err := dec.Decode(&q); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
