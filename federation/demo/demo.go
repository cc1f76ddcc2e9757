// Package demo runs a whole federation on this machine, every party as its
// own process on loopback (through federation/launch), labels MNIST test
// images through it, trains and evaluates the student on its labels,
// verifies the ledger and each hospital's proofs, and reports. `nzc demo`
// is its command: flags into Options, Run, print the Report.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/federation/config"
	"github.com/nzcfed/nzc/federation/launch"
	"github.com/nzcfed/nzc/federation/provision"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	mlprogress "github.com/nzcfed/nzc/ml/progress"
	"github.com/nzcfed/nzc/party/auditor/compliance"
	"github.com/nzcfed/nzc/party/student"
)

// Options are what a demo runs: the flags of `nzc demo`.
type Options struct {
	Hospitals int // hospitals, each with its own part of the training data
	Teachers  int // teachers each hospital trains on disjoint shards
	// Queries is the student's pool: the first Queries test images. It
	// asks about as many of them as every hospital's cap allows, whatever
	// the votes (student.PlanQueries), in its selection order, and learns
	// from the rest unlabelled.
	Queries    int
	Mechanism  string  // a mechanism.Kind: its preset, scaled to the ensemble
	Model      string  // the teachers' model: softmax, mlp, small-mlp or cnn
	Data       string  // directory holding MNIST's idx files
	CapEpsilon float64 // each hospital's privacy cap ε (at δ = CapDelta)
	// Bin is a directory with the four party binaries ("": build them).
	Bin string
	// Dir is the directory to run in ("": a new temporary directory).
	Dir     string
	Keep    bool          // keep Dir: configurations, logs, ledger data
	Timeout time.Duration // give up after this long
}

// Defaults are the options of `nzc demo` without flags: the one place the
// demo's defaults are set. They were chosen on the student's pool alone
// (queries 1–8,000 asked, the student scored on queries 8,001–9,000; never
// on the held-out images 9,001–10,000), as docs/history/2026-11-27-results.md describes: 300
// small-mlp teachers agree on more queries than 150 softmax teachers, for
// the same training time; GNMax answers every query, so the student's
// balanced order gives it labels of every digit, where an nzc-svt session
// met its second refusal after 40–400 answers, most often about 90; and a
// CNN trained by consistency on the 193 labels and the 8,807 unlabelled
// images is the student.
func Defaults() Options {
	return Options{
		Hospitals:  3,
		Teachers:   100,
		Queries:    9000,
		Mechanism:  string(mechanism.GNMax),
		Model:      "small-mlp",
		Data:       DataDir,
		CapEpsilon: 2,
		Timeout:    15 * time.Minute,
	}
}

// Settings of every demo, which no option changes.
const (
	// DataDir is where scripts/fetch-data.sh puts MNIST; the demo runs the
	// script when its data is asked for there and missing.
	DataDir = "data/mnist"
	// CapDelta is each hospital's cap δ.
	CapDelta = 1e-5
	// Auditors is the number of auditors.
	Auditors = 3
	// Epochs is how many epochs each teacher trains.
	Epochs = 3
	// StudentBatch is the number of queries in each of the student's
	// batches; SessionBatch with nzc-svt, whose student re-ranks its
	// queries after BootstrapAfter answers (at a batch's end).
	StudentBatch   = 100
	SessionBatch   = 20
	BootstrapAfter = 20
	// Selection is the order in which the student asks (selection.Balanced).
	Selection = "balanced"
)

// studentTraining are the nzc-student train flags of the student: a CNN
// trained by consistency on the labels and the unlabelled rest of its pool,
// five passes over it, two unlabelled examples per labelled one (about 690
// steps of 96 examples: under a minute on two cores for a pool of 9,000),
// and a strong view distorted more than ensemble.DefaultConsistency's
// (rotations of up to 25°, sizes ±20 %, a 12-pixel cutout), with Adam's
// step size at 0.005. Chosen on the pool alone (docs/history/2026-11-27-results.md): the
// stronger view gained a point over the default one, each pass beyond three
// about a quarter of one, the larger step about 0.4 over three seeds.
var studentTraining = []string{"--model", "cnn", "--consistency", "--consistency-passes", "5", "--consistency-ratio", "2",
	"--consistency-rotate", "25", "--consistency-scale", "0.2", "--consistency-cutout", "12", "--learn-rate", "0.005",
	"--min-steps", "150", "--epochs", "20"}

