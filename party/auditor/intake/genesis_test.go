package intake

import (
	"testing"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/ledger"
)

// provisionedGenesis provisions a federation of two hospitals, an auditor
// and a student, and returns it with its genesis commands for origin,
// signed by its administrator at time at.
func provisionedGenesis(t testing.TB, origin string, at time.Time) (*crypto.Manifest, [][]byte) {
	t.Helper()
	m, err := crypto.Provision(t.TempDir(), crypto.ProvisionSpec{Hospitals: 2, Auditors: 1, Students: 1})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := m.AdminSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := GenesisCommands(m, admin, origin, at)
	if err != nil {
		t.Fatal(err)
	}
	return m, cmds
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
