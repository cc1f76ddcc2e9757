//go:build nzctest

package pause

import (
	"context"
	"log/slog"
	"os"
	"sync"
)

// Enabled says whether this build has the test hook.
const Enabled = true

// Hook returns the pause function for a party's Config.Pause, or nil when
// Env is unset. The first time the party reaches the named point it logs
// "paused for a fault test" and waits until ctx ends.
func Hook(log *slog.Logger) func(ctx context.Context, point string) {
	at := os.Getenv(Env)
	if at == "" {
		return nil
	}
	var once sync.Once
	return func(ctx context.Context, point string) {
		if point != at {
			return
		}
		first := false
		once.Do(func() { first = true })
		if !first {
			return
		}
		log.Warn("paused for a fault test", "point", point, "env", Env)
		<-ctx.Done()
	}
}
