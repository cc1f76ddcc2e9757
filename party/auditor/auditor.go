package auditor

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/internal/backoff"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/auditor/compliance"
	"github.com/nzcfed/nzc/party/auditor/intake"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
	"github.com/nzcfed/nzc/protocol/quicnet"
)

// Config is everything an Auditor needs; New validates it. Every address
// may be "127.0.0.1:0" (a free port, read back with Addrs).
type Config struct {
	// ID is this auditor's id: the <id> of its certificate's
	// nzc://auditor/<id>, its raft server id and its party in the ledger.
	ID string
	// DataDir holds the raft log and snapshots (see raftnode) and the
	// ledger's history (history.db).
	DataDir string

	// RaftAddr is where raft and the forwarding RPC listen; AdvertiseAddr is
	// what other auditors dial (empty: the bound address).
	RaftAddr      string
	AdvertiseAddr string
	// IntakeAddr is where the aggregator submits charges over QUIC.
	IntakeAddr string
	// APIAddr serves the compliance API over HTTPS, DashboardAddr the
	// dashboard over plain HTTP (keep it on loopback) and OpsAddr /livez,
	// /readyz, /metrics, /status and the checkpoints. Empty serves nothing.
	APIAddr       string
	DashboardAddr string
	OpsAddr       string

	// Bootstrap founds a cluster whose voters are Peers; otherwise a node
	// without raft state asks the auditors at Join to add it.
	Bootstrap bool
	Peers     []raftnode.Peer
	Join      []string
	// Members binds the federation's auditors to their raft addresses (the
	// configured peers, on every auditor): the leader admits a join only
	// for an auditor registered in the ledger, at the address Members binds
	// to it, and at no address Members binds to another. An auditor
	// Members does not list may join at an address it binds to nobody.
	Members []raftnode.Peer

	// CA is the federation CA and Credential this auditor's certificate and
	// key: every listener and every dial uses mutual TLS built from them.
	CA         *x509.Certificate
	Credential *crypto.Credential
	// SigningKey is this auditor's ed25519 checkpoint key.
	SigningKey ed25519.PrivateKey

	// Genesis holds the signed commands that start an empty ledger (see
	// provision.GenesisCommands); Run applies them once, in the background.
	Genesis [][]byte
	// GenesisHash, when set, pins the federation's genesis (its command's
	// digest, ledger.Command.Digest): Run stops with an error naming both
	// when the ledger's accepted genesis is another, whoever proposed it.
	GenesisHash []byte

	// Logger receives structured logs; nil discards.
	Logger *slog.Logger
	// Raft tunes the replication; the zero value takes raftnode's defaults.
	Raft raftnode.Tuning
}

// Validate reports the first problem with c as a *raftnode.ConfigError.
// What raft itself needs is checked by raftnode.
func (c *Config) Validate() error {
	switch {
	case c.ID == "":
		return &raftnode.ConfigError{Field: "ID", Reason: "is required: this auditor's id, as named in its certificate"}
	case c.DataDir == "":
		return &raftnode.ConfigError{Field: "DataDir", Reason: "is required: a directory this auditor owns for its raft log, snapshots and the ledger's history"}
	case c.IntakeAddr == "":
		return &raftnode.ConfigError{Field: "IntakeAddr", Reason: "is required: the address the aggregator submits charges to"}
	case c.CA == nil:
		return &raftnode.ConfigError{Field: "CA", Reason: "is required: the federation CA certificate"}
	case c.Credential == nil:
		return &raftnode.ConfigError{Field: "Credential", Reason: "is required: this auditor's federation certificate and key"}
	case len(c.SigningKey) != ed25519.PrivateKeySize:
		return &raftnode.ConfigError{Field: "SigningKey", Reason: "must be this auditor's ed25519 checkpoint key"}
	}
	// The raft id is the certificate's: an auditor cannot run, and speak to
	// its peers, under another auditor's id.
	p, err := c.Credential.Peer()
	if err != nil {
		return &raftnode.ConfigError{Field: "Credential", Reason: err.Error()}
	}
	if p.Role != crypto.RoleAuditor || p.ID != c.ID {
		return &raftnode.ConfigError{Field: "ID", Reason: fmt.Sprintf("is %q, but the certificate names %s: an auditor runs under the id of its own certificate", c.ID, p)}
	}
	return nil
}

