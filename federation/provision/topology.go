package provision

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/nzcfed/nzc/crypto"
)

// TopologyFile is where `nzc init` records where each party runs, in the
// federation directory and in every kit. `nzc init kit`, `add-hospital` and
// `sign` write their configurations from it, and `nzc ledger … --federation`
// finds the auditors' compliance APIs in it.
const TopologyFile = "topology.yaml"

// ErrTopology reports a topology that cannot describe the federation.
var ErrTopology = errors.New("bad topology")

// Topology is where the parties of a federation run: a base port for the
// ports nobody chose (see Ports) and, for each party that runs on a host of
// its own, that host and the ports that differ from the base port's.
//
// A party without a host runs on this machine: its services bind loopback
// and the others reach it there. A party with a host binds its services on
// every interface (0.0.0.0) and the others dial HOST:PORT; an auditor's raft
// advertises HOST:PORT to its peers. The dashboard and the operations
// endpoint stay on loopback everywhere: neither authenticates its clients.
type Topology struct {
	BasePort int              `yaml:"base_port"`
	Parties  map[string]Place `yaml:"parties,omitempty"`
}

// Place is where one party runs. Ports are named after the configuration
// keys they set: listen (the aggregator's QUIC port, an auditor's charge
// intake), raft, api and dashboard (auditors), ops (every service); 0
// keeps the base port's.
type Place struct {
	Host      string `yaml:"host"`
	Listen    int    `yaml:"listen,omitempty"`
	Raft      int    `yaml:"raft,omitempty"`
	API       int    `yaml:"api,omitempty"`
	Dashboard int    `yaml:"dashboard,omitempty"`
	Ops       int    `yaml:"ops,omitempty"`
}

// TopologyExample is a topology file of three hosts, shown by `nzc init
// --help` and checked by the tests.
const TopologyExample = `base_port: 7400
parties:
  aggregator: {host: agg.example.org}
  auditor-1: {host: 10.0.0.11}
  auditor-2: {host: 10.0.0.12}
  auditor-3: {host: audit.example.net, api: 8443}
`

// ParseTopology reads a topology file's contents; unknown keys are errors.
func ParseTopology(data []byte) (Topology, error) {
	var t Topology
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&t); err != nil {
		return Topology{}, fmt.Errorf("%w: %v (see the example in nzc init --help)", ErrTopology, err)
	}
	return t, t.check()
}

// ReadTopology reads the topology file of the federation in dir. A
// federation provisioned before topologies were recorded has none: it runs
// on loopback from base, as its configurations say.
func ReadTopology(dir string, base int) (Topology, error) {
	data, err := os.ReadFile(filepath.Join(dir, TopologyFile))
	if errors.Is(err, os.ErrNotExist) {
		return Topology{BasePort: base}, nil
	}
	if err != nil {
		return Topology{}, err
	}
	t, err := ParseTopology(data)
	if err != nil {
		return Topology{}, fmt.Errorf("%s: %w", filepath.Join(dir, TopologyFile), err)
	}
	return t, nil
}

// WriteTopology records t in the federation directory dir.
func WriteTopology(dir string, t Topology, force bool) error {
	data, err := yaml.Marshal(t)
	if err != nil {
		return err
	}
	header := "# Where each party of the federation runs, written by `nzc init`.\n# nzc init kit, add-hospital and sign write configurations from it.\n"
	return crypto.WriteFile(filepath.Join(dir, TopologyFile), append([]byte(header), data...), crypto.PublicFileMode, force)
}

// SetHost gives party id the host, keeping its ports; a different host
// already given is an error.
func (t *Topology) SetHost(id, host string) error {
	if t.Parties == nil {
		t.Parties = map[string]Place{}
	}
	p := t.Parties[id]
	if p.Host != "" && p.Host != host {
		return fmt.Errorf("%w: %s is placed on both %s and %s; give one host per party", ErrTopology, id, p.Host, host)
	}
	p.Host = host
	t.Parties[id] = p
	return t.check()
}

// CheckParties reports a party of t that the federation's ids do not name.
func (t Topology) CheckParties(ids []string) error {
	for id := range t.Parties {
		if !slices.Contains(ids, id) {
			return fmt.Errorf("%w: the federation has no party %q (ids are role-N, aggregator, compliance)", ErrTopology, id)
		}
	}
	return nil
}

func (t Topology) check() error {
	if t.BasePort < 1 || t.BasePort > 60000 {
		return fmt.Errorf("%w: base_port %d leaves no room for the federation's ports; use a value between 1024 and 60000", ErrTopology, t.BasePort)
	}
	var errs []error
	for id, p := range t.Parties {
		if p.Host == "" {
			errs = append(errs, fmt.Errorf("%w: %s has no host: give its DNS name or IP address", ErrTopology, id))
		} else if strings.ContainsAny(p.Host, " :/[]") && net.ParseIP(p.Host) == nil {
			errs = append(errs, fmt.Errorf("%w: %s's host %q is neither a DNS name nor an IP address (give the port apart, as listen, raft, api, dashboard or ops)", ErrTopology, id, p.Host))
		}
		for _, port := range []int{p.Listen, p.Raft, p.API, p.Dashboard, p.Ops} {
			if port < 0 || port > 65535 {
				errs = append(errs, fmt.Errorf("%w: %s's port %d is not between 1 and 65535", ErrTopology, id, port))
			}
		}
	}
	return errors.Join(errs...)
}

// local tells whether party id runs on this machine (no host, or a
// loopback one).
func (t Topology) local(id string) bool {
	h := t.Parties[id].Host
	if h == "" || h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// service is the address party id binds a service on and the one the
// others dial: port is the base port's, unless the party's place sets
// another.
func (t Topology) service(id string, port, placed int) (bind, dial string) {
	if placed != 0 {
		port = placed
	}
	if t.local(id) {
		h := t.Parties[id].Host
		if h == "" {
			h = "127.0.0.1"
		}
		a := net.JoinHostPort(h, strconv.Itoa(port))
		return a, a
	}
	return net.JoinHostPort("0.0.0.0", strconv.Itoa(port)), net.JoinHostPort(t.Parties[id].Host, strconv.Itoa(port))
}

// loopback is the address of a service that stays on the party's own
// machine (dashboard, operations endpoint).
func loopback(port, placed int) string {
	if placed != 0 {
		port = placed
	}
	return Loopback(port)
}

// AuditorAPIs returns, for each auditor of m, the address of its
// compliance API the others dial.
func (t Topology) AuditorAPIs(m *crypto.Manifest) map[string]string {
	pt := Ports{Base: t.BasePort}
	out := map[string]string{}
	for i, a := range m.ByRole(crypto.RoleAuditor) {
		_, out[a.ID] = t.service(a.ID, pt.API(i), t.Parties[a.ID].API)
	}
	return out
}
