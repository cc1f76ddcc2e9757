package config

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/protocol"
)

// TLS names the federation files a party authenticates with. They are made
// by `nzc init`.
type TLS struct {
	CA   string `mapstructure:"ca" yaml:"ca" json:"ca" help:"federation CA certificate (PEM)"`
	Cert string `mapstructure:"cert" yaml:"cert" json:"cert" help:"this party's certificate (PEM)"`
	Key  string `mapstructure:"key" yaml:"key" json:"key" help:"this party's private key (PEM, mode 0600)"`
}

func (t TLS) check(c *checker) {
	c.required("tls.ca", t.CA, "path to the federation CA certificate made by `nzc init`")
	c.required("tls.cert", t.Cert, "path to this party's certificate made by `nzc init`")
	c.keyFile("tls.key", t.Key, "path to this party's private key made by `nzc init`")
}

// Log configures structured logging.
type Log struct {
	Level  string `mapstructure:"level" yaml:"level" json:"level" help:"debug, info, warn or error"`
	Format string `mapstructure:"format" yaml:"format" json:"format" help:"text or json"`
}

func (l Log) check(c *checker) {
	c.oneOf("log.level", l.Level, "debug", "info", "warn", "error")
	c.oneOf("log.format", l.Format, "text", "json")
}

// Ops configures the operations endpoint serving /metrics, /livez and /readyz.
type Ops struct {
	Listen string `mapstructure:"listen" yaml:"listen" json:"listen" help:"host:port; empty disables the endpoint"`
	// MemoryLimit is the service's memory bound: the Go runtime's soft
	// limit (debug.SetMemoryLimit), under which the collector keeps the
	// heap by working harder. The limits on connections, streams and
	// request bodies per peer bound what other parties can make a service
	// hold; this bounds the rest. Set the unit's MemoryMax above it.
	MemoryLimit string `mapstructure:"memory_limit" yaml:"memory_limit" json:"memory_limit" help:"soft memory bound of the service, e.g. 1GiB or 512MiB (0: none)"`
}

func (o Ops) check(c *checker) {
	c.address("ops.listen", o.Listen, false, "")
	if _, err := ParseSize(o.MemoryLimit); err != nil {
		c.add("ops.memory_limit", "%v", err)
	}
}

// defaultMemoryLimit is a service's default memory bound: per peer at most
// 4 connections × (32 MiB of request bodies + a 16 MiB flow-control window)
// = 192 MiB (protocol/quicnet's defaults), times the 4 peers of the default
// federation that may send to one service (3 hospitals and a student to the
// aggregator; the aggregator and 3 hospitals to an auditor's intake), plus
// 256 MiB for the service's own state. A larger federation raises it.
const defaultMemoryLimit = "1GiB"

// ErrSize reports a size that does not parse.
var ErrSize = errors.New("not a size: give a whole number of bytes with an optional unit B, KiB, MiB or GiB (e.g. 512MiB), or 0 for none")

// ParseSize reads a size such as 512MiB, 1GiB or 1048576 (bytes); "" and 0
// are none (0).
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	num, mult := s, int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%w (got %q)", ErrSize, s)
	}
	return n * mult, nil
}

func defaultLog() Log { return Log{Level: "info", Format: "text"} }

