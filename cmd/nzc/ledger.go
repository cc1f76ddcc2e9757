package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/mod/sumdb/note"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/auditor"
)

// ErrLedgerNotVerified is returned by `nzc ledger verify` when any check
// fails, after the report is printed, so the exit status is non-zero.
var ErrLedgerNotVerified = errors.New("the ledger export did not verify: see the FAIL lines above")

func newLedgerCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ledger",
		Short: "Verify and read the privacy ledger, as a compliance officer",
		Long: `Commands for compliance officers: fetch the ledger's export from an auditor
and verify it offline against the auditors' public keys.`,
		Example: `  # Fetch the export with the compliance party's certificate, then verify it offline:
  nzc ledger export --api 127.0.0.1:7301 --federation fed --out ledger.export
  nzc ledger verify --export ledger.export --federation fed`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newLedgerVerifyCommand(), newLedgerExportCommand(), newLedgerAccountsCommand(), newLedgerStatusCommand())
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
federation.json), or from --keys, each a note verifier key
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
	fedDir := cmd.Flags().String("federation", "", "federation directory whose auditors' sign.pub are the trusted keys")
	keys := cmd.Flags().StringSlice("keys", nil, "trusted auditor keys: verifier keys, files of verifier keys, or auditors' sign.pub files (repeat or separate with commas)")
	earlier := cmd.Flags().StringSlice("earlier", nil, "signed checkpoint files kept from earlier audits, which the export must extend")
	format := cli.AddFormatFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		f, err := format()
		if err != nil {
			return err
		}
		if *exportPath == "" {
			return errors.New("--export is required: the file written by 'nzc ledger export'")
		}
		if *fedDir == "" && len(*keys) == 0 {
			return errors.New("give the auditors' keys with --federation DIR or --keys: without them a fabricated log would verify")
		}
		export, err := os.ReadFile(*exportPath)
		if err != nil {
			return fmt.Errorf("read the export: %w", err)
		}
		trusted, err := trustedKeys(*fedDir, *keys)
		if err != nil {
			return err
		}
		var earlierCps [][]byte
		for _, p := range *earlier {
			b, err := os.ReadFile(p)
			if err != nil {
				return fmt.Errorf("read an earlier checkpoint: %w", err)
			}
			earlierCps = append(earlierCps, b)
		}
		r := ledger.Verify(export, ledger.VerifyOptions{TrustedKeys: trusted, Earlier: earlierCps})
		if err := cli.Print(cmd.OutOrStdout(), f, r, r.WriteText); err != nil {
			return err
		}
		if !r.OK {
			return ErrLedgerNotVerified
		}
		return nil
	}
	return cmd
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

// complianceFlags are the connection flags of the commands that read an
// auditor's compliance API.
type complianceFlags struct {
	api, fed, as string
	timeout      time.Duration
}

func addComplianceFlags(cmd *cobra.Command) *complianceFlags {
	c := &complianceFlags{}
	cmd.Flags().StringVar(&c.api, "api", "", "an auditor's compliance API, HOST:PORT (its nzc-auditor --api)")
	cmd.Flags().StringVar(&c.fed, "federation", "", "federation directory: its CA, and the certificate and key of --as")
	cmd.Flags().StringVar(&c.as, "as", string(crypto.RoleCompliance), "the party whose client certificate to present")
	cmd.Flags().DurationVar(&c.timeout, "timeout", 30*time.Second, "give up after this long")
	return c
}

