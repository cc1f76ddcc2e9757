package faults

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/nzcfed/nzc/cmd/internal/config"
	"github.com/nzcfed/nzc/cmd/internal/node"
	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/internal/proctest"
	"github.com/nzcfed/nzc/internal/synth"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/party/student"
)

// The federation every fault test runs: 3 auditors, 3 hospitals of
// teachersPerHospital teachers each, one student. The aggregator needs 2 of
// the 3 hospitals (quorum) and waits batchDeadline for their votes.
const (
	hospitals           = 3
	teachersPerHospital = 5
	classes             = 4
	dim                 = 6
	quorum              = 2
	batchSize           = 8
	batchDeadline       = 4 * time.Second
	ledgerTimeout       = 3 * time.Second
)

// binaries are the programs the tests run.
var binaries = []string{"nzc", "nzc-auditor", "nzc-aggregator", "nzc-teacher", "nzc-student"}

// buildBinaries builds the party binaries into a temporary directory.
func buildBinaries(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go toolchain to build the party binaries")
	}
	bin := t.TempDir()
	args := []string{"build", "-o", bin + string(filepath.Separator)}
	if raceEnabled {
		args = append(args, "-race")
	}
	for _, b := range binaries {
		args = append(args, "github.com/nzcfed/nzc/cmd/"+b)
	}
	out, err := exec.Command("go", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("build the party binaries: %v\n%s", err, out)
	}
	return bin
}

// freeAddr returns a loopback address whose port is free for TCP and UDP.
func freeAddr(t *testing.T) string {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		u, err := net.ListenPacket("udp", addr)
		l.Close()
		if err == nil {
			u.Close()
			return addr
		}
	}
	t.Fatal("no free loopback port")
	return ""
}

// proc is a party process. Its stderr and stdout go to its log file.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// wait waits (bounded) for the process to exit.
func (p *proc) wait(t *testing.T, within time.Duration) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		t.Fatalf("%s did not exit within %v", p.name, within)
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill9 kills the process with SIGKILL: no shutdown code runs.
func (p *proc) kill9(t *testing.T) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	p.wait(t, 10*time.Second)
}

// stop interrupts the process and waits for it, killing it after 10s.
func (p *proc) stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proc) logText() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// waitLog waits until the process's log holds s.
func (p *proc) waitLog(t *testing.T, within time.Duration, s string) {
	t.Helper()
	proctest.WaitFor(t, within, fmt.Sprintf("%s to log %q", p.name, s), func() bool { return strings.Contains(p.logText(), s) })
}

type auditorNode struct {
	id      string
	cfgPath string
	cfg     config.Auditor
	raft    *tcpProxy // every auditor dials this auditor's raft port through it
	intake  *udpProxy // the aggregator reaches this auditor's intake through it
	p       *proc
}

type hospitalNode struct {
	id      string
	cfgPath string
	cfg     config.Teacher
	p       *proc
}

// fed is a federation of processes on loopback.
type fed struct {
	t   *testing.T
	dir string
	bin string
	m   *crypto.Manifest
	api *http.Client

	auditors  []*auditorNode
	hospitals []*hospitalNode
	aggPath   string
	aggCfg    config.Aggregator
	agg       *proc
	stuPath   string
	stuCfg    config.Student
	dataTrain string
	dataQuery string

	mu    sync.Mutex
	procs []*proc
	runs  int
}

