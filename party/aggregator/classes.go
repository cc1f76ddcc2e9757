package aggregator

import (
	"context"
	"fmt"
	"time"

	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// ClassMismatchError is returned by Serve when the ledger registers the
// federation's ensembles on a class count other than the configured one:
// every batch would be refused, so the aggregator stops instead.
type ClassMismatchError struct {
	Configured, Registered int
}

func (e *ClassMismatchError) Error() string {
	return fmt.Sprintf("aggregator: configured for %d classes, but the ledger registers the federation's ensembles on %d classes: set classes: %d in the aggregator's configuration (or pass --classes %d) and restart it",
		e.Configured, e.Registered, e.Registered, e.Registered)
}

// checkClasses reads the ledger's registered class count, retrying while
// the auditors do not answer, and returns a *ClassMismatchError when it is
// not the configured one. A ledger registering none (a federation made
// before registrations existed) leaves the configuration standing.
func (a *Aggregator) checkClasses(ctx context.Context) error {
	wait := 100 * time.Millisecond
	for {
		rctx, cancel := context.WithTimeout(ctx, a.cfg.LedgerTimeout)
		resp, err := a.cfg.Ledger.Budget(rctx, &nzcpb.BudgetRequest{})
		cancel()
		if err == nil {
			if n := int(resp.GetClasses()); n != 0 && n != a.classes {
				return &ClassMismatchError{Configured: a.classes, Registered: n}
			}
			return nil
		}
		a.log.Debug("could not read the registered class count; retrying", "err", err, "in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		wait = min(2*wait, 5*time.Second)
	}
}
