package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/cmd/internal/config"
	"github.com/nzcfed/nzc/cmd/internal/node"
	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/auditor"
	"github.com/nzcfed/nzc/party/auditor/intake"
)

func newRunCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run this auditor's raft member, ledger and charge intake",
		Long: `run starts this auditor's member of the ledger cluster: raft over mutual TLS
with the federation certificates (only peers whose certificate names the
auditor role are accepted), the ledger as the replicated state with
checkpoints signed by this auditor's key, and the intake where the aggregator
— and only the aggregator — submits charges over QUIC. With bootstrap set it
founds the cluster with its peers; otherwise it joins them. An empty ledger
is started with the signed genesis commands nzc init wrote.

The dashboard address serves a web page of the ledger over plain HTTP
without authentication (loopback by default): each hospital's ε against its
cap over time, charges, refusals, the cosigned checkpoint and a live
verification of the log.

The operations endpoint serves /livez, /readyz, /metrics, /status and
/checkpoint. The API address serves the compliance API over HTTPS with this
auditor's certificate, to clients presenting a certificate of the federation
CA: compliance officers and auditors read /v1/status, /v1/peers,
/v1/accounts, /v1/entries, /v1/checkpoint, /v1/proof/inclusion,
/v1/proof/consistency and /v1/export; hospitals read all but the entries and
the export; this auditor's own certificate may also join or remove peers and
take snapshots (see 'nzc ledger --help').`,
		Example: `  nzc-auditor run --config federation/auditor-1.yaml

  # A replacement auditor joining an existing cluster:
  nzc-auditor run --config auditor-4.yaml --bootstrap=false --peers auditor-1=10.0.0.1:7501`,
		Args: cobra.NoArgs,
	}
	cli.AddConfigFlags(cmd, config.DefaultAuditor())
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := cli.Load(cmd, config.DefaultAuditor())
		if err != nil {
			return err
		}
		ctx := cmd.Context()
		log := cli.NewLogger(cmd.ErrOrStderr(), cfg.Log).With("party", cfg.ID)
		netCfg, err := node.NetConfig(cfg.TLS, log)
		if err != nil {
			return err
		}
		key, err := crypto.LoadPrivateKey(cfg.SigningKey)
		if err != nil {
			return err
		}
		led, err := auditor.NewLedger(ledger.New(), cfg.ID, key)
		if err != nil {
			return err
		}
		acfg := auditor.Config{
			DataDir: cfg.DataDir, NodeID: cfg.ID, BindAddr: cfg.Raft, AdvertiseAddr: cfg.Advertise,
			ServerTLS:    crypto.ServerTLS(netCfg.CA, netCfg.Credential),
			ClientTLS:    crypto.ClientTLS(netCfg.CA, netCfg.Credential),
			StateMachine: led, Logger: log,
		}
		for _, p := range cfg.Peers {
			id, addr, _ := strings.Cut(p, "=")
			switch {
			case cfg.Bootstrap:
				acfg.Bootstrap = true
				acfg.Peers = append(acfg.Peers, auditor.Peer{ID: id, Addr: addr})
			case id != cfg.ID:
				acfg.Join = append(acfg.Join, addr)
			}
		}
		n, err := auditor.New(acfg)
		if err != nil {
			return err
		}
		l, err := intake.Listen(cfg.Listen, netCfg)
		if err != nil {
			_ = n.Close()
			return fmt.Errorf("charge intake: %w (choose a free address with --listen)", err)
		}
		defer l.Close()
		srv := &intake.Server{Node: n, Ledger: led, Receipts: intake.NewReceipts(led.State(), n.CosignCheckpoint, 0), Logger: log}
		go func() {
			if err := srv.Serve(ctx, l); err != nil {
				log.Error("charge intake stopped", "err", err)
			}
		}()
		node.ServeOps(ctx, cfg.Ops.Listen, n.Handler(), log)
		if err := serveAPI(ctx, cfg.API, crypto.ServerTLS(netCfg.CA, netCfg.Credential), apiHandler(n, led, cfg.ID), log); err != nil {
			_ = n.Close()
			return err
		}
		if err := serveDashboard(ctx, cfg.Dashboard, cfg.ID, n, led, log); err != nil {
			_ = n.Close()
			return err
		}
		if cfg.Genesis != "" {
			cmds, err := intake.ReadGenesis(cfg.Genesis)
			if err != nil {
				_ = n.Close()
				return err
			}
			go applyGenesis(ctx, n, led, cmds, n.Status().LastIndex, log)
		}
		log.Info("auditor starting", "raft", cfg.Raft, "intake", l.Addr().String(), "bootstrap", cfg.Bootstrap)
		return n.Run(ctx)
	}
	return cmd
}

// applyGenesis starts a ledger with the federation's genesis commands once
// the cluster has a leader. A ledger that has its genesis is left alone, so
// restarts change nothing: the node first waits until it has
// applied the log it had on disk when it started (startLast), since after a
// restart it can know a leader before it has replayed its own entries. If
// those entries were never committed and a new leader drops them, the wait
// ends after a minute and the ledger's own state decides.
func applyGenesis(ctx context.Context, n *auditor.Node, led *auditor.Ledger, cmds [][]byte, startLast uint64, log *slog.Logger) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	replayDeadline := time.Now().Add(time.Minute)
	for n.Ready() != nil || (n.Status().AppliedIndex < startLast && time.Now().Before(replayDeadline)) {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
	// A ledger with an accepted genesis is left alone. The tree may hold
	// entries without one: commands that reached the ledger before the
	// genesis (a hospital opening its account as soon as it connects) are
	// refused and recorded, and must not stop the genesis from applying.
	if led.State().Origin() != "" {
		return
	}
	for i, c := range cmds {
		b, idx, err := n.Submit(ctx, c)
		if err != nil {
			log.Error("could not apply the genesis; restart this auditor to try again", "command", i, "err", err)
			return
		}
		r, err := auditor.DecodeResult(b)
		if err != nil || r.Status == ledger.StatusRefused {
			log.Warn("genesis command not accepted", "command", i, "index", idx, "result", r.Message, "err", err)
			continue
		}
		log.Info("genesis command applied", "command", i, "result", r.Message)
	}
}
