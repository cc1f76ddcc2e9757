package layers

import (
	"os"
	"testing"
)

// houseTags are the build tags under which files of the module add
// imports: the graph is the union of the listings with and without them.
var houseTags = []string{"onnx", "faults", "soak", "nzctest", "race", "purego"}

// TestHouse holds this module, tests and tagged files included, against
// layers.txt. scripts/check-deps.sh runs it.
func TestHouse(t *testing.T) {
	table := readTable(t, "layers.txt")
	plain, err := Load(t.Context(), "../..", nil, "./...")
	if err != nil {
		t.Fatal(err)
	}
	tagged, err := Load(t.Context(), "../..", houseTags, "./...")
	if err != nil {
		t.Fatal(err)
	}
	graph := Merge(plain, tagged)
	if len(graph) < 100 {
		t.Fatalf("go list found %d packages: not the module", len(graph))
	}
	for _, v := range table.Check(graph) {
		t.Error(v)
	}
	if !t.Failed() {
		t.Logf("ok: %d packages; no import runs up or across a layer; every outside library has its one importer; the pure packages are pure", len(graph))
	}
}

func readTable(t *testing.T, path string) *Table {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	table, err := Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	return table
}
