package provision

import (
	"reflect"
	"testing"

	"gopkg.in/yaml.v3"
)

// A topology file either is refused or reads back as what it wrote.
func FuzzParseTopology(f *testing.F) {
	f.Add([]byte(TopologyExample))
	f.Add([]byte("base_port: 7400\n"))
	f.Add([]byte("base_port: 7400\nparties:\n  auditor-1: {host: \"fe80::1\", raft: 9000}\n"))
	f.Add([]byte("parties: 3\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		topo, err := ParseTopology(data)
		if err != nil {
			return
		}
		out, err := yaml.Marshal(topo)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseTopology(out)
		if err != nil {
			t.Fatalf("a parsed topology does not read back: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(normal(topo), normal(again)) {
			t.Fatalf("read back as %+v, want %+v", again, topo)
		}
	})
}

// normal makes an empty party map nil, as YAML writes it.
func normal(t Topology) Topology {
	if len(t.Parties) == 0 {
		t.Parties = nil
	}
	return t
}
