package teacher

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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

// genesisFile is the genesis file nzc init writes, its genesis registering
// parties, then an ensemble registration.
func genesisFile(t testing.TB, parties ...ledger.Party) []byte {
	admin := testKey(1)
	g := sign(t, &ledger.Genesis{Origin: "nzc.test/ledger", Timestamp: 1, Parties: append([]ledger.Party{
		{ID: "federation-admin", Role: ledger.RoleAdmin, PublicKey: admin.Public().(ed25519.PublicKey)}}, parties...)}, "federation-admin", admin)
	ens := sign(t, &ledger.RegisterEnsemble{Hospital: "hospital-4", Version: 1, Teachers: 1, Classes: 2, Timestamp: 1}, "federation-admin", admin)
	return list(t, g, ens)
}

// A founding hospital sends the genesis as its registration only when the
// genesis registers it with its own key; anything else is refused when
// the node is made.
func TestGenesisRegistrationIsChecked(t *testing.T) {
	own, other := testKey(4).Public().(ed25519.PublicKey), testKey(5).Public().(ed25519.PublicKey)
	hospital := func(id string, pub ed25519.PublicKey) ledger.Party {
		return ledger.Party{ID: id, Role: ledger.RoleHospital, PublicKey: pub}
	}
	var many []ledger.Party
	for i := range 400 {
		many = append(many, hospital(fmt.Sprintf("hospital-%03d", i), other))
	}
	many = append(many, hospital("hospital-4", own))
	reg := sign(t, &ledger.RegisterParty{Party: hospital("hospital-4", own), Timestamp: 1}, "federation-admin", testKey(1))
	for _, tc := range []struct {
		name    string
		genesis []byte
		mention string
	}{
		{"the genesis registers this hospital", genesisFile(t, hospital("hospital-4", own)), ""},
		{"not a JSON list", []byte("genesis\n"), "not a JSON list"},
		{"an empty list", []byte("[]"), "genesis file"},
		{"first command not a genesis", list(t, reg), "not a genesis"},
		{"first command not a command", list(t, []byte("junk")), "first command"},
		{"hospital not registered", genesisFile(t, hospital("hospital-5", other)), "does not register hospital hospital-4"},
		{"registered as a student", genesisFile(t, ledger.Party{ID: "hospital-4", Role: ledger.RoleStudent, PublicKey: own}), "does not register hospital hospital-4"},
		{"another key", genesisFile(t, hospital("hospital-4", other)), "another signing key"},
		{"larger than a Hello carries", genesisFile(t, many...), "more than the"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := registrationConfig(t, nil)
			cfg.Genesis = tc.genesis
			n, err := New(cfg)
			if tc.mention == "" {
				if err != nil {
					t.Fatal(err)
				}
				cmds, _ := Registrations(tc.genesis)
				if !bytes.Equal(n.proof, cmds[0]) || len(n.registrations) != 0 {
					t.Fatalf("sends %x and relays %d commands, want the genesis and none", n.proof, len(n.registrations))
				}
				return
			}
			if n != nil || !errors.Is(err, ErrBadRegistration) || !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("got %v, want ErrBadRegistration saying %q", err, tc.mention)
			}
		})
	}
	t.Run("a registration wins over the genesis", func(t *testing.T) {
		cfg := registrationConfig(t, reg)
		cfg.Genesis = []byte("not read")
		n, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(n.proof, reg) {
			t.Fatal("the Hello does not carry the hospital's registration")
		}
	})
}

// Whatever the genesis file holds, the registration sent is a genesis that
// registers this hospital with its key, or there is an error, never a panic.
func FuzzGenesisRegistration(f *testing.F) {
	own := testKey(4).Public().(ed25519.PublicKey)
	f.Add(genesisFile(f, ledger.Party{ID: "hospital-4", Role: ledger.RoleHospital, PublicKey: own}))
	f.Add(genesisFile(f))
	f.Add([]byte("[]"))
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := GenesisRegistration(b, "hospital-4", testKey(4))
		if err != nil {
			if !errors.Is(err, ErrBadRegistration) {
				t.Fatalf("untyped error %T: %v", err, err)
			}
			return
		}
		c, err := ledger.DecodeCommand(g)
		if err != nil {
			t.Fatalf("accepted a genesis that does not decode: %v", err)
		}
		body, ok := c.Body.(*ledger.Genesis)
		if !ok || !slices.ContainsFunc(body.Parties, func(p ledger.Party) bool {
			return p.ID == "hospital-4" && p.Role == ledger.RoleHospital && p.PublicKey.Equal(own)
		}) {
			t.Fatalf("accepted %+v", c.Body)
		}
	})
}