// newFed provisions a federation with `nzc init`, makes its data, trains
// the hospitals' teachers and rewrites every configuration to the test's
// addresses. It starts nothing.
func newFed(t *testing.T, bin string) *fed {
	t.Helper()
	f := &fed{t: t, dir: t.TempDir(), bin: bin}
	fdir := filepath.Join(f.dir, "federation")
	f.oneShot("init", "nzc", "init", "--dir", fdir, "--hospitals", strconv.Itoa(hospitals), "--auditors", "3", "--students", "1")
	m, err := crypto.LoadManifest(fdir)
	if err != nil {
		t.Fatal(err)
	}
	f.m = m
	ca, err := crypto.LoadCert(m.Path(m.CACert))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	// The compliance API serves the export to the compliance party.
	cp, ok := m.Party(crypto.RoleCompliance, string(crypto.RoleCompliance))
	if !ok {
		t.Fatal("the federation has no compliance party")
	}
	cred, err := crypto.LoadCredential(m.Path(cp.Cert), m.Path(cp.Key))
	if err != nil {
		t.Fatal(err)
	}
	f.api = &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool,
		Certificates: []tls.Certificate{cred.TLSCertificate()}, MinVersion: tls.VersionTLS13}}}
	t.Cleanup(f.stopAll)

	// Data: one seeded problem; the hospitals share a training file cut
	// into disjoint parts, the student asks about other samples.
	blobs := synth.Blobs{Classes: classes, Dim: dim, Spread: 3, CentreSeed: [2]uint64{7, 11}}
	f.dataTrain = filepath.Join(f.dir, "train.csv")
	f.dataQuery = filepath.Join(f.dir, "queries.csv")
	writeCSV(t, f.dataTrain, blobs.Make(1, 600))
	writeCSV(t, f.dataQuery, blobs.Make(2, 400))

	// Auditors: raft through a TCP proxy each, intake through a UDP proxy.
	auds := m.ByRole(crypto.RoleAuditor)
	for _, a := range auds {
		n := &auditorNode{id: a.ID, cfgPath: filepath.Join(fdir, a.ID+".yaml")}
		readYAML(t, n.cfgPath, &n.cfg)
		n.cfg.Raft, n.cfg.Listen, n.cfg.API, n.cfg.Ops.Listen = freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
		n.raft = newTCPProxy(t, n.cfg.Raft)
		n.intake = newUDPProxy(t, n.cfg.Listen)
		n.cfg.Advertise = n.raft.Addr()
		n.cfg.Dashboard = "" // not under test; its default port may be taken
		n.cfg.Log.Level = "info"
		f.auditors = append(f.auditors, n)
	}
	var peers, intakes []string
	for _, n := range f.auditors {
		peers = append(peers, n.id+"="+n.raft.Addr())
		intakes = append(intakes, n.intake.Addr())
	}
	for _, n := range f.auditors {
		n.cfg.Peers = peers
		writeYAML(t, n.cfgPath, n.cfg)
	}

	aggAddr := freeAddr(t)
	f.aggPath = filepath.Join(fdir, "aggregator.yaml")
	readYAML(t, f.aggPath, &f.aggCfg)
	f.aggCfg.Listen, f.aggCfg.Auditors, f.aggCfg.Ops.Listen = aggAddr, intakes, freeAddr(t)
	f.aggCfg.Quorum, f.aggCfg.Hospitals, f.aggCfg.BatchDeadline = quorum, hospitals, batchDeadline
	f.aggCfg.LedgerTimeout = ledgerTimeout
	f.aggCfg.Mechanism = mechanism.Params{Mechanism: mechanism.GNMax, Sigma: 2}
	writeYAML(t, f.aggPath, f.aggCfg)

	for i, h := range m.ByRole(crypto.RoleHospital) {
		n := &hospitalNode{id: h.ID, cfgPath: filepath.Join(fdir, h.ID+".yaml")}
		readYAML(t, n.cfgPath, &n.cfg)
		n.cfg.Aggregator, n.cfg.Ops.Listen = aggAddr, freeAddr(t)
		n.cfg.Data, n.cfg.DataPart, n.cfg.DataParts = f.dataTrain, i+1, hospitals
		n.cfg.Teachers, n.cfg.Model, n.cfg.Epochs = teachersPerHospital, "softmax", 2
		n.cfg.CapEpsilon, n.cfg.CapDelta = 1e4, 1e-5
		writeYAML(t, n.cfgPath, n.cfg)
		f.hospitals = append(f.hospitals, n)
	}
	st := m.ByRole(crypto.RoleStudent)[0]
	f.stuPath = filepath.Join(fdir, st.ID+".yaml")
	readYAML(t, f.stuPath, &f.stuCfg)
	f.stuCfg.Aggregator, f.stuCfg.BatchSize = aggAddr, batchSize
	writeYAML(t, f.stuPath, f.stuCfg)

	var wg sync.WaitGroup
	for _, h := range f.hospitals {
		wg.Go(func() { f.oneShot(h.id+"-train", "nzc-teacher", "train", "--config", h.cfgPath) })
	}
	wg.Wait()
	t.Logf("%s: federation provisioned, teachers trained", time.Now().Format("15:04:05.000"))
	return f
}

