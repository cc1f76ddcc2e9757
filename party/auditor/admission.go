package auditor

import (
	"fmt"
	"slices"
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
// sound charge its budget refuses passes: the log records refused spending,
// in a fixed-size record. A retry of a command the log already accepted is
// not proposed again either: it is answered with the ledger's duplicate
// result, which names the original entry (whose receipt the caller needs),
// so that replaying an accepted command, which a duplicate entry would keep
// whole, never grows the log. Only a retry racing its original's commit
// reaches the log as a duplicate entry.
//
// It checks with this auditor's clock (State.CheckAt), so that a hospital's
// account commands stamped far from it are refused: the ledger paces them
// by their stamps.
type screen struct {
	state *ledger.State
	now   func() time.Time
}

// Screen implements raftnode.Screen.
func (s screen) Screen(_ string, cmd []byte) []byte {
	r := s.state.CheckAt(cmd, s.now().UnixNano())
	switch {
	case r.Status == ledger.StatusDuplicate:
	case r.Status != ledger.StatusRefused || r.Code.Budgetary():
		return nil
	}
	r.Index = uint64(s.state.TreeSize())
	return ledger.EncodeResult(r)
}
