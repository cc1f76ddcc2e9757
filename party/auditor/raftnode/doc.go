// Package raftnode is the replication machinery of an auditor: a
// hashicorp/raft server that replicates any deterministic StateMachine among
// 3 or 5 nodes. It knows nothing of what it replicates; package auditor plugs
// the privacy ledger in. It is the only package that imports raft.
//
// A Node stores the raft log and stable state in one bbolt file
// (<DataDir>/raft.db) and snapshots under <DataDir>/snapshots. Raft traffic
// and a small forwarding RPC share one mutual-TLS port; only peers whose
// certificate carries the URI SAN nzc://auditor/<id> are served.
//
// Any node accepts Submit: the leader applies the command through raft,
// a follower forwards it to the leader. Concurrent submissions are group
// committed (one log write and fsync per raft batch). A state machine that
// also signs statements of its state (CheckpointProvider) has them served to
// peers over the same port (PeerCheckpoint). So is a state machine's
// history (HistoryProvider), which a node that installs a snapshot holding
// the state but not the history (HistoryRestorer) fetches from the others.
//
// A data directory that fails its checks on start (a truncated or
// unreadable raft.db, a snapshot failing its checksum) stops the node with
// a *CorruptDataError naming the file; the node never starts empty over
// damaged state. Backups are SnapshotFiles; RestoreDataDir rebuilds a data
// directory from one offline.
package raftnode
