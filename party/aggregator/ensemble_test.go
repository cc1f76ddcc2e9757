package aggregator

import (
	"errors"
	"slices"
	"testing"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/crypto/cryptotest"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/auditor/intake"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
	"github.com/nzcfed/nzc/protocol/quicnet"
)

// registerEnsembles registers, signed by the federation's administrator,
// the first n fixture hospitals' ensembles in the ledger at their fakes'
// sizes.
func (f *fixture) registerEnsembles(t *testing.T, n int) {
	t.Helper()
	ca := cryptotest.CA(t, f.m)
	for _, h := range f.hospitals[:n] {
		cmd, err := ledger.Sign(&ledger.RegisterEnsemble{Hospital: h.id, Version: 1, Teachers: uint64(h.teachers), Classes: classes, Timestamp: 1}, intake.AdminID, ca.Key())
		if err != nil {
			t.Fatal(err)
		}
		if res, err := f.led.Submit(t.Context(), cmd); err != nil || res.GetCode() != nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_COMMITTED {
			t.Fatalf("registering %s: %v %v", h.id, res, err)
		}
	}
}

// A hospital's size is the administrator's registration in the ledger,
// not the aggregator's configuration: with the configuration saying
// something else (7 teachers for hospital-1, as a hospital's own claim
// written there would), a Hello announcing the configured size is refused
// and one announcing the registered size is accepted. Once the ledger holds
// registrations, a hospital without one is refused even at a size the
// configuration gives it. (Before, the configuration decided.)
func TestHelloIsHeldToTheLedgersRegistration(t *testing.T) {
	f := newFixture(t, 2, 50)
	f.registerEnsembles(t, 1)
	f.cfg.Ensembles["hospital-1"] = 7
	a, addr := f.served(t)
	hello := func(id string, recipient *crypto.Recipient, teachers uint32) error {
		c, err := quicnet.Dial(t.Context(), addr, f.netConfig(t, crypto.RoleHospital, id), crypto.RoleAggregator)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.Invoke(t.Context(), &nzcpb.Hello{ProtocolVersion: protocol.ProtocolVersion, Role: nzcpb.Role_ROLE_HOSPITAL, PartyId: id,
			AgeRecipient: recipient.String(), Hospital: &nzcpb.HospitalInfo{NumTeachers: teachers, NumClasses: classes}}, &nzcpb.Ack{})
	}
	if err := hello("hospital-1", f.hospRecip[0], 7); !errors.Is(err, protocol.ErrBadRequest) {
		t.Fatalf("a Hello of the configured, unregistered size: %v, want bad-request", err)
	}
	if err := hello("hospital-1", f.hospRecip[0], 20); err != nil {
		t.Fatalf("a Hello of the registered size: %v", err)
	}
	a.mu.Lock()
	e := a.hospitals["hospital-1"]
	a.mu.Unlock()
	if e == nil || e.teachers != 20 || !e.ledger {
		t.Fatalf("hospital-1 registered as %+v", e)
	}
	if err := hello("hospital-2", f.hospRecip[1], 20); !errors.Is(err, protocol.ErrUnauthorized) {
		t.Fatalf("a hospital the ledger has no registration for: %v, want unauthorized", err)
	}
}

