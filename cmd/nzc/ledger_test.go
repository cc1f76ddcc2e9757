package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/crypto/cryptotest"
	"github.com/nzcfed/nzc/federation/provision"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/party/auditor/compliance"
	"github.com/nzcfed/nzc/party/auditor/intake"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
)

// ledgerFixture is a provisioned federation and a log built with the
// ledger package, signed with the federation's own keys.
type ledgerFixture struct {
	dir      string
	m        *crypto.Manifest
	auditors []crypto.PartyFiles
}

func newLedgerFixture(t *testing.T) *ledgerFixture {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "fed")
	m, err := provision.Provision(dir, provision.Spec{Hospitals: 2, Auditors: 3, Students: 1})
	if err != nil {
		t.Fatal(err)
	}
	return &ledgerFixture{dir: dir, m: m, auditors: m.ByRole(crypto.RoleAuditor)}
}

func (f *ledgerFixture) key(t *testing.T, p crypto.PartyFiles) ed25519.PrivateKey {
	t.Helper()
	return cryptotest.SigningKey(t, f.m, p)
}

// adminKey is the federation administrator's key.
func (f *ledgerFixture) adminKey(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	key, err := f.m.AdminSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// log builds a log of four entries: genesis, both hospitals' accounts and
// the student's registration with the given quota.
func (f *ledgerFixture) log(t *testing.T, quota uint64) *ledger.State {
	t.Helper()
	admin := f.adminKey(t)
	parties, err := intake.Directory(f.m, admin.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	st := ledger.New()
	ts := int64(1_700_000_000_000_000_000)
	apply := func(b ledger.Body, signer string, key ed25519.PrivateKey) {
		t.Helper()
		cmd, err := ledger.Sign(b, signer, key)
		if err != nil {
			t.Fatal(err)
		}
		r, err := st.Apply(cmd)
		if err != nil || r.Status != ledger.StatusAccepted {
			t.Fatalf("%s: %v %+v", b.Kind(), err, r)
		}
	}
	apply(&ledger.Genesis{Origin: "nzc.test/cli", Parties: parties, Timestamp: ts}, intake.AdminID, admin)
	for i, h := range f.m.ByRole(crypto.RoleHospital) {
		apply(&ledger.OpenAccount{Hospital: h.ID, CapEpsilon: 8, CapDelta: 1e-5, Timestamp: ts + int64(i+1)}, h.ID, f.key(t, h))
	}
	apply(&ledger.RegisterStudent{Student: f.m.ByRole(crypto.RoleStudent)[0].ID, MaxAnswers: quota, Timestamp: ts + 10}, intake.AdminID, admin)
	return st
}

// checkpoint signs the checkpoint of the whole log by the first n auditors,
// now.
func (f *ledgerFixture) checkpoint(t *testing.T, st *ledger.State, n int) []byte {
	t.Helper()
	return f.checkpointAt(t, st, n, time.Now().Unix())
}

// checkpointAt signs the checkpoint of the whole log by the first n
// auditors at time at.
func (f *ledgerFixture) checkpointAt(t *testing.T, st *ledger.State, n int, at int64) []byte {
	t.Helper()
	root, err := st.TreeHash(st.TreeSize())
	if err != nil {
		t.Fatal(err)
	}
	var signers []note.Signer
	for _, a := range f.auditors[:n] {
		s, err := ledger.NewCheckpointSigner(a.ID, f.key(t, a), at)
		if err != nil {
			t.Fatal(err)
		}
		signers = append(signers, s)
	}
	b, err := ledger.SignCheckpoint(ledger.Checkpoint{Origin: st.Origin(), Size: st.TreeSize(), Root: root}, signers...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (f *ledgerFixture) write(t *testing.T, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func (f *ledgerFixture) export(t *testing.T, st *ledger.State) ledger.Export {
	t.Helper()
	b, err := st.Export([][]byte{f.checkpoint(t, st, 3)})
	if err != nil {
		t.Fatal(err)
	}
	x, err := ledger.DecodeExport(b)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func (f *ledgerFixture) encode(t *testing.T, x ledger.Export) string {
	t.Helper()
	b, err := x.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return f.write(t, "ledger.export", b)
}

func TestLedgerVerifyHonest(t *testing.T) {
	f := newLedgerFixture(t)
	path := f.encode(t, f.export(t, f.log(t, 0)))
	var pubs []string
	for _, a := range f.auditors {
		pubs = append(pubs, f.m.Path(a.VerifyingKey))
	}
	for _, args := range [][]string{
		{"--federation", f.dir},
		{"--keys", strings.Join(pubs, ","), "--genesis-hash", f.genesisHash(t)},
	} {
		out, err := runNZC(t, append([]string{"ledger", "verify", "--export", path}, args...)...)
		if err != nil {
			t.Fatalf("%v: an honest export failed: %v\n%s", args, err, out)
		}
		for _, want := range []string{"VERIFIED: ledger nzc.test/cli, 4 entries", "ok   replay", "signed by [auditor-1 auditor-2 auditor-3] (quorum 2 of 3)", "ok   trusted key"} {
			if !strings.Contains(out, want) {
				t.Fatalf("%v: output lacks %q:\n%s", args, want, out)
			}
		}
	}

	// Verifier strings in a file, and JSON output.
	var keys []string
	for _, a := range f.auditors {
		pub, err := crypto.LoadPublicKey(f.m.Path(a.VerifyingKey))
		if err != nil {
			t.Fatal(err)
		}
		k, err := ledger.VerifierKey(a.ID, ed25519.PublicKey(pub))
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	keyFile := f.write(t, "auditors.keys", []byte("# the auditors\n"+strings.Join(keys, "\n")+"\n"))
	out := mustRunNZC(t, "ledger", "verify", "--export", path, "--keys", keyFile, "--unpinned", "--format", "json")
	var r ledger.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if !r.OK || !r.KeysPinned || r.Entries != 4 || len(r.Accounts) != 2 {
		t.Fatalf("report %+v", r)
	}
}

// genesisHash is the hex digest of the genesis of f.log, as nzc init
// writes it into each auditor's genesis_hash.
func (f *ledgerFixture) genesisHash(t *testing.T) string {
	t.Helper()
	first, err := f.log(t, 0).Entries(0, 1)
	if err != nil {
		t.Fatal(err)
	}
	en, err := ledger.DecodeEntry(first[0])
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := ledger.DecodeCommand(en.Command)
	if err != nil {
		t.Fatal(err)
	}
	h, err := cmd.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h[:])
}

// A federation made up whole — its own CA, administrator, hospitals and
// auditors, all keys its maker's — verifies against its own auditor keys:
// so --keys alone pins nothing. Without --federation or --genesis-hash the
// report says the federation is UNPINNED, never VERIFIED, and the command
// fails; --unpinned accepts that, and still says so. Neither run replaces
// the kept checkpoint, so the real federation's next verify is unaffected;
// the same keys with the real genesis pinned by hash fail.
func TestLedgerVerifyUnpinned(t *testing.T) {
	real := newLedgerFixture(t)
	fake := newLedgerFixture(t) // another federation: every key its maker's
	keep := t.TempDir()
	export := fake.encode(t, fake.export(t, fake.log(t, 0)))
	var pubs []string
	for _, a := range fake.auditors {
		pubs = append(pubs, fake.m.Path(a.VerifyingKey))
	}
	keys := strings.Join(pubs, ",")
	kept := func() []string {
		files, _ := filepath.Glob(filepath.Join(keep, "*"))
		return files
	}
	verify := func(args ...string) (string, error) {
		return runNZC(t, append([]string{"ledger", "verify", "--export", export, "--checkpoints", keep}, args...)...)
	}

	out, err := verify("--keys", keys)
	if !errors.Is(err, ErrUnpinned) || strings.Contains(out, "VERIFIED:") || !strings.Contains(out, "NOT VERIFIED (federation UNPINNED)") || !strings.Contains(out, "FAIL federation: the federation is UNPINNED") {
		t.Fatalf("--keys alone: err %v, want %v and an UNPINNED report without VERIFIED:\n%s", err, ErrUnpinned, out)
	}
	if got := kept(); len(got) != 0 {
		t.Fatalf("an unpinned check kept %v", got)
	}
	out, err = verify("--keys", keys, "--format", "json")
	var r ledger.Report
	if !errors.Is(err, ErrUnpinned) || json.NewDecoder(strings.NewReader(out)).Decode(&r) != nil || r.OK || r.FederationPinned {
		t.Fatalf("--keys alone as JSON: err %v, report ok=%v pinned=%v\n%s", err, r.OK, r.FederationPinned, out)
	}

	out, err = verify("--keys", keys, "--unpinned")
	if err != nil || !strings.Contains(out, "VERIFIED (federation UNPINNED, accepted)") {
		t.Fatalf("--unpinned: %v\n%s", err, out)
	}
	if got := kept(); len(got) != 0 {
		t.Fatalf("an accepted unpinned check kept %v", got)
	}

	// Pinned by the real genesis's hash, the made-up log fails.
	if out, err := verify("--keys", keys, "--genesis-hash", real.genesisHash(t)); !errors.Is(err, ErrLedgerNotVerified) || !strings.Contains(out, "FAIL genesis") {
		t.Fatalf("the real genesis pinned: %v\n%s", err, out)
	}
	// The real federation, verified next with the same kept directory.
	realExport := real.encode(t, real.export(t, real.log(t, 0)))
	if out, err := runNZC(t, "ledger", "verify", "--export", realExport, "--checkpoints", keep, "--federation", real.dir); err != nil || len(kept()) != 1 {
		t.Fatalf("the real federation after the unpinned runs: %v, kept %v\n%s", err, kept(), out)
	}
}

// An export frozen two days ago verifies and says how old it is; with
// --max-age it fails.
func TestLedgerVerifyMaxAge(t *testing.T) {
	f := newLedgerFixture(t)
	st := f.log(t, 0)
	b, err := st.Export([][]byte{f.checkpointAt(t, st, 3, time.Now().Add(-48*time.Hour).Unix())})
	if err != nil {
		t.Fatal(err)
	}
	path := f.write(t, "frozen.export", b)
	out, err := runNZC(t, "ledger", "verify", "--export", path, "--federation", f.dir)
	if err != nil || !strings.Contains(out, "cosigned the latest checkpoint 2d00h ago") {
		t.Fatalf("without --max-age: %v\n%s", err, out)
	}
	out = f.fails(t, "--export", path, "--federation", f.dir, "--max-age", "1h")
	if !strings.Contains(out, "FAIL freshness") || !strings.Contains(out, "more than the maximum age 1h00m") {
		t.Fatalf("a frozen export passed --max-age 1h:\n%s", out)
	}
	fresh := f.encode(t, f.export(t, st))
	if out, err := runNZC(t, "ledger", "verify", "--export", fresh, "--federation", f.dir, "--max-age", "1h"); err != nil {
		t.Fatalf("a fresh export failed --max-age 1h: %v\n%s", err, out)
	}
}

// failures runs verify and returns its text output, requiring it to fail.
func (f *ledgerFixture) fails(t *testing.T, args ...string) string {
	t.Helper()
	out, err := runNZC(t, append([]string{"ledger", "verify", "--federation", f.dir}, args...)...)
	if !errors.Is(err, ErrLedgerNotVerified) {
		t.Fatalf("verify returned %v, want ErrLedgerNotVerified:\n%s", err, out)
	}
	if !strings.HasPrefix(out, "FAILED: ") {
		t.Fatalf("output does not start with FAILED:\n%s", out)
	}
	return out
}

func failLines(out string) []string {
	var fl []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "FAIL ") {
			fl = append(fl, l)
		}
	}
	return fl
}

func TestLedgerVerifyDetectsTampering(t *testing.T) {
	f := newLedgerFixture(t)
	st := f.log(t, 0)

	t.Run("one byte of one entry", func(t *testing.T) {
		x := f.export(t, st)
		e := slices.Clone(x.Entries[2])
		e[len(e)-1] ^= 1
		x.Entries[2] = e
		out := f.fails(t, "--export", f.encode(t, x))
		if fl := failLines(out); len(fl) == 0 || !strings.Contains(fl[0], "[entry 2]") {
			t.Fatalf("the first failure does not name entry 2:\n%s", out)
		}
	})
	t.Run("an entry removed", func(t *testing.T) {
		x := f.export(t, st)
		x.Entries = slices.Delete(x.Entries, 1, 2)
		out := f.fails(t, "--export", f.encode(t, x))
		if fl := failLines(out); len(fl) == 0 || !strings.Contains(fl[0], "[entry 1]") {
			t.Fatalf("the first failure does not name entry 1:\n%s", out)
		}
		if !strings.Contains(out, "entries were removed") {
			t.Fatalf("the checkpoint check does not say entries were removed:\n%s", out)
		}
	})
	t.Run("fork", func(t *testing.T) {
		other := f.log(t, 10) // same size, a different last entry
		earlier := f.write(t, "earlier.checkpoint", f.checkpoint(t, other, 2))
		out := f.fails(t, "--export", f.encode(t, f.export(t, st)), "--earlier", earlier)
		if !strings.Contains(out, "FAIL fork: export checkpoint 0 (signed by [auditor-1 auditor-2 auditor-3]) and earlier checkpoint 0 (signed by [auditor-1 auditor-2]) are both size 4") {
			t.Fatalf("no fork reported:\n%s", out)
		}
	})
	t.Run("a charge that states less than it costs", func(t *testing.T) {
		// A log written by a ledger that took stated costs on trust: 10,000
		// GNMax answers at σ = 0.5 recorded as accepted with a zero curve.
		st := f.log(t, 0)
		agg := f.m.ByRole(crypto.RoleAggregator)[0] // registered by the genesis
		x := f.export(t, st)
		p := mechanism.Params{Mechanism: mechanism.GNMax, Teachers: 250, Classes: 10, Sigma: 0.5}
		cmd, err := ledger.Sign(&ledger.Charge{BatchID: "free", Student: f.m.ByRole(crypto.RoleStudent)[0].ID,
			Hospitals: []string{f.m.ByRole(crypto.RoleHospital)[0].ID}, Mechanism: string(p.Mechanism), Params: p.LedgerParams(),
			Queries: 10_000, Answers: 10_000, Curve: make([]float64, mechanism.DefaultGrid().Len())}, agg.ID, f.key(t, agg))
		if err != nil {
			t.Fatal(err)
		}
		prev, err := st.TreeHash(st.TreeSize())
		if err != nil {
			t.Fatal(err)
		}
		forged, err := ledger.Entry{Index: uint64(st.TreeSize()), PrevRoot: prev, Command: cmd, Outcome: ledger.Outcome{Status: ledger.StatusAccepted}}.Encode()
		if err != nil {
			t.Fatal(err)
		}
		x.Entries = append(x.Entries, forged)
		out := f.fails(t, "--export", f.encode(t, x))
		if !strings.Contains(out, "FAIL cost [entry 4]: accepted charge free states less than its mechanism and parameters cost (under-cost)") {
			t.Fatalf("the under-costed entry is not named:\n%s", out)
		}
	})
	t.Run("keys of another federation", func(t *testing.T) {
		g := newLedgerFixture(t)
		out, err := runNZC(t, "ledger", "verify", "--federation", g.dir, "--export", f.encode(t, f.export(t, st)))
		if !errors.Is(err, ErrLedgerNotVerified) || !strings.Contains(out, "FAIL trusted key") {
			t.Fatalf("verify with a stranger's keys: %v\n%s", err, out)
		}
	})
}

func TestLedgerVerifyUsage(t *testing.T) {
	f := newLedgerFixture(t)
	path := f.encode(t, f.export(t, f.log(t, 0)))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--federation", f.dir}, "--export is required"},
		{[]string{"--export", path}, "--federation DIR or --keys"},
		{[]string{"--export", path, "--keys", "no-such-file"}, "neither a verifier key nor a readable file"},
		{[]string{"--export", path, "--federation", t.TempDir()}, "no federation"},
		{[]string{"--export", filepath.Join(t.TempDir(), "missing"), "--federation", f.dir}, "read the export"},
		{[]string{"--export", path, "--federation", f.dir, "--format", "xml"}, "unknown output format"},
		{[]string{"--export", path, "--federation", f.dir, "--memory-limit", "-1"}, "give a size in MiB, or 0 for none"},
	} {
		out, err := runNZC(t, append([]string{"ledger", "verify"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%v: error %v, want %q\n%s", tc.args, err, tc.want, out)
		}
	}
}

// fakeCluster is the auditor node behind a test compliance API: its
// checkpoint is signed by the first signers auditors of the fixture.
type fakeCluster struct {
	t       *testing.T
	f       *ledgerFixture
	st      *ledger.State
	signers int

	mu      sync.Mutex
	joined  []string
	removed []string
}

func (c *fakeCluster) Status() raftnode.Status {
	return raftnode.Status{ID: "auditor-1", Addr: "127.0.0.1:7500", State: "Leader", LeaderID: "auditor-1",
		LeaderAddr: "127.0.0.1:7500", Term: 3, LastIndex: 9, CommitIndex: 9, AppliedIndex: 9,
		Peers: []raftnode.Peer{{ID: "auditor-1", Addr: "127.0.0.1:7500"}, {ID: "auditor-2", Addr: "127.0.0.1:7501"}, {ID: "auditor-3", Addr: "127.0.0.1:7502"}}}
}
func (c *fakeCluster) Ready() error { return nil }
func (c *fakeCluster) CosignCheckpoint(context.Context) ([]byte, error) {
	b := c.f.checkpoint(c.t, c.st, c.signers)
	keys, _ := c.st.AuditorKeys(c.st.TreeSize())
	if _, err := ledger.OpenCheckpoint(b, keys); err != nil {
		return b, err
	}
	return b, nil
}
func (c *fakeCluster) Join(_ context.Context, id, addr string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.joined = append(c.joined, id+"="+addr)
	return nil
}
func (c *fakeCluster) RemoveSigned(_ context.Context, id string, proof []byte) error {
	if err := compliance.VerifyRemoval(c.st.Auditors(c.st.TreeSize()), id, proof, time.Now()); err != nil {
		return fmt.Errorf("%w: %w", raftnode.ErrMembership, err)
	}
	return c.Remove(context.Background(), id)
}
func (c *fakeCluster) Remove(_ context.Context, id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removed = append(c.removed, id)
	return nil
}
func (c *fakeCluster) SaveSnapshot(context.Context) (raftnode.SnapshotFile, error) {
	b, err := c.st.Snapshot()
	return raftnode.SnapshotFile{State: b, Meta: raftnode.SnapshotMeta{ID: "3-9-1", Node: "auditor-1", Index: 9, Term: 3, Peers: c.Status().Peers, ConfigIndex: 1}}, err
}

// complianceAPI serves the compliance API of package compliance over HTTPS
// on 127.0.0.1 with auditor-1's certificate, requiring a client
// certificate from the federation CA as nzc-auditor does; it records the
// client's identity.
func (f *ledgerFixture) complianceAPI(t *testing.T, st *ledger.State, signers int) (addr string, cluster *fakeCluster, clients func() []string) {
	t.Helper()
	return f.complianceAPIWith(t, st, signers, nil)
}

// complianceAPIWith is complianceAPI with the API's handler wrapped by
// wrap, when not nil: an auditor that lies about what it serves.
func (f *ledgerFixture) complianceAPIWith(t *testing.T, st *ledger.State, signers int, wrap func(http.Handler) http.Handler) (addr string, cluster *fakeCluster, clients func() []string) {
	t.Helper()
	return f.complianceAPIOf(t, f.auditors[0], st, signers, wrap)
}

// complianceAPIOf is complianceAPIWith served with the certificate of
// party as.
func (f *ledgerFixture) complianceAPIOf(t *testing.T, as crypto.PartyFiles, st *ledger.State, signers int, wrap func(http.Handler) http.Handler) (addr string, cluster *fakeCluster, clients func() []string) {
	t.Helper()
	ca := cryptotest.CACert(t, f.m)
	cred := cryptotest.Credential(t, f.m, as)
	var (
		mu   sync.Mutex
		seen []string
	)
	cluster = &fakeCluster{t: t, f: f, st: st, signers: signers}
	api := (&compliance.API{Cluster: cluster, Ledger: st, Self: "auditor-1", Proposer: applier{st}}).Handler()
	if wrap != nil {
		api = wrap(api)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.TLS.PeerCertificates[0].Subject.String())
		mu.Unlock()
		api.ServeHTTP(w, r)
	}))
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cred.TLSCertificate()}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String(), cluster, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

func TestLedgerExportThenVerify(t *testing.T) {
	f := newLedgerFixture(t)
	st := f.log(t, 0)
	addr, _, clients := f.complianceAPI(t, st, 2)
	out := filepath.Join(t.TempDir(), "ledger.export")
	text, err := runNZC(t, "ledger", "export", "--api", addr, "--federation", f.dir, "--as", "compliance", "--out", out)
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if !strings.Contains(text, "4 entries, 1 checkpoints") {
		t.Fatalf("summary %q", text)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if x, err := ledger.DecodeExport(got); err != nil || len(x.Entries) != 4 || len(x.Checkpoints) != 1 {
		t.Fatalf("written export: %v", err)
	}
	if text, err := runNZC(t, "ledger", "verify", "--export", out, "--federation", f.dir); err != nil {
		t.Fatalf("the fetched export does not verify: %v\n%s", err, text)
	}

	text, err = runNZC(t, "ledger", "accounts", "--api", addr, "--federation", f.dir, "--format", "json")
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	var accounts []ledger.Account
	if err := json.Unmarshal([]byte(text), &accounts); err != nil || len(accounts) != 2 || accounts[0].Hospital != "hospital-1" || accounts[0].CapEpsilon != 8 {
		t.Fatalf("accounts %+v (%v)\n%s", accounts, err, text)
	}
	text, err = runNZC(t, "ledger", "accounts", "--api", addr, "--federation", f.dir)
	if err != nil || !strings.Contains(text, "hospital hospital-2: ε=0 of cap 8") {
		t.Fatalf("%v\n%s", err, text)
	}
	if c := clients(); len(c) != 5 || !strings.Contains(c[0], "compliance") {
		t.Fatalf("client identities %v, want the compliance party's five times (status, checkpoint, export, accounts twice)", c)
	}

	// Errors that must say what to do, and leave no file behind.
	bad := filepath.Join(t.TempDir(), "bad.export")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"export", "--federation", f.dir, "--out", bad}, "no configuration naming auditor auditor-1's compliance API: give every auditor as --api ID=HOST:PORT"},
		{[]string{"export", "--api", addr, "--federation", f.dir}, "--out FILE is required"},
		{[]string{"export", "--api", addr, "--federation", f.dir, "--as", "nobody", "--out", bad}, `no party "nobody"`},
		{[]string{"accounts", "--api", "127.0.0.1:1", "--federation", f.dir, "--timeout", "5s"}, "is an auditor's compliance API listening there?"},
	} {
		text, err := runNZC(t, append([]string{"ledger"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%v: error %v, want %q\n%s", tc.args, err, tc.want, text)
		}
	}
	if _, err := os.Stat(bad); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a failed export left %s behind (%v)", bad, err)
	}
}

func TestLedgerStatus(t *testing.T) {
	f := newLedgerFixture(t)
	older := f.log(t, 0)
	addr, cluster, _ := f.complianceAPI(t, older, 2)

	saved := filepath.Join(t.TempDir(), "kept.checkpoint")
	text, err := runNZC(t, "ledger", "status", "--api", addr, "--federation", f.dir, "--save-checkpoint", saved)
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	for _, want := range []string{"auditor auditor-1 (127.0.0.1:7500) is Leader in term 3", "member auditor-2 at 127.0.0.1:7501",
		"ledger nzc.test/cli: 4 entries", "latest checkpoint: 4 entries", "cosigned by auditor-1, auditor-2 (a majority of 3; 2 needed); not by auditor-3",
		"saved the checkpoint of 4 entries"} {
		if !strings.Contains(text, want) {
			t.Fatalf("output lacks %q:\n%s", want, text)
		}
	}
	text, err = runNZC(t, "ledger", "status", "--api", addr, "--federation", f.dir, "--as", "hospital-1", "--format", "json")
	var s ledgerStatus
	if err != nil || json.Unmarshal([]byte(text), &s) != nil || len(s.Views.Views) != 1 || s.Largest == nil || s.Largest.Size != 4 ||
		s.Views.Views[0].Status.Auditor.CommitIndex != 9 || !s.Views.Views[0].Cosigned || s.Age == nil || *s.Age > 60 {
		t.Fatalf("%v: %+v\n%s", err, s, text)
	}

	// The saved checkpoint is what a later verify takes with --earlier:
	// the same log extends it, a rewritten one is a fork.
	if text, err := runNZC(t, "ledger", "verify", "--federation", f.dir, "--export", f.encode(t, f.export(t, older)), "--earlier", saved); err != nil {
		t.Fatalf("the log that was checkpointed does not extend its checkpoint: %v\n%s", err, text)
	}
	out := f.fails(t, "--export", f.encode(t, f.export(t, f.log(t, 7))), "--earlier", saved)
	if !strings.Contains(out, "FAIL fork") {
		t.Fatalf("a rewritten log is not a fork:\n%s", out)
	}

	// Saving again keeps the file moving forward only: a longer log that
	// extends it replaces it; a rolled-back, forked or rewritten one is
	// refused and the file keeps what it had.
	if _, err := older.Apply([]byte("a refused command still grows the log")); err != nil {
		t.Fatal(err)
	}
	text, err = runNZC(t, "ledger", "status", "--api", addr, "--federation", f.dir, "--save-checkpoint", saved)
	if err != nil || !strings.Contains(text, "saved the checkpoint of 5 entries") || !strings.Contains(text, "extends the checkpoint of 4 entries") {
		t.Fatalf("saving a checkpoint that extends the kept one: %v\n%s", err, text)
	}
	kept, _ := os.ReadFile(saved)
	grown := func(st *ledger.State, n int) *ledger.State {
		for st.TreeSize() < int64(n) {
			if _, err := st.Apply([]byte("filler")); err != nil {
				t.Fatal(err)
			}
		}
		return st
	}
	for _, tc := range []struct {
		name string
		st   *ledger.State
		want string
	}{
		{"rolled back", f.log(t, 0), "the older checkpoint (size 5) is larger"},
		{"forked", grown(f.log(t, 7), 5), "fork"},
		{"rewritten and grown", grown(f.log(t, 7), 6), "is not a prefix"},
	} {
		other, _, _ := f.complianceAPI(t, tc.st, 2)
		text, err := runNZC(t, "ledger", "status", "--api", other, "--federation", f.dir, "--save-checkpoint", saved)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "nothing saved") {
			t.Fatalf("%s: %v, want %q\n%s", tc.name, err, tc.want, text)
		}
		if now, _ := os.ReadFile(saved); !bytes.Equal(now, kept) {
			t.Fatalf("%s: the kept checkpoint was replaced", tc.name)
		}
	}

	// One signature is not a majority: nothing is saved.
	cluster.signers = 1
	lone := filepath.Join(t.TempDir(), "lone.checkpoint")
	if text, err := runNZC(t, "ledger", "status", "--api", addr, "--federation", f.dir, "--save-checkpoint", lone); err == nil || !strings.Contains(err.Error(), "nothing saved") {
		t.Fatalf("saving a checkpoint without a majority: %v\n%s", err, text)
	}
	if _, err := os.Stat(lone); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a checkpoint without a majority was saved (%v)", err)
	}
	// Without a majority status reports what it saw and fails.
	if text, err := runNZC(t, "ledger", "status", "--api", addr, "--federation", f.dir); !errors.Is(err, compliance.ErrNoMajority) || !strings.Contains(text, "NOT a majority") {
		t.Fatalf("%v\n%s", err, text)
	}

	// An auditor that says a majority signed when one did: the note is
	// checked against the federation's keys, and nothing is saved.
	liar, _, _ := f.complianceAPIWith(t, older, 1, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/checkpoint" {
				h.ServeHTTP(w, r)
				return
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			var cp compliance.CheckpointInfo
			if err := json.Unmarshal(rec.Body.Bytes(), &cp); err != nil {
				t.Error(err)
			}
			cp.QuorumMet = true
			_ = json.NewEncoder(w).Encode(cp)
		})
	})
	if text, err := runNZC(t, "ledger", "status", "--api", liar, "--federation", f.dir, "--save-checkpoint", lone); err == nil || !strings.Contains(err.Error(), "does not verify against the federation's auditor keys") {
		t.Fatalf("saving a checkpoint on the auditor's word: %v\n%s", err, text)
	}
	if _, err := os.Stat(lone); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a checkpoint one auditor signed was saved on its word (%v)", err)
	}

	if _, err := runNZC(t, "ledger", "status"); err == nil || !strings.Contains(err.Error(), "--federation DIR is required") {
		t.Fatalf("no --api: %v", err)
	}
}

