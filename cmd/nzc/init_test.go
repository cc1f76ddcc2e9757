package main

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/cmd/internal/clitest"
	"github.com/nzcfed/nzc/cmd/internal/sizing"
	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/federation/config"
	"github.com/nzcfed/nzc/federation/provision"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/auditor/intake"
	"github.com/nzcfed/nzc/party/teacher"
)

// runNZC runs nzc with args. Each call keeps its checkpoints (nzc ledger
// verify and status) in a directory of its own, so that the many logs a test
// verifies with the same auditor keys do not meet there; a test of the
// kept checkpoint names its directory with --checkpoints.
func runNZC(t *testing.T, args ...string) (string, error) {
	t.Helper()
	t.Setenv("NZC_CHECKPOINTS", t.TempDir())
	return clitest.Execute(t, newRootCommand(), args...)
}

// mustRunNZC runs nzc with args and fails the test when it fails.
func mustRunNZC(t *testing.T, args ...string) string {
	t.Helper()
	out, err := runNZC(t, args...)
	if err != nil {
		t.Fatalf("nzc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// loadAs loads a written configuration file the way its binary does.
func loadAs[T cli.Validator](t *testing.T, path string, defaults T) T {
	t.Helper()
	cmd := &cobra.Command{Use: "x"}
	cli.AddConfigFlags(cmd, defaults)
	if err := cmd.ParseFlags([]string{"--config", path}); err != nil {
		t.Fatal(err)
	}
	cfg, err := cli.Load(cmd, defaults)
	if err != nil {
		t.Fatalf("%s does not load: %v", path, err)
	}
	return cfg
}

func TestInitWritesLoadableFederation(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fed")
	out := mustRunNZC(t, "init", "--dir", dir, "--hospitals", "2", "--auditors", "3", "--students", "1", "--format", "json")
	var s initSummary
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("summary is not JSON: %v\n%s", err, out)
	}
	m, err := crypto.LoadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if s.CAFingerprint == "" || s.CAFingerprint != m.CAFingerprint {
		t.Fatalf("summary fingerprint %q, manifest %q", s.CAFingerprint, m.CAFingerprint)
	}
	if len(s.Configs) != 7 { // 2 hospitals, aggregator, 3 auditors, 1 student
		t.Fatalf("wrote %d configurations, want 7: %v", len(s.Configs), s.Configs)
	}
	h := loadAs(t, filepath.Join(dir, "hospital-2.yaml"), config.DefaultTeacher())
	if h.ID != "hospital-2" || h.SigningKey == "" || !filepath.IsAbs(h.TLS.Cert) {
		t.Fatalf("hospital config: %+v", h)
	}
	if _, err := crypto.LoadPrivateKey(h.SigningKey); err != nil {
		t.Fatalf("hospital signing key: %v", err)
	}
	a := loadAs(t, filepath.Join(dir, "aggregator.yaml"), config.DefaultAggregator())
	if len(a.Auditors) != 3 {
		t.Fatalf("aggregator knows %d auditors, want 3", len(a.Auditors))
	}
	// A majority quorum, not quorum 1 (with which one hospital decided
	// every label).
	if a.Quorum != 2 || a.Hospitals != 2 || a.Classes != 10 || a.Teachers != h.Teachers {
		t.Fatalf("aggregator quorum %d of %d hospitals, %d classes, %d teachers each; want 2 of 2, 10, %d", a.Quorum, a.Hospitals, a.Classes, a.Teachers, h.Teachers)
	}
	bootstraps := 0
	dashboards := map[string]bool{}
	for i := 1; i <= 3; i++ {
		au := loadAs(t, filepath.Join(dir, "auditor-"+string(rune('0'+i))+".yaml"), config.DefaultAuditor())
		if au.Bootstrap {
			bootstraps++
		}
		// Auditors on one host each need their own dashboard port, on loopback.
		if dashboards[au.Dashboard] || !strings.HasPrefix(au.Dashboard, "127.0.0.1:") {
			t.Fatalf("auditor-%d dashboard %q: not a loopback address of its own", i, au.Dashboard)
		}
		dashboards[au.Dashboard] = true
		if len(au.Peers) != 3 {
			t.Fatalf("auditor-%d peers: %v", i, au.Peers)
		}
	}
	if bootstraps != 1 {
		t.Fatalf("%d auditors bootstrap, want exactly 1", bootstraps)
	}
	st := loadAs(t, filepath.Join(dir, "student-1.yaml"), config.DefaultStudent())
	// The administrator's key lets the student verify the recipients of
	// hospitals admitted later.
	if admin, err := crypto.LoadPublicKey(st.AdminKey); err != nil || !admin.Equal(mustAdminPublic(t, m)) {
		t.Fatalf("student admin_key %q: %v, want the administrator's public key", st.AdminKey, err)
	}
	// With it, the student lists no hospital: each founding hospital sends
	// the signed genesis that registers it.
	if len(st.Hospitals) != 0 {
		t.Fatalf("student hospitals %v, want none beside admin_key", st.Hospitals)
	}
	for _, id := range []string{"hospital-1", "hospital-2"} {
		hc := loadAs(t, filepath.Join(dir, id+".yaml"), config.DefaultTeacher())
		genesis, err := os.ReadFile(hc.Genesis)
		if err != nil {
			t.Fatalf("%s genesis %q: %v", id, hc.Genesis, err)
		}
		key, err := crypto.LoadPrivateKey(hc.SigningKey)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := teacher.GenesisRegistration(genesis, id, key); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
}

func mustAdminPublic(t *testing.T, m *crypto.Manifest) ed25519.PublicKey {
	t.Helper()
	k, err := m.AdminSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	return k.Public().(ed25519.PublicKey)
}

func TestInitRefusesToOverwrite(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fed")
	mustRunNZC(t, "init", "--dir", dir, "--hospitals", "1", "--auditors", "1")
	key := filepath.Join(dir, "hospital-1", crypto.SigningKeyFile)
	before, _ := os.ReadFile(key)
	_, err := runNZC(t, "init", "--dir", dir, "--hospitals", "1", "--auditors", "1")
	if !errors.Is(err, crypto.ErrExists) {
		t.Fatalf("second init: %v, want ErrExists", err)
	}
	after, _ := os.ReadFile(key)
	if !bytes.Equal(before, after) {
		t.Fatal("a refused init changed a key")
	}
	if _, err := runNZC(t, "init", "--dir", dir, "--hospitals", "1", "--auditors", "1", "--force"); err != nil {
		t.Fatalf("init --force: %v", err)
	}
	if forced, _ := os.ReadFile(key); bytes.Equal(before, forced) {
		t.Fatal("init --force kept the old key")
	}
}

func TestAddHospitalLeavesOthersUntouched(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fed")
	mustRunNZC(t, "init", "--dir", dir, "--hospitals", "1", "--auditors", "1")
	snapshot := map[string][]byte{}
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && filepath.Base(p) != crypto.ManifestFile {
			snapshot[p], _ = os.ReadFile(p)
		}
		return nil
	})
	out, err := runNZC(t, "init", "add-hospital", "--dir", dir)
	if err != nil || !strings.Contains(out, "hospital-2") {
		t.Fatalf("add-hospital: %v\n%s", err, out)
	}
	for p, b := range snapshot {
		if now, _ := os.ReadFile(p); !bytes.Equal(now, b) {
			t.Fatalf("add-hospital changed %s", p)
		}
	}
	h2 := loadAs(t, filepath.Join(dir, "hospital-2.yaml"), config.DefaultTeacher())
	if h2.Genesis != "" {
		t.Fatalf("hospital-2, admitted after the genesis, sends the genesis %s", h2.Genesis)
	}
	raw, err := os.ReadFile(h2.Registration)
	if err != nil {
		t.Fatalf("the new hospital's ledger registration: %v", err)
	}
	// The party's registration, then its ensemble's (nzc init registers
	// the founding hospitals' by default; the new one gets the same size).
	regs, err := teacher.Registrations(raw)
	if err != nil || len(regs) != 2 {
		t.Fatalf("%d registrations: %v", len(regs), err)
	}
	cmd, err := ledger.DecodeCommand(regs[0])
	if err != nil {
		t.Fatal(err)
	}
	ens, err := ledger.DecodeCommand(regs[1])
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := ens.Body.(*ledger.RegisterEnsemble); !ok || e.Hospital != "hospital-2" || int(e.Teachers) != config.DefaultTeacher().Teachers {
		t.Fatalf("ensemble registration: %+v", ens.Body)
	}
	if reg, ok := cmd.Body.(*ledger.RegisterParty); !ok || reg.Party.ID != "hospital-2" || reg.Party.Role != ledger.RoleHospital {
		t.Fatalf("registration command: %+v", cmd.Body)
	}
	if _, err := runNZC(t, "init", "add-hospital", "--dir", dir, "--id", "hospital-2"); !errors.Is(err, crypto.ErrExists) {
		t.Fatalf("adding an existing hospital: %v", err)
	}
}

// Each party's certificate carries its own host names: a client that
// reaches auditor-1's host cannot be answered by auditor-2 under that name.
func TestInitPartyHosts(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fed")
	mustRunNZC(t, "init", "--dir", dir, "--hospitals", "1", "--party-host", "auditor-1=a1.example.org",
		"--party-host", "auditor-1=10.0.0.1", "--party-host", "auditor-2=a2.example.org", "--hosts", "fed.example.org")
	m, err := crypto.LoadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id         string
		names, ips []string
	}{
		{"auditor-1", []string{"a1.example.org", "fed.example.org"}, []string{"10.0.0.1"}},
		{"auditor-2", []string{"a2.example.org", "fed.example.org"}, nil},
		{"auditor-3", []string{"fed.example.org"}, nil},
	} {
		p, _ := m.Party(crypto.RoleAuditor, tc.id)
		c, err := crypto.LoadCert(m.Path(p.Cert))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.VerifyHostname(tc.names[0]); err != nil {
			t.Fatalf("%s: %v", tc.id, err)
		}
		for _, other := range []string{"a1.example.org", "a2.example.org", "10.0.0.1"} {
			want := strings.Contains(strings.Join(append(tc.names, tc.ips...), " "), other)
			if got := c.VerifyHostname(other) == nil; got != want {
				t.Fatalf("%s's certificate valid for %s: %v, want %v", tc.id, other, got, want)
			}
		}
	}
	for _, bad := range []string{"nobody=x.example.org", "auditor-1"} {
		if _, err := runNZC(t, "init", "--dir", filepath.Join(t.TempDir(), "f"), "--party-host", bad); err == nil {
			t.Fatalf("--party-host %s was accepted", bad)
		}
	}
}