// studentViews is nzc-student evaluate's --views: each held-out image is
// classified by the student's probabilities averaged over it and its
// copies moved by a pixel up, down, left and right, as the experiment's
// students are (experiment.Config.StudentViews).
const studentViews = "1"

// sessionBootstrap are the nzc-student label flags with nzc-svt: after
// BootstrapAfter answers, an MLP trained on them asks next what it is
// surest of.
var sessionBootstrap = []string{"--bootstrap", strconv.Itoa(BootstrapAfter), "--bootstrap-model", "mlp", "--bootstrap-consistency=false",
	"--bootstrap-floor", "0.99"}

// Report is what a demo found: what `nzc demo` prints.
type Report struct {
	Labels          int        `json:"labels"`
	Refused         int        `json:"refused"`
	StudentAccuracy float64    `json:"student_accuracy"`
	Hospitals       []Hospital `json:"hospitals"`
	LedgerVerified  bool       `json:"ledger_verified"`
	// StudentBatches and StudentProofsVerified: the batches the student
	// received, and how many of them came with a receipt of their charge
	// that the student verified against the auditors' keys itself.
	StudentBatches        int  `json:"student_batches"`
	StudentProofsVerified int  `json:"student_proofs_verified"`
	StudentVerifiedProofs bool `json:"student_verified_every_proof"`
	// HospitalProofs: for each hospital, the batches it voted on, the
	// charges naming it whose receipts it checked itself while voting, and
	// the charges naming it it reads from the ledger with its own
	// certificate, each receipt verified against the auditors' keys.
	// HospitalsMatchedVotesToProofs: every hospital's votes are matched by
	// proven charges, and no hospital rejected a receipt.
	HospitalProofs                []HospitalProof `json:"hospital_proofs"`
	HospitalsMatchedVotesToProofs bool            `json:"hospitals_matched_votes_to_proofs"`

	// Queries is how many queries the student asked, of the Pool of test
	// images it holds (the rest it learns from unlabelled).
	Queries       int      `json:"queries"`
	Pool          int      `json:"pool"`
	Mechanism     string   `json:"mechanism"`
	Parameters    string   `json:"parameters"`
	Teachers      int      `json:"teachers"`
	Stopped       string   `json:"stopped,omitempty"`
	TestExamples  int      `json:"test_examples"`
	LedgerEntries int64    `json:"ledger_entries"`
	LedgerChecks  []string `json:"ledger_checks,omitempty"`
	// Fallback is the per-query mechanism the federation offers beside
	// its sessions ("" when it answers per query), and Plan what the
	// student's plan did with it (nzc-student label's summary).
	Fallback string              `json:"fallback,omitempty"`
	Plan     *student.PlanReport `json:"plan,omitempty"`
	Seconds  float64             `json:"seconds"`
	Dir      string              `json:"dir,omitempty"`
}

type Hospital struct {
	ID      string  `json:"id"`
	Epsilon float64 `json:"epsilon"`
	Cap     float64 `json:"cap"`
	Answers uint64  `json:"answers"`
}

type HospitalProof struct {
	ID                      string `json:"id"`
	BatchesVoted            int    `json:"batches_voted"`
	ChargesProvenToHospital int    `json:"charges_proven_to_hospital"`
	ChargesProvenInLedger   int    `json:"charges_proven_in_ledger"`
	ReceiptsRejected        int    `json:"receipts_rejected"`
	Error                   string `json:"error,omitempty"`
}

// Check refuses options a demo cannot run with, naming the flag.
func (o Options) Check() error {
	switch {
	case o.Hospitals < 1 || o.Hospitals > 20:
		return fmt.Errorf("--hospitals %d: use 1 to 20", o.Hospitals)
	case o.Teachers < 1 || o.Teachers > 500:
		return fmt.Errorf("--teachers-per-hospital %d: use 1 to 500", o.Teachers)
	case o.Queries < 1 || o.Queries > 9000:
		return fmt.Errorf("--queries %d: use 1 to 9000 (the rest of MNIST's 10000 test images evaluate the student)", o.Queries)
	case !(o.CapEpsilon > 0) || math.IsInf(o.CapEpsilon, 0):
		return fmt.Errorf("--cap %v: a finite positive ε", o.CapEpsilon)
	case o.CapEpsilon > ledger.DefaultEpsilonBound:
		return fmt.Errorf("--cap %v: at most %v, the federation's ε bound its genesis fixes", o.CapEpsilon, ledger.DefaultEpsilonBound)
	}
	if _, err := Mechanism(o.Mechanism, o.Hospitals*o.Teachers, o.CapEpsilon); err != nil {
		return err
	}
	return nil
}