// grownLog is st with refused filler commands appended until it has n
// entries.
func grownLog(t *testing.T, st *ledger.State, n int) *ledger.State {
	t.Helper()
	for st.TreeSize() < int64(n) {
		if _, err := st.Apply([]byte("filler")); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// status and export ask every auditor and compare their cosigned views: a
// lagging auditor is a prefix (proven), an auditor showing a different log
// is a split view or a fork, and export then writes nothing.
func TestLedgerStatusComparesEveryAuditor(t *testing.T) {
	f := newLedgerFixture(t)
	serve := func(logs ...*ledger.State) []string {
		var apis []string
		for i, st := range logs {
			addr, _, _ := f.complianceAPIOf(t, f.auditors[i], st, 2, nil)
			apis = append(apis, f.auditors[i].ID+"="+addr)
		}
		return []string{"--api", strings.Join(apis, ","), "--federation", f.dir}
	}
	long := grownLog(t, f.log(t, 0), 6)
	tests := []struct {
		name  string
		logs  []*ledger.State
		ok    bool
		want  string
		proof int
	}{
		{"same log", []*ledger.State{long, long, long}, true, "3 of 3 auditors answered; no two views disagree (0 consistency proofs checked)", 0},
		{"one lags", []*ledger.State{long, grownLog(t, f.log(t, 0), 5), f.log(t, 0)}, true, "no two views disagree (2 consistency proofs checked)", 2},
		{"split view", []*ledger.State{long, long, grownLog(t, f.log(t, 7), 7)}, false, "SPLIT VIEW: auditor auditor-1's cosigned checkpoint of 6 entries is not proven a prefix of auditor auditor-3's of 7 entries", 0},
		{"fork", []*ledger.State{long, grownLog(t, f.log(t, 7), 6), long}, false, "FORK: auditors auditor-2 and auditor-1 show cosigned checkpoints of 6 entries with different roots", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := serve(tc.logs...)
			text, err := runNZC(t, append([]string{"ledger", "status"}, args...)...)
			if (err == nil) != tc.ok || !strings.Contains(text, tc.want) {
				t.Fatalf("status: %v, want ok=%v and %q\n%s", err, tc.ok, tc.want, text)
			}
			if !tc.ok && !errors.Is(err, ErrSplitView) {
				t.Fatalf("status: %v, want ErrSplitView", err)
			}
			jtext, _ := runNZC(t, append([]string{"ledger", "status", "--format", "json"}, args...)...)
			var s ledgerStatus
			if err := json.NewDecoder(strings.NewReader(jtext)).Decode(&s); err != nil || s.Consistent != tc.ok || s.Proofs != tc.proof || s.Answered != 3 || s.Largest == nil {
				t.Fatalf("status JSON: %v %+v\n%s", err, s, jtext)
			}
			out := filepath.Join(t.TempDir(), "ledger.export")
			text, err = runNZC(t, append([]string{"ledger", "export", "--out", out}, args...)...)
			_, statErr := os.Stat(out)
			if tc.ok {
				if err != nil || statErr != nil || !strings.Contains(text, "from auditor auditor-1") {
					t.Fatalf("export: %v (%v)\n%s", err, statErr, text)
				}
			} else if err == nil || !errors.Is(err, ErrSplitView) || statErr == nil {
				t.Fatalf("export of a split view: %v, file %v\n%s", err, statErr, text)
			}
		})
	}
}

// The client talks to the auditor it asked for: a server presenting
// another auditor's certificate, or another party's, is refused.
func TestLedgerClientChecksTheAuditorsIdentity(t *testing.T) {
	f := newLedgerFixture(t)
	st := f.log(t, 0)
	a1, _, _ := f.complianceAPI(t, st, 2)
	student, _, seen := f.complianceAPIOf(t, f.m.ByRole(crypto.RoleStudent)[0], st, 2, nil)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"accounts", "--api", "auditor-2=" + a1}, "the server is nzc://auditor/auditor-1, not auditor auditor-2"},
		{[]string{"status", "--api", "auditor-3=" + a1}, "the server is nzc://auditor/auditor-1, not auditor auditor-3"},
		{[]string{"accounts", "--api", student}, "the server is not the auditor asked for"},
		{[]string{"accounts", "--api", "rogue-1=" + a1}, `the federation has no auditor "rogue-1"`},
	} {
		text, err := runNZC(t, append(append([]string{"ledger"}, tc.args...), "--federation", f.dir, "--timeout", "5s")...)
		if err == nil && strings.Contains(text, tc.want) {
			continue // status reports an unreachable auditor and goes on
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%v: %v, want %q\n%s", tc.args, err, tc.want, text)
		}
	}
	if len(seen()) != 0 {
		t.Fatalf("requests reached a server that is not an auditor: %v", seen())
	}
	if text, err := runNZC(t, "ledger", "accounts", "--api", "auditor-1="+a1, "--federation", f.dir); err != nil {
		t.Fatalf("the auditor asked for: %v\n%s", err, text)
	}
}

