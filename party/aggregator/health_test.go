package aggregator

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// stallingHospital answers like its honest inner hospital, or, while
// stalling, only when the batch's deadline has passed (its context ends):
// the slowest a hospital can be without being disconnected.
type stallingHospital struct {
	*fakeHospital
	stalling atomic.Bool
	asked    atomic.Int64
}

func (h *stallingHospital) Query(ctx context.Context, q *nzcpb.QueryBatch) (*nzcpb.VoteBatch, error) {
	h.asked.Add(1)
	if h.stalling.Load() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return h.fakeHospital.Query(ctx, q)
}

// A hospital that answers only at the batch deadline costs the federation
// one deadline, not one per batch: it is left out of the following batches
// for a backing-off period, then probed by a batch that does not wait for
// it, and left out for twice as long when it stalls again. /readyz and the
// metrics name it and say why; once it answers a probe in time it is asked
// again and charged with the others.
func TestStallingHospitalCostsOneDeadline(t *testing.T) {
	f := newFixture(t, 3, 1000)
	staller := &stallingHospital{fakeHospital: f.hospitals[2]}
	staller.stalling.Store(true)
	const deadline = 30 * time.Second
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		cfg := f.cfg
		cfg.Quorum, cfg.Hospitals = 2, 3
		cfg.BatchDeadline, cfg.MissBackoff, cfg.MissBackoffMax = deadline, time.Minute, 10*time.Minute
		cfg.Now, cfg.Registry = time.Now, reg
		a, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i, h := range []Hospital{f.hospitals[0], f.hospitals[1], staller} {
			if _, err := a.AddHospital(f.hospitals[i].id, 20, classes, h); err != nil {
				t.Fatal(err)
			}
		}
		a.AddStudent("student-1", f.student.Recipient())

		// batch labels batch id and returns how long it took and whom it
		// was charged to.
		id := byte(0)
		batch := func() (time.Duration, *nzcpb.LabelResponse) {
			t.Helper()
			id++
			req, _ := f.request(t, id, 4)
			start := time.Now()
			resp := label(t, a, req)
			f.open(t, resp)
			return time.Since(start), resp
		}

		took, resp := batch()
		if took != deadline {
			t.Fatalf("the first batch took %v; a hospital stalling to the deadline makes it wait %v", took, deadline)
		}
		f.wantChargedTo(t, &nzcpb.LabelRequest{BatchId: resp.GetBatchId()}, "hospital-1", "hospital-2")
		if _, why := a.Ready(); !strings.Contains(why, "hospital-3 missed the deadline") {
			t.Errorf("/readyz does not name the hospital left out: %q", why)
		}
		if got := metricValue(t, reg, "nzc_aggregator_hospital_left_out", "hospital-3", leftOutMissed); got != 1 {
			t.Errorf("nzc_aggregator_hospital_left_out{hospital-3,missed-deadline} = %v, want 1", got)
		}

		// Ten minutes of batches, one every 10 s: the stalling hospital
		// is probed after 1, 2, 4 minutes… and each probe costs the batch
		// at most the grace (probeGraceFloor here), never a deadline.
		var total time.Duration
		probes := 0
		for range 60 {
			time.Sleep(10 * time.Second)
			asked := staller.asked.Load()
			took, resp := batch()
			total += took
			if staller.asked.Load() != asked {
				probes++
				if took > probeGraceFloor {
					t.Fatalf("a probe of the stalling hospital held the batch %v, more than the grace %v", took, probeGraceFloor)
				}
			} else if took != 0 {
				t.Fatalf("a batch that left the stalling hospital out took %v", took)
			}
			if !slices.Contains(resp.GetLeftOut(), "hospital-3") && staller.asked.Load() == asked {
				t.Fatalf("batch %d left hospital-3 out without naming it: %v", id, resp.GetLeftOut())
			}
		}
		if probes < 2 || probes > 4 {
			t.Errorf("%d probes in 10 min with a backing-off period from 1 min doubling: want 2 to 4", probes)
		}
		if total > time.Duration(probes)*probeGraceFloor {
			t.Errorf("60 batches after the first miss waited %v in all", total)
		}
		if got := metricValue(t, reg, "nzc_aggregator_deadlines_missed_total", "hospital-3"); got != float64(1+probes) {
			t.Errorf("nzc_aggregator_deadlines_missed_total{hospital-3} = %v, want %d", got, 1+probes)
		}

		// It recovers: the next probe finds it answering in time, and from
		// then on it is asked, waited for and charged.
		staller.stalling.Store(false)
		time.Sleep(10 * time.Minute)
		for range 2 {
			took, resp := batch()
			if took != 0 {
				t.Errorf("a batch with every hospital answering took %v", took)
			}
			f.wantChargedTo(t, &nzcpb.LabelRequest{BatchId: resp.GetBatchId()}, "hospital-1", "hospital-2", "hospital-3")
		}
		if _, why := a.Ready(); strings.Contains(why, "left out") {
			t.Errorf("/readyz still names a hospital left out: %q", why)
		}
	})
}

// When fewer hospitals than the quorum are in good standing, the batch
// cannot go on without the others: it asks and waits for every hospital,
// as before any missed a deadline.
func TestBenchedHospitalsAreAskedWhenTheQuorumNeedsThem(t *testing.T) {
	f := newFixture(t, 3, 1000)
	staller := &stallingHospital{fakeHospital: f.hospitals[2]}
	staller.stalling.Store(true)
	synctest.Test(t, func(t *testing.T) {
		cfg := f.cfg
		cfg.Quorum, cfg.BatchDeadline, cfg.Now = 2, time.Second, time.Now
		a, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		hs := []Hospital{f.hospitals[0], f.hospitals[1], staller}
		for i, h := range hs {
			if _, err := a.AddHospital(f.hospitals[i].id, 20, classes, h); err != nil {
				t.Fatal(err)
			}
		}
		a.AddStudent("student-1", f.student.Recipient())
		req, _ := f.request(t, 1, 4)
		label(t, a, req) // hospital-3 misses
		f.hospitals[1].block = true
		req, _ = f.request(t, 2, 4)
		_, err = a.Label(t.Context(), "student-1", req)
		if err == nil {
			t.Fatal("a batch with one hospital answering met the quorum of 2")
		}
		// The refusal names who did not vote, and who was left out.
		for _, w := range []string{"hospital-2 did not answer in the 1s waited", "left out: hospital-3"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("the quorum refusal does not say %q: %v", w, err)
			}
		}
		// hospital-2 missed now too: only hospital-1 is in good standing,
		// so the next batch asks all three, and a recovered one counts.
		staller.stalling.Store(false)
		asked := staller.asked.Load()
		req, _ = f.request(t, 3, 4)
		resp := label(t, a, req)
		if staller.asked.Load() == asked {
			t.Fatal("the benched hospital was not asked although the quorum needed it")
		}
		f.wantChargedTo(t, &nzcpb.LabelRequest{BatchId: resp.GetBatchId()}, "hospital-1", "hospital-3")
	})
}

// metricValue is the value of the gauge or counter name of reg whose label
// values are labels, in order; 0 when there is none.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, fam := range fams {
		if fam.GetName() != name {
			continue
		}
		for _, m := range fam.GetMetric() {
			var got []string
			for _, l := range m.GetLabel() {
				got = append(got, l.GetValue())
			}
			if slices.Equal(got, labels) {
				return m.GetGauge().GetValue() + m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
