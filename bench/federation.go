package bench

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/federation/launch"
	"github.com/nzcfed/nzc/federation/provision"
	"github.com/nzcfed/nzc/internal/relay"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/ml/ensemble"
	"github.com/nzcfed/nzc/ml/model"
	"github.com/nzcfed/nzc/party/aggregator"
	"github.com/nzcfed/nzc/party/auditor"
	"github.com/nzcfed/nzc/party/auditor/compliance"
	"github.com/nzcfed/nzc/party/auditor/intake"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
	"github.com/nzcfed/nzc/party/student"
	"github.com/nzcfed/nzc/party/teacher"
	"github.com/nzcfed/nzc/protocol/quicnet"
)

const (
	hospitals = 3
	auditors  = 3
	// capEpsilon is each hospital's cap in the bench: large, since the bench
	// measures speed, not a privacy budget.
	capEpsilon = 1e6
	capDelta   = 1e-5
)

// benchMechanism is the mechanism of the e2e section.
func benchMechanism() mechanism.Params {
	return mechanism.Params{Mechanism: mechanism.GNMax, Sigma: 40}
}

// federation is a whole federation on loopback in this process: three
// auditors (raft over mutual TLS, durable bbolt stores in a temporary
// directory) with their QUIC intakes, an aggregator, three hospitals (or
// withHospitals's number) and the student's credentials.
type federation struct {
	*launch.Federation
	dir      string
	m        *crypto.Manifest
	log      *slog.Logger
	g        *launch.Group
	auditors []*auditor.Auditor
	machines []*auditor.Ledger
	nodes    []*raftnode.Node
	aggAddr  string
	agg      *launch.Aggregator
	lc       *intake.Client
	// auditorKeys are the auditors' checkpoint verifier keys, pinned by the
	// aggregator and the students.
	auditorKeys []string
	// hospitalNets are each hospital's teachers.
	hospitalNets [][]*model.Network
	// wan, when set, holds the relays every link goes through.
	wan *wan
	// studentAddr is where the student dials the aggregator.
	studentAddr string
	// stalling, while set, makes the last hospital answer every batch
	// only at its deadline (the hostile section's stalling runs).
	stalling atomic.Bool
	// mech is the aggregator's mechanism (zero: benchMechanism), and
	// voter, when set, makes hospital i's voter instead of its teachers'
	// networks.
	mech  mechanism.Params
	voter func(i, teachers int) teacher.Voter
	// n is the number of hospitals (zero: hospitals), and teachers the
	// teachers split over them (zero: Config.Teachers).
	n, teachers int
}

// withHospitals makes a federation of n hospitals sharing teachers.
func withHospitals(n, teachers int) func(*federation) {
	return func(f *federation) { f.n, f.teachers = n, teachers }
}

// close stops every party and removes the federation's directory.
func (f *federation) close() error {
	if f.lc != nil {
		_ = f.lc.Close()
	}
	err := f.g.Close()
	if f.wan != nil {
		f.wan.close()
	}
	_ = os.RemoveAll(f.dir)
	return err
}

// waitFor polls cond until it holds, ctx ends or within passes.
func waitFor(ctx context.Context, within time.Duration, what string, cond func() bool) error {
	if err := launch.Poll(ctx, within, 10*time.Millisecond, cond); err != nil {
		return fmt.Errorf("waiting %v for %s: %w", within, what, err)
	}
	return nil
}

// startFederation provisions a federation in a temporary directory and
// starts every party but the student; with w, every link goes through one
// of w's relays.
func startFederation(ctx context.Context, cfg Config, log *slog.Logger, w *wan, opts ...func(*federation)) (_ *federation, err error) {
	dir, err := os.MkdirTemp("", "nzc-bench-")
	if err != nil {
		return nil, err
	}
	f := &federation{dir: dir, log: log, g: launch.NewGroup(ctx), wan: w}
	for _, o := range opts {
		o(f)
	}
	f.n, f.teachers = cmp.Or(f.n, hospitals), cmp.Or(f.teachers, cfg.Teachers)
	defer func() {
		if err != nil {
			_ = f.close()
		}
	}()
	if f.Federation, err = launch.Provision(dir, provision.Spec{Hospitals: f.n, Auditors: auditors, Students: 1}); err != nil {
		return nil, err
	}
	f.m = f.M
	if err := f.startAuditors(ctx); err != nil {
		return nil, err
	}
	if err := f.startAggregator(ctx, cfg); err != nil {
		return nil, err
	}
	if err := f.startHospitals(ctx, cfg); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *federation) startAuditors(ctx context.Context) (err error) {
	o := launch.AuditorOptions{
		DataDir: func(id string) string { return f.m.Path("bench-" + id) }, Origin: "bench.nzc/ledger", Log: f.log,
		EpsilonBound: capEpsilon,
	}
	if f.wan != nil {
		o.Front = f.wan.raftFront
	}
	f.auditors, err = f.StartAuditors(ctx, f.g, o)
	for _, a := range f.auditors {
		f.machines, f.nodes = append(f.machines, a.Ledger()), append(f.nodes, a.Node())
	}
	return err
}

// ensembles is each hospital's registered ensemble size: the bench's
// teachers cut into one share per hospital, as startHospitals cuts them.
func (f *federation) ensembles(cfg Config) map[string]int {
	out := map[string]int{}
	for i, h := range f.M.ByRole(crypto.RoleHospital) {
		out[h.ID] = (i+1)*f.teachers/f.n - i*f.teachers/f.n
	}
	return out
}

