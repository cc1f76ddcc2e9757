package compliance

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nzcfed/nzc/ledger"
)

// removal returns the encoded removal of id until notAfter, signed by the
// named auditors' test keys.
func removal(t *testing.T, id string, notAfter int64, signers ...string) []byte {
	t.Helper()
	r := Removal{Remove: id, NotAfter: notAfter}
	for _, s := range signers {
		r.Signatures = append(r.Signatures, SignRemoval(s, testKeys.Key(s), id, notAfter))
	}
	b, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A removal of an auditor needs the signatures of a majority of the other
// auditors the ledger registered: one auditor's signature alone removes
// nobody, nor does a signature of the removed auditor itself, a repeated
// one, one over another statement, or an expired or far-off removal.
func TestVerifyRemoval(t *testing.T) {
	auditors := []ledger.Party{
		testKeys.Party("a1", ledger.RoleAuditor), testKeys.Party("a2", ledger.RoleAuditor), testKeys.Party("a3", ledger.RoleAuditor),
		testKeys.Party("admin", ledger.RoleAdmin),
	}
	now := time.Unix(1_800_000_000, 0)
	soon := now.Add(time.Hour).Unix()
	forged := Removal{Remove: "a3", NotAfter: soon, Signatures: []RemovalSignature{
		SignRemoval("a1", testKeys.Key("a1"), "a3", soon), SignRemoval("a2", testKeys.Key("a2"), "a2", soon), // a2 signed another removal
	}}
	forgedB, _ := forged.Encode()
	byAdmin := Removal{Remove: "a3", NotAfter: soon, Signatures: []RemovalSignature{
		SignRemoval("a1", testKeys.Key("a1"), "a3", soon), SignRemoval("admin", testKeys.Key("admin"), "a3", soon),
	}}
	byAdminB, _ := byAdmin.Encode()
	for _, tc := range []struct {
		name  string
		id    string
		proof []byte
		ok    bool
	}{
		{"a majority of the others", "a3", removal(t, "a3", soon, "a1", "a2"), true},
		{"one auditor alone", "a3", removal(t, "a3", soon, "a1"), false},
		{"one auditor twice", "a3", removal(t, "a3", soon, "a1", "a1"), false},
		{"one auditor and the removed one", "a3", removal(t, "a3", soon, "a1", "a3"), false},
		{"one auditor and the administrator", "a3", byAdminB, false},
		{"a signature over another removal", "a3", forgedB, false},
		{"a majority, for another auditor", "a2", removal(t, "a3", soon, "a1", "a2"), false},
		{"expired", "a3", removal(t, "a3", now.Add(-time.Second).Unix(), "a1", "a2"), false},
		{"too far ahead", "a3", removal(t, "a3", now.Add(MaxRemovalValidity+time.Hour).Unix(), "a1", "a2"), false},
		{"not a removal", "a3", []byte(`{"remove":"a3","extra":1}`), false},
		{"a majority removing a raft member the ledger does not know", "rogue-1", removal(t, "rogue-1", soon, "a1", "a2"), true},
		{"one auditor removing a raft member the ledger does not know", "rogue-1", removal(t, "rogue-1", soon, "a3"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := VerifyRemoval(auditors, tc.id, tc.proof, now)
			if tc.ok != (err == nil) || err != nil && !errors.Is(err, ErrRemovalNotQuorum) {
				t.Fatalf("VerifyRemoval: %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

// POST /v1/admin/remove-signed takes a removal from any auditor's
// certificate and hands it to the cluster, which checks its signatures:
// one auditor's signature alone is refused and removes nobody.
func TestRemoveSignedOverTheAPI(t *testing.T) {
	f := newFixture(t, 0)
	m, srv := tlsServer(t, f)
	ctx := context.Background()
	soon := time.Now().Add(time.Hour).Unix()
	submit := func(as string, proof []byte) error {
		t.Helper()
		r, err := DecodeRemoval(proof)
		if err != nil {
			t.Fatal(err)
		}
		_, err = clientAs(t, m, srv, as).RemoveSigned(ctx, r)
		return err
	}
	for _, tc := range []struct {
		name, as string
		proof    []byte
		want     string
	}{
		{"one auditor's signature", "auditor-1", removal(t, "a3", soon, "a1"), "1 valid signatures of the 2 other auditors, 2 needed"},
		{"from a compliance officer", "compliance", removal(t, "a3", soon, "a1", "a2"), "an auditor's operator submits it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var se *StatusError
			if err := submit(tc.as, tc.proof); !errors.As(err, &se) || se.Code != http.StatusForbidden || !strings.Contains(se.Message, tc.want) {
				t.Fatalf("got %v, want 403 saying %q", err, tc.want)
			}
		})
	}
	if len(f.cluster.removed) != 0 {
		t.Fatalf("a refused removal changed the cluster: %v", f.cluster.removed)
	}
	if err := submit("auditor-1", removal(t, "a3", soon, "a1", "a2")); err != nil || len(f.cluster.removed) != 1 || f.cluster.removed[0] != "a3" {
		t.Fatalf("a majority's removal: %v, removed %v", err, f.cluster.removed)
	}
}
