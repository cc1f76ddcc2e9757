// Package ledger is the federation's privacy ledger: a deterministic state
// machine over signed commands (parties, hospital accounts and caps,
// students, privacy charges, sparse-vector sessions), whose every applied
// command becomes an entry of an RFC 6962 Merkle log with checkpoints signed
// by the auditors.
//
// The package is pure: it takes time from the commands, uses no randomness,
// and imports only the standard library, the mechanism package's accounting
// and the transparency-log primitives of golang.org/x/mod/sumdb. A raft FSM
// wraps a State by passing each committed log entry to Apply, and
// StateSnapshot/Restore (RestoreFrom when the history lacks the snapshot's
// entries) for its snapshots: the decision state and the tree's head, not
// the entries, which stay in the History.
//
// # The ledger derives every cost
//
// A charge or session states its cost (an RDP curve on the default grid and
// an additive δ), but the ledger does not take the aggregator's word for
// it: every input of the cost is inside the signed command — the mechanism,
// its parameters (teachers and classes included, in the one spelling of
// mechanism.ParseLedgerParams), the numbers of queries and answers, and a
// session's K. Apply parses them and recomputes the cost with the
// mechanism package (mechanism.Params.Charge): a command whose parameters
// do not parse is refused as bad-params, and one whose stated curve is
// below the recomputed one at any order, or whose δ is below, by more than
// CostTolerance (a relative 1e-9) is refused as under-cost. What an
// accepted command composes into the accounts is the order-wise maximum of
// the stated and the recomputed cost, never the stated one alone. A charge
// inside a session costs nothing more only because the session paid, at
// opening, for one mechanism with one set of parameters: a charge naming
// the session must name exactly those (refused as session-mismatch
// otherwise).
//
// Admission is decided at the command's data-independent worst case: the
// cap check composes the cost of every query answered (for every
// per-query mechanism an answer costs at least a refusal), and the
// student's quota is checked against the number of queries. What is
// charged is the realized cost, which is at most what was admitted; so
// whether a batch is refused, and the refusal's message, depend on the
// public state of the ledger and the batch's size, never on how many of its
// queries the private votes let through.
//
// # Determinism across machines
//
// Every auditor must reach the same decision, floating point included.
// IEEE 754 addition, multiplication and division are exactly rounded and
// Go does not evaluate float64 in extended precision, but two things may
// differ between machines: the Go specification lets a compiler fuse x*y+z
// into one FMA instruction on some architectures (arm64, ppc64le, s390x)
// unless an explicit float64() conversion separates the operations, and
// math.Exp and math.Log use per-architecture assembly. Both enter a
// recomputed cost (mechanism.PureDP, the nzc-svt δ) in its last bits. The
// ledger contains that difference in three ways:
//
//   - the stated cost is compared with the recomputed one with a relative
//     tolerance that only decides accept-or-refuse for costs agreeing to
//     nine digits, far above any ulp-level difference, and never lets less
//     than the recomputed cost be charged;
//   - the charged curve (the maximum of stated and recomputed) is rounded
//     UP onto the dyadic lattice of multiples of 2^-40 before it is
//     composed (values of 2^12 and above are lattice points already), so an
//     ulp-level difference in the recomputation changes the charged curve
//     only if it straddles a lattice point; sums of lattice points below
//     2^12 are exact, so the accounts' curves are the same bits everywhere;
//   - the cap comparison converts the composed curve to ε with math.Log.
//
// The residual limit, stated plainly: two auditors on different
// architectures can still disagree when a recomputed RDP value lies within
// a few ulps of a multiple of 2^-40, or when an account's ε lies within a
// few ulps of its cap. Both are measure-zero coincidences in practice, and
// a disagreement cannot pass unseen: entries record outcomes, so the
// diverging auditor's tree root differs from the majority's and its
// checkpoint signature does not count toward the quorum. Auditors of one
// architecture (the deployment's default) agree bit for bit.
//
// Verification (Verify, `nzc ledger verify`) replays every command with
// the same rules and, separately, recomputes the cost of every accepted
// charge and session (CostCheck), naming each entry that states less,
// and each charge in a session that names other parameters than the
// session opened with.
//
// docs/LEDGER.md describes the encoding, the rules and the verification.
//
// # What reaches the log, and at what pace
//
// Apply records every command it is given, refused ones included. Its
// proposers give it only what passes Check (or CheckAt, with the
// proposer's clock) now, or a sound command whose budget ran out
// (Code.Budgetary): what an honest sender meets when its commands race
// others'. A command its signer could not have proposed honestly, and a
// retry of one the log already accepted, is answered without an entry.
//
// A hospital's own account commands (its account opening and cap changes)
// are paced by the state machine, so that the limit holds across the
// federation whichever auditor each command reaches: AccountBurst at once,
// then one more every AccountEvery, by the stamps the commands carry
// (pace.go). Apply reads no clock; CheckAt refuses a stamp more than
// StampWindow from the proposer's clock, which bounds what stamping ahead
// gains while the proposer is honest.
//
// # The cap gate is sound under adaptive composition
//
// A hospital's account sees a sequence of charges whose mechanisms, sizes
// and — for confident-GNMax — realized costs depend on labels released
// before them: the student picks its next batch after reading the last
// one, and a confident-GNMax query pays for its answer only when its
// private threshold test passes. The usual RDP composition theorem fixes
// the sequence of costs in advance, so it does not cover this account, and
// neither does converting the running total with the tight conversion as if
// it were one fixed composition. The gate uses instead the conversion of
// mechanism.Curve.FilterEpsilon, and the argument is this.
//
// Fix neighbouring datasets, let L_t be the privacy loss of the first t
// released outputs (log of the ratio of their probabilities under the two
// datasets, with outputs drawn from the first), and S_t(α) the sum of the
// curves charged for them at order α. Each charge's curve is fixed before
// its mechanism runs (admission uses the batch's data-independent worst
// case; a confident-GNMax query's answer cost is a second step taken only
// after its test's output), and each mechanism is α-RDP at that value
// conditionally on the past, so E[exp((α−1)ℓ_t) | past] ≤ exp((α−1)ρ_t(α)).
// Hence M_t(α) = exp((α−1)(L_t − S_t(α))) is a non-negative supermartingale
// with M_0 = 1, for every α at once. This holds for every mix of mechanisms:
// a pure ε-DP mechanism (lnmax, the paper's Laplace nzc, an nzc-svt session)
// is charged mechanism.PureDP, a valid RDP curve at every order, and a
// Gaussian one its Gaussian curve; nothing requires the curves to share a
// shape, which is what the fixed-order filters of Feldman and Zrnic (2021)
// would need to extend across orders.
//
// Let τ be the last released output (a bounded stopping time: each release
// is decided from public state). The gate released it only if, for the
// account's remaining conversion δ and cap ε, some order α_j of the m filter
// orders has S_τ(α_j) ≤ s_j, where s_j is the RDP value whose tight
// conversion at order α_j and δ/m is ε. The tight conversion's pointwise
// bound (Canonne, Kamath and Steinke 2020, Proposition 12) says
// (1 − e^(ε−L))₊ ≤ (δ/m)·exp((α_j−1)(L − s_j)) for every L — that is
// what choosing s_j by the conversion means. On the event S_τ(α_j) ≤ s_j the
// right side is at most (δ/m)·M_τ(α_j); the gate puts every release in one
// of these events, so
//
//	E[(1 − e^(ε−L_τ))₊] ≤ Σ_j (δ/m)·E[M_τ(α_j)] ≤ δ
//
// by optional stopping. The left side is the hockey-stick divergence of the
// whole transcript, so the transcript is (ε, δ)-DP.
//
// The gate also releases when every charge so far was pure DP and their pure
// ε add up to at most the cap: each step's loss is then at most its ε
// (outside the additive δ events below), so L_τ ≤ Σ ε_i ≤ ε and
// (1 − e^(ε−L_τ))₊ = 0 on that event — a further event of the union that
// costs nothing (basic composition holds for adaptively chosen pure-DP
// steps). An account's ε is therefore the smaller of the filter conversion
// and the pure-ε sum, which for an account of nzc-svt sessions is the sum of
// their ε exactly; the sum is kept on the lattice below, rounded up. The additive δ of
// mechanisms that have one (an nzc-svt session's stability test) is a
// failure event of probability at most that δ on top, so the gate converts
// at the cap's δ less every additive δ already charged, and the guarantee
// is (cap ε, cap δ). The price of adaptivity is the log(m)/(α−1) in the
// conversion, m = 17 orders of the default grid; TestGateMixedMechanisms
// drives an account through lnmax answers, nzc-svt sessions and gnmax
// answers and checks the gate against this rule, including a charge that a
// fixed-sequence conversion would have admitted. The guarantee is for the
// cap in force when the last output was released; a hospital that raises
// its cap extends the same account, and the bound then is for the new cap.
//
// # Reservations keep the gate a gate when batches run at once
//
// The argument above needs each release to be decided, from public state,
// before its mechanism runs, and the running total to stay within the cap
// whatever the batches admitted so far turn out to spend. Batches run
// concurrently, so the gate decides at a Reserve, before any hospital is
// asked for votes: the account's spent curve composed with the worst case
// of every live reservation naming the hospital (in log order, so every
// replica composes the same bits) and with the new batch's worst case must
// pass the filter (and the pure-ε sum, and the additive δ, likewise). Every
// admitted batch is thus admitted as if every batch admitted before it,
// settled or not, had spent its worst case; the charge that settles within
// its reservation (Reserve's rule: its student and mechanism, hospitals it
// names, at most its queries, no more at any order, in δ or in pure ε)
// composes its realized cost, which is at most what the gate counted, so
// the total stays within the event the gate checked and the bound above
// holds for the whole transcript. A settling charge passes no second cap
// check: the decision was made and cannot depend on the votes. A charge
// without a live reservation, a session opening and a reservation all pass
// the gate with every other live reservation counted, so a charge cannot
// take budget a reservation holds. A reservation expires ReservationWindow
// entries after its own (an entry count, which every replica decides
// alike) and is released; a charge that comes after its reservation
// expired is gated afresh. Lowering a cap does not unsettle a live
// reservation: its batch was admitted under the cap in force then, which is
// what the bound is stated for. The student's answer quota is held the same
// way: a reservation's queries count as answered against its student's
// quota while it is live, in every reservation's and charge's quota check
// but its own batch's; a batch answered in a session (paid for at its
// opening) reserves a zero cost, which holds its queries against the quota
// only. TestReservationHoldsTheWorstCaseBeforeVotes,
// TestChargeOutsideItsReservationIsGated, TestReservationHoldsTheStudentQuota
// and TestSessionBatchReservesItsQuota check these rules.
package ledger
