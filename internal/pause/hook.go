//go:build nzctest

package pause

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
)

// Enabled says whether this build has the test hook.
const Enabled = true

// Hook returns the pause function for a party's Config.Pause, or nil when
// Env is unset. The first time the party reaches the named point it logs
// "paused for a fault test" and waits until ctx ends; with the point
// written "every:point" (Every) it waits there every time, as a party that
// stalls each request to its deadline.
func Hook(log *slog.Logger) func(ctx context.Context, point string) {
	at := os.Getenv(Env)
	if at == "" {
		return nil
	}
	at, every := strings.CutPrefix(at, everyPrefix)
	var once sync.Once
	return func(ctx context.Context, point string) {
		if point != at {
			return
		}
		first := false
		once.Do(func() { first = true })
		if !first && !every {
			return
		}
		log.Warn("paused for a fault test", "point", point, "env", Env, "every", every)
		<-ctx.Done()
	}
}
