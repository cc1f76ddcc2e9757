package auditor

import (
	"context"
	"crypto/sha256"
	"errors"
	"math"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/party/auditor/internal/auditortest"
	"github.com/nzcfed/nzc/party/auditor/internal/fedtest"
)

// ledgerKeys are the parties' keys.
const ledgerKeys = fedtest.Keys("auditor test key ")

func signed(t *testing.T, b ledger.Body, signer string) []byte {
	t.Helper()
	cmd, err := ledger.Sign(b, signer, ledgerKeys.Key(signer))
	if err != nil {
		t.Fatal(err)
	}
	return cmd
}

// submitTo submits b, signed by signer, through a's raft node and returns
// the ledger's result.
func submitTo(ctx context.Context, t *testing.T, a *Auditor, b ledger.Body, signer string) ledger.Result {
	t.Helper()
	res, _, err := a.Node().Submit(ctx, signed(t, b, signer))
	if err != nil {
		t.Fatal(err)
	}
	r, err := ledger.DecodeResult(res)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestLedgerOverTLSCluster(t *testing.T) {
	auditors := []string{"hospital-a", "hospital-b", "regulator"}
	c := newTestCluster(t, auditors, nil)
	ledgers := c.ledgers()
	for _, l := range ledgers {
		if _, err := l.Checkpoint(0); !errors.Is(err, ErrNoCheckpoint) {
			t.Fatalf("checkpoint before genesis: %v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	parties := []ledger.Party{
		ledgerKeys.Party("admin", ledger.RoleAdmin), ledgerKeys.Party("agg", ledger.RoleAggregator),
		ledgerKeys.Party("h1", ledger.RoleHospital),
		ledgerKeys.Party("hospital-a", ledger.RoleAuditor), ledgerKeys.Party("hospital-b", ledger.RoleAuditor),
		ledgerKeys.Party("regulator", ledger.RoleAuditor), ledgerKeys.Party("s1", ledger.RoleStudent),
	}
	slices.SortFunc(parties, func(a, b ledger.Party) int {
		if a.ID < b.ID {
			return -1
		}
		return 1
	})
	ts := int64(1_700_000_000_000_000_000)
	submit := func(node int, b ledger.Body, signer string) ledger.Result {
		t.Helper()
		ts++
		return submitTo(ctx, t, c.auds[node], b, signer)
	}
	must := func(node int, b ledger.Body, signer string) {
		t.Helper()
		if r := submit(node, b, signer); r.Status != ledger.StatusAccepted {
			t.Fatalf("%s: %s %s %s", b.Kind(), r.Status, r.Code, r.Message)
		}
	}
	must(0, &ledger.Genesis{Origin: "test.nzc/ledger", Parties: parties, Timestamp: ts}, "admin")
	must(1, &ledger.OpenAccount{Hospital: "h1", CapEpsilon: 2, CapDelta: 1e-5, Timestamp: ts}, "h1")
	must(2, &ledger.RegisterStudent{Student: "s1", Timestamp: ts}, "admin")
	curve := mechanism.Gaussian(mechanism.DefaultGrid(), math.Sqrt2, 40).Times(100)
	charge := func(batch string, cv mechanism.Curve) *ledger.Charge {
		return &ledger.Charge{BatchID: batch, Student: "s1", Hospitals: []string{"h1"}, Mechanism: "gnmax",
			Params: mechanism.Params{Mechanism: mechanism.GNMax, Teachers: 250, Classes: 10, Sigma: 40}.LedgerParams(), Queries: 100, Answers: 100,
			Curve: cv.Values(), AnswersHash: sha256.Sum256([]byte(batch)), Timestamp: 1_700_000_001_000_000_000}
	}
	must(1, charge("batch-1", curve), "agg")
	// A retry of the same batch through another auditor is a duplicate.
	if r := submit(2, charge("batch-1", curve), "agg"); r.Status != ledger.StatusDuplicate {
		t.Fatalf("retried batch: %s, want duplicate", r.Status)
	}
	// A charge over the cap is refused, with the figures.
	r := submit(0, charge("batch-2", curve.Times(10)), "agg")
	if r.Status != ledger.StatusRefused || r.Err() == nil || r.CapEpsilon != 2 {
		t.Fatalf("over-cap charge: %+v", r)
	}

	auditortest.WaitFor(t, 10*time.Second, "every ledger to hold the same log", func() bool {
		for _, l := range ledgers[1:] {
			if l.State().TreeSize() != ledgers[0].State().TreeSize() || l.State().RootHash() != ledgers[0].State().RootHash() {
				return false
			}
		}
		return ledgers[0].State().TreeSize() == 6
	})
	keys, err := ledgers[0].State().AuditorKeys(6)
	if err != nil {
		t.Fatal(err)
	}
	// Each auditor signed the latest checkpoint with its own key.
	auditortest.WaitFor(t, 5*time.Second, "every auditor to sign size 6", func() bool {
		for _, l := range ledgers {
			cp, err := l.Checkpoint(0)
			if err != nil {
				return false
			}
			if p, _ := ledger.PeekCheckpoint(cp); p.Size != 6 {
				return false
			}
		}
		return true
	})
	for i, l := range ledgers {
		cp, _ := l.Checkpoint(0)
		_, err := ledger.OpenCheckpoint(cp, keys)
		var qe *ledger.QuorumError
		if !errors.As(err, &qe) || len(qe.Signers) != 1 || qe.Signers[0] != auditors[i] {
			t.Fatalf("auditor %s's own checkpoint: %v, want one signature by itself", auditors[i], err)
		}
	}
	// The operations endpoint serves the latest checkpoint.
	h2, err := c.auds[2].opsHandler()
	if err != nil {
		t.Fatal(err)
	}
	h1, err := c.auds[1].opsHandler()
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h2.ServeHTTP(rec, httptest.NewRequest("GET", "/checkpoint", nil))
	if p, err := ledger.PeekCheckpoint(rec.Body.Bytes()); rec.Code != 200 || err != nil || p.Size != 6 {
		t.Fatalf("GET /checkpoint: %d %v %+v", rec.Code, err, p)
	}
	rec = httptest.NewRecorder()
	h1.ServeHTTP(rec, httptest.NewRequest("GET", "/checkpoint/cosigned", nil))
	if sc, err := ledger.OpenCheckpoint(rec.Body.Bytes(), keys); rec.Code != 200 || err != nil || len(sc.Signers) != 3 {
		t.Fatalf("GET /checkpoint/cosigned: %d %v %+v", rec.Code, err, sc)
	}
	// Any auditor gathers the others' signatures over mutual TLS.
	for i, a := range c.auds {
		cos, err := a.CosignCheckpoint(ctx)
		if err != nil {
			t.Fatalf("cosign on %s: %v", auditors[i], err)
		}
		sc, err := ledger.OpenCheckpoint(cos, keys)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(sc.Signers, []string{"hospital-a", "hospital-b", "regulator"}) || sc.Size != 6 {
			t.Fatalf("cosigned checkpoint: %+v", sc)
		}
	}
	// A past size is signed on request and matches the tree.
	old, err := c.auds[1].Node().PeerCheckpoint(ctx, c.auds[2].Addrs().Raft, 3)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := ledger.PeekCheckpoint(old)
	if root, _ := ledgers[0].State().TreeHash(3); p.Size != 3 || p.Root != root {
		t.Fatalf("checkpoint of size 3: %+v", p)
	}
	if _, err := c.auds[1].Node().PeerCheckpoint(ctx, c.auds[2].Addrs().Raft, 99); err == nil {
		t.Fatal("a peer signed a size it has not applied")
	}
	// With two of three auditors down there is no majority to sign.
	_ = c.stop[1]()
	_ = c.stop[2]()
	sctx, scancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer scancel()
	partial, err := c.auds[0].CosignCheckpoint(sctx)
	var qe *ledger.QuorumError
	if !errors.As(err, &qe) || len(qe.Signers) != 1 || partial == nil {
		t.Fatalf("cosign with two auditors down: %v, want a QuorumError with one signer", err)
	}
}

func TestLedgerSnapshotRestoreSigns(t *testing.T) {
	clock := func() time.Time { return time.Unix(1_800_000_000, 0) }
	a, _ := NewLedger(ledger.New(), "regulator", ledgerKeys.Key("regulator"), clock)
	parties := []ledger.Party{ledgerKeys.Party("admin", ledger.RoleAdmin), ledgerKeys.Party("regulator", ledger.RoleAuditor)}
	if _, err := a.Apply(1, signed(t, &ledger.Genesis{Origin: "o", Parties: parties, Timestamp: 1}, "admin")); err != nil {
		t.Fatal(err)
	}
	snap, err := a.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewLedger(ledger.New(), "regulator", ledgerKeys.Key("regulator"), clock)
	if err := b.Restore(snap); err != nil {
		t.Fatal(err)
	}
	ca, _ := a.Checkpoint(0)
	cb, err := b.Checkpoint(0)
	if err != nil || string(ca) != string(cb) {
		t.Fatalf("restored ledger signs %q (%v), want %q", cb, err, ca)
	}
	// The cosignature carries the auditor's clock.
	keys, _ := a.State().AuditorKeys(1)
	sc, err := ledger.OpenCheckpoint(ca, keys)
	if err != nil || sc.Time != 1_800_000_000 {
		t.Fatalf("checkpoint time %d (%v), want the clock's 1800000000", sc.Time, err)
	}
}
