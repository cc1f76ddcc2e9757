// Package provision writes what `nzc init` and `nzc keys` write: a
// federation's key files (the CA, the administrator's signing key, every
// party's keys) and the manifest that lists them ([Provision], [AddParty]);
// the ledger commands the administrator signs ([GenesisCommands],
// [RegisterHospital], [EnsembleCommands]), the genesis file and a later
// hospital's registration; one configuration per party; the key requests of
// parties that keep their own keys and their admission (request.go); and
// what a party takes to run on its own machine: its kit, or the bundle that
// admits its key request, and the bundle's installation (handover.go).
//
// It writes; the parties only read. crypto.LoadManifest reads the
// manifest, intake.ReadGenesis and intake.GenesisDigest the genesis file,
// and the tests of the layers below this one build their federations with
// crypto/cryptotest.
package provision

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/federation/config"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/party/auditor/compliance"
	"github.com/nzcfed/nzc/party/auditor/intake"
	"github.com/nzcfed/nzc/protocol"
)

// GenesisFile holds the signed commands that start a federation's ledger.
const GenesisFile = "genesis.json"

// RegistrationFile is where `nzc init add-hospital` writes the
// administrator-signed ledger registration of the new hospital.
const RegistrationFile = "ledger-registration.cmd"

// BundleCACert is the federation CA certificate's name in a key bundle and
// in the configuration of a party that keeps its own keys.
const BundleCACert = "ca.crt"

// Ports of a federation on one host, from a base port B:
//
//	B          aggregator (QUIC)
//	B+100+i    auditor i raft            B+200+i  auditor i charge intake
//	B+300+i    auditor i compliance API  B+400+i  auditor i dashboard
//	B+1000+k   operations endpoint of party k
type Ports struct{ Base int }

// Aggregator is the aggregator's QUIC port.
func (p Ports) Aggregator() int { return p.Base }

// Raft is auditor i's raft port.
func (p Ports) Raft(i int) int { return p.Base + 100 + i }

// Intake is auditor i's charge intake port.
func (p Ports) Intake(i int) int { return p.Base + 200 + i }

// API is auditor i's compliance API port.
func (p Ports) API(i int) int { return p.Base + 300 + i }

// Dashboard is auditor i's dashboard port.
func (p Ports) Dashboard(i int) int { return p.Base + 400 + i }

// Ops is the operations port of the federation's k-th party (from 1).
func (p Ports) Ops(k int) int { return p.Base + 1000 + k }

// Loopback is port on 127.0.0.1.
func Loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// WriteGenesisFile writes commands to path as a JSON list (base64
// strings): the genesis file intake.ReadGenesis reads.
func WriteGenesisFile(path string, cmds [][]byte) error {
	b, err := json.Marshal(cmds)
	if err != nil {
		return err
	}
	return crypto.WriteFile(path, b, 0o644, true)
}

// ConfigFile is where a party's configuration is written.
func ConfigFile(m *crypto.Manifest, p crypto.PartyFiles) string {
	return filepath.Join(m.Dir, p.ID+".yaml")
}

// WriteGenesis signs, with the administrator's key (not the CA key), the
// commands that start the ledger (every party with its key, each
// student's registration, and, when teachers is not 0, each founding
// hospital's ensemble: teachers on classes) and writes them next to the
// manifest. The first auditor applies them. The genesis bounds every cap
// by ledger.DefaultEpsilonBound and ledger.DefaultDeltaBound.
func WriteGenesis(m *crypto.Manifest, teachers, classes int) error {
	return WriteBoundedGenesis(m, teachers, classes, ledger.DefaultEpsilonBound, ledger.DefaultDeltaBound, 0)
}

// WriteBoundedGenesis is WriteGenesis with the federation's cap bounds
// and student share (BoundedGenesisCommands): the ledger refuses a
// hospital's cap above epsilonBound or deltaBound, and a student's batch
// that would take its ε of a hospital past share of the hospital's cap.
func WriteBoundedGenesis(m *crypto.Manifest, teachers, classes int, epsilonBound, deltaBound, share float64) error {
	key, err := m.AdminSigningKey()
	if err != nil {
		return err
	}
	now := time.Now()
	cmds, err := BoundedGenesisCommands(m, key, "nzc.federation/"+m.CAFingerprint[:8], now, epsilonBound, deltaBound, share)
	if err != nil {
		return err
	}
	if teachers == 0 {
		return WriteGenesisFile(filepath.Join(m.Dir, GenesisFile), cmds)
	}
	var hospitals []string
	for _, h := range m.ByRole(crypto.RoleHospital) {
		hospitals = append(hospitals, h.ID)
	}
	ens, err := EnsembleCommands(hospitals, teachers, classes, key, now)
	if err != nil {
		return err
	}
	return WriteGenesisFile(filepath.Join(m.Dir, GenesisFile), append(cmds, ens...))
}

