package faults

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/federation/config"
	"github.com/nzcfed/nzc/federation/launch"
	"github.com/nzcfed/nzc/federation/proctest"
	"github.com/nzcfed/nzc/internal/pause"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/ml/data/synth"
	"github.com/nzcfed/nzc/party/aggregator"
	"github.com/nzcfed/nzc/party/auditor/compliance"
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

// buildBinaries builds nzc and the party binaries into a temporary
// directory.
func buildBinaries(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go toolchain to build the party binaries")
	}
	bin := t.TempDir()
	if err := launch.BuildWithTestHooks(context.Background(), bin, raceEnabled, append([]string{"nzc"}, launch.Binaries...)...); err != nil {
		t.Fatal(err)
	}
	return bin
}

// freeAddrs returns n loopback addresses whose ports are free for TCP and
// UDP.
func (f *fed) freeAddrs(n int) []string {
	f.t.Helper()
	addrs, err := launch.FreeAddrs(n)
	if err != nil {
		f.t.Fatal(err)
	}
	return addrs
}

// proc is a party process; its standard error and output go to its log.
type proc struct{ *launch.Proc }

// wait waits (bounded) for the process to exit.
func (p proc) wait(t *testing.T, within time.Duration) {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(within):
		t.Fatalf("%s did not exit within %v", p.Name, within)
	}
}

// waitLog waits until the process's log holds s.
func (p proc) waitLog(t *testing.T, within time.Duration, s string) {
	t.Helper()
	proctest.WaitFor(t, within, fmt.Sprintf("%s to log %q", p.Name, s), func() bool { return strings.Contains(p.LogText(), s) })
}

type auditorNode struct {
	id      string
	cfgPath string
	cfg     config.Auditor
	raft    *tcpProxy // every auditor dials this auditor's raft port through it
	intake  *udpProxy // the aggregator reaches this auditor's intake through it
	p       proc
}

type hospitalNode struct {
	id      string
	cfgPath string
	cfg     config.Teacher
	p       proc
}

// fed is a federation of processes on loopback.
type fed struct {
	t   *testing.T
	dir string
	bin string
	m   *crypto.Manifest
	fed *launch.Federation
	ps  *launch.Processes
	api []*compliance.Client // each auditor's compliance API, as the compliance party

	auditors  []*auditorNode
	hospitals []*hospitalNode
	aggPath   string
	aggCfg    config.Aggregator
	agg       proc
	stuPath   string
	stuCfg    config.Student
	dataTrain string
	dataQuery string
}

// fedOptions is what newFedWith provisions. The fault tests' federation
// (faultFed) runs small ensembles under a mechanism and caps set for them;
// asInit keeps the mechanism, caps and quorum exactly as `nzc init` wrote
// them, for the tests of what init plans.
type fedOptions struct {
	teachers, classes int // teachers per hospital, classes
	blobs             synth.Blobs
	train, queries    int  // rows of the training and query data
	asInit            bool // run init's own mechanism, caps and quorum
}

// faultFed is the fault tests' federation.
var faultFed = fedOptions{teachers: teachersPerHospital, classes: classes, train: 600, queries: 400,
	blobs: synth.Blobs{Classes: classes, Dim: dim, Spread: 3, CentreSeed: [2]uint64{7, 11}}}

// newFed provisions the fault tests' federation (newFedWith).
func newFed(t *testing.T, bin string) *fed { return newFedWith(t, bin, faultFed) }

