package main

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/nzcfed/nzc/cmd/internal/cli"
	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/internal/config"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/auditor/intake"
)

// Ports of a federation on one host, from a base port B:
//
//	B          aggregator (QUIC)
//	B+100+i    auditor i raft            B+200+i  auditor i charge intake
//	B+300+i    auditor i compliance API  B+400+i  auditor i dashboard
//	B+1000+k   operations endpoint of party k
type ports struct{ base int }

func (p ports) aggregator() int     { return p.base }
func (p ports) raft(i int) int      { return p.base + 100 + i }
func (p ports) intake(i int) int    { return p.base + 200 + i }
func (p ports) api(i int) int       { return p.base + 300 + i }
func (p ports) dashboard(i int) int { return p.base + 400 + i }
func (p ports) ops(k int) int       { return p.base + 1000 + k }

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// configFile is where a party's configuration is written.
func configFile(m *crypto.Manifest, p crypto.PartyFiles) string {
	return filepath.Join(m.Dir, p.ID+".yaml")
}

// partyConfigs returns the configuration of every party of a federation,
// keyed by party id, with loopback addresses.
func partyConfigs(m *crypto.Manifest, pt ports) (map[string]any, error) {
	abs := func(rel string) string { return m.Path(rel) }
	tlsOf := func(p crypto.PartyFiles) config.TLS {
		return config.TLS{CA: abs(m.CACert), Cert: abs(p.Cert), Key: abs(p.Key)}
	}
	// A party that keeps its own keys (nzc keys new) gets paths relative to
	// its key directory, made absolute there by nzc keys install.
	ownKeys := func(p crypto.PartyFiles) bool { return p.Key == "" }
	auditors := m.ByRole(crypto.RoleAuditor)
	var intakes, peers []string
	for i, a := range auditors {
		intakes = append(intakes, loopback(pt.intake(i)))
		peers = append(peers, a.ID+"="+loopback(pt.raft(i)))
	}
	auditorKeys, err := intake.AuditorKeys(m)
	if err != nil {
		return nil, err
	}
	genesis, err := intake.ReadGenesis(filepath.Join(m.Dir, GenesisFile))
	if err != nil {
		return nil, err
	}
	genesisHash, err := intake.GenesisDigest(genesis)
	if err != nil {
		return nil, err
	}
	// The founding hospitals' ensembles the genesis registers, which the
	// aggregator's configured sizes and each hospital's teachers follow.
	ensembles := intake.GenesisEnsembles(genesis)
	var recipients []string
	for _, h := range m.ByRole(crypto.RoleHospital) {
		recipients = append(recipients, h.AgeRecipient)
	}
	out := map[string]any{}
	k := 0
	for _, p := range m.Parties {
		k++
		switch p.Role {
		case crypto.RoleHospital:
			c := config.DefaultTeacher()
			if len(ensembles) > 0 {
				c.Teachers = int(ensembles[0].Teachers)
			}
			c.ID, c.Aggregator, c.TLS = p.ID, loopback(pt.aggregator()), tlsOf(p)
			c.Auditors = intakes
			c.AgeIdentity, c.SigningKey = abs(p.AgeIdentity), abs(p.SigningKey)
			c.AuditorKeys = auditorKeys
			c.Models, c.State = filepath.Join(m.Dir, p.ID, "models"), filepath.Join(m.Dir, p.ID, "state")
			if ownKeys(p) {
				c.TLS = config.TLS{CA: bundleCACert, Cert: crypto.PartyCertFile, Key: crypto.PartyKeyFile}
				c.AgeIdentity, c.SigningKey, c.Models, c.State = crypto.AgeIdentityFile, crypto.SigningKeyFile, "models", "state"
			}
			c.Ops.Listen = loopback(pt.ops(k))
			out[p.ID] = c
		case crypto.RoleAggregator:
			c := config.DefaultAggregator()
			c.Listen, c.Auditors, c.TLS = loopback(pt.aggregator()), intakes, tlsOf(p)
			c.AuditorKeys = auditorKeys
			c.Hospitals = len(m.ByRole(crypto.RoleHospital))
			if len(ensembles) > 0 {
				c.Teachers, c.Classes = int(ensembles[0].Teachers), int(ensembles[0].Classes)
			}
			// A majority of the hospitals must vote on every batch: one
			// hospital alone never decides a label.
			c.Quorum = c.Hospitals/2 + 1
			c.AgeIdentity, c.SigningKey = abs(p.AgeIdentity), abs(p.SigningKey)
			c.Outbox = filepath.Join(m.Dir, p.ID, "outbox")
			c.Ops.Listen = loopback(pt.ops(k))
			out[p.ID] = c
		case crypto.RoleStudent:
			c := config.DefaultStudent()
			c.ID, c.Aggregator, c.TLS, c.AgeIdentity = p.ID, loopback(pt.aggregator()), tlsOf(p), abs(p.AgeIdentity)
			c.Hospitals, c.AuditorKeys = recipients, auditorKeys
			c.State = filepath.Join(m.Dir, p.ID, "state")
			out[p.ID] = c
		case crypto.RoleAuditor:
			i := indexOf(auditors, p.ID)
			c := config.DefaultAuditor()
			c.ID, c.TLS, c.SigningKey = p.ID, tlsOf(p), abs(p.SigningKey)
			c.DataDir = filepath.Join(m.Dir, p.ID, "data")
			c.Raft, c.Listen, c.API = loopback(pt.raft(i)), loopback(pt.intake(i)), loopback(pt.api(i))
			c.Dashboard = loopback(pt.dashboard(i))
			c.Bootstrap, c.Peers = i == 0, peers
			if i == 0 {
				c.Genesis = filepath.Join(m.Dir, GenesisFile)
			}
			c.GenesisHash = hex.EncodeToString(genesisHash[:])
			c.Ops.Listen = loopback(pt.ops(k))
			out[p.ID] = c
		}
	}
	for id, c := range out {
		if err := c.(cli.Validator).Validate(); err != nil {
			return nil, fmt.Errorf("configuration of %s: %w", id, err)
		}
	}
	return out, nil
}

