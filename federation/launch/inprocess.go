package launch

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/federation/provision"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/aggregator"
	"github.com/nzcfed/nzc/party/auditor"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
	"github.com/nzcfed/nzc/party/teacher"
	"github.com/nzcfed/nzc/protocol/quicnet"
)

// This file starts parties in this process, for the bench and the
// end-to-end tests: the same parties as the binaries, without processes.

// Group runs parties in this process, each in its own goroutine, until
// Close.
type Group struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error
}

// NewGroup returns a group whose parties run until ctx ends or Close.
func NewGroup(ctx context.Context) *Group {
	g := &Group{}
	g.ctx, g.cancel = context.WithCancel(ctx)
	return g
}

// Go runs fn until Close; an error other than its cancellation is kept, and
// Close returns it.
func (g *Group) Go(name string, fn func(context.Context) error) { g.Start(name, fn) }

// Start is Go, and returns a function that stops this party alone (as a
// crash would, from outside) and waits for it.
func (g *Group) Start(name string, fn func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(g.ctx)
	done := make(chan struct{})
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		defer close(done)
		if err := fn(ctx); err != nil && !errors.Is(err, context.Canceled) {
			g.mu.Lock()
			g.errs = append(g.errs, fmt.Errorf("%s: %w", name, err))
			g.mu.Unlock()
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// Close stops every party, waits for them and returns their errors.
func (g *Group) Close() error {
	g.cancel()
	g.wg.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	return errors.Join(g.errs...)
}

// Party is one party's key material, loaded from the federation directory.
type Party struct {
	crypto.PartyFiles
	Net        quicnet.Config // the federation CA and the party's credential
	Identity   *crypto.Identity
	SigningKey ed25519.PrivateKey // nil for the roles without one
	Log        *slog.Logger
}

// Party loads the key material of the party with the given role and id;
// log (with the party's id) is its logger.
func (f *Federation) Party(role crypto.Role, id string, log *slog.Logger) (*Party, error) {
	pf, ok := f.M.Party(role, id)
	if !ok {
		return nil, fmt.Errorf("the federation in %s has no %s %s", f.M.Dir, role, id)
	}
	p := &Party{PartyFiles: pf, Log: log.With("party", id)}
	cred, err := crypto.LoadCredential(f.M.Path(pf.Cert), f.M.Path(pf.Key))
	if err != nil {
		return nil, err
	}
	p.Net = quicnet.Config{CA: f.CA, Credential: cred, Logger: p.Log}
	if p.Identity, err = crypto.LoadIdentity(f.M.Path(pf.AgeIdentity)); err != nil {
		return nil, err
	}
	if pf.SigningKey != "" {
		if p.SigningKey, err = crypto.LoadPrivateKey(f.M.Path(pf.SigningKey)); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// Aggregator is an aggregator running in a Group.
type Aggregator struct {
	*aggregator.Aggregator
	Addr string
	Stop func() // stops it alone, as a crash would
}

// StartAggregator starts the aggregator p in g on addr ("127.0.0.1:0" for a
// free port); cfg's identity, keys and logger come from p.
func StartAggregator(g *Group, p *Party, addr string, cfg aggregator.Config) (*Aggregator, error) {
	cfg.ID, cfg.Identity, cfg.SigningKey, cfg.Logger = p.ID, p.Identity, p.SigningKey, p.Log
	a, err := aggregator.New(cfg)
	if err != nil {
		return nil, err
	}
	l, err := aggregator.Listen(addr, p.Net)
	if err != nil {
		return nil, err
	}
	stop := g.Start(p.ID, func(ctx context.Context) error {
		defer l.Close()
		return a.Serve(ctx, l)
	})
	return &Aggregator{Aggregator: a, Addr: l.Addr().String(), Stop: stop}, nil
}

// StartHospitals starts every hospital of the federation in g with cfg,
// reconnecting to agg quickly, the i-th as each(i, &its config) sets it
// (its Voter at least; the address it dials, agg's unless each changes it);
// a hospital the federation's genesis registers sends it as its
// registration, as nzc init configures it; and waits,
// at most within, until agg has them all and the ledger replica led holds
// their budget accounts.
func (f *Federation) StartHospitals(ctx context.Context, g *Group, agg *Aggregator, led *auditor.Ledger, within time.Duration, log *slog.Logger, cfg teacher.Config, each func(i int, c *teacher.Config)) error {
	hs := f.M.ByRole(crypto.RoleHospital)
	genesis := f.Genesis
	if genesis == nil {
		var err error
		if genesis, err = os.ReadFile(f.M.Path(provision.GenesisFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("the federation's genesis: %w", err)
		}
	}
	for i, pf := range hs {
		p, err := f.Party(crypto.RoleHospital, pf.ID, log)
		if err != nil {
			return err
		}
		c := cfg
		c.ID, c.Net, c.Identity, c.SigningKey, c.Logger = p.ID, p.Net, p.Identity, p.SigningKey, p.Log
		if c.Genesis == nil && genesis != nil {
			if _, err := teacher.GenesisRegistration(genesis, p.ID, p.SigningKey); err == nil {
				c.Genesis = genesis
			}
		}
		c.Aggregator, c.Backoff = agg.Addr, quicnet.Backoff{Min: 20 * time.Millisecond, Max: 300 * time.Millisecond}
		each(i, &c)
		n, err := teacher.New(c)
		if err != nil {
			return err
		}
		g.Go(p.ID, n.Run)
	}
	if err := Poll(ctx, within, 10*time.Millisecond, func() bool { ok, _ := agg.Ready(); return ok }); err != nil {
		return fmt.Errorf("waiting for %d hospitals to register with the aggregator: %w", len(hs), err)
	}
	if err := Poll(ctx, within, 10*time.Millisecond, func() bool { return len(led.State().Accounts()) == len(hs) }); err != nil {
		return fmt.Errorf("waiting for %d budget accounts: %w", len(hs), err)
	}
	return nil
}

// HospitalRecipients returns the hospitals' age recipients, in manifest
// order: a student seals its queries to them.
func (f *Federation) HospitalRecipients() ([]*crypto.Recipient, error) {
	var out []*crypto.Recipient
	for _, h := range f.M.ByRole(crypto.RoleHospital) {
		r, err := crypto.ParseRecipient(h.AgeRecipient)
		if err != nil {
			return nil, fmt.Errorf("hospital %s: %w", h.ID, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// AuditorOptions say how StartAuditors runs the auditors.
type AuditorOptions struct {
	// DataDir is where the auditor id keeps its raft state.
	DataDir func(id string) string
	// Raft tunes replication (zero: raftnode's defaults).
	Raft raftnode.Tuning
	// Origin names the ledger in its genesis.
	Origin string
	// EpsilonBound is the genesis's bound on every hospital's cap ε (0:
	// ledger.DefaultEpsilonBound); its δ bound is ledger.DefaultDeltaBound.
	EpsilonBound float64
	// Log is every auditor's logger (with its id).
	Log *slog.Logger
	// Front, when set, puts something in front of each auditor's raft
	// address (a relay): it is called before the auditor starts and returns
	// the address the auditor advertises to its peers, and bound, called
	// once the auditor listens, with the address to forward to.
	Front func(id string) (advertise string, bound func(addr string), err error)
}

// StartAuditors starts every auditor of the federation in g on free
// loopback ports (raft, intake): the first founds the cluster, the others
// join it. Once all are members it applies the federation's genesis,
// signed with the CA key, through the last one (a follower forwards to the
// leader). It returns the auditors in manifest order.
func (f *Federation) StartAuditors(ctx context.Context, g *Group, o AuditorOptions) ([]*auditor.Auditor, error) {
	ps := f.M.ByRole(crypto.RoleAuditor)
	if len(ps) == 0 {
		return nil, fmt.Errorf("the federation in %s has no auditors", f.M.Dir)
	}
	var as []*auditor.Auditor
	for i, pf := range ps {
		p, err := f.Party(crypto.RoleAuditor, pf.ID, o.Log)
		if err != nil {
			return nil, err
		}
		cfg := auditor.Config{
			ID: p.ID, DataDir: o.DataDir(p.ID), RaftAddr: "127.0.0.1:0", IntakeAddr: "127.0.0.1:0",
			CA: f.CA, Credential: p.Net.Credential, SigningKey: p.SigningKey, Logger: o.Log.With("auditor", p.ID), Raft: o.Raft,
		}
		if i == 0 {
			cfg.Bootstrap = true
		} else {
			cfg.Join = []string{as[0].Addrs().Raft}
		}
		var bound func(string)
		if o.Front != nil {
			if cfg.AdvertiseAddr, bound, err = o.Front(p.ID); err != nil {
				return nil, err
			}
		}
		a, err := auditor.New(cfg)
		if err != nil {
			return nil, err
		}
		if bound != nil {
			bound(a.Node().ListenAddr())
		}
		g.Go(p.ID, a.Run)
		as = append(as, a)
		if i == 0 {
			if err := Poll(ctx, 30*time.Second, 10*time.Millisecond, func() bool { return a.Node().Status().State == "Leader" }); err != nil {
				return nil, fmt.Errorf("waiting for %s to lead: %w", p.ID, err)
			}
		}
	}
	if err := Poll(ctx, 30*time.Second, 10*time.Millisecond, func() bool { return len(as[0].Node().Status().Peers) == len(as) }); err != nil {
		return nil, fmt.Errorf("waiting for %d auditors in the cluster: %w", len(as), err)
	}
	adminKey, err := f.M.AdminSigningKey()
	if err != nil {
		return nil, err
	}
	bound := o.EpsilonBound
	if bound == 0 {
		bound = ledger.DefaultEpsilonBound
	}
	cmds, err := provision.BoundedGenesisCommands(f.M, adminKey, o.Origin, time.Now(), bound, ledger.DefaultDeltaBound, 0)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := as[len(as)-1].ApplyGenesis(ctx, cmds); err != nil {
		return nil, err
	}
	if f.Genesis, err = json.Marshal(cmds); err != nil {
		return nil, err
	}
	return as, nil
}

// Intakes returns the auditors' charge intake addresses, for the
// aggregator's ledger client.
func Intakes(as []*auditor.Auditor) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.Addrs().Intake
	}
	return out
}
