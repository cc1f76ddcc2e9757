package provision

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nzcfed/nzc/crypto"
)

// newRequest makes a request with its keys in a fresh directory.
func newRequest(t *testing.T, p crypto.Peer, seed byte) (*KeyRequest, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), p.ID)
	r, err := NewKeyRequest(dir, p, []string{"h4.example.org"}, seeded(seed))
	if err != nil {
		t.Fatal(err)
	}
	return r, dir
}

func TestNewKeyRequestWritesPrivateKeysPrivately(t *testing.T) {
	for _, tc := range []struct {
		role    crypto.Role
		signing bool
	}{{crypto.RoleHospital, true}, {crypto.RoleAuditor, true}, {crypto.RoleStudent, false}, {crypto.RoleCompliance, false}} {
		t.Run(string(tc.role), func(t *testing.T) {
			r, dir := newRequest(t, crypto.Peer{Role: tc.role, ID: string(tc.role) + "-9"}, 1)
			want := map[string]fs.FileMode{crypto.PartyKeyFile: 0o600, crypto.AgeIdentityFile: 0o600, crypto.AgeRecipientFile: 0o644, KeyRequestFile: 0o644}
			if tc.signing {
				want[crypto.SigningKeyFile], want[crypto.VerifyingKeyFile] = 0o600, 0o644
			}
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != len(want) {
				t.Fatalf("%d files in %s, want %d", len(entries), dir, len(want))
			}
			for name, mode := range want {
				fi, err := os.Stat(filepath.Join(dir, name))
				if err != nil {
					t.Fatal(err)
				}
				if fi.Mode().Perm() != mode {
					t.Errorf("%s has mode %04o, want %04o", name, fi.Mode().Perm(), mode)
				}
			}
			data, err := os.ReadFile(filepath.Join(dir, KeyRequestFile))
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(data, []byte("PRIVATE")) || bytes.Contains(data, []byte("AGE-SECRET-KEY")) {
				t.Fatalf("the request holds a private key:\n%s", data)
			}
			got, err := LoadKeyRequest(filepath.Join(dir, KeyRequestFile))
			if err != nil {
				t.Fatal(err)
			}
			if got.Fingerprint() != r.Fingerprint() {
				t.Fatal("the request read back has another fingerprint")
			}
			tlsKey, err := crypto.LoadPrivateKey(filepath.Join(dir, crypto.PartyKeyFile))
			if err != nil {
				t.Fatal(err)
			}
			if !tlsKey.Public().(ed25519.PublicKey).Equal(ed25519.PublicKey(got.TLSKey)) {
				t.Fatal("the request's TLS key is not tls.key's")
			}
			// Keys are never replaced.
			if _, err := NewKeyRequest(dir, got.Peer(), nil, seeded(2)); !errors.Is(err, crypto.ErrExists) {
				t.Fatalf("second request in the same directory: %v, want ErrExists", err)
			}
		})
	}
}

func TestParseKeyRequestRefuses(t *testing.T) {
	r, _ := newRequest(t, crypto.Peer{Role: crypto.RoleHospital, ID: "hospital-4"}, 3)
	student, _ := newRequest(t, crypto.Peer{Role: crypto.RoleStudent, ID: "student-4"}, 4)
	other, _ := newRequest(t, crypto.Peer{Role: crypto.RoleHospital, ID: "hospital-5"}, 5)
	edit := func(base *KeyRequest, f func(*KeyRequest)) []byte {
		c := *base
		f(&c)
		return c.Encode()
	}
	for _, tc := range []struct {
		name, mention string
		data          []byte
	}{
		{"empty", "not a request", nil},
		{"not JSON", "not a request", []byte("tls.key")},
		{"unknown field", "unknown field", bytes.Replace(r.Encode(), []byte(`"format"`), []byte(`"private_key": "x", "format"`), 1)},
		{"trailing data", "trailing", append(r.Encode(), []byte("{}")...)},
		{"other format", "format", edit(r, func(c *KeyRequest) { c.Format = "nzc-key-request/0" })},
		{"bad role", "role", edit(r, func(c *KeyRequest) { c.Role = "admin" })},
		{"bad id", "id", edit(r, func(c *KeyRequest) { c.ID = "Hospital 4" })},
		{"bad host", "host", edit(r, func(c *KeyRequest) { c.Hosts = []string{"a b"} })},
		{"short TLS key", "tls_public_key", edit(r, func(c *KeyRequest) { c.TLSKey = c.TLSKey[:31] })},
		{"bad age recipient", "age_recipient", edit(r, func(c *KeyRequest) { c.AgeRecipient = "age1xyz" })},
		{"id changed after signing", "TLS key's proof", edit(r, func(c *KeyRequest) { c.ID = "hospital-9" })},
		{"role changed after signing", "TLS key's proof", edit(r, func(c *KeyRequest) { c.Role = crypto.RoleAuditor })},
		{"TLS key swapped", "TLS key's proof", edit(r, func(c *KeyRequest) { c.TLSKey = other.TLSKey })},
		{"signing key swapped", "TLS key's proof", edit(r, func(c *KeyRequest) { c.SigningKey = other.SigningKey })},
		{"signing proof of another request", "signing key's proof", edit(r, func(c *KeyRequest) { c.SigningProof = other.SigningProof })},
		{"hospital without signing key", "needs an ed25519 signing_public_key", edit(r, func(c *KeyRequest) {
			c.SigningKey, c.SigningProof = nil, nil
			c.TLSProof = nil
		})},
		{"student with a signing key", "has no signing key", edit(student, func(c *KeyRequest) { c.SigningProof = []byte{1} })},
		{"too large", "larger than", bytes.Repeat([]byte(" "), maxKeyRequest+1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseKeyRequest(tc.data)
			if got != nil || !errors.Is(err, ErrBadKeyRequest) || !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("got %v, %v; want ErrBadKeyRequest saying %q", got, err, tc.mention)
			}
		})
	}
}

