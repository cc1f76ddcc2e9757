package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestWrite(t *testing.T) {
	for _, c := range []struct {
		name     string
		existing string // "" for none
		replace  bool
		perm     fs.FileMode
		want     string
		exists   bool // the error must match fs.ErrExist
	}{
		{"new file", "", false, 0o600, "new", false},
		{"new file, replace", "", true, 0o644, "new", false},
		{"replace existing", "old", true, 0o600, "new", false},
		{"keep existing", "old", false, 0o600, "old", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f")
			if c.existing != "" {
				if err := os.WriteFile(path, []byte(c.existing), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			err := Write(path, []byte("new"), c.perm, c.replace)
			if c.exists != errors.Is(err, fs.ErrExist) || (!c.exists && err != nil) {
				t.Fatalf("Write: %v (want fs.ErrExist: %v)", err, c.exists)
			}
			b, err := os.ReadFile(path)
			if err != nil || string(b) != c.want {
				t.Fatalf("after Write: %q %v, want %q", b, err, c.want)
			}
			if st, _ := os.Stat(path); c.existing == "" && st.Mode().Perm() != c.perm {
				t.Fatalf("mode %v, want %v", st.Mode().Perm(), c.perm)
			}
			if es, _ := os.ReadDir(dir); len(es) != 1 {
				t.Fatalf("the directory holds %d files, want only the written one (no temporary left)", len(es))
			}
		})
	}
}

func TestWriteMissingDirectory(t *testing.T) {
	if err := Write(filepath.Join(t.TempDir(), "no", "f"), nil, 0o600, true); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("into a missing directory: %v, want fs.ErrNotExist", err)
	}
}