func (f *federation) startAggregator(_ context.Context, cfg Config) error {
	p, err := f.Party(crypto.RoleAggregator, "aggregator", f.log)
	if err != nil {
		return err
	}
	intakes := launch.Intakes(f.auditors)
	// nzc init's defaults: a majority of the hospitals, 30 s for their
	// votes.
	deadline, quorum := cmp.Or(cfg.BatchDeadline, DefaultBatchDeadline), f.n/2+1
	if f.wan != nil {
		// Across the wide area a batch goes on without a hospital that has
		// not answered by the deadline, as long as the others make a quorum.
		quorum = f.n - 1
		if intakes, err = f.wan.front(intakes, relay.UDP, &f.wan.intake); err != nil {
			return err
		}
		deadline = wanBatchDeadline
	}
	if f.lc, err = intake.NewClient(p.Net, intakes); err != nil {
		return err
	}
	if f.auditorKeys, err = compliance.AuditorKeys(f.m); err != nil {
		return err
	}
	f.agg, err = launch.StartAggregator(f.g, p, "127.0.0.1:0", aggregator.Config{
		OutboxDir: f.m.Path("bench-outbox"), Mechanism: f.mechanism(), Quorum: quorum, Hospitals: f.n,
		BatchDeadline: deadline, Ledger: f.lc, AuditorKeys: f.auditorKeys,
		Classes: 10, Ensembles: f.ensembles(cfg),
	})
	if err != nil {
		return err
	}
	f.aggAddr, f.studentAddr = f.agg.Addr, f.agg.Addr
	if f.wan != nil {
		addrs, err := f.wan.front([]string{f.agg.Addr}, relay.UDP, &f.wan.student)
		if err != nil {
			return err
		}
		f.studentAddr = addrs[0]
	}
	return nil
}

// mechanism is the aggregator's mechanism.
func (f *federation) mechanism() mechanism.Params {
	if f.mech.Mechanism == "" {
		return benchMechanism()
	}
	return f.mech
}

// DefaultBatchDeadline is the aggregator's batch deadline outside the wan
// section (Config.BatchDeadline's default), nzc init's default.
const DefaultBatchDeadline = 30 * time.Second

// netVoter is a hospital's teachers. While stall is set it answers only
// when the batch's deadline has passed (its context ends).
type netVoter struct {
	mu    sync.Mutex // a model.Network is not safe for concurrent use
	nets  []*model.Network
	stall *atomic.Bool
}

func (v *netVoter) Teachers() int { return len(v.nets) }
func (v *netVoter) Classes() int  { return 10 }
func (v *netVoter) Dim() int      { return mnistShape().Size() }
func (v *netVoter) Votes(ctx context.Context, x []float32) ([][]int, error) {
	if v.stall != nil && v.stall.Load() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return ensemble.Votes(ctx, v.nets, x, 10)
}

func (f *federation) startHospitals(ctx context.Context, cfg Config) error {
	all, err := teachers(cfg.Model, f.teachers, cfg.Seed)
	if err != nil {
		return err
	}
	for i := range f.n {
		f.hospitalNets = append(f.hospitalNets, all[i*len(all)/f.n:(i+1)*len(all)/f.n])
	}
	var dial []string
	if f.wan != nil {
		if dial, err = f.wan.front(slices.Repeat([]string{f.agg.Addr}, f.n), relay.UDP, &f.wan.hospital); err != nil {
			return err
		}
	}
	return f.StartHospitals(ctx, f.g, f.agg, f.machines[0], 60*time.Second+time.Duration(f.n)*time.Second, f.log, teacher.Config{CapEpsilon: capEpsilon, CapDelta: capDelta, AuditorKeys: f.auditorKeys},
		func(i int, c *teacher.Config) {
			if f.voter != nil {
				c.Voter = f.voter(i, len(f.hospitalNets[i]))
			} else {
				v := &netVoter{nets: f.hospitalNets[i]}
				if i == f.n-1 {
					v.stall = &f.stalling
				}
				c.Voter = v
			}
			if dial != nil {
				c.Aggregator = dial[i]
			}
		})
}

// leader returns the auditor that leads the cluster now.
func (f *federation) leader(ctx context.Context) (*raftnode.Node, error) {
	var l *raftnode.Node
	err := waitFor(ctx, 30*time.Second, "a leader", func() bool {
		for _, n := range f.nodes {
			if n.Status().State == "Leader" {
				l = n
				return true
			}
		}
		return false
	})
	return l, err
}

// newStudent is the federation's student with a fresh state directory,
// dialling the aggregator (through its relay when the links are impaired).
func (f *federation) newStudent(batch, window int, backoff quicnet.Backoff) (*student.Client, error) {
	p, err := f.Party(crypto.RoleStudent, f.m.ByRole(crypto.RoleStudent)[0].ID, f.log)
	if err != nil {
		return nil, err
	}
	recipients, err := f.HospitalRecipients()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(f.dir, "student-")
	if err != nil {
		return nil, err
	}
	return student.New(student.Config{ID: p.ID, Aggregator: f.studentAddr, Net: p.Net, Identity: p.Identity, Hospitals: recipients,
		AuditorKeys: f.auditorKeys, BatchSize: batch, Window: window, StateDir: dir, Backoff: backoff, Logger: p.Log})
}

// distinct is a copy of q that differs from every other tag's: the
// student's batch ids come from its queries, and a repeated batch would be
// answered from the aggregator's outbox without any work.
func distinct(q *data.Dataset, tag int) *data.Dataset {
	d := &data.Dataset{X: append([]float32(nil), q.X...), Y: q.Y, Shape: q.Shape, Classes: q.Classes}
	d.X[0] = float32(tag+1) / 1e6
	return d
}
