package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/internal/launch"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/ml/ensemble"
	"github.com/nzcfed/nzc/ml/model"
	"github.com/nzcfed/nzc/party/aggregator"
	"github.com/nzcfed/nzc/party/auditor"
	"github.com/nzcfed/nzc/party/auditor/intake"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
	"github.com/nzcfed/nzc/party/teacher"
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
// directory) with their QUIC intakes, an aggregator, three hospitals and the
// student's credentials.
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
	lc       *aggregator.LedgerClient
	// auditorKeys are the auditors' checkpoint verifier keys, pinned by the
	// aggregator and the students.
	auditorKeys []string
	// hospitalNets are each hospital's teachers.
	hospitalNets [][]*model.Network
}

// close stops every party and removes the federation's directory.
func (f *federation) close() error {
	if f.lc != nil {
		_ = f.lc.Close()
	}
	err := f.g.Close()
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
// starts every party but the student.
func startFederation(ctx context.Context, cfg Config, log *slog.Logger) (_ *federation, err error) {
	dir, err := os.MkdirTemp("", "nzc-bench-")
	if err != nil {
		return nil, err
	}
	f := &federation{dir: dir, log: log, g: launch.NewGroup(ctx)}
	defer func() {
		if err != nil {
			_ = f.close()
		}
	}()
	if f.Federation, err = launch.Provision(dir, crypto.ProvisionSpec{Hospitals: hospitals, Auditors: auditors, Students: 1}); err != nil {
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
	f.auditors, err = f.StartAuditors(ctx, f.g, launch.AuditorOptions{
		DataDir: func(id string) string { return f.m.Path("bench-" + id) }, Origin: "bench.nzc/ledger", Log: f.log,
	})
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
		out[h.ID] = (i+1)*cfg.Teachers/hospitals - i*cfg.Teachers/hospitals
	}
	return out
}

func (f *federation) startAggregator(_ context.Context, cfg Config) error {
	p, err := f.Party(crypto.RoleAggregator, "aggregator", f.log)
	if err != nil {
		return err
	}
	if f.lc, err = aggregator.NewLedgerClient(p.Net, launch.Intakes(f.auditors)); err != nil {
		return err
	}
	if f.auditorKeys, err = intake.AuditorKeys(f.m); err != nil {
		return err
	}
	f.agg, err = launch.StartAggregator(f.g, p, "127.0.0.1:0", aggregator.Config{
		OutboxDir: f.m.Path("bench-outbox"), Mechanism: benchMechanism(), Quorum: hospitals, Hospitals: hospitals,
		BatchDeadline: 10 * time.Minute, Ledger: f.lc, AuditorKeys: f.auditorKeys,
		Classes: 10, Ensembles: f.ensembles(cfg),
	})
	if err != nil {
		return err
	}
	f.aggAddr = f.agg.Addr
	return nil
}

// netVoter is a hospital's teachers.
type netVoter struct {
	mu   sync.Mutex // a model.Network is not safe for concurrent use
	nets []*model.Network
}

func (v *netVoter) Teachers() int { return len(v.nets) }
func (v *netVoter) Classes() int  { return 10 }
func (v *netVoter) Dim() int      { return mnistShape().Size() }
func (v *netVoter) Votes(ctx context.Context, x []float32) ([][]int, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return ensemble.Votes(ctx, v.nets, x, 10)
}

func (f *federation) startHospitals(ctx context.Context, cfg Config) error {
	all, err := teachers(cfg.Model, cfg.Teachers, cfg.Seed)
	if err != nil {
		return err
	}
	for i := range hospitals {
		f.hospitalNets = append(f.hospitalNets, all[i*len(all)/hospitals:(i+1)*len(all)/hospitals])
	}
	return f.StartHospitals(ctx, f.g, f.agg, f.machines[0], 60*time.Second, f.log, teacher.Config{CapEpsilon: capEpsilon, CapDelta: capDelta},
		func(i int) teacher.Voter { return &netVoter{nets: f.hospitalNets[i]} })
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
