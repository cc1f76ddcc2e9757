package layers

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const testTable = `
module m.example/x
layer cmd
layer party
layer ledger
layer crypto mechanism
layer internal
only github.com/quic-go/quic-go protocol/quicnet  # a folder not on a layer: not needed here
only github.com/spf13/cobra cmd/...
pure mechanism/...
pure ledger/... golang.org/x/mod/sumdb/tlog
impure net net/... log/slog
never party/raftnode ledger
`

func pkg(path string, imports ...string) Package {
	return Package{Path: path, Imports: imports}
}

func TestCheck(t *testing.T) {
	table, err := Parse(strings.NewReader(testTable))
	if err != nil {
		t.Fatal(err)
	}
	const m = "m.example/x/"
	// clean is a graph that keeps every rule; each case adds to it.
	clean := []Package{
		pkg(m+"cmd/nzc", m+"party/teacher", m+"internal/backoff", "github.com/spf13/cobra", "fmt"),
		pkg(m+"party/teacher", m+"ledger", m+"crypto", "net"),
		pkg(m+"party/raftnode", m+"internal/backoff"),
		pkg(m+"ledger", m+"mechanism", "golang.org/x/mod/sumdb/tlog", "fmt"),
		pkg(m+"mechanism", "math"),
		pkg(m+"crypto", m+"internal/backoff"),
		pkg(m+"internal/backoff", "time"),
		pkg("fmt", "io"), pkg("io"), pkg("math"), pkg("time"), pkg("net", "io"),
		pkg("golang.org/x/mod/sumdb/tlog", "fmt"),
		pkg("github.com/spf13/cobra", "fmt"),
	}
	tests := []struct {
		name string
		add  []Package // added to the clean graph (a path already there gets these imports too)
		want []string  // the violations, as Violation.String
	}{
		{"clean", nil, nil},
		{"an upward import", []Package{pkg(m+"ledger", m+"party/teacher")},
			[]string{"layer: ledger -> party/teacher: runs up from layer 3 (ledger) to layer 2 (party): move the code down, or what it needs up",
				// The teacher imports net: the ledger now depends on it.
				"pure: ledger -> net: ledger is pure: it must not depend on net, directly or not"}},
		{"an upward import from a test", []Package{{Path: m + "internal/backoff", TestImports: []string{m + "cmd/nzc"}}},
			[]string{"layer: internal/backoff -> cmd/nzc: runs up from layer 5 (internal) to layer 1 (cmd): move the code down, or what it needs up"}},
		{"a sideways import", []Package{pkg(m+"crypto", m+"mechanism")},
			[]string{"layer: crypto -> mechanism: crypto and mechanism are side by side on layer 4: neither may import the other"}},
		{"a folder on no layer", []Package{pkg(m+"tools/gen", m+"ledger"), pkg(m+"party/teacher", m+"tools/gen")},
			[]string{
				"layer: party/teacher -> tools/gen: folder \"tools\" is on no layer of the table: add it to the layer it belongs to",
				"layer: tools/gen -> : folder \"tools\" is on no layer of the table: add it to the layer it belongs to",
			}},
		{"a second importer of a library", []Package{pkg(m+"party/teacher", "github.com/quic-go/quic-go/http3")},
			[]string{"only: party/teacher -> github.com/quic-go/quic-go/http3: only protocol/quicnet may import github.com/quic-go/quic-go"}},
		{"a library's importer in a test", []Package{{Path: m + "party/teacher", TestImports: []string{"github.com/spf13/cobra"}}},
			[]string{"only: party/teacher -> github.com/spf13/cobra: only cmd/... may import github.com/spf13/cobra"}},
		{"a library of a similar name is another library", []Package{pkg(m+"party/teacher", "github.com/spf13/cobra-extra")}, nil},
		{"a pure package on the network through a helper", []Package{pkg(m+"mechanism", m+"mechanism/noise"), pkg(m+"mechanism/noise", "log/slog"), pkg("log/slog", "io")},
			[]string{"pure: ledger -> log/slog: ledger is pure: it must not depend on log/slog, directly or not", // through mechanism
				"pure: mechanism -> log/slog: mechanism is pure: it must not depend on log/slog, directly or not",
				"pure: mechanism/noise -> log/slog: mechanism/noise is pure: it must not depend on log/slog, directly or not"}},
		{"a pure package with an outside library", []Package{pkg(m+"ledger", "golang.org/x/mod/sumdb/note")},
			[]string{"pure: ledger -> golang.org/x/mod/sumdb/note: ledger is pure: of the outside packages it may depend only on golang.org/x/mod/sumdb/tlog"}},
		{"a pure package's tests are not its dependencies", []Package{{Path: m + "mechanism", TestImports: []string{"net"}}}, nil},
		{"a dependency that must never be", []Package{pkg(m+"party/raftnode", m+"crypto"), pkg(m+"crypto", m+"ledger")},
			[]string{
				"layer: crypto -> ledger: runs up from layer 4 (crypto) to layer 3 (ledger): move the code down, or what it needs up",
				"never: party/raftnode -> ledger: party/raftnode must not depend on ledger, directly or not",
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			graph := Merge(clean, tt.add)
			var got []string
			for _, v := range table.Check(graph) {
				got = append(got, v.String())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("violations:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct{ name, table, want string }{
		{"empty", "", `no "module PATH" rule`},
		{"no layer", "module m", `no "layer" rule`},
		{"module not first", "layer a\nmodule m", `line 1: the first rule must be "module PATH"`},
		{"two modules", "module m\nmodule n", `line 2: want one "module PATH" rule, first`},
		{"a folder twice", "module m\nlayer a b\nlayer c a", `line 3: folder "a" is on two layers`},
		{"a layer of subfolders", "module m\nlayer a/b", `line 2: a layer holds top-level folders, not "a/b"`},
		{"an empty layer", "module m\nlayer # none", `line 2: a layer names at least one folder`},
		{"only without importer", "module m\nlayer a\nonly lib.org/x", `line 3: want "only LIBRARY PATTERN"`},
		{"a library twice", "module m\nlayer a\nonly lib.org/x a\nonly lib.org/x b", `line 4: library "lib.org/x" has two "only" rules`},
		{"a bad pattern", "module m\nlayer a\npure a/.../b", `line 3: "a/.../b" is not a path or a path followed by /...`},
		{"an unknown rule", "module m\nlayer a\nallow a b", `line 3: unknown rule "allow"`},
		{"never without package", "module m\nlayer a\nnever a", `line 3: want "never PATTERN PACKAGE..."`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tt.table))
			if !errors.Is(err, ErrTable) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Parse: %v, want ErrTable and %q", err, tt.want)
			}
		})
	}
}