// WriteRegistration signs, with the administrator's key, the ledger
// command that adds a hospital provisioned after the genesis, and writes it
// in the hospital's directory. In a federation whose genesis registers the
// hospitals' ensembles, the file is a JSON list of that command and the
// registration of the new hospital's ensemble of teachers (0: the founding
// hospitals' size). The hospital relays them through the aggregator when it
// starts.
func WriteRegistration(m *crypto.Manifest, p crypto.PartyFiles, teachers int) (string, error) {
	key, err := m.AdminSigningKey()
	if err != nil {
		return "", fmt.Errorf("signing %s's ledger registration: %w", p.ID, err)
	}
	now := time.Now()
	out, err := RegisterHospital(m, p, key, now)
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
		e, err := EnsembleCommands([]string{p.ID}, teachers, int(ens[0].Classes), key, now)
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

// validator is a party's configuration (config.Teacher, config.Aggregator,
// config.Student, config.Auditor).
type validator interface{ Validate() error }

// ValidateConfigs checks every configuration of cfgs (keyed by party id), as
// PartyConfigs returns them.
func ValidateConfigs(cfgs map[string]any) error {
	for id, c := range cfgs {
		if err := c.(validator).Validate(); err != nil {
			return fmt.Errorf("configuration of %s: %w", id, err)
		}
	}
	return nil
}

// PartyConfigs returns the configuration of every party of a federation,
// keyed by party id, with the addresses of topo: loopback for the parties
// it gives no host.
func PartyConfigs(m *crypto.Manifest, topo Topology) (map[string]any, error) {
	pt := Ports{Base: topo.BasePort}
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
		_, intake := topo.service(a.ID, pt.Intake(i), topo.Parties[a.ID].Listen)
		_, raft := topo.service(a.ID, pt.Raft(i), topo.Parties[a.ID].Raft)
		intakes = append(intakes, intake)
		peers = append(peers, a.ID+"="+raft)
	}
	aggBind, aggDial := topo.service(string(crypto.RoleAggregator), pt.Aggregator(), topo.Parties[string(crypto.RoleAggregator)].Listen)
	auditorKeys, err := compliance.AuditorKeys(m)
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
	founders, err := genesisHospitals(genesis)
	if err != nil {
		return nil, err
	}
	// A student holding the administrator's key lists no hospital when
	// every hospital proves its recipient with a registration: the genesis
	// for a founding one, its own for one admitted later.
	var recipients []string
	proven := m.AdminVerifyingKey != ""
	for _, h := range m.ByRole(crypto.RoleHospital) {
		recipients = append(recipients, h.AgeRecipient)
		if !founders[h.ID] && !fileExists(m.Path(filepath.Join(h.ID, RegistrationFile))) {
			proven = false
		}
	}
	if proven {
		recipients = nil
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
			c.ID, c.Aggregator, c.TLS = p.ID, aggDial, tlsOf(p)
			c.Auditors = intakes
			c.AgeIdentity, c.SigningKey = abs(p.AgeIdentity), abs(p.SigningKey)
			c.AuditorKeys = auditorKeys
			c.Models, c.State = filepath.Join(m.Dir, p.ID, "models"), filepath.Join(m.Dir, p.ID, "state")
			if founders[p.ID] {
				c.Genesis = filepath.Join(m.Dir, GenesisFile)
			}
			if ownKeys(p) {
				c.TLS = config.TLS{CA: BundleCACert, Cert: crypto.PartyCertFile, Key: crypto.PartyKeyFile}
				c.AgeIdentity, c.SigningKey, c.Models, c.State = crypto.AgeIdentityFile, crypto.SigningKeyFile, "models", "state"
			}
			c.Ops.Listen = loopback(pt.Ops(k), topo.Parties[p.ID].Ops)
			out[p.ID] = c
		case crypto.RoleAggregator:
			c := config.DefaultAggregator()
			c.Listen, c.Auditors, c.TLS = aggBind, intakes, tlsOf(p)
			c.AuditorKeys = auditorKeys
			c.Hospitals = len(m.ByRole(crypto.RoleHospital))
			if len(ensembles) > 0 {
				c.Teachers, c.Classes = int(ensembles[0].Teachers), int(ensembles[0].Classes)
			}
			// A majority of the hospitals must vote on every batch: one
			// hospital alone never decides a label.
			c.Quorum = c.Hospitals/2 + 1
			// The mechanism's parameters measured in votes are sized for
			// the ensemble of every hospital voting (the presets are set
			// for mechanism.ReferenceTeachers).
			c.Mechanism = SizedMechanism(c.Mechanism, c.Hospitals*c.Teachers, c.Classes)
			c.AgeIdentity, c.SigningKey = abs(p.AgeIdentity), abs(p.SigningKey)
			c.Outbox = filepath.Join(m.Dir, p.ID, "outbox")
			c.Ops.Listen = loopback(pt.Ops(k), topo.Parties[p.ID].Ops)
			out[p.ID] = c
		case crypto.RoleStudent:
			c := config.DefaultStudent()
			c.ID, c.Aggregator, c.TLS, c.AgeIdentity = p.ID, aggDial, tlsOf(p), abs(p.AgeIdentity)
			c.Hospitals, c.AuditorKeys = recipients, auditorKeys
			if m.AdminVerifyingKey != "" {
				c.AdminKey = abs(m.AdminVerifyingKey)
			}
			c.State = filepath.Join(m.Dir, p.ID, "state")
			out[p.ID] = c
		case crypto.RoleAuditor:
			i := slices.IndexFunc(auditors, func(a crypto.PartyFiles) bool { return a.ID == p.ID })
			c := config.DefaultAuditor()
			c.ID, c.TLS, c.SigningKey = p.ID, tlsOf(p), abs(p.SigningKey)
			c.DataDir = filepath.Join(m.Dir, p.ID, "data")
			place := topo.Parties[p.ID]
			var raftDial string
			c.Raft, raftDial = topo.service(p.ID, pt.Raft(i), place.Raft)
			if c.Raft != raftDial {
				// Raft binds every interface: its peers dial the host.
				c.Advertise = raftDial
			}
			c.Listen, _ = topo.service(p.ID, pt.Intake(i), place.Listen)
			c.API, _ = topo.service(p.ID, pt.API(i), place.API)
			c.Dashboard = loopback(pt.Dashboard(i), place.Dashboard)
			c.Bootstrap, c.Peers = i == 0, peers
			if i == 0 {
				c.Genesis = filepath.Join(m.Dir, GenesisFile)
			}
			c.GenesisHash = hex.EncodeToString(genesisHash[:])
			c.Ops.Listen = loopback(pt.Ops(k), topo.Parties[p.ID].Ops)
			out[p.ID] = c
		}
	}
	if err := ValidateConfigs(out); err != nil {
		return nil, err
	}
	return out, nil
}

