package ratelimit

import (
	"testing"
	"time"
)

func TestLimiterRefills(t *testing.T) {
	now := time.Unix(0, 0)
	l := New(2, time.Second, func() time.Time { return now })
	for i, want := range []bool{true, true, false} {
		if ok, _ := l.Allow("h"); ok != want {
			t.Fatalf("request %d at once: %v, want %v", i, ok, want)
		}
	}
	if ok, _ := l.Allow("other"); !ok {
		t.Fatal("another party shares the bucket")
	}
	now = now.Add(500 * time.Millisecond)
	if ok, wait := l.Allow("h"); ok || wait != 500*time.Millisecond {
		t.Fatalf("half an interval later: %v, wait %v", ok, wait)
	}
	now = now.Add(500 * time.Millisecond)
	if ok, _ := l.Allow("h"); !ok {
		t.Fatal("no token after a whole interval")
	}
	now = now.Add(time.Hour)
	for i, want := range []bool{true, true, false} {
		if ok, _ := l.Allow("h"); ok != want {
			t.Fatalf("after an hour, request %d: %v, want %v (the bucket holds at most the burst)", i, ok, want)
		}
	}
}