// Teacher is the configuration of nzc-teacher, run by each hospital.
type Teacher struct {
	ID          string `mapstructure:"id" yaml:"id" json:"id" help:"hospital id, as in its certificate"`
	Aggregator  string `mapstructure:"aggregator" yaml:"aggregator" json:"aggregator" help:"aggregator address (host:port); hospitals only dial out"`
	TLS         TLS    `mapstructure:"tls" yaml:"tls" json:"tls"`
	AgeIdentity string `mapstructure:"age_identity" yaml:"age_identity" json:"age_identity" help:"age identity file that opens query features"`
	SigningKey  string `mapstructure:"signing_key" yaml:"signing_key" json:"signing_key" help:"ed25519 key that signs this hospital's ledger requests"`
	Data        string `mapstructure:"data" yaml:"data" json:"data" help:"training data: a directory of idx files, a folder of images per class, or a CSV file"`
	Models      string `mapstructure:"models" yaml:"models" json:"models" help:"directory where trained teachers are kept (the Go ensemble, or ONNX models named by its onnx.json)"`
	ONNXRuntime string `mapstructure:"onnxruntime" yaml:"onnxruntime,omitempty" json:"onnxruntime" help:"ONNX Runtime shared library, for ONNX teachers (a binary built with -tags onnx; scripts/fetch-onnxruntime.sh)"`
	Teachers    int    `mapstructure:"teachers" yaml:"teachers" json:"teachers" help:"number of teachers trained on disjoint shards"`
	Model       string `mapstructure:"model" yaml:"model" json:"model" help:"softmax, mlp, small-mlp, cnn or small-cnn"`
	Seed        uint64 `mapstructure:"seed" yaml:"seed" json:"seed" help:"training seed"`
	Epochs      int    `mapstructure:"epochs" yaml:"epochs" json:"epochs" help:"training epochs per teacher"`
	// DataPart and DataParts select one of several disjoint parts of a data
	// set, so that hospitals on one machine can share one file.
	DataPart     int     `mapstructure:"data_part" yaml:"data_part" json:"data_part" help:"use part N (1-based) of data_parts disjoint parts of the data; 0 uses all"`
	DataParts    int     `mapstructure:"data_parts" yaml:"data_parts" json:"data_parts" help:"number of disjoint parts the data is cut into (0: do not cut)"`
	CapEpsilon   float64 `mapstructure:"cap_epsilon" yaml:"cap_epsilon" json:"cap_epsilon" help:"the hospital's privacy cap ε, set when its ledger account opens"`
	CapDelta     float64 `mapstructure:"cap_delta" yaml:"cap_delta" json:"cap_delta" help:"the hospital's privacy cap δ"`
	Registration string  `mapstructure:"registration" yaml:"registration,omitempty" json:"registration" help:"administrator-signed ledger registration of a hospital added after the genesis (written by nzc init add-hospital)"`
	// Genesis is the federation's genesis file: a founding hospital sends
	// the administrator-signed genesis, which registers it, to students as
	// its registration (unused when registration is set).
	Genesis string `mapstructure:"genesis" yaml:"genesis,omitempty" json:"genesis,omitempty" help:"the federation's genesis file (genesis.json, written by nzc init): a founding hospital sends the signed genesis that registers it, so students holding admin_key seal to it without listing it"`
	// AuditorKeys and ProofLag make the hospital check its own spending.
	AuditorKeys []string `mapstructure:"auditor_keys" yaml:"auditor_keys" json:"auditor_keys" help:"the auditors' checkpoint verifier keys (id+hash+key, from nzc init); the hospital checks the receipt of every charge made for its votes and stops voting when they do not come"`
	ProofLag    int      `mapstructure:"proof_lag" yaml:"proof_lag" json:"proof_lag" help:"batches voted on without a majority's proof of their charge before the hospital stops voting"`
	State       string   `mapstructure:"state" yaml:"state" json:"state" help:"directory keeping the record of the batches this hospital voted on (votes.json), so that a restart still counts the votes not yet proven"`

	// Auditors are the auditors' intake addresses, where the hospital
	// sends its own cap changes without the aggregator (nzc-teacher cap).
	Auditors []string `mapstructure:"auditors" yaml:"auditors,omitempty" json:"auditors" help:"auditor intake addresses (host:port), where the hospital sends its own cap changes (nzc-teacher cap)"`

	Log Log `mapstructure:"log" yaml:"log" json:"log"`
	Ops Ops `mapstructure:"ops" yaml:"ops" json:"ops"`
}

// DefaultTeacher returns the defaults of nzc-teacher.
func DefaultTeacher() Teacher {
	return Teacher{Aggregator: "127.0.0.1:7400", Models: "models", Teachers: 50, Model: "mlp", Seed: 1, Epochs: 5,
		CapEpsilon: 8, CapDelta: 1e-5, ProofLag: 64, State: "state", Log: defaultLog(), Ops: Ops{MemoryLimit: defaultMemoryLimit}}
}

