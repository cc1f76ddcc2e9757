package provision

import (
	"testing"
)

func TestSameFingerprint(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		{"3A:9F:00", "3a9f00", true},
		{" 3A 9F 00 ", "3A:9F:00", true},
		{"3A:9F:00", "3A:9F:01", false},
		{"3A:9F", "3A:9F:00", false},
	} {
		if got := sameFingerprint(tc.a, tc.b); got != tc.same {
			t.Errorf("sameFingerprint(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.same)
		}
	}
}

// Every port of a federation of 3 auditors and 20 parties is its own.
func TestPortsDoNotOverlap(t *testing.T) {
	p := Ports{Base: 7400}
	seen := map[int]string{p.Aggregator(): "aggregator"}
	add := func(port int, what string) {
		if other, ok := seen[port]; ok {
			t.Fatalf("port %d is both %s and %s", port, other, what)
		}
		seen[port] = what
	}
	for i := range 3 {
		add(p.Raft(i), "raft")
		add(p.Intake(i), "intake")
		add(p.API(i), "api")
		add(p.Dashboard(i), "dashboard")
	}
	for k := 1; k <= 20; k++ {
		add(p.Ops(k), "ops")
	}
}

// The example nzc init --help shows is a topology that parses.
func TestTopologyExample(t *testing.T) {
	topo, err := ParseTopology([]byte(TopologyExample))
	if err != nil {
		t.Fatal(err)
	}
	if topo.BasePort != 7400 || topo.Parties["auditor-3"].API != 8443 || len(topo.Parties) != 4 {
		t.Fatalf("the example reads as %+v", topo)
	}
}
