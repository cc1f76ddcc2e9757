package provision

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/crypto/cryptotest"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/auditor/intake"
)

// The genesis file WriteGenesis writes starts a ledger that registers every
// party and student and each founding hospital's ensemble; the digest the
// auditors pin (intake.GenesisDigest) is the ledger's; a hospital added
// later joins through its registration. Bad ensembles and a missing key
// are refused.
func TestGenesisStartsTheLedger(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fed")
	m, err := Provision(dir, Spec{Hospitals: 2, Auditors: 3, Students: 2, Now: t0, Rand: seeded(21)})
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteGenesis(m, 10, 4); err != nil {
		t.Fatal(err)
	}
	cmds, err := intake.ReadGenesis(filepath.Join(dir, GenesisFile))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(cmds), 1+2+2; got != want {
		t.Fatalf("%d genesis commands, want the genesis, 2 students and 2 ensembles", got)
	}
	st := ledger.New()
	apply := func(c []byte) error {
		r, err := st.Apply(c)
		if err != nil {
			return err
		}
		return r.Err()
	}
	for i, c := range cmds {
		if err := apply(c); err != nil {
			t.Fatalf("apply genesis command %d: %v", i, err)
		}
	}
	digest, err := intake.GenesisDigest(cmds)
	if err != nil {
		t.Fatal(err)
	}
	if h, ok := st.GenesisHash(); !ok || h != digest {
		t.Fatalf("the ledger's genesis is %x, the file's %x", h, digest)
	}
	if ens := intake.GenesisEnsembles(cmds); len(ens) != 2 || ens[0].Teachers != 10 || ens[0].Classes != 4 {
		t.Fatalf("ensembles %+v", ens)
	}
	// By default no student may spend more than its fair share of a cap:
	// half, of two students.
	if c, err := ledger.DecodeCommand(cmds[0]); err != nil || c.Body.Kind() != ledger.KindGenesisV3 || c.Body.(*ledger.Genesis).Share() != 0.5 {
		t.Fatalf("the genesis: %+v %v, want a genesis-v3 with the student share ½", c.Body, err)
	}

	m, p, err := AddParty(dir, crypto.RoleHospital, "", AddPartyOptions{Now: t0, Rand: seeded(22)})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := m.AdminSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	reg, err := RegisterHospital(m, p, admin, t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := apply(reg); err != nil {
		t.Fatalf("registration of %s: %v", p.ID, err)
	}

	aud := m.ByRole(crypto.RoleAuditor)[0]
	for name, bad := range map[string]func() error{
		"no admin key": func() error { _, err := GenesisCommands(m, nil, "o", t0); return err },
		"share above 1": func() error {
			_, err := BoundedGenesisCommands(m, admin, "o", t0, ledger.DefaultEpsilonBound, ledger.DefaultDeltaBound, 1.5)
			return err
		},
		"one class":      func() error { _, err := EnsembleCommands([]string{"hospital-1"}, 10, 1, admin, t0); return err },
		"no teachers":    func() error { _, err := EnsembleCommands([]string{"hospital-1"}, 0, 4, admin, t0); return err },
		"not a hospital": func() error { _, err := RegisterHospital(m, aud, admin, t0); return err },
		"no verifying key": func() error {
			q := p
			q.VerifyingKey = ""
			_, err := RegisterHospital(m, q, admin, t0)
			return err
		},
	} {
		if bad() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// cryptotest.Federation, which the layers below this one test against,
// names and lays out a federation's parties and files as Provision does.
func TestCryptotestFederationIsProvisioned(t *testing.T) {
	spec := Spec{Hospitals: 2, Auditors: 3, Students: 2, Now: t0, Rand: seeded(23)}
	m, err := Provision(filepath.Join(t.TempDir(), "fed"), spec)
	if err != nil {
		t.Fatal(err)
	}
	f := cryptotest.Federation(t, filepath.Join(t.TempDir(), "fed"), cryptotest.Spec{Hospitals: 2, Auditors: 3, Students: 2, Now: t0, Rand: seeded(23)})
	layout := func(m *crypto.Manifest) []string {
		out := []string{m.Name, m.CACert, m.CAKey, m.AdminKey, m.AdminVerifyingKey, m.Created.String()}
		for _, p := range m.Parties {
			out = append(out, string(p.Role), p.ID, p.URI, p.Cert, p.Key, p.AgeIdentity, p.SigningKey, p.VerifyingKey, p.NotAfter.String())
		}
		return out
	}
	if got, want := layout(f), layout(m); !slices.Equal(got, want) {
		t.Fatalf("cryptotest.Federation lays out\n%q\nProvision\n%q", got, want)
	}
	files := func(dir string) []string {
		var out []string
		for p := range snapshot(t, dir) {
			out = append(out, p)
		}
		slices.Sort(out)
		return out
	}
	if got, want := files(f.Dir), files(m.Dir); !slices.Equal(got, want) {
		t.Fatalf("cryptotest.Federation writes\n%q\nProvision\n%q", got, want)
	}
	loaded, err := crypto.LoadManifest(f.Dir)
	if err != nil || loaded.CAFingerprint != f.CAFingerprint {
		t.Fatalf("cryptotest's manifest does not load: %v", err)
	}
	cryptotest.CA(t, loaded)
}