// Validate reports every problem in the configuration.
func (t Teacher) Validate() error {
	var c checker
	c.id("id", t.ID, "this hospital's id, as named in its certificate (e.g. h1)")
	c.address("aggregator", t.Aggregator, true, "the aggregator's address")
	for _, addr := range t.Auditors {
		c.address("auditors", addr, true, "an auditor's intake address")
	}
	t.TLS.check(&c)
	c.keyFile("age_identity", t.AgeIdentity, "path to this hospital's age identity made by `nzc init`")
	if t.SigningKey != "" {
		c.keyFile("signing_key", t.SigningKey, "path to this hospital's ed25519 signing key made by `nzc init`")
	}
	c.required("models", t.Models, "directory where trained teachers are kept")
	c.positive("teachers", t.Teachers, "number of teachers")
	c.oneOf("model", t.Model, "softmax", "mlp", "small-mlp", "cnn", "small-cnn")
	c.positive("epochs", t.Epochs, "training epochs per teacher")
	if t.DataParts < 0 || t.DataPart < 0 || (t.DataParts > 0) != (t.DataPart > 0) || t.DataPart > t.DataParts {
		c.add("data_part", "want 1 ≤ data_part ≤ data_parts, or both 0 to use all the data; got %d of %d", t.DataPart, t.DataParts)
	}
	if !(t.CapEpsilon > 0) || math.IsInf(t.CapEpsilon, 0) {
		c.add("cap_epsilon", "must be a finite positive ε, e.g. 8; got %v", t.CapEpsilon)
	}
	if !(t.CapDelta > 0 && t.CapDelta < 1) {
		c.add("cap_delta", "must be in (0, 1), e.g. 1e-5; got %v", t.CapDelta)
	}
	if len(t.AuditorKeys) > 0 {
		c.verifierKeys("auditor_keys", t.AuditorKeys, "the hospital checks the charges made for its votes")
	}
	c.positive("proof_lag", t.ProofLag, "batches voted on without a proof of their charge before the hospital stops voting")
	c.required("state", t.State, "directory keeping the record of the batches this hospital voted on")
	t.Log.check(&c)
	t.Ops.check(&c)
	return c.err()
}

// checkMechanism reports the problems of a configured mechanism under its
// configuration keys (prefix.name, prefix.sigma, …: prefix is mechanism or
// fallback). Keys of other mechanisms (the defaults') are ignored: see
// Aggregator.MechanismParams. The ensemble size is not configured: a
// placeholder of one teacher stands in for it.
func checkMechanism(c *checker, prefix string, m mechanism.Params) {
	m = m.Trim()
	m.Teachers, m.Classes = 1, 0
	err := m.Validate()
	if err == nil {
		return
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		var pe *mechanism.ParamError
		if !errors.As(e, &pe) {
			c.add(prefix, "%v", e)
			continue
		}
		key := strings.ReplaceAll(pe.Param, "-", "_")
		if key == "mechanism" {
			key = "name"
		}
		c.add(prefix+"."+key, "%s = %s: %s", pe.Param, pe.Value, pe.Reason)
	}
}

