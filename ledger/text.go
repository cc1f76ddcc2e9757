package ledger

import (
	"fmt"
	"math"
)

// String is the account on one line, as the verification report and
// `nzc ledger accounts` show it.
func (a Account) String() string {
	eps := fmt.Sprintf("%.6g", a.Epsilon)
	if math.IsInf(a.Epsilon, 1) {
		eps = "unbounded"
	}
	return fmt.Sprintf("hospital %s: ε=%s of cap %g at δ=%.3g (%.3g additive δ spent), %d charges, %d answers",
		a.Hospital, eps, a.CapEpsilon, a.CapDelta-a.DeltaSpent, a.DeltaSpent, a.Charges, a.Answers)
}
