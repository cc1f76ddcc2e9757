package ledger

import "math"

// The pace of a hospital's own account commands.
//
// A hospital signs its account opening and its cap changes itself, and may
// send them to any auditor's intake or have the aggregator relay them. A
// limit kept by each intake would multiply with the number of auditors, so
// the limit is a rule of the replicated state machine instead: every
// auditor applies it to the same commands in the same order and reaches
// the same decision, whichever intake each command came through.
//
// The rule is a token bucket (in its GCRA form, in integer nanoseconds, so
// that every replica computes the same bits) over the time each command
// carries (its Timestamp, which its signer puts in): AccountBurst commands
// at once, then one more every AccountEvery. Apply reads no clock. A
// command stamped before the hospital's last accepted one gains nothing,
// as the bucket never runs backwards; one stamped ahead would, so the
// proposers bound stamps: the leader screens every command with CheckAt
// against its own clock and refuses, before proposing it, an account
// command stamped more than StampWindow away. Over any span of T
// nanoseconds a hospital therefore gets at most
//
//	AccountBurst + (T + 2·StampWindow) / AccountEvery
//
// account commands accepted, federation-wide, while the leader is honest.
// A leader that does not screen can admit stamps from any time, and so let
// one hospital's commands through faster: the coalition of one auditor (as
// leader) and one hospital can exceed the pace, and nothing else can.
const (
	// AccountBurst is how many account commands a hospital may have
	// accepted at once.
	AccountBurst = 8
	// AccountEvery is the time, in nanoseconds, after which a hospital may
	// have one more accepted.
	AccountEvery int64 = 5e9
	// StampWindow is how far, in nanoseconds, a proposer lets an account
	// command's stamp be from its own clock.
	StampWindow int64 = 60e9
)

// paced reports whether b is a command the pace limits, and its hospital.
func paced(b Body) (string, int64, bool) {
	switch b := b.(type) {
	case *OpenAccount:
		return b.Hospital, b.Timestamp, true
	case *ChangeCap:
		return b.Hospital, b.Timestamp, true
	}
	return "", 0, false
}

// pace decides hospital's account command stamped at: ok, with the time
// the hospital is paced again after it, or the rate-limited refusal.
func (s *State) pace(hospital string, at int64) (next int64, r Result, ok bool) {
	tat := max(s.paced[hospital], at)
	if tat > math.MaxInt64-AccountEvery {
		return 0, refuse(CodeRateLimited, hospital, "the command of %s is stamped %d, beyond any pace", hospital, at), false
	}
	next = tat + AccountEvery
	if ahead := next - at; at < math.MinInt64+AccountBurst*AccountEvery || ahead > AccountBurst*AccountEvery {
		wait := float64(ahead-AccountBurst*AccountEvery) / 1e9
		return 0, refuse(CodeRateLimited, hospital, "hospital %s has had %d account commands accepted in the last %ds, its limit: nothing changed; sign it again, stamped %.1fs later",
			hospital, AccountBurst, AccountBurst*AccountEvery/1e9, wait), false
	}
	return next, Result{}, true
}

// stampInWindow refuses a paced command stamped more than StampWindow from
// now.
func stampInWindow(c Command, now int64) (Result, bool) {
	hospital, at, ok := paced(c.Body)
	if !ok {
		return Result{}, true
	}
	if d := at - now; d > StampWindow || d < -StampWindow {
		return refuse(CodeRateLimited, hospital, "the %s of %s is stamped %.0fs from this auditor's clock, more than the %ds allowed: check the hospital's clock and sign it again",
			c.Body.Kind(), hospital, float64(d)/1e9, StampWindow/1e9), false
	}
	return Result{}, true
}