// Given --teachers, the genesis registers every founding hospital's
// ensemble, signed by the administrator; the configurations follow it, a
// hospital added later brings its own registration, and a size the ledger
// would refuse is refused before anything is written.
func TestInitRegistersTheEnsembles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fed")
	mustRunNZC(t, "init", "--dir", dir, "--hospitals", "2", "--auditors", "1", "--teachers", "7", "--classes", "3")
	cmds, err := intake.ReadGenesis(filepath.Join(dir, provision.GenesisFile))
	if err != nil {
		t.Fatal(err)
	}
	st := ledger.New()
	for i, c := range cmds {
		if r, err := st.Apply(c); err != nil || r.Status != ledger.StatusAccepted {
			t.Fatalf("genesis command %d: %+v %v", i, r, err)
		}
	}
	got := st.Ensembles()
	if len(got) != 2 || got[0].Hospital != "hospital-1" || got[1].Hospital != "hospital-2" || got[0].Teachers != 7 || got[1].Classes != 3 {
		t.Fatalf("registered ensembles %+v, want hospital-1 and hospital-2 at 7 teachers on 3 classes", got)
	}
	h := loadAs(t, filepath.Join(dir, "hospital-1.yaml"), config.DefaultTeacher())
	a := loadAs(t, filepath.Join(dir, "aggregator.yaml"), config.DefaultAggregator())
	if h.Teachers != 7 || a.Teachers != 7 || a.Classes != 3 {
		t.Fatalf("hospital trains %d teachers, aggregator expects %d on %d classes; want 7 on 3", h.Teachers, a.Teachers, a.Classes)
	}
	// A hospital added later brings its ensemble's registration with its
	// own: the founding hospitals' size, or the one given.
	for i, tc := range []struct {
		args []string
		want uint64
	}{{nil, 7}, {[]string{"--teachers", "9"}, 9}} {
		id := "late-" + string(rune('a'+i))
		mustRunNZC(t, append([]string{"init", "add-hospital", "--dir", dir, "--id", id}, tc.args...)...)
		hc := loadAs(t, filepath.Join(dir, id+".yaml"), config.DefaultTeacher())
		raw, err := os.ReadFile(hc.Registration)
		if err != nil {
			t.Fatal(err)
		}
		regs, err := teacher.Registrations(raw)
		if err != nil || len(regs) != 2 {
			t.Fatalf("%s: %d registrations: %v", id, len(regs), err)
		}
		for _, c := range regs {
			if r, err := st.Apply(c); err != nil || r.Status != ledger.StatusAccepted {
				t.Fatalf("%s's registration: %+v %v", id, r, err)
			}
		}
		if e := st.Ensembles(); e[len(e)-1].Hospital != id || e[len(e)-1].Teachers != tc.want || hc.Teachers != int(tc.want) {
			t.Fatalf("%s registered as %+v, configured with %d teachers; want %d", id, e[len(e)-1], hc.Teachers, tc.want)
		}
	}
	for _, args := range [][]string{{"--teachers", "-1"}, {"--teachers", "2000000"}, {"--teachers", "5", "--classes", "1"}, {"--teachers", "0", "--classes", "4"}} {
		other := filepath.Join(t.TempDir(), "fed")
		want := args[len(args)-2]
		if args[len(args)-2] == "--classes" && args[1] == "0" {
			want = "--teachers" // classes are registered with the ensembles
		}
		if _, err := runNZC(t, append([]string{"init", "--dir", other}, args...)...); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("init %v: %v, want an error naming %s", args, err, want)
		}
		if _, err := os.Stat(other); err == nil {
			t.Errorf("init %v wrote %s", args, other)
		}
	}
}

