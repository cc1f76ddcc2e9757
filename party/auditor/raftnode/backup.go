package raftnode

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	"github.com/hashicorp/raft"
	bolterrors "go.etcd.io/bbolt/errors"
)

// SnapshotFile is a copy of an auditor's replicated state taken through
// raft: the state machine's snapshot bytes (for the ledger, every entry)
// and the raft position and membership they stand for.
type SnapshotFile struct {
	Meta  SnapshotMeta
	State []byte
}

// SnapshotMeta is the raft side of a SnapshotFile.
type SnapshotMeta struct {
	ID          string `json:"id"`    // raft's snapshot id
	Node        string `json:"node"`  // the auditor that took it
	Index       uint64 `json:"index"` // the last raft index it includes
	Term        uint64 `json:"term"`
	Peers       []Peer `json:"peers"` // the voters at ConfigIndex
	ConfigIndex uint64 `json:"config_index"`
}

// snapshotMagic starts a snapshot file:
//
//	magic | u32 length | meta (JSON) | u64 length | state | SHA-256 of all before
var snapshotMagic = []byte("nzc-auditor-snapshot v1\n")

// ErrSnapshotFile means a file is not an intact snapshot file.
var ErrSnapshotFile = errors.New("auditor: not an intact snapshot file")

// Encode returns the file's bytes.
func (f SnapshotFile) Encode() ([]byte, error) {
	meta, err := json.Marshal(f.Meta)
	if err != nil {
		return nil, err
	}
	b := bytes.Clone(snapshotMagic)
	b = binary.BigEndian.AppendUint32(b, uint32(len(meta)))
	b = append(b, meta...)
	b = binary.BigEndian.AppendUint64(b, uint64(len(f.State)))
	b = append(b, f.State...)
	sum := sha256.Sum256(b)
	return append(b, sum[:]...), nil
}