// Aggregator is the configuration of nzc-aggregator.
type Aggregator struct {
	Listen      string           `mapstructure:"listen" yaml:"listen" json:"listen" help:"QUIC address hospitals and students dial"`
	Auditors    []string         `mapstructure:"auditors" yaml:"auditors" json:"auditors" help:"auditor addresses (any of them; charges go to the leader)"`
	AuditorKeys []string         `mapstructure:"auditor_keys" yaml:"auditor_keys" json:"auditor_keys" help:"the auditors' checkpoint verifier keys (id+hash+key, from nzc init); a batch is released only on a receipt a majority of them signed"`
	TLS         TLS              `mapstructure:"tls" yaml:"tls" json:"tls"`
	AgeIdentity string           `mapstructure:"age_identity" yaml:"age_identity" json:"age_identity" help:"opens vote histograms"`
	SigningKey  string           `mapstructure:"signing_key" yaml:"signing_key" json:"signing_key" help:"signs ledger charges"`
	Outbox      string           `mapstructure:"outbox" yaml:"outbox" json:"outbox" help:"durable store of charged answers not yet delivered"`
	Mechanism   mechanism.Params `mapstructure:"mechanism" yaml:"mechanism" json:"mechanism"`
	// Fallback, with a mechanism that answers in sessions, is the per-query
	// mechanism (gnmax and its σ) a student's batches may ask for once its
	// session has ended; its name empty offers none.
	Fallback      mechanism.Params `mapstructure:"fallback" yaml:"fallback,omitempty" json:"fallback"`
	Quorum        int              `mapstructure:"quorum" yaml:"quorum" json:"quorum" help:"minimum hospitals that must vote on a batch"`
	Classes       int              `mapstructure:"classes" yaml:"classes" json:"classes" help:"the federation's number of classes; a hospital announcing another is refused"`
	Teachers      int              `mapstructure:"teachers" yaml:"teachers" json:"teachers" help:"registered ensemble size of every hospital not listed in ensembles (0: only listed hospitals may vote)"`
	Ensembles     []string         `mapstructure:"ensembles" yaml:"ensembles,omitempty" json:"ensembles" help:"registered ensemble sizes as hospital-id=teachers; a hospital announcing another size is refused"`
	Hospitals     int              `mapstructure:"hospitals" yaml:"hospitals" json:"hospitals" help:"hospitals in the federation, for readiness reports (0: the quorum)"`
	BatchDeadline time.Duration    `mapstructure:"batch_deadline" yaml:"batch_deadline" json:"batch_deadline" help:"how long to wait for hospitals' votes"`
	LedgerTimeout time.Duration    `mapstructure:"ledger_timeout" yaml:"ledger_timeout" json:"ledger_timeout" help:"how long one proposal of a charge may wait for the ledger before the batch is refused with ledger-unavailable"`
	SVTMinAnswers int              `mapstructure:"svt_min_answers" yaml:"svt_min_answers,omitempty" json:"svt_min_answers" help:"an nzc-svt session answering fewer queries before its K refusals end it burns, and its hospitals get no new session (0: K; negative: never)"`
	Suspended     []string         `mapstructure:"suspended" yaml:"suspended,omitempty" json:"suspended" help:"hospital ids left out of every batch by the operator (for one whose votes burn nzc-svt sessions)"`
	Delta         float64          `mapstructure:"delta" yaml:"delta" json:"delta" help:"δ at which ε is reported"`
	Log           Log              `mapstructure:"log" yaml:"log" json:"log"`
	Ops           Ops              `mapstructure:"ops" yaml:"ops" json:"ops"`
}

func mustPreset(k mechanism.Kind) mechanism.Params {
	p, err := mechanism.Preset(k)
	if err != nil {
		panic(err) // every Kind has a preset
	}
	return p
}

// DefaultAggregator returns the defaults of nzc-aggregator: a sound
// mechanism (confident GNMax with PATE 2018's MNIST parameters, the
// mechanism package's preset).
func DefaultAggregator() Aggregator {
	return Aggregator{
		Listen:        "127.0.0.1:7400",
		Outbox:        "outbox",
		Mechanism:     mustPreset(mechanism.ConfidentGNMax),
		Quorum:        1,
		Classes:       10,
		Teachers:      DefaultTeacher().Teachers,
		BatchDeadline: 30 * time.Second,
		LedgerTimeout: 15 * time.Second,
		Delta:         1e-5,
		Log:           defaultLog(),
		Ops:           Ops{MemoryLimit: defaultMemoryLimit},
	}
}

// EnsembleSizes parses ensembles: each listed hospital's registered
// number of teachers.
func (a Aggregator) EnsembleSizes() (map[string]int, error) {
	out := make(map[string]int, len(a.Ensembles))
	for _, e := range a.Ensembles {
		id, n, ok := strings.Cut(e, "=")
		t, err := strconv.Atoi(n)
		if !ok || id == "" || err != nil {
			return nil, fmt.Errorf("%q is not hospital-id=teachers (e.g. hospital-1=50)", e)
		}
		if t < 1 || t > protocol.MaxTeachers {
			return nil, fmt.Errorf("%q: a hospital has 1 to %d teachers", e, protocol.MaxTeachers)
		}
		if _, dup := out[id]; dup {
			return nil, fmt.Errorf("hospital %s is listed twice", id)
		}
		out[id] = t
	}
	return out, nil
}

// MechanismParams returns the configured mechanism with only the keys it
// takes: the others may hold the defaults of another mechanism.
func (a Aggregator) MechanismParams() mechanism.Params { return a.Mechanism.Trim() }

// FallbackParams returns the configured fallback with only the keys it
// takes; its Mechanism is empty when none is offered.
func (a Aggregator) FallbackParams() mechanism.Params {
	if a.Fallback.Mechanism == "" {
		return mechanism.Params{}
	}
	return a.Fallback.Trim()
}