// A topology places the parties on their hosts: every configuration, kit
// and certificate follows it, with no address left to edit by hand.
func TestInitTopology(t *testing.T) {
	root := t.TempDir()
	topoFile := filepath.Join(root, "topology.yaml")
	if err := os.WriteFile(topoFile, []byte(provision.TopologyExample), 0o644); err != nil {
		t.Fatal(err)
	}
	fed := filepath.Join(root, "fed")
	mustRunNZC(t, "init", "--dir", fed, "--hospitals", "2", "--topology", topoFile, "--party-host", "hospital-1=h1.example.org")

	agg := loadAs(t, filepath.Join(fed, "aggregator.yaml"), config.DefaultAggregator())
	h1 := loadAs(t, filepath.Join(fed, "hospital-1.yaml"), config.DefaultTeacher())
	s1 := loadAs(t, filepath.Join(fed, "student-1.yaml"), config.DefaultStudent())
	a1 := loadAs(t, filepath.Join(fed, "auditor-1.yaml"), config.DefaultAuditor())
	a3 := loadAs(t, filepath.Join(fed, "auditor-3.yaml"), config.DefaultAuditor())
	intakes := []string{"10.0.0.11:7600", "10.0.0.12:7601", "audit.example.net:7602"}
	peers := []string{"auditor-1=10.0.0.11:7500", "auditor-2=10.0.0.12:7501", "auditor-3=audit.example.net:7502"}
	for _, tc := range []struct{ what, got, want string }{
		{"aggregator listen", agg.Listen, "0.0.0.0:7400"},
		{"aggregator auditors", strings.Join(agg.Auditors, ","), strings.Join(intakes, ",")},
		{"hospital aggregator", h1.Aggregator, "agg.example.org:7400"},
		{"hospital auditors", strings.Join(h1.Auditors, ","), strings.Join(intakes, ",")},
		{"student aggregator", s1.Aggregator, "agg.example.org:7400"},
		{"auditor-1 raft", a1.Raft, "0.0.0.0:7500"},
		{"auditor-1 advertise", a1.Advertise, "10.0.0.11:7500"},
		{"auditor-1 listen", a1.Listen, "0.0.0.0:7600"},
		{"auditor-1 api", a1.API, "0.0.0.0:7700"},
		{"auditor-1 dashboard", a1.Dashboard, "127.0.0.1:7800"},
		{"auditor-1 peers", strings.Join(a1.Peers, ","), strings.Join(peers, ",")},
		{"auditor-3 api", a3.API, "0.0.0.0:8443"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %q, want %q", tc.what, tc.got, tc.want)
		}
	}

	for _, ops := range []string{agg.Ops.Listen, h1.Ops.Listen, a1.Ops.Listen} {
		if !strings.HasPrefix(ops, "127.0.0.1:") {
			t.Errorf("an operations endpoint listens on %s, not loopback", ops)
		}
	}
	m, err := crypto.LoadManifest(fed)
	if err != nil {
		t.Fatal(err)
	}
	for id, host := range map[string]string{"aggregator": "agg.example.org", "auditor-1": "10.0.0.11", "auditor-3": "audit.example.net", "hospital-1": "h1.example.org"} {
		i := slices.IndexFunc(m.Parties, func(p crypto.PartyFiles) bool { return p.ID == id })
		c, err := crypto.LoadCert(m.Path(m.Parties[i].Cert))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.VerifyHostname(host); err != nil {
			t.Errorf("%s's certificate: %v", id, err)
		}
	}

	// The compliance officer's kit finds every auditor's API.
	kit := filepath.Join(root, "compliance-kit")
	mustRunNZC(t, "init", "kit", "--dir", fed, "--party", "compliance", "--out", kit)
	km, err := crypto.LoadManifest(kit)
	if err != nil {
		t.Fatal(err)
	}
	var cf complianceFlags
	cf.fed = kit
	_, targets, err := cf.targets(true)
	if err != nil {
		t.Fatalf("the compliance kit names no auditor API: %v", err)
	}
	want := []auditorTarget{{"auditor-1", "10.0.0.11:7700"}, {"auditor-2", "10.0.0.12:7701"}, {"auditor-3", "audit.example.net:8443"}}
	if !slices.Equal(targets, want) || len(km.ByRole(crypto.RoleAuditor)) != 3 {
		t.Errorf("compliance kit targets %v, want %v", targets, want)
	}
	// A kit and a later hospital follow the topology.
	hkit := filepath.Join(root, "hospital-2-kit")
	mustRunNZC(t, "init", "kit", "--dir", fed, "--party", "hospital-2", "--out", hkit)
	if c := loadAsIn(t, hkit, "hospital-2.yaml", config.DefaultTeacher()); c.Aggregator != "agg.example.org:7400" {
		t.Errorf("hospital-2's kit dials the aggregator at %s", c.Aggregator)
	}
	mustRunNZC(t, "init", "add-hospital", "--dir", fed, "--id", "hospital-9")
	if c := loadAs(t, filepath.Join(fed, "hospital-9.yaml"), config.DefaultTeacher()); c.Aggregator != "agg.example.org:7400" {
		t.Errorf("an added hospital dials the aggregator at %s", c.Aggregator)
	}
}