// A hospital lists the charges naming it with its own certificate, each
// receipt proven here; it reads its account too, and not another
// hospital's charges.
func TestLedgerChargesAsHospital(t *testing.T) {
	f := newLedgerFixture(t)
	st := f.log(t, 0)
	agg, _ := f.m.Party(crypto.RoleAggregator, "aggregator")
	curve := mechanism.RDPDataIndependentGaussian(mechanism.DefaultGrid(), 400).Values()
	for i, hs := range [][]string{{"hospital-1", "hospital-2"}, {"hospital-2"}, {"hospital-1"}} {
		batch := fmt.Sprintf("batch-%d", i)
		cmd, err := ledger.Sign(&ledger.Charge{BatchID: batch, Student: "student-1", Hospitals: hs, Mechanism: "gnmax",
			Params: mechanism.Params{Mechanism: mechanism.GNMax, Teachers: 250, Classes: 10, Sigma: 400}.LedgerParams(), Queries: 1, Answers: 1,
			Curve: curve, AnswersHash: sha256.Sum256([]byte(batch)), Timestamp: int64(2_000_000_000_000_000_000 + i)}, "aggregator", f.key(t, agg))
		if err != nil {
			t.Fatal(err)
		}
		if r, err := st.Apply(cmd); err != nil || r.Status != ledger.StatusAccepted {
			t.Fatalf("charge %d: %+v %v", i, r, err)
		}
	}
	addr, _, _ := f.complianceAPI(t, st, 2)
	text, err := runNZC(t, "ledger", "charges", "--api", addr, "--federation", f.dir, "--as", "hospital-1", "--format", "json")
	var out chargesOutput
	if err != nil || json.Unmarshal([]byte(text), &out) != nil || len(out.Charges) != 2 || out.ProofsVerified != 2 ||
		out.Charges[0].BatchID != "batch-0" || out.Charges[1].BatchID != "batch-2" {
		t.Fatalf("%v: %+v\n%s", err, out, text)
	}
	if text, err := runNZC(t, "ledger", "accounts", "--api", addr, "--federation", f.dir, "--as", "hospital-1"); err != nil || !strings.Contains(text, "hospital hospital-1") {
		t.Fatalf("accounts with a hospital's certificate: %v\n%s", err, text)
	}
	if text, err := runNZC(t, "ledger", "charges", "--api", addr, "--federation", f.dir, "--as", "hospital-1", "--hospital", "hospital-2"); err == nil || !strings.Contains(err.Error(), "only the charges naming itself") {
		t.Fatalf("a hospital reading another's charges: %v\n%s", err, text)
	}
	if text, err := runNZC(t, "ledger", "charges", "--api", addr, "--federation", f.dir, "--hospital", "hospital-2"); err != nil || !strings.Contains(text, "2 charges name hospital-2; each receipt proven") {
		t.Fatalf("compliance reading hospital-2's charges: %v\n%s", err, text)
	}
}

