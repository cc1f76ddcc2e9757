package bench

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/ml/ensemble"
	"github.com/nzcfed/nzc/ml/model"
	"github.com/nzcfed/nzc/party/aggregator"
	"github.com/nzcfed/nzc/party/auditor"
	"github.com/nzcfed/nzc/party/auditor/intake"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
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
// directory) with their QUIC intakes, an aggregator, three hospitals and the
// student's credentials.
type federation struct {
	dir      string
	m        *crypto.Manifest
	ca       *x509.Certificate
	log      *slog.Logger
	auditors []*auditor.Auditor
	machines []*auditor.Ledger
	nodes    []*raftnode.Node
	intakes  []string
	aggAddr  string
	agg      *aggregator.Aggregator
	lc       *aggregator.LedgerClient
	// hospitalNets are each hospital's teachers.
	hospitalNets [][]*model.Network

	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error
}

func (f *federation) party(role crypto.Role, id string) (crypto.PartyFiles, error) {
	p, ok := f.m.Party(role, id)
	if !ok {
		return p, fmt.Errorf("the bench federation has no %s %s", role, id)
	}
	return p, nil
}

func (f *federation) net(p crypto.PartyFiles) (quicnet.Config, error) {
	cred, err := crypto.LoadCredential(f.m.Path(p.Cert), f.m.Path(p.Key))
	if err != nil {
		return quicnet.Config{}, err
	}
	return quicnet.Config{CA: f.ca, Credential: cred, Logger: f.log.With("party", p.ID)}, nil
}

// run starts fn in the background until close.
func (f *federation) run(ctx context.Context, name string, fn func(ctx context.Context) error) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		if err := fn(ctx); err != nil && !errors.Is(err, context.Canceled) {
			f.mu.Lock()
			f.errs = append(f.errs, fmt.Errorf("%s: %w", name, err))
			f.mu.Unlock()
		}
	}()
}

// close stops every party and removes the federation's directory.
func (f *federation) close() error {
	if f.cancel != nil {
		f.cancel()
	}
	if f.lc != nil {
		_ = f.lc.Close()
	}
	f.wg.Wait()
	_ = os.RemoveAll(f.dir)
	f.mu.Lock()
	defer f.mu.Unlock()
	return errors.Join(f.errs...)
}

// waitFor polls cond until it holds, ctx ends or within passes.
func waitFor(ctx context.Context, within time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(within)
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s", within, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
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
	f := &federation{dir: dir, log: log}
	ctx, f.cancel = context.WithCancel(ctx)
	defer func() {
		if err != nil {
			_ = f.close()
		}
	}()
	if f.m, err = crypto.Provision(dir, crypto.ProvisionSpec{Hospitals: hospitals, Auditors: auditors, Students: 1}); err != nil {
		return nil, err
	}
	if f.ca, err = crypto.LoadCert(f.m.Path(f.m.CACert)); err != nil {
		return nil, err
	}
	if err := f.startAuditors(ctx); err != nil {
		return nil, err
	}
	if err := f.startAggregator(ctx); err != nil {
		return nil, err
	}
	if err := f.startHospitals(ctx, cfg); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *federation) startAuditors(ctx context.Context) error {
	for i, p := range f.m.ByRole(crypto.RoleAuditor) {
		cred, err := crypto.LoadCredential(f.m.Path(p.Cert), f.m.Path(p.Key))
		if err != nil {
			return err
		}
		key, err := crypto.LoadPrivateKey(f.m.Path(p.SigningKey))
		if err != nil {
			return err
		}
		c := auditor.Config{
			ID: p.ID, DataDir: f.m.Path("bench-" + p.ID), RaftAddr: "127.0.0.1:0", IntakeAddr: "127.0.0.1:0",
			CA: f.ca, Credential: cred, SigningKey: key, Logger: f.log.With("auditor", p.ID),
		}
		if i == 0 {
			c.Bootstrap = true
		} else {
			c.Join = []string{f.auditors[0].Addrs().Raft}
		}
		a, err := auditor.New(c)
		if err != nil {
			return err
		}
		f.run(ctx, p.ID, a.Run)
		if i == 0 {
			if err := waitFor(ctx, 30*time.Second, "the first auditor to lead", func() bool { return a.Node().Status().State == "Leader" }); err != nil {
				return err
			}
		}
		f.auditors, f.machines, f.nodes = append(f.auditors, a), append(f.machines, a.Ledger()), append(f.nodes, a.Node())
		f.intakes = append(f.intakes, a.Addrs().Intake)
	}
	if err := waitFor(ctx, 30*time.Second, "three auditors in the cluster", func() bool { return len(f.nodes[0].Status().Peers) == auditors }); err != nil {
		return err
	}
	caKey, err := crypto.LoadPrivateKey(f.m.Path(f.m.CAKey))
	if err != nil {
		return err
	}
	cmds, err := intake.GenesisCommands(f.m, caKey, "bench.nzc/ledger", time.Now())
	if err != nil {
		return err
	}
	return f.auditors[0].ApplyGenesis(ctx, cmds)
}

