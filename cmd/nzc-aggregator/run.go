package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/cmd/internal/node"
	"github.com/nzcfed/nzc/cmd/internal/sizing"
	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/federation/config"
	"github.com/nzcfed/nzc/internal/ops"
	"github.com/nzcfed/nzc/internal/pause"
	"github.com/nzcfed/nzc/party/aggregator"

	"github.com/nzcfed/nzc/party/auditor/intake"
)

func newRunCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Serve hospitals and students: fan out, aggregate, charge the ledger, then release",
		Long: `run listens for hospitals and students over QUIC with mutual TLS. For each
label batch it asks the connected hospitals for their votes (waiting at most
batch_deadline), requires at least quorum of them, runs the mechanism, writes
the sealed answers and the signed charge to the outbox, commits the charge to
the auditors' ledger, and only then returns the labels. A batch is charged
once: retries and restarts deliver the stored answers.

/readyz says what the aggregator waits for ("waiting for 2 of 3 hospitals").`,
		Example: `  nzc-aggregator run --config federation/aggregator.yaml

  # A stricter quorum and the paper's mechanism, honestly charged:
  nzc-aggregator run --config federation/aggregator.yaml --quorum 3 \
    --mechanism-name nzc --mechanism-noise laplace --mechanism-scale 20 --mechanism-constant 1000`,
		Args: cobra.NoArgs,
	}
	return cli.Configured(cmd, config.DefaultAggregator(), func(cmd *cobra.Command, cfg config.Aggregator) error {
		log, netCfg, err := node.Start(cmd.ErrOrStderr(), "aggregator", cfg.Log, cfg.Ops, cfg.TLS)
		if err != nil {
			return err
		}
		peer, err := netCfg.Credential.Peer()
		if err != nil {
			return err
		}
		id, err := crypto.LoadIdentity(cfg.AgeIdentity)
		if err != nil {
			return err
		}
		key, err := crypto.LoadPrivateKey(cfg.SigningKey)
		if err != nil {
			return err
		}
		lc, err := intake.NewClient(netCfg, cfg.Auditors)
		if err != nil {
			return err
		}
		defer lc.Close()
		sizes, err := cfg.EnsembleSizes()
		if err != nil {
			return err
		}
		// What the mechanism allows the federation's ensemble: refused when
		// it cannot release labels at all, said otherwise.
		if k := sizing.Ensemble(max(cfg.Hospitals, cfg.Quorum), cfg.Teachers, sizes); k > 0 {
			if err := sizing.Sound(cfg.MechanismParams(), k, cfg.Classes); err != nil {
				return err
			}
			tc := config.DefaultTeacher()
			if plan, err := sizing.Check(cfg.MechanismParams(), k, cfg.Classes, tc.CapEpsilon, tc.CapDelta); err != nil {
				log.Warn("the mechanism releases no label within a hospital's default cap; hospitals need larger caps", "err", err)
			} else {
				log.Info("mechanism plan: "+plan.String(), "teachers", k, "labels_per_default_cap", plan.Labels, "cap_epsilon", tc.CapEpsilon, "cap_delta", tc.CapDelta,
					"lead_for_clean_vote", plan.Lead, "unanimous_answered", plan.UnanimousAnswered)
				// A batch goes on with only the quorum's hospitals voting:
				// say what the plan's answer rate is then.
				if kq := sizing.QuorumEnsemble(cfg.Hospitals, cfg.Quorum, cfg.Teachers, sizes); kq > 0 && kq < k {
					if at, all := sizing.UnanimousAnswered(cfg.MechanismParams(), kq), plan.UnanimousAnswered; at < all {
						log.Info(fmt.Sprintf("with only the quorum's %d teachers voting, a query they agree on unanimously is answered with probability %.2f (%.2f with all %d)", kq, at, all, k),
							"quorum_teachers", kq, "unanimous_answered_at_quorum", at)
					}
				}
				if plan.Few() {
					log.Warn(fmt.Sprintf("the mechanism pays for only %d labels within a hospital's default cap ε=%g for %d teachers, too few to train a student on; hospitals need more teachers or larger caps (nzc init warns with the sizes that pay for more)", plan.Labels, tc.CapEpsilon, k),
						"labels_per_default_cap", plan.Labels, "teachers", k)
				}
			}
		}
		reg := ops.NewRegistry()
		a, err := aggregator.New(aggregator.Config{
			Classes: cfg.Classes, Ensemble: cfg.Teachers, Ensembles: sizes,
			ID: peer.ID, Identity: id, SigningKey: key, OutboxDir: cfg.Outbox,
			Mechanism: cfg.MechanismParams(), Fallback: cfg.FallbackParams(), Quorum: cfg.Quorum, Hospitals: cfg.Hospitals,
			BatchDeadline: cfg.BatchDeadline, LedgerTimeout: cfg.LedgerTimeout, Ledger: lc, AuditorKeys: cfg.AuditorKeys,
			SVTMinAnswers: cfg.SVTMinAnswers, Suspended: cfg.Suspended,
			Logger: log, Registry: reg, Pause: pause.Hook(log),
		})
		if err != nil {
			return err
		}
		l, err := aggregator.Listen(cfg.Listen, netCfg)
		if err != nil {
			return fmt.Errorf("%w (choose a free address with --listen)", err)
		}
		defer l.Close()
		node.ServeOps(cmd.Context(), cfg.Ops.Listen, ops.Handler(reg, a.Ready), log)
		_, status := a.Ready()
		attrs := []any{"addr", l.Addr().String(), "mechanism", cfg.Mechanism.Mechanism, "params", cfg.MechanismParams().String(), "quorum", cfg.Quorum, "status", status}
		if f := cfg.FallbackParams(); f.Mechanism != "" {
			attrs = append(attrs, "fallback", f.Mechanism, "fallback_params", f.String())
		}
		log.Info("aggregator listening", attrs...)
		return a.Serve(cmd.Context(), l)
	})
}
