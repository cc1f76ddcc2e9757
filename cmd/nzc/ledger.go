package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/mod/sumdb/note"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/auditor/compliance"
	"github.com/nzcfed/nzc/party/auditor/intake"
)

// ErrLedgerNotVerified is returned by `nzc ledger verify` when any check
// fails, after the report is printed, so the exit status is non-zero.
var ErrLedgerNotVerified = errors.New("the ledger export did not verify: see the FAIL lines above")

func newLedgerCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ledger",
		Short: "Read, verify and administer the privacy ledger",
		Long: `Commands for compliance officers and auditors' operators. They talk to an
auditor's compliance API over HTTPS, presenting the client certificate of
--as from the federation directory (compliance by default).

  read       status, peers, accounts, entries, export (compliance and auditor
             roles; hospitals read status, peers, accounts and checkpoints)
  verify     check an export offline against the auditors' public keys
  administer join, remove-peer, snapshot save (the auditor's own certificate)
             and snapshot restore (offline, on a stopped auditor's data dir)`,
		Example: `  # Fetch the export with the compliance party's certificate, then verify it offline:
  nzc ledger export --api 127.0.0.1:7700 --federation fed --out ledger.export
  nzc ledger verify --export ledger.export --federation fed

  # The cluster and the latest cosigned checkpoint; keep it for the next audit:
  nzc ledger status --api 127.0.0.1:7700 --federation fed --save-checkpoint last.checkpoint

  # As auditor-1's operator, back up its state:
  nzc ledger snapshot save --api 127.0.0.1:7700 --federation fed --as auditor-1 --out a1.snapshot`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newLedgerStatusCommand(), newLedgerPeersCommand(), newLedgerJoinCommand(), newLedgerRemovePeerCommand(),
		newLedgerAccountsCommand(), newLedgerEntriesCommand(), newLedgerExportCommand(), newLedgerVerifyCommand(),
		newLedgerSnapshotCommand())
	return cmd
}

func newLedgerVerifyCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Verify a ledger export offline against the auditors' public keys",
		Long: `Verify a ledger export without contacting anyone: decode it, replay every
entry (signatures, caps, outcomes and the roots each entry records), check
that a majority of the auditors signed the checkpoints and that their roots
are the Merkle tree hash of the exported entries, that the latest checkpoint
covers every entry, that each earlier checkpoint you kept is extended by this
export, and that no two checkpoints of the same size disagree (a fork).

The auditors' keys come from outside the export, so a wholly fabricated log
is detected: from a federation directory (each auditor's sign.pub, named by
federation.json; with it, the genesis must also be signed by the federation's
administrator, the CA's key, and every party the log registers must be the
directory's, with its key), or from --keys, each a note verifier key
("auditor-1+1a2b3c4d+AbC…"), a file of such keys (one a line), or an
auditor's sign.pub (the auditor's ID is the name of its directory).

Every check is printed with what it was about; the exit status is non-zero
when any fails.`,
		Example: `  # Verify against the auditors of a federation directory:
  nzc ledger verify --export ledger.export --federation fed

  # The same with explicit keys, and a checkpoint kept from last month's audit:
  nzc ledger verify --export ledger.export --keys fed/auditor-1/sign.pub,fed/auditor-2/sign.pub,fed/auditor-3/sign.pub \
      --earlier last-month.checkpoint

  # As JSON:
  nzc ledger verify --export ledger.export --federation fed --format json`,
		Args: cobra.NoArgs,
	}
	exportPath := cmd.Flags().String("export", "", "the ledger export to verify, from 'nzc ledger export' or GET /v1/export")
	trust := addTrustFlags(cmd)
	earlier := cmd.Flags().StringSlice("earlier", nil, "signed checkpoint files kept from earlier audits, which the export must extend")
	genesisHash := cmd.Flags().String("genesis-hash", "", "the digest (hex SHA-256 of its signed content) of the federation's genesis command, as nzc init writes it into each auditor's genesis_hash: the log must start from it")
	return cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		if *exportPath == "" {
			return errors.New("--export is required: the file written by 'nzc ledger export'")
		}
		trusted, err := trust.keys("a fabricated log would verify")
		if err != nil {
			return err
		}
		export, err := os.ReadFile(*exportPath)
		if err != nil {
			return fmt.Errorf("read the export: %w", err)
		}
		var earlierCps [][]byte
		for _, p := range *earlier {
			b, err := os.ReadFile(p)
			if err != nil {
				return fmt.Errorf("read an earlier checkpoint: %w", err)
			}
			earlierCps = append(earlierCps, b)
		}
		opts := ledger.VerifyOptions{TrustedKeys: trusted, Earlier: earlierCps}
		if trust.fed != "" {
			if opts.Directory, err = federationDirectory(trust.fed); err != nil {
				return err
			}
		}
		if *genesisHash != "" {
			if opts.GenesisHash, err = hex.DecodeString(*genesisHash); err != nil || len(opts.GenesisHash) != sha256.Size {
				return fmt.Errorf("--genesis-hash %q: want the 64 hex digits of a SHA-256", *genesisHash)
			}
		}
		r := ledger.Verify(export, opts)
		if err := cli.Print(cmd.OutOrStdout(), f, r, r.WriteText); err != nil {
			return err
		}
		if !r.OK {
			return ErrLedgerNotVerified
		}
		return nil
	})
}

