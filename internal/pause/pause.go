// Package pause stops a party binary, once, at a named point of its work
// (for example pending-written in nzc-aggregator) until it is killed: the
// fault tests crash parties in a known state with it. The launcher sets the
// environment variable, the binaries read it; production leaves it unset
// and nothing pauses.
package pause

import (
	"context"
	"log/slog"
	"os"
	"sync"
)

// Env names the environment variable that holds the point to stop at.
const Env = "NZCTEST_PAUSE_AT"

// At is the environment ("KEY=value") that stops a party at point; none
// for "".
func At(point string) []string {
	if point == "" {
		return nil
	}
	return []string{Env + "=" + point}
}

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
