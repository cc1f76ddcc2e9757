package auditor

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/party/auditor/intake"
	"github.com/nzcfed/nzc/party/auditor/internal/auditortest"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// logSize is one auditor's tree size and its raft log's last index less
// its term: a new leader appends one entry of its own per term (which a
// slow machine may cause), and nothing else grows the raft log while no
// command is proposed.
type logSize struct {
	tree      int64
	indexTerm int64
}

func (c *testCluster) logSizes() []logSize {
	var out []logSize
	for _, a := range c.auds {
		st := a.Node().Status()
		out = append(out, logSize{a.Ledger().State().TreeSize(), int64(st.LastIndex) - int64(st.Term)})
	}
	return out
}

// grew reports whether any auditor's log grew from before to after.
func grew(before, after []logSize) bool {
	for i := range before {
		if after[i].tree != before[i].tree || after[i].indexTerm > before[i].indexTerm {
			return true
		}
	}
	return false
}

// junkCharge is a charge signed by the aggregator that names n hospitals
// no genesis registered: about 12 bytes a hospital.
func junkCharge(t *testing.T, batch string, n int) []byte {
	t.Helper()
	hs := make([]string, n)
	for i := range hs {
		hs[i] = fmt.Sprintf("unknown-%06d", i)
	}
	curve := mechanism.Gaussian(mechanism.DefaultGrid(), 1.4, 40)
	return signed(t, &ledger.Charge{BatchID: batch, Student: "s1", Hospitals: hs, Mechanism: "gnmax",
		Params: mechanism.Params{Mechanism: mechanism.GNMax, Teachers: 250, Classes: 10, Sigma: 40}.LedgerParams(), Queries: 1, Answers: 1,
		Curve: curve.Values(), AnswersHash: sha256.Sum256([]byte(batch)), Timestamp: 1_700_000_001_000_000_000}, "agg")
}

