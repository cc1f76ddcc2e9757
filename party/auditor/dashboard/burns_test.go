package dashboard

import (
	"crypto/sha256"
	"slices"
	"strings"
	"testing"

	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
)

// openSVT opens an nzc-svt session of K refusals over hospitals.
func (f *fed) openSVT(id string, hospitals []string, k int) mechanism.Params {
	f.t.Helper()
	p := mechanism.Params{Mechanism: mechanism.NZCSVT, Teachers: 250, Classes: 10, Scale: 1, Threshold: 240, MaxRefusals: k}
	c, err := p.Charge(mechanism.DefaultGrid(), 0, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	f.must(&ledger.OpenSession{SessionID: id, Student: "s1", Hospitals: hospitals, Mechanism: string(p.Mechanism),
		Params: p.LedgerParams(), MaxRefusals: uint64(k), Curve: c.RDP.Values(), Delta: c.Delta, Timestamp: f.now()}, "agg")
	return p
}

// sessionCharge charges a batch of queries, answers of them answered, in
// session id.
func (f *fed) sessionCharge(id, batch string, p mechanism.Params, hospitals []string, queries, answers uint64) {
	f.t.Helper()
	f.must(&ledger.Charge{BatchID: batch, Student: "s1", Hospitals: hospitals, Session: id, Mechanism: string(p.Mechanism),
		Params: p.LedgerParams(), Queries: queries, Answers: answers, Curve: make([]float64, mechanism.DefaultGrid().Len()),
		AnswersHash: sha256.Sum256([]byte(batch)), Timestamp: f.now()}, "agg")
}

// The dashboard shows, from the ledger's session entries alone, each
// nzc-svt session that refused its K queries having answered fewer than
// the minimum (by default K), and marks a suspended account. Before, the
// burn was only in the aggregator's log and metrics, and a restart of the
// aggregator lost it.
func TestBurntSessionsAndSuspensionsShown(t *testing.T) {
	f := newFedWithCaps(t, 50, 50)
	both := []string{"h1", "h2"}
	p := f.openSVT("svt-good", both, 3)
	f.sessionCharge("svt-good", "g1", p, both, 10, 9)
	f.sessionCharge("svt-good", "g2", p, both, 10, 8) // K refusals after 17 answers: not burnt
	p = f.openSVT("svt-burnt", both, 3)
	f.sessionCharge("svt-burnt", "b1", p, []string{"h1"}, 2, 1)
	f.sessionCharge("svt-burnt", "b2", p, both, 2, 0) // 3 refusals, 1 answer
	p = f.openSVT("svt-open", both, 3)
	f.sessionCharge("svt-open", "o1", p, both, 2, 0) // 2 refusals of 3: not over yet
	f.must(&ledger.Suspend{Hospital: "h2", Version: 1, Suspended: true, Reason: "voting against the others", Timestamp: f.now()}, "admin")

	d := newDashboard(t, LedgerSource(f.st, f.cosign(auditorIDs...)), Options{})
	var ov Overview
	get(t, d, "/api/overview", &ov)
	if len(ov.Burnt) != 1 {
		t.Fatalf("burnt sessions %+v, want svt-burnt only", ov.Burnt)
	}
	b := ov.Burnt[0]
	if b.Session != "svt-burnt" || b.Refusals != 3 || b.Answers != 1 || !slices.Equal(b.Hospitals, both) || !strings.Contains(b.Text, "nzc init suspend") {
		t.Fatalf("burnt session %+v", b)
	}
	for _, a := range ov.Accounts {
		if a.Suspended != (a.Hospital == "h2") || (a.Suspended && !strings.Contains(a.SuspendedText, "voting against the others")) {
			t.Fatalf("account %s: suspended=%v %q", a.Hospital, a.Suspended, a.SuspendedText)
		}
	}

	// A higher minimum of answers also counts the session that answered 17.
	d = newDashboard(t, LedgerSource(f.st, f.cosign(auditorIDs...)), Options{SVTMinAnswers: 20})
	get(t, d, "/api/overview", &ov)
	if len(ov.Burnt) != 2 || ov.Burnt[0].Session != "svt-good" {
		t.Fatalf("with svt_min_answers 20: %+v", ov.Burnt)
	}
}