func indexOf(ps []crypto.PartyFiles, id string) int {
	for i, p := range ps {
		if p.ID == id {
			return i
		}
	}
	return -1
}

// writeConfigs writes one YAML file per party; existing files are kept
// unless force.
func writeConfigs(m *crypto.Manifest, cfgs map[string]any, only string, force bool) ([]string, error) {
	var written []string
	for _, p := range m.Parties {
		c, ok := cfgs[p.ID]
		if !ok || (only != "" && p.ID != only) {
			continue
		}
		data, err := yaml.Marshal(c)
		if err != nil {
			return written, err
		}
		header := fmt.Sprintf("# %s configuration of %s, written by `nzc init`.\n# Flags and NZC_* environment variables override these keys.\n", p.Role, p.ID)
		path := configFile(m, p)
		if err := crypto.WriteFile(path, append([]byte(header), data...), 0o644, force); err != nil {
			return written, err
		}
		written = append(written, path)
	}
	return written, nil
}

// initSummary is what `nzc init` reports.
type initSummary struct {
	Dir           string      `json:"dir"`
	CAFingerprint string      `json:"ca_fingerprint_sha256"`
	Parties       []initParty `json:"parties"`
	Configs       []string    `json:"configs"`
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
		if _, err := os.Stat(configFile(m, p)); err == nil {
			ip.Config = configFile(m, p)
		}
		s.Parties = append(s.Parties, ip)
	}
	return s
}