// An auditor's certificate reads any auditor's API; it administers only
// its own.
func TestLedgerAuditorReadsAnotherAuditor(t *testing.T) {
	f := newLedgerFixture(t)
	a1, _, _ := f.complianceAPI(t, f.log(t, 0), 2)
	if text, err := runNZC(t, "ledger", "accounts", "--api", a1, "--federation", f.dir, "--as", "auditor-2"); err != nil {
		t.Fatalf("auditor-2 reading auditor-1: %v\n%s", err, text)
	}
	if _, err := runNZC(t, "ledger", "snapshot", "save", "--api", a1, "--federation", f.dir, "--as", "auditor-2", "--out", filepath.Join(t.TempDir(), "s")); err == nil ||
		!strings.Contains(err.Error(), "not auditor auditor-2") {
		t.Fatalf("auditor-2 administering auditor-1: %v", err)
	}
}

// TestLedgerKeepsTheLastCheckpoint: verify and status keep the last
// checkpoint they verified for a federation without being asked, and fail
// on a log rolled back or forked behind it; --no-keep checks nothing.
func TestLedgerKeepsTheLastCheckpoint(t *testing.T) {
	f := newLedgerFixture(t)
	keep := t.TempDir()
	st := f.log(t, 0)
	four := f.encode(t, f.export(t, st))
	forked := f.encode(t, f.export(t, f.log(t, 7))) // the same size, another last entry
	verify := func(export string, extra ...string) (string, error) {
		return runNZC(t, append([]string{"ledger", "verify", "--federation", f.dir, "--checkpoints", keep, "--export", export}, extra...)...)
	}
	keptSize := func() int64 {
		t.Helper()
		files, _ := filepath.Glob(filepath.Join(keep, "*.checkpoint"))
		if len(files) != 1 {
			t.Fatalf("kept files %v, want one for the federation", files)
		}
		b, _ := os.ReadFile(files[0])
		c, err := ledger.PeekCheckpoint(b)
		if err != nil {
			t.Fatal(err)
		}
		return c.Size
	}
	if text, err := verify(four); err != nil || keptSize() != 4 {
		t.Fatalf("first verify: %v\n%s", err, text)
	}
	if _, err := st.Apply([]byte("a refused command still grows the log")); err != nil {
		t.Fatal(err)
	}
	if text, err := verify(f.encode(t, f.export(t, st))); err != nil || keptSize() != 5 {
		t.Fatalf("a grown log: %v\n%s", err, text)
	}
	for _, tc := range []struct{ name, export string }{{"rolled back", four}, {"forked", forked}} {
		text, err := verify(tc.export)
		if !errors.Is(err, ErrLedgerNotVerified) || !strings.Contains(text, "FAIL") {
			t.Fatalf("%s: %v, want a failure against the kept checkpoint\n%s", tc.name, err, text)
		}
		if keptSize() != 5 {
			t.Fatalf("%s: the kept checkpoint moved", tc.name)
		}
	}
	if text, err := verify(four, "--no-keep"); err != nil {
		t.Fatalf("--no-keep checks nothing kept: %v\n%s", err, text)
	}

	// status keeps the same file: the auditors serving the grown log pass,
	// the rolled-back one is refused and the file stays.
	status := func(st *ledger.State) (string, error) {
		addr, _, _ := f.complianceAPI(t, st, 2)
		return runNZC(t, "ledger", "status", "--api", addr, "--federation", f.dir, "--checkpoints", keep)
	}
	if text, err := status(st); err != nil || !strings.Contains(text, "saved the checkpoint of 5 entries") {
		t.Fatalf("status of the grown log: %v\n%s", err, text)
	}
	if text, err := status(f.log(t, 0)); err == nil || !strings.Contains(err.Error(), "rolled back") || keptSize() != 5 {
		t.Fatalf("status of a rolled-back log: %v\n%s", err, text)
	}
}