func writeCSV(t *testing.T, path string, d *data.Dataset) {
	t.Helper()
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	for i := range d.Len() {
		for j := range d.Dim() {
			fmt.Fprintf(w, "%g,", d.X[i*d.Dim()+j])
		}
		fmt.Fprintf(w, "%d\n", d.Y[i])
	}
	w.Flush()
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func writeYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func (f *fed) logPath(name string) string {
	f.mu.Lock()
	f.runs++
	n := f.runs
	f.mu.Unlock()
	return filepath.Join(f.dir, fmt.Sprintf("%02d-%s.log", n, name))
}

func (f *fed) command(ctx context.Context, name, bin string, env []string, args ...string) (*exec.Cmd, string) {
	c := exec.CommandContext(ctx, filepath.Join(f.bin, bin), args...)
	c.Dir = f.dir
	c.Env = append(os.Environ(), env...)
	return c, f.logPath(name)
}

// oneShot runs a command to completion (bounded) and returns its stdout.
func (f *fed) oneShot(name, bin string, args ...string) []byte {
	f.t.Helper()
	out, err := f.tryOneShot(name, bin, nil, args...)
	if err != nil {
		f.t.Fatal(err)
	}
	return out
}

func (f *fed) tryOneShot(name, bin string, env []string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, logPath := f.command(ctx, name, bin, env, args...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	_ = os.WriteFile(logPath, errb.Bytes(), 0o644)
	if err != nil {
		return out.Bytes(), fmt.Errorf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, lastLines(errb.String(), 20))
	}
	return out.Bytes(), nil
}

func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}

// start runs a long-lived party; env adds environment variables.
func (f *fed) start(name, bin string, env []string, args ...string) *proc {
	f.t.Helper()
	c, logPath := f.command(context.Background(), name, bin, env, args...)
	lf, err := os.Create(logPath)
	if err != nil {
		f.t.Fatal(err)
	}
	c.Stdout, c.Stderr = lf, lf
	if err := c.Start(); err != nil {
		lf.Close()
		f.t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, cmd: c, log: logPath, done: make(chan struct{})}
	go func() {
		_ = c.Wait()
		lf.Close()
		close(p.done)
	}()
	f.mu.Lock()
	f.procs = append(f.procs, p)
	f.mu.Unlock()
	return p
}

// stopAll stops every process still running, newest first, and on failure
// shows the end of every log.
func (f *fed) stopAll() {
	f.mu.Lock()
	procs := f.procs
	f.procs = nil
	f.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		if !procs[i].exited() {
			procs[i].stop()
		}
	}
	if f.t.Failed() || os.Getenv("FAULTS_LOGS") != "" {
		for _, p := range procs {
			f.t.Logf("--- %s (%s):\n%s", p.name, p.log, lastLines(p.logText(), 25))
		}
	}
}

func (f *fed) startAuditor(n *auditorNode) {
	n.p = f.start(n.id, "nzc-auditor", nil, "run", "--config", n.cfgPath)
}

// startAggregator starts the aggregator; pauseAt, when not empty, makes it
// stop at that point of the release path the first time it gets there.
func (f *fed) startAggregator(pauseAt string) {
	var env []string
	if pauseAt != "" {
		env = []string{node.PauseEnv + "=" + pauseAt}
	}
	f.agg = f.start("aggregator", "nzc-aggregator", env, "run", "--config", f.aggPath)
}

func (f *fed) startHospital(h *hospitalNode, pauseAt string) {
	var env []string
	if pauseAt != "" {
		env = []string{node.PauseEnv + "=" + pauseAt}
	}
	h.p = f.start(h.id, "nzc-teacher", env, "run", "--config", h.cfgPath)
}

