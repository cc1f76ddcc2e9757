package crypto

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fuzzIdentity is the test identity the FuzzOpen corpus is sealed to.
func fuzzIdentity(f *testing.F) *Identity {
	b, err := os.ReadFile(filepath.Join("testdata", "fuzz-identity.age"))
	if err != nil {
		f.Fatal(err)
	}
	var secret string
	for line := range strings.Lines(string(b)) {
		if !strings.HasPrefix(line, "#") {
			secret = line
		}
	}
	id, err := ParseIdentity(secret)
	if err != nil {
		f.Fatal(err)
	}
	return id
}

// FuzzOpen feeds arbitrary bytes to Open, as a party receives sealed votes,
// features and labels from the network: the result is the plaintext, a
// NotForMeError, or an error matching ErrMalformed — never a panic, and
// never another kind of error a caller would not map to a refusal.
func FuzzOpen(f *testing.F) {
	id := fuzzIdentity(f)
	other, err := GenerateIdentity()
	if err != nil {
		f.Fatal(err)
	}
	for _, rs := range [][]*Recipient{{id.Recipient()}, {other.Recipient(), id.Recipient()}, {other.Recipient()}} {
		b, err := Seal([]byte("a sealed vote batch"), rs...)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)-1])
	}
	f.Add([]byte("age-encryption.org/v1\n-> X25519 \n\n--- \n"))
	f.Add([]byte("-----BEGIN AGE ENCRYPTED FILE-----\n-----END AGE ENCRYPTED FILE-----\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		pt, err := Open(b, id)
		var nm *NotForMeError
		switch {
		case err == nil:
			if len(pt) > len(b) {
				t.Fatalf("%d bytes of plaintext from %d bytes", len(pt), len(b))
			}
		case errors.As(err, &nm):
			if !errors.Is(err, ErrNotForMe) {
				t.Fatalf("a NotForMeError that is not ErrNotForMe: %v", err)
			}
		case !errors.Is(err, ErrMalformed):
			t.Fatalf("untyped error %T: %v", err, err)
		}
	})
}

// FuzzKeyFiles feeds arbitrary files to the loaders of a party's age
// identity and recipient files. An identity that loads has a recipient that
// round-trips through its own file format.
func FuzzKeyFiles(f *testing.F) {
	b, err := os.ReadFile(filepath.Join("testdata", "fuzz-identity.age"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte("# public key: age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p\nage1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p\n"))
	f.Add([]byte("AGE-SECRET-KEY-1\nAGE-SECRET-KEY-1\n"))
	f.Add([]byte("\n\n# only comments\n"))
	dir := f.TempDir() // its files are rewritten for each input
	path := filepath.Join(dir, "key")
	f.Fuzz(func(t *testing.T, file []byte) {
		if err := os.WriteFile(path, file, PrivateFileMode); err != nil {
			t.Fatal(err)
		}
		if id, err := LoadIdentity(path); err == nil {
			r := id.Recipient()
			back := filepath.Join(dir, "recipient")
			if err := WriteRecipient(back, r, true); err != nil {
				t.Fatal(err)
			}
			got, err := LoadRecipient(back)
			if err != nil || !got.Equal(r) {
				t.Fatalf("the identity's recipient %s does not round-trip: %v, %v", r, got, err)
			}
		}
		if r, err := LoadRecipient(path); err == nil {
			if _, err := ParseRecipient(r.String()); err != nil {
				t.Fatalf("loaded recipient %s does not parse: %v", r, err)
			}
		}
	})
}