// batchSize is the student's batch size with mechanism m.
func batchSize(m mechanism.Params) int {
	if m.Mechanism.Sessions() {
		return SessionBatch
	}
	return StudentBatch
}

// Asked is how many of its pool of queries the student asks with mechanism
// m (the aggregator's parameters for k teachers) under a cap of capEps per
// hospital: the most whose worst-case charge fits the cap
// (student.PlanQueries, data-independent), or, in sessions, every query
// (a session answers until its refusals are used, and a second one opens
// only if the cap allows it). When not even one query fits, one batch is
// asked anyway, for the ledger to refuse it in front of the user.
func Asked(m mechanism.Params, k, queries int, capEps float64) int {
	if m.Mechanism.Sessions() {
		return queries
	}
	m.Teachers, m.Classes = k, 10
	plan, err := student.PlanQueries(m, capEps, CapDelta, queries)
	if err != nil {
		return min(queries, StudentBatch)
	}
	return plan.Queries
}

// Mechanism returns the preset of the named mechanism (mechanism.Preset)
// scaled to an ensemble of k teachers; the aggregator learns the ensemble
// size itself, so it is left out. A mechanism that answers in sessions
// (nzc-svt) has its session planned for the ensemble and the cap instead
// (Session).
func Mechanism(name string, k int, capEps float64) (mechanism.Params, error) {
	p, err := mechanism.Preset(mechanism.Kind(name))
	if err != nil {
		return mechanism.Params{}, fmt.Errorf("--mechanism %q: %w", name, err)
	}
	if p.Mechanism.Sessions() {
		return Session(p.Mechanism, k, capEps)
	}
	p = p.ForEnsemble(k, 0)
	p.Teachers = 0
	return p, nil
}

// Fallback is the per-query mechanism a demo federation whose mechanism
// m answers in sessions offers beside them, for the student's queries
// after its session ends: GNMax's preset scaled to the k teachers
// (Mechanism). ok is false for a per-query m, which offers none.
func Fallback(m mechanism.Params, k int, capEps float64) (p mechanism.Params, ok bool, err error) {
	if !m.Mechanism.Sessions() {
		return mechanism.Params{}, false, nil
	}
	p, err = Mechanism(string(mechanism.GNMax), k, capEps)
	return p, err == nil, err
}

// SessionRefusals is K, the refusals a demo's session allows.
const SessionRefusals = 2

// Session plans the session of mechanism kind for a demo with k teachers (MNIST's 10
// classes) and a cap of capEps per hospital: K = SessionRefusals, and the
// largest pure ε, at most 2, whose session the ledger's gate lets into an
// account with that cap (its δ, 5e-6, is half the cap's δ). Scaling the
// 250-teacher preset instead would leave a δ above every hospital's cap δ.
// A larger ε lowers the threshold of distance to instability a query must
// clear to be answered.
func Session(kind mechanism.Kind, k int, capEps float64) (mechanism.Params, error) {
	for eps := math.Floor(min(capEps, 2)*100) / 100; eps >= 0.1; eps -= 0.01 {
		p, err := kind.PlanSession(eps, CapDelta/2, SessionRefusals, k, 10)
		if err != nil {
			// A smaller ε needs a higher threshold still.
			return mechanism.Params{}, fmt.Errorf("--mechanism %s with %d teachers in all: %w; use more teachers (--hospitals, --teachers-per-hospital)", kind, k, err)
		}
		if plan, err := student.PlanQueries(p, capEps, CapDelta, 1); err == nil && plan.Sessions >= 1 {
			p.Teachers, p.Classes = 0, 0
			return p, nil
		}
	}
	return mechanism.Params{}, fmt.Errorf("--mechanism %s: no session fits a cap of ε = %g; raise --cap", kind, capEps)
}