// startAll starts the auditors, the aggregator and the hospitals and
// waits until the aggregator sees every hospital and every account is open.
func (f *fed) startAll() {
	f.t.Helper()
	for _, a := range f.auditors {
		f.startAuditor(a)
	}
	f.startAggregator("")
	for _, h := range f.hospitals {
		f.startHospital(h, "")
	}
	f.waitConnected(hospitals, 60*time.Second)
	f.t.Logf("%s: %d hospitals connected", time.Now().Format("15:04:05.000"), hospitals)
	proctest.WaitFor(f.t, 60*time.Second, "every hospital's budget account to open", func() bool {
		accts, err := f.accounts(0)
		return err == nil && len(accts) == hospitals
	})
	f.t.Logf("%s: every account open", time.Now().Format("15:04:05.000"))
}

// get fetches an HTTP(S) URL.
func (f *fed) get(url string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	c := http.DefaultClient
	if strings.HasPrefix(url, "https://") {
		c = f.api
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// metric reads a value from the aggregator's /metrics (-1 when absent).
func (f *fed) metric(name string) float64 {
	_, b, err := f.get("http://" + f.aggCfg.Ops.Listen + "/metrics")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			x, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return x
			}
		}
	}
	return -1
}

// waitConnected waits until the aggregator has n hospitals connected.
func (f *fed) waitConnected(n int, within time.Duration) {
	f.t.Helper()
	proctest.WaitFor(f.t, within, fmt.Sprintf("the aggregator to have %d hospitals connected", n), func() bool {
		return f.metric("nzc_aggregator_hospitals_connected") == float64(n)
	})
}

// accounts reads the budget accounts from auditor i's compliance API.
func (f *fed) accounts(i int) ([]ledger.Account, error) {
	code, b, err := f.get("https://" + f.auditors[i].cfg.API + "/v1/accounts")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("accounts: %d %s", code, b)
	}
	var as []ledger.Account
	return as, json.Unmarshal(b, &as)
}

// studentRun is one `nzc-student label` run.
type studentRun struct {
	from, count int
	state       string // state directory
	out         string // labels file
	p           *proc
}

// startStudent starts labelling queries [from, from+count) with its own
// state directory (a fresh one unless state is given).
// startStudent starts a student run; extra flags follow the usual ones.
func (f *fed) startStudent(from, count int, state string, extra ...string) *studentRun {
	if state == "" {
		state = f.t.TempDir()
	}
	r := &studentRun{from: from, count: count, state: state, out: filepath.Join(f.t.TempDir(), "labels.json")}
	args := []string{"label", "--config", f.stuPath, "--state", state,
		"--data", f.dataQuery, "--from", strconv.Itoa(from), "--count", strconv.Itoa(count), "--out", r.out, "--format", "json"}
	r.p = f.start("student-label", "nzc-student", nil, append(args, extra...)...)
	return r
}

// result waits for the run and returns what the student received.
func (r *studentRun) result(t *testing.T, within time.Duration) *student.Result {
	t.Helper()
	r.p.wait(t, within)
	if code := r.p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("student run exited with %d:\n%s", code, lastLines(r.p.logText(), 30))
	}
	b, err := os.ReadFile(r.out)
	if err != nil {
		t.Fatal(err)
	}
	var res student.Result
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Batches) != (r.count+batchSize-1)/batchSize {
		t.Fatalf("student received %d batches for %d queries in batches of %d", len(res.Batches), r.count, batchSize)
	}
	return &res
}

// label runs the student to completion.
func (f *fed) label(from, count int) *student.Result {
	f.t.Helper()
	return f.startStudent(from, count, "").result(f.t, 2*time.Minute)
}

// charge is an accepted charge in the ledger.
type charge struct {
	index uint64
	c     *ledger.Charge
}

// ledgerView is the exported, verified ledger.
type ledgerView struct {
	entries  []ledger.Entry
	charges  map[string][]charge // accepted charges by batch id
	accounts []ledger.Account
}

// verifiedLedger fetches the export from auditor i, verifies it against
// the auditors' keys from the manifest (quorum-signed checkpoint, Merkle
// tree, replay of every entry) and decodes its charges.
func (f *fed) verifiedLedger(t *testing.T, i int) *ledgerView {
	return f.verifiedLedgerAtLeast(t, i, 0)
}

