package auditor

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/auditor/raftnode"
)

// federation admits raft joins by the ledger's registered auditors and the
// configured binding of auditor ids to raft addresses.
type federation struct {
	state   *ledger.State
	members []raftnode.Peer
}

// AdmitJoin implements raftnode.Federation. Before the genesis the ledger
// registers nobody, and only the binding decides.
func (f federation) AdmitJoin(id, addr string) error {
	if _, ok := f.state.GenesisHash(); ok {
		registered := f.state.Auditors(f.state.TreeSize())
		if !slices.ContainsFunc(registered, func(p ledger.Party) bool { return p.ID == id }) {
			return fmt.Errorf("%s is not an auditor registered in the ledger; register it with a signed command first", id)
		}
	}
	for _, m := range f.members {
		switch {
		case m.ID == id && m.Addr != addr:
			return fmt.Errorf("the configured peers bind %s to %s", id, m.Addr)
		case m.ID != id && m.Addr == addr:
			return fmt.Errorf("the configured peers bind %s to auditor %s", addr, m.ID)
		}
	}
	return nil
}

// screen refuses, before it is proposed, a command the ledger would refuse
// now for anything but a budget running out (ledger.Code.Budgetary): one
// that does not decode, is not signed by a registered party with its
// registered key, or breaks another rule of the ledger (State.Check). A
// sound charge its budget refuses passes, so that the log records refused
// spending in a fixed-size record — at most RecordBurst of them at once
// per signer, then one every RecordEvery: beyond that pace the sender gets
// the same budgetary refusal, not proposed and not recorded. Only the
// leader screens and proposes, so the pace holds across the federation
// while one leader lasts; each election starts a new leader's pace.
//
// A retry of a command the log already accepted is not proposed again
// either: it is answered with the ledger's duplicate result, which names
// the original entry (whose receipt the caller needs), so that replaying
// an accepted command, which a duplicate entry would keep whole, never
// grows the log. Only a retry racing its original's commit reaches the
// log as a duplicate entry.
//
// It checks with this auditor's clock (State.CheckAt), so that a hospital's
// account commands stamped far from it are refused: the ledger paces them
// by their stamps.
type screen struct {
	state   *ledger.State
	now     func() time.Time
	records *recordPace
}

func newScreen(st *ledger.State, now func() time.Time) screen {
	return screen{state: st, now: now, records: &recordPace{next: map[string]time.Time{}}}
}

const (
	// RecordBurst is how many budgetary refusals of one signer's commands
	// the leader proposes, to be recorded, at once.
	RecordBurst = 100
	// RecordEvery is the time after which it proposes one more.
	RecordEvery = 50 * time.Millisecond
)

// recordPace is a token bucket (GCRA) per signer over the leader's clock.
// Only registered signers reach it (a budgetary refusal is of a sound,
// signed command), so it holds one time per registered party at most.
type recordPace struct {
	mu   sync.Mutex
	next map[string]time.Time // when the signer's bucket is full again
}

// take reports whether signer may have one more refusal recorded at now.
func (p *recordPace) take(signer string, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	tat := p.next[signer]
	if tat.Before(now) {
		tat = now
	}
	tat = tat.Add(RecordEvery)
	if tat.Sub(now) > RecordBurst*RecordEvery {
		return false
	}
	p.next[signer] = tat
	return true
}

// Screen implements raftnode.Screen.
func (s screen) Screen(_ string, cmd []byte) []byte {
	now := s.now()
	r := s.state.CheckAt(cmd, now.UnixNano())
	switch {
	case r.Status == ledger.StatusDuplicate:
	case r.Status == ledger.StatusRefused && r.Code.Budgetary():
		if c, err := ledger.DecodeCommand(cmd); err == nil && s.records.take(c.Signer, now) {
			return nil
		}
	case r.Status != ledger.StatusRefused:
		return nil
	}
	r.Index = uint64(s.state.TreeSize())
	return ledger.EncodeResult(r)
}