// get fetches path from the compliance API over HTTPS, checking the
// auditor's certificate against the federation CA and presenting the
// client certificate of c.as.
func (c *complianceFlags) get(ctx context.Context, path string) ([]byte, error) {
	if c.api == "" || c.fed == "" {
		return nil, errors.New("--api HOST:PORT and --federation DIR are required")
	}
	m, err := crypto.LoadManifest(c.fed)
	if err != nil {
		return nil, err
	}
	ca, err := crypto.LoadCert(m.Path(m.CACert))
	if err != nil {
		return nil, fmt.Errorf("federation CA: %w", err)
	}
	var party *crypto.PartyFiles
	for i, p := range m.Parties {
		if p.ID == c.as {
			party = &m.Parties[i]
		}
	}
	if party == nil {
		return nil, fmt.Errorf("federation %s has no party %q: pass --as with a party ID from %s", c.fed, c.as, crypto.ManifestFile)
	}
	cred, err := crypto.LoadCredential(m.Path(party.Cert), m.Path(party.Key))
	if err != nil {
		return nil, fmt.Errorf("%s's certificate: %w", c.as, err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs:      pool,
		Certificates: []tls.Certificate{cred.TLSCertificate()},
		MinVersion:   tls.VersionTLS13,
	}}}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	url := "https://" + c.api + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("--api %q: %w", c.api, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w (is an auditor's compliance API listening there?)", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<30))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	return b, nil
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
		Example: `  nzc ledger export --api 127.0.0.1:7301 --federation fed --as compliance --out ledger.export
  nzc ledger verify --export ledger.export --federation fed`,
		Args: cobra.NoArgs,
	}
	c := addComplianceFlags(cmd)
	out := cmd.Flags().String("out", "", "file to write the export to (replaced atomically)")
	format := cli.AddFormatFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		f, err := format()
		if err != nil {
			return err
		}
		if *out == "" {
			return errors.New("--out FILE is required")
		}
		b, err := c.get(cmd.Context(), "/v1/export")
		if err != nil {
			return err
		}
		x, err := ledger.DecodeExport(b)
		if err != nil {
			return fmt.Errorf("the auditor sent something that is not a ledger export: %w", err)
		}
		if err := crypto.WriteFile(*out, b, crypto.PublicFileMode, true); err != nil {
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
	}
	return cmd
}

func newLedgerAccountsCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "accounts",
		Short: "Show every hospital's budget account as an auditor reports it",
		Long: `Show every hospital's budget account (ε spent of its cap) as one auditor's
replica reports it, over the compliance API. This trusts that auditor; for
figures you can prove, run 'nzc ledger export' and 'nzc ledger verify', whose
report recomputes the same accounts by replaying the log.`,
		Example: `  nzc ledger accounts --api 127.0.0.1:7301 --federation fed
  nzc ledger accounts --api 127.0.0.1:7301 --federation fed --format json`,
		Args: cobra.NoArgs,
	}
	c := addComplianceFlags(cmd)
	format := cli.AddFormatFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		f, err := format()
		if err != nil {
			return err
		}
		b, err := c.get(cmd.Context(), "/v1/accounts")
		if err != nil {
			return err
		}
		var accounts []ledger.Account
		if err := json.Unmarshal(b, &accounts); err != nil {
			return fmt.Errorf("the auditor's accounts are not the expected JSON: %w", err)
		}
		return cli.Print(cmd.OutOrStdout(), f, accounts, func(w io.Writer) error { return printAccounts(w, accounts) })
	}
	return cmd
}