// verifiedLedgerAtLeast is verifiedLedger once the auditor has applied at
// least size entries (a follower may lag the leader by a moment).
func (f *fed) verifiedLedgerAtLeast(t *testing.T, i int, size int) *ledgerView {
	t.Helper()
	var b []byte
	proctest.WaitFor(t, 30*time.Second, fmt.Sprintf("a cosigned export of at least %d entries from %s", size, f.auditors[i].id), func() bool {
		code, body, err := f.get("https://" + f.auditors[i].cfg.API + "/v1/export")
		if err != nil || code != http.StatusOK {
			return false
		}
		x, err := ledger.DecodeExport(body)
		b = body
		return err == nil && len(x.Entries) >= size
	})
	var keys []string
	for _, a := range f.m.ByRole(crypto.RoleAuditor) {
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
	rep := ledger.Verify(b, ledger.VerifyOptions{TrustedKeys: keys})
	if !rep.OK {
		t.Fatalf("the ledger export does not verify: %v", rep.Failures())
	}
	x, err := ledger.DecodeExport(b)
	if err != nil {
		t.Fatal(err)
	}
	v := &ledgerView{charges: map[string][]charge{}}
	for _, eb := range x.Entries {
		e, err := ledger.DecodeEntry(eb)
		if err != nil {
			t.Fatal(err)
		}
		v.entries = append(v.entries, e)
		if e.Status != ledger.StatusAccepted {
			continue
		}
		c, err := ledger.DecodeCommand(e.Command)
		if err != nil {
			t.Fatal(err)
		}
		if ch, ok := c.Body.(*ledger.Charge); ok {
			v.charges[ch.BatchID] = append(v.charges[ch.BatchID], charge{e.Index, ch})
		}
	}
	if v.accounts, err = f.accounts(i); err != nil {
		t.Fatal(err)
	}
	return v
}

// want is what a batch the student received must show in the ledger.
type want struct {
	hospitals []string // the hospitals that must be charged for it; nil: all
}

// checkInvariants checks the ledger against every student result:
//   - every batch the student holds has exactly one accepted charge, at the
//     index the aggregator reported, whose answers hash is the hash of the
//     labels the student opened (no label without a committed charge; the
//     delivered labels are the charged ones);
//   - every accepted charge is for a batch the student holds (no charge
//     for answers that were lost) — the student's runs must cover every
//     batch ever asked;
//   - each account's charges and answers are the sums over the accepted
//     charges naming it (nothing double-counted or dropped), and the
//     export's replay verified above reproduces its ε.
func (f *fed) checkInvariants(t *testing.T, results []*student.Result, special map[string]want) {
	t.Helper()
	top := uint64(0)
	for _, r := range results {
		for _, b := range r.Batches {
			top = max(top, b.LedgerIndex)
		}
	}
	v := f.verifiedLedgerAtLeast(t, f.leader(t), int(top)+1)
	all := make([]string, 0, len(f.hospitals))
	for _, h := range f.hospitals {
		all = append(all, h.id)
	}
	held := map[string]bool{}
	for _, r := range results {
		for _, b := range r.Batches {
			held[b.BatchID] = true
			cs := v.charges[b.BatchID]
			if len(cs) != 1 {
				t.Errorf("batch %s…: %d accepted charges in the ledger, want exactly 1", b.BatchID[:12], len(cs))
				continue
			}
			c := cs[0]
			if c.index != b.LedgerIndex {
				t.Errorf("batch %s…: the student was told ledger index %d, the charge is at %d", b.BatchID[:12], b.LedgerIndex, c.index)
			}
			if hex.EncodeToString(c.c.AnswersHash[:]) != b.AnswersHash {
				t.Errorf("batch %s…: the labels the student opened are not the ones charged (hash %s…, charged %x…)", b.BatchID[:12], b.AnswersHash[:12], c.c.AnswersHash[:6])
			}
			answered := uint64(0)
			for _, l := range b.Labels {
				if l >= 0 {
					answered++
				}
			}
			if c.c.Answers != answered || c.c.Queries != uint64(len(b.Labels)) {
				t.Errorf("batch %s…: charged %d answers of %d queries, the student holds %d of %d", b.BatchID[:12], c.c.Answers, c.c.Queries, answered, len(b.Labels))
			}
			if w, ok := special[b.BatchID]; ok && w.hospitals != nil {
				if strings.Join(c.c.Hospitals, ",") != strings.Join(w.hospitals, ",") {
					t.Errorf("batch %s…: charged to %v, want %v", b.BatchID[:12], c.c.Hospitals, w.hospitals)
				}
			} else if len(c.c.Hospitals) < quorum || !subset(c.c.Hospitals, all) {
				// Whoever was connected voted; at least the quorum.
				t.Errorf("batch %s…: charged to %v, want at least %d of %v", b.BatchID[:12], c.c.Hospitals, quorum, all)
			}
		}
	}
	perHospital := map[string][2]uint64{}
	for id, cs := range v.charges {
		if !held[id] {
			t.Errorf("batch %s…: charged at index %d but the student never received it", id[:12], cs[0].index)
		}
		for _, c := range cs {
			for _, h := range c.c.Hospitals {
				s := perHospital[h]
				s[0]++
				s[1] += c.c.Answers
				perHospital[h] = s
			}
		}
	}
	for _, a := range v.accounts {
		if s := perHospital[a.Hospital]; a.Charges != s[0] || a.Answers != s[1] {
			t.Errorf("account %s: %d charges, %d answers; the accepted charges naming it sum to %d, %d", a.Hospital, a.Charges, a.Answers, s[0], s[1])
		}
	}
}

// batchIDs returns the batch ids of queries [from, from+count), as the
// student derives them.
func (f *fed) batchIDs(from, count int) []string {
	f.t.Helper()
	d, err := data.LoadCSV(f.dataQuery)
	if err != nil {
		f.t.Fatal(err)
	}
	hash := student.FeatureHash(d.Slice(from, from+count))
	var ids []string
	for i := range (count + batchSize - 1) / batchSize {
		ids = append(ids, hex.EncodeToString(student.BatchID(f.stuCfg.ID, hash, batchSize, i)))
	}
	return ids
}

// outboxRecord reads the aggregator's outbox record of a batch.
func (f *fed) outboxRecord(batch string) map[string]any {
	b, err := os.ReadFile(filepath.Join(f.aggCfg.Outbox, batch+".json"))
	if err != nil {
		f.t.Fatal(err)
	}
	var r map[string]any
	if err := json.Unmarshal(b, &r); err != nil {
		f.t.Fatal(err)
	}
	return r
}

// restartAggregator stops the aggregator and starts it again (pausing at
// pauseAt, when not empty), and waits for every hospital to reconnect.
func (f *fed) restartAggregator(t *testing.T, pauseAt string) {
	t.Helper()
	f.agg.stop()
	f.startAggregator(pauseAt)
	f.waitConnected(hospitals, 60*time.Second)
}

// hexOf turns a JSON-decoded []byte (base64 text) into hex.
func hexOf(v any) string {
	s, _ := v.(string)
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return "undecodable:" + s
	}
	return hex.EncodeToString(b)
}

// leaderIndex returns the index of an auditor that says it leads raft
// now, or -1.
func (f *fed) leaderIndex() int {
	for i, a := range f.auditors {
		if a.p == nil || a.p.exited() {
			continue
		}
		_, b, err := f.get("http://" + a.cfg.Ops.Listen + "/status")
		var st struct{ State string }
		if err == nil && json.Unmarshal(b, &st) == nil && st.State == "Leader" {
			return i
		}
	}
	return -1
}

// leader waits for a raft leader and returns its index.
func (f *fed) leader(t *testing.T) int {
	t.Helper()
	li := -1
	proctest.WaitFor(t, 30*time.Second, "a raft leader", func() bool {
		li = f.leaderIndex()
		return li >= 0
	})
	return li
}

// leaderLedger is the verified export of the raft leader.
func (f *fed) leaderLedger(t *testing.T) *ledgerView { return f.verifiedLedger(t, f.leader(t)) }

func subset(xs, of []string) bool {
	for _, x := range xs {
		if !slices.Contains(of, x) {
			return false
		}
	}
	return true
}
