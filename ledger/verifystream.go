package ledger

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/mod/sumdb/tlog"
)

const (
	// verifyBatch is how many entries a worker checks at once. At most
	// workers+3 chunks are in flight (queued for the replay, replayed,
	// being read), each entry with its decoded command (a few KiB): small
	// chunks keep that window small.
	verifyBatch = 64
	// verifyChunkBytes ends a chunk early: entries may be up to 1 MiB
	// each, and the window in flight stays a few MiB.
	verifyChunkBytes = 1 << 20
	// recentRoots is how many of the latest tree sizes a streamed
	// verification keeps the root of (32 bytes each), for the export's
	// checkpoints: an auditor's export carries the checkpoint of its last
	// entry, and sizes further back are checked by reading the export
	// again when it can be (see VerifyReader).
	recentRoots = 1 << 16
	// maxLearntKeys bounds the parties' keys the workers learn (each
	// registration copies them).
	maxLearntKeys = 1024
)

// verifyItem is one entry of the stream and what a worker learnt of it.
type verifyItem struct {
	b      []byte
	leaf   tlog.Hash // tlog.RecordHash(b)
	en     Entry
	enOK   bool // b decodes as an entry
	cmd    Command
	hasCmd bool              // the entry holds a command that decodes
	key    ed25519.PublicKey // the key the command's signature verified with, nil if none
}

type verifyChunk struct {
	first int64
	items []verifyItem
	done  chan struct{} // closed when every item is checked
}

// streamVerify replays a stream of entries in bounded memory: the
// decision state, the right edges of two trees (the exported bytes' and
// replay's), the roots of the latest recentRoots sizes and of the sizes
// asked for in advance, and the chunks in flight.
type streamVerify struct {
	st   *State
	tree edgeTree // the tree over the exported bytes
	// keys are the parties' keys as the log's accepted genesis and
	// registrations name them, for the workers.
	keys   atomic.Pointer[map[string]ed25519.PublicKey]
	keysMu sync.Mutex // held to change keys
	costs  *costCache

	ring   []tlog.Hash         // ring[s % len] is the root of size s, for the latest sizes
	want   map[int64]bool      // sizes whose root is kept whatever their age
	wanted map[int64]tlog.Hash // their roots

	replayed int64
	stopped  bool  // replay stopped at entry replayed
	stopErr  error // why
	blame    *pendingBlame
	genesis  *foundGenesis

	accepted, refused, duplicates int64

	opened      map[string]*OpenSession
	costChecks  []Check
	costChecked int
}

// pendingBlame is an entry that replays except for its record of the tree
// root before it, waiting for what the next entry (or a checkpoint) records
// as the root after it; see State.blame.
type pendingBlame struct {
	i    int64
	have tlog.Hash // the root of entries 0..i as replay produced entry i
}

// newStreamVerify returns the verification of an export of n entries that
// keeps the roots of the sizes in want and of the latest keepRoots sizes.
func newStreamVerify(n int64, want map[int64]bool, keepRoots int64) *streamVerify {
	return &streamVerify{
		st:     newState(&edgeTree{}),
		costs:  newCostCache(),
		ring:   make([]tlog.Hash, min(n+1, keepRoots)),
		want:   want,
		wanted: map[int64]tlog.Hash{},
		opened: map[string]*OpenSession{},
	}
}

// run reads every entry of x, checking entries on every core ahead of the
// replay, which takes them in order.
func (v *streamVerify) run(ctx context.Context, x *ExportReader, workers int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	workers = max(workers, 1)
	work := make(chan *verifyChunk, workers)
	order := make(chan *verifyChunk, workers+1)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for c := range work {
				for i := range c.items {
					v.check(&c.items[i])
				}
				close(c.done)
			}
		})
	}
	var readErr error
	go func() {
		defer close(order)
		defer close(work)
		for first := int64(0); ; {
			c := &verifyChunk{first: first, items: make([]verifyItem, 0, verifyBatch), done: make(chan struct{})}
			end, size := false, 0
			for len(c.items) < verifyBatch && size < verifyChunkBytes {
				b, err := x.Next()
				if err != nil {
					if err != io.EOF {
						readErr = err
					}
					end = true
					break
				}
				c.items = append(c.items, verifyItem{b: b})
				size += len(b)
			}
			if len(c.items) == 0 {
				return
			}
			select {
			case work <- c:
			case <-ctx.Done():
				return
			}
			select {
			case order <- c:
			case <-ctx.Done():
				return
			}
			if first == 0 {
				// The genesis is the first entry: check it before the
				// rest, whose signatures need the keys it registers.
				select {
				case <-c.done:
				case <-ctx.Done():
					return
				}
			}
			if end {
				return
			}
			first += int64(len(c.items))
		}
	}()
	defer wg.Wait()
	for c := range order {
		select {
		case <-c.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		v.replay(c)
	}
	if readErr != nil {
		return readErr
	}
	return ctx.Err()
}

