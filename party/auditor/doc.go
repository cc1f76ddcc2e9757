// Package auditor runs one node of the auditor cluster: a hashicorp/raft
// server that replicates the privacy ledger among 3 or 5 auditors run by
// different organisations. It is the only package that imports raft.
//
// A Node stores the raft log and stable state in one bbolt file
// (<DataDir>/raft.db) and snapshots under <DataDir>/snapshots. Raft traffic
// and a small forwarding RPC share one mutual-TLS port; only peers whose
// certificate carries the URI SAN nzc://auditor/<id> are served.
//
// Any node accepts Submit: the leader applies the command through raft,
// a follower forwards it to the leader. Concurrent submissions are group
// committed (one log write and fsync per raft batch). The replicated state
// is a StateMachine whose Apply is deterministic.
//
// A data directory that fails its checks on start (a truncated or
// unreadable raft.db, a snapshot failing its checksum) stops the node with
// a *CorruptDataError naming the file; the node never starts empty over
// damaged state.
package auditor
