package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/federation/launch"
	"github.com/nzcfed/nzc/federation/provision"
	"github.com/nzcfed/nzc/internal/atomicfile"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/auditor/compliance"
)

// defaultVerifyMemoryMiB is the heap `nzc ledger verify` keeps under by
// default: a 10⁶-entry export verifies in about 220 MiB resident with it,
// and about 410 MiB without (docs/PERFORMANCE.md).
const defaultVerifyMemoryMiB = 200

// ErrLedgerNotVerified is returned by `nzc ledger verify` when any check
// fails, after the report is printed, so the exit status is non-zero.
var ErrLedgerNotVerified = errors.New("the ledger export did not verify: see the FAIL lines above")

// ErrUnpinned is returned by `nzc ledger verify` when everything verified
// but the federation was not pinned: auditor keys alone are what a
// fabricated federation brings too.
var ErrUnpinned = errors.New("the federation is not pinned, so the export is not verified: give --federation DIR or --genesis-hash HEX, or accept an unpinned check with --unpinned")

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
		newLedgerSignRemovalCommand(), newLedgerRemoveSignedCommand(), newLedgerSubmitCommand(),
		newLedgerAccountsCommand(), newLedgerChargesCommand(), newLedgerEntriesCommand(), newLedgerExportCommand(), newLedgerVerifyCommand(),
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

Each auditor's signature is a cosignature carrying the time it signed; the
report gives the latest checkpoint's age (since a majority had cosigned it),
and --max-age fails an export older than that: one frozen in the past, or
served by an auditor that stopped following the others.

The auditors' keys come from outside the export, so a wholly fabricated log
is detected: from a federation directory (each auditor's sign.pub, named by
federation.json; with it, the genesis must also be signed by the federation's
administrator, the CA's key, and every party the log registers must be the
directory's, with its key), or from --keys, each a note verifier key
("auditor-1+1a2b3c4d+AbC…"), a file of such keys (one a line), or an
auditor's sign.pub (the auditor's ID is the name of its directory).

The last checkpoint verified for a federation is kept (--checkpoints,
default $NZC_CHECKPOINTS or nzc/checkpoints in the user's configuration
directory, one file per set of auditor keys; 'nzc ledger status' keeps the
same file): a later export must extend it, so a log rolled back or forked
behind what you verified before fails without any file kept by hand.
--no-keep neither checks against it nor updates it.

Keys alone do not pin the federation: whoever fabricates a log brings keys
that verify it. Without --federation or --genesis-hash the report says the
federation is UNPINNED and the command fails, unless --unpinned accepts an
unpinned check; an unpinned run checks against the kept checkpoint but never
replaces it.

The export is read as a stream, entry by entry, with signatures checked on
every core ahead of the replay: memory holds the replayed state, not the log
(--memory-limit keeps the heap near 200 MiB by default).

