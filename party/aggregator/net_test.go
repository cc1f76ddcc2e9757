package aggregator

import (
	"errors"
	"strings"
	"testing"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/crypto/cryptotest"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
	"github.com/nzcfed/nzc/protocol/quicnet"
)

// netConfig is the QUIC configuration of a party of the fixture.
func (f *fixture) netConfig(t *testing.T, role crypto.Role, id string) quicnet.Config {
	t.Helper()
	p, ok := f.m.Party(role, id)
	if !ok {
		t.Fatalf("no %s %s", role, id)
	}
	ca := cryptotest.CACert(t, f.m)
	cred := cryptotest.Credential(t, f.m, p)
	return quicnet.Config{CA: ca, Credential: cred}
}

// Parties that lie in their requests get a typed refusal that names the
// problem, and the aggregator's registrations, the ledger and the outbox
// stay as they were.
func TestHostileRequests(t *testing.T) {
	f := newFixture(t, 2, 50)
	// Every case dials anew; the connections close when the test ends.
	a, addr := f.served(t, func(c *quicnet.Config) { c.MaxConnsPerPeer = 64 })

	dial := func(role crypto.Role, id string) *quicnet.Conn {
		t.Helper()
		c, err := quicnet.Dial(t.Context(), addr, f.netConfig(t, role, id), crypto.RoleAggregator)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	hospital := func(teachers, classes uint32) *nzcpb.HospitalInfo {
		return &nzcpb.HospitalInfo{NumTeachers: teachers, NumClasses: classes}
	}
	hRecipient := f.hospRecip[0].String()
	req, _ := f.request(t, 1, 4)

	for _, tc := range []struct {
		name    string
		role    crypto.Role
		id      string
		msg     func() any
		is      error
		mention string
	}{
		{"a hospital registering under another hospital's id", crypto.RoleHospital, "hospital-1", func() any {
			return &nzcpb.Hello{ProtocolVersion: protocol.ProtocolVersion, Role: nzcpb.Role_ROLE_HOSPITAL, PartyId: "hospital-2", AgeRecipient: hRecipient, Hospital: hospital(20, classes)}
		}, protocol.ErrUnauthorized, "hospital-2"},
		{"a hospital registering as a student", crypto.RoleHospital, "hospital-1", func() any {
			return &nzcpb.Hello{ProtocolVersion: protocol.ProtocolVersion, Role: nzcpb.Role_ROLE_STUDENT, PartyId: "hospital-1", AgeRecipient: hRecipient}
		}, protocol.ErrUnauthorized, "its own identity"},
		{"a hospital with a malformed age recipient", crypto.RoleHospital, "hospital-1", func() any {
			return &nzcpb.Hello{ProtocolVersion: protocol.ProtocolVersion, Role: nzcpb.Role_ROLE_HOSPITAL, PartyId: "hospital-1", AgeRecipient: "age1notakey", Hospital: hospital(20, classes)}
		}, protocol.ErrBadRequest, "age recipient"},
		{"a hospital announcing one class", crypto.RoleHospital, "hospital-1", func() any {
			return &nzcpb.Hello{ProtocolVersion: protocol.ProtocolVersion, Role: nzcpb.Role_ROLE_HOSPITAL, PartyId: "hospital-1", AgeRecipient: hRecipient, Hospital: hospital(20, 1)}
		}, protocol.ErrBadRequest, "classes"},
		{"a hospital asking for labels", crypto.RoleHospital, "hospital-1", func() any { return req }, protocol.ErrUnauthorized, ""},
		{"a student asking before its Hello", crypto.RoleStudent, "student-1", func() any { return req }, protocol.ErrBadRequest, "register first"},
		{"a student asking for zero queries", crypto.RoleStudent, "student-1", func() any {
			return &nzcpb.LabelRequest{BatchId: make([]byte, 16), NumQueries: 0, FeatureDim: 3, SealedFeatures: req.GetSealedFeatures()}
		}, protocol.ErrBadRequest, ""},
		{"a student relaying a ledger command", crypto.RoleStudent, "student-1", func() any {
			return &nzcpb.LedgerSubmit{Command: []byte{1, 2, 3}}
		}, protocol.ErrUnauthorized, ""},
		{"a hospital relaying a malformed ledger command", crypto.RoleHospital, "hospital-1", func() any {
			return &nzcpb.LedgerSubmit{Command: []byte{1, 2, 3}}
		}, protocol.ErrBadRequest, "ledger command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			size := f.led.m.State().TreeSize()
			c := dial(tc.role, tc.id)
			var err error
			switch m := tc.msg().(type) {
			case *nzcpb.Hello:
				err = c.Invoke(t.Context(), m, &nzcpb.Ack{})
			case *nzcpb.LabelRequest:
				err = c.Invoke(t.Context(), m, &nzcpb.LabelResponse{})
			case *nzcpb.LedgerSubmit:
				err = c.Invoke(t.Context(), m, &nzcpb.LedgerResult{})
			}
			if !errors.Is(err, tc.is) {
				t.Fatalf("got %v, want %v", err, tc.is)
			}
			var pe *protocol.Error
			if !errors.As(err, &pe) || (tc.mention != "" && !strings.Contains(pe.Message, tc.mention)) {
				t.Fatalf("refusal %v does not say %q", err, tc.mention)
			}
			a.mu.Lock()
			hospitals, students := len(a.hospitals), len(a.students)
			a.mu.Unlock()
			if hospitals != 0 || students != 0 {
				t.Fatalf("%d hospitals and %d students registered after a refused request", hospitals, students)
			}
			if len(f.led.submitted) != 0 || f.led.m.State().TreeSize() != size {
				t.Fatal("a refused request reached the ledger")
			}
			if p, err := a.outbox.Pending(); err != nil || len(p) != 0 {
				t.Fatalf("outbox after a refused request: %d pending, %v", len(p), err)
			}
		})
	}
}