// Validate reports every problem in the configuration.
func (a Aggregator) Validate() error {
	var c checker
	c.address("listen", a.Listen, true, "the QUIC address to listen on")
	if len(a.Auditors) == 0 {
		c.add("auditors", "required: at least one auditor address; nothing is released without a ledger")
	}
	c.verifierKeys("auditor_keys", a.AuditorKeys, "a batch is released only on a receipt signed by a majority of the auditors")
	for _, addr := range a.Auditors {
		c.address("auditors", addr, true, "an auditor's address")
	}
	a.TLS.check(&c)
	c.keyFile("age_identity", a.AgeIdentity, "path to the aggregator's age identity made by `nzc init`")
	c.keyFile("signing_key", a.SigningKey, "path to the aggregator's ed25519 signing key made by `nzc init`")
	c.required("outbox", a.Outbox, "directory for charged answers awaiting delivery")
	checkMechanism(&c, "mechanism", a.Mechanism)
	if a.Fallback.Mechanism != "" {
		checkMechanism(&c, "fallback", a.Fallback)
		if !a.MechanismParams().Mechanism.Sessions() {
			c.add("fallback", "is offered only with a mechanism that answers in sessions (nzc-svt), for the batches after a student's session ends; %s answers every batch per query: remove fallback", a.Mechanism.Mechanism)
		} else if a.Fallback.Mechanism.Sessions() {
			c.add("fallback.name", "%s answers in sessions; the fallback is a per-query mechanism such as gnmax", a.Fallback.Mechanism)
		}
	}
	c.positive("quorum", a.Quorum, "minimum number of hospitals that must vote")
	if a.Classes < 2 || a.Classes > protocol.MaxClasses {
		c.add("classes", "must be between 2 and %d: the number of classes the federation's teachers vote on; got %d", protocol.MaxClasses, a.Classes)
	}
	if a.Teachers < 0 || a.Teachers > protocol.MaxTeachers {
		c.add("teachers", "must be between 0 and %d; got %d", protocol.MaxTeachers, a.Teachers)
	}
	if sizes, err := a.EnsembleSizes(); err != nil {
		c.add("ensembles", "%v", err)
	} else if len(sizes) == 0 && a.Teachers == 0 {
		c.add("ensembles", "required when teachers is 0: each hospital's registered ensemble size as hospital-id=teachers")
	}
	if a.Hospitals < 0 {
		c.add("hospitals", "must not be negative; got %d", a.Hospitals)
	}
	if a.BatchDeadline <= 0 {
		c.add("batch_deadline", "must be a positive duration such as 30s; got %v", a.BatchDeadline)
	}
	if a.LedgerTimeout <= 0 {
		c.add("ledger_timeout", "must be a positive duration such as 15s; got %v", a.LedgerTimeout)
	}
	if !(a.Delta > 0 && a.Delta < 1) {
		c.add("delta", "must be in (0, 1), e.g. 1e-5; got %v", a.Delta)
	} else if d, ok := sessionDelta(a.MechanismParams()); ok && !(d < a.Delta) {
		c.add("mechanism", "a session of these parameters has its own δ %.3g, not below delta %g: it would guarantee nothing at that δ; raise the threshold or lower scale and distance_scale (nzc-student plan finds parameters for a target ε)", d, a.Delta)
	}
	a.Log.check(&c)
	a.Ops.check(&c)
	return c.err()
}

// sessionDelta is the additive δ of a session of p, which does not
// depend on the ensemble; ok is false for other mechanisms or parameters
// that do not validate (reported elsewhere).
func sessionDelta(p mechanism.Params) (float64, bool) {
	if !p.Mechanism.Sessions() {
		return 0, false
	}
	// The session's cost needs an ensemble able to reach the threshold.
	p.Teachers = 2*int(math.Ceil(p.Threshold)) + 2
	ch, err := p.Charge(mechanism.DefaultGrid(), 0, 0)
	if err != nil {
		return 0, false
	}
	return ch.Delta, true
}

