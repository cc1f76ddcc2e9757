package cputime

import (
	"runtime"
	"testing"
)

// TestProcessGrows burns CPU and checks the reading grows, never shrinks.
func TestProcessGrows(t *testing.T) {
	before, ok := Process()
	if !ok {
		if runtime.GOOS != "windows" && runtime.GOOS != "plan9" && runtime.GOOS != "js" {
			t.Fatalf("no CPU time on %s", runtime.GOOS)
		}
		t.Skip("no CPU time on this system")
	}
	x := 0.0
	for i := range 20_000_000 {
		x += float64(i % 7)
	}
	after, _ := Process()
	if after <= before || x == 0 {
		t.Fatalf("CPU time went from %v to %v over a busy loop", before, after)
	}
	if s := Seconds(); s < after.Seconds() {
		t.Fatalf("Seconds() = %v, below the earlier reading %v", s, after.Seconds())
	}
}