// `nzc ledger accounts` lists every cap change with its time, a raise
// flagged, and the account's ε at the federation's δ.
func TestLedgerAccountsListsCapChanges(t *testing.T) {
	a := ledger.Account{Hospital: "hospital-1", CapEpsilon: 6, CapDelta: 1e-6, Epsilon: 1.5, FederationDelta: 1e-5, EpsilonAtFederationDelta: 1.2,
		CapChanges: []ledger.CapChange{
			{Entry: 7, Timestamp: 1_700_000_000_000_000_000, Version: 1, Signer: "hospital-1", FromEpsilon: 8, FromDelta: 1e-5, ToEpsilon: 4, ToDelta: 1e-6},
			{Entry: 9, Timestamp: 1_700_000_060_000_000_000, Version: 2, Signer: "hospital-1", FromEpsilon: 4, FromDelta: 1e-6, ToEpsilon: 6, ToDelta: 1e-6, Raise: true},
		}}
	var b strings.Builder
	printAccounts(&b, []ledger.Account{a})
	for _, want := range []string{
		"ε=1.2 at the federation's δ=1e-05", "2 cap changes, 1 of them raises",
		"cap changed (no raise) at entry 7 by hospital-1, version 1: ε=8 δ=1e-05 → ε=4 δ=1e-06, at 2023-11-14T22:13:20Z",
		"cap RAISED at entry 9 by hospital-1, version 2: ε=4 δ=1e-06 → ε=6 δ=1e-06, at 2023-11-14T22:14:20Z",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("accounts text lacks %q:\n%s", want, b.String())
		}
	}
}

