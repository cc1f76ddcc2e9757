package raftnode

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"time"
)

// Peer names one auditor of the cluster: its raft id (the <id> of its
// certificate's nzc://auditor/<id>) and the host:port other auditors dial.
type Peer struct {
	ID   string
	Addr string
}

// Config is everything a Node needs. Validate it (New does) before use.
type Config struct {
	// DataDir holds raft.db (log and stable state) and snapshots/.
	DataDir string
	// NodeID is this auditor's raft server id.
	NodeID string
	// BindAddr is the host:port to listen on ("127.0.0.1:0" picks a port).
	BindAddr string
	// AdvertiseAddr is the host:port other auditors dial; empty means the
	// bound address, which must then be routable.
	AdvertiseAddr string

	// ServerTLS must require and verify client certificates
	// (tls.RequireAndVerifyClientCert with ClientCAs set). ClientTLS must
	// carry this auditor's certificate and the federation CA in RootCAs.
	// Peers are accepted only if their certificate has the URI SAN
	// nzc://auditor/<id>.
	ServerTLS *tls.Config
	ClientTLS *tls.Config

	// Bootstrap starts a new cluster whose voters are Peers (this node is
	// added if absent). Every founding auditor may set it with the same
	// Peers; a node that already has raft state never bootstraps again.
	Bootstrap bool
	Peers     []Peer
	// Join lists addresses of existing auditors to ask for membership when
	// this node has no raft state. Any of them forwards to the leader.
	Join []string

	// StateMachine is the replicated state (in an auditor, the ledger). Required.
	StateMachine StateMachine

	// Logger receives structured logs, raft's included. Nil discards.
	Logger *slog.Logger

	// VerifyRemoval checks the proof of a quorum-signed removal of auditor
	// id (RemoveSigned): the auditor that receives it and the leader both
	// call it before raft membership changes. Nil refuses every such
	// removal.
	VerifyRemoval func(id string, proof []byte) error

	// Federation admits joins: the leader asks it before it adds or moves
	// a voter. Nil admits any auditor at an address no other server holds.
	Federation Federation
	// Screen checks each command before the leader proposes it, whether
	// submitted on the leader or forwarded to it. Nil proposes every
	// command.
	Screen Screen
	// MaxCommand is the largest command Submit proposes, in bytes; a larger
	// one is refused before raft logs it. Zero means the most one raft
	// entry carries (4 MiB).
	MaxCommand int

	// Now is the clock of the peers' byte budget; nil means time.Now.
	Now func() time.Time

	// Tuning adjusts timeouts, snapshots and packing.
	Tuning
}

// Tuning adjusts timeouts, snapshots and packing; the zero value takes the
// defaults.
type Tuning struct {
	// ApplyTimeout bounds one Submit when its context has no deadline.
	// Zero means 10s.
	ApplyTimeout time.Duration
	// SnapshotThreshold is the number of log entries between snapshots.
	// Zero means 8192.
	SnapshotThreshold uint64
	// SnapshotRetain is the number of snapshots kept on disk. Zero means 2.
	SnapshotRetain int
	// TrailingLogs is how many log entries raft keeps after a snapshot, so
	// that a follower that lags by fewer catches up from the log instead
	// of a snapshot. Zero means raft's default, 10240.
	TrailingLogs uint64
	// HeartbeatTimeout and ElectionTimeout tune raft; zero means 1s each.
	// Lower them on a LAN to fail over faster.
	HeartbeatTimeout time.Duration
	ElectionTimeout  time.Duration
	// ForwardTimeout bounds, on the forwarding channel, reading the rest of
	// a request once its first byte has arrived and writing its response,
	// so that a peer that stalls mid-request does not hold the
	// connection's goroutine. Zero means 30s.
	ForwardTimeout time.Duration
	// MaxPacked is the most submissions the leader packs into one raft
	// entry (group commit, see batch.go); 0 means 1024. 1 turns packing
	// off: each submission is its own raft entry.
	MaxPacked int
	// PeerBytes is how many bytes of commands each other auditor may
	// forward to the leader per second (and at once), whatever they hold;
	// more is refused with ErrPeerBudget before it is screened or proposed.
	// Zero means 64 MiB: some 40,000 charges a second, twenty times what
	// the cluster commits.
	PeerBytes int64
}

const (
	defaultApplyTimeout      = 10 * time.Second
	defaultForwardTimeout    = 30 * time.Second
	defaultSnapshotThreshold = 8192
	defaultSnapshotRetain    = 2
	defaultTimeout           = time.Second
)