Every check is printed with what it was about; the exit status is non-zero
when any fails.`,
		Example: `  # Verify against the auditors of a federation directory:
  nzc ledger verify --export ledger.export --federation fed

  # The same with explicit keys, and a checkpoint kept from last month's audit:
  nzc ledger verify --export ledger.export --keys fed/auditor-1/sign.pub,fed/auditor-2/sign.pub,fed/auditor-3/sign.pub \
      --earlier last-month.checkpoint

  # Keys alone, with the genesis pinned by the digest nzc init wrote as genesis_hash:
  nzc ledger verify --export ledger.export --keys fed/auditor-1/sign.pub,fed/auditor-2/sign.pub,fed/auditor-3/sign.pub \
      --genesis-hash "$(sed -n 's/^genesis_hash: *//p' fed/auditor-1.yaml)"

  # Keys alone, accepting that the federation is not pinned (the kept checkpoint is left as it is):
  nzc ledger verify --export ledger.export --keys fed/auditor-1/sign.pub,fed/auditor-2/sign.pub,fed/auditor-3/sign.pub --unpinned

  # Refuse an export whose auditors have not vouched for it in the last hour:
  nzc ledger verify --export ledger.export --federation fed --max-age 1h

  # As JSON:
  nzc ledger verify --export ledger.export --federation fed --format json`,
		Args: cobra.NoArgs,
	}
	exportPath := cmd.Flags().String("export", "", "the ledger export to verify, from 'nzc ledger export' or GET /v1/export")
	trust := addTrustFlags(cmd)
	earlier := cmd.Flags().StringSlice("earlier", nil, "signed checkpoint files kept from earlier audits, which the export must extend")
	maxAge := cmd.Flags().Duration("max-age", 0, "fail unless a majority of the auditors cosigned the latest checkpoint at most this long ago (e.g. 1h): a frozen or stale export fails")
	genesisHash := cmd.Flags().String("genesis-hash", "", "the digest (hex SHA-256 of its signed content) of the federation's genesis command, as nzc init writes it into each auditor's genesis_hash: the log must start from it")
	unpinned := cmd.Flags().Bool("unpinned", false, "accept a check that neither --federation nor --genesis-hash pins: the report says the federation is UNPINNED, and the kept checkpoint is not replaced")
	keep := addKeepFlags(cmd)
	memLimit := cmd.Flags().Int("memory-limit", defaultVerifyMemoryMiB, "the heap size in MiB the Go runtime keeps this verification under, collecting more often near it (a soft limit: a log whose decision state outgrows it verifies more slowly); 0 for none; GOMEMLIMIT, when set, wins")
	return cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		if *exportPath == "" {
			return errors.New("--export is required: the file written by 'nzc ledger export'")
		}
		if *memLimit < 0 {
			return fmt.Errorf("--memory-limit %d: give a size in MiB, or 0 for none", *memLimit)
		}
		if *memLimit > 0 && os.Getenv("GOMEMLIMIT") == "" {
			defer debug.SetMemoryLimit(debug.SetMemoryLimit(int64(*memLimit) << 20))
		}
		trusted, err := trust.keys("a fabricated log would verify")
		if err != nil {
			return err
		}
		export, err := os.Open(*exportPath)
		if err != nil {
			return fmt.Errorf("read the export: %w", err)
		}
		defer export.Close()
		var earlierCps [][]byte
		for _, p := range *earlier {
			b, err := os.ReadFile(p)
			if err != nil {
				return fmt.Errorf("read an earlier checkpoint: %w", err)
			}
			earlierCps = append(earlierCps, b)
		}
		keptPath, err := keep.path(trusted)
		if err != nil {
			return err
		}
		if keptPath != "" {
			b, err := os.ReadFile(keptPath)
			switch {
			case err == nil:
				earlierCps = append(earlierCps, b)
			case !errors.Is(err, fs.ErrNotExist):
				return fmt.Errorf("read the kept checkpoint: %w", err)
			}
		}
		if *maxAge < 0 {
			return fmt.Errorf("--max-age %v: give a positive duration such as 1h, or leave it out", *maxAge)
		}
		opts := ledger.VerifyOptions{TrustedKeys: trusted, Earlier: earlierCps, Now: time.Now().Unix(), MaxAge: int64(maxAge.Seconds()), Unpinned: *unpinned,
			Workers: runtime.GOMAXPROCS(0)}
		if trust.fed != "" {
			if opts.Directory, err = launch.Directory(trust.fed); err != nil {
				return err
			}
		}
		if *genesisHash != "" {
			if opts.GenesisHash, err = hex.DecodeString(*genesisHash); err != nil || len(opts.GenesisHash) != sha256.Size {
				return fmt.Errorf("--genesis-hash %q: want the 64 hex digits of a SHA-256", *genesisHash)
			}
		}
		r := ledger.VerifyReader(cmd.Context(), export, opts)
		if err := cli.Print(cmd.OutOrStdout(), f, r, r.WriteText); err != nil {
			return err
		}
		switch {
		case r.OnlyUnpinned():
			return ErrUnpinned
		case !r.OK:
			return ErrLedgerNotVerified
		}
		// A check the federation does not pin proves nothing about which
		// federation's log this is: its checkpoint is not kept.
		if keptPath != "" && r.FederationPinned {
			size, err := compliance.KeepLatest(keptPath, r.SignedCheckpoints)
			if err != nil {
				return err
			}
			if f == cli.FormatText {
				fmt.Fprintf(cmd.ErrOrStderr(), "kept the checkpoint of %d entries in %s: a later verify or status fails on a log rolled back behind it\n", size, keptPath)
			}
		}
		return nil
	})
}

// keepFlags say where the last checkpoint verified for a federation is
// kept between runs of verify and status, so that a log rolled back or
// rewritten behind it fails without the officer keeping files by hand.
type keepFlags struct {
	dir string
	off bool
}

func addKeepFlags(cmd *cobra.Command) *keepFlags {
	k := &keepFlags{}
	cmd.Flags().StringVar(&k.dir, "checkpoints", "", "directory where the last checkpoint verified for each federation is kept and checked (default $NZC_CHECKPOINTS, else nzc/checkpoints in the user's configuration directory)")
	cmd.Flags().BoolVar(&k.off, "no-keep", false, "neither check against nor update the kept checkpoint")
	return k
}

// path is the kept checkpoint's file for the federation whose auditors'
// keys are trusted ("" with --no-keep): one file per set of auditor keys.
func (k *keepFlags) path(trusted []string) (string, error) {
	if k.off {
		return "", nil
	}
	dir := cmp.Or(k.dir, os.Getenv("NZC_CHECKPOINTS"))
	if dir == "" {
		cfg, err := os.UserConfigDir()
		if err != nil {
			return "", fmt.Errorf("no directory to keep checkpoints in (%v): give --checkpoints DIR, or --no-keep", err)
		}
		dir = filepath.Join(cfg, "nzc", "checkpoints")
	}
	return compliance.KeptCheckpointPath(dir, trusted), nil
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
	return compliance.TrustedKeys(t.fed, t.values)
}

// complianceFlags are the connection flags of the commands that talk to an
// auditor's compliance API.
type complianceFlags struct {
	apis    []string
	fed, as string
	timeout time.Duration
	// admin: the command administers the auditor at --api, so that
	// auditor must be --as itself.
	admin bool
}

// addComplianceFlags adds --api, --federation, --as (defaulting to as) and
// --timeout.
func addComplianceFlags(cmd *cobra.Command, as string, asHelp string) *complianceFlags {
	c := &complianceFlags{}
	cmd.Flags().StringSliceVar(&c.apis, "api", nil, "an auditor's compliance API: ID=HOST:PORT (the server's certificate must be auditor ID's), or HOST:PORT (the auditor whose configuration in --federation names that address, else any auditor)")
	cmd.Flags().StringVar(&c.fed, "federation", "", "federation directory: its CA, and the certificate and key of --as")
	cmd.Flags().StringVar(&c.as, "as", as, asHelp)
	cmd.Flags().DurationVar(&c.timeout, "timeout", 30*time.Second, "give up after this long")
	return c
}

// addAdminFlags is addComplianceFlags for a command that administers the
// auditor at --api with that auditor's own certificate.
func addAdminFlags(cmd *cobra.Command) *complianceFlags {
	c := addComplianceFlags(cmd, "", adminAsHelp)
	c.admin = true
	return c
}

const readerAsHelp = "the party whose client certificate to present (compliance, an auditor, or a hospital, which reads only aggregates and its own charges)"

// auditorTarget is an auditor's compliance API and, when known, the
// auditor whose certificate the server must present.
type auditorTarget struct{ id, addr string }

// auditorAPIs returns the compliance API address of each auditor of the
// federation: from the directory's topology file (written by nzc init, in
// every kit), or, in a directory without one, from each auditor
// configuration file there that names one.
func auditorAPIs(m *crypto.Manifest) (map[string]string, error) {
	if _, err := os.Stat(m.Path(provision.TopologyFile)); err == nil {
		t, err := provision.ReadTopology(m.Dir, 0)
		if err != nil {
			return nil, err
		}
		return t.AuditorAPIs(m), nil
	}
	out := map[string]string{}
	for _, a := range m.ByRole(crypto.RoleAuditor) {
		b, err := os.ReadFile(provision.ConfigFile(m, a))
		if err != nil {
			continue
		}
		var c struct {
			API string `yaml:"api"`
		}
		if yaml.Unmarshal(b, &c) == nil && c.API != "" {
			out[a.ID] = c.API
		}
	}
	return out, nil
}

// targets loads the federation directory and returns the auditors --api
// names. A bare HOST:PORT is the
// auditor whose configuration names that address (when one does), so that
// its certificate's id is checked too. Without --api and with every, every
// auditor of the federation is asked at the address its configuration
// names.
func (c *complianceFlags) targets(every bool) (*crypto.Manifest, []auditorTarget, error) {
	m, err := crypto.LoadManifest(c.fed)
	if err != nil {
		return nil, nil, err
	}
	apis, err := auditorAPIs(m)
	if err != nil {
		return nil, nil, err
	}
	if len(c.apis) == 0 && every {
		var out []auditorTarget
		for _, a := range m.ByRole(crypto.RoleAuditor) {
			addr, ok := apis[a.ID]
			if !ok {
				return nil, nil, fmt.Errorf("the federation directory has no configuration naming auditor %s's compliance API: give every auditor as --api ID=HOST:PORT", a.ID)
			}
			out = append(out, auditorTarget{a.ID, addr})
		}
		if len(out) == 0 {
			return nil, nil, fmt.Errorf("federation %s lists no auditors", m.Dir)
		}
		return m, out, nil
	}
	var out []auditorTarget
	for _, v := range c.apis {
		t := auditorTarget{addr: v}
		if id, addr, ok := strings.Cut(v, "="); ok {
			if _, ok := m.Party(crypto.RoleAuditor, id); !ok {
				return nil, nil, fmt.Errorf("--api %s: the federation has no auditor %q", v, id)
			}
			t = auditorTarget{id, addr}
		} else {
			for id, addr := range apis {
				if addr == v {
					t.id = id
				}
			}
		}
		out = append(out, t)
	}
	return m, out, nil
}

// call runs f with a client of the compliance API at --api presenting the
// certificate of --as from the federation directory, bounded by --timeout.
// The server must be an auditor, and the one --api names when it names
// one; an administrative command (--as an auditor) must reach that auditor.
func (c *complianceFlags) call(ctx context.Context, f func(context.Context, *compliance.Client) error) error {
	if len(c.apis) == 0 || c.fed == "" {
		return errors.New("--api HOST:PORT and --federation DIR are required")
	}
	if len(c.apis) > 1 {
		return fmt.Errorf("--api names %d auditors: this command reads one", len(c.apis))
	}
	m, ts, err := c.targets(false)
	if err != nil {
		return err
	}
	id := ts[0].id
	if _, auditor := m.Party(crypto.RoleAuditor, c.as); c.admin && auditor {
		if id != "" && id != c.as {
			return fmt.Errorf("--api names auditor %s but --as is %s: an auditor's certificate administers only that auditor", id, c.as)
		}
		id = c.as
	}
	client, err := compliance.NewClientAsTo(ts[0].addr, m, c.as, id)
	if err != nil {
		return err
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	return f(ctx, client)
}

// views asks every auditor (see targets) for its view of the ledger and
// compares them against the federation's auditor keys.
func (c *complianceFlags) views(ctx context.Context, then func(context.Context, compliance.Views, []compliance.Auditor) error) error {
	if c.fed == "" {
		return errors.New("--federation DIR is required: its auditors are asked, at the compliance API their configuration names or at --api ID=HOST:PORT")
	}
	m, ts, err := c.targets(true)
	if err != nil {
		return err
	}
	keys, err := compliance.TrustedKeys(c.fed, nil)
	if err != nil {
		return err
	}
	var auditors []compliance.Auditor
	for _, t := range ts {
		client, err := compliance.NewClientAsTo(t.addr, m, c.as, t.id)
		if err != nil {
			return err
		}
		defer client.Close()
		auditors = append(auditors, compliance.Auditor{ID: t.id, Addr: t.addr, Client: client})
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	vs := compliance.CompareViews(ctx, auditors, keys)
	n := len(m.ByRole(crypto.RoleAuditor))
	vs.Needed = ledger.Quorum(n)
	if vs.Asked < n {
		vs.Warnings = append(vs.Warnings, fmt.Sprintf("asked %d of the federation's %d auditors: a split view would go unnoticed (leave out --api to ask every one)", vs.Asked, n))
	}
	return then(ctx, vs, auditors)
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
// --format says (text by text). With one --api it reads that auditor;
// without (or with several), every auditor is asked for its view (as
// status does) and the read goes to the auditor of the largest view a
// majority cosigned, so that any majority of the auditors up is enough;
// the auditors that did not answer are named on standard error.
func readCommand[T any](cmd *cobra.Command, get func(*compliance.Client, context.Context) (T, error), text func(*strings.Builder, T)) {
	c := addComplianceFlags(cmd, string(crypto.RoleCompliance), readerAsHelp)
	cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		if len(c.apis) == 1 {
			v, err := fetch(cmd.Context(), c, get)
			if err != nil {
				return err
			}
			return cli.Print(cmd.OutOrStdout(), f, v, cli.Text(func(b *strings.Builder) { text(b, v) }))
		}
		var v T
		err := c.views(cmd.Context(), func(ctx context.Context, vs compliance.Views, auditors []compliance.Auditor) error {
			if err := vs.Majority(); err != nil {
				return err
			}
			if l := vs.MissingLine(); l != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", l)
			}
			// The auditor of the largest view first, then the others that
			// served a cosigned view.
			order := []int{slices.IndexFunc(auditors, func(a compliance.Auditor) bool { return a.ID == vs.Largest.Auditor && a.Addr == vs.Largest.Addr })}
			for i, view := range vs.Views {
				if view.Cosigned && i != order[0] {
					order = append(order, i)
				}
			}
			var errs []error
			for _, i := range order {
				a := auditors[i]
				var err error
				if v, err = get(a.Client, ctx); err == nil {
					return nil
				}
				errs = append(errs, fmt.Errorf("auditor %s: %w", cmp.Or(a.ID, a.Addr), err))
			}
			return errors.Join(errs...)
		})
		if err != nil {
			return err
		}
		return cli.Print(cmd.OutOrStdout(), f, v, cli.Text(func(b *strings.Builder) { text(b, v) }))
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
	// From is the auditor the export was fetched from: the one that
	// served the largest cosigned view; Views are every auditor's views.
	From  string           `json:"from"`
	Views compliance.Views `json:"views"`
}

func newLedgerExportCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Compare every auditor's view, then fetch the ledger's export from the largest",
		Long: `Ask every auditor of the federation directory (as 'nzc ledger status' does)
