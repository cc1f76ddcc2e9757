package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/cmd/internal/sizing"
	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/federation/config"
	"github.com/nzcfed/nzc/federation/provision"
	"github.com/nzcfed/nzc/ledger"
)

// initSummary is what `nzc init` reports.
type initSummary struct {
	Dir           string      `json:"dir"`
	CAFingerprint string      `json:"ca_fingerprint_sha256"`
	Parties       []initParty `json:"parties"`
	Configs       []string    `json:"configs"`
	// Plan is what the aggregator's mechanism, sized for the federation's
	// ensemble, allows within a hospital's default cap.
	Plan *sizing.Plan `json:"plan,omitempty"`
	// Warning says when the plan pays for few labels, and what would pay
	// for more.
	Warning string `json:"warning,omitempty"`
}

type initParty struct {
	Role   string `json:"role"`
	ID     string `json:"id"`
	URI    string `json:"uri"`
	Config string `json:"config,omitempty"`
}

func summarize(m *crypto.Manifest, configs []string) initSummary {
	s := initSummary{Dir: m.Dir, CAFingerprint: m.CAFingerprint, Configs: configs}
	for _, p := range m.Parties {
		ip := initParty{Role: string(p.Role), ID: p.ID, URI: p.URI}
		if _, err := os.Stat(provision.ConfigFile(m, p)); err == nil {
			ip.Config = provision.ConfigFile(m, p)
		}
		s.Parties = append(s.Parties, ip)
	}
	return s
}

func (s initSummary) text(b *strings.Builder) {
	fmt.Fprintf(b, "federation in %s\n\n", s.Dir)
	fmt.Fprintf(b, "CA fingerprint (SHA-256), to confirm with every party out of band:\n  %s\n\n", s.CAFingerprint)
	fmt.Fprintf(b, "%-11s %-14s %s\n", "ROLE", "ID", "CONFIG")
	for _, p := range s.Parties {
		cfg := p.Config
		if cfg == "" {
			cfg = "-"
		}
		fmt.Fprintf(b, "%-11s %-14s %s\n", p.Role, p.ID, cfg)
	}
	if s.Plan != nil {
		fmt.Fprintf(b, "\nThe aggregator's mechanism: %s.\n", s.Plan)
	}
	if s.Warning != "" {
		fmt.Fprintf(b, "\nWarning: %s.\n", s.Warning)
	}
	b.WriteString("\nPrivate keys are mode 0600. Give each party only its own directory, its\nconfiguration and the CA certificate; keep ca/ca.key and admin/admin.key\noffline, apart from each other.\n")
}