// Validate reports the first problem with c as a *ConfigError.
func (c *Config) Validate() error {
	if c.MaxCommand < 0 || c.MaxCommand > maxBatchBytes {
		return &ConfigError{"MaxCommand", fmt.Sprintf("must be between 0 (the default) and %d bytes", maxBatchBytes)}
	}
	if c.MaxPacked < 0 {
		return &ConfigError{"MaxPacked", "must not be negative (0 means the default)"}
	}
	if c.DataDir == "" {
		return &ConfigError{"DataDir", "is required: a directory this node owns for its raft log and snapshots"}
	}
	if err := validID(c.NodeID); err != nil {
		return &ConfigError{"NodeID", err.Error()}
	}
	if _, _, err := net.SplitHostPort(c.BindAddr); err != nil {
		return &ConfigError{"BindAddr", fmt.Sprintf("want host:port: %v", err)}
	}
	if c.AdvertiseAddr != "" {
		if err := validDialAddr(c.AdvertiseAddr); err != nil {
			return &ConfigError{"AdvertiseAddr", err.Error()}
		}
	}
	if c.ServerTLS == nil || (len(c.ServerTLS.Certificates) == 0 && c.ServerTLS.GetCertificate == nil) {
		return &ConfigError{"ServerTLS", "needs this auditor's certificate"}
	}
	if c.ServerTLS.ClientAuth != tls.RequireAndVerifyClientCert || c.ServerTLS.ClientCAs == nil {
		return &ConfigError{"ServerTLS", "must set ClientAuth = tls.RequireAndVerifyClientCert and ClientCAs to the federation CA"}
	}
	if c.ClientTLS == nil || (len(c.ClientTLS.Certificates) == 0 && c.ClientTLS.GetClientCertificate == nil) {
		return &ConfigError{"ClientTLS", "needs this auditor's certificate"}
	}
	if c.ClientTLS.RootCAs == nil {
		return &ConfigError{"ClientTLS", "must set RootCAs to the federation CA"}
	}
	if c.Bootstrap && len(c.Join) > 0 {
		return &ConfigError{"Bootstrap", "cannot both bootstrap a new cluster and join an existing one"}
	}
	if !c.Bootstrap && len(c.Peers) > 0 {
		return &ConfigError{"Peers", "are only used with Bootstrap; set Bootstrap or use Join"}
	}
	seenID := map[string]bool{}
	seenAddr := map[string]bool{}
	for i, p := range c.Peers {
		if err := validID(p.ID); err != nil {
			return &ConfigError{fmt.Sprintf("Peers[%d].ID", i), err.Error()}
		}
		if err := validDialAddr(p.Addr); err != nil {
			return &ConfigError{fmt.Sprintf("Peers[%d].Addr", i), err.Error()}
		}
		if seenID[p.ID] || seenAddr[p.Addr] {
			return &ConfigError{fmt.Sprintf("Peers[%d]", i), "duplicates an earlier peer's id or address"}
		}
		seenID[p.ID], seenAddr[p.Addr] = true, true
	}
	for i, a := range c.Join {
		if err := validDialAddr(a); err != nil {
			return &ConfigError{fmt.Sprintf("Join[%d]", i), err.Error()}
		}
	}
	if c.StateMachine == nil {
		return &ConfigError{"StateMachine", "is required"}
	}
	if c.ApplyTimeout < 0 || c.HeartbeatTimeout < 0 || c.ElectionTimeout < 0 {
		return &ConfigError{"timeouts", "must not be negative"}
	}
	if c.SnapshotRetain < 0 {
		return &ConfigError{"SnapshotRetain", "must not be negative"}
	}
	return nil
}

func validID(id string) error {
	if id == "" {
		return fmt.Errorf("is required")
	}
	if len(id) > 64 {
		return fmt.Errorf("%q is longer than 64 bytes", id)
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("%q: use letters, digits, '-', '_' and '.'", id)
		}
	}
	return nil
}

func validDialAddr(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("want host:port: %v", err)
	}
	if host == "" || port == "" || port == "0" {
		return fmt.Errorf("%q must name a host and a fixed port other auditors can dial", a)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("%q is an unspecified address; advertise a routable one", a)
	}
	return nil
}

func (c *Config) forwardTimeout() time.Duration {
	if c.ForwardTimeout <= 0 {
		return defaultForwardTimeout
	}
	return c.ForwardTimeout
}

func (c *Config) applyTimeout() time.Duration {
	if c.ApplyTimeout == 0 {
		return defaultApplyTimeout
	}
	return c.ApplyTimeout
}

const defaultPeerBytes = 64 << 20

func (c *Config) peerBytes() int64 {
	if c.PeerBytes <= 0 {
		return defaultPeerBytes
	}
	return c.PeerBytes
}

func (c *Config) maxCommand() int {
	if c.MaxCommand == 0 {
		return maxBatchBytes
	}
	return c.MaxCommand
}

// Federation says which auditors may hold which raft addresses: the
// federation's binding of each auditor's id to its address (its
// registration and its configured peers), which raft's own membership must
// not override.
type Federation interface {
	// AdmitJoin returns nil when auditor id may be a voter at addr, and an
	// error saying why not otherwise.
	AdmitJoin(id, addr string) error
}

// Screen decides whether a command may enter the log.
type Screen interface {
	// Screen returns nil when cmd, submitted through auditor peer (the id
	// of the certificate that forwarded it, or the leader's own), may be
	// proposed; otherwise the state machine's encoded answer — a refusal,
	// or the answer to a retry of a command the log already holds — which
	// Submit returns in a *NotProposedError and which never enters the log.
	Screen(peer string, cmd []byte) (refusal []byte)
}