// Auditor is one member of the auditor cluster, assembled: the raft node,
// the ledger it replicates, the charge intake, the compliance API, the
// dashboard, the operations endpoint and the genesis.
//
// New opens the data directory and binds every address; Run serves until
// its context ends. Close releases what New took when Run is never called.
type Auditor struct {
	cfg     Config
	log     *slog.Logger
	node    *raftnode.Node
	ledger  *Ledger
	history *raftnode.History // the ledger's entries and tree, on disk

	intake    *quicnet.Listener
	api       net.Listener // nil when APIAddr is empty
	dashboard net.Listener // nil when DashboardAddr is empty
	ops       net.Listener // nil when OpsAddr is empty

	// genesisDone is closed when Run's application of Config.Genesis has
	// ended (at once when there is none).
	genesisDone chan struct{}
	// cosigned keeps the checkpoint a majority signed (CosignCheckpoint).
	cosigned  *cosignCache
	closeOnce sync.Once
	closeErr  error
}

// Addrs are the addresses an Auditor listens on; empty when not served.
type Addrs struct {
	Raft      string // what other auditors dial
	Intake    string
	API       string
	Dashboard string
	Ops       string
}

// historyFile is the ledger's history in the data directory.
const historyFile = "history.db"

// New validates cfg, opens the data directory, starts raft and binds every
// listener, so the addresses are known (Addrs) before Run. A damaged data
// directory gives a *raftnode.CorruptDataError naming the file.
func New(cfg Config) (*Auditor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var led *Ledger
	rcfg := raftnode.Config{
		DataDir: cfg.DataDir, NodeID: cfg.ID, BindAddr: cfg.RaftAddr, AdvertiseAddr: cfg.AdvertiseAddr,
		ServerTLS: crypto.ServerTLS(cfg.CA, cfg.Credential), ClientTLS: crypto.ClientTLS(cfg.CA, cfg.Credential),
		Bootstrap: cfg.Bootstrap, Peers: cfg.Peers, Join: cfg.Join,
		Logger: log, Tuning: cfg.Raft,
		VerifyRemoval: func(id string, proof []byte) error {
			st := led.State()
			return compliance.VerifyRemoval(st.Auditors(st.TreeSize()), id, proof, led.now())
		},
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("auditor: data directory: %w", err)
	}
	// The ledger's entries and Merkle tree live on disk; raft replays its
	// log over them at start and rewrites nothing it finds there.
	hist, err := raftnode.OpenHistory(filepath.Join(cfg.DataDir, historyFile))
	if err != nil {
		return nil, err
	}
	led, err = NewLedger(ledger.Resume(hist), cfg.ID, cfg.SigningKey, nil)
	if err != nil {
		_ = hist.Close()
		return nil, err
	}
	led.flush = hist.Flush
	a := &Auditor{cfg: cfg, log: log, ledger: led, history: hist, genesisDone: make(chan struct{})}
	a.cosigned = &cosignCache{cosign: func(ctx context.Context) ([]byte, error) { return cosign(ctx, a.node, a.ledger, a.log, readWait()) },
		size: led.state.TreeSize, sizeOf: checkpointSize, timeout: cosignTimeout, keep: cosignKeep, now: led.now}
	if len(cfg.Genesis) == 0 {
		close(a.genesisDone)
	}
	// The ledger over the history just opened.
	rcfg.StateMachine = led
	rcfg.Federation = federation{state: led.State(), members: cfg.Members}
	rcfg.Screen = newScreen(led.State(), led.now)
	rcfg.MaxCommand = ledger.MaxCommandSize
	a.node, err = raftnode.New(rcfg)
	if err != nil {
		_ = hist.Close()
		return nil, err
	}
	if err := a.listen(); err != nil {
		_ = a.Close()
		return nil, err
	}
	return a, nil
}

