// Package layers checks a module's import graph against its layer table:
// the top-level folders in layers from top to bottom, the one place each
// outside library may be imported from, the pure packages and what they
// may depend on, and the packages that must never depend on another.
//
// The table of this module is layers.txt beside this file; the test
// TestHouse holds the module against it, and scripts/check-deps.sh runs
// that test.
package layers

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"
)

// ErrTable is wrapped by every error of Parse: the table does not say
// what it means.
var ErrTable = errors.New("layers: bad table")

// A Table is a parsed layer table. See Parse for its grammar.
type Table struct {
	// Module is the module path; the packages of the module are named
	// by their path below it everywhere else in the table.
	Module string
	// Layers are sets of top-level folders, from the top down.
	Layers [][]string
	// Only maps an outside library (a path prefix) to the pattern of
	// the packages of the module that may import it.
	Only map[string]string
	// Pure maps a pattern of packages of the module to the patterns of
	// the outside packages they may depend on.
	Pure map[string][]string
	// Impure are patterns of standard-library packages no pure package
	// may depend on.
	Impure []string
	// Never maps a pattern of packages of the module to the packages of
	// the module they must not depend on, directly or not.
	Never map[string][]string
}

// Parse reads a layer table: one rule a line, '#' to the end of a line
// a comment.
//
//	module PATH                   the module's path (first, once)
//	layer FOLDER...               one layer: the next lower one is the next such line
//	only LIBRARY PATTERN          LIBRARY and every package below it: imported only by PATTERN
//	pure PATTERN [OUTSIDE...]     PATTERN depends only on the module, the standard library
//	                              less the impure packages, and the OUTSIDE patterns
//	impure STD...                 standard-library patterns no pure package depends on
//	never PATTERN PACKAGE...      PATTERN does not depend on PACKAGE, directly or not
//
// A pattern is a path, or a path followed by "/..." for it and every
// package below it. The packages of the module are named by their path
// below the module path.
func Parse(r io.Reader) (*Table, error) {
	t := &Table{Only: map[string]string{}, Pure: map[string][]string{}, Never: map[string][]string{}}
	folders := map[string]bool{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%w: line %d: %s", ErrTable, n, fmt.Sprintf(format, args...))
		}
		if t.Module == "" && f[0] != "module" {
			return nil, bad("the first rule must be \"module PATH\"")
		}
		for _, p := range f[1:] {
			if strings.Contains(strings.TrimSuffix(p, "/..."), "...") || strings.HasPrefix(p, "/") || strings.HasSuffix(strings.TrimSuffix(p, "/..."), "/") {
				return nil, bad("%q is not a path or a path followed by /...", p)
			}
		}
		switch f[0] {
		case "module":
			if len(f) != 2 || t.Module != "" {
				return nil, bad("want one \"module PATH\" rule, first")
			}
			t.Module = f[1]
		case "layer":
			if len(f) < 2 {
				return nil, bad("a layer names at least one folder")
			}
			for _, d := range f[1:] {
				if strings.Contains(d, "/") {
					return nil, bad("a layer holds top-level folders, not %q", d)
				}
				if folders[d] {
					return nil, bad("folder %q is on two layers", d)
				}
				folders[d] = true
			}
			t.Layers = append(t.Layers, f[1:])
		case "only":
			if len(f) != 3 {
				return nil, bad("want \"only LIBRARY PATTERN\"")
			}
			if _, dup := t.Only[f[1]]; dup {
				return nil, bad("library %q has two \"only\" rules", f[1])
			}
			t.Only[f[1]] = f[2]
		case "pure":
			if len(f) < 2 {
				return nil, bad("want \"pure PATTERN [OUTSIDE...]\"")
			}
			if _, dup := t.Pure[f[1]]; dup {
				return nil, bad("%q has two \"pure\" rules", f[1])
			}
			t.Pure[f[1]] = f[2:]
		case "impure":
			if len(f) < 2 {
				return nil, bad("want \"impure STD...\"")
			}
			t.Impure = append(t.Impure, f[1:]...)
		case "never":
			if len(f) < 3 {
				return nil, bad("want \"never PATTERN PACKAGE...\"")
			}
			t.Never[f[1]] = append(t.Never[f[1]], f[2:]...)
		default:
			return nil, bad("unknown rule %q (want module, layer, only, pure, impure or never)", f[0])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("layers: reading the table: %w", err)
	}
	if t.Module == "" {
		return nil, fmt.Errorf("%w: no \"module PATH\" rule", ErrTable)
	}
	if len(t.Layers) == 0 {
		return nil, fmt.Errorf("%w: no \"layer\" rule", ErrTable)
	}
	return t, nil
}