func printAccounts(w io.Writer, accounts []ledger.Account) error {
	var b strings.Builder
	if len(accounts) == 0 {
		b.WriteString("no hospital has opened a budget account yet\n")
	}
	for _, a := range accounts {
		eps := fmt.Sprintf("%.6g", a.Epsilon)
		if math.IsInf(a.Epsilon, 1) {
			eps = "unbounded"
		}
		fmt.Fprintf(&b, "hospital %s: ε=%s of cap %g at δ=%.3g (%.3g additive δ spent), %d charges, %d answers\n",
			a.Hospital, eps, a.CapEpsilon, a.CapDelta-a.DeltaSpent, a.DeltaSpent, a.Charges, a.Answers)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// ledgerStatus is what `nzc ledger status` reports about one auditor.
type ledgerStatus struct {
	Auditor      auditor.Status     `json:"auditor"`
	Checkpoint   *ledger.Checkpoint `json:"checkpoint,omitempty"` // its latest signed checkpoint, unverified
	Saved        string             `json:"saved,omitempty"`
	NoCheckpoint string             `json:"no_checkpoint,omitempty"`
}

func newLedgerStatusCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show an auditor's raft state and its latest signed checkpoint",
		Long: `Show one auditor's raft state (its role, the leader, term and indexes, the
members it knows) and the size and root of its latest signed checkpoint, from
its operations endpoint (nzc-auditor's ops.listen, plain HTTP on the operator's
network). With --save-checkpoint the signed checkpoint is written to a file:
keep it, and give it to a later 'nzc ledger verify --earlier' to prove that
the log was only ever extended.`,
		Example: `  nzc ledger status --ops 127.0.0.1:8402
  nzc ledger status --ops 127.0.0.1:8402 --save-checkpoint 2026-11.checkpoint --format json`,
		Args: cobra.NoArgs,
	}
	opsAddr := cmd.Flags().String("ops", "", "an auditor's operations endpoint, HOST:PORT (its ops.listen)")
	save := cmd.Flags().String("save-checkpoint", "", "write the auditor's latest signed checkpoint to this file")
	timeout := cmd.Flags().Duration("timeout", 10*time.Second, "give up after this long")
	format := cli.AddFormatFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		f, err := format()
		if err != nil {
			return err
		}
		if *opsAddr == "" {
			return errors.New("--ops HOST:PORT is required: the auditor's ops.listen address")
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), *timeout)
		defer cancel()
		base := "http://" + *opsAddr
		code, b, err := httpGet(ctx, base+"/status")
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("GET %s/status: %d: %s", base, code, strings.TrimSpace(string(b)))
		}
		var s ledgerStatus
		if err := json.Unmarshal(b, &s.Auditor); err != nil {
			return fmt.Errorf("GET %s/status is not an auditor's status: %w (is --ops an auditor's ops.listen?)", base, err)
		}
		code, b, err = httpGet(ctx, base+"/checkpoint")
		switch {
		case err != nil:
			return err
		case code != http.StatusOK:
			s.NoCheckpoint = strings.TrimSpace(string(b))
		default:
			c, err := ledger.PeekCheckpoint(b)
			if err != nil {
				return fmt.Errorf("GET %s/checkpoint: %w", base, err)
			}
			s.Checkpoint = &c
			if *save != "" {
				if err := crypto.WriteFile(*save, b, crypto.PublicFileMode, true); err != nil {
					return err
				}
				s.Saved = *save
			}
		}
		if *save != "" && s.Saved == "" {
			return fmt.Errorf("auditor %s has no signed checkpoint to save (%s)", s.Auditor.ID, s.NoCheckpoint)
		}
		return cli.Print(cmd.OutOrStdout(), f, s, s.text)
	}
	return cmd
}

func (s ledgerStatus) text(w io.Writer) error {
	var b strings.Builder
	a := s.Auditor
	fmt.Fprintf(&b, "auditor %s (%s) is %s in term %d; leader %s (%s)\n", a.ID, a.Addr, a.State, a.Term, a.LeaderID, a.LeaderAddr)
	fmt.Fprintf(&b, "raft log: last %d, committed %d, applied %d\n", a.LastIndex, a.CommitIndex, a.AppliedIndex)
	for _, p := range a.Peers {
		fmt.Fprintf(&b, "  member %s at %s\n", p.ID, p.Addr)
	}
	if s.Checkpoint != nil {
		fmt.Fprintf(&b, "latest checkpoint: %s, %d entries, root %s (signature not checked here: verify an export)\n", s.Checkpoint.Origin, s.Checkpoint.Size, s.Checkpoint.Root)
	} else {
		fmt.Fprintf(&b, "no signed checkpoint yet: %s\n", s.NoCheckpoint)
	}
	if s.Saved != "" {
		fmt.Fprintf(&b, "saved the signed checkpoint to %s (give it to nzc ledger verify --earlier)\n", s.Saved)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func httpGet(ctx context.Context, url string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("GET %s: %w (is the auditor running with its ops endpoint there?)", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("GET %s: %w", url, err)
	}
	return resp.StatusCode, b, nil
}
