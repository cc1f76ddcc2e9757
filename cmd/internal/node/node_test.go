package node

import (
	"log/slog"
	"runtime/debug"
	"testing"

	"github.com/nzcfed/nzc/federation/config"
)

func TestApplyMemoryLimit(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	log := slog.New(slog.DiscardHandler)
	tests := []struct {
		limit string
		want  int64 // the runtime's limit after
		ok    bool
	}{
		{"768MiB", 768 << 20, true},
		{"0", 768 << 20, true}, // none: the runtime's limit is left as it is
		{"2GiB", 2 << 30, true},
		{"much", 2 << 30, false},
	}
	for _, tt := range tests {
		err := ApplyMemoryLimit(config.Ops{MemoryLimit: tt.limit}, log)
		if got := debug.SetMemoryLimit(-1); (err == nil) != tt.ok || got != tt.want {
			t.Errorf("%q: runtime limit %d (%v), want %d, ok=%v", tt.limit, got, err, tt.want, tt.ok)
		}
	}
}