type demo struct {
	o     Options
	log   io.Writer
	began time.Time
	dir   string
	fed   *launch.Federation
	pt    provision.Ports
	ps    *launch.Processes
	api   []*compliance.Client // the auditors' compliance APIs, read as the compliance party
}

func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.log, "[%6.1fs] %s\n", time.Since(d.began).Seconds(), fmt.Sprintf(format, args...))
}

// Run checks o, then runs a demo, giving up after o.Timeout, tells log what
// it does as it goes, and returns what it found.
func Run(ctx context.Context, o Options, log io.Writer) (*Report, error) {
	if err := o.Check(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	d := &demo{o: o, log: log, began: time.Now()}
	return d.run(ctx)
}

func (d *demo) run(ctx context.Context) (rep *Report, err error) {
	if err := d.ensureData(ctx); err != nil {
		return nil, err
	}
	if d.dir = d.o.Dir; d.dir == "" {
		if d.dir, err = os.MkdirTemp("", "nzc-demo-"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(d.dir, 0o755); err != nil {
		return nil, err
	}
	if d.dir, err = filepath.Abs(d.dir); err != nil {
		return nil, err
	}
	d.ps = &launch.Processes{Dir: d.dir, Logs: filepath.Join(d.dir, "logs")}
	defer func() {
		d.ps.StopAll()
		for _, c := range d.api {
			c.Close()
		}
		if d.o.Keep {
			d.say("kept %s (configurations, logs in logs/, ledger data)", d.dir)
			if rep != nil {
				rep.Dir = d.dir
			}
		} else {
			os.RemoveAll(d.dir)
		}
	}()
	if err := os.MkdirAll(d.ps.Logs, 0o755); err != nil {
		return nil, err
	}
	if err := d.binaries(ctx); err != nil {
		return nil, err
	}
	mech, _ := Mechanism(d.o.Mechanism, d.o.Hospitals*d.o.Teachers, d.o.CapEpsilon)
	fallback, _, err := Fallback(mech, d.o.Hospitals*d.o.Teachers, d.o.CapEpsilon)
	if err != nil {
		return nil, err
	}
	if err := d.provision(mech, fallback); err != nil {
		return nil, err
	}
	m := d.fed.M
	auditors := m.ByRole(crypto.RoleAuditor)
	d.say("starting %d auditors (raft over mutual TLS); ledger dashboard at http://%s/", len(auditors), provision.Loopback(d.pt.Dashboard(0)))
	for _, a := range auditors {
		if _, err := d.ps.Start(a.ID, "nzc-auditor", nil, "run", "--config", provision.ConfigFile(m, a)); err != nil {
			return nil, err
		}
	}
	hospitals := m.ByRole(crypto.RoleHospital)
	d.say("training %d teachers at each of %d hospitals on their own part of MNIST", d.o.Teachers, len(hospitals))
	if err := d.train(ctx, hospitals); err != nil {
		return nil, err
	}
	if fallback.Mechanism != "" {
		d.say("starting the aggregator (%s, %s; after a student's session ends, %s, %s) and the hospitals", mech.Mechanism, mech, fallback.Mechanism, fallback)
	} else {
		d.say("starting the aggregator (%s, %s) and the hospitals", mech.Mechanism, mech)
	}
	if _, err := d.ps.Start("aggregator", "nzc-aggregator", nil, "run", "--config", filepath.Join(m.Dir, "aggregator.yaml")); err != nil {
		return nil, err
	}
	for _, h := range hospitals {
		if _, err := d.ps.Start(h.ID, "nzc-teacher", nil, "run", "--config", provision.ConfigFile(m, h)); err != nil {
			return nil, err
		}
	}
	if err := d.waitReady(ctx, len(hospitals)); err != nil {
		return nil, err
	}
	return d.label(ctx, mech)
}

// ensureData finds MNIST, fetching it with scripts/fetch-data.sh when the
// script is at hand.
func (d *demo) ensureData(ctx context.Context) error {
	if _, err := os.Stat(filepath.Join(d.o.Data, "t10k-labels-idx1-ubyte")); err == nil {
		return nil
	}
	script := filepath.Join("scripts", "fetch-data.sh")
	if _, err := os.Stat(script); err != nil || d.o.Data != DataDir {
		return fmt.Errorf("no MNIST in %s: run scripts/fetch-data.sh %s from the NZC source tree first", d.o.Data, d.o.Data)
	}
	d.say("fetching MNIST with %s", script)
	c := exec.CommandContext(ctx, "bash", script)
	c.Stdout, c.Stderr = d.log, d.log
	if err := c.Run(); err != nil {
		return fmt.Errorf("fetch MNIST: %w; run %s yourself and try again", err, script)
	}
	return nil
}

// binaries builds the party binaries once, or uses --bin.
func (d *demo) binaries(ctx context.Context) error {
	if d.ps.Bin = d.o.Bin; d.ps.Bin != "" {
		for _, b := range launch.Binaries {
			if _, err := os.Stat(filepath.Join(d.ps.Bin, b)); err != nil {
				return fmt.Errorf("--bin %s lacks %s: %w", d.ps.Bin, b, err)
			}
		}
		return nil
	}
	d.ps.Bin = filepath.Join(d.dir, "bin")
	d.say("building %s into %s", strings.Join(launch.Binaries, ", "), d.ps.Bin)
	if err := launch.Build(ctx, d.ps.Bin, false, launch.Binaries...); err != nil {
		return fmt.Errorf("%w, or give --bin with the four binaries", err)
	}
	return nil
}

// provision makes the federation and writes every party's configuration.
func (d *demo) provision(mech, fallback mechanism.Params) (err error) {
	fed := filepath.Join(d.dir, "federation")
	d.say("provisioning a federation in %s: CA, certificates, age and signing keys", fed)
	if d.fed, err = launch.Provision(fed, provision.Spec{Hospitals: d.o.Hospitals, Auditors: Auditors, Students: 1}); err != nil {
		return err
	}
	m := d.fed.M
	if err := provision.WriteGenesis(m, d.o.Teachers, config.DefaultAggregator().Classes); err != nil {
		return err
	}
	if d.pt, err = launch.FreePorts(len(m.Parties)); err != nil {
		return err
	}
	for i := range m.ByRole(crypto.RoleAuditor) {
		c, err := d.fed.Compliance(provision.Loopback(d.pt.API(i)))
		if err != nil {
			return err
		}
		d.api = append(d.api, c)
	}
	cfgs, err := provision.PartyConfigs(m, provision.Topology{BasePort: d.pt.Base})
	if err != nil {
		return err
	}
	data, err := filepath.Abs(d.o.Data)
	if err != nil {
		return err
	}
	i := 0
	for _, p := range m.Parties {
		switch c := cfgs[p.ID].(type) {
		case config.Teacher:
			i++
			c.Data, c.DataPart, c.DataParts = data, i, d.o.Hospitals
			c.Teachers, c.Model, c.CapEpsilon, c.CapDelta = d.o.Teachers, d.o.Model, d.o.CapEpsilon, CapDelta
			c.Epochs = Epochs
			cfgs[p.ID] = c
		case config.Aggregator:
			// A majority, as nzc init writes: one hospital that stalls or
			// drops out leaves the others a quorum.
			c.Mechanism, c.Fallback, c.Quorum, c.BatchDeadline = mech, fallback, d.o.Hospitals/2+1, time.Minute
			c.Teachers = d.o.Teachers
			cfgs[p.ID] = c
		case config.Student:
			c.BatchSize = batchSize(mech)
			cfgs[p.ID] = c
		}
	}
	if err := provision.ValidateConfigs(cfgs); err != nil {
		return err
	}
	_, err = provision.WriteConfigs(m, cfgs, "", true)
	return err
}

// output runs a one-shot party command and returns its standard output.
func (d *demo) output(ctx context.Context, name, bin string, args ...string) ([]byte, error) {
	return d.ps.Run(ctx, name, bin, nil, args...)
}

func (d *demo) train(ctx context.Context, hospitals []crypto.PartyFiles) error {
	errs := make([]error, len(hospitals))
	var wg sync.WaitGroup
	for i, h := range hospitals {
		wg.Go(func() {
			out, err := d.output(ctx, h.ID+"-train", "nzc-teacher", "train", "--config", provision.ConfigFile(d.fed.M, h), "--format", "json")
			if err != nil {
				errs[i] = err
				return
			}
			var s struct {
				Teachers, Examples int
				Seconds            float64
			}
			_ = json.Unmarshal(out, &s)
			d.say("%s trained %d teachers on its %d examples in %.0fs", h.ID, s.Teachers, s.Examples, s.Seconds)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// opsAddr is the operations address of party id.
func (d *demo) opsAddr(id string) string {
	for k, p := range d.fed.M.Parties {
		if p.ID == id {
			return provision.Loopback(d.pt.Ops(k + 1))
		}
	}
	return ""
}

// waitReady waits for the aggregator to see every hospital and for every
// hospital's budget account to be open in the ledger.
func (d *demo) waitReady(ctx context.Context, hospitals int) error {
	if err := launch.WaitFederation(ctx, d.o.Timeout, d.opsAddr("aggregator"), d.api[0], hospitals, func(s string) { d.say("%s", s) }); err != nil {
		return fmt.Errorf("%w: see the logs in %s (use --keep to keep them)", err, d.ps.Logs)
	}
	return nil
}

func (d *demo) label(ctx context.Context, mech mechanism.Params) (*Report, error) {
	k := d.o.Hospitals * d.o.Teachers
	asked := Asked(mech, k, d.o.Queries, d.o.CapEpsilon)
	rep := &Report{Queries: asked, Pool: d.o.Queries, Mechanism: string(mech.Mechanism), Parameters: mech.String(), Teachers: k}
	stCfg := provision.ConfigFile(d.fed.M, d.fed.M.ByRole(crypto.RoleStudent)[0])
	data, _ := filepath.Abs(d.o.Data)
	labels := filepath.Join(d.dir, "labels.json")
	args := []string{"label", "--config", stCfg, "--data", data, "--split", "test", "--from", "0", "--count", strconv.Itoa(d.o.Queries),
		"--selection", Selection, "--max-queries", strconv.Itoa(asked), "--out", labels, "--format", "json"}
	batch := batchSize(mech)
	if mech.Mechanism.Sessions() {
		args = append(args, sessionBootstrap...)
		d.say("the student asks about its %d test images in its own order (%s, then what a student trained on the first %d answers is surest of), in batches of %d, until the session ends; then, under the fallback, as many of the rest it is surest of as the rest of its cap buys",
			d.o.Queries, Selection, BootstrapAfter, batch)
	} else {
		d.say("the student asks about %d of its %d test images, as many as a cap of ε = %g allows whatever the votes, in its own order (%s), in batches of %d",
			asked, d.o.Queries, d.o.CapEpsilon, Selection, batch)
	}
	done := make(chan struct{})
	bar := mlprogress.NewOrLines(d.log, nil)
	var watching sync.WaitGroup
	watching.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		last := 0
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if n := int(launch.Metric(ctx, d.opsAddr("aggregator"), "nzc_aggregator_labels_released_total")); n > last {
					bar.Update("labels released", n, asked, "labels")
					last = n
				}
			}
		}
	})
	out, lerr := d.output(ctx, "student-label", "nzc-student", args...)
	close(done)
	watching.Wait()
	bar.Done()
	var sum struct {
		Queries, Answered, Refused, Batches int
		ProofsVerified                      int `json:"proofs_verified"`
		Stopped                             string
		Plan                                *student.PlanReport
	}
	if err := json.Unmarshal(out, &sum); err != nil {
		if lerr != nil {
			return nil, lerr
		}
		return nil, fmt.Errorf("student label: unreadable summary: %w", err)
	}
	rep.Labels, rep.Refused, rep.Stopped = sum.Answered, sum.Refused, sum.Stopped
	rep.StudentBatches, rep.StudentProofsVerified = sum.Batches, sum.ProofsVerified
	rep.StudentVerifiedProofs = sum.Batches > 0 && sum.ProofsVerified == sum.Batches
	if sum.Plan != nil && sum.Plan.Fallback != "" {
		rep.Fallback, rep.Plan = sum.Plan.Fallback, sum.Plan
		d.say("the plan: the session answered %d and refused %d; the fallback answered %d of the %d queries the rest of the cap bought (ε = %.4g of %g, from the receipts)",
			sum.Plan.SessionAnswered, sum.Plan.SessionRefused, sum.Plan.FallbackAnswered, sum.Plan.FallbackPlanned, sum.Plan.Epsilon, sum.Plan.Cap)
	}
	if sum.Stopped != "" {
		rep.Refused = asked - sum.Answered
		d.say("the federation stopped answering: %s", sum.Stopped)
	}
	d.say("the student received %d labels; %d queries were refused", rep.Labels, rep.Refused)

	if rep.Labels > 0 {
		d.say("the student trains on its %d labels and its %d unlabelled images", rep.Labels, d.o.Queries-rep.Labels)
		if _, err := d.output(ctx, "student-train", "nzc-student", append([]string{"train", "--data", data, "--split", "test", "--from", "0",
			"--count", strconv.Itoa(d.o.Queries), "--labels", labels, "--out", filepath.Join(d.dir, "student.model"), "--format", "json"}, studentTraining...)...); err != nil {
			return nil, err
		}
		out, err := d.output(ctx, "student-evaluate", "nzc-student", "evaluate", "--model", filepath.Join(d.dir, "student.model"),
			"--data", data, "--split", "test", "--from", strconv.Itoa(d.o.Queries), "--count", "0", "--views", studentViews, "--format", "json")
		if err != nil {
			return nil, err
		}
		var ev struct {
			Accuracy float64
			Examples int
		}
		if err := json.Unmarshal(out, &ev); err != nil {
			return nil, fmt.Errorf("student evaluate: %w", err)
		}
		rep.StudentAccuracy, rep.TestExamples = ev.Accuracy, ev.Examples
		d.say("the student, trained on its labels, is %.1f%% accurate on %d other test images", 100*ev.Accuracy, ev.Examples)
	}

	out, err := d.output(ctx, "student-budget", "nzc-student", "budget", "--config", stCfg, "--format", "json")
	if err != nil {
		return nil, err
	}
	var b struct {
		Hospitals []struct {
			Hospital         string
			Epsilon_spent    float64
			Epsilon_cap      float64
			Queries_answered uint64
		}
	}
	if err := json.Unmarshal(out, &b); err != nil {
		return nil, fmt.Errorf("student budget: %w", err)
	}
	for _, h := range b.Hospitals {
		rep.Hospitals = append(rep.Hospitals, Hospital{ID: h.Hospital, Epsilon: h.Epsilon_spent, Cap: h.Epsilon_cap, Answers: h.Queries_answered})
	}
	if err := d.verify(ctx, rep); err != nil {
		return nil, err
	}
	d.hospitalProofs(ctx, rep)
	rep.Seconds = time.Since(d.began).Seconds()
	return rep, nil
}

// hospitalProofs matches each hospital's own record of its votes (its
// metrics) against the charges naming it, read with its certificate and
// proven here against the auditors' keys.
func (d *demo) hospitalProofs(ctx context.Context, rep *Report) {
	keys, err := compliance.AuditorKeys(d.fed.M)
	rep.HospitalsMatchedVotesToProofs = err == nil
	for _, h := range d.fed.M.ByRole(crypto.RoleHospital) {
		metric := func(name string) int { return int(launch.Metric(ctx, d.opsAddr(h.ID), name)) }
		p := HospitalProof{ID: h.ID, BatchesVoted: metric("nzc_teacher_batches_voted_total"),
			ChargesProvenToHospital: metric("nzc_teacher_charges_proven_total"), ReceiptsRejected: metric("nzc_teacher_receipts_rejected_total")}
		p.ChargesProvenInLedger, err = d.provenCharges(ctx, h.ID, keys)
		if err != nil {
			p.Error = err.Error()
		}
		// Each distinct batch voted on (a batch id reused for other queries
		// counts again) has its own charge in the ledger, and the hospital
		// consumed no proof twice nor refused one.
		if err != nil || p.BatchesVoted < 1 || p.ChargesProvenInLedger != p.BatchesVoted ||
			p.ChargesProvenToHospital > p.ChargesProvenInLedger || p.ReceiptsRejected != 0 {
			rep.HospitalsMatchedVotesToProofs = false
		}
		rep.HospitalProofs = append(rep.HospitalProofs, p)
	}
	if rep.HospitalsMatchedVotesToProofs {
		d.say("each hospital matched the batches it voted on against the charges naming it, every receipt proven")
	}
}

// provenCharges reads the charges naming hospital with its own
// certificate and returns how many are proven against keys.
func (d *demo) provenCharges(ctx context.Context, hospital string, keys []string) (int, error) {
	c, err := compliance.NewClientAsTo(provision.Loopback(d.pt.API(0)), d.fed.M, hospital, d.fed.M.ByRole(crypto.RoleAuditor)[0].ID)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	chs, err := c.ProvenCharges(ctx, hospital, keys)
	return len(chs), err
}

// verify checks the final ledger independently: it fetches the export from
// an auditor and verifies it against the auditors' keys from the manifest.
func (d *demo) verify(ctx context.Context, rep *Report) error {
	b, err := d.api[1].Export(ctx)
	if err != nil {
		rep.LedgerChecks = append(rep.LedgerChecks, fmt.Sprintf("export unavailable: %v", err))
		return nil
	}
	r, err := d.fed.Verify(b)
	if err != nil {
		return err
	}
	rep.LedgerVerified, rep.LedgerEntries = r.OK, r.Entries
	for _, c := range r.Checks {
		mark := "ok"
		if !c.OK {
			mark = "FAILED"
		}
		rep.LedgerChecks = append(rep.LedgerChecks, fmt.Sprintf("%s %s: %s", mark, c.Name, c.Detail))
	}
	if r.OK {
		d.say("ledger verified: %d entries, checkpoint cosigned by the auditors, replay reproduces every account", r.Entries)
	} else {
		d.say("ledger verification FAILED: %v", r.Failures())
	}
	return nil
}

// Text writes the report for a reader.
func (r *Report) Text(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "\nNZC demo: %d hospitals, %d teachers in all, mechanism %s (%s), %d queries asked\n\n", len(r.Hospitals), r.Teachers, r.Mechanism, r.Parameters, r.Queries)
	fmt.Fprintf(&b, "  labels received    %d of %d (%d refused)\n", r.Labels, r.Queries, r.Refused)
	if r.Pool > r.Queries {
		fmt.Fprintf(&b, "  unlabelled         %d more test images the student learns from without asking\n", r.Pool-r.Queries)
	}
	if r.Stopped != "" {
		fmt.Fprintf(&b, "  stopped because    %s\n", r.Stopped)
	}
	if r.TestExamples > 0 {
		fmt.Fprintf(&b, "  student accuracy   %.1f%% on %d test images it never asked about\n", 100*r.StudentAccuracy, r.TestExamples)
	} else {
		fmt.Fprintf(&b, "  student accuracy   - (no labels to train on)\n")
	}
	if p := r.Plan; p != nil {
		fmt.Fprintf(&b, "  plan               the session answered %d and refused %d; then %s answered %d of the %d queries the rest of the cap bought\n",
			p.SessionAnswered, p.SessionRefused, p.Fallback, p.FallbackAnswered, p.FallbackPlanned)
		if p.Note != "" {
			fmt.Fprintf(&b, "                     (%s)\n", p.Note)
		}
	}
	fmt.Fprintf(&b, "  proofs             the student verified a majority's receipt of the charge for %d of %d batches\n", r.StudentProofsVerified, r.StudentBatches)
	for _, h := range r.HospitalProofs {
		fmt.Fprintf(&b, "  %-18s voted on %d batches; %d charges naming it proven in the ledger (%d checked while voting, %d receipts rejected)\n",
			h.ID, h.BatchesVoted, h.ChargesProvenInLedger, h.ChargesProvenToHospital, h.ReceiptsRejected)
	}
	fmt.Fprintf(&b, "  privacy spent      proven, as the ledger accounts it (RDP composed under adaptive choice, δ = 1e-5):\n")
	for _, h := range r.Hospitals {
		fmt.Fprintf(&b, "    %-12s ε = %-8.3f of its cap %g (%d answers charged)\n", h.ID, h.Epsilon, h.Cap, h.Answers)
	}
	verdict := "FAILED"
	if r.LedgerVerified {
		verdict = "yes"
	}
	fmt.Fprintf(&b, "  ledger verified    %s (%d entries; quorum-signed checkpoint, Merkle root, replay of every charge)\n", verdict, r.LedgerEntries)
	if !r.LedgerVerified {
		for _, c := range r.LedgerChecks {
			fmt.Fprintf(&b, "    %s\n", c)
		}
	}
	fmt.Fprintf(&b, "  took               %.0fs\n", r.Seconds)
	if r.Dir != "" {
		fmt.Fprintf(&b, "  files              %s\n", r.Dir)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