func (s initSummary) text(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "federation in %s\n\n", s.Dir)
	fmt.Fprintf(&b, "CA fingerprint (SHA-256), to confirm with every party out of band:\n  %s\n\n", s.CAFingerprint)
	fmt.Fprintf(&b, "%-11s %-14s %s\n", "ROLE", "ID", "CONFIG")
	for _, p := range s.Parties {
		cfg := p.Config
		if cfg == "" {
			cfg = "-"
		}
		fmt.Fprintf(&b, "%-11s %-14s %s\n", p.Role, p.ID, cfg)
	}
	b.WriteString("\nPrivate keys are mode 0600. Give each party only its own directory, its\nconfiguration and the CA certificate; keep ca/ca.key and admin/admin.key\noffline, apart from each other.\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func newInitCommand() *cobra.Command {
	var (
		dir                           string
		hospitals, auditors, students int
		hosts, partyHosts             []string
		basePort, teachers, classes   int
		force                         bool
	)
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Provision a federation: CA, party certificates and keys, one configuration per party",
		Long: `init creates a federation in a directory: a certificate authority; for every
party (hospitals, auditors, students, the aggregator and a compliance
officer) a certificate naming its role and id (nzc://hospital/hospital-1), an
age identity and, for the aggregator, the auditors and the hospitals, an
ed25519 signing key; and one YAML configuration per party with loopback
addresses. It prints the CA fingerprint for every party to check out of band.

Existing keys are never overwritten unless --force is given.`,
		Example: `  # A federation of 3 hospitals, 3 auditors and 1 student in ./federation:
  nzc init --dir federation --hospitals 3 --auditors 3 --students 1

  # Later, one more hospital, leaving every other key untouched:
  nzc init add-hospital --dir federation

  # Hospitals of 20 teachers each, voting on 2 classes, registered in the
  # ledger's genesis (the aggregator takes the sizes from the ledger and
  # refuses a hospital announcing another):
  nzc init --dir federation --teachers 20 --classes 2

  # Each auditor's certificate names its own host, not the others':
  nzc init --dir federation --party-host auditor-1=a1.example.org --party-host auditor-2=a2.example.org \
      --party-host auditor-3=a3.example.org

  # The summary as JSON:
  nzc init --dir fed2 --format json`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().StringVar(&dir, "dir", "federation", "directory to create the federation in")
	cmd.Flags().IntVar(&hospitals, "hospitals", 3, "number of hospitals")
	cmd.Flags().IntVar(&auditors, "auditors", 3, "number of auditors (3 or 5 tolerate 1 or 2 failures)")
	cmd.Flags().IntVar(&students, "students", 1, "number of students")
	cmd.Flags().StringSliceVar(&hosts, "hosts", nil, "extra DNS names or IP addresses for every certificate, besides loopback")
	cmd.Flags().StringArrayVar(&partyHosts, "party-host", nil, "ID=HOST: a DNS name or IP address for party ID's certificate only (repeat for more), so that a client reaching HOST knows it reached that party")
	cmd.Flags().IntVar(&basePort, "base-port", 7400, "first port of the federation's loopback addresses")
	cmd.Flags().BoolVar(&force, "force", false, "replace an existing federation's keys and configurations")
	cmd.Flags().IntVar(&teachers, "teachers", config.DefaultTeacher().Teachers, "each hospital's ensemble size, registered in the ledger's genesis, signed by the administrator: the aggregator takes it from the ledger and refuses a hospital announcing another (0: register none, and the aggregator's configuration decides, as in federations made before registrations)")
	cmd.Flags().IntVar(&classes, "classes", config.DefaultAggregator().Classes, "the federation's number of classes, registered with each hospital's ensemble")
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
		dir, err := filepath.Abs(dir)
		if err != nil {
			return err
		}
		byParty := map[string][]string{}
		for _, v := range partyHosts {
			id, host, ok := strings.Cut(v, "=")
			if !ok || id == "" || host == "" {
				return fmt.Errorf("--party-host %q: want ID=HOST, such as auditor-1=a1.example.org", v)
			}
			byParty[id] = append(byParty[id], host)
		}
		m, err := crypto.Provision(dir, crypto.ProvisionSpec{Hospitals: hospitals, Auditors: auditors, Students: students, Hosts: hosts, PartyHosts: byParty, Force: force})
		if err != nil {
			return err
		}
		if err := writeGenesis(m, teachers, classes); err != nil {
			return err
		}
		cfgs, err := partyConfigs(m, ports{basePort})
		if err != nil {
			return err
		}
		written, err := writeConfigs(m, cfgs, "", force)
		if err != nil {
			return err
		}
		s := summarize(m, written)
		return cli.Print(cmd.OutOrStdout(), f, s, s.text)
	})
	cmd.AddCommand(newAddHospitalCommand(), newInitSignCommand(), newInitKitCommand())
	return cmd
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
	cmd.Flags().IntVar(&basePort, "base-port", 7400, "first port of the federation's loopback addresses (as given to init)")
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
		m, p, err := crypto.AddParty(dir, crypto.RoleHospital, id, crypto.AddPartyOptions{Hosts: hosts})
		if err != nil {
			return err
		}
		reg, err := writeRegistrationOf(m, p, teachers)
		if err != nil {
			return err
		}
		cfgs, err := partyConfigs(m, ports{basePort})
		if err != nil {
			return err
		}
		tc := cfgs[p.ID].(config.Teacher)
		tc.Registration = reg
		if teachers != 0 {
			tc.Teachers = teachers
		}
		cfgs[p.ID] = tc
		written, err := writeConfigs(m, cfgs, p.ID, false)
		if err != nil {
			return err
		}
		s := summarize(m, written)
		return cli.Print(cmd.OutOrStdout(), f, s, func(w io.Writer) error {
			_, err := fmt.Fprintf(w, "added hospital %s (%s)\nconfiguration: %s\nCA fingerprint (SHA-256): %s\n", p.ID, p.URI, strings.Join(written, ", "), m.CAFingerprint)
			return err
		})
	})
}