// loadAsIn loads the configuration name in dir from dir, as a party run in
// its kit does.
func loadAsIn[T cli.Validator](t *testing.T, dir, name string, defaults T) T {
	t.Helper()
	t.Chdir(dir)
	return loadAs(t, name, defaults)
}

// A topology that cannot describe the federation is refused before
// anything is written.
func TestInitTopologyRefused(t *testing.T) {
	for name, topo := range map[string]string{
		"unknown party":  "base_port: 7400\nparties:\n  auditor-9: {host: a9.example.org}\n",
		"unknown key":    "base_port: 7400\nparties:\n  auditor-1: {host: a1.example.org, intake: 7600}\n",
		"port in host":   "base_port: 7400\nparties:\n  auditor-1: {host: a1.example.org:7600}\n",
		"no host":        "base_port: 7400\nparties:\n  auditor-1: {api: 7700}\n",
		"bad port":       "base_port: 7400\nparties:\n  auditor-1: {host: a1.example.org, api: 70000}\n",
		"base port zero": "parties:\n  auditor-1: {host: a1.example.org}\n",
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			f := filepath.Join(root, "t.yaml")
			if err := os.WriteFile(f, []byte(topo), 0o644); err != nil {
				t.Fatal(err)
			}
			fed := filepath.Join(root, "fed")
			if _, err := runNZC(t, "init", "--dir", fed, "--topology", f); err == nil {
				t.Fatal("accepted")
			}
			if _, err := os.Stat(fed); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the refused init wrote %s", fed)
			}
		})
	}
	if _, err := runNZC(t, "init", "--dir", filepath.Join(t.TempDir(), "f"), "--party-host", "auditor-1=a1.example.org:7600"); err == nil {
		t.Fatal("--party-host with a port was accepted")
	}
}