// One auditor's certificate, or the aggregator's, cannot grow the log with
// commands the ledger refuses: 30 junk commands of 1 MB forwarded from a
// follower (its certificate), the same submitted on the leader, commands
// over the ledger's 1 MiB limit, and the aggregator's signed charges
// naming thousands of unknown hospitals through a follower's intake, all
// leave every auditor's log and raft index where they were and the heap
// within 32 MiB. (The forwarding channel proposed any bytes, each refused
// command became an entry keeping its bytes on every auditor, and commands
// over 1 MiB were logged before the ledger refused them: 100 of 1 MB took
// each auditor from ~20 to over 400 MiB resident.)
func TestJunkNeverEntersTheLog(t *testing.T) {
	ids := []string{"a1", "a2", "a3"}
	c := newTestCluster(t, ids, func(cfg *Config) { cfg.Genesis = testGenesis(t, ids) })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, a := range c.auds {
		if err := a.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	converged(t, c.auds)
	li := -1
	for i, a := range c.auds {
		if a.Node().Status().State == "Leader" {
			li = i
		}
	}
	if li < 0 {
		t.Fatal("no leader")
	}
	follower := c.auds[(li+1)%3]
	before := c.logSizes()
	heap := heapInUse()

	rng := rand.New(rand.NewPCG(1, 2))
	junk := make([]byte, 1_000_000)
	for i := range junk {
		junk[i] = byte(rng.Uint32())
	}
	for _, tc := range []struct {
		name string
		via  *Auditor
	}{{"forwarded by a follower", follower}, {"on the leader", c.auds[li]}} {
		for i := range 30 {
			junk[0] = byte(i) // 30 different commands
			_, _, err := tc.via.Node().Submit(ctx, junk)
			var np *raftnode.NotProposedError
			if !errors.As(err, &np) {
				t.Fatalf("%s: junk command %d: %v, want it refused before proposal", tc.name, i, err)
			}
			if r, err := ledger.DecodeResult(np.Refusal); err != nil || r.Code != ledger.CodeMalformed {
				t.Fatalf("%s: refusal %+v (%v), want malformed", tc.name, r, err)
			}
		}
		over := make([]byte, ledger.MaxCommandSize+1)
		if _, _, err := tc.via.Node().Submit(ctx, over); !errors.Is(err, raftnode.ErrCommandTooLarge) {
			t.Fatalf("%s: a command over the ledger's limit: %v, want ErrCommandTooLarge", tc.name, err)
		}
	}

	// The aggregator, through a follower's intake: signed charges naming
	// thousands of unknown hospitals.
	srv := &intake.Server{Node: follower.Node(), Ledger: follower.Ledger(), Receipts: intake.NewReceipts(follower.Ledger().State(), follower.CosignQuorum, 0)}
	for i := range 30 {
		res, err := srv.Propose(ctx, junkCharge(t, fmt.Sprintf("junk-%d", i), 4000))
		if err != nil || res.GetCode() != nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_REJECTED {
			t.Fatalf("junk charge %d through the intake: %v %v, want rejected", i, res, err)
		}
	}

	if after := c.logSizes(); grew(before, after) {
		t.Fatalf("the logs grew:\nbefore %v\nafter  %v", before, after)
	}
	if grown := int64(heapInUse()) - int64(heap); grown > 32<<20 {
		t.Fatalf("the heap grew by %d MiB", grown>>20)
	}
}

// A hospital's account commands are paced across the federation, not per
// auditor: 36 valid cap changes sent round-robin to the three auditors'
// intakes get no more accepted than ledger.AccountBurst at once plus one
// per ledger.AccountEvery, the documented rate. (Each intake limited them
// alone: sent to each in turn, three times the rate passed.)
func TestAccountPaceIsFederationWide(t *testing.T) {
	ids := []string{"a1", "a2", "a3"}
	c := newTestCluster(t, ids, func(cfg *Config) { cfg.Genesis = testGenesis(t, ids) })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, a := range c.auds {
		if err := a.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	intakes := make([]*intake.Server, len(c.auds))
	for i, a := range c.auds {
		intakes[i] = &intake.Server{Node: a.Node(), Ledger: a.Ledger(), Receipts: intake.NewReceipts(a.Ledger().State(), a.CosignQuorum, 0)}
	}
	start := time.Now()
	open := signed(t, &ledger.OpenAccount{Hospital: "h1", CapEpsilon: 8, CapDelta: 1e-5, Timestamp: start.UnixNano()}, "h1")
	if res, err := intakes[0].Propose(ctx, open); err != nil || res.GetCode() != nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_COMMITTED {
		t.Fatalf("opening h1's account: %v %v", res, err)
	}
	accepted, limited := 1, 0 // the opening counts
	for i := range 36 {
		srv := intakes[i%len(intakes)]
		change := signed(t, &ledger.ChangeCap{Hospital: "h1", Version: uint64(accepted), CapEpsilon: 8, CapDelta: 1e-5, Timestamp: time.Now().UnixNano()}, "h1")
		// A replica a commit has not reached yet would find the version
		// stale: wait until it has the last accepted change.
		auditortest.WaitFor(t, 10*time.Second, "the intake's replica to catch up", func() bool {
			for _, a := range srv.Ledger.State().Accounts() {
				if a.Hospital == "h1" {
					return a.CapVersion == uint64(accepted-1)
				}
			}
			return false
		})
		res, err := srv.Propose(ctx, change)
		switch {
		case err != nil:
			t.Fatalf("change %d: %v", i, err)
		case res.GetCode() == nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_COMMITTED:
			accepted++
		case strings.Contains(res.GetReason(), "its limit"):
			limited++
		default:
			t.Fatalf("change %d: %v", i, res)
		}
	}
	elapsed := time.Since(start)
	allowed := ledger.AccountBurst + int(elapsed.Nanoseconds()/ledger.AccountEvery)
	t.Logf("%d account commands accepted, %d rate-limited, in %v (allowed %d)", accepted, limited, elapsed.Round(time.Millisecond), allowed)
	if accepted > allowed || accepted < ledger.AccountBurst {
		t.Fatalf("%d account commands accepted in %v: want at least the burst of %d and at most %d", accepted, elapsed, ledger.AccountBurst, allowed)
	}
}

// Replaying an accepted command never grows the log: 30 copies of an
// accepted charge forwarded with a follower's certificate, 30 submitted on
// the leader and 30 sent by the aggregator through a follower's intake are
// each answered as duplicates naming the original, with its receipt
// through the intake, and every auditor's log and raft index stay where
// they were. (Every replay became a duplicate entry keeping the whole
// command on every auditor, at the rate raft commits.)
func TestReplayNeverEntersTheLog(t *testing.T) {
	ids := []string{"a1", "a2", "a3"}
	c := newTestCluster(t, ids, func(cfg *Config) { cfg.Genesis = testGenesis(t, ids) })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, a := range c.auds {
		if err := a.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	li := -1
	for i, a := range c.auds {
		if a.Node().Status().State == "Leader" {
			li = i
		}
	}
	if li < 0 {
		t.Fatal("no leader")
	}
	follower := c.auds[(li+1)%3]
	srv := &intake.Server{Node: follower.Node(), Ledger: follower.Ledger(), Receipts: intake.NewReceipts(follower.Ledger().State(), follower.CosignQuorum, 0)}
	open := signed(t, &ledger.OpenAccount{Hospital: "h1", CapEpsilon: 8, CapDelta: 1e-5, Timestamp: time.Now().UnixNano()}, "h1")
	if res, err := srv.Propose(ctx, open); err != nil || res.GetCode() != nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_COMMITTED {
		t.Fatalf("opening h1's account: %v %v", res, err)
	}
	params := mechanism.Params{Mechanism: mechanism.GNMax, Teachers: 250, Classes: 10, Sigma: 40}
	cost, err := params.Charge(mechanism.DefaultGrid(), 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	charge := signed(t, &ledger.Charge{BatchID: "b1", Student: "s1", Hospitals: []string{"h1"}, Mechanism: "gnmax",
		Params: params.LedgerParams(), Queries: 1, Answers: 1,
		Curve: cost.RDP.Values(), AnswersHash: sha256.Sum256([]byte("b1")), Timestamp: time.Now().UnixNano()}, "agg")
	res, err := srv.Propose(ctx, charge)
	if err != nil || res.GetCode() != nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_COMMITTED || res.GetReceipt() == nil {
		t.Fatalf("the charge: %v %v", res, err)
	}
	original := res.GetIndex()
	auditortest.WaitFor(t, 20*time.Second, "every auditor to apply the charge", func() bool {
		for _, a := range c.auds {
			if a.Ledger().State().TreeSize() <= int64(original) {
				return false
			}
		}
		return true
	})
	before := c.logSizes()

	for _, tc := range []struct {
		name string
		via  *Auditor
	}{{"forwarded by a follower", follower}, {"on the leader", c.auds[li]}} {
		for i := range 30 {
			_, _, err := tc.via.Node().Submit(ctx, charge)
			var np *raftnode.NotProposedError
			if !errors.As(err, &np) {
				t.Fatalf("%s: replay %d: %v, want it answered without a proposal", tc.name, i, err)
			}
			if r, err := ledger.DecodeResult(np.Refusal); err != nil || r.Status != ledger.StatusDuplicate || r.Original != original {
				t.Fatalf("%s: replay %d answered %+v (%v), want a duplicate of entry %d", tc.name, i, r, err, original)
			}
		}
	}
	for i := range 30 {
		res, err := srv.Propose(ctx, charge)
		if err != nil || res.GetCode() != nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_DUPLICATE || res.GetIndex() != original || res.GetReceipt() == nil {
			t.Fatalf("replay %d through the intake: %v %v, want a duplicate of entry %d with its receipt", i, res, err, original)
		}
	}
	if after := c.logSizes(); grew(before, after) {
		t.Fatalf("replays grew the logs:\nbefore %v\nafter  %v", before, after)
	}
}
