package golden

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.golden")
	if err := os.WriteFile(path, []byte("pinned"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := Check(t, path, []byte("pinned")); string(got) != "pinned" {
		t.Fatalf("Check returned %q, want the file's content", got)
	}
}