func (f *federation) startAggregator(ctx context.Context) error {
	p, err := f.party(crypto.RoleAggregator, "aggregator")
	if err != nil {
		return err
	}
	qc, err := f.net(p)
	if err != nil {
		return err
	}
	if f.lc, err = aggregator.NewLedgerClient(qc, f.intakes); err != nil {
		return err
	}
	id, err := crypto.LoadIdentity(f.m.Path(p.AgeIdentity))
	if err != nil {
		return err
	}
	key, err := crypto.LoadPrivateKey(f.m.Path(p.SigningKey))
	if err != nil {
		return err
	}
	f.agg, err = aggregator.New(aggregator.Config{
		ID: p.ID, Identity: id, SigningKey: key, OutboxDir: f.m.Path("bench-outbox"),
		Mechanism: benchMechanism(), Quorum: hospitals, Hospitals: hospitals, BatchDeadline: 10 * time.Minute,
		Ledger: f.lc, Logger: f.log.With("party", p.ID),
	})
	if err != nil {
		return err
	}
	l, err := aggregator.Listen("127.0.0.1:0", qc)
	if err != nil {
		return err
	}
	f.aggAddr = l.Addr().String()
	f.run(ctx, "aggregator", func(ctx context.Context) error {
		defer l.Close()
		return f.agg.Serve(ctx, l)
	})
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
	backoff := quicnet.Backoff{Min: 20 * time.Millisecond, Max: 300 * time.Millisecond}
	for i, p := range f.m.ByRole(crypto.RoleHospital) {
		nets := all[i*len(all)/hospitals : (i+1)*len(all)/hospitals]
		f.hospitalNets = append(f.hospitalNets, nets)
		qc, err := f.net(p)
		if err != nil {
			return err
		}
		id, err := crypto.LoadIdentity(f.m.Path(p.AgeIdentity))
		if err != nil {
			return err
		}
		key, err := crypto.LoadPrivateKey(f.m.Path(p.SigningKey))
		if err != nil {
			return err
		}
		n, err := teacher.New(teacher.Config{ID: p.ID, Aggregator: f.aggAddr, Net: qc, Identity: id, SigningKey: key,
			CapEpsilon: capEpsilon, CapDelta: capDelta, Voter: &netVoter{nets: nets}, Backoff: backoff,
			Logger: f.log.With("party", p.ID)})
		if err != nil {
			return err
		}
		f.run(ctx, p.ID, n.Run)
	}
	if err := waitFor(ctx, 60*time.Second, "3 hospitals to register with the aggregator", func() bool { ok, _ := f.agg.Ready(); return ok }); err != nil {
		return err
	}
	return waitFor(ctx, 60*time.Second, "3 budget accounts", func() bool { return len(f.machines[0].State().Accounts()) == hospitals })
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