// TestLoadSeesAnUpwardImport builds a module with one upward import and
// holds it against a table through go list, as TestHouse does this module:
// the check fails on it, and passes once the import is gone.
func TestLoadSeesAnUpwardImport(t *testing.T) {
	dir := t.TempDir()
	write := func(path, content string) {
		t.Helper()
		path = filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module m.example/up\n\ngo 1.26\n")
	write("top/top.go", "package top\n\nimport _ \"m.example/up/low\"\n")
	write("low/low.go", "package low\n")
	write("low/low_test.go", "package low_test\n\nimport _ \"m.example/up/top\"\n")
	table, err := Parse(strings.NewReader("module m.example/up\nlayer top\nlayer low\n"))
	if err != nil {
		t.Fatal(err)
	}
	graph, err := Load(t.Context(), dir, nil, "./...")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"layer: low -> top: runs up from layer 2 (low) to layer 1 (top): move the code down, or what it needs up"}
	var got []string
	for _, v := range table.Check(graph) {
		got = append(got, v.String())
	}
	if !slices.Equal(got, want) {
		t.Fatalf("violations:\n got %q\nwant %q", got, want)
	}

	write("low/low_test.go", "package low_test\n")
	if graph, err = Load(t.Context(), dir, nil, "./..."); err != nil {
		t.Fatal(err)
	}
	if vs := table.Check(graph); len(vs) != 0 {
		t.Fatalf("violations without the upward import: %v", vs)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(testTable)
	f.Add("module m\nlayer a b\nlayer c\nnever a/... c\n")
	f.Fuzz(func(t *testing.T, table string) {
		tb, err := Parse(strings.NewReader(table))
		if err != nil {
			if !errors.Is(err, ErrTable) {
				t.Fatalf("Parse: %v, not ErrTable", err)
			}
			return
		}
		// Whatever the table, a check runs to the end.
		tb.Check([]Package{pkg(tb.Module+"/a/b", tb.Module+"/c", "net"), pkg(tb.Module+"/c", "lib.org/x"), pkg("net")})
	})
}
