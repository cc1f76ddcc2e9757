package compliance

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nzcfed/nzc/crypto"
)

func TestTrustedKeys(t *testing.T) {
	m := provision(t, "fed")
	fromFed, err := TrustedKeys(m.Dir, nil)
	if err != nil || len(fromFed) != 1 || !strings.HasPrefix(fromFed[0], "auditor-1+") {
		t.Fatalf("the federation's auditor keys: %v, %v", fromFed, err)
	}
	a := m.ByRole(crypto.RoleAuditor)[0]
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	keys := write("keys.txt", "# the auditors\n\n"+fromFed[0]+"\n")
	for _, tc := range []struct {
		name   string
		fed    string
		values []string
		want   []string // nil: an error naming bad
		bad    string
	}{
		{"a verifier key", "", []string{" " + fromFed[0] + " "}, fromFed, ""},
		{"a file of keys", "", []string{keys}, fromFed, ""},
		{"an auditor's sign.pub", "", []string{m.Path(a.VerifyingKey)}, fromFed, ""},
		{"directory and keys", m.Dir, []string{fromFed[0]}, append(slices.Clone(fromFed), fromFed[0]), ""},
		{"nothing", "", []string{""}, []string{}, ""},
		{"no such file", "", []string{filepath.Join(dir, "missing")}, nil, "neither a verifier key nor a readable file"},
		{"a file without keys", "", []string{write("empty.txt", "# none\n")}, nil, "holds no verifier keys"},
		{"a line that is no key", "", []string{write("bad.txt", fromFed[0]+"\nnot-a-key\n")}, nil, "is not a verifier key"},
		{"no federation", filepath.Join(dir, "nofed"), nil, nil, crypto.ManifestFile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := TrustedKeys(tc.fed, tc.values)
			if tc.want == nil {
				if err == nil || !strings.Contains(err.Error(), tc.bad) {
					t.Fatalf("%v, %v; want an error naming %q", got, err, tc.bad)
				}
				return
			}
			if err != nil || len(got) != len(tc.want) || (len(got) > 0 && !slices.Equal(got, tc.want)) {
				t.Fatalf("%v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestKeptCheckpointPath(t *testing.T) {
	a := KeptCheckpointPath("d", []string{"k1", "k2"})
	if b := KeptCheckpointPath("d", []string{"k2", "k1"}); a != b {
		t.Errorf("the order of the keys changes the file: %s, %s", a, b)
	}
	if c := KeptCheckpointPath("d", []string{"k1"}); c == a {
		t.Errorf("another set of keys shares the file %s", a)
	}
	if got, err := KeptCheckpoint(filepath.Join(t.TempDir(), "none")); got != nil || err != nil {
		t.Errorf("no kept file: %v, %v; want nothing and no error", got, err)
	}
}

// TestAuditorKeysRefusesAFederationWithoutThem: a manifest that lists no
// auditor, or an auditor without its verifying key, gives no keys to pin.
func TestAuditorKeysRefusesAFederationWithoutThem(t *testing.T) {
	m := provision(t, "fed")
	noAuditors := *m
	noAuditors.Parties = slices.DeleteFunc(slices.Clone(m.Parties), func(p crypto.PartyFiles) bool { return p.Role == crypto.RoleAuditor })
	noKey := *m
	noKey.Parties = slices.Clone(m.Parties)
	for i := range noKey.Parties {
		if noKey.Parties[i].Role == crypto.RoleAuditor {
			noKey.Parties[i].VerifyingKey = ""
		}
	}
	for _, tc := range []struct {
		name string
		m    *crypto.Manifest
		want string
	}{
		{"no auditors", &noAuditors, "lists no auditors"},
		{"an auditor without its key", &noKey, "has no verifying key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if keys, err := AuditorKeys(tc.m); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, %v; want an error naming %q", keys, err, tc.want)
			}
		})
	}
}