// Charges record each voter's registered size, and the ledger accepts
// them only at those sizes.
func TestChargesRecordTheRegisteredEnsembles(t *testing.T) {
	f := newFixture(t, 2, 50)
	f.registerEnsembles(t, 2)
	a, err := New(f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range f.hospitals {
		reg, err := a.ledgerEnsemble(t.Context(), h.id)
		if err != nil || !reg.ledger || reg.teachers != h.teachers {
			t.Fatalf("%s: %+v %v", h.id, reg, err)
		}
		if _, err := a.addHospital(h.id, h.teachers, h.classes, reg, h); err != nil {
			t.Fatal(err)
		}
	}
	a.AddStudent("student-1", f.student.Recipient())
	_, c := f.labelOne(t, a, 6)
	if !slices.Equal(c.Ensembles, []uint64{20, 20}) || c.Kind() != ledger.KindChargeV2 {
		t.Fatalf("the charge records sizes %v (kind %s), want the registered [20 20]", c.Ensembles, c.Kind())
	}
}

// Hospitals that joined before the ledger held their registrations (at the
// configuration's sizes) are held to the registrations once they appear:
// one registered at its connected size votes and its charges state it; one
// registered at another size is left out of the batch, named to the
// student, rather than making every charge a refused one.
func TestBatchesFollowRegistrationsAppliedLater(t *testing.T) {
	f := newFixture(t, 3, 50)
	cfg := f.cfg
	cfg.Quorum = 2
	a := f.start(t, cfg) // before any registration: the configuration's sizes
	f.hospitals[2].teachers = 21
	f.registerEnsembles(t, 3) // hospital-3 registered at 21, connected at 20
	f.hospitals[2].teachers = 20
	resp, c := f.labelOne(t, a, 6)
	if !slices.Equal(resp.GetLeftOut(), []string{"hospital-3"}) {
		t.Fatalf("left out %v, want hospital-3", resp.GetLeftOut())
	}
	if !slices.Equal(c.Hospitals, []string{"hospital-1", "hospital-2"}) || !slices.Equal(c.Ensembles, []uint64{20, 20}) {
		t.Fatalf("charge of %v with sizes %v", c.Hospitals, c.Ensembles)
	}
}

// A hospital relays its own ensemble registration (a hospital added after
// the genesis brings it), signed by the administrator, and no other
// hospital's; one it signed itself reaches the ledger only to be refused.
func TestHospitalRelaysOnlyItsOwnEnsembleRegistration(t *testing.T) {
	f := newFixture(t, 2, 50)
	_, addr := f.served(t)
	ca := cryptotest.CA(t, f.m)
	h1 := f.m.ByRole(crypto.RoleHospital)[0]
	h1Key := cryptotest.SigningKey(t, f.m, h1)
	c, err := quicnet.Dial(t.Context(), addr, f.netConfig(t, crypto.RoleHospital, h1.ID), crypto.RoleAggregator)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	relay := func(b ledger.Body, signer string, key []byte) (*nzcpb.LedgerResult, error) {
		cmd, err := ledger.Sign(b, signer, key)
		if err != nil {
			t.Fatal(err)
		}
		var res nzcpb.LedgerResult
		return &res, c.Invoke(t.Context(), &nzcpb.LedgerSubmit{Command: cmd}, &res)
	}
	submitted := func() int {
		f.led.mu.Lock()
		defer f.led.mu.Unlock()
		return len(f.led.submitted)
	}
	if _, err := relay(&ledger.RegisterEnsemble{Hospital: "hospital-2", Version: 1, Teachers: 20, Classes: classes, Timestamp: 1}, intake.AdminID, ca.Key()); !errors.Is(err, protocol.ErrUnauthorized) || submitted() != 0 {
		t.Fatalf("another hospital's registration: %v (%d submitted), want unauthorized and nothing relayed", err, submitted())
	}
	res, err := relay(&ledger.RegisterEnsemble{Hospital: h1.ID, Version: 1, Teachers: 20, Classes: classes, Timestamp: 1}, h1.ID, h1Key)
	if err != nil || res.GetCode() != nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_REJECTED {
		t.Fatalf("a registration the hospital signed: %v %v, want the ledger's refusal", res, err)
	}
	res, err = relay(&ledger.RegisterEnsemble{Hospital: h1.ID, Version: 1, Teachers: 20, Classes: classes, Timestamp: 1}, intake.AdminID, ca.Key())
	if err != nil || res.GetCode() != nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_COMMITTED {
		t.Fatalf("its own registration: %v %v", res, err)
	}
}

// nzc-svt charges record the registered sizes too, and the ledger takes
// them.
func TestSessionChargesRecordTheRegisteredEnsembles(t *testing.T) {
	f, cfg := svtFixture(t, 2)
	f.registerEnsembles(t, 2)
	a := f.start(t, cfg)
	_, c := f.labelOne(t, a, 4)
	if c.Session == "" || !slices.Equal(c.Ensembles, []uint64{200, 200}) {
		t.Fatalf("session %q, sizes %v; want a session charge of [200 200]", c.Session, c.Ensembles)
	}
}

// labelOne labels one batch of nq queries and returns the answer and its
// charge, the ledger's only one.
func (f *fixture) labelOne(t *testing.T, a *Aggregator, nq int) (*nzcpb.LabelResponse, *ledger.Charge) {
	t.Helper()
	req, _ := f.request(t, 1, nq)
	resp := label(t, a, req)
	charges := f.led.charges(t)
	if len(charges) != 1 {
		t.Fatalf("%d charges, want 1", len(charges))
	}
	for _, c := range charges {
		return resp, c
	}
	return nil, nil
}