func TestAddPartyFromRequest(t *testing.T) {
	admin := filepath.Join(t.TempDir(), "fed")
	m, err := Provision(admin, provisionSpec())
	if err != nil {
		t.Fatal(err)
	}
	r, keys := newRequest(t, crypto.Peer{Role: crypto.RoleHospital, ID: "hospital-4"}, 6)
	before := readManifest(t, admin)
	for _, tc := range []struct {
		name     string
		approved crypto.Peer
		opts     AddPartyOptions
		want     error
	}{
		{"another id", crypto.Peer{Role: crypto.RoleHospital, ID: "hospital-5"}, AddPartyOptions{}, ErrNotApproved},
		{"another role", crypto.Peer{Role: crypto.RoleAuditor, ID: "hospital-4"}, AddPartyOptions{}, ErrNotApproved},
		{"an id already used", crypto.Peer{Role: crypto.RoleHospital, ID: "hospital-1"}, AddPartyOptions{}, ErrNotApproved},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := AddPartyFromRequest(admin, r, tc.approved, tc.opts)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if !bytes.Equal(readManifest(t, admin), before) {
				t.Fatal("a refused request changed the manifest")
			}
			if _, err := os.Lstat(filepath.Join(admin, r.ID)); err == nil {
				t.Fatal("a refused request left a party directory")
			}
		})
	}
	// A request whose id is taken is refused even when approved.
	taken, _ := newRequest(t, crypto.Peer{Role: crypto.RoleHospital, ID: "hospital-1"}, 7)
	if _, _, err := AddPartyFromRequest(admin, taken, taken.Peer(), AddPartyOptions{}); !errors.Is(err, crypto.ErrExists) {
		t.Fatalf("request for a taken id: %v, want ErrExists", err)
	}
	// An altered request is refused even when its identity is approved.
	forged := *r
	forged.AgeRecipient = m.Parties[0].AgeRecipient
	if _, _, err := AddPartyFromRequest(admin, &forged, forged.Peer(), AddPartyOptions{}); !errors.Is(err, ErrBadKeyRequest) {
		t.Fatalf("altered request: %v, want ErrBadKeyRequest", err)
	}
	if !bytes.Equal(readManifest(t, admin), before) {
		t.Fatal("a refused request changed the manifest")
	}

	m2, pf, err := AddPartyFromRequest(admin, r, r.Peer(), AddPartyOptions{Now: t0, Rand: seeded(8)})
	if err != nil {
		t.Fatal(err)
	}
	if pf.Key != "" || pf.AgeIdentity != "" || pf.SigningKey != "" {
		t.Fatalf("the manifest names private key files of a party that keeps its own: %+v", pf)
	}
	if got, ok := m2.Party(crypto.RoleHospital, "hospital-4"); !ok || got.AgeRecipient != r.AgeRecipient {
		t.Fatalf("manifest entry %+v", got)
	}
	cert, err := crypto.LoadCert(m2.Path(pf.Cert))
	if err != nil {
		t.Fatal(err)
	}
	cred, err := crypto.LoadCredential(m2.Path(pf.Cert), filepath.Join(keys, crypto.PartyKeyFile))
	if err != nil {
		t.Fatalf("the certificate does not go with the party's own key: %v", err)
	}
	ca, err := crypto.LoadCA(m.Path(m.CACert), "")
	if err != nil {
		t.Fatal(err)
	}
	if p, err := crypto.VerifyPeer(ca.Cert, [][]byte{cert.Raw}, t0, crypto.UsageClient); err != nil || p != r.Peer() {
		t.Fatalf("VerifyPeer: %v, %v", p, err)
	}
	if got, err := cred.Peer(); err != nil || got != r.Peer() {
		t.Fatalf("certificate names %v (%v)", got, err)
	}
	pub, err := crypto.LoadPublicKey(m2.Path(pf.VerifyingKey))
	if err != nil || !pub.Equal(ed25519.PublicKey(r.SigningKey)) {
		t.Fatalf("sign.pub in the federation is not the request's: %v", err)
	}
	assertNoPrivateKeysOf(t, admin, keys)
}