// DecodeSnapshotFile checks and decodes a file written by Encode.
func DecodeSnapshotFile(b []byte) (SnapshotFile, error) {
	bad := func(what string) (SnapshotFile, error) {
		return SnapshotFile{}, fmt.Errorf("%w: %s", ErrSnapshotFile, what)
	}
	if !bytes.HasPrefix(b, snapshotMagic) {
		return bad("it does not start with " + strconv.Quote(string(snapshotMagic)))
	}
	if len(b) < len(snapshotMagic)+4+8+sha256.Size {
		return bad("truncated")
	}
	body, sum := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
	if got := sha256.Sum256(body); !bytes.Equal(got[:], sum) {
		return bad("its checksum does not match (damaged or truncated)")
	}
	rest := body[len(snapshotMagic):]
	n := binary.BigEndian.Uint32(rest)
	rest = rest[4:]
	if uint64(n) > uint64(len(rest)) {
		return bad("truncated metadata")
	}
	var f SnapshotFile
	dec := json.NewDecoder(bytes.NewReader(rest[:n]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f.Meta); err != nil {
		return bad("metadata: " + err.Error())
	}
	rest = rest[n:]
	if len(rest) < 8 || binary.BigEndian.Uint64(rest) != uint64(len(rest)-8) {
		return bad("the state's length does not match the file")
	}
	f.State = bytes.Clone(rest[8:])
	return f, nil
}

// SnapshotCompleter is implemented by a StateMachine whose raft snapshots
// do not restore on their own (the ledger's hold its state, not its
// history): SaveSnapshot has it turn the snapshot into one that does, for
// a backup that restores when no other auditor is left to fetch from.
type SnapshotCompleter interface {
	CompleteSnapshot(snapshot []byte) ([]byte, error)
}

// SaveSnapshot has raft take a snapshot now and returns a copy of it. When
// nothing was applied since the latest snapshot, that snapshot is returned.
func (n *Node) SaveSnapshot(ctx context.Context) (SnapshotFile, error) {
	type res struct {
		f   SnapshotFile
		err error
	}
	done := make(chan res, 1)
	go func() {
		f, err := n.saveSnapshot()
		done <- res{f, err}
	}()
	select {
	case r := <-done:
		return r.f, r.err
	case <-ctx.Done():
		return SnapshotFile{}, fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
	}
}

func (n *Node) saveSnapshot() (SnapshotFile, error) {
	fut := n.raft.Snapshot()
	var (
		meta *raft.SnapshotMeta
		rc   io.ReadCloser
	)
	switch err := fut.Error(); {
	case err == nil:
		m, r, err := fut.Open()
		if err != nil {
			return SnapshotFile{}, fmt.Errorf("auditor: open the snapshot just taken: %w", err)
		}
		meta, rc = m, r
	case errors.Is(err, raft.ErrNothingNewToSnapshot):
		list, lerr := n.snaps.List()
		if lerr != nil {
			return SnapshotFile{}, fmt.Errorf("auditor: list snapshots: %w", lerr)
		}
		if len(list) == 0 {
			return SnapshotFile{}, errors.New("auditor: nothing to snapshot yet: the log is empty")
		}
		m, r, oerr := n.snaps.Open(list[0].ID)
		if oerr != nil {
			return SnapshotFile{}, fmt.Errorf("auditor: open snapshot %s: %w", list[0].ID, oerr)
		}
		meta, rc = m, r
	default:
		return SnapshotFile{}, mapRaftErr(err)
	}
	defer rc.Close()
	state, err := io.ReadAll(rc)
	if err != nil {
		return SnapshotFile{}, fmt.Errorf("auditor: read snapshot %s: %w", meta.ID, err)
	}
	if c, ok := n.cfg.StateMachine.(SnapshotCompleter); ok {
		if state, err = c.CompleteSnapshot(state); err != nil {
			return SnapshotFile{}, fmt.Errorf("auditor: snapshot %s: %w", meta.ID, err)
		}
	}
	f := SnapshotFile{State: state, Meta: SnapshotMeta{ID: meta.ID, Node: n.cfg.NodeID, Index: meta.Index, Term: meta.Term, ConfigIndex: meta.ConfigurationIndex}}
	for _, s := range meta.Configuration.Servers {
		if s.Suffrage == raft.Voter {
			f.Meta.Peers = append(f.Meta.Peers, Peer{ID: string(s.ID), Addr: string(s.Address)})
		}
	}
	return f, nil
}

// RestoreResult says what RestoreDataDir did.
type RestoreResult struct {
	DataDir string `json:"data_dir"`
	// Previous is where the data directory that was replaced now is; empty
	// when there was none.
	Previous string `json:"previous,omitempty"`
	Index    uint64 `json:"index"`
	Term     uint64 `json:"term"`
	Peers    []Peer `json:"peers"`
}

// RestoreDataDir replaces all the raft state in dataDir — which no running
// auditor may hold — by the snapshot f, for disaster recovery: the node
// starts from the snapshot's state, index and membership and catches up
// from the cluster's leader (or, when every auditor is restored from the
// same file, the cluster resumes from it).
//
// fresh is an empty state machine of the kind the node runs: the snapshot
// is restored into it first, so a snapshot that does not restore (for the
// ledger: whose entries do not replay) changes nothing. The replaced
// directory is kept, renamed to dataDir + ".replaced-N"; the term and vote
// recorded in it are carried over, so the restored node cannot vote twice
// in a term it already voted in.
func RestoreDataDir(dataDir string, f SnapshotFile, fresh StateMachine) (RestoreResult, error) {
	if len(f.Meta.Peers) == 0 {
		return RestoreResult{}, fmt.Errorf("%w: it names no voters", ErrSnapshotFile)
	}
	if err := fresh.Restore(f.State); err != nil {
		return RestoreResult{}, fmt.Errorf("auditor: the snapshot's state does not restore, nothing changed: %w", err)
	}
	res := RestoreResult{DataDir: dataDir, Index: f.Meta.Index, Term: f.Meta.Term, Peers: f.Meta.Peers}

	var term, voteTerm uint64
	var voteCand []byte
	dbPath := filepath.Join(dataDir, raftDBFile)
	if _, err := os.Stat(dbPath); err == nil {
		old, err := openBoltStore(dbPath)
		switch {
		case err == nil:
			term, _ = old.GetUint64(keyCurrentTerm)
			voteTerm, _ = old.GetUint64(keyLastVoteTerm)
			voteCand, _ = old.Get(keyLastVoteCand)
			_ = old.Close()
		case errors.Is(err, bolterrors.ErrTimeout):
			return RestoreResult{}, fmt.Errorf("auditor: %s is in use: stop the auditor before restoring its data directory", dataDir)
		default:
			// A damaged store's votes are unknown; the restored node starts
			// from the snapshot's term.
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return RestoreResult{}, err
	}

	tmp := dataDir + ".restoring"
	if err := os.RemoveAll(tmp); err != nil {
		return RestoreResult{}, err
	}
	if err := buildDataDir(tmp, f, max(term, f.Meta.Term), voteTerm, voteCand); err != nil {
		_ = os.RemoveAll(tmp)
		return RestoreResult{}, err
	}
	if _, err := os.Stat(dataDir); err == nil {
		for i := 1; ; i++ {
			prev := dataDir + ".replaced-" + strconv.Itoa(i)
			if _, err := os.Stat(prev); errors.Is(err, os.ErrNotExist) {
				if err := os.Rename(dataDir, prev); err != nil {
					_ = os.RemoveAll(tmp)
					return RestoreResult{}, fmt.Errorf("auditor: move the old data directory aside: %w", err)
				}
				res.Previous = prev
				break
			}
		}
	}
	if err := os.Rename(tmp, dataDir); err != nil {
		return RestoreResult{}, fmt.Errorf("auditor: put the restored data directory in place (the old one is at %s): %w", res.Previous, err)
	}
	if d, err := os.Open(filepath.Dir(dataDir)); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return res, nil
}

// Keys of raft's stable store (raft's own names for them).
var (
	keyCurrentTerm  = []byte("CurrentTerm")
	keyLastVoteTerm = []byte("LastVoteTerm")
	keyLastVoteCand = []byte("LastVoteCand")
)

func buildDataDir(dir string, f SnapshotFile, term, voteTerm uint64, voteCand []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	store, err := openBoltStore(filepath.Join(dir, raftDBFile))
	if err != nil {
		return err
	}
	err = errors.Join(store.SetUint64(keyCurrentTerm, term), store.SetUint64(keyLastVoteTerm, voteTerm))
	if voteCand != nil {
		err = errors.Join(err, store.Set(keyLastVoteCand, voteCand))
	}
	if err := errors.Join(err, store.Close()); err != nil {
		return fmt.Errorf("auditor: write the restored raft state: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 1, newHclog(slog.New(slog.DiscardHandler), "raft-snapshots"))
	if err != nil {
		return err
	}
	var conf raft.Configuration
	for _, p := range f.Meta.Peers {
		conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Addr)})
	}
	_, trans := raft.NewInmemTransport("")
	sink, err := snaps.Create(1, f.Meta.Index, f.Meta.Term, conf, f.Meta.ConfigIndex, trans)
	if err != nil {
		return fmt.Errorf("auditor: create the restored snapshot: %w", err)
	}
	if _, err := sink.Write(f.State); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("auditor: write the restored snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("auditor: write the restored snapshot: %w", err)
	}
	return nil
}