// federationDirectory returns the parties of a federation directory as its
// genesis registers them, with the administrator's public key: what verify
// pins the log's genesis signer and parties to.
func federationDirectory(fedDir string) ([]ledger.Party, error) {
	m, err := crypto.LoadManifest(fedDir)
	if err != nil {
		return nil, err
	}
	admin, err := m.AdminPublicKey()
	if err != nil {
		return nil, err
	}
	return intake.Directory(m, admin)
}

// trustFlags name the auditors' keys a check trusts: --federation and
// --keys.
type trustFlags struct {
	fed    string
	values []string
}

func addTrustFlags(cmd *cobra.Command) *trustFlags {
	t := &trustFlags{}
	cmd.Flags().StringVar(&t.fed, "federation", "", "federation directory whose auditors' sign.pub are the trusted keys")
	cmd.Flags().StringSliceVar(&t.values, "keys", nil, "trusted auditor keys: verifier keys, files of verifier keys, or auditors' sign.pub files (repeat or separate with commas)")
	return t
}

// keys returns the trusted keys, and refuses to go on without any: without
// them, says the error, what would pass.
func (t *trustFlags) keys(without string) ([]string, error) {
	if t.fed == "" && len(t.values) == 0 {
		return nil, fmt.Errorf("give the auditors' keys with --federation DIR or --keys: without them %s", without)
	}
	return trustedKeys(t.fed, t.values)
}

// trustedKeys returns the note verifier keys of the auditors named by a
// federation directory and by --keys values.
func trustedKeys(fedDir string, values []string) ([]string, error) {
	var out []string
	if fedDir != "" {
		m, err := crypto.LoadManifest(fedDir)
		if err != nil {
			return nil, err
		}
		auditors := m.ByRole(crypto.RoleAuditor)
		if len(auditors) == 0 {
			return nil, fmt.Errorf("federation %s lists no auditors", fedDir)
		}
		for _, a := range auditors {
			if a.VerifyingKey == "" {
				return nil, fmt.Errorf("federation %s: auditor %s has no verifying key in %s", fedDir, a.ID, crypto.ManifestFile)
			}
			k, err := auditorKeyFile(a.ID, m.Path(a.VerifyingKey))
			if err != nil {
				return nil, err
			}
			out = append(out, k)
		}
	}
	for _, v := range values {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		if _, err := note.NewVerifier(v); err == nil {
			out = append(out, v)
			continue
		}
		b, err := os.ReadFile(v)
		if err != nil {
			return nil, fmt.Errorf("--keys %q is neither a verifier key nor a readable file: %w", v, err)
		}
		if bytes.Contains(b, []byte("-----BEGIN")) {
			k, err := auditorKeyFile(filepath.Base(filepath.Dir(v)), v)
			if err != nil {
				return nil, err
			}
			out = append(out, k)
			continue
		}
		n := 0
		for _, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			if _, err := note.NewVerifier(line); err != nil {
				return nil, fmt.Errorf("%s: %q is not a verifier key: %w", v, line, err)
			}
			out = append(out, line)
			n++
		}
		if n == 0 {
			return nil, fmt.Errorf("%s holds no verifier keys", v)
		}
	}
	return out, nil
}

