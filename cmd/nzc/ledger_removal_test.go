package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nzcfed/nzc/party/auditor/compliance"
)

// A vanished auditor's removal is signed offline by the other auditors'
// operators and submitted by one of them: auditor-1's signature alone is
// refused and removes nobody; with auditor-2's it removes auditor-3.
func TestLedgerSignedRemoval(t *testing.T) {
	f := newLedgerFixture(t)
	addr, cluster, _ := f.complianceAPI(t, f.log(t, 0), 3)
	file := filepath.Join(t.TempDir(), "remove-auditor-3.json")
	sign := func(as string, i int) {
		t.Helper()
		text, err := runNZC(t, "ledger", "sign-removal", "--remove", "auditor-3", "--as", as, "--key", f.m.Path(f.auditors[i].SigningKey), "--file", file)
		if err != nil || !strings.Contains(text, "removal of auditor-3") {
			t.Fatalf("sign-removal as %s: %v\n%s", as, err, text)
		}
	}
	submit := func() (string, error) {
		return runNZC(t, "ledger", "remove-signed", "--api", addr, "--federation", f.dir, "--as", "auditor-1", "--file", file)
	}
	sign("auditor-1", 0)
	sign("auditor-1", 0) // signing again replaces the signature
	if text, err := submit(); err == nil || !strings.Contains(err.Error(), "1 valid signatures of the 2 other auditors, 2 needed") {
		t.Fatalf("one auditor's signature: %v\n%s", err, text)
	}
	if len(cluster.removed) != 0 {
		t.Fatalf("a refused removal changed the cluster: %v", cluster.removed)
	}
	sign("auditor-2", 1)
	if text, err := submit(); err != nil || !strings.Contains(text, "auditor auditor-3 is not a member") || !slices.Equal(cluster.removed, []string{"auditor-3"}) {
		t.Fatalf("a majority's removal: %v, removed %v\n%s", err, cluster.removed, text)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sign-removal", "--remove", "auditor-3", "--as", "auditor-3", "--key", "k", "--file", file}, "does not count towards its own removal"},
		{[]string{"sign-removal", "--remove", "auditor-2", "--as", "auditor-1", "--key", f.m.Path(f.auditors[0].SigningKey), "--file", file}, "removes auditor-3, not auditor-2"},
		{[]string{"sign-removal", "--remove", "auditor-3", "--as", "auditor-1", "--key", "k", "--file", file, "--valid", "200h"}, "give a duration up to"},
	} {
		if text, err := runNZC(t, append([]string{"ledger"}, tc.args...)...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%v: %v, want %q\n%s", tc.args, err, tc.want, text)
		}
	}
	// A file whose deadline lies months ahead is not co-signed: the
	// signatures would become a valid removal long after they were given.
	far := filepath.Join(t.TempDir(), "far.json")
	b, err := compliance.Removal{Remove: "auditor-3", NotAfter: time.Now().Add(90 * 24 * time.Hour).Unix()}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(far, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if text, err := runNZC(t, "ledger", "sign-removal", "--remove", "auditor-3", "--as", "auditor-1", "--key", f.m.Path(f.auditors[0].SigningKey), "--file", far); err == nil || !strings.Contains(err.Error(), "start a new removal file") {
		t.Fatalf("a deadline 90 days ahead: %v\n%s", err, text)
	}
	if after, _ := os.ReadFile(far); !bytes.Equal(after, b) {
		t.Fatal("the far-dated file was changed")
	}
}