func newInitCommand() *cobra.Command {
	var (
		dir                           string
		hospitals, auditors, students int
		hosts, partyHosts             []string
		topologyFile                  string
		basePort, teachers, classes   int
		epsilonBound, deltaBound      float64
		studentShare                  float64
		force                         bool
	)
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Provision a federation: CA, party certificates and keys, one configuration per party",
		Long: `init creates a federation in a directory: a certificate authority; for every
party (hospitals, auditors, students, the aggregator and a compliance
officer) a certificate naming its role and id (nzc://hospital/hospital-1), an
age identity and, for the aggregator, the auditors and the hospitals, an
ed25519 signing key; and one YAML configuration per party with the
addresses the parties run at. It prints the CA fingerprint for every party
to check out of band.

Where the parties run is given with --party-host ID=HOST (repeat for each
party on a host of its own) or a topology file (--topology, below), which
may also set the ports that differ from --base-port's. A party with a host
binds its services on every interface and the others dial HOST (an
auditor's raft advertises HOST to its peers); its certificate names HOST.
A party without one runs on this machine, on loopback. Dashboards and
operations endpoints stay on loopback. init records the topology in
topology.yaml: init kit, add-hospital and sign follow it, and every kit
holds it. A topology file:

` + indent(provision.TopologyExample) + `
Ports are named after the configuration keys they set: listen (the
aggregator's QUIC port, an auditor's charge intake), raft, api, dashboard,
ops.

Existing keys are never overwritten unless --force is given.`,
		Example: `  # A federation of 3 hospitals, 3 auditors and 1 student in ./federation:
  nzc init --dir federation --hospitals 3 --auditors 3 --students 1

  # Later, one more hospital, leaving every other key untouched:
  nzc init add-hospital --dir federation

  # Hospitals of 20 teachers each, voting on 2 classes, registered in the
  # ledger's genesis (the aggregator takes the sizes from the ledger and
  # refuses a hospital announcing another):
  nzc init --dir federation --teachers 20 --classes 2

  # The aggregator and each auditor on a host of its own (the certificate of
  # each names its own host, not the others'; hospitals and students dial out):
  nzc init --dir federation --party-host aggregator=agg.example.org \
      --party-host auditor-1=a1.example.org --party-host auditor-2=a2.example.org \
      --party-host auditor-3=a3.example.org

  # The same from a topology file (ports that differ, too):
  nzc init --dir federation --topology topology.yaml

  # The summary as JSON:
  nzc init --dir fed2 --format json`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().StringVar(&dir, "dir", "federation", "directory to create the federation in")
	cmd.Flags().IntVar(&hospitals, "hospitals", 3, "number of hospitals")
	cmd.Flags().IntVar(&auditors, "auditors", 3, "number of auditors (3 or 5 tolerate 1 or 2 failures)")
	cmd.Flags().IntVar(&students, "students", 1, "number of students")
	cmd.Flags().StringSliceVar(&hosts, "hosts", nil, "extra DNS names or IP addresses for every certificate, besides loopback")
	cmd.Flags().StringArrayVar(&partyHosts, "party-host", nil, "ID=HOST: party ID runs on HOST (a DNS name or IP address): its configuration binds every interface, the others dial HOST, and its certificate names HOST; repeat for more parties (a second HOST of one party goes into its certificate only)")
	cmd.Flags().StringVar(&topologyFile, "topology", "", "YAML file of where each party runs: base_port and, per party id, host and the ports that differ (see above)")
	cmd.Flags().IntVar(&basePort, "base-port", 7400, "first port of the federation's addresses (the topology file's base_port wins)")
	cmd.Flags().BoolVar(&force, "force", false, "replace an existing federation's keys and configurations")
	cmd.Flags().IntVar(&teachers, "teachers", config.DefaultTeacher().Teachers, "each hospital's ensemble size, registered in the ledger's genesis, signed by the administrator: the aggregator takes it from the ledger and refuses a hospital announcing another (0: register none, and the aggregator's configuration decides, as in federations made before registrations)")
	cmd.Flags().IntVar(&classes, "classes", config.DefaultAggregator().Classes, "the federation's number of classes, registered with each hospital's ensemble")
	cmd.Flags().Float64Var(&epsilonBound, "epsilon-bound", ledger.DefaultEpsilonBound, "the largest cap ε any hospital may set, fixed in the ledger's genesis")
	cmd.Flags().Float64Var(&studentShare, "student-share", 0, "the largest share of any hospital's cap ε one student may spend, in (0, 1], fixed in the ledger's genesis (0: each student's fair share, 1/students); the ledger refuses a batch past it as share-exceeded")
	cmd.Flags().Float64Var(&deltaBound, "delta-bound", ledger.DefaultDeltaBound, "the largest cap δ any hospital may set, fixed in the ledger's genesis; every account also reports its ε at this δ")
	cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		if basePort < 1 || basePort+1000+hospitals+auditors+students+2 > 65535 {
			return fmt.Errorf("--base-port %d leaves no room for the federation's ports; use a value between 1024 and 60000", basePort)
		}
		if cmd.Flags().Changed("classes") && teachers == 0 {
			return errors.New("--classes is registered with each hospital's ensemble: give --teachers too")
		}
		if teachers != 0 {
			if err := checkEnsemble(teachers, classes); err != nil {
				return err
			}
		}
		plan, warning, err := initPlan(hospitals, teachers, classes)
		if err != nil {
			return err
		}
		dir, err := filepath.Abs(dir)
		if err != nil {
			return err
		}
		topo, byParty, err := initTopology(topologyFile, partyHosts, basePort)
		if err != nil {
			return err
		}
		if topo.BasePort+1000+hospitals+auditors+students+2 > 65535 {
			return fmt.Errorf("base port %d leaves no room for the federation's ports; use a value between 1024 and 60000", topo.BasePort)
		}
		// provision.Provision refuses a party the federation does not have
		// before it writes anything.
		m, err := provision.Provision(dir, provision.Spec{Hospitals: hospitals, Auditors: auditors, Students: students, Hosts: hosts, PartyHosts: byParty, Force: force})
		if err != nil {
			return err
		}
		if err := provision.WriteTopology(m.Dir, topo, force); err != nil {
			return err
		}
		if err := provision.WriteBoundedGenesis(m, teachers, classes, epsilonBound, deltaBound, studentShare); err != nil {
			return err
		}
		cfgs, err := provision.PartyConfigs(m, topo)
		if err != nil {
			return err
		}
		written, err := provision.WriteConfigs(m, cfgs, "", force)
		if err != nil {
			return err
		}
		s := summarize(m, written)
		s.Plan, s.Warning = &plan, warning
		return cli.Print(cmd.OutOrStdout(), f, s, cli.Text(s.text))
	})
	cmd.AddCommand(newAddHospitalCommand(), newInitSignCommand(), newInitKitCommand(), newInitSuspendCommand())
	return cmd
}

