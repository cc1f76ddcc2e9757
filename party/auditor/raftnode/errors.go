package raftnode

import (
	"errors"
	"fmt"
)

// NotLeaderError is returned by operations that only the leader can perform
// when this node is not the leader and forwarding is off or impossible. Retry
// against LeaderAddr, or on any node with forwarding on.
type NotLeaderError struct {
	LeaderID   string
	LeaderAddr string
}

func (e *NotLeaderError) Error() string {
	if e.LeaderID == "" {
		return "auditor: this node is not the raft leader and knows no leader; retry after the election"
	}
	return fmt.Sprintf("auditor: this node is not the raft leader; send to leader %s at %s", e.LeaderID, e.LeaderAddr)
}

// Leader is the address to retry against; "" when no leader is known.
func (e *NotLeaderError) Leader() string { return e.LeaderAddr }

var (
	// ErrNoLeader means the cluster has no leader right now (an election is
	// running, or fewer than a majority of auditors are reachable). Nothing
	// was committed; retry later with the same command.
	ErrNoLeader = errors.New("auditor: no raft leader; an election is in progress or a majority of auditors is unreachable — retry later")

	// ErrShutdown means the node is stopping or stopped; send the command to
	// another auditor.
	ErrShutdown = errors.New("auditor: node is shut down; use another auditor")

	// ErrTimeout means the command was not known to be committed before the
	// deadline. It may still commit: retry with the same command (commands
	// carry their own ids, so the state machine recognises a retry).
	ErrTimeout = errors.New("auditor: timed out waiting for the cluster to commit; the command may still commit — retry it with the same id")

	// ErrCommandTooLarge means a submitted command is larger than a raft
	// entry may carry (maxBatchBytes): every AppendEntries must stay within
	// what a follower's guard accepts (maxRPCBytes).
	ErrCommandTooLarge = errors.New("auditor: the command is larger than one raft entry may carry; nothing was proposed")

	// ErrPeerBudget means the auditor that forwarded a command has sent the
	// leader more bytes of commands than its budget (Tuning.PeerBytes)
	// lately: nothing was proposed; retry in a second.
	ErrPeerBudget = errors.New("auditor: this auditor has forwarded more command bytes than its budget allows per second; nothing was proposed — retry shortly")

	// ErrNotProposed is matched by a *NotProposedError.
	ErrNotProposed = errors.New("auditor: the command was refused before it was proposed; nothing was logged")

	// ErrWrongPeer means the auditor at a raft peer's address presented a
	// certificate other than the one of the server the raft configuration
	// places there (or the address is not in it): check the address in the
	// configuration (nzc ledger status) and the certificate installed there.
	ErrWrongPeer = errors.New("auditor: the raft peer at this address is not the configured server")

	// ErrPeerUnreachable means no connection to another auditor could be
	// made before the deadline (nothing listens at its address, or the
	// handshake failed): it is down or refuses, not merely slow.
	ErrPeerUnreachable = errors.New("auditor: the peer auditor cannot be reached")

	// ErrNotAuditor is returned when a peer's certificate does not carry the
	// auditor role.
	ErrNotAuditor = errors.New("auditor: peer certificate does not carry the auditor role (URI SAN nzc://auditor/<id>)")
)

// CorruptDataError means a file in the data directory cannot be read or
// fails its consistency check. The node refuses to start rather than start
// empty: restore the file from a backup, or move the data directory away so
// the node rejoins and copies the state from its peers.
type CorruptDataError struct {
	Path string
	Err  error
}

func (e *CorruptDataError) Error() string {
	return fmt.Sprintf("auditor: data file %s is unreadable or corrupted (%v); restore it from a backup, or move the data directory away and rejoin so the node copies the state from its peers", e.Path, e.Err)
}

func (e *CorruptDataError) Unwrap() error { return e.Err }

// ConfigError names the Config field that is wrong and why.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("auditor: invalid config %s: %s", e.Field, e.Reason)
}

// RemoteError is an error reported by another auditor while serving a
// forwarded request.
type RemoteError struct {
	Addr string
	Msg  string
	// Kind is the sentinel the remote error matched (ErrMembership,
	// ErrPeerBudget), or nil.
	Kind error
}

func (e *RemoteError) Error() string { return fmt.Sprintf("auditor %s: %s", e.Addr, e.Msg) }

func (e *RemoteError) Unwrap() error { return e.Kind }

// NotProposedError is a command the leader refused before proposing it
// (Config.Screen): nothing entered the log. Refusal is the state
// machine's encoded answer: a refusal, or the answer to a retry of a
// command the log already holds. It matches ErrNotProposed.
type NotProposedError struct {
	Refusal []byte
}

func (e *NotProposedError) Error() string {
	return fmt.Sprintf("%v (the state machine's refusal is %d bytes)", ErrNotProposed, len(e.Refusal))
}

func (e *NotProposedError) Is(target error) bool { return target == ErrNotProposed }

// Refused is the state machine's encoded refusal.
func (e *NotProposedError) Refused() []byte { return e.Refusal }

// DisplaceError is a join that would take the place of another server: an
// address that server holds. A join never removes anybody; it matches
// ErrMembership.
type DisplaceError struct {
	ID, Addr string
	Holder   string // the server at Addr
}

func (e *DisplaceError) Error() string {
	return fmt.Sprintf("auditor: %s cannot join at %s: auditor %s holds that address, and a join never displaces another server; join at %s's own address, or have %s removed first (its own request or a majority's signatures)",
		e.ID, e.Addr, e.Holder, e.ID, e.Holder)
}

func (e *DisplaceError) Is(target error) bool { return target == ErrMembership }

// ErrOutcomeUnknown means the command was handed to the cluster but this
// node cannot tell whether it committed (leadership changed, or the
// connection to the leader broke mid-request). Retry it with the same id:
// the state machine recognises a retry and applies it at most once.
var ErrOutcomeUnknown = errors.New("auditor: the command may or may not have committed (leadership changed or the leader connection broke); retry it with the same id")
