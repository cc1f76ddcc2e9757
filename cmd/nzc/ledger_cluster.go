package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/auditor/compliance"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
)

const adminAsHelp = "the auditor whose API --api is: administration needs that auditor's own certificate"

func newLedgerPeersCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "peers",
		Short: "List the auditors of the raft cluster, as one auditor knows them",
		Long: `List the members of the auditors' raft cluster as the auditor at --api knows
them: id, raft address, which one leads, whether the ledger registered it
(so that its signature counts towards a checkpoint's majority) and, for the
compliance and auditor roles, the verifier key the ledger registered for it.
Without --api every auditor of the federation directory is asked (as 'nzc
ledger status' does) and the list is the one of the auditor serving the
largest view a majority cosigned; those that did not answer are named on
standard error.`,
		Example: `  nzc ledger peers --federation fed
  nzc ledger peers --api 127.0.0.1:7700 --federation fed
  nzc ledger peers --api 127.0.0.1:7700 --federation fed --format json`,
		Args: cobra.NoArgs,
	}
	readCommand(cmd, (*compliance.Client).Peers, printPeers)
	return cmd
}

func printPeers(b *strings.Builder, peers []compliance.PeerInfo) {
	for _, p := range peers {
		fmt.Fprintf(b, "%s at %s", p.ID, p.Addr)
		if p.Leader {
			b.WriteString(" (leader)")
		}
		if !p.InLedger {
			b.WriteString(", not registered in the ledger: its signature does not count")
		}
		if p.VerifierKey != "" {
			fmt.Fprintf(b, "\n  key %s", p.VerifierKey)
		}
		b.WriteString("\n")
	}
}

// entriesOutput is what `nzc ledger entries` prints as JSON.
type entriesOutput struct {
	Size    int64              `json:"size"`
	Next    *int64             `json:"next"`
	Entries []compliance.Entry `json:"entries"`
}

func newLedgerEntriesCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "entries",
		Short: "List ledger entries, decoded, from an auditor",
		Long: `List ledger entries from --start on, as the auditor at --api holds them:
each with its outcome, its command decoded, and its leaf hash (JSON also
carries the canonical bytes in base64). Pages of the API are followed until
--limit entries are listed or the log ends. Only the compliance and auditor
roles may read entries. What is listed is one auditor's word: for proof, export
the log and verify it.`,
		Example: `  nzc ledger entries --api 127.0.0.1:7700 --federation fed --start 0 --limit 20
  nzc ledger entries --api 127.0.0.1:7700 --federation fed --start 1000 --limit 5000 --format json > entries.json`,
		Args: cobra.NoArgs,
	}
	c := addComplianceFlags(cmd, string(crypto.RoleCompliance), "the party whose client certificate to present (compliance or an auditor)")
	start := cmd.Flags().Int64("start", 0, "index of the first entry")
	limit := cmd.Flags().Int64("limit", 100, "list at most this many entries")
	return cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		if *start < 0 || *limit < 1 {
			return fmt.Errorf("--start must be ≥ 0 and --limit ≥ 1 (got %d, %d)", *start, *limit)
		}
		out := entriesOutput{Entries: []compliance.Entry{}}
		err := c.call(cmd.Context(), func(ctx context.Context, api *compliance.Client) error {
			next := *start
			for int64(len(out.Entries)) < *limit {
				p, err := api.Entries(ctx, next, min(*limit-int64(len(out.Entries)), compliance.MaxLimit))
				if err != nil {
					return err
				}
				out.Size, out.Next = p.Size, p.Next
				out.Entries = append(out.Entries, p.Entries...)
				if p.Next == nil || len(p.Entries) == 0 {
					break
				}
				next = *p.Next
			}
			return nil
		})
		if err != nil {
			return err
		}
		return cli.Print(cmd.OutOrStdout(), f, out, cli.Text(func(b *strings.Builder) { printEntries(b, out) }))
	})
}