for its latest cosigned checkpoint, prove each view a prefix of the largest,
and fetch the whole ledger, with a checkpoint cosigned by the auditors, from
the auditor that served the largest, over HTTPS (the server's certificate
must be that auditor's, the compliance party's client certificate is
presented); write it to --out. When two auditors' views disagree (a split
view or a fork) nothing is written and the command fails. Nothing is trusted
yet: verify the file with 'nzc ledger verify'.`,
		Example: `  nzc ledger export --federation fed --as compliance --out ledger.export
  nzc ledger verify --export ledger.export --federation fed --max-age 1h`,
		Args: cobra.NoArgs,
	}
	c := addComplianceFlags(cmd, string(crypto.RoleCompliance), readerAsHelp)
	out := cmd.Flags().String("out", "", "file to write the export to (replaced atomically)")
	return cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		if *out == "" {
			return errors.New("--out FILE is required")
		}
		var s exportSummary
		err := c.views(cmd.Context(), func(ctx context.Context, vs compliance.Views, auditors []compliance.Auditor) error {
			s.Views = vs
			if !vs.Consistent {
				return fmt.Errorf("%w: %s; nothing written", ErrSplitView, strings.Join(vs.Disagreements, "; "))
			}
			if err := vs.Majority(); err != nil {
				return fmt.Errorf("%w; nothing written (%s)", err, strings.Join(vs.Warnings, "; "))
			}
			for _, a := range auditors {
				if a.ID == vs.Largest.Auditor && a.Addr == vs.Largest.Addr {
					s.From = cmp.Or(a.ID, a.Addr)
					return writeExport(ctx, a.Client, *out, &s)
				}
			}
			return errors.New("the auditor of the largest view is not among those asked")
		})
		if err != nil {
			return err
		}
		return cli.Print(cmd.OutOrStdout(), f, s, cli.Text(func(b *strings.Builder) {
			fmt.Fprintf(b, "wrote %s: %d entries, %d checkpoints, %d bytes, from auditor %s (not yet verified: run nzc ledger verify)\n",
				s.Out, s.Entries, len(s.Checkpoints), s.Bytes, s.From)
			fmt.Fprintf(b, "%d of %d auditors answered; the largest cosigned view is %d entries; no two views disagree (%d consistency proofs checked)\n",
				s.Views.Answered, s.Views.Asked, s.Views.Largest.Size, s.Views.Proofs)
			if l := s.Views.MissingLine(); l != "" {
				fmt.Fprintf(b, "%s\n", l)
			}
			for _, w := range s.Views.Warnings {
				fmt.Fprintf(b, "warning: %s\n", w)
			}
		}))
	})
}

// writeExport writes the export the auditor serves to path as it arrives,
// checking that it decodes (entry by entry: the file is never held in
// memory), and fills in what s says of it. Nothing is written unless the
// whole export decodes.
func writeExport(ctx context.Context, client *compliance.Client, path string, s *exportSummary) error {
	body, err := client.ExportStream(ctx)
	if err != nil {
		return err
	}
	defer body.Close()
	counted := &countingReader{r: body}
	var entries int
	var checkpoints [][]byte
	err = atomicfile.WriteWith(path, crypto.PublicFileMode, true, func(w io.Writer) error {
		x, err := ledger.NewExportReader(io.TeeReader(counted, w))
		if err != nil {
			return err
		}
		for {
			if _, err := x.Next(); err == io.EOF {
				break
			} else if err != nil {
				return err
			}
			entries++
		}
		_, checkpoints, err = x.Tail()
		return err
	})
	if errors.Is(err, ledger.ErrMalformed) {
		return fmt.Errorf("auditor %s sent something that is not a ledger export: %w; nothing written", s.From, err)
	}
	if err != nil {
		return err
	}
	s.Out, s.Bytes, s.Entries = path, int(counted.n), entries
	for _, cp := range checkpoints {
		if p, err := ledger.PeekCheckpoint(cp); err == nil {
			s.Checkpoints = append(s.Checkpoints, p)
		}
	}
	return nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// chargesOutput is what `nzc ledger charges` prints.
type chargesOutput struct {
	Hospital string              `json:"hospital"`
	Charges  []compliance.Charge `json:"charges"`
	// ProofsVerified says how many receipts were checked here against
	// the federation's auditor keys; all of them, or the command fails.
	ProofsVerified int `json:"proofs_verified"`
}

func newLedgerChargesCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "charges",
		Short: "List the charges naming a hospital, each proven against the auditors' keys",
		Long: `List every accepted charge that names a hospital, as the auditor at --api