// initTopology reads where the parties run: the topology file (when
// given), then each --party-host ID=HOST, which places a party the file
// does not and adds a name to its certificate either way. It returns the
// topology and every party's certificate hosts.
func initTopology(file string, partyHosts []string, basePort int) (provision.Topology, map[string][]string, error) {
	topo := provision.Topology{BasePort: basePort}
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return topo, nil, fmt.Errorf("--topology: %w", err)
		}
		if topo, err = provision.ParseTopology(data); err != nil {
			return topo, nil, fmt.Errorf("--topology %s: %w", file, err)
		}
	}
	byParty := map[string][]string{}
	for id, p := range topo.Parties {
		byParty[id] = []string{p.Host}
	}
	for _, v := range partyHosts {
		id, host, ok := strings.Cut(v, "=")
		if !ok || id == "" || host == "" {
			return topo, nil, fmt.Errorf("--party-host %q: want ID=HOST, such as auditor-1=a1.example.org", v)
		}
		if _, placed := topo.Parties[id]; !placed {
			if err := topo.SetHost(id, host); err != nil {
				return topo, nil, fmt.Errorf("--party-host %s: %w", v, err)
			}
		}
		if !slices.Contains(byParty[id], host) {
			byParty[id] = append(byParty[id], host)
		}
	}
	return topo, byParty, nil
}

