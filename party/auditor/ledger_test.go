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
	"github.com/nzcfed/nzc/party/auditor/raftnode"
	"github.com/nzcfed/nzc/party/internal/fedtest"
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
	return submitCmd(ctx, t, a, signed(t, b, signer))
}

// submitCmd submits the signed command cmd through a's raft node and
// returns the ledger's result: for a command refused before it was
// proposed, the ledger's refusal.
func submitCmd(ctx context.Context, t *testing.T, a *Auditor, cmd []byte) ledger.Result {
	t.Helper()
	res, _, err := a.Node().Submit(ctx, cmd)
	var np *raftnode.NotProposedError
	if errors.As(err, &np) {
		res, err = np.Refusal, nil
	}
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
	// The auditors check an account command's stamp against their clocks.
	must(1, &ledger.OpenAccount{Hospital: "h1", CapEpsilon: 2, CapDelta: 1e-5, Timestamp: time.Now().UnixNano()}, "h1")
	must(2, &ledger.RegisterStudent{Student: "s1", Timestamp: ts}, "admin")
	curve := mechanism.Gaussian(mechanism.DefaultGrid(), math.Sqrt2, 40).Times(100)
	charge := func(batch string, cv mechanism.Curve) *ledger.Charge {
		return &ledger.Charge{BatchID: batch, Student: "s1", Hospitals: []string{"h1"}, Mechanism: "gnmax",
			Params: mechanism.Params{Mechanism: mechanism.GNMax, Teachers: 250, Classes: 10, Sigma: 40}.LedgerParams(), Queries: 100, Answers: 100,
			Curve: cv.Values(), AnswersHash: sha256.Sum256([]byte(batch)), Timestamp: 1_700_000_001_000_000_000}
	}
	must(1, charge("batch-1", curve), "agg")
	// A retry of the same batch through another auditor is a duplicate,
	// answered from the original's entry without a new one.
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
		return ledgers[0].State().TreeSize() == 5
	})
	keys, err := ledgers[0].State().AuditorKeys(5)
	if err != nil {
		t.Fatal(err)
	}
	// Each auditor signed the latest checkpoint with its own key.
	auditortest.WaitFor(t, 5*time.Second, "every auditor to sign size 5", func() bool {
		for _, l := range ledgers {
			cp, err := l.Checkpoint(0)
			if err != nil {
				return false
			}
			if p, _ := ledger.PeekCheckpoint(cp); p.Size != 5 {
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
	if p, err := ledger.PeekCheckpoint(rec.Body.Bytes()); rec.Code != 200 || err != nil || p.Size != 5 {
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
		if !slices.Equal(sc.Signers, []string{"hospital-a", "hospital-b", "regulator"}) || sc.Size != 5 {
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
	// With two of three auditors down there is no majority to sign (a
	// round of its own: CosignCheckpoint may serve the checkpoint all three
	// signed a moment ago, see TestCosignCacheSharesAndKeeps). A reader's
	// round says so as soon as both are found unreachable, not when its
	// context ends.
	// With one down, a reader's round returns the majority's checkpoint
	// without waiting for the dead auditor until its context ends.
	_ = c.stop[2]()
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	a0 := c.auds[0]
	two, err := cosign(sctx, a0.node, a0.ledger, a0.log, readWait())
	if sc, oerr := ledger.OpenCheckpoint(two, keys); err != nil || oerr != nil || !slices.Equal(sc.Signers, []string{"hospital-a", "hospital-b"}) || sctx.Err() != nil {
		t.Fatalf("cosign with %s down: %v %v %+v (context: %v), want the two others' signatures before the context ends", auditors[2], err, oerr, sc, sctx.Err())
	}
	_ = c.stop[1]()
	partial, err := cosign(sctx, a0.node, a0.ledger, a0.log, readWait())
	var qe *ledger.QuorumError
	if !errors.As(err, &qe) || len(qe.Signers) != 1 || partial == nil || sctx.Err() != nil {
		t.Fatalf("cosign with two auditors down: %v (context: %v), want a QuorumError with one signer before the context ends", err, sctx.Err())
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
	// Restored from the snapshot completed with its entries (a backup).
	full, err := a.CompleteSnapshot(snap)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewLedger(ledger.New(), "regulator", ledgerKeys.Key("regulator"), clock)
	if err := b.Restore(full); err != nil {
		t.Fatal(err)
	}
	ca, _ := a.Checkpoint(0)
	for _, r := range []*Ledger{b} {
		cb, err := r.Checkpoint(0)
		if err != nil || string(ca) != string(cb) {
			t.Fatalf("restored ledger signs %q (%v), want %q", cb, err, ca)
		}
	}
	// The cosignature carries the auditor's clock.
	keys, _ := a.State().AuditorKeys(1)
	sc, err := ledger.OpenCheckpoint(ca, keys)
	if err != nil || sc.Time != 1_800_000_000 {
		t.Fatalf("checkpoint time %d (%v), want the clock's 1800000000", sc.Time, err)
	}
}

// A cosignature's time is one at which the checkpoint was at least the
// largest tree the auditor had: asked later for an old prefix, an auditor
// stamps the time its log grew past it, not now. So an auditor that
// gathers fresh cosignatures on a rolled-back prefix gets old times, and
// verify --max-age refuses it.
func TestCheckpointTimeIsWhenItWasTheLargest(t *testing.T) {
	now := int64(1_800_000_000)
	clock := func() time.Time { return time.Unix(now, 0) }
	l := regulatorLedger(t, clock)
	for i := range 3 { // sizes 2, 3, 4 at now + 100, + 200, + 300
		now += 100
		if _, err := l.Apply(uint64(i+2), []byte("filler")); err != nil {
			t.Fatal(err)
		}
		l.AppliedBatch(uint64(i + 2))
	}
	now += 5000
	keys, _ := l.State().AuditorKeys(1)
	for _, tc := range []struct {
		size uint64
		want int64
	}{
		{0, now}, {4, now}, // the whole log: now
		{3, now - 5000},       // grew past 3 when it reached 4
		{1, now - 5300 + 100}, // grew past 1 when it reached 2
	} {
		b, err := l.Checkpoint(tc.size)
		if err != nil {
			t.Fatal(err)
		}
		sc, err := ledger.OpenCheckpoint(b, keys)
		if err != nil || sc.Time != tc.want {
			t.Fatalf("size %d: time %d (%v), want %d", tc.size, sc.Time, err, tc.want)
		}
	}
	// A size older than the sizes remembered claims no freshness.
	l.mu.Lock()
	l.growth = l.growth[2:]
	l.mu.Unlock()
	b, _ := l.Checkpoint(1)
	if sc, _ := ledger.OpenCheckpoint(b, keys); sc.Time != 0 {
		t.Fatalf("a forgotten size was stamped %d, want 0", sc.Time)
	}
}

// A peer asking for a size not applied yet is answered as soon as the log
// reaches it, and told ErrNoCheckpoint if it does not before its deadline.
func TestWaitCheckpointAnswersOnceApplied(t *testing.T) {
	l := regulatorLedger(t, nil)

	short, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	if _, err := l.WaitCheckpoint(short, 2); !errors.Is(err, ErrNoCheckpoint) {
		t.Fatalf("size 2 never applied: %v, want ErrNoCheckpoint", err)
	}

	type answer struct {
		cp  []byte
		err error
	}
	got := make(chan answer, 1)
	go func() {
		cp, err := l.WaitCheckpoint(t.Context(), 3)
		got <- answer{cp, err}
	}()
	for i := uint64(2); i <= 3; i++ {
		if _, err := l.Apply(i, []byte("filler")); err != nil {
			t.Fatal(err)
		}
		l.AppliedBatch(i)
	}
	a := <-got
	if a.err != nil {
		t.Fatal(a.err)
	}
	keys, _ := l.State().AuditorKeys(1)
	if sc, err := ledger.OpenCheckpoint(a.cp, keys); err != nil || sc.Size != 3 {
		t.Fatalf("checkpoint of size %d (%v), want 3", sc.Size, err)
	}
}

// regulatorLedger is the ledger of auditor "regulator" with its genesis
// applied (size 1), on clock.
func regulatorLedger(t *testing.T, clock func() time.Time) *Ledger {
	t.Helper()
	l, err := NewLedger(ledger.New(), "regulator", ledgerKeys.Key("regulator"), clock)
	if err != nil {
		t.Fatal(err)
	}
	parties := []ledger.Party{ledgerKeys.Party("admin", ledger.RoleAdmin), ledgerKeys.Party("regulator", ledger.RoleAuditor)}
	if _, err := l.Apply(1, signed(t, &ledger.Genesis{Origin: "o", Parties: parties, Timestamp: 1}, "admin")); err != nil {
		t.Fatal(err)
	}
	l.AppliedBatch(1)
	return l
}

// testPeers are the other auditors as a restoring Ledger reaches them: the
// first serves the history, and each signs its own checkpoints.
type testPeers []*Ledger

func (p testPeers) Entries(_ context.Context, from, to int64) ([][]byte, error) {
	return p[0].Entries(from, to)
}

func (p testPeers) Checkpoints(_ context.Context, size uint64) [][]byte {
	var out [][]byte
	for _, l := range p {
		if cp, err := l.Checkpoint(size); err == nil {
			out = append(out, cp)
		}
	}
	return out
}

// An auditor restoring a snapshot another sent adopts its log only when a
// majority of the other auditors signed that log's tree: one auditor that
// sends a snapshot of a log without one of the charges, and serves that
// log's entries (each of them signed and replaying), cannot have it
// adopted, because the honest auditors sign only their own tree.
func TestRestoreNeedsTheOthersToVouch(t *testing.T) {
	ids := []string{"a1", "a2", "a3"}
	clock := func() time.Time { return time.Unix(1_800_000_000, 0) }
	charge := func(batch string) []byte {
		return signed(t, &ledger.Charge{BatchID: batch, Student: "s1", Hospitals: []string{"h1"}, Mechanism: "gnmax",
			Params: mechanism.Params{Mechanism: mechanism.GNMax, Teachers: 250, Classes: 10, Sigma: 400}.LedgerParams(), Queries: 1, Answers: 1,
			Curve: mechanism.Gaussian(mechanism.DefaultGrid(), math.Sqrt2, 400).Values(), AnswersHash: sha256.Sum256([]byte(batch)), Timestamp: 10}, "agg")
	}
	cmds := append(testGenesis(t, ids), signed(t, &ledger.OpenAccount{Hospital: "h1", CapEpsilon: 8, CapDelta: 1e-5, Timestamp: 3}, "h1"),
		charge("b1"), charge("b2"), charge("b3"))
	log := func(id string, skip int) *Ledger {
		l, err := NewLedger(ledger.New(), id, ledgerKeys.Key(id), clock)
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range cmds {
			if i == skip {
				continue
			}
			if r, err := l.state.Apply(c); err != nil || r.Status != ledger.StatusAccepted {
				t.Fatalf("command %d: %v %v", i, r, err)
			}
		}
		return l
	}
	honest1, honest2, forger := log("a1", -1), log("a2", -1), log("a1", len(cmds)-2) // without b2
	forged, _ := forger.Snapshot()

	victim, _ := NewLedger(ledger.New(), "a3", ledgerKeys.Key("a3"), clock)
	err := victim.RestoreHistory(t.Context(), forged, false, testPeers{forger, honest2})
	if !errors.Is(err, ErrUnvouched) || victim.State().TreeSize() != 0 {
		t.Fatalf("a log one auditor vouches for: %v, %d entries kept; want ErrUnvouched and nothing", err, victim.State().TreeSize())
	}
	if _, aerr := victim.Apply(0, charge("b4")); aerr == nil {
		t.Fatal("a ledger whose restore was refused applied a command")
	}
	t.Log(err)

	// The log the others signed is adopted.
	real, _ := honest1.Snapshot()
	restored, _ := NewLedger(ledger.New(), "a3", ledgerKeys.Key("a3"), clock)
	if err := restored.RestoreHistory(t.Context(), real, false, testPeers{honest1, honest2}); err != nil {
		t.Fatal(err)
	}
	if restored.State().RootHash() != honest1.State().RootHash() {
		t.Fatal("the restored log is not the others'")
	}
	// Vouched for by the auditor restoring alone, it is not.
	self, _ := NewLedger(ledger.New(), "a2", ledgerKeys.Key("a2"), clock)
	if err := self.RestoreHistory(t.Context(), real, false, testPeers{honest2}); !errors.Is(err, ErrUnvouched) {
		t.Fatalf("a log only the restoring auditor signed: %v, want ErrUnvouched", err)
	}
}
