package raftnode

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/auditor/internal/auditortest"
)

// ledgerSM replicates a ledger.State over a History on disk, with state
// snapshots, as the auditor does; it serves its history to peers, and
// tamper, when set, changes the entry it serves at that index.
type ledgerSM struct {
	hist   *History
	st     *ledger.State
	tamper atomic.Int64 // index+1 of the entry served changed; 0 none

	mu       sync.Mutex
	restores []bool // own, for each restore
	err      error  // of the last restore
}

func newLedgerSM(t testing.TB, dir string) *ledgerSM {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	h, err := OpenHistory(filepath.Join(dir, "history.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return &ledgerSM{hist: h, st: ledger.Resume(h)}
}

func (s *ledgerSM) Apply(_ uint64, cmd []byte) ([]byte, error) {
	r, err := s.st.Apply(cmd)
	if err != nil {
		return nil, err
	}
	return ledger.EncodeResult(r), nil
}

func (s *ledgerSM) AppliedBatch(uint64) { _ = s.hist.Flush() }

func (s *ledgerSM) Snapshot() ([]byte, error) { return s.st.StateSnapshot() }

func (s *ledgerSM) Restore(b []byte) error { return s.st.Restore(b) }

func (s *ledgerSM) Entries(from, to int64) ([][]byte, error) {
	es, err := s.st.Entries(from, to)
	if t := s.tamper.Load() - 1; t >= from && t < to && err == nil {
		e := bytes.Clone(es[t-from])
		e[len(e)/2] ^= 1
		es[t-from] = e
	}
	return es, err
}

func (s *ledgerSM) RestoreHistory(ctx context.Context, b []byte, own bool, peers HistoryPeers) error {
	var err error
	var missing *ledger.HistoryMissingError
	if own {
		err = s.st.Restore(b)
	}
	if !own || errors.As(err, &missing) {
		err = s.st.RestoreFrom(ctx, b, ledger.RestoreOptions{Source: peers})
	}
	_ = s.hist.Flush()
	s.mu.Lock()
	s.restores, s.err = append(s.restores, own), err
	s.mu.Unlock()
	return err
}

func (s *ledgerSM) restored() ([]bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.restores), s.err
}

var (
	_ HistoryProvider = (*ledgerSM)(nil)
	_ HistoryRestorer = (*ledgerSM)(nil)
)

func ledgerTestKey(name string) ed25519.PrivateKey {
	seed := sha256.Sum256([]byte("nzc raftnode test key " + name))
	return ed25519.NewKeyFromSeed(seed[:])
}

// ledgerCommands are a genesis, an account and n more commands, most of
// them refused (recorded as refusal records), a few accepted.
func ledgerCommands(t testing.TB, n int) [][]byte {
	t.Helper()
	party := func(id string, role ledger.Role) ledger.Party {
		return ledger.Party{ID: id, Role: role, PublicKey: ledgerTestKey(id).Public().(ed25519.PublicKey)}
	}
	sign := func(b ledger.Body, signer string) []byte {
		cmd, err := ledger.Sign(b, signer, ledgerTestKey(signer))
		if err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	ps := []ledger.Party{party("a1", ledger.RoleAuditor), party("admin", ledger.RoleAdmin), party("h1", ledger.RoleHospital)}
	for i := range n / 10 {
		ps = append(ps, party(fmt.Sprintf("s%02d", i), ledger.RoleStudent))
	}
	slices.SortFunc(ps, func(a, b ledger.Party) int { return strings.Compare(a.ID, b.ID) })
	out := [][]byte{
		sign(&ledger.Genesis{Origin: "test.nzc/snapfetch", Parties: ps, Timestamp: 1}, "admin"),
		sign(&ledger.OpenAccount{Hospital: "h1", CapEpsilon: 8, CapDelta: 1e-5, Timestamp: 2}, "h1"),
	}
	for i := range n {
		if i%10 == 0 {
			out = append(out, sign(&ledger.RegisterStudent{Student: fmt.Sprintf("s%02d", i/10), MaxAnswers: uint64(i), Timestamp: int64(3 + i)}, "admin"))
		} else {
			out = append(out, []byte(fmt.Sprintf("refused %d", i)))
		}
	}
	return out
}

// newLedgerCluster is a three-auditor TLS cluster replicating ledgerSMs
// that snapshot often and keep few log entries after a snapshot.
func newLedgerCluster(t *testing.T) (*tlsCluster, []*ledgerSM) {
	base := t.TempDir()
	sms := make([]*ledgerSM, 3)
	machines := make([]StateMachine, 3)
	for i := range sms {
		sms[i] = newLedgerSM(t, filepath.Join(base, fmt.Sprintf("ledger-%d", i)))
		machines[i] = sms[i]
	}
	c := newTLSClusterConfigured(t, 3, machines, 0, func(cfg *Config) {
		cfg.SnapshotThreshold, cfg.TrailingLogs = 1<<20, 4
	})
	return c, sms
}

// wipeAndRejoin submits cmds, has the leader snapshot (compacting its log),
// wipes follower f's data and ledger and starts it again at its address:
// only a snapshot can bring it up to date.
func wipeAndRejoin(t *testing.T, c *tlsCluster, sms []*ledgerSM, cmds [][]byte, prepare func(leader, follower int)) (int, int) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l := c.leader()
	for _, cmd := range cmds {
		if _, _, err := submitRetry(ctx, c.nodes[l], cmd); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.nodes[l].raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	if first, _ := c.nodes[l].logs.FirstIndex(); first < uint64(len(cmds))/2 {
		t.Fatalf("the leader's log starts at %d after a snapshot of %d commands", first, len(cmds))
	}
	f := (l + 1) % 3
	addr := c.addrs[f]
	c.stop(f)
	if err := os.RemoveAll(c.dirs[f]); err != nil {
		t.Fatal(err)
	}
	sms[f] = newLedgerSM(t, filepath.Join(t.TempDir(), "wiped"))
	c.machines[f] = sms[f]
	if prepare != nil {
		prepare(l, f)
	}
	c.run(f, c.config(f, addr, []string{c.addrs[l]}))
	return l, f
}

// A follower whose data directory was wiped rejoins: the leader's state
// snapshot holds no entries, so it fetches the history from the others,
// checks it against the snapshot's head and replays it, and ends with the
// leader's log entry for entry; a restart then restores its own snapshot
// over its own history without fetching or replaying.
func TestWipedFollowerFetchesTheHistory(t *testing.T) {
	c, sms := newLedgerCluster(t)
	cmds := ledgerCommands(t, 60)
	l, f := wipeAndRejoin(t, c, sms, cmds, nil)
	want := int64(len(cmds))
	auditortest.WaitFor(t, 30*time.Second, "the wiped follower to restore and hold the leader's log", func() bool {
		restores, _ := sms[f].restored()
		return len(restores) > 0 && sms[f].st.TreeSize() == want && sms[f].st.RootHash() == sms[l].st.RootHash()
	})
	restores, err := sms[f].restored()
	if err != nil || len(restores) == 0 || restores[0] {
		t.Fatalf("restores %v (own?), last error %v; want one from the leader", restores, err)
	}
	if sms[f].hist.Len() != want {
		t.Fatalf("the follower's history holds %d entries, want %d", sms[f].hist.Len(), want)
	}
	mine, _ := sms[f].st.Entries(0, want)
	theirs, _ := sms[l].st.Entries(0, want)
	for i := range mine {
		if !bytes.Equal(mine[i], theirs[i]) {
			t.Fatalf("entry %d differs", i)
		}
	}
	auditortest.WaitFor(t, 10*time.Second, "the follower to be ready", func() bool { return c.nodes[f].Ready() == nil })

	// Its own snapshot, restored at a restart over its own history, is
	// adopted: nothing fetched.
	if err := c.nodes[f].raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	addr := c.addrs[f]
	c.stop(f)
	if err := sms[f].hist.Close(); err != nil {
		t.Fatal(err)
	}
	again := newLedgerSM(t, filepath.Dir(sms[f].hist.path))
	sms[f], c.machines[f] = again, again
	for i := range sms {
		if i != f {
			sms[i].tamper.Store(1) // a fetch would be refused
		}
	}
	c.run(f, c.config(f, addr, []string{c.addrs[l]}))
	auditortest.WaitFor(t, 30*time.Second, "the restarted follower to hold the log", func() bool {
		restores, _ := again.restored()
		return len(restores) > 0 && again.st.TreeSize() == want && again.st.RootHash() == sms[l].st.RootHash()
	})
	if restores, err := again.restored(); err != nil || len(restores) != 1 || !restores[0] {
		t.Fatalf("restores at restart %v, error %v; want one of its own", restores, err)
	}
}

// A follower rejoining from a snapshot refuses a history with one entry
// changed: it does not become ready, and says why.
func TestWipedFollowerRefusesATamperedHistory(t *testing.T) {
	c, sms := newLedgerCluster(t)
	cmds := ledgerCommands(t, 60)
	_, f := wipeAndRejoin(t, c, sms, cmds, func(l, f int) {
		for i := range sms {
			if i != f {
				sms[i].tamper.Store(31) // entry 30
			}
		}
	})
	auditortest.WaitFor(t, 30*time.Second, "the follower to refuse the history", func() bool {
		_, err := sms[f].restored()
		return err != nil
	})
	_, err := sms[f].restored()
	// Entry 30 is a refusal record, whose change shows in the record of
	// the tree root that entry 31 holds.
	if !errors.Is(err, ledger.ErrSnapshotMismatch) || !strings.Contains(err.Error(), "entry 31") {
		t.Fatalf("restore error %v, want ErrSnapshotMismatch naming entry 31", err)
	}
	rerr := c.nodes[f].Ready()
	if rerr == nil || !strings.Contains(rerr.Error(), "does not replay") {
		t.Fatalf("Ready: %v, want the restore's error", rerr)
	}
	if n := sms[f].st.TreeSize(); n != 0 {
		t.Fatalf("the follower kept %d entries of a history it refused", n)
	}
	t.Log(rerr)
}

var _ ledger.KeyIndex = (*History)(nil)

// An entries answer and request decode only from their canonical form:
// what decodes encodes back to the same bytes.
func FuzzDecodeEntries(f *testing.F) {
	var list []byte
	list = append(list, 2, 3, 'a', 'b', 'c', 0)
	f.Add(list, encodeRange(3, 10))
	f.Add([]byte{1, 200}, []byte{0, 1})
	f.Fuzz(func(t *testing.T, answer, request []byte) {
		if es, err := decodeEntries(answer, 1<<20); err == nil {
			again := binary.AppendUvarint(nil, uint64(len(es)))
			for _, e := range es {
				again = binary.AppendUvarint(again, uint64(len(e)))
				again = append(again, e...)
			}
			if !bytes.Equal(again, answer) && len(es) > 0 {
				// Uvarints have one shortest form; a longer one decodes too.
				if _, err := decodeEntries(again, 1<<20); err != nil {
					t.Fatalf("re-encoded answer does not decode: %v", err)
				}
			}
		}
		if from, to, err := decodeRange(request); err == nil {
			if from < 0 || to <= from {
				t.Fatalf("range [%d, %d) decoded", from, to)
			}
		}
	})
}
