package intake

import (
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/crypto/cryptotest"
	"github.com/nzcfed/nzc/ledger"
)

// provisionedGenesis builds a federation of two hospitals, an auditor and
// a student, and returns it with the commands that start its ledger for
// origin, signed by its administrator at time at: the genesis of its
// Directory, then the student's registration.
func provisionedGenesis(t testing.TB, origin string, at time.Time) (*crypto.Manifest, [][]byte) {
	t.Helper()
	m := cryptotest.Federation(t, t.TempDir(), cryptotest.Spec{Hospitals: 2, Auditors: 1, Students: 1})
	admin, err := m.AdminSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	parties, err := Directory(m, admin.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	g, err := ledger.Sign(&ledger.Genesis{Origin: origin, Parties: parties, Timestamp: at.UnixNano()}, AdminID, admin)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ledger.Sign(&ledger.RegisterStudent{Student: m.ByRole(crypto.RoleStudent)[0].ID, Timestamp: at.UnixNano()}, AdminID, admin)
	if err != nil {
		t.Fatal(err)
	}
	return m, [][]byte{g, s}
}

// TestGenesisDigest checks that the digest an auditor pins is the one the
// ledger records for the genesis it applies, and that a file whose first
// command is not a genesis, or holds none, is refused.
func TestGenesisDigest(t *testing.T) {
	_, cmds := provisionedGenesis(t, "nzc.test/genesis", time.Unix(1_700_000_000, 0))
	got, err := GenesisDigest(cmds)
	if err != nil {
		t.Fatal(err)
	}
	st := ledger.New()
	for i, c := range cmds {
		if _, err := st.Apply(c); err != nil {
			t.Fatalf("apply command %d: %v", i, err)
		}
	}
	want, ok := st.GenesisHash()
	if !ok || got != want {
		t.Fatalf("GenesisDigest = %x, the ledger's genesis is %x (ok=%v)", got, want, ok)
	}
	for name, bad := range map[string][][]byte{
		"empty":               nil,
		"not a genesis first": cmds[1:],
		"garbage":             {[]byte("not a command")},
	} {
		if _, err := GenesisDigest(bad); err == nil {
			t.Errorf("%s: GenesisDigest accepted it", name)
		}
	}
}
