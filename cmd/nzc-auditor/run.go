package main

import (
	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/cmd/internal/node"
	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/federation/config"
	"github.com/nzcfed/nzc/party/auditor"
)

func newRunCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run this auditor's raft member, ledger and charge intake",
		Long: `run starts this auditor's member of the ledger cluster: raft over mutual TLS
with the federation certificates (auditor certificates only), the ledger with
checkpoints signed by this auditor's key, and the intake where the aggregator
— and only the aggregator — submits charges over QUIC (a hospital may submit
there only its own account commands). With bootstrap set it
founds the cluster with its peers; otherwise it joins them. An empty ledger
is started with the signed genesis commands nzc init wrote.

The dashboard serves the ledger over plain HTTP without authentication
(loopback by default): each hospital's ε against its cap over time, charges,
refusals, the cosigned checkpoint and a live verification. The operations
endpoint serves /livez, /readyz, /metrics, /status and /checkpoint. The API
serves the compliance API over HTTPS to federation certificates: compliance
officers and auditors read everything, hospitals all but the entries and the
export; this auditor's own certificate may also join or remove peers and
take snapshots (see 'nzc ledger --help').`,
		Example: `  nzc-auditor run --config federation/auditor-1.yaml

  # A replacement auditor joining an existing cluster:
  nzc-auditor run --config auditor-4.yaml --bootstrap=false --peers auditor-1=10.0.0.1:7501`,
		Args: cobra.NoArgs,
	}
	return cli.Configured(cmd, config.DefaultAuditor(), func(cmd *cobra.Command, cfg config.Auditor) error {
		ac := auditor.Config{ID: cfg.ID, DataDir: cfg.DataDir, RaftAddr: cfg.Raft, AdvertiseAddr: cfg.Advertise,
			IntakeAddr: cfg.Listen, APIAddr: cfg.API, DashboardAddr: cfg.Dashboard, OpsAddr: cfg.Ops.Listen,
			Bootstrap: cfg.Bootstrap}
		log, nc, err := node.Start(cmd.ErrOrStderr(), cfg.ID, cfg.Log, cfg.Ops, cfg.TLS)
		if err != nil {
			return err
		}
		ac.Logger, ac.CA, ac.Credential = log, nc.CA, nc.Credential
		if ac.SigningKey, err = crypto.LoadPrivateKey(cfg.SigningKey); err != nil {
			return err
		}
		if err := loadGenesis(cfg, &ac); err != nil {
			return err
		}
		ac.Members, ac.Peers, ac.Join = peers(cfg)
		a, err := auditor.New(ac)
		if err != nil {
			return err
		}
		return a.Run(cmd.Context())
	})
}
