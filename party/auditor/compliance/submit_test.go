package compliance

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/nzcfed/nzc/ledger"
)

// applying is a Proposer that applies each command to a ledger state, as
// the raft leader's state machine would.
type applying struct {
	st       *ledger.State
	proposed int
}

func (p *applying) Submit(_ context.Context, cmd []byte) ([]byte, uint64, error) {
	p.proposed++
	r, err := p.st.Apply(cmd)
	if err != nil {
		return nil, 0, err
	}
	return ledger.EncodeResult(r), r.Index, nil
}

// TestSubmitSuspension proposes an administrator's suspension through POST
// /v1/admin/submit, and refuses, without proposing them, a command that is
// not an administrator's, one the ledger would refuse, and callers other
// than auditors.
func TestSubmitSuspension(t *testing.T) {
	f := newFixture(t, 1)
	p := &applying{st: f.st}
	h := (&API{Cluster: f.cluster, Ledger: f.st, Self: "a1", Proposer: p}).Handler()
	sign := func(b ledger.Body, signer string) string {
		cmd, err := ledger.Sign(b, signer, testKeys.Key(signer))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := json.Marshal(SubmitRequest{Command: cmd})
		return string(body)
	}
	suspend := sign(&ledger.Suspend{Hospital: "h2", Version: 1, Suspended: true, Reason: "burning sessions"}, "admin")
	for _, tc := range []struct {
		name, role, id, body string
		code                 int
		want                 string
	}{
		{"by a hospital", "hospital", "h1", suspend, 403, "may not submit"},
		{"by compliance", "compliance", "compliance", suspend, 403, "may not submit"},
		{"a hospital's own command", "auditor", "a2", sign(&ledger.ChangeCap{Hospital: "h1", Version: 1, CapEpsilon: 9, CapDelta: 1e-5, Timestamp: 1_700_000_000_000_000_000}, "h1"), 403, "not an administrator's command"},
		{"signed by another key", "auditor", "a2", sign(&ledger.Suspend{Hospital: "h2", Version: 1, Suspended: true}, "h1"), 403, "not an administrator's command"},
		{"refused by the ledger", "auditor", "a2", sign(&ledger.Suspend{Hospital: "h2", Version: 2, Suspended: true}, "admin"), 409, "stale-suspension"},
		{"not JSON", "auditor", "a2", "suspend", 400, "must be JSON"},
	} {
		if code, body := serve(h, as("POST", "/v1/admin/submit", tc.role, tc.id, tc.body)); code != tc.code || !strings.Contains(string(body), tc.want) {
			t.Fatalf("%s: %d %s, want %d containing %q", tc.name, code, body, tc.code, tc.want)
		}
	}
	if p.proposed != 0 {
		t.Fatalf("%d refused commands were proposed", p.proposed)
	}
	code, body := serve(h, as("POST", "/v1/admin/submit", "auditor", "a2", suspend))
	if code != 200 || p.proposed != 1 {
		t.Fatalf("suspension: %d %s (%d proposed)", code, body, p.proposed)
	}
	if a, _ := f.st.Account("h2"); !a.Suspended || a.SuspendedReason != "burning sessions" {
		t.Fatalf("h2 after the suspension: %+v", a)
	}
	es, err := f.st.Entries(f.st.TreeSize()-1, f.st.TreeSize())
	if err != nil {
		t.Fatal(err)
	}
	if v, err := DecodeEntry(es[0]); err != nil || v.Command == nil || v.Command.Kind != "suspend" || v.Command.Body["hospital"] != "h2" || v.Command.Body["suspended"] != true || v.Command.Body["reason"] != "burning sessions" {
		t.Fatalf("the suspension's entry as served: %+v %v", v.Command, err)
	}
	if code, body := serve(h, as("POST", "/v1/admin/submit", "auditor", "a2", suspend)); code != 409 || p.proposed != 1 {
		t.Fatalf("replayed suspension: %d %s", code, body)
	}
}