// Student is the configuration of nzc-student.
type Student struct {
	ID          string `mapstructure:"id" yaml:"id" json:"id" help:"student id, as in its certificate"`
	Aggregator  string `mapstructure:"aggregator" yaml:"aggregator" json:"aggregator" help:"aggregator address"`
	TLS         TLS    `mapstructure:"tls" yaml:"tls" json:"tls"`
	AgeIdentity string `mapstructure:"age_identity" yaml:"age_identity" json:"age_identity" help:"opens released labels"`
	// Hospitals are the age recipients (age1…) query features are sealed
	// to, from the federation manifest. With AdminKey, nzc init lists
	// none: every hospital's recipient comes signed from the aggregator.
	Hospitals []string `mapstructure:"hospitals" yaml:"hospitals" json:"hospitals" help:"age recipients (age1…) of the hospitals, from federation.json"`
	// AdminKey is the administrator's public ledger key (admin/admin.pub):
	// with it, features are also sealed to the hospitals the aggregator
	// passes whose age recipients are signed by the keys the administrator
	// registered for them, so a hospital admitted later needs no edit here.
	AdminKey string `mapstructure:"admin_key" yaml:"admin_key,omitempty" json:"admin_key,omitempty" help:"the administrator's public ledger key (admin/admin.pub): seal also to hospitals admitted later, whose recipients their registered keys sign"`
	// AuditorKeys are the auditors' checkpoint verifier keys: labels are
	// accepted only with a receipt a majority of them signed.
	AuditorKeys []string `mapstructure:"auditor_keys" yaml:"auditor_keys" json:"auditor_keys" help:"the auditors' checkpoint verifier keys (id+hash+key, from nzc init); labels are accepted only with a receipt a majority of them signed"`
	BatchSize   int      `mapstructure:"batch_size" yaml:"batch_size" json:"batch_size" help:"queries per label request"`
	Window      int      `mapstructure:"window" yaml:"window" json:"window" help:"label requests in flight at once (2 lets the hospitals vote on the next batch while the last one's charge commits)"`
	State       string   `mapstructure:"state" yaml:"state" json:"state" help:"directory recording labelled batches (resumable runs)"`
	// Deadline bounds a whole run: when it passes, the run stops with the
	// labels so far and an error naming what did not answer. 0: none.
	Deadline time.Duration `mapstructure:"deadline" yaml:"deadline" json:"deadline" help:"give up after this long (e.g. 10m), naming the auditors or hospitals that did not answer; 0: no deadline"`
	Log      Log           `mapstructure:"log" yaml:"log" json:"log"`
}

// DefaultStudent returns the defaults of nzc-student.
func DefaultStudent() Student {
	return Student{Aggregator: "127.0.0.1:7400", BatchSize: 256, Window: 2, State: "student-state", Log: defaultLog()}
}

// Validate reports every problem in the configuration.
func (s Student) Validate() error {
	var c checker
	c.id("id", s.ID, "this student's id, as named in its certificate (e.g. s1)")
	c.address("aggregator", s.Aggregator, true, "the aggregator's address")
	s.TLS.check(&c)
	c.keyFile("age_identity", s.AgeIdentity, "path to this student's age identity made by `nzc init`")
	c.verifierKeys("auditor_keys", s.AuditorKeys, "labels are accepted only with a receipt signed by a majority of the auditors")
	if len(s.Hospitals) == 0 && s.AdminKey == "" {
		c.add("hospitals", "required unless admin_key is set: the hospitals' age recipients (age1…), as listed in federation.json; query features are sealed to them")
	}
	if s.AdminKey != "" {
		c.keyFile("admin_key", s.AdminKey, "path to the administrator's public key, admin/admin.pub")
	}
	for _, r := range s.Hospitals {
		if !strings.HasPrefix(r, "age1") {
			c.add("hospitals", "%q is not an age recipient (age1…)", r)
		}
	}
	if s.BatchSize <= 0 || s.BatchSize > 65536 {
		c.add("batch_size", "must be between 1 and 65536; got %d", s.BatchSize)
	}
	if s.Window < 1 || s.Window > 16 {
		c.add("window", "must be between 1 and 16 label requests in flight; got %d", s.Window)
	}
	c.required("state", s.State, "directory recording labelled batches")
	if s.Deadline < 0 {
		c.add("deadline", "must be a duration such as 10m, or 0 for none; got %v", s.Deadline)
	}
	s.Log.check(&c)
	return c.err()
}

