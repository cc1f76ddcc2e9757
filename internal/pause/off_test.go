//go:build !nzctest

package pause

import (
	"log/slog"
	"testing"
)

// A binary built without the nzctest tag never pauses, even with the
// variable set (before, every production binary obeyed it).
func TestNoHookWithoutTheBuildTag(t *testing.T) {
	t.Setenv(Env, "pending-written")
	if Enabled || Hook(slog.New(slog.DiscardHandler)) != nil {
		t.Fatal("the pause hook is active in a build without the nzctest tag")
	}
}
