package ledger

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestPureImports keeps the package pure: no clock, no randomness, no
// network, no files, no logger, and outside the standard library only the
// mechanism accounting and the sumdb transparency-log primitives.
func TestPureImports(t *testing.T) {
	allowed := map[string]bool{
		"github.com/nzcfed/nzc/mechanism": true,
		"golang.org/x/mod/sumdb/tlog":     true,
		"golang.org/x/mod/sumdb/note":     true,
	}
	forbidden := []string{"time", "net", "os", "log", "math/rand", "crypto/rand", "syscall", "unsafe", "runtime", "io/fs", "plugin"}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if strings.Contains(strings.Split(path, "/")[0], ".") {
				if !allowed[path] {
					t.Errorf("%s imports %s: the ledger may import only the standard library, mechanism and sumdb/tlog, sumdb/note", name, path)
				}
				continue
			}
			for _, bad := range forbidden {
				if path == bad || strings.HasPrefix(path, bad+"/") {
					t.Errorf("%s imports %s: the ledger takes time, randomness and I/O from its callers", name, path)
				}
			}
		}
	}
}