// Auditor is the configuration of nzc-auditor.
type Auditor struct {
	ID          string   `mapstructure:"id" yaml:"id" json:"id" help:"auditor id, as in its certificate"`
	DataDir     string   `mapstructure:"data_dir" yaml:"data_dir" json:"data_dir" help:"raft log, snapshots and ledger state"`
	Raft        string   `mapstructure:"raft" yaml:"raft" json:"raft" help:"address for raft traffic among auditors"`
	Advertise   string   `mapstructure:"advertise" yaml:"advertise" json:"advertise" help:"raft address peers dial (defaults to raft)"`
	Listen      string   `mapstructure:"listen" yaml:"listen" json:"listen" help:"address the aggregator submits charges to"`
	API         string   `mapstructure:"api" yaml:"api" json:"api" help:"HTTPS compliance API (federation client certificates)"`
	Dashboard   string   `mapstructure:"dashboard" yaml:"dashboard" json:"dashboard" help:"web dashboard, plain HTTP without authentication: keep it on loopback; empty disables it"`
	Bootstrap   bool     `mapstructure:"bootstrap" yaml:"bootstrap" json:"bootstrap" help:"form a new cluster with the peers below"`
	Peers       []string `mapstructure:"peers" yaml:"peers" json:"peers" help:"id=raft-address of the founding auditors"`
	TLS         TLS      `mapstructure:"tls" yaml:"tls" json:"tls"`
	SigningKey  string   `mapstructure:"signing_key" yaml:"signing_key" json:"signing_key" help:"ed25519 key that cosigns checkpoints"`
	Genesis     string   `mapstructure:"genesis" yaml:"genesis" json:"genesis" help:"signed commands that start an empty ledger (made by nzc init); applied once"`
	GenesisHash string   `mapstructure:"genesis_hash" yaml:"genesis_hash" json:"genesis_hash" help:"hex digest of the federation's genesis (written by nzc init): the auditor stops if its ledger holds another"`
	Log         Log      `mapstructure:"log" yaml:"log" json:"log"`
	Ops         Ops      `mapstructure:"ops" yaml:"ops" json:"ops"`
}

// PinnedGenesis decodes genesis_hash: nil when unset, else its 32 bytes.
func (a Auditor) PinnedGenesis() ([]byte, error) {
	if a.GenesisHash == "" {
		return nil, nil
	}
	b, err := hex.DecodeString(a.GenesisHash)
	if err != nil || len(b) != 32 {
		return nil, fmt.Errorf("%q is not 64 hex digits: copy it from the configuration nzc init wrote", a.GenesisHash)
	}
	return b, nil
}

// DefaultAuditor returns the defaults of nzc-auditor.
func DefaultAuditor() Auditor {
	return Auditor{DataDir: "auditor-data", Raft: "127.0.0.1:7500", Listen: "127.0.0.1:7600", API: "127.0.0.1:7700", Dashboard: "127.0.0.1:7800", Log: defaultLog(),
		Ops: Ops{MemoryLimit: defaultMemoryLimit}}
}

// Validate reports every problem in the configuration.
func (a Auditor) Validate() error {
	var c checker
	c.id("id", a.ID, "this auditor's id, as named in its certificate (e.g. a1)")
	c.required("data_dir", a.DataDir, "directory for the raft log, snapshots and ledger state")
	c.address("raft", a.Raft, true, "the address for raft traffic")
	c.address("advertise", a.Advertise, false, "")
	c.address("listen", a.Listen, true, "the address the aggregator submits charges to")
	c.address("api", a.API, false, "")
	c.address("dashboard", a.Dashboard, false, "")
	for _, p := range a.Peers {
		id, addr, ok := strings.Cut(p, "=")
		if !ok || id == "" {
			c.add("peers", "%q is not id=host:port (e.g. a2=127.0.0.1:7501)", p)
			continue
		}
		c.address("peers", addr, true, "a peer's raft address")
	}
	if a.Bootstrap && len(a.Peers) == 0 {
		c.add("peers", "required with bootstrap: the founding auditors as id=host:port, this one included")
	}
	a.TLS.check(&c)
	c.keyFile("signing_key", a.SigningKey, "path to this auditor's ed25519 key made by `nzc init`")
	if _, err := a.PinnedGenesis(); err != nil {
		c.add("genesis_hash", "%v", err)
	}
	a.Log.check(&c)
	a.Ops.check(&c)
	return c.err()
}