func newAddHospitalCommand() *cobra.Command {
	var (
		dir, id  string
		hosts    []string
		basePort int
		teachers int
	)
	cmd := &cobra.Command{
		Use:   "add-hospital",
		Short: "Issue keys and a configuration for one more hospital, leaving all other keys untouched",
		Example: `  nzc init add-hospital --dir federation
  nzc init add-hospital --dir federation --id st-marys

  # A hospital of 30 teachers (registered in the ledger with it):
  nzc init add-hospital --dir federation --id st-marys --teachers 30`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().StringVar(&dir, "dir", "federation", "directory of an existing federation")
	cmd.Flags().StringVar(&id, "id", "", "the new hospital's id (default: the next free hospital-N)")
	cmd.Flags().StringSliceVar(&hosts, "hosts", nil, "extra DNS names or IP addresses for the certificate")
	cmd.Flags().IntVar(&basePort, "base-port", 7400, "first port of a federation made without a topology file (topology.yaml)")
	cmd.Flags().IntVar(&teachers, "teachers", 0, "the new hospital's ensemble size, registered in the ledger with it (default: the founding hospitals')")
	return cli.WithFormat(cmd, func(cmd *cobra.Command, _ []string, f string) error {
		if teachers != 0 {
			if err := checkEnsemble(teachers, ledger.MaxClasses); err != nil {
				return err
			}
		}
		dir, err := filepath.Abs(dir)
		if err != nil {
			return err
		}
		topo, err := provision.ReadTopology(dir, basePort)
		if err != nil {
			return err
		}
		m, p, err := provision.AddParty(dir, crypto.RoleHospital, id, provision.AddPartyOptions{Hosts: hosts})
		if err != nil {
			return err
		}
		reg, err := provision.WriteRegistration(m, p, teachers)
		if err != nil {
			return err
		}
		cfgs, err := provision.PartyConfigs(m, topo)
		if err != nil {
			return err
		}
		tc := cfgs[p.ID].(config.Teacher)
		tc.Registration = reg
		if teachers != 0 {
			tc.Teachers = teachers
		}
		cfgs[p.ID] = tc
		written, err := provision.WriteConfigs(m, cfgs, p.ID, false)
		if err != nil {
			return err
		}
		s := summarize(m, written)
		return cli.Print(cmd.OutOrStdout(), f, s, cli.Textf("added hospital %s (%s)\nconfiguration: %s\nCA fingerprint (SHA-256): %s\n", p.ID, p.URI, strings.Join(written, ", "), m.CAFingerprint))
	})
}

// initPlan plans the aggregator's mechanism for a federation of hospitals
// with ensembles of teachers (0: the aggregator's default size) voting on
// classes, within a hospital's default cap, and refuses a federation it
// cannot label for. A plan that pays for few labels comes with a warning
// naming the ensemble that would pay for more.
func initPlan(hospitals, teachers, classes int) (sizing.Plan, string, error) {
	if teachers == 0 {
		teachers = config.DefaultAggregator().Teachers
	}
	k := hospitals * teachers
	mech := provision.SizedMechanism(config.DefaultAggregator().Mechanism, k, classes)
	tc := config.DefaultTeacher()
	plan, err := sizing.Check(mech, k, classes, tc.CapEpsilon, tc.CapDelta)
	if err != nil {
		more := ""
		if t, p, ok := sizing.Suggest(mech.Mechanism, hospitals, teachers, classes, tc.CapEpsilon, tc.CapDelta); ok {
			more = fmt.Sprintf(" (--teachers %d pays for %d labels)", t, p.Labels)
		}
		return sizing.Plan{}, "", fmt.Errorf("%d hospitals of %d teachers: %w%s; nothing was written", hospitals, teachers, err, more)
	}
	return plan, fewLabels(plan, hospitals, teachers, classes, tc.CapEpsilon, tc.CapDelta), nil
}

// fewLabels warns of a plan that pays for fewer than sizing.FewLabels
// labels per cap and says what would pay for more; "" otherwise.
func fewLabels(plan sizing.Plan, hospitals, teachers, classes int, capEps, capDelta float64) string {
	if !plan.Few() {
		return ""
	}
	w := fmt.Sprintf("a hospital's cap ε=%g pays for only %d labels with %d teachers in all, too few to train a student on", capEps, plan.Labels, plan.Teachers)
	if t, p, ok := sizing.Suggest(plan.Mechanism.Mechanism, hospitals, teachers, classes, capEps, capDelta); ok {
		w += fmt.Sprintf("; %d teachers per hospital (nzc init --teachers %d) pay for %d, or hospitals may set larger caps (cap_epsilon, up to the genesis bound)", t, t, p.Labels)
	}
	return w
}

// indent indents every line of s by four spaces.
func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n    ") + "\n"
}

// checkEnsemble refuses an ensemble size or class count the ledger would.
func checkEnsemble(teachers, classes int) error {
	if teachers < 1 || teachers > ledger.MaxTeachers {
		return fmt.Errorf("--teachers %d: a hospital has 1 to %d teachers", teachers, ledger.MaxTeachers)
	}
	if classes < 2 || classes > ledger.MaxClasses {
		return fmt.Errorf("--classes %d: a federation has 2 to %d classes", classes, ledger.MaxClasses)
	}
	return nil
}