// newFedWith provisions a federation with `nzc init`, makes its data,
// trains the hospitals' teachers and rewrites every configuration to the
// test's addresses. It starts nothing.
func newFedWith(t *testing.T, bin string, o fedOptions) *fed {
	t.Helper()
	f := &fed{t: t, dir: t.TempDir(), bin: bin}
	f.ps = &launch.Processes{Bin: bin, Dir: f.dir, Logs: f.dir}
	t.Cleanup(f.stopAll)
	fdir := filepath.Join(f.dir, "federation")
	args := []string{"init", "--dir", fdir, "--hospitals", strconv.Itoa(hospitals), "--auditors", "3", "--students", "1",
		"--teachers", strconv.Itoa(o.teachers), "--classes", strconv.Itoa(o.classes)}
	if !o.asInit {
		args = append(args, "--epsilon-bound", "1e4")
	}
	f.oneShot("init", "nzc", args...)
	m, err := crypto.LoadManifest(fdir)
	if err != nil {
		t.Fatal(err)
	}
	if f.fed, err = launch.Open(m); err != nil {
		t.Fatal(err)
	}
	f.m = m

	// Data: one seeded problem; the hospitals share a training file cut
	// into disjoint parts, the student asks about other samples.
	f.dataTrain = filepath.Join(f.dir, "train.csv")
	f.dataQuery = filepath.Join(f.dir, "queries.csv")
	writeCSV(t, f.dataTrain, o.blobs.Make(1, o.train))
	writeCSV(t, f.dataQuery, o.blobs.Make(2, o.queries))

	// Auditors: raft through a TCP proxy each, intake through a UDP proxy.
	auds := m.ByRole(crypto.RoleAuditor)
	addrs := f.freeAddrs(4*len(auds) + 2 + 2*hospitals)
	addr := func() string {
		a := addrs[0]
		addrs = addrs[1:]
		return a
	}
	for _, a := range auds {
		n := &auditorNode{id: a.ID, cfgPath: filepath.Join(fdir, a.ID+".yaml")}
		readYAML(t, n.cfgPath, &n.cfg)
		n.cfg.Raft, n.cfg.Listen, n.cfg.API, n.cfg.Ops.Listen = addr(), addr(), addr(), addr()
		api, err := f.fed.Compliance(n.cfg.API)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(api.Close)
		f.api = append(f.api, api)
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

	aggAddr := addr()
	f.aggPath = filepath.Join(fdir, "aggregator.yaml")
	readYAML(t, f.aggPath, &f.aggCfg)
	f.aggCfg.Listen, f.aggCfg.Auditors, f.aggCfg.Ops.Listen = aggAddr, intakes, addr()
	if !o.asInit {
		f.aggCfg.Quorum, f.aggCfg.Hospitals, f.aggCfg.BatchDeadline = quorum, hospitals, batchDeadline
		f.aggCfg.LedgerTimeout, f.aggCfg.Teachers, f.aggCfg.Classes = ledgerTimeout, o.teachers, o.classes
		f.aggCfg.Mechanism = mechanism.Params{Mechanism: mechanism.GNMax, Sigma: 2}
	}
	writeYAML(t, f.aggPath, f.aggCfg)

	for i, h := range m.ByRole(crypto.RoleHospital) {
		n := &hospitalNode{id: h.ID, cfgPath: filepath.Join(fdir, h.ID+".yaml")}
		readYAML(t, n.cfgPath, &n.cfg)
		n.cfg.Aggregator, n.cfg.Ops.Listen = aggAddr, addr()
		n.cfg.Data, n.cfg.DataPart, n.cfg.DataParts = f.dataTrain, i+1, hospitals
		n.cfg.Teachers, n.cfg.Model, n.cfg.Epochs = o.teachers, "softmax", 2
		if !o.asInit {
			n.cfg.CapEpsilon, n.cfg.CapDelta = 1e4, 1e-5
		}
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
	return f.ps.Run(ctx, name, bin, env, args...)
}

// start runs a long-lived party; env adds environment variables.
func (f *fed) start(name, bin string, env []string, args ...string) proc {
	f.t.Helper()
	p, err := f.ps.Start(name, bin, env, args...)
	if err != nil {
		f.t.Fatal(err)
	}
	return proc{p}
}

// stopAll stops every process still running, newest first, and on failure
// shows the end of every log.
func (f *fed) stopAll() {
	procs := f.ps.StopAll()
	if f.t.Failed() || os.Getenv("FAULTS_LOGS") != "" {
		for _, p := range procs {
			f.t.Logf("--- %s (%s):\n%s", p.Name, p.Log, launch.LastLines(p.LogText(), 25))
		}
	}
}

func (f *fed) startAuditor(n *auditorNode) {
	n.p = f.start(n.id, "nzc-auditor", nil, "run", "--config", n.cfgPath)
}

// startAggregator starts the aggregator; pauseAt, when not empty, makes it
// stop at that point of the release path the first time it gets there.
func (f *fed) startAggregator(pauseAt string) {
	f.agg = f.start("aggregator", "nzc-aggregator", pause.At(pauseAt), "run", "--config", f.aggPath)
}

func (f *fed) startHospital(h *hospitalNode, pauseAt string) {
	h.p = f.start(h.id, "nzc-teacher", pause.At(pauseAt), "run", "--config", h.cfgPath)
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
	if err := launch.WaitFederation(context.Background(), 60*time.Second, f.aggCfg.Ops.Listen, f.api[0], hospitals, func(s string) {
		f.t.Logf("%s: %s", time.Now().Format("15:04:05.000"), s)
	}); err != nil {
		f.t.Fatal(err)
	}
}

// metric reads a value from the aggregator's /metrics (-1 when absent).
func (f *fed) metric(name string) float64 {
	return launch.Metric(context.Background(), f.aggCfg.Ops.Listen, name)
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
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	return f.api[i].Accounts(ctx)
}

// studentRun is one `nzc-student label` run.
type studentRun struct {
	from, count int
	state       string // state directory
	out         string // labels file
	p           proc
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
	if code := r.p.ExitCode(); code != 0 {
		t.Fatalf("student run exited with %d:\n%s", code, launch.LastLines(r.p.LogText(), 30))
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

// ledgerView is the exported, verified ledger.
type ledgerView struct {
	entries  []ledger.Entry
	charges  map[string][]launch.Charge // accepted charges by batch id
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
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		body, err := f.api[i].Export(ctx)
		if err != nil {
			return false
		}
		x, err := ledger.DecodeExport(body)
		b = body
		return err == nil && len(x.Entries) >= size
	})
	rep, err := f.fed.Verify(b)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK {
		t.Fatalf("the ledger export does not verify: %v", rep.Failures())
	}
	x, err := ledger.DecodeExport(b)
	if err != nil {
		t.Fatal(err)
	}
	v := &ledgerView{}
	if v.entries, v.charges, err = launch.Charges(x.Entries); err != nil {
		t.Fatal(err)
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
			if c.Index != b.LedgerIndex {
				t.Errorf("batch %s…: the student was told ledger index %d, the charge is at %d", b.BatchID[:12], b.LedgerIndex, c.Index)
			}
			if hex.EncodeToString(c.AnswersHash[:]) != b.AnswersHash {
				t.Errorf("batch %s…: the labels the student opened are not the ones charged (hash %s…, charged %x…)", b.BatchID[:12], b.AnswersHash[:12], c.AnswersHash[:6])
			}
			answered := uint64(0)
			for _, l := range b.Labels {
				if l >= 0 {
					answered++
				}
			}
			if c.Answers != answered || c.Queries != uint64(len(b.Labels)) {
				t.Errorf("batch %s…: charged %d answers of %d queries, the student holds %d of %d", b.BatchID[:12], c.Answers, c.Queries, answered, len(b.Labels))
			}
			if w, ok := special[b.BatchID]; ok && w.hospitals != nil {
				if strings.Join(c.Hospitals, ",") != strings.Join(w.hospitals, ",") {
					t.Errorf("batch %s…: charged to %v, want %v", b.BatchID[:12], c.Hospitals, w.hospitals)
				}
			} else if len(c.Hospitals) < quorum || !subset(c.Hospitals, all) {
				// Whoever was connected voted; at least the quorum.
				t.Errorf("batch %s…: charged to %v, want at least %d of %v", b.BatchID[:12], c.Hospitals, quorum, all)
			}
		}
	}
	perHospital := map[string][2]uint64{}
	for id, cs := range v.charges {
		if !held[id] {
			t.Errorf("batch %s…: charged at index %d but the student never received it", id[:12], cs[0].Index)
		}
		for _, c := range cs {
			for _, h := range c.Hospitals {
				s := perHospital[h]
				s[0]++
				s[1] += c.Answers
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

// outboxRecord reads the aggregator's outbox record of the student's batch,
// through the outbox (which names its files).
func (f *fed) outboxRecord(batch string) map[string]any {
	ob, err := aggregator.OpenOutbox(f.aggCfg.Outbox)
	if err != nil {
		f.t.Fatal(err)
	}
	rec, ok, err := ob.Get(f.stuCfg.ID, batch)
	if err != nil || !ok {
		f.t.Fatalf("the outbox has no record of batch %s (%v)", batch, err)
	}
	b, err := json.Marshal(rec)
	if err != nil {
		f.t.Fatal(err)
	}
	var r map[string]any
	if err := json.Unmarshal(b, &r); err != nil {
		f.t.Fatal(err)
	}
	return r
}

// inOutbox reports whether the aggregator's outbox holds batch.
func (f *fed) inOutbox(batch string) bool {
	ob, err := aggregator.OpenOutbox(f.aggCfg.Outbox)
	if err != nil {
		f.t.Fatal(err)
	}
	_, ok, err := ob.Get(f.stuCfg.ID, batch)
	if err != nil {
		f.t.Fatal(err)
	}
	return ok
}

// restartAggregator stops the aggregator and starts it again (pausing at
// pauseAt, when not empty), and waits for every hospital to reconnect.
func (f *fed) restartAggregator(t *testing.T, pauseAt string) {
	t.Helper()
	f.agg.Stop()
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
		if a.p.Proc == nil || a.p.Exited() {
			continue
		}
		_, b, err := launch.Get(context.Background(), "http://"+a.cfg.Ops.Listen+"/status")
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
