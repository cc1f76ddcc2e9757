package aggregator

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// classLedger registers the federation's ensembles on classes, after
// failing its first down reads as an unreachable ledger does.
type classLedger struct {
	classes uint64
	mu      sync.Mutex
	down    int
	reads   int
}

func (l *classLedger) Submit(context.Context, []byte) (*nzcpb.LedgerResult, error) {
	return nil, errors.New("this ledger accepts no command")
}

func (l *classLedger) Budget(context.Context, *nzcpb.BudgetRequest) (*nzcpb.BudgetResponse, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reads++
	if l.reads <= l.down {
		return nil, errors.New("connection refused")
	}
	return &nzcpb.BudgetResponse{Classes: l.classes}, nil
}

// The configured class count is checked against the ledger's registration
// once the ledger answers: a mismatch is an error naming both counts and
// the setting to change; a match, or a ledger registering none, is not.
func TestCheckClasses(t *testing.T) {
	for _, tc := range []struct {
		name       string
		registered uint64
		down       int
		wantErr    bool
	}{
		{"match", classes, 0, false},
		{"none registered", 0, 0, false},
		{"mismatch", classes + 2, 0, true},
		{"mismatch after the ledger was down", classes + 2, 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 2, 10)
			cfg := f.cfg
			led := &classLedger{classes: tc.registered, down: tc.down}
			cfg.Ledger = led
			a, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			err = a.checkClasses(t.Context())
			var mm *ClassMismatchError
			if !tc.wantErr {
				if err != nil {
					t.Fatalf("got %v, want none", err)
				}
				return
			}
			if !errors.As(err, &mm) || mm.Configured != classes || mm.Registered != int(tc.registered) {
				t.Fatalf("got %v, want a class mismatch of %d configured, %d registered", err, classes, tc.registered)
			}
			for _, s := range []string{"configured for 4 classes", "on 6 classes", "classes: 6", "--classes 6"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("message %q does not say %q", err, s)
				}
			}
			if led.reads != tc.down+1 {
				t.Errorf("%d ledger reads, want %d", led.reads, tc.down+1)
			}
		})
	}
}

// An aggregator configured for another class count than the ledger
// registers stops serving with the mismatch instead of refusing every
// batch.
func TestServeStopsOnClassMismatch(t *testing.T) {
	f := newFixture(t, 2, 10)
	cfg := f.cfg
	cfg.Now = time.Now
	cfg.Ledger = &classLedger{classes: classes + 2}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	aggP := f.m.ByRole(crypto.RoleAggregator)[0]
	l, err := Listen("127.0.0.1:0", f.netConfig(t, crypto.RoleAggregator, aggP.ID))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err = a.Serve(ctx, l)
	var mm *ClassMismatchError
	if !errors.As(err, &mm) || ctx.Err() != nil {
		t.Fatalf("Serve returned %v (context %v), want a class mismatch before its deadline", err, ctx.Err())
	}
}
