package faults

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nzcfed/nzc/federation/launch"
	"github.com/nzcfed/nzc/federation/proctest"
	"github.com/nzcfed/nzc/internal/pause"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/aggregator"
	"github.com/nzcfed/nzc/party/student"
	"github.com/nzcfed/nzc/party/teacher"
)

// TestFaults runs one federation of processes through a sequence of
// faults; after each it checks the ledger against everything the student
// has received. The fast faults run in the project's test command; the
// others (marked slow) with the faults build tag: scripts/faults.sh.
func TestFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a federation of processes")
	}
	slow := func(t *testing.T) {
		t.Helper()
		if !allFaults {
			t.Skip("slow fault: run scripts/faults.sh (go test -tags faults)")
		}
	}
	f := newFed(t, buildBinaries(t))
	f.startAll()
	var results []*student.Result
	special := map[string]want{}
	check := func(t *testing.T) {
		t.Helper()
		f.checkInvariants(t, results, special)
	}
	next := 0 // first query not yet asked
	queries := func(n int) (from int) {
		from, next = next, next+n
		return from
	}

	t.Run("baseline", func(t *testing.T) {
		results = append(results, f.label(queries(2*batchSize), 2*batchSize))
		check(t)
	})

	// Kill -9 the aggregator at each point of the release path of the
	// first batch of a student's run, restart it, and let the run finish.
	for _, point := range []string{aggregator.PausePendingWritten, aggregator.PauseLedgerAnswered, aggregator.PauseCommitRecorded} {
		t.Run("kill-aggregator-at-"+point, func(t *testing.T) {
			if point != aggregator.PauseLedgerAnswered {
				slow(t)
			}
			f.restartAggregator(t, point)
			// Whatever fails below, later faults need an aggregator that
			// is not paused.
			restarted := false
			defer func() {
				if !restarted {
					f.agg.Kill()
					f.startAggregator("")
				}
			}()
			from := queries(3 * batchSize)
			ids := f.batchIDs(from, 3*batchSize)
			// One request in flight: the paused batch is the run's first,
			// and nothing at all can have been released before the kill.
			// (With the default window of 2 the next batch may be charged
			// and released while the first is paused; the invariants
			// checked below hold either way.)
			run := f.startStudent(from, 3*batchSize, "", "--window", "1")
			f.agg.waitLog(t, 60*time.Second, "paused for a fault test")
			rec := f.outboxRecord(ids[0])
			wantState, wantCharges := "pending", 1
			switch point {
			case aggregator.PausePendingWritten:
				wantCharges = 0
			case aggregator.PauseCommitRecorded:
				wantState = "committed"
			}
			if rec["state"] != wantState {
				t.Fatalf("paused at %s: the outbox says %v, want %s", point, rec["state"], wantState)
			}
			// The leader's view: a follower may lag by a moment.
			if got := len(f.leaderLedger(t).charges[ids[0]]); got != wantCharges {
				t.Fatalf("paused at %s: the ledger holds %d charges of the batch, want %d", point, got, wantCharges)
			}
			f.agg.Kill()
			// Report, then restart: a later fault needs an aggregator.
			if m, _ := filepath.Glob(filepath.Join(run.state, "*", "batch-*.json")); len(m) != 0 {
				t.Errorf("the student holds %v although the aggregator died before releasing anything", m)
			}
			start := time.Now()
			f.startAggregator("")
			restarted = true
			res := run.result(t, 2*time.Minute)
			t.Logf("the student's run completed %.1fs after the restart", time.Since(start).Seconds())
			if !res.Batches[0].Replayed {
				t.Errorf("batch 0 was not answered from the outbox")
			}
			if res.Batches[0].AnswersHash != fmt.Sprint(hexOf(rec["answers_hash"])) {
				t.Errorf("batch 0: the student holds labels with hash %s, drawn before the crash were %s", res.Batches[0].AnswersHash, hexOf(rec["answers_hash"]))
			}
			results = append(results, res)
			check(t)
			// The same batches asked again (a fresh state directory): the
			// same labels, and no new charge.
			n := len(f.verifiedLedger(t, f.leader(t)).charges)
			again := f.label(from, 3*batchSize)
			for i, b := range again.Batches {
				if !b.Replayed || !slices.Equal(b.Labels, res.Batches[i].Labels) || b.AnswersHash != res.Batches[i].AnswersHash {
					t.Errorf("batch %d asked again: replayed %v, labels %v, want the earlier %v", i, b.Replayed, b.Labels, res.Batches[i].Labels)
				}
			}
			if m := len(f.verifiedLedger(t, f.leader(t)).charges); m != n {
				t.Errorf("asking the same batches again changed the charged batches from %d to %d", n, m)
			}
		})
	}

	// A hospital dies with its votes on a batch sealed but not sent, and
	// comes back by itself.
	t.Run("kill-hospital-mid-batch", func(t *testing.T) {
		slow(t)
		h := f.hospitals[1]
		h.p.Stop()
		f.startHospital(h, teacher.PauseVotesSealed)
		f.waitConnected(hospitals, 30*time.Second)
		before := accountOf(t, f, h.id)
		from := queries(2 * batchSize)
		// One request in flight, so that the hospital pauses on the run's
		// first batch and is dead for every later one: with two, it could
		// vote on the second batch while paused on the first.
		run := f.startStudent(from, 2*batchSize, "", "--window", "1")
		h.p.waitLog(t, 30*time.Second, "paused for a fault test")
		h.p.Kill()
		res := run.result(t, time.Minute)
		results = append(results, res)
		others := []string{f.hospitals[0].id, f.hospitals[2].id}
		for _, b := range res.Batches {
			special[b.BatchID] = want{hospitals: others}
		}
		check(t)
		if after := accountOf(t, f, h.id); after.Charges != before.Charges || after.Answers != before.Answers {
			t.Errorf("%s was charged while it was dead: %d charges, %d answers before; %d, %d after", h.id, before.Charges, before.Answers, after.Charges, after.Answers)
		}
		// It comes back and reconnects by itself; the next batch is voted
		// and charged by all three.
		f.startHospital(h, "")
		// The aggregator may still count the dead connection until its
		// idle timeout; wait for the new process to register.
		h.p.waitLog(t, 30*time.Second, "registered with the aggregator")
		f.waitConnected(hospitals, 30*time.Second)
		res = f.label(queries(batchSize), batchSize)
		results = append(results, res)
		special[res.Batches[0].BatchID] = want{hospitals: []string{f.hospitals[0].id, f.hospitals[1].id, f.hospitals[2].id}}
		check(t)
	})

	// The aggregator is cut off from a majority of the auditors: the
	// intakes of auditors 2 and 3 drop every datagram, and raft traffic to
	// every auditor is cut, so auditor 1 — the one the aggregator still
	// reaches — has no majority either. The batch's reservation, which the
	// ledger must confirm before any hospital is asked, is not: the student
	// is refused with ledger-unavailable, nothing is asked of the hospitals,
	// drawn or released; after the heal the same batch is reserved,
	// charged once and delivered.
	t.Run("partition-aggregator-from-majority", func(t *testing.T) {
		released := f.metric("nzc_aggregator_labels_released_total")
		for i, a := range f.auditors {
			a.raft.setCut(true)
			if i > 0 {
				a.intake.setCut(true)
			}
		}
		proctest.WaitFor(t, 30*time.Second, "no auditor to lead", func() bool { return f.leaderIndex() < 0 })
		from := queries(batchSize)
		ids := f.batchIDs(from, batchSize)
		run := f.startStudent(from, batchSize, "")
		run.p.waitLog(t, 90*time.Second, "ledger-unavailable")
		if !strings.Contains(run.p.LogText(), "nothing was asked of the hospitals or drawn") {
			t.Errorf("the refusal does not say that nothing was asked of the hospitals or drawn:\n%s", launch.LastLines(run.p.LogText(), 5))
		}
		if got := f.metric("nzc_aggregator_labels_released_total"); got != released {
			t.Errorf("labels released during the partition: %v before, %v now", released, got)
		}
		if f.inOutbox(ids[0]) {
			t.Errorf("during the partition the outbox holds batch %s: its votes were collected without a reservation", ids[0])
		}
		if m, _ := filepath.Glob(filepath.Join(run.state, "*", "batch-*.json")); len(m) != 0 {
			t.Errorf("the student holds %v during the partition", m)
		}
		healed := time.Now()
		for _, a := range f.auditors {
			a.raft.setCut(false)
			a.intake.setCut(false)
		}
		res := run.result(t, 2*time.Minute)
		t.Logf("the student's batch was labelled %.1fs after the heal", time.Since(healed).Seconds())
		results = append(results, res)
		check(t)
	})

	// An auditor is killed, misses charges, and restarts from its durable
	// store: it catches up with the leader. A copy of its data directory
	// with a damaged raft log refuses to start and names the file.
	t.Run("auditor-restart-and-corrupt-store", func(t *testing.T) {
		slow(t)
		li := f.leader(t)
		vi := (li + 1) % len(f.auditors) // a follower
		a := f.auditors[vi]
		a.p.Kill()
		res := f.label(queries(2*batchSize), 2*batchSize)
		results = append(results, res)
		check(t)

		for _, tc := range []struct {
			name    string
			corrupt func(t *testing.T, path string)
		}{
			{"raft.db header overwritten", func(t *testing.T, path string) {
				fh, err := os.OpenFile(path, os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				defer fh.Close()
				if _, err := fh.WriteAt(bytes.Repeat([]byte{0xA5}, 4096), 0); err != nil {
					t.Fatal(err)
				}
			}},
			{"raft.db emptied", func(t *testing.T, path string) {
				if err := os.Truncate(path, 0); err != nil {
					t.Fatal(err)
				}
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				dir := filepath.Join(t.TempDir(), "data")
				if err := os.CopyFS(dir, os.DirFS(a.cfg.DataDir)); err != nil {
					t.Fatal(err)
				}
				bad := filepath.Join(dir, "raft.db")
				tc.corrupt(t, bad)
				out, err := f.tryOneShot(a.id+"-corrupt", "nzc-auditor", nil, "run", "--config", a.cfgPath, "--data-dir", dir)
				if err == nil {
					t.Fatalf("an auditor with a damaged %s started (output %q)", bad, out)
				}
				if !strings.Contains(err.Error(), bad) {
					t.Errorf("the error does not name the damaged file %s:\n%v", bad, err)
				}
			})
		}

		// The real store is intact: restart, catch up, take part again.
		f.startAuditor(a)
		want := f.verifiedLedger(t, li)
		caught := f.verifiedLedgerAtLeast(t, vi, len(want.entries))
		for i := range want.entries {
			if !bytes.Equal(want.entries[i].Command, caught.entries[i].Command) || want.entries[i].Outcome != caught.entries[i].Outcome {
				t.Fatalf("entry %d differs between the leader and the restarted %s", i, a.id)
			}
		}
		res = f.label(queries(batchSize), batchSize)
		results = append(results, res)
		check(t)
		f.verifiedLedgerAtLeast(t, vi, int(res.Batches[0].LedgerIndex)+1)
	})

	// A hospital answers every batch only at its deadline. It costs the
	// federation that one deadline: it is left out of the next batches
	// (and not charged for them), probed by batches that do not wait for
	// it, and /readyz and /metrics name it. Before, every batch waited the
	// whole deadline.
	t.Run("stalling-hospital", func(t *testing.T) {
		h := f.hospitals[2]
		h.p.Stop()
		h.p = f.start(h.id, "nzc-teacher", pause.Every(teacher.PauseVotesSealed), "run", "--config", h.cfgPath)
		h.p.waitLog(t, 30*time.Second, "registered with the aggregator")
		f.waitConnected(hospitals, 30*time.Second)
		const n = 6
		logFrom := len(f.agg.LogText())
		start := time.Now()
		res := f.startStudent(queries(n*batchSize), n*batchSize, "", "--window", "1").result(t, 2*time.Minute)
		took := time.Since(start)
		t.Logf("%d batches beside a hospital stalling to the %v deadline took %v", n, batchDeadline, took)
		results = append(results, res)
		others := []string{f.hospitals[0].id, f.hospitals[1].id}
		for _, b := range res.Batches {
			special[b.BatchID] = want{hospitals: others}
		}
		check(t)
		// Counted from the aggregator's log, not the clock, so that a
		// loaded machine cannot fail it: a batch that asked the hospital
		// and waited out its deadline logs a miss with probe=false; after
		// its first, only a probe it answered in time may ask it again.
		var waited, restored int
		for _, line := range strings.Split(f.agg.LogText()[logFrom:], "\n") {
			if !strings.Contains(line, "hospital="+h.id+" ") {
				continue
			}
			switch {
			case strings.Contains(line, "hospital missed the batch deadline") && strings.Contains(line, "probe=false"):
				waited++
			case strings.Contains(line, "a probed hospital voted in time"):
				restored++
			}
		}
		t.Logf("the batches waited its deadline out %d times; %d probes it answered in time", waited, restored)
		if waited == 0 || waited > 1+restored {
			t.Errorf("%d batches beside a hospital stalling to the %v deadline waited it out %d times (%d probes answered in time): want once", n, batchDeadline, waited, restored)
		}
		if _, why := launch.Ready(context.Background(), f.aggCfg.Ops.Listen); !strings.Contains(why, h.id+" missed the deadline") {
			t.Errorf("/readyz does not name the stalling hospital: %q", why)
		}
		if m := f.metric(`nzc_aggregator_deadlines_missed_total{hospital="` + h.id + `"}`); m < 1 {
			t.Errorf("nzc_aggregator_deadlines_missed_total{hospital=%q} = %v", h.id, m)
		}
		h.p.Stop()
		f.startHospital(h, "")
	})
}

func accountOf(t *testing.T, f *fed, hospital string) ledger.Account {
	t.Helper()
	as, err := f.accounts(f.leader(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		if a.Hospital == hospital {
			return a
		}
	}
	t.Fatalf("no account of %s", hospital)
	return ledger.Account{}
}