serves them, and check each one's receipt here — the entry, its inclusion
proof and a checkpoint a majority of the federation's auditors cosigned —
against the auditors' keys in the federation directory. A hospital's
certificate (--as hospital-1) reads only that hospital's charges; the
compliance and auditor roles name the hospital with --hospital. Compare the
list with the batches the hospital voted on (its nzc_teacher_* metrics).`,
		Example: `  nzc ledger charges --api 127.0.0.1:7700 --federation fed --as hospital-1
  nzc ledger charges --api 127.0.0.1:7700 --federation fed --hospital hospital-2 --format json`,
		Args: cobra.NoArgs,
	}
	c := addComplianceFlags(cmd, string(crypto.RoleCompliance), readerAsHelp)
	hospital := cmd.Flags().String("hospital", "", "the hospital whose charges to list (default: --as, when it is a hospital)")
	return cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		h := *hospital
		if h == "" && strings.HasPrefix(c.as, string(crypto.RoleHospital)) {
			h = c.as
		}
		if h == "" {
			return errors.New("--hospital ID is required (or present a hospital's certificate with --as)")
		}
		keys, err := compliance.TrustedKeys(c.fed, nil)
		if err != nil {
			return err
		}
		out := chargesOutput{Hospital: h, Charges: []compliance.Charge{}}
		err = c.call(cmd.Context(), func(ctx context.Context, api *compliance.Client) error {
			chs, err := api.ProvenCharges(ctx, h, keys)
			out.Charges = append(out.Charges, chs...)
			return err
		})
		if err != nil {
			return fmt.Errorf("%w: do not trust its list", err)
		}
		out.ProofsVerified = len(out.Charges)
		return cli.Print(cmd.OutOrStdout(), f, out, cli.Text(func(b *strings.Builder) {
			for _, ch := range out.Charges {
				fmt.Fprintf(b, "%6d  batch %s for %s: %s, %d queries, %d answered, hospitals %v\n", ch.Index, ch.BatchID, ch.Student, ch.Mechanism, ch.Queries, ch.Answers, ch.Hospitals)
			}
			fmt.Fprintf(b, "%d charges name %s; each receipt proven against the federation's auditor keys\n", len(out.Charges), h)
		}))
	})
}

func newLedgerAccountsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "accounts",
		Short: "Show every hospital's budget account as an auditor reports it",
		Long: `Show every hospital's budget account (ε spent of its cap) as one auditor's