func printEntries(b *strings.Builder, out entriesOutput) {
	for _, e := range out.Entries {
		fmt.Fprintf(b, "%6d  %-9s", e.Index, e.Status)
		if e.Command != nil {
			fmt.Fprintf(b, "  %-16s by %-18s", e.Command.Kind, e.Command.Signer)
			switch e.Command.Kind {
			case ledger.KindCharge.String(), ledger.KindChargeV2.String():
				fmt.Fprintf(b, "  batch %v for %v, hospitals %v, %v of %v answered", e.Command.Body["batch"], e.Command.Body["student"],
					e.Command.Body["hospitals"], e.Command.Body["answers"], e.Command.Body["queries"])
				if sizes, ok := e.Command.Body["ensembles"]; ok {
					fmt.Fprintf(b, ", teachers %v", sizes)
				}
			case ledger.KindRegisterEnsemble.String():
				fmt.Fprintf(b, "  %v: %v teachers on %v classes (version %v)", e.Command.Body["hospital"], e.Command.Body["teachers"], e.Command.Body["classes"], e.Command.Body["version"])
			case ledger.KindSuspend.String():
				verb := "reinstated"
				if e.Command.Body["suspended"] == true {
					verb = "SUSPENDED"
				}
				fmt.Fprintf(b, "  %v %s (version %v): %v", e.Command.Body["hospital"], verb, e.Command.Body["version"], e.Command.Body["reason"])
			case ledger.KindOpenAccount.String(), ledger.KindChangeCap.String():
				fmt.Fprintf(b, "  cap ε=%v δ=%v", e.Command.Body["cap_epsilon"], e.Command.Body["cap_delta"])
			}
		} else if r := e.Record; r != nil {
			kind := "undecodable"
			if r.Kind != 0 {
				kind = r.Kind.String()
			}
			fmt.Fprintf(b, "  %-16s by %-18s  refusal record of sha256 %x", kind, r.Signer, r.Digest[:8])
		} else {
			fmt.Fprintf(b, "  undecodable command: %s", e.CommandError)
		}
		if e.Code != "" {
			fmt.Fprintf(b, "  refused: %s", e.Code)
			if e.Subject != "" {
				fmt.Fprintf(b, " (%s)", e.Subject)
			}
		}
		if e.Status == ledger.StatusDuplicate.String() {
			fmt.Fprintf(b, "  repeats entry %d", e.Original)
		}
		fmt.Fprintf(b, "  leaf %s\n", e.LeafHash)
	}
	switch {
	case out.Next != nil:
		fmt.Fprintf(b, "%d entries listed of %d; continue with --start %d\n", len(out.Entries), out.Size, *out.Next)
	default:
		fmt.Fprintf(b, "%d entries listed; the log has %d\n", len(out.Entries), out.Size)
	}
}

// printMembers writes the cluster membership an administrative command
// left.
func printMembers(b *strings.Builder, what string, s raftnode.Status) {
	fmt.Fprintf(b, "%s; the cluster (leader %s) is now:\n", what, s.LeaderID)
	for _, p := range s.Peers {
		fmt.Fprintf(b, "  %s at %s\n", p.ID, p.Addr)
	}
}

func newLedgerJoinCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "join",
		Short: "(Re)join this auditor to the raft cluster (administrative)",
		Long: `Join the auditor at --api itself, reachable for raft at --addr, to the cluster
as a voter. The request goes to that auditor, which forwards it to the
leader. It is administrative: it must present the certificate of the auditor
at --api (--as its id), so only that auditor's operator may send it, and
--id must be that auditor: one auditor's certificate adds no other voter. A
new auditor joins with its own certificate, when it starts with join
addresses (nzc-auditor run --bootstrap=false --peers …). Joining again with
the same id and address changes nothing.

A new auditor's signatures count towards checkpoints only once the ledger
registers it (nzc init add-party and a register-party command): raft
membership and the ledger's auditors are separate on purpose.`,
		Example: `  nzc ledger join --api 127.0.0.1:7700 --federation fed --as auditor-1 --id auditor-1 --addr 10.0.0.1:7501`,
		Args:    cobra.NoArgs,
	}
	c := addAdminFlags(cmd)
	id := cmd.Flags().String("id", "", "the joining auditor's id (as in its certificate)")
	addr := cmd.Flags().String("addr", "", "the joining auditor's raft address, HOST:PORT")
	return cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		if *id == "" || *addr == "" {
			return errors.New("--id ID and --addr HOST:PORT of the joining auditor are required")
		}
		return adminMembership(cmd, c, f, func(ctx context.Context, api *compliance.Client) (raftnode.Status, error) {
			return api.Join(ctx, *id, *addr)
		}, fmt.Sprintf("auditor %s at %s is a member", *id, *addr))
	})
}

func newLedgerRemovePeerCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "remove-peer",
		Short: "Take this auditor out of the raft cluster (administrative)",
		Long: `Remove the auditor at --api itself (--id, its own id) from the raft cluster.
The request goes to that auditor, which forwards it to the leader; it must
present that auditor's own certificate (--as its id). One auditor's
certificate removes no other auditor. Removing an absent id changes nothing.

Removing members lowers the number of auditors raft needs for a majority,
not the number whose signatures a checkpoint needs: that is fixed by the
auditors the ledger registered.`,
		Example: `  nzc ledger remove-peer --api 127.0.0.1:7700 --federation fed --as auditor-3 --id auditor-3`,
		Args:    cobra.NoArgs,
	}
	c := addAdminFlags(cmd)
	id := cmd.Flags().String("id", "", "the auditor to remove")
	return cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		if *id == "" {
			return errors.New("--id ID of the auditor to remove is required")
		}
		return adminMembership(cmd, c, f, func(ctx context.Context, api *compliance.Client) (raftnode.Status, error) {
			return api.Remove(ctx, *id)
		}, fmt.Sprintf("auditor %s is not a member", *id))
	})
}

func adminMembership(cmd *cobra.Command, c *complianceFlags, format string, change func(context.Context, *compliance.Client) (raftnode.Status, error), done string) error {
	var s raftnode.Status
	err := c.call(cmd.Context(), func(ctx context.Context, api *compliance.Client) (err error) {
		s, err = change(ctx, api)
		return err
	})
	if err != nil {
		return err
	}
	return cli.Print(cmd.OutOrStdout(), format, s, cli.Text(func(b *strings.Builder) { printMembers(b, done, s) }))
}

func newLedgerSnapshotCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Save an auditor's state to a file, or restore a stopped auditor from one",
		Long: `save asks a running auditor to take a raft snapshot and writes a copy to a
file; restore replaces all the raft state in a stopped auditor's data
directory by such a file, for disaster recovery.`,
		Example: `  nzc ledger snapshot save --api 127.0.0.1:7700 --federation fed --as auditor-1 --out auditor-1.snapshot
  nzc ledger snapshot restore --data-dir /var/lib/nzc/auditor-1 --in auditor-1.snapshot`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newLedgerSnapshotSaveCommand(), newLedgerSnapshotRestoreCommand())
	return cmd
}

// snapshotSummary is what the snapshot commands print.
type snapshotSummary struct {
	File    string                  `json:"file"`
	Bytes   int                     `json:"bytes"`
	Meta    raftnode.SnapshotMeta   `json:"meta"`
	Entries int64                   `json:"entries"`
	Root    string                  `json:"root"`
	Restore *raftnode.RestoreResult `json:"restore,omitempty"`
	// ExtendsCheckpoints are the cosigned checkpoint files the restored
	// ledger was checked to extend.
	ExtendsCheckpoints []string `json:"extends_checkpoints,omitempty"`
}

