package crypto

import (
	"net/url"
	"testing"
)

func FuzzParsePeerURI(f *testing.F) {
	for _, s := range []string{"nzc://hospital/hospital-1", "nzc://aggregator/aggregator", "nzc://x/y", "nzc://hospital/a/b", "nzc://hospital:1/a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := url.Parse(s)
		if err != nil {
			return
		}
		p, err := parsePeerURI(u)
		if err != nil {
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("accepted invalid peer %v from %q: %v", p, s, err)
		}
		if p.String() != p.URI().String() {
			t.Fatalf("String %q != URI %q", p.String(), p.URI().String())
		}
		back, err := parsePeerURI(p.URI())
		if err != nil || back != p {
			t.Fatalf("round trip of %v: %v, %v", p, back, err)
		}
	})
}

func FuzzParseKeyPEM(f *testing.F) {
	k, _ := GenerateSigningKey(seeded(1))
	good, _ := EncodeKeyPEM(k)
	f.Add(good)
	f.Add([]byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		key, err := ParseKeyPEM(data)
		if err == nil && len(key) != 64 {
			t.Fatalf("key of length %d", len(key))
		}
		_, _ = ParseCertPEM(data)
		_, _ = ParsePublicKeyPEM(data)
	})
}
