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
// docs/LEDGER.md describes the encoding, the rules and the verification.
package ledger