func summarizeSnapshot(file string, b []byte, f raftnode.SnapshotFile, st *ledger.State) snapshotSummary {
	return snapshotSummary{File: file, Bytes: len(b), Meta: f.Meta, Entries: st.TreeSize(), Root: st.RootHash().String()}
}

func newLedgerSnapshotSaveCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "save",
		Short: "Have an auditor take a raft snapshot and write a copy to a file (administrative)",
		Long: `Ask the auditor at --api to take a raft snapshot now (or, if nothing was
applied since its latest one, to use that) and write a copy to --out,
atomically: the ledger's entries, the raft index and term they reach, and
the cluster's voters. The copy is checked by replaying every entry before it
is written. It needs the auditor's own certificate (--as its id).`,
		Example: `  nzc ledger snapshot save --api 127.0.0.1:7700 --federation fed --as auditor-1 --out auditor-1.snapshot`,
		Args:    cobra.NoArgs,
	}
	c := addAdminFlags(cmd)
	out := cmd.Flags().String("out", "", "file to write the snapshot to (replaced atomically)")
	return cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		var sf raftnode.SnapshotFile
		st := ledger.New()
		b, err := c.download(cmd.Context(), *out, crypto.PrivateFileMode, (*compliance.Client).Snapshot, func(b []byte) (err error) {
			if sf, err = raftnode.DecodeSnapshotFile(b); err != nil {
				return fmt.Errorf("the auditor sent no intact snapshot: %w", err)
			}
			if err := st.Restore(sf.State); err != nil {
				return fmt.Errorf("the auditor's snapshot does not replay, nothing written: %w", err)
			}
			return nil
		})
		if err != nil {
			return err
		}
		s := summarizeSnapshot(*out, b, sf, st)
		return cli.Print(cmd.OutOrStdout(), f, s, cli.Textf("wrote %s: %d ledger entries (root %s) at raft index %d, term %d, taken by %s; voters %s\n",
			s.File, s.Entries, s.Root, s.Meta.Index, s.Meta.Term, s.Meta.Node, peerList(s.Meta.Peers)))
	})
}

func peerList(ps []raftnode.Peer) string {
	var out []string
	for _, p := range ps {
		out = append(out, p.ID+"="+p.Addr)
	}
	return strings.Join(out, ", ")
}

// replayCheck is a state machine that only restores: it checks that a
// snapshot's entries replay, and extend every cosigned checkpoint given,
// before any data directory is touched.
type replayCheck struct {
	st          *ledger.State
	checkpoints []checkpointFile
	trusted     []string
}

type checkpointFile struct {
	path   string
	signed []byte
}

func (r replayCheck) Apply(uint64, []byte) ([]byte, error) {
	return nil, errors.New("a snapshot check applies nothing")
}
func (r replayCheck) Snapshot() ([]byte, error) { return r.st.Snapshot() }
func (r replayCheck) Restore(b []byte) error {
	if err := r.st.Restore(b); err != nil {
		return err
	}
	for _, c := range r.checkpoints {
		if _, err := r.st.ExtendsCheckpoint(c.signed, r.trusted); err != nil {
			return fmt.Errorf("against %s: %w", c.path, err)
		}
	}
	return nil
}

func newLedgerSnapshotRestoreCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "restore",
		Short: "Replace a stopped auditor's raft state by a snapshot file (disaster recovery)",
		Long: `Replace all the raft state in a stopped auditor's data directory by a snapshot
file from 'nzc ledger snapshot save'. Stop the auditor first: a directory in
use is refused. The snapshot's entries are replayed first (signatures, caps,
outcomes, roots); if they do not, nothing changes. The old directory is kept
beside it as DIR.replaced-N, and its raft term and vote are carried over.

When the auditor starts again it holds the snapshot's ledger, raft index and
voters, and catches up from the cluster's leader. To recover a cluster that
lost every member, restore the same file on each auditor and start them.

This never rewrites a running cluster's history: raft's live restore (which
makes the leader take on a state its followers do not have) is not used,
because the ledger must only ever be extended. Trust the file as much as the
place you kept it — so restore also requires the file's ledger to extend a
checkpoint a majority of the federation's auditors cosigned (--checkpoint,
saved by 'nzc ledger status --save-checkpoint', with the auditors' keys from
--federation or --keys): a file cut short, rewritten or from another
federation is refused before anything changes. --unchecked restores without
one, for a federation that never saved a checkpoint; a restored auditor
whose ledger differs from its peers' still reports a fork when it gathers
their checkpoint signatures.`,
		Example: `  # On the auditor's machine, with nzc-auditor stopped:
  nzc ledger snapshot restore --data-dir /var/lib/nzc/auditor-1 --in auditor-1.snapshot \
      --checkpoint last-audit.checkpoint --federation fed`,
		Args: cobra.NoArgs,
	}
	dataDir := cmd.Flags().String("data-dir", "", "the stopped auditor's data directory (its data_dir)")
	in := cmd.Flags().String("in", "", "the snapshot file from 'nzc ledger snapshot save'")
	cps := cmd.Flags().StringSlice("checkpoint", nil, "cosigned checkpoint files (from 'nzc ledger status --save-checkpoint') the snapshot's ledger must extend")
	trust := addTrustFlags(cmd)
	unchecked := cmd.Flags().Bool("unchecked", false, "restore without a cosigned checkpoint (trust the file as much as where it was kept)")
	return cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		if *dataDir == "" || *in == "" {
			return errors.New("--data-dir DIR (the stopped auditor's) and --in FILE (a saved snapshot) are required")
		}
		check := replayCheck{st: ledger.New()}
		switch {
		case *unchecked && len(*cps) > 0:
			return errors.New("--unchecked and --checkpoint exclude each other: give the checkpoints, and leave out --unchecked")
		case !*unchecked && len(*cps) == 0:
			return errors.New("--checkpoint FILE is required: a checkpoint the auditors cosigned (nzc ledger status --save-checkpoint) that the snapshot must extend; --unchecked restores without one")
		}
		if !*unchecked {
			trusted, err := trust.keys("a forged checkpoint would pass")
			if err != nil {
				return err
			}
			check.trusted = trusted
			for _, p := range *cps {
				b, err := os.ReadFile(p)
				if err != nil {
					return fmt.Errorf("read a checkpoint: %w", err)
				}
				check.checkpoints = append(check.checkpoints, checkpointFile{p, b})
			}
		}
		b, err := os.ReadFile(*in)
		if err != nil {
			return fmt.Errorf("read the snapshot: %w", err)
		}
		sf, err := raftnode.DecodeSnapshotFile(b)
		if err != nil {
			return fmt.Errorf("%s: %w", *in, err)
		}
		res, err := raftnode.RestoreDataDir(*dataDir, sf, check)
		if err != nil {
			return err
		}
		s := summarizeSnapshot(*in, b, sf, check.st)
		s.Restore = &res
		s.ExtendsCheckpoints = *cps
		return cli.Print(cmd.OutOrStdout(), f, s, cli.Text(func(b *strings.Builder) {
			fmt.Fprintf(b, "restored %s from %s: %d ledger entries (root %s) at raft index %d, term %d; voters %s\n",
				res.DataDir, s.File, s.Entries, s.Root, res.Index, res.Term, peerList(res.Peers))
			if len(s.ExtendsCheckpoints) > 0 {
				fmt.Fprintf(b, "its ledger extends the cosigned checkpoints %s\n", strings.Join(s.ExtendsCheckpoints, ", "))
			} else {
				b.WriteString("unchecked: no cosigned checkpoint vouched for the file\n")
			}
			if res.Previous != "" {
				fmt.Fprintf(b, "the replaced data directory is kept at %s\n", res.Previous)
			}
			b.WriteString("start the auditor: it catches up from the cluster's leader\n")
		}))
	})
}