// RegistrationFile is where `nzc init add-hospital` writes the
// administrator-signed ledger registration of the new hospital.
const RegistrationFile = "ledger-registration.cmd"

// writeRegistration signs, with the administrator's key, the ledger command
// that adds a hospital provisioned after the genesis, and writes it in the
// hospital's directory. In a federation whose genesis registers the
// hospitals' ensembles, the file is a JSON list of that command and the
// registration of the new hospital's ensemble (the founding hospitals'
// size). The hospital relays them through the aggregator when it starts.
func writeRegistration(m *crypto.Manifest, p crypto.PartyFiles) (string, error) {
	return writeRegistrationOf(m, p, 0)
}

// writeRegistrationOf is writeRegistration with the new hospital's
// ensemble of teachers (0: the founding hospitals' size).
func writeRegistrationOf(m *crypto.Manifest, p crypto.PartyFiles, teachers int) (string, error) {
	key, err := m.AdminSigningKey()
	if err != nil {
		return "", fmt.Errorf("signing %s's ledger registration: %w", p.ID, err)
	}
	now := time.Now()
	out, err := intake.RegisterHospital(m, p, key, now)
	if err != nil {
		return "", err
	}
	genesis, err := intake.ReadGenesis(filepath.Join(m.Dir, GenesisFile))
	if err != nil {
		return "", err
	}
	if ens := intake.GenesisEnsembles(genesis); len(ens) > 0 {
		if teachers == 0 {
			teachers = int(ens[0].Teachers)
		}
		e, err := intake.EnsembleCommands([]string{p.ID}, teachers, int(ens[0].Classes), key, now)
		if err != nil {
			return "", err
		}
		if out, err = json.Marshal([][]byte{out, e[0]}); err != nil {
			return "", err
		}
	}
	path := filepath.Join(m.Dir, p.ID, RegistrationFile)
	return path, crypto.WriteFile(path, out, 0o644, false)
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