// auditorKeyFile returns the verifier key of auditor id from its sign.pub.
func auditorKeyFile(id, path string) (string, error) {
	pub, err := crypto.LoadPublicKey(path)
	if err != nil {
		return "", fmt.Errorf("auditor %s: %w", id, err)
	}
	k, err := ledger.VerifierKey(id, ed25519.PublicKey(pub))
	if err != nil {
		return "", fmt.Errorf("auditor %s (key %s): %w", id, path, err)
	}
	return k, nil
}

// complianceFlags are the connection flags of the commands that talk to an
// auditor's compliance API.
type complianceFlags struct {
	api, fed, as string
	timeout      time.Duration
}

// addComplianceFlags adds --api, --federation, --as (defaulting to as) and
// --timeout.
func addComplianceFlags(cmd *cobra.Command, as string, asHelp string) *complianceFlags {
	c := &complianceFlags{}
	cmd.Flags().StringVar(&c.api, "api", "", "an auditor's compliance API, HOST:PORT (its nzc-auditor --api)")
	cmd.Flags().StringVar(&c.fed, "federation", "", "federation directory: its CA, and the certificate and key of --as")
	cmd.Flags().StringVar(&c.as, "as", as, asHelp)
	cmd.Flags().DurationVar(&c.timeout, "timeout", 30*time.Second, "give up after this long")
	return c
}

const readerAsHelp = "the party whose client certificate to present (compliance, an auditor, or a hospital, which reads only aggregates)"

// call runs f with a client of the compliance API at --api presenting the
// certificate of --as from the federation directory, bounded by --timeout.
func (c *complianceFlags) call(ctx context.Context, f func(context.Context, *compliance.Client) error) error {
	if c.api == "" || c.fed == "" {
		return errors.New("--api HOST:PORT and --federation DIR are required")
	}
	m, err := crypto.LoadManifest(c.fed)
	if err != nil {
		return err
	}
	client, err := compliance.NewClientAs(c.api, m, c.as)
	if err != nil {
		return err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	return f(ctx, client)
}

// fetch calls one method of the compliance client under c.call.
func fetch[T any](ctx context.Context, c *complianceFlags, get func(*compliance.Client, context.Context) (T, error)) (T, error) {
	var v T
	err := c.call(ctx, func(ctx context.Context, api *compliance.Client) (err error) {
		v, err = get(api, ctx)
		return err
	})
	return v, err
}

// readCommand makes cmd a read of the compliance API with get, printed as
// --format says (text by text).
func readCommand[T any](cmd *cobra.Command, get func(*compliance.Client, context.Context) (T, error), text func(io.Writer, T) error) {
	c := addComplianceFlags(cmd, string(crypto.RoleCompliance), readerAsHelp)
	cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		v, err := fetch(cmd.Context(), c, get)
		if err != nil {
			return err
		}
		return cli.Print(cmd.OutOrStdout(), f, v, func(w io.Writer) error { return text(w, v) })
	})
}

// download fetches a file with get, checks it, and writes it atomically to
// out with permissions perm.
func (c *complianceFlags) download(ctx context.Context, out string, perm fs.FileMode, get func(*compliance.Client, context.Context) ([]byte, error), check func([]byte) error) ([]byte, error) {
	if out == "" {
		return nil, errors.New("--out FILE is required")
	}
	b, err := fetch(ctx, c, get)
	if err != nil {
		return nil, err
	}
	if err := check(b); err != nil {
		return nil, err
	}
	return b, crypto.WriteFile(out, b, perm, true)
}

// exportSummary is what `nzc ledger export` prints about the file it wrote.
type exportSummary struct {
	Out         string              `json:"out"`
	Bytes       int                 `json:"bytes"`
	Entries     int                 `json:"entries"`
	Checkpoints []ledger.Checkpoint `json:"checkpoints"`
}

func newLedgerExportCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Fetch the ledger's export from an auditor's compliance API",
		Long: `Fetch the whole ledger, with a checkpoint cosigned by the auditors, from an
auditor's compliance API over HTTPS (the auditor's certificate checked against
the federation CA, the compliance party's client certificate presented), and
write it to --out. Nothing is trusted yet: verify it with 'nzc ledger verify'.`,
		Example: `  nzc ledger export --api 127.0.0.1:7700 --federation fed --as compliance --out ledger.export
  nzc ledger verify --export ledger.export --federation fed`,
		Args: cobra.NoArgs,
	}
	c := addComplianceFlags(cmd, string(crypto.RoleCompliance), readerAsHelp)
	out := cmd.Flags().String("out", "", "file to write the export to (replaced atomically)")
	return cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		var x ledger.Export
		b, err := c.download(cmd.Context(), *out, crypto.PublicFileMode, (*compliance.Client).Export, func(b []byte) (err error) {
			if x, err = ledger.DecodeExport(b); err != nil {
				return fmt.Errorf("the auditor sent something that is not a ledger export: %w", err)
			}
			return nil
		})
		if err != nil {
			return err
		}
		s := exportSummary{Out: *out, Bytes: len(b), Entries: len(x.Entries)}
		for _, cp := range x.Checkpoints {
			if p, err := ledger.PeekCheckpoint(cp); err == nil {
				s.Checkpoints = append(s.Checkpoints, p)
			}
		}
		return cli.Print(cmd.OutOrStdout(), f, s, func(w io.Writer) error {
			_, err := fmt.Fprintf(w, "wrote %s: %d entries, %d checkpoints, %d bytes (not yet verified: run nzc ledger verify)\n",
				s.Out, s.Entries, len(s.Checkpoints), s.Bytes)
			return err
		})
	})
}

func newLedgerAccountsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "accounts",
		Short: "Show every hospital's budget account as an auditor reports it",
		Long: `Show every hospital's budget account (ε spent of its cap) as one auditor's
replica reports it, over the compliance API. This trusts that auditor; for
figures you can prove, run 'nzc ledger export' and 'nzc ledger verify', whose
report recomputes the same accounts by replaying the log.`,
		Example: `  nzc ledger accounts --api 127.0.0.1:7700 --federation fed
  nzc ledger accounts --api 127.0.0.1:7700 --federation fed --format json`,
		Args: cobra.NoArgs,
	}
	readCommand(cmd, (*compliance.Client).Accounts, printAccounts)
	return cmd
}

func printAccounts(w io.Writer, accounts []ledger.Account) error {
	var b strings.Builder
	if len(accounts) == 0 {
		b.WriteString("no hospital has opened a budget account yet\n")
	}
	for _, a := range accounts {
		fmt.Fprintln(&b, a)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ledgerStatus is what `nzc ledger status` reports about one auditor.
type ledgerStatus struct {
	compliance.Status
	Checkpoint   *compliance.CheckpointInfo `json:"checkpoint,omitempty"` // the latest checkpoint, with its cosigners
	NoCheckpoint string                     `json:"no_checkpoint,omitempty"`
	Saved        string                     `json:"saved,omitempty"` // where the cosigned checkpoint was written
	// Extends is the size of the checkpoint the file held before, which
	// the new one was proven to extend (0 when the file was new).
	Extends int64 `json:"extends,omitempty"`
}

func newLedgerStatusCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show an auditor's raft state and the latest cosigned checkpoint",
		Long: `Show one auditor's raft state (its role, the leader, term and indexes, the
members it knows), the size and root of its log, and the latest checkpoint
with the auditors that cosigned it, over the compliance API (HTTPS, with the
client certificate of --as from the federation directory).

With --save-checkpoint the checkpoint, when a majority of the auditors
cosigned it — checked here against the federation's auditor keys, not taken
from the auditor's word — is written to a file: keep it, and give it to a
later 'nzc ledger verify --earlier' to prove that the log was only ever
extended. When the file already holds a checkpoint, the new one replaces it
only if it provably extends it (a consistency proof from the auditor,
checked here): an auditor serving a log that was rolled back, or rewritten,
is refused and the file keeps the checkpoint you had.`,
		Example: `  nzc ledger status --api 127.0.0.1:7700 --federation fed
  nzc ledger status --api 127.0.0.1:7700 --federation fed --save-checkpoint 2026-11.checkpoint --format json`,
		Args: cobra.NoArgs,
	}
	c := addComplianceFlags(cmd, string(crypto.RoleCompliance), readerAsHelp)
	save := cmd.Flags().String("save-checkpoint", "", "write the checkpoint cosigned by a majority of the auditors to this file")
	return cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		var s ledgerStatus
		var cp compliance.CheckpointInfo
		var kept *ledger.Checkpoint
		var err error
		var proof compliance.ConsistencyProof
		if *save != "" {
			if kept, err = keptCheckpoint(*save); err != nil {
				return err
			}
		}
		err = c.call(cmd.Context(), func(ctx context.Context, api *compliance.Client) (err error) {
			if s.Status, err = api.Status(ctx); err != nil {
				return err
			}
			if cp, err = api.Checkpoint(ctx); err != nil {
				if *save != "" {
					return err
				}
				s.NoCheckpoint = err.Error()
				return nil
			}
			s.Checkpoint = &cp
			if kept != nil && kept.Size > 0 && kept.Size < cp.Size {
				proof, err = api.ConsistencyProof(ctx, kept.Size, cp.Size)
			}
			return err
		})
		if err != nil {
			return err
		}
		if kept != nil {
			if err := ledger.VerifyConsistency(*kept, cp.Checkpoint, proof.Proof); err != nil {
				return fmt.Errorf("the auditor's checkpoint of %d entries does not extend the one of %d entries in %s — it serves a log that was rolled back or rewritten: %w; nothing saved, compare with other auditors and 'nzc ledger verify --earlier %s'", cp.Size, kept.Size, *save, err, *save)
			}
			s.Extends = kept.Size
		}
		if *save != "" {
			if !cp.QuorumMet {
				return fmt.Errorf("the checkpoint of %d entries is cosigned by fewer than %d auditors: nothing saved (are a majority of the auditors up?)", cp.Size, cp.Quorum)
			}
			// The auditor's word that a majority signed is not enough:
			// the note must verify against the federation's auditor keys.
			keys, err := trustedKeys(c.fed, nil)
			if err != nil {
				return err
			}
			if _, err := ledger.OpenCheckpoint([]byte(cp.Note), keys); err != nil {
				return fmt.Errorf("the auditor says its checkpoint of %d entries is cosigned by a majority, but it does not verify against the federation's auditor keys: %w; nothing saved", cp.Size, err)
			}
			if err := crypto.WriteFile(*save, []byte(cp.Note), crypto.PublicFileMode, true); err != nil {
				return err
			}
			s.Saved = *save
		}
		return cli.Print(cmd.OutOrStdout(), f, s, s.text)
	})
}

