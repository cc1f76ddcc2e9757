//go:build nzctest

package pause

import (
	"context"
	"log/slog"
	"testing"
	"time"
)

func TestHook(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	t.Setenv(Env, "")
	if Hook(log) != nil || At("") != nil {
		t.Fatal("a pause without a point")
	}
	t.Setenv(Env, "here")
	if got := At("here"); len(got) != 1 || got[0] != Env+"=here" {
		t.Fatalf("At: %v", got)
	}
	h := Hook(log)
	ctx, cancel := context.WithCancel(context.Background())
	h(ctx, "elsewhere") // another point: returns at once
	paused := make(chan struct{})
	go func() { h(ctx, "here"); close(paused) }()
	select {
	case <-paused:
		t.Fatal("did not pause at its point")
	case <-time.After(50 * time.Millisecond):
	}
	cancel()
	<-paused
	h(context.Background(), "here") // only the first time
}