replica reports it, over the compliance API: the auditor --api names or,
without --api, the one serving the largest checkpoint a majority cosigned
after every auditor of the federation directory was asked (as 'nzc ledger
status' does): any majority of the auditors up is enough, and those that did
not answer are named on standard error. This trusts that auditor; for
figures you can prove, run 'nzc ledger export' and 'nzc ledger verify', whose
report recomputes the same accounts by replaying the log.`,
		Example: `  nzc ledger accounts --federation fed
  nzc ledger accounts --api 127.0.0.1:7700 --federation fed
  nzc ledger accounts --api 127.0.0.1:7700 --federation fed --format json`,
		Args: cobra.NoArgs,
	}
	readCommand(cmd, (*compliance.Client).Accounts, printAccounts)
	return cmd
}

func printAccounts(b *strings.Builder, accounts []ledger.Account) {
	if len(accounts) == 0 {
		b.WriteString("no hospital has opened a budget account yet\n")
	}
	for _, a := range accounts {
		fmt.Fprintln(b, a)
		for _, c := range a.CapChanges {
			fmt.Fprintf(b, "  %s, at %s\n", c, time.Unix(0, c.Timestamp).UTC().Format(time.RFC3339))
		}
	}
}

// ErrSplitView is returned by `nzc ledger status` and `export` when two
// auditors show cosigned views that disagree, after the views are printed.
var ErrSplitView = errors.New("the auditors show different logs: see the SPLIT VIEW or FORK lines above, keep the checkpoints, and investigate before trusting either")

// ledgerStatus is what `nzc ledger status` reports: every auditor's view,
// compared.
type ledgerStatus struct {
	compliance.Views
	// Age is how long ago a majority cosigned the largest checkpoint, in
	// seconds.
	Age   *int64 `json:"age_seconds,omitempty"`
	Saved string `json:"saved,omitempty"` // where the largest cosigned checkpoint was written
	// Extends is the size of the checkpoint the file held before, which
	// the new one was proven to extend (0 when the file was new).
	Extends int64 `json:"extends,omitempty"`
	// Membership names each difference between an auditor's raft members
	// and the auditors its ledger registered.
	Membership []string `json:"membership_differences,omitempty"`
}

func newLedgerStatusCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Ask every auditor for its raft state and latest cosigned checkpoint, and compare them",
		Long: `Ask every auditor of the federation directory — at the compliance API its
configuration in the directory names, or at --api ID=HOST:PORT — for its raft
state (its role, the leader, term and indexes, the members it knows), the size
and root of its log, and its latest checkpoint with the auditors that cosigned
it. Each checkpoint is verified here against the federation's auditor keys,
and every cosigned view is proven a prefix of the largest with a consistency
proof: an auditor that shows you a different log than the others (a split
view) or a fork makes the command fail. The report gives the largest cosigned
checkpoint and how long ago a majority cosigned it.

With --save-checkpoint the largest cosigned checkpoint is written to a file:
keep it, and give it to a later 'nzc ledger verify --earlier' to prove that
the log was only ever extended. When the file already holds a checkpoint, the
new one replaces it only if it provably extends it (a consistency proof,
checked here): auditors serving a log that was rolled back, or rewritten, are
refused and the file keeps the checkpoint you had. Without --save-checkpoint
the same is done with the kept checkpoint that 'nzc ledger verify' also
keeps (--checkpoints; --no-keep to skip), whenever the auditors' views agree.`,
		Example: `  nzc ledger status --federation fed
  nzc ledger status --federation fed --save-checkpoint 2026-11.checkpoint --format json
  nzc ledger status --federation fed --api auditor-1=10.0.0.1:7700,auditor-2=10.0.0.2:7700,auditor-3=10.0.0.3:7700`,
		Args: cobra.NoArgs,
	}
	c := addComplianceFlags(cmd, string(crypto.RoleCompliance), readerAsHelp)
	save := cmd.Flags().String("save-checkpoint", "", "write the largest checkpoint cosigned by a majority of the auditors to this file (default: the kept checkpoint, see --checkpoints)")
	keep := addKeepFlags(cmd)
	return cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		var s ledgerStatus
		var kept *ledger.Checkpoint
		var err error
		explicit := *save != ""
		if !explicit && c.fed != "" {
			trusted, err := compliance.TrustedKeys(c.fed, nil)
			if err != nil {
				return err
			}
			if *save, err = keep.path(trusted); err != nil {
				return err
			}
		}
		if *save != "" {
			if kept, err = compliance.KeptCheckpoint(*save); err != nil {
				return err
			}
		}
		var proof compliance.ConsistencyProof
		err = c.views(cmd.Context(), func(ctx context.Context, vs compliance.Views, auditors []compliance.Auditor) (err error) {
			s.Views = vs
			if vs.Largest != nil && kept != nil && kept.Size > 0 && kept.Size < vs.Largest.Size {
				for _, a := range auditors {
					if a.ID == vs.Largest.Auditor && a.Addr == vs.Largest.Addr {
						proof, err = a.Client.ConsistencyProof(ctx, kept.Size, vs.Largest.Size)
					}
				}
			}
			return err
		})
		if err != nil {
			return err
		}
		if l := s.Largest; l != nil {
			age := time.Now().Unix() - l.Time
			s.Age = &age
		}
		s.Membership = membershipDifferences(s.Views)
		// Without a majority there is nothing to keep or trust: say who is
		// missing and fail.
		if err := s.Majority(); err != nil {
			if perr := cli.Print(cmd.OutOrStdout(), f, s, cli.Text(s.text)); perr != nil {
				return perr
			}
			if *save != "" {
				return fmt.Errorf("%w; nothing saved", err)
			}
			return err
		}
		// The kept checkpoint moves forward whenever the views agree; a
		// split view is reported below, and a log that does not extend
		// the kept checkpoint fails here.
		if *save != "" && (explicit || (s.Consistent && s.Largest != nil)) {
			if !explicit {
				if err := os.MkdirAll(filepath.Dir(*save), 0o700); err != nil {
					return fmt.Errorf("keep the checkpoint: %w", err)
				}
			}
			if err := s.save(*save, kept, proof); err != nil {
				return err
			}
		}
		if err := cli.Print(cmd.OutOrStdout(), f, s, cli.Text(s.text)); err != nil {
			return err
		}
		if !s.Consistent {
			return ErrSplitView
		}
		if len(s.Membership) > 0 {
			return ErrMembershipDiffers
		}
		return nil
	})
}