func (s ledgerStatus) text(w io.Writer) error {
	var b strings.Builder
	a := s.Auditor
	fmt.Fprintf(&b, "auditor %s (%s) is %s in term %d; leader %s (%s)\n", a.ID, a.Addr, a.State, a.Term, a.LeaderID, a.LeaderAddr)
	fmt.Fprintf(&b, "raft log: last %d, committed %d, applied %d\n", a.LastIndex, a.CommitIndex, a.AppliedIndex)
	if !s.Ready {
		fmt.Fprintf(&b, "not ready: %s\n", s.NotYet)
	}
	for _, p := range a.Peers {
		fmt.Fprintf(&b, "  member %s at %s\n", p.ID, p.Addr)
	}
	fmt.Fprintf(&b, "ledger %s: %d entries, root %s\n", s.Origin, s.Size, s.Root)
	if cp := s.Checkpoint; cp != nil {
		var signed, missing []string
		for _, c := range cp.Cosigners {
			if c.Signed {
				signed = append(signed, c.ID)
			} else {
				missing = append(missing, c.ID)
			}
		}
		q := "a majority"
		if !cp.QuorumMet {
			q = "NOT a majority"
		}
		fmt.Fprintf(&b, "latest checkpoint: %d entries, root %s, cosigned by %s (%s of %d; %d needed)", cp.Size, cp.Root, strings.Join(signed, ", "), q, len(cp.Cosigners), cp.Quorum)
		if len(missing) > 0 {
			fmt.Fprintf(&b, "; not by %s", strings.Join(missing, ", "))
		}
		b.WriteString("\n")
	} else {
		fmt.Fprintf(&b, "no checkpoint: %s\n", s.NoCheckpoint)
	}
	if s.Saved != "" {
		fmt.Fprintf(&b, "saved the checkpoint of %d entries to %s (give it to nzc ledger verify --earlier)\n", s.Checkpoint.Size, s.Saved)
		if s.Extends > 0 {
			fmt.Fprintf(&b, "it extends the checkpoint of %d entries the file held (consistency proven)\n", s.Extends)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// keptCheckpoint reads the checkpoint a --save-checkpoint file already
// holds: nil when there is no file yet. Its signatures were checked when
// it was saved; what matters now is that the next one extends it.
func keptCheckpoint(path string) (*ledger.Checkpoint, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the kept checkpoint: %w", err)
	}
	c, err := ledger.PeekCheckpoint(b)
	if err != nil {
		return nil, fmt.Errorf("%s holds no checkpoint (%w): move it away, or save to another file", path, err)
	}
	return &c, nil
}