func (a *Auditor) listen() error {
	var err error
	qc := quicnet.Config{CA: a.cfg.CA, Credential: a.cfg.Credential, Logger: a.log}
	if a.intake, err = intake.Listen(a.cfg.IntakeAddr, qc); err != nil {
		return fmt.Errorf("charge intake: listen on %s: %w (choose a free address with --listen)", a.cfg.IntakeAddr, err)
	}
	if a.api, err = listenTCP("compliance API", a.cfg.APIAddr, "--api"); err != nil {
		return err
	}
	if a.api != nil {
		a.api = tls.NewListener(a.api, crypto.ServerTLS(a.cfg.CA, a.cfg.Credential))
	}
	if a.dashboard, err = listenTCP("dashboard", a.cfg.DashboardAddr, "--dashboard, or --dashboard '' to turn it off"); err != nil {
		return err
	}
	if a.ops, err = listenTCP("ops endpoint", a.cfg.OpsAddr, "ops.listen"); err != nil {
		return err
	}
	return nil
}

// listenTCP listens on addr, or returns a nil listener for an empty addr.
func listenTCP(what, addr, flag string) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: listen on %s: %w (choose a free address with %s)", what, addr, err, flag)
	}
	return ln, nil
}

// Addrs reports the bound addresses.
func (a *Auditor) Addrs() Addrs {
	s := Addrs{Raft: a.node.Addr(), Intake: a.intake.Addr().String()}
	for _, l := range []struct {
		ln  net.Listener
		out *string
	}{{a.api, &s.API}, {a.dashboard, &s.Dashboard}, {a.ops, &s.Ops}} {
		if l.ln != nil {
			*l.out = l.ln.Addr().String()
		}
	}
	return s
}

// Node is the raft node, for status and cluster administration.
func (a *Auditor) Node() *raftnode.Node { return a.node }

// Ledger is this auditor's replica of the ledger.
func (a *Auditor) Ledger() *Ledger { return a.ledger }

// Run bootstraps or joins the cluster as configured, serves the intake,
// the compliance API, the dashboard and the operations endpoint, applies
// the genesis (if any) once the cluster has a leader, and returns when ctx
// ends (nil) or a part fails (its error), with everything closed.
func (a *Auditor) Run(ctx context.Context) error {
	defer a.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return a.node.Run(ctx) })
	srv := &intake.Server{Node: a.node, Ledger: a.ledger, Receipts: intake.NewReceipts(a.ledger.State(), a.CosignQuorum, 0), Logger: a.log}
	g.Go(func() error { return srv.Serve(ctx, a.intake) })
	if err := a.serveHTTP(ctx, g); err != nil {
		cancel()
		_ = g.Wait()
		return err
	}
	if len(a.cfg.Genesis) > 0 {
		g.Go(func() error {
			defer close(a.genesisDone)
			var ge *GenesisError
			switch err := a.ApplyGenesis(ctx, a.cfg.Genesis); {
			case errors.As(err, &ge):
				a.log.Warn("genesis commands not accepted", "err", err)
			case err != nil && ctx.Err() == nil:
				a.log.Error("could not apply the genesis; restart this auditor to try again", "err", err)
			}
			return nil
		})
	}
	if len(a.cfg.GenesisHash) > 0 {
		g.Go(func() error { return a.checkGenesis(ctx) })
	}
	a.log.Info("auditor starting", "raft", a.node.Addr(), "intake", a.intake.Addr().String(), "bootstrap", a.cfg.Bootstrap)
	err := g.Wait()
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// Close stops the node and closes every listener. Run calls it on return;
// call it yourself only when Run is never called.
func (a *Auditor) Close() error {
	a.closeOnce.Do(func() {
		errs := []error{a.node.Close(), a.history.Close()}
		if a.intake != nil {
			errs = append(errs, a.intake.Close())
		}
		for _, ln := range []net.Listener{a.api, a.dashboard, a.ops} {
			if ln == nil {
				continue
			}
			if err := ln.Close(); !errors.Is(err, net.ErrClosed) {
				errs = append(errs, err)
			}
		}
		a.closeErr = errors.Join(errs...)
	})
	return a.closeErr
}

