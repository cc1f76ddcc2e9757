package ledger

import (
	"fmt"
	"math"
	"strings"
)

// String is the account on one line, as the verification report and
// `nzc ledger accounts` show it.
func (a Account) String() string {
	eps := func(e float64) string {
		if math.IsInf(e, 1) {
			return "unbounded"
		}
		return fmt.Sprintf("%.6g", e)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "hospital %s: ε=%s of cap %g at δ=%.3g (%.3g additive δ spent), %d charges, %d answers",
		a.Hospital, eps(a.Epsilon), a.CapEpsilon, a.CapDelta-a.DeltaSpent, a.DeltaSpent, a.Charges, a.Answers)
	if a.FederationDelta > 0 {
		fmt.Fprintf(&b, "; ε=%s at the federation's δ=%.3g", eps(a.EpsilonAtFederationDelta), a.FederationDelta)
	}
	if n := len(a.CapChanges); n > 0 {
		raises := 0
		for _, c := range a.CapChanges {
			if c.Raise {
				raises++
			}
		}
		fmt.Fprintf(&b, "; %d cap changes, %d of them raises", n, raises)
	}
	if a.Suspended {
		fmt.Fprintf(&b, "; SUSPENDED at entry %d (%s): refuses every charge", a.SuspendedAt, a.SuspendedReason)
	}
	return b.String()
}

// String is the change on one line, a raise flagged; its time is the
// proposer's Timestamp, which callers format.
func (c CapChange) String() string {
	flag := "changed (no raise)"
	if c.Raise {
		flag = "RAISED"
	}
	return fmt.Sprintf("cap %s at entry %d by %s, version %d: ε=%g δ=%.3g → ε=%g δ=%.3g", flag, c.Entry,
		c.Signer, c.Version, c.FromEpsilon, c.FromDelta, c.ToEpsilon, c.ToDelta)
}
