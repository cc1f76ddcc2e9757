package protocol

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// directoryOf is n hospitals' signed recipients, each carrying reg(i).
func directoryOf(n int, reg func(i int) []byte) []*nzcpb.SignedRecipient {
	rs := make([]*nzcpb.SignedRecipient, n)
	for i := range rs {
		rs[i] = &nzcpb.SignedRecipient{HospitalId: fmt.Sprintf("hospital-%d", i+1),
			AgeRecipient: "age1qyqszqgpqyqszqgpqyqszqgpqyqszqgpqyqszqgpqyqszqgpqyqs3290gq",
			Signature:    bytes.Repeat([]byte{byte(i)}, 64), Registration: reg(i)}
	}
	return rs
}

func TestShareRegistrations(t *testing.T) {
	genesis, other := []byte("genesis naming every founding hospital"), []byte("genesis of another federation")
	tests := []struct {
		name       string
		regs       [][]byte // each recipient's
		wantInline []bool   // whether each keeps its registration
		wantShared [][]byte
	}{
		{"none", [][]byte{nil, nil}, []bool{true, true}, nil},
		{"each its own", [][]byte{[]byte("a"), []byte("b")}, []bool{true, true}, nil},
		{"one genesis", [][]byte{genesis, genesis, genesis}, []bool{false, false, false}, [][]byte{genesis}},
		{"genesis, one admitted later, one without", [][]byte{genesis, []byte("register-party"), genesis, nil}, []bool{false, true, false, true}, [][]byte{genesis}},
		{"two shared", [][]byte{other, genesis, other, genesis}, []bool{false, false, false, false}, [][]byte{other, genesis}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs := directoryOf(len(tc.regs), func(i int) []byte { return tc.regs[i] })
			before := make([]*nzcpb.SignedRecipient, len(rs))
			for i, r := range rs {
				before[i] = proto.Clone(r).(*nzcpb.SignedRecipient)
			}
			out, shared := ShareRegistrations(rs)
			for i, r := range rs {
				if !proto.Equal(r, before[i]) {
					t.Fatalf("recipient %d changed: %v, was %v", i, r, before[i])
				}
			}
			if len(out) != len(rs) {
				t.Fatalf("%d recipients out of %d", len(out), len(rs))
			}
			for i, r := range out {
				want := proto.Clone(rs[i]).(*nzcpb.SignedRecipient)
				if !tc.wantInline[i] {
					want.Registration = nil
				}
				if !proto.Equal(r, want) {
					t.Errorf("recipient %d: %v, want %v", i, r, want)
				}
			}
			if len(shared) != len(tc.wantShared) {
				t.Fatalf("shared %q, want %q", shared, tc.wantShared)
			}
			for i := range shared {
				if !bytes.Equal(shared[i], tc.wantShared[i]) {
					t.Fatalf("shared %q, want %q", shared, tc.wantShared)
				}
			}
			if err := Validate(&nzcpb.Ack{ProtocolVersion: ProtocolVersion, Hospitals: out, Registrations: shared}); err != nil {
				t.Fatalf("the shared directory does not validate: %v", err)
			}
		})
	}
}

// A student's Ack names every connected hospital. With each founding
// hospital carrying the genesis that registers it, the directory grew with
// the square of the hospitals and a federation of 100 did not fit a
// control frame; with the genesis sent once, a federation as large as a
// genesis can register does.
func TestDirectoryOfManyFoundingHospitalsFitsAnAck(t *testing.T) {
	const n = 250 // a genesis of MaxRegistration bytes names about 270 parties
	genesis := bytes.Repeat([]byte{0x47}, 60*n)
	rs := directoryOf(n, func(int) []byte { return genesis })
	size := func(ack *nzcpb.Ack) int {
		b, err := Marshal(ack)
		if err != nil {
			t.Fatal(err)
		}
		return len(b)
	}
	whole := size(&nzcpb.Ack{ProtocolVersion: ProtocolVersion, Hospitals: rs})
	out, shared := ShareRegistrations(rs)
	ack := &nzcpb.Ack{ProtocolVersion: ProtocolVersion, Hospitals: out, Registrations: shared}
	if got := size(ack); got > TypeAck.MaxBody() {
		t.Fatalf("the Ack of %d founding hospitals is %d bytes, more than a control frame's %d (%d with the genesis in each)", n, got, TypeAck.MaxBody(), whole)
	}
	if whole <= TypeAck.MaxBody() {
		t.Fatalf("with the genesis in each recipient the Ack is %d bytes: the test does not reach the limit it guards", whole)
	}
	if err := Validate(ack); err != nil {
		t.Fatal(err)
	}
}

// The parts a batch is sent to each hospital in are, put together, the
// batch's one encoding, with the features not copied.
func TestQueryBatchParts(t *testing.T) {
	big := fixtureMsg("query-batch").(*nzcpb.QueryBatch)
	big.SealedFeatures = bytes.Repeat([]byte{0xa5}, 1<<20)
	big.HospitalIds = []string{"hospital-1", "hospital-2", "hospital-3"}
	for _, tc := range []struct {
		name string
		q    *nzcpb.QueryBatch
	}{
		{"fixture", fixtureMsg("query-batch").(*nzcpb.QueryBatch)},
		{"fixture with receipts", fixtureMsg("query-batch-receipts").(*nzcpb.QueryBatch)},
		{"a megabyte of features", big},
		{"no features", &nzcpb.QueryBatch{BatchId: []byte("0123456789abcdef"), NumQueries: 1, StudentId: "student-1"}},
		{"empty", &nzcpb.QueryBatch{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			head, features, tail, err := QueryBatchParts(tc.q)
			if err != nil {
				t.Fatal(err)
			}
			want, err := Marshal(tc.q)
			if err != nil {
				t.Fatal(err)
			}
			if got := slices.Concat(head, features, tail); !bytes.Equal(got, want) {
				t.Fatalf("parts put together are %d bytes unlike the %d of Marshal", len(got), len(want))
			}
			if len(features) > 0 && &features[0] != &tc.q.SealedFeatures[0] {
				t.Fatal("the features part is a copy")
			}
			var w bytes.Buffer
			if err := NewFrameWriter(&w, 0).WriteFrameParts(TypeQueryBatch, head, features, tail); err != nil {
				t.Fatal(err)
			}
			var one bytes.Buffer
			if err := NewFrameWriter(&one, 0).WriteFrame(TypeQueryBatch, want); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(w.Bytes(), one.Bytes()) {
				t.Fatal("the frame written in parts is not the frame of the whole body")
			}
		})
	}
	// Over the limit, nothing is written.
	var w bytes.Buffer
	err := NewFrameWriter(&w, 10).WriteFrameParts(TypeQueryBatch, make([]byte, 6), make([]byte, 5))
	if !errors.Is(err, ErrFrameTooLarge) || w.Len() != 0 {
		t.Fatalf("11 bytes in parts over a 10-byte limit: %v, %d bytes written", err, w.Len())
	}
}
