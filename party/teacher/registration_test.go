package teacher

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/ledger"
)

// unanimous is a hospital's ensemble of its teachers, every one of which
// votes for class 0 of 2 on every query of one feature.
type unanimous int

func (u unanimous) Teachers() int { return int(u) }
func (unanimous) Classes() int    { return 2 }
func (unanimous) Dim() int        { return 1 }
func (u unanimous) Votes(_ context.Context, x []float32) ([][]int, error) {
	out := make([][]int, len(x))
	for i := range out {
		out[i] = []int{int(u), 0}
	}
	return out, nil
}

func testKey(b byte) ed25519.PrivateKey {
	seed := make([]byte, ed25519.SeedSize)
	seed[0] = b
	return ed25519.NewKeyFromSeed(seed)
}

func registrationConfig(t testing.TB, reg []byte) Config {
	id, err := crypto.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	return Config{ID: "hospital-4", Aggregator: "127.0.0.1:1", Identity: id, SigningKey: testKey(4),
		CapEpsilon: 8, CapDelta: 1e-5, Registration: reg, Voter: unanimous(1)}
}

// list is the JSON list of commands nzc init add-hospital writes.
func list(t testing.TB, cmds ...[]byte) []byte {
	b, err := json.Marshal(cmds)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sign(t testing.TB, b ledger.Body, signer string, key ed25519.PrivateKey) []byte {
	c, err := ledger.Sign(b, signer, key)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A registration that is not this hospital's is refused when the node is
// made, with an error that says what it is instead, before anything is
// relayed.
func TestRegistrationIsChecked(t *testing.T) {
	admin := testKey(1)
	own := testKey(4).Public().(ed25519.PublicKey)
	register := func(id string, role ledger.Role, pub ed25519.PublicKey) []byte {
		return sign(t, &ledger.RegisterParty{Party: ledger.Party{ID: id, Role: role, PublicKey: pub}, Timestamp: 1}, "federation-admin", admin)
	}
	ensemble := func(id string) []byte {
		return sign(t, &ledger.RegisterEnsemble{Hospital: id, Version: 1, Teachers: 1, Classes: 2, Timestamp: 1}, "federation-admin", admin)
	}
	for _, tc := range []struct {
		name    string
		reg     []byte
		mention string
	}{
		{"this hospital's registration", register("hospital-4", ledger.RoleHospital, own), ""},
		{"not a ledger command", []byte("registration\n"), "not a ledger command"},
		{"a truncated registration", register("hospital-4", ledger.RoleHospital, own)[:40], "not a ledger command"},
		{"another kind of command", sign(t, &ledger.OpenAccount{Hospital: "hospital-4", CapEpsilon: 1, CapDelta: 1e-5, Timestamp: 1}, "hospital-4", testKey(4)), "open-account"},
		{"another hospital's registration", register("hospital-5", ledger.RoleHospital, own), "hospital-5"},
		{"a registration as another role", register("hospital-4", ledger.RoleStudent, own), "student"},
		{"a registration of another key", register("hospital-4", ledger.RoleHospital, testKey(5).Public().(ed25519.PublicKey)), "another signing key"},
		{"with its ensemble's", list(t, register("hospital-4", ledger.RoleHospital, own), ensemble("hospital-4")), ""},
		{"with another hospital's ensemble", list(t, register("hospital-4", ledger.RoleHospital, own), ensemble("hospital-5")), "hospital-5"},
		{"an ensemble alone", list(t, ensemble("hospital-4")), "should come first"},
		{"two party registrations", list(t, register("hospital-4", ledger.RoleHospital, own), register("hospital-4", ledger.RoleHospital, own)), "second party registration"},
		{"a broken list", []byte("[\"AQ"), "nor a list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := New(registrationConfig(t, tc.reg))
			if tc.mention == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if n != nil || !errors.Is(err, ErrBadRegistration) || !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("got %v, want ErrBadRegistration saying %q", err, tc.mention)
			}
		})
	}
}

// FuzzRegistration feeds arbitrary registration files to a hospital node:
// a node is made only with a registration of this hospital.
func FuzzRegistration(f *testing.F) {
	good := sign(f, &ledger.RegisterParty{Party: ledger.Party{ID: "hospital-4", Role: ledger.RoleHospital, PublicKey: testKey(4).Public().(ed25519.PublicKey)}, Timestamp: 1}, "federation-admin", testKey(1))
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add(sign(f, &ledger.RegisterParty{Party: ledger.Party{ID: "hospital-5", Role: ledger.RoleHospital, PublicKey: testKey(5).Public().(ed25519.PublicKey)}, Timestamp: 1}, "federation-admin", testKey(1)))
	cfg := registrationConfig(f, nil)
	f.Fuzz(func(t *testing.T, reg []byte) {
		c := cfg
		c.Registration = reg
		_, err := New(c)
		if len(reg) == 0 {
			return
		}
		if err != nil {
			if !errors.Is(err, ErrBadRegistration) {
				t.Fatalf("untyped error %T: %v", err, err)
			}
			return
		}
		cmd, err := ledger.DecodeCommand(reg)
		if err != nil {
			t.Fatalf("accepted a registration that does not decode: %v", err)
		}
		b, ok := cmd.Body.(*ledger.RegisterParty)
		if !ok || b.Party.ID != "hospital-4" || b.Party.Role != ledger.RoleHospital || !b.Party.PublicKey.Equal(testKey(4).Public()) {
			t.Fatalf("accepted %+v", cmd.Body)
		}
	})
}

// Whatever the registration file holds, checking it returns commands that
// are this hospital's registrations or an error, never a panic.
func FuzzCheckRegistration(f *testing.F) {
	admin := testKey(1)
	own := testKey(4).Public().(ed25519.PublicKey)
	reg := sign(f, &ledger.RegisterParty{Party: ledger.Party{ID: "hospital-4", Role: ledger.RoleHospital, PublicKey: own}, Timestamp: 1}, "federation-admin", admin)
	ens := sign(f, &ledger.RegisterEnsemble{Hospital: "hospital-4", Version: 1, Teachers: 3, Classes: 2, Timestamp: 1}, "federation-admin", admin)
	f.Add(reg)
	f.Add(list(f, reg, ens))
	f.Add([]byte("[]"))
	f.Fuzz(func(t *testing.T, b []byte) {
		cmds, err := checkRegistration(b, "hospital-4", testKey(4))
		if err != nil {
			return
		}
		for i, c := range cmds {
			d, err := ledger.DecodeCommand(c)
			if err != nil {
				t.Fatalf("accepted command %d does not decode: %v", i, err)
			}
			if _, ok := d.Body.(*ledger.RegisterParty); ok != (i == 0) {
				t.Fatalf("command %d is a %s", i, d.Body.Kind())
			}
		}
	})
}
