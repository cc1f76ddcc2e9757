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
// Snapshot/Restore for its snapshots.
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
// the stated and the recomputed cost, never the stated one alone.
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
// charge and session (CostCheck), naming each entry that states less.
//
// docs/LEDGER.md describes the encoding, the rules and the verification.
package ledger