// nzc init sizes the aggregator's mechanism for the federation's ensemble
// and says what it allows; a federation it cannot label for is refused
// before anything is written.
func TestInitSizesTheMechanism(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fed")
	out := mustRunNZC(t, "init", "--dir", dir, "--teachers", "30", "--format", "json")
	var s struct {
		Plan struct {
			Teachers int `json:"teachers"`
			Labels   int `json:"labels"`
		} `json:"plan"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatal(err)
	}
	agg := loadAs(t, filepath.Join(dir, "aggregator.yaml"), config.DefaultAggregator())
	if m := agg.MechanismParams(); m.Threshold != 72 || m.Sigma1 != 54 || m.Sigma2 != 14.4 {
		t.Errorf("aggregator mechanism %v, want the preset sized for 90 teachers (T=72, σ1=54, σ2=14.4)", m)
	}
	if s.Plan.Teachers != 90 || s.Plan.Labels < 1 {
		t.Errorf("plan %+v, want labels for 90 teachers", s.Plan)
	}
	text := mustRunNZC(t, "init", "--dir", filepath.Join(t.TempDir(), "f"), "--teachers", "30")
	if !strings.Contains(text, "labels within a hospital's cap ε=8") {
		t.Errorf("init does not say what the plan allows:\n%s", text)
	}
	bad := filepath.Join(t.TempDir(), "bad")
	if _, err := runNZC(t, "init", "--dir", bad, "--hospitals", "1", "--teachers", "1"); err == nil || !strings.Contains(err.Error(), "more teachers per hospital") {
		t.Fatalf("a federation of one teacher: %v", err)
	}
	if _, err := os.Stat(bad); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the refused init wrote the federation")
	}
}

// nzc init for 3 hospitals of 5, 10, 30, 60 or 250 teachers writes the
// default mechanism sized for the ensemble and says what it allows: labels
// per cap, the lead from which a label is the clean vote, and, when the cap
// pays for few labels, a warning with the --teachers that pays for more.
// One hospital of one teacher is refused, with that advice, before
// anything is written.
func TestInitPlansForEveryEnsemble(t *testing.T) {
	for _, tc := range []struct {
		teachers int
		few      bool
	}{{5, true}, {10, true}, {30, false}, {60, false}, {250, false}} {
		t.Run(strconv.Itoa(tc.teachers), func(t *testing.T) {
			out := mustRunNZC(t, "init", "--dir", filepath.Join(t.TempDir(), "fed"), "--teachers", strconv.Itoa(tc.teachers), "--format", "json")
			var s struct {
				Plan struct {
					Teachers       int     `json:"teachers"`
					Labels         int     `json:"labels"`
					Lead           int     `json:"lead"`
					UnanimousWrong float64 `json:"unanimous_wrong"`
				} `json:"plan"`
				Warning string `json:"warning"`
			}
			if err := json.Unmarshal([]byte(out), &s); err != nil {
				t.Fatal(err)
			}
			k := 3 * tc.teachers
			if s.Plan.Teachers != k || s.Plan.Labels < 1 || s.Plan.Lead < 1 || s.Plan.Lead > k || s.Plan.UnanimousWrong > sizing.MaxUnanimousWrong {
				t.Fatalf("plan %+v for %d teachers", s.Plan, k)
			}
			if tc.few != (s.Warning != "") {
				t.Fatalf("%d labels per cap, warning %q", s.Plan.Labels, s.Warning)
			}
			if tc.few && !strings.Contains(s.Warning, "nzc init --teachers ") {
				t.Errorf("the warning does not say what to change: %s", s.Warning)
			}
		})
	}
	bad := filepath.Join(t.TempDir(), "bad")
	if _, err := runNZC(t, "init", "--dir", bad, "--hospitals", "1", "--teachers", "1"); err == nil || !strings.Contains(err.Error(), "--teachers 64 pays for") {
		t.Fatalf("one hospital of one teacher: %v", err)
	}
	if _, err := os.Stat(bad); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the refused init wrote the federation")
	}
}