// assertNoPrivateKeysOf fails if any file under dir holds one of the private
// keys kept in keys (its tls.key, sign.key or age.key), in any encoding
// those files use.
func assertNoPrivateKeysOf(t *testing.T, dir, keys string) {
	t.Helper()
	var secrets [][]byte
	for _, f := range []string{crypto.PartyKeyFile, crypto.SigningKeyFile} {
		if k, err := crypto.LoadPrivateKey(filepath.Join(keys, f)); err == nil {
			secrets = append(secrets, k.Seed())
			pem, _ := crypto.EncodeKeyPEM(k)
			secrets = append(secrets, pem)
		}
	}
	id, err := crypto.LoadIdentity(filepath.Join(keys, crypto.AgeIdentityFile))
	if err != nil {
		t.Fatal(err)
	}
	secrets = append(secrets, []byte(id.SecretString()))
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, s := range secrets {
			if bytes.Contains(data, s) {
				t.Errorf("%s holds one of the party's private keys", path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func FuzzParseKeyRequest(f *testing.F) {
	dir := f.TempDir()
	r, err := NewKeyRequest(dir, crypto.Peer{Role: crypto.RoleHospital, ID: "hospital-4"}, []string{"10.0.0.4"}, seeded(9))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(r.Encode())
	f.Add([]byte(`{"format":"nzc-key-request/1"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := ParseKeyRequest(data)
		if err != nil {
			if !errors.Is(err, ErrBadKeyRequest) {
				t.Fatalf("error %v does not match ErrBadKeyRequest", err)
			}
			return
		}
		// Whatever is accepted is signed by the keys it names and
		// survives a round trip unchanged.
		back, err := ParseKeyRequest(got.Encode())
		if err != nil {
			t.Fatalf("accepted request does not parse again: %v", err)
		}
		a, _ := json.Marshal(got)
		b, _ := json.Marshal(back)
		if !bytes.Equal(a, b) {
			t.Fatalf("round trip changed the request:\n%s\n%s", a, b)
		}
	})
}

func TestRenewFromRequest(t *testing.T) {
	admin := filepath.Join(t.TempDir(), "fed")
	if _, err := Provision(admin, provisionSpec()); err != nil {
		t.Fatal(err)
	}
	r, keys := newRequest(t, crypto.Peer{Role: crypto.RoleHospital, ID: "hospital-4"}, 10)
	_, pf, err := AddPartyFromRequest(admin, r, r.Peer(), AddPartyOptions{Now: t0, Rand: seeded(11)})
	if err != nil {
		t.Fatal(err)
	}
	first, err := crypto.LoadCert(filepath.Join(admin, pf.Cert))
	if err != nil {
		t.Fatal(err)
	}
	before := readManifest(t, admin)
	other, _ := newRequest(t, crypto.Peer{Role: crypto.RoleHospital, ID: "hospital-4"}, 12) // new keys, same id
	stranger, _ := newRequest(t, crypto.Peer{Role: crypto.RoleHospital, ID: "hospital-9"}, 13)
	for _, tc := range []struct {
		name     string
		req      *KeyRequest
		approved crypto.Peer
		mention  string
	}{
		{"new keys for the same id", other, other.Peer(), "renewal keeps the keys"},
		{"a party the federation does not have", stranger, stranger.Peer(), "no nzc://hospital/hospital-9 to renew"},
		{"another approval", r, crypto.Peer{Role: crypto.RoleHospital, ID: "hospital-5"}, "approval is for"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := RenewFromRequest(admin, tc.req, tc.approved, AddPartyOptions{})
			if !errors.Is(err, ErrNotApproved) || !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("got %v, want ErrNotApproved saying %q", err, tc.mention)
			}
			if !bytes.Equal(readManifest(t, admin), before) {
				t.Fatal("a refused renewal changed the manifest")
			}
		})
	}
	later := t0.Add(400 * 24 * time.Hour)
	m, renewed, err := RenewFromRequest(admin, r, r.Peer(), AddPartyOptions{Now: later, Rand: seeded(14)})
	if err != nil {
		t.Fatal(err)
	}
	if !renewed.NotAfter.After(pf.NotAfter) || renewed.Cert != pf.Cert || renewed.VerifyingKey != pf.VerifyingKey || renewed.Key != "" {
		t.Fatalf("renewed entry %+v, was %+v", renewed, pf)
	}
	if got, _ := m.Party(crypto.RoleHospital, "hospital-4"); got.NotAfter != renewed.NotAfter || len(m.Parties) != 3+1+3+1+1+1 {
		t.Fatalf("manifest after renewal: %+v (%d parties)", got, len(m.Parties))
	}
	cred, err := crypto.LoadCredential(filepath.Join(admin, pf.Cert), filepath.Join(keys, crypto.PartyKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if cred.Cert.Equal(first) {
		t.Fatal("the certificate was not renewed")
	}
	assertNoPrivateKeysOf(t, admin, keys)
}

// readManifest returns the administrator directory's manifest as it is on
// disk, to check that a refused change left it alone.
func readManifest(t *testing.T, admin string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(admin, crypto.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// seeded is a deterministic source of key material.
func seeded(seed byte) *rand.ChaCha8 {
	var s [32]byte
	s[0] = seed
	return rand.NewChaCha8(s)
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