// save writes the largest cosigned checkpoint to path, only when the views
// agree and it extends the checkpoint the file kept; s must have a
// majority (Views.Majority).
func (s *ledgerStatus) save(path string, kept *ledger.Checkpoint, proof compliance.ConsistencyProof) error {
	if !s.Consistent {
		return fmt.Errorf("%w: nothing saved", ErrSplitView)
	}
	l := s.Largest // not nil: status checked for a majority first
	if kept != nil {
		if err := ledger.VerifyConsistency(*kept, l.Checkpoint, proof.Proof); err != nil {
			return fmt.Errorf("the largest cosigned checkpoint, %d entries from auditor %s, does not extend the one of %d entries in %s — the auditors serve a log that was rolled back or rewritten: %w; nothing saved, compare with 'nzc ledger verify --earlier %s'", l.Size, l.Auditor, kept.Size, path, err, path)
		}
		s.Extends = kept.Size
	}
	if err := crypto.WriteFile(path, []byte(l.Note), crypto.PublicFileMode, true); err != nil {
		return err
	}
	s.Saved = path
	return nil
}

func (s ledgerStatus) text(b *strings.Builder) {
	for _, v := range s.Views.Views {
		if v.Error != "" {
			fmt.Fprintf(b, "auditor %s at %s: no answer: %s\n", v.Name(), v.Addr, v.Error)
			continue
		}
		a := v.Status.Auditor
		fmt.Fprintf(b, "auditor %s (%s) is %s in term %d; leader %s (%s)\n", a.ID, a.Addr, a.State, a.Term, a.LeaderID, a.LeaderAddr)
		fmt.Fprintf(b, "  raft log: last %d, committed %d, applied %d\n", a.LastIndex, a.CommitIndex, a.AppliedIndex)
		if !v.Status.Ready {
			fmt.Fprintf(b, "  not ready: %s\n", v.Status.NotYet)
		}
		for _, p := range a.Peers {
			fmt.Fprintf(b, "  member %s at %s\n", p.ID, p.Addr)
		}
		fmt.Fprintf(b, "  ledger %s: %d entries, root %s\n", v.Status.Origin, v.Status.Size, v.Status.Root)
		cp := v.Checkpoint
		if cp == nil {
			fmt.Fprintf(b, "  no checkpoint: %s\n", v.CheckpointError)
			continue
		}
		var signed, missing []string
		for _, c := range cp.Cosigners {
			if c.Signed {
				signed = append(signed, c.ID)
			} else {
				missing = append(missing, c.ID)
			}
		}
		q := "a majority"
		if !v.Cosigned {
			q = "NOT a majority"
		}
		fmt.Fprintf(b, "  latest checkpoint: %d entries, root %s, cosigned by %s (%s of %d; %d needed)", cp.Size, cp.Root, strings.Join(signed, ", "), q, len(cp.Cosigners), cp.Quorum)
		if len(missing) > 0 {
			fmt.Fprintf(b, "; not by %s", strings.Join(missing, ", "))
		}
		b.WriteString("\n")
		if v.CheckpointError != "" {
			fmt.Fprintf(b, "  checked against the federation's auditor keys: %s\n", v.CheckpointError)
		}
	}
	if l := s.Largest; l != nil {
		fmt.Fprintf(b, "largest cosigned checkpoint: %d entries, root %s, from auditor %s; a majority cosigned it %s ago\n", l.Size, l.Root, l.Auditor, ledger.FormatAge(*s.Age))
	}
	fmt.Fprintf(b, "%d of %d auditors answered", s.Answered, s.Asked)
	if s.Consistent {
		fmt.Fprintf(b, "; no two views disagree (%d consistency proofs checked)\n", s.Proofs)
	} else {
		b.WriteString("\n")
	}
	for _, d := range s.Disagreements {
		fmt.Fprintf(b, "%s\n", d)
	}
	writeMembership(b, s.Membership)
	if l := s.MissingLine(); l != "" {
		fmt.Fprintf(b, "%s\n", l)
	}
	for _, w := range s.Warnings {
		fmt.Fprintf(b, "warning: %s\n", w)
	}
	if s.Saved != "" {
		fmt.Fprintf(b, "saved the checkpoint of %d entries to %s (give it to nzc ledger verify --earlier)\n", s.Largest.Size, s.Saved)
		if s.Extends > 0 {
			fmt.Fprintf(b, "it extends the checkpoint of %d entries the file held (consistency proven)\n", s.Extends)
		}
	}
}
