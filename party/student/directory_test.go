package student

import (
	"crypto/ed25519"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// seededKey is a deterministic ed25519 key.
func seededKey(seed byte) ed25519.PrivateKey {
	s := make([]byte, ed25519.SeedSize)
	for i := range s {
		s[i] = seed
	}
	return ed25519.NewKeyFromSeed(s)
}

func ageRecipient(t testing.TB) *crypto.Recipient {
	t.Helper()
	id, err := crypto.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	return id.Recipient()
}

// registerHospital is the administrator's signed registration of hospital
// id with key.
func registerHospital(t testing.TB, id string, key ed25519.PublicKey, admin ed25519.PrivateKey) []byte {
	t.Helper()
	reg, err := ledger.Sign(&ledger.RegisterParty{Party: ledger.Party{ID: id, Role: ledger.RoleHospital, PublicKey: key}, Timestamp: 1}, "admin", admin)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func signed(id string, r *crypto.Recipient, key ed25519.PrivateKey, reg []byte) *nzcpb.SignedRecipient {
	return &nzcpb.SignedRecipient{HospitalId: id, AgeRecipient: r.String(),
		Signature: ed25519.Sign(key, protocol.RecipientMessage(id, r.String())), Registration: reg}
}

// sharedRefused stands, in a test's refused, for the refusal of a
// registration the recipients share, which names no one hospital.
const sharedRefused = "(shared)"

func TestDirectoryLearnsSignedRecipients(t *testing.T) {
	admin, h4, agg := seededKey(1), seededKey(4), seededKey(9)
	pinned, r4, rAgg := ageRecipient(t), ageRecipient(t), ageRecipient(t)
	reg4 := registerHospital(t, "hospital-4", h4.Public().(ed25519.PublicKey), admin)
	genesis, err := ledger.Sign(&ledger.Genesis{Origin: "nzc.test/ledger", Timestamp: 1, Parties: []ledger.Party{
		{ID: "admin", Role: ledger.RoleAdmin, PublicKey: admin.Public().(ed25519.PublicKey)},
		{ID: "hospital-4", Role: ledger.RoleHospital, PublicKey: h4.Public().(ed25519.PublicKey)}}}, "admin", admin)
	if err != nil {
		t.Fatal(err)
	}
	forgedReg := registerHospital(t, "hospital-4", agg.Public().(ed25519.PublicKey), agg)
	// A genesis of the aggregator's making: the same parties, its own key
	// registered for hospital-4, signed by it under the administrator's id.
	forgedGenesis, err := ledger.Sign(&ledger.Genesis{Origin: "nzc.test/ledger", Timestamp: 1, Parties: []ledger.Party{
		{ID: "admin", Role: ledger.RoleAdmin, PublicKey: admin.Public().(ed25519.PublicKey)},
		{ID: "hospital-4", Role: ledger.RoleHospital, PublicKey: agg.Public().(ed25519.PublicKey)}}}, "admin", agg)
	if err != nil {
		t.Fatal(err)
	}
	wrongID := signed("hospital-9", r4, h4, reg4)

	tests := []struct {
		name    string
		passed  []*nzcpb.SignedRecipient
		shared  [][]byte // the registrations the recipients share
		refused string   // the hospital named in the refusal, "" for none, sharedRefused for a shared registration's
		want    []*crypto.Recipient
	}{
		{"admitted hospital", []*nzcpb.SignedRecipient{signed("hospital-4", r4, h4, reg4)}, nil, "", []*crypto.Recipient{pinned, r4}},
		{"hospital of a genesis", []*nzcpb.SignedRecipient{signed("hospital-4", r4, h4, genesis)}, nil, "", []*crypto.Recipient{pinned, r4}},
		{"pinned recipient, whatever its signature", []*nzcpb.SignedRecipient{signed("hospital-1", pinned, agg, nil)}, nil, "", []*crypto.Recipient{pinned}},
		{"no registration, not pinned", []*nzcpb.SignedRecipient{signed("hospital-2", r4, h4, nil)}, nil, "", []*crypto.Recipient{pinned}},
		// The aggregator substitutes its own recipient, signed by its own key.
		{"substituted recipient", []*nzcpb.SignedRecipient{signed("hospital-4", rAgg, agg, reg4)}, nil, "hospital-4", []*crypto.Recipient{pinned}},
		// ... signed by the hospital's key over another recipient.
		{"signature of another recipient", []*nzcpb.SignedRecipient{{HospitalId: "hospital-4", AgeRecipient: rAgg.String(),
			Signature: signed("hospital-4", r4, h4, nil).GetSignature(), Registration: reg4}}, nil, "hospital-4", []*crypto.Recipient{pinned}},
		// ... with a registration of its own making.
		{"registration not by the administrator", []*nzcpb.SignedRecipient{signed("hospital-4", rAgg, agg, forgedReg)}, nil, "hospital-4", []*crypto.Recipient{pinned}},
		// ... with a genesis of its own making.
		{"genesis not by the administrator", []*nzcpb.SignedRecipient{signed("hospital-4", rAgg, agg, forgedGenesis)}, nil, "hospital-4", []*crypto.Recipient{pinned}},
		// ... with the true genesis, which does not register its key.
		{"genesis registering another key", []*nzcpb.SignedRecipient{signed("hospital-4", rAgg, agg, genesis)}, nil, "hospital-4", []*crypto.Recipient{pinned}},
		// ... with the genesis, for a hospital it does not register.
		{"genesis of other hospitals", []*nzcpb.SignedRecipient{signed("hospital-5", rAgg, agg, genesis)}, nil, "hospital-5", []*crypto.Recipient{pinned}},
		// ... with another hospital's registration.
		{"registration of another hospital", []*nzcpb.SignedRecipient{wrongID}, nil, "hospital-9", []*crypto.Recipient{pinned}},
		{"registration that is not a command", []*nzcpb.SignedRecipient{signed("hospital-4", r4, h4, []byte("junk"))}, nil, "hospital-4", []*crypto.Recipient{pinned}},
		// Founding hospitals whose genesis the aggregator sends once.
		{"hospital of a shared genesis", []*nzcpb.SignedRecipient{signed("hospital-4", r4, h4, nil)}, [][]byte{genesis}, "", []*crypto.Recipient{pinned, r4}},
		{"shared genesis of other hospitals", []*nzcpb.SignedRecipient{signed("hospital-5", rAgg, agg, nil)}, [][]byte{genesis}, "", []*crypto.Recipient{pinned}},
		// The aggregator substitutes a recipient under the shared genesis ...
		{"substituted recipient under a shared genesis", []*nzcpb.SignedRecipient{signed("hospital-4", rAgg, agg, nil)}, [][]byte{genesis}, "hospital-4", []*crypto.Recipient{pinned}},
		// ... or shares a genesis of its own making.
		{"shared genesis not by the administrator", []*nzcpb.SignedRecipient{signed("hospital-4", rAgg, agg, nil)}, [][]byte{forgedGenesis}, sharedRefused, []*crypto.Recipient{pinned}},
		{"shared registration that is not a command", []*nzcpb.SignedRecipient{signed("hospital-4", r4, h4, reg4)}, [][]byte{[]byte("junk")}, sharedRefused, []*crypto.Recipient{pinned}},
		// A recipient's own registration is checked, whatever is shared.
		{"own forged registration beside a shared genesis", []*nzcpb.SignedRecipient{signed("hospital-4", rAgg, agg, forgedReg)}, [][]byte{genesis}, "hospital-4", []*crypto.Recipient{pinned}},
		// One forged entry refuses the whole list.
		{"good and forged", []*nzcpb.SignedRecipient{signed("hospital-4", r4, h4, reg4), signed("hospital-5", rAgg, agg, reg4)}, nil, "hospital-5", []*crypto.Recipient{pinned}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newDirectory(admin.Public().(ed25519.PublicKey), []*crypto.Recipient{pinned})
			_, _, err := d.learn("agg:7400", tc.passed, tc.shared)
			var re *RecipientError
			switch {
			case tc.refused == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.refused == sharedRefused && (!errors.As(err, &re) || !errors.Is(err, ErrRecipient) || re.Hospital != ""):
				t.Fatalf("got %v, want the shared registration refused", err)
			case tc.refused != "" && tc.refused != sharedRefused && (!errors.As(err, &re) || !errors.Is(err, ErrRecipient) || re.Hospital != tc.refused):
				t.Fatalf("got %v, want a refusal naming %s", err, tc.refused)
			}
			if got := d.recipients(); !slices.EqualFunc(got, tc.want, func(a, b *crypto.Recipient) bool { return a.String() == b.String() }) {
				t.Fatalf("sealing to %v, want %v", got, tc.want)
			}
		})
	}
}

func TestDirectoryWithoutAdminKeyLearnsNothing(t *testing.T) {
	admin, h4 := seededKey(1), seededKey(4)
	pinned, r4 := ageRecipient(t), ageRecipient(t)
	d := newDirectory(nil, []*crypto.Recipient{pinned})
	if _, _, err := d.learn("agg", []*nzcpb.SignedRecipient{signed("hospital-4", r4, h4, registerHospital(t, "hospital-4", h4.Public().(ed25519.PublicKey), admin))}, nil); err != nil {
		t.Fatal(err)
	}
	if got := d.recipients(); len(got) != 1 || got[0].String() != pinned.String() {
		t.Fatalf("sealing to %v, want the pinned recipient only", got)
	}
}

// FuzzVerifyRecipient checks that no registration and signature the
// aggregator can make up is accepted: only the administrator's key signs
// registrations here, and the fuzzer does not hold it.
func FuzzVerifyRecipient(f *testing.F) {
	admin, h4 := seededKey(1), seededKey(4)
	r := "age1qyqszqgpqyqszqgpqyqszqgpqyqszqgpqyqszqgpqyqszqgpqyqs3290gq"
	good := registerHospital(f, "hospital-4", h4.Public().(ed25519.PublicKey), admin)
	f.Add("hospital-4", r, ed25519.Sign(h4, protocol.RecipientMessage("hospital-4", r)), good)
	f.Add("hospital-4", r, make([]byte, 64), good[:len(good)-1])
	f.Add("hospital-4", r, make([]byte, 64), []byte{})
	rng := rand.New(rand.NewPCG(1, 2))
	junk := make([]byte, 200)
	for i := range junk {
		junk[i] = byte(rng.Uint32())
	}
	f.Add("h", "age1x", junk[:64], junk)
	attacker := seededKey(7)
	f.Fuzz(func(t *testing.T, id, recipient string, sig, reg []byte) {
		s := &nzcpb.SignedRecipient{HospitalId: id, AgeRecipient: recipient, Signature: sig, Registration: reg}
		rc, err := verifyRecipient(attacker.Public().(ed25519.PublicKey), s)
		if err == nil || rc != nil {
			t.Fatalf("accepted %q for %s under a key that signed no registration", recipient, id)
		}
		// Under the real key, what is accepted is exactly the registered
		// hospital's signed recipient.
		if rc, err := verifyRecipient(admin.Public().(ed25519.PublicKey), s); err == nil {
			if id != "hospital-4" || rc.String() != recipient || !ed25519.Verify(h4.Public().(ed25519.PublicKey), protocol.RecipientMessage(id, recipient), sig) {
				t.Fatalf("accepted %q for %s without the registered key's signature", recipient, id)
			}
		}
	})
}