// A Package is one package of the graph: its path and what it imports.
// TestImports are the imports of its tests (in the package and in its
// _test package).
type Package struct {
	Path        string
	Imports     []string
	TestImports []string
}

// A Violation is one import or dependency the table forbids.
type Violation struct {
	Rule     string // "layer", "only", "pure" or "never"
	Importer string // the package that imports or depends
	Imported string // what it imports or depends on
	Why      string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s: %s -> %s: %s", v.Rule, v.Importer, v.Imported, v.Why)
}

// match reports whether path is matched by pattern: equal to it, or
// below it when the pattern ends in "/...".
func match(pattern, path string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == prefix || strings.HasPrefix(path, prefix+"/")
	}
	return path == pattern
}

func matchAny(patterns []string, path string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return match(p, path) })
}

// Check holds the graph against the table and returns every violation,
// in a stable order. Packages of the module are named in the graph by
// their full import path; imports of packages the graph does not list
// are checked as edges but not followed.
func (t *Table) Check(graph []Package) []Violation {
	var out []Violation
	local := func(p string) (string, bool) {
		if p == t.Module {
			return ".", true
		}
		rel, ok := strings.CutPrefix(p, t.Module+"/")
		return rel, ok
	}
	layerOf := map[string]int{}
	for i, l := range t.Layers {
		for _, d := range l {
			layerOf[d] = i
		}
	}
	top := func(rel string) string { d, _, _ := strings.Cut(rel, "/"); return d }
	byPath := map[string]*Package{}
	for i := range graph {
		byPath[graph[i].Path] = &graph[i]
	}

	sorted := slices.Clone(graph)
	slices.SortFunc(sorted, func(a, b Package) int { return strings.Compare(a.Path, b.Path) })
	for _, p := range sorted {
		rel, ok := local(p.Path)
		if !ok {
			continue
		}
		from := top(rel)
		li, known := layerOf[from]
		if !known {
			out = append(out, Violation{"layer", rel, "", fmt.Sprintf("folder %q is on no layer of the table: add it to the layer it belongs to", from)})
		}
		imports := slices.Concat(p.Imports, p.TestImports)
		slices.Sort(imports)
		for _, imp := range slices.Compact(imports) {
			if irel, ours := local(imp); ours {
				to := top(irel)
				lj, ok := layerOf[to]
				switch {
				case to == from:
				case !ok:
					out = append(out, Violation{"layer", rel, irel, fmt.Sprintf("folder %q is on no layer of the table: add it to the layer it belongs to", to)})
				case known && lj < li:
					out = append(out, Violation{"layer", rel, irel, fmt.Sprintf("runs up from layer %d (%s) to layer %d (%s): move the code down, or what it needs up", li+1, from, lj+1, to)})
				case known && lj == li:
					out = append(out, Violation{"layer", rel, irel, fmt.Sprintf("%s and %s are side by side on layer %d: neither may import the other", from, to, li+1)})
				}
				continue
			}
			for lib, who := range t.Only {
				if match(lib+"/...", imp) && !match(who, rel) {
					out = append(out, Violation{"only", rel, imp, fmt.Sprintf("only %s may import %s", who, lib)})
				}
			}
		}
	}

	// deps returns every package p depends on through non-test imports.
	deps := func(p string) []string {
		seen := map[string]bool{}
		stack := []string{p}
		for len(stack) > 0 {
			q := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if pk := byPath[q]; pk != nil {
				for _, imp := range pk.Imports {
					if !seen[imp] {
						seen[imp] = true
						stack = append(stack, imp)
					}
				}
			}
		}
		all := make([]string, 0, len(seen))
		for d := range seen {
			all = append(all, d)
		}
		slices.Sort(all)
		return all
	}
	std := func(p string) bool {
		first, _, _ := strings.Cut(p, "/")
		return !strings.Contains(first, ".")
	}
	for _, p := range sorted {
		rel, ok := local(p.Path)
		if !ok {
			continue
		}
		var pureOK []string
		pure := false
		for pattern, allowed := range t.Pure {
			if match(pattern, rel) {
				pure = true
				pureOK = append(pureOK, allowed...)
			}
		}
		slices.Sort(pureOK)
		var never []string
		for pattern, banned := range t.Never {
			if match(pattern, rel) {
				never = append(never, banned...)
			}
		}
		if !pure && len(never) == 0 {
			continue
		}
		for _, d := range deps(p.Path) {
			drel, ours := local(d)
			switch {
			case ours:
				if slices.Contains(never, drel) {
					out = append(out, Violation{"never", rel, drel, fmt.Sprintf("%s must not depend on %s, directly or not", rel, drel)})
				}
			case !pure:
			case std(d):
				if matchAny(t.Impure, d) {
					out = append(out, Violation{"pure", rel, d, fmt.Sprintf("%s is pure: it must not depend on %s, directly or not", rel, d)})
				}
			case !matchAny(pureOK, d):
				out = append(out, Violation{"pure", rel, d, fmt.Sprintf("%s is pure: of the outside packages it may depend only on %s", rel, orNone(pureOK))})
			}
		}
	}
	slices.SortFunc(out, func(a, b Violation) int { return strings.Compare(a.String(), b.String()) })
	return slices.Compact(out)
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// listFormat is one package a line: its path, its imports, and its
// tests' imports, tab-separated.
const listFormat = `{{.ImportPath}}{{"\t"}}{{join .Imports " "}}{{"\t"}}{{join .TestImports " "}} {{join .XTestImports " "}}`

// Load lists the packages matched by patterns in the module at dir,
// with every package they depend on, through go list. With tags it lists
// the files of those build tags too. A package go list finds in error (an
// import cycle, say) is listed with its imports all the same.
func Load(ctx context.Context, dir string, tags []string, patterns ...string) ([]Package, error) {
	args := []string{"list", "-e", "-deps", "-f", listFormat}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.CommandContext(ctx, "go", append(args, patterns...)...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("layers: go list in %s: %w: %s", dir, err, strings.TrimSpace(stderr.String()))
	}
	var graph []Package
	for line := range strings.Lines(string(stdout)) {
		f := strings.Split(strings.TrimRight(line, "\n"), "\t")
		if len(f) != 3 {
			return nil, fmt.Errorf("layers: go list printed %q, not three tab-separated fields", line)
		}
		graph = append(graph, Package{Path: f[0], Imports: strings.Fields(f[1]), TestImports: strings.Fields(f[2])})
	}
	return graph, nil
}

// Merge joins graphs of the same module listed with different build tags:
// one package per path, with the imports of every listing.
func Merge(graphs ...[]Package) []Package {
	byPath := map[string]*Package{}
	var paths []string
	for _, g := range graphs {
		for _, p := range g {
			q := byPath[p.Path]
			if q == nil {
				q = &Package{Path: p.Path}
				byPath[p.Path] = q
				paths = append(paths, p.Path)
			}
			q.Imports = append(q.Imports, p.Imports...)
			q.TestImports = append(q.TestImports, p.TestImports...)
		}
	}
	slices.Sort(paths)
	out := make([]Package, 0, len(paths))
	for _, p := range paths {
		q := byPath[p]
		slices.Sort(q.Imports)
		slices.Sort(q.TestImports)
		q.Imports = slices.Compact(q.Imports)
		q.TestImports = slices.Compact(q.TestImports)
		out = append(out, *q)
	}
	return out
}