// WaitReady waits until this auditor serves reads — it knows a leader and
// has applied everything committed when it learned of one — and, with a
// Config.Genesis, until Run has applied it (or found it applied).
func (a *Auditor) WaitReady(ctx context.Context) error {
	if err := a.waitLeader(ctx); err != nil {
		return err
	}
	select {
	case <-a.genesisDone:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitLeader waits until the node knows a leader and has caught up.
func (a *Auditor) waitLeader(ctx context.Context) error {
	return poll(ctx, func() bool { return a.node.Ready() == nil })
}

// CosignCheckpoint returns this auditor's latest checkpoint as soon as a
// majority of the auditors signed it, with the signatures of the others
// that answer within readStraggle (an auditor that cannot be reached is
// not waited for): a *ledger.QuorumError (with the partly signed
// checkpoint) if fewer than a majority did, at once when those still
// reachable cannot make one, and a *ForkError if any signed a different
// root for the size. Callers that ask at once share one round, and a
// checkpoint a majority signed is kept while the ledger does not grow, for
// at most cosignKeep.
func (a *Auditor) CosignCheckpoint(ctx context.Context) ([]byte, error) {
	return a.cosigned.get(ctx)
}

// cosignKeep is how long a cosigned checkpoint is served again while the
// ledger does not grow: its cosignatures' time (in seconds) is then at
// most this old.
const cosignKeep = 2 * time.Second

// checkpointSize is a signed checkpoint's size.
func checkpointSize(cp []byte) (int64, bool) {
	c, err := ledger.PeekCheckpoint(cp)
	return c.Size, err == nil
}

// CosignQuorum is CosignCheckpoint that returns as soon as a majority of
// the auditors signed, waiting for one until ctx ends: what a receipt
// needs, without waiting on an auditor that is down.
func (a *Auditor) CosignQuorum(ctx context.Context) ([]byte, error) {
	return cosign(ctx, a.node, a.ledger, a.log, cosignWait{})
}

// pollEvery is how often poll checks its condition.
const pollEvery = 50 * time.Millisecond

// poll waits until cond holds or ctx ends.
func poll(ctx context.Context, cond func() bool) error {
	for !cond() {
		if err := backoff.Wait(ctx, pollEvery); err != nil {
			return err
		}
	}
	return nil
}

// ErrForeignGenesis is matched by Run's error when the ledger's genesis is
// not the one the configuration pins.
var ErrForeignGenesis = errors.New("auditor: the ledger's genesis is not the federation's")

// checkGenesis waits for the ledger's genesis and stops the auditor when it
// is not the configured one: an auditor serves no other federation's log,
// however it reached it.
func (a *Auditor) checkGenesis(ctx context.Context) error {
	st := a.ledger.State()
	var got [32]byte
	if err := poll(ctx, func() bool {
		var ok bool
		got, ok = st.GenesisHash()
		return ok
	}); err != nil {
		return nil // ctx ended first
	}
	if !bytes.Equal(got[:], a.cfg.GenesisHash) {
		return fmt.Errorf("%w: it is %x, the configuration pins %x; this auditor stops rather than serve it (check genesis_hash and the peers it joined)", ErrForeignGenesis, got, a.cfg.GenesisHash)
	}
	a.log.Info("the ledger's genesis is the pinned one", "genesis", fmt.Sprintf("%x", got[:8]))
	return nil
}
