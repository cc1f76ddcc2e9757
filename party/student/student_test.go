package student

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/ml/selection"
)

func TestBatchIDIsDeterministicAndDistinct(t *testing.T) {
	a := BatchID("student-1", "abc", 8, 0)
	if !bytes.Equal(a, BatchID("student-1", "abc", 8, 0)) {
		t.Fatal("the same batch got two ids: a resumed run would pay twice")
	}
	if len(a) < 16 || len(a) > 64 {
		t.Fatalf("batch id of %d bytes is outside the protocol's 16 to 64", len(a))
	}
	seen := map[string]bool{string(a): true}
	for _, b := range [][]byte{
		BatchID("student-2", "abc", 8, 0), BatchID("student-1", "abd", 8, 0),
		BatchID("student-1", "abc", 9, 0), BatchID("student-1", "abc", 8, 1),
	} {
		if seen[string(b)] {
			t.Fatal("two different batches share an id")
		}
		seen[string(b)] = true
	}
}

func TestRetryWaitBacksOffAndHonoursRetryAfter(t *testing.T) {
	tests := []struct {
		attempt    int
		retryAfter time.Duration
		want       time.Duration
	}{
		{1, 0, 500 * time.Millisecond},
		{2, time.Second, time.Second},
		{3, time.Second, 2 * time.Second},
		{5, 0, 8 * time.Second},
		{6, 0, 10 * time.Second},
		{60, 0, 10 * time.Second},
		{2, 30 * time.Second, 30 * time.Second},
	}
	total := time.Duration(0)
	for _, tt := range tests {
		if got := retryWait(tt.attempt, tt.retryAfter); got != tt.want {
			t.Errorf("retryWait(%d, %v) = %v, want %v", tt.attempt, tt.retryAfter, got, tt.want)
		}
	}
	for a := 1; a <= 10; a++ {
		total += retryWait(a, time.Second)
	}
	// The default attempts must outlast a restart of the aggregator and
	// its hospitals' reconnection (about 15s).
	if total < 45*time.Second || total > 2*time.Minute {
		t.Errorf("10 attempts wait %v in all, want between 45s and 2m", total)
	}
}

func TestNewChecksSelection(t *testing.T) {
	id, err := crypto.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	base := Config{ID: "s1", Identity: id, Hospitals: []*crypto.Recipient{id.Recipient()}, BatchSize: 8, StateDir: t.TempDir(),
		AuditorKeys: []string{"a1+f853fd16+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"}}
	tests := []struct {
		name string
		sel  selection.Config
		ok   bool
	}{
		{"default: the data's order", selection.Config{}, true},
		{"typical", selection.Config{Strategy: selection.Typical}, true},
		{"unknown", selection.Config{Strategy: "smart"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := base
			cfg.Selection = tt.sel
			c, err := New(cfg)
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, selection.ErrConfig)) {
				t.Fatalf("New: %v, want ok=%v", err, tt.ok)
			}
			if err == nil && c.cfg.Selection.Strategy == "" {
				t.Fatal("no strategy set")
			}
		})
	}
}

func TestNewChecksBootstrap(t *testing.T) {
	id, err := crypto.GenerateIdentity()
	if err != nil {
		t.Fatal(err)
	}
	rank := func(context.Context, *data.Dataset, []int, []bool) ([]int, error) { return nil, nil }
	tests := []struct {
		name      string
		bootstrap int
		rank      func(context.Context, *data.Dataset, []int, []bool) ([]int, error)
		ok        bool
	}{
		{"off", 0, nil, true},
		{"after 20 answers, ranked", 20, rank, true},
		{"no way to rank the rest", 20, nil, false},
		{"negative", -1, rank, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(Config{ID: "s1", Identity: id, Hospitals: []*crypto.Recipient{id.Recipient()}, BatchSize: 8, StateDir: t.TempDir(),
				AuditorKeys: []string{"a1+f853fd16+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"}, Bootstrap: tt.bootstrap, Rank: tt.rank})
			if (err == nil) != tt.ok || (err != nil && !errors.Is(err, selection.ErrConfig)) {
				t.Fatalf("New: %v, want ok=%v", err, tt.ok)
			}
		})
	}
}