// An auditor that is stopped or cut off — its address accepts connections
// and never answers, where a dead one refuses them — holds no read up past
// compliance.ViewGrace once the others have answered: status and export
// succeed, well within their --timeout, naming it as missing.
func TestLedgerReadsPastAHangingAuditor(t *testing.T) {
	f := newLedgerFixture(t)
	st := grownLog(t, f.log(t, 0), 6)
	var apis []string
	for _, a := range f.auditors[:2] {
		addr, _, _ := f.complianceAPIOf(t, a, st, 2, nil)
		apis = append(apis, a.ID+"="+addr)
	}
	hang, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hang.Close() })
	go func() {
		var held []net.Conn // accepted, never answered
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := hang.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	hung := f.auditors[2].ID
	apis = append(apis, hung+"="+hang.Addr().String())
	// The timeout is the whole command's: a read that waited for the hung
	// auditor until then fails.
	args := []string{"--api", strings.Join(apis, ","), "--federation", f.dir, "--timeout", "20s"}
	text, err := runNZC(t, append([]string{"ledger", "status"}, args...)...)
	if err != nil || !strings.Contains(text, "missing: "+hung+" did not answer") || !strings.Contains(text, "no answer within 1s of a majority's") {
		t.Fatalf("status with %s hanging: %v\n%s", hung, err, text)
	}
	out := filepath.Join(t.TempDir(), "ledger.export")
	if text, err := runNZC(t, append([]string{"ledger", "export", "--out", out}, args...)...); err != nil || !strings.Contains(text, "missing: "+hung) {
		t.Fatalf("export with %s hanging: %v\n%s", hung, err, text)
	}
}