// check does, on a worker, what needs no state: hash the entry, decode it
// and its command, and check the command's signature with the key its
// signer registered (if a worker has seen the registration yet).
func (v *streamVerify) check(it *verifyItem) {
	it.leaf = tlog.RecordHash(it.b)
	en, err := DecodeEntry(it.b)
	if err != nil {
		return
	}
	it.en, it.enOK = en, true
	if en.Command == nil {
		return
	}
	c, err := DecodeCommand(en.Command)
	if err != nil {
		return
	}
	it.cmd, it.hasCmd = c, true
	if en.Status == StatusAccepted {
		v.learn(c)
	}
	if keys := v.keys.Load(); keys != nil {
		if key, ok := (*keys)[c.Signer]; ok && c.Verify(key) {
			it.key = key
		}
	}
}

// learn adds the keys an accepted genesis or registration names to those the
// workers check signatures with. A key learnt here only saves replay a
// signature check: replay accepts a worker's check only when it was made
// with the key the signer has in the replayed state.
func (v *streamVerify) learn(c Command) {
	var ps []Party
	switch b := c.Body.(type) {
	case *Genesis:
		ps = b.Parties
	case *RegisterParty:
		ps = []Party{b.Party}
	default:
		return
	}
	v.keysMu.Lock()
	defer v.keysMu.Unlock()
	keys := map[string]ed25519.PublicKey{}
	if old := v.keys.Load(); old != nil {
		if len(*old) >= maxLearntKeys {
			return // replay checks the rest itself
		}
		maps.Copy(keys, *old)
	}
	for _, p := range ps {
		if _, ok := keys[p.ID]; !ok {
			keys[p.ID] = p.PublicKey
		}
	}
	v.keys.Store(&keys)
}

// replay replays a chunk's entries in order and records what the report
// needs of each.
func (v *streamVerify) replay(c *verifyChunk) {
	if !v.stopped {
		// Replay decides with what the workers decoded and verified:
		// Preverify's memo, which changes no result.
		memo := make(map[string]decoded, len(c.items))
		for _, it := range c.items {
			if it.hasCmd {
				memo[string(it.en.Command)] = decoded{cmd: it.cmd, verifiedWith: it.key}
			}
		}
		v.st.pre.mu.Lock()
		v.st.pre.memo = memo
		v.st.pre.mu.Unlock()
	}
	for k := range c.items {
		it := &c.items[k]
		i := c.first + int64(k)
		if v.blame != nil && v.blame.i == i-1 && it.enOK {
			v.stopErr, v.blame = v.blame.resolve(it.en.PrevRoot, true), nil
		}
		var root tlog.Hash // of entries 0..i−1
		ok := false
		if !v.stopped {
			if err := v.st.replayOne(i, it.b); err != nil {
				v.stop(i, err)
			} else {
				ok = true
				v.replayed = i + 1
				// Replay reproduced the entry, its record of the root
				// before it included.
				root = it.en.PrevRoot
			}
		}
		if !ok {
			root = v.tree.root()
		}
		v.ring[i%int64(len(v.ring))] = root
		if v.want[i] {
			v.wanted[i] = root
		}
		// Cannot fail: the stored hashes come from the tree itself.
		_ = v.tree.appendLeaf(it.leaf)
		if ok {
			v.count(it, i)
		}
		v.cost(it, i, ok)
	}
	v.st.pre.mu.Lock()
	v.st.pre.memo = nil
	v.st.pre.mu.Unlock()
}

// stop records that replay stopped at entry i.
func (v *streamVerify) stop(i int64, err error) {
	v.stopped, v.replayed, v.stopErr = true, i, err
	re, ok := err.(*ReplayError)
	if !ok || !re.prevRootOnly {
		return
	}
	v.st.mu.RLock()
	have, herr := v.st.log.treeHash(i + 1)
	v.st.mu.RUnlock()
	if herr != nil {
		return
	}
	v.blame = &pendingBlame{i: i, have: have}
}