// genesisHospitals returns the hospitals the genesis (the first of cmds)
// registers, when it is small enough to travel as their registration
// (protocol.MaxRegistration); none otherwise.
func genesisHospitals(cmds [][]byte) (map[string]bool, error) {
	out := map[string]bool{}
	c, err := ledger.DecodeCommand(cmds[0])
	if err != nil {
		return nil, fmt.Errorf("the genesis file's first command: %w; make it again with nzc init", err)
	}
	g, ok := c.Body.(*ledger.Genesis)
	if !ok || len(cmds[0]) > protocol.MaxRegistration {
		return out, nil
	}
	for _, p := range g.Parties {
		if p.Role == ledger.RoleHospital {
			out[p.ID] = true
		}
	}
	return out, nil
}

// SizedMechanism returns p, set for mechanism.ReferenceTeachers, sized for
// an ensemble of teachers voting on classes (mechanism.Params.ForEnsemble),
// as a configuration holds it: without the ensemble's size, which the
// aggregator learns per batch.
func SizedMechanism(p mechanism.Params, teachers, classes int) mechanism.Params {
	if teachers < 1 {
		return p
	}
	p = p.ForEnsemble(teachers, classes)
	p.Teachers, p.Classes = 0, 0
	// Four significant digits, as reports spell them.
	for _, x := range []*float64{&p.Sigma, &p.Threshold, &p.Sigma1, &p.Sigma2} {
		*x, _ = strconv.ParseFloat(strconv.FormatFloat(*x, 'g', 4, 64), 64)
	}
	return p
}

// WriteConfigs writes one YAML file per party of cfgs (all of them, or only
// the party only); existing files are kept unless force.
func WriteConfigs(m *crypto.Manifest, cfgs map[string]any, only string, force bool) ([]string, error) {
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
		path := ConfigFile(m, p)
		if err := crypto.WriteFile(path, append([]byte(header), data...), 0o644, force); err != nil {
			return written, err
		}
		written = append(written, path)
	}
	return written, nil
}