// resolve names the changed entry, knowing (known) the root of entries
// 0..i that the entry after i or a checkpoint records.
func (p *pendingBlame) resolve(want tlog.Hash, known bool) error {
	i := p.i
	switch {
	case !known:
		return &ReplayError{Index: i, Reason: fmt.Sprintf("entry %d records a tree root that entries 0 to %d do not have: entry %d or entry %d was changed", i, i-1, i, i-1)}
	case p.have == want:
		return &ReplayError{Index: i, Reason: fmt.Sprintf("entry %d was changed: its record of the tree root before it is not the log's, which the entry after it confirms", i)}
	}
	return &ReplayError{Index: i - 1, Reason: fmt.Sprintf("entry %d was changed: entries %d and %d record tree roots that it does not produce", i-1, i, i+1)}
}

// count tallies a replayed entry and notes the log's genesis.
func (v *streamVerify) count(it *verifyItem, i int64) {
	switch it.en.Status {
	case StatusAccepted:
		v.accepted++
	case StatusRefused:
		v.refused++
	case StatusDuplicate:
		v.duplicates++
	}
	if _, ok := it.cmd.Body.(*Genesis); ok && it.en.Status == StatusAccepted && v.genesis == nil {
		v.genesis = &foundGenesis{cmd: it.cmd, at: i}
	}
}

// cost names each accepted charge, session and reservation that states less
// than it costs, and each charge in a session that names another mechanism
// or other parameters than the session opened with, over every entry
// (replay stops at the first; this names them all). An entry replay
// reproduced (replayed) was accepted by apply, which derives its cost as
// CostCheck does — the same derivation on the same grid and the same
// fields — and refuses one stated short: only the entries replay did not
// reach are derived again.
func (v *streamVerify) cost(it *verifyItem, i int64, replayed bool) {
	if !it.hasCmd || it.en.Status != StatusAccepted {
		return
	}
	c := it.cmd
	switch body := c.Body.(type) {
	case *OpenSession:
		v.opened[body.SessionID] = body
	case *Reserve:
	case *Charge:
		if o, ok := v.opened[body.Session]; ok && body.Session != "" {
			if res, ok := sessionBound(body, o.Mechanism, o.Params); !ok {
				v.costChecks = append(v.costChecks, Check{Name: "cost", Entry: entryRef(i), Detail: fmt.Sprintf("accepted charge %s is not of the mechanism its session paid for (%s): %s", body.BatchID, res.Code, res.Message)})
			}
		}
	default:
		return
	}
	v.costChecked++
	if replayed {
		return
	}
	if re := costCheck(c, v.costs); re != nil {
		v.costChecks = append(v.costChecks, Check{Name: "cost", Entry: entryRef(i), Detail: fmt.Sprintf("accepted %s %s states less than its mechanism and parameters cost (%s): %s", c.Body.Kind(), re.Subject, re.Code, re.Message)})
	}
	// The report keeps at most maxReportFail failures: keep no more.
	if len(v.costChecks) > maxReportFail {
		v.costChecks = v.costChecks[:maxReportFail]
	}
}

// rootAt returns the root of the tree of the export's first size entries,
// size ≤ the entries read, if it was kept.
func (v *streamVerify) rootAt(size int64) (tlog.Hash, bool) {
	n := v.tree.Len()
	switch {
	case size == n:
		return v.tree.root(), true
	case size < n && v.want[size]:
		return v.wanted[size], true
	case size < n && n-size <= int64(len(v.ring)):
		return v.ring[size%int64(len(v.ring))], true
	}
	return tlog.Hash{}, false
}

// reread reads the entries again from src, which starts at start, for the
// roots of the sizes given, and keeps them as wanted: only the tree is
// built again. It reads on to the oldest size whose root the first reading
// kept, and fails unless the two agree there: the bytes read again are
// those replay checked.
func (v *streamVerify) reread(ctx context.Context, src io.Seeker, start int64, sizes []int64) error {
	if _, err := src.Seek(start, io.SeekStart); err != nil {
		return err
	}
	x, err := NewExportReader(src.(io.Reader))
	if err != nil {
		return err
	}
	n := v.tree.Len()
	check := max(slices.Max(sizes), n-int64(len(v.ring))+1)
	known, _ := v.rootAt(check)
	var t edgeTree
	roots := map[int64]tlog.Hash{}
	for _, s := range sizes {
		roots[s] = tlog.Hash{}
	}
	for {
		if _, ok := roots[t.Len()]; ok {
			roots[t.Len()] = t.root()
		}
		if t.Len() == check {
			break
		}
		if t.Len()%verifyBatch == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		b, err := x.Next()
		if err != nil {
			return err
		}
		if err := t.appendLeaf(tlog.RecordHash(b)); err != nil {
			return err
		}
	}
	if t.root() != known {
		return fmt.Errorf("the export read again is not the one verified: the root of its first %d entries is %s, not %s", check, t.root(), known)
	}
	for s, h := range roots {
		v.want[s], v.wanted[s] = true, h
	}
	return nil
}
