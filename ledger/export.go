package ledger

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

const (
	exportTag     = 'E'
	maxKeyLen     = 512
	maxNoteLen    = 64 << 10
	maxReportFail = 100
)

// Export is what a compliance officer verifies offline: every entry, the
// signed checkpoints, and the auditors' verifier keys.
//
//	version u8 | 'E' | count u64 | count × entry (u32 length, bytes)
//	  | keys u32 | keys × string | checkpoints u32 | checkpoints × (u32 length, signed note)
type Export struct {
	Entries     [][]byte
	Checkpoints [][]byte // signed notes
	Keys        []string // note verifier keys of the auditors
}

// Encode returns the canonical bytes of the export.
func (x Export) Encode() ([]byte, error) {
	return encodeEntries(exportTag, x.Entries, exportTail(x.Keys, x.Checkpoints))
}

// exportTail encodes what follows an export's entries.
func exportTail(keys []string, checkpoints [][]byte) func(*encoder) {
	return func(e *encoder) {
		e.count("keys", len(keys))
		for _, k := range keys {
			e.str("key", k, maxKeyLen)
		}
		e.count("checkpoints", len(checkpoints))
		for _, c := range checkpoints {
			if len(c) > maxNoteLen {
				e.fail("a checkpoint is %d bytes, the limit is %d", len(c), maxNoteLen)
			}
			e.blob("checkpoint", c)
		}
	}
}

// DecodeExport decodes the canonical encoding of an export.
func DecodeExport(b []byte) (Export, error) {
	d := &decoder{buf: b}
	var x Export
	x.Entries = decodeEntries(d, exportTag)
	n := d.count("keys")
	for i := 0; i < n && d.err == nil; i++ {
		x.Keys = append(x.Keys, d.str("key", maxKeyLen))
	}
	n = d.count("checkpoints")
	for i := 0; i < n && d.err == nil; i++ {
		c := d.blob("checkpoint")
		if d.err == nil && len(c) > maxNoteLen {
			d.fail("a checkpoint is %d bytes, the limit is %d", len(c), maxNoteLen)
		}
		x.Checkpoints = append(x.Checkpoints, c)
	}
	if err := d.end(); err != nil {
		return Export{}, fmt.Errorf("ledger: export: %w", err)
	}
	return x, nil
}

// Export returns the log's export with the given signed checkpoints and the
// verifier keys of every auditor registered in the log.
func (s *State) Export(checkpoints [][]byte) ([]byte, error) {
	var b bytes.Buffer
	if err := s.WriteExport(&b, s.TreeSize(), checkpoints); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// exportChunk is how many entries WriteExport reads from the history at once.
const exportChunk = 1024

// WriteExport writes the export of the log's first size entries, with the
// given signed checkpoints and the verifier keys of the auditors registered
// in those entries: the bytes Export.Encode gives, written a chunk of
// entries at a time as they are read from the history, so the log is never
// held in memory whole. Nothing is written when size or a checkpoint is
// wrong; an error from w or the history ends the export part-written.
func (s *State) WriteExport(w io.Writer, size int64, checkpoints [][]byte) error {
	if n := s.TreeSize(); size < 0 || size > n {
		return fmt.Errorf("ledger: cannot export %d entries: the log has %d", size, n)
	}
	return WriteExport(w, s, size, checkpoints)
}

// ExportSource is what WriteExport reads a log from: a State, or a reader
// of one (an auditor's dashboard).
type ExportSource interface {
	// Entries returns the encoded entries [from, to).
	Entries(from, to int64) ([][]byte, error)
	// AuditorKeys returns the verifier keys of the auditors registered in
	// the first size entries.
	AuditorKeys(size int64) ([]string, error)
}

// WriteExport writes the export of src's first size entries as
// State.WriteExport does, a chunk of entries at a time.
func WriteExport(w io.Writer, src ExportSource, size int64, checkpoints [][]byte) error {
	if size < 0 {
		return fmt.Errorf("ledger: cannot export %d entries", size)
	}
	keys, err := src.AuditorKeys(size)
	if err != nil {
		return err
	}
	tail := &encoder{}
	exportTail(keys, checkpoints)(tail)
	if tail.err != nil {
		return tail.err
	}
	head := &encoder{}
	head.u8(Version)
	head.u8(exportTag)
	head.u64(uint64(size))
	if _, err := w.Write(head.buf); err != nil {
		return err
	}
	for from := int64(0); from < size; from += exportChunk {
		to := min(from+exportChunk, size)
		entries, err := src.Entries(from, to)
		if err != nil {
			return err
		}
		if int64(len(entries)) != to-from {
			return fmt.Errorf("ledger: export: asked for entries [%d, %d), the log gave %d", from, to, len(entries))
		}
		buf := head.buf[:0]
		for _, b := range entries {
			buf = binary.BigEndian.AppendUint32(buf, uint32(len(b)))
			buf = append(buf, b...)
		}
		if _, err := w.Write(buf); err != nil {
			return err
		}
		head.buf = buf
	}
	_, err = w.Write(tail.buf)
	return err
}

// VerifyOptions are what the verifier brings from outside the export.
type VerifyOptions struct {
	// TrustedKeys are the auditors' verifier keys as the verifier knows them
	// independently. When set, only signatures by these keys count, and every
	// one must be the key the log registered for that auditor. When empty,
	// the keys registered in the log's own entries are used, and the report
	// says the keys were not pinned.
	TrustedKeys []string
	// Earlier are signed checkpoints the verifier kept from earlier audits;
	// the export must extend each of them.
	Earlier [][]byte
	// Directory, when set, pins the federation's parties as the verifier
	// knows them independently: the genesis must be signed by an
	// administrator of the directory with its key, and every party the log
	// registers must be in the directory with the same role and key.
	Directory []Party
	// GenesisHash, when set, pins the genesis command: the SHA-256 of its
	// bytes.
	GenesisHash []byte
	// Unpinned accepts a check that neither Directory nor GenesisHash pins.
	// Without either, the parties and the auditor keys come from the log
	// and from TrustedKeys, which a fabricated federation supplies as
	// easily as the real one: such a check fails unless Unpinned is set,
	// and the report then says the federation is unpinned
	// (Report.FederationPinned is false either way).
	Unpinned bool
	// Now is the verifier's time, seconds since the Unix epoch; when set,
	// the report gives the latest checkpoint's age.
	Now int64
	// Workers is how many goroutines decode entries, check signatures and
	// recompute costs ahead of the replay (runtime.GOMAXPROCS(0) uses every
	// core); 0 means one. The result does not depend on it.
	Workers int
	// keepRoots is how many of the latest tree sizes a streamed
	// verification keeps the root of; 0 means recentRoots (tests keep
	// fewer).
	keepRoots int64
	// MaxAge, when positive, is the oldest (in seconds, by Now) the latest
	// checkpoint may be: a majority of the auditors must have cosigned it
	// at most MaxAge ago. It detects an export frozen in the past.
	MaxAge int64
}

// Check is one verification step and its outcome.
type Check struct {
	Name       string `json:"name"`
	OK         bool   `json:"ok"`
	Entry      *int64 `json:"entry,omitempty"`      // the entry the check is about
	Checkpoint *int   `json:"checkpoint,omitempty"` // the export's checkpoint the check is about
	Detail     string `json:"detail"`
}

// CheckpointReport is what was found about one checkpoint.
type CheckpointReport struct {
	Source  string    `json:"source"` // "export" or "earlier"
	Size    int64     `json:"size"`
	Root    tlog.Hash `json:"root"`
	Signers []string  `json:"signers"`
	Quorum  int       `json:"quorum"`
	Time    int64     `json:"time"` // by when a majority had cosigned it, seconds since the Unix epoch
	OK      bool      `json:"ok"`
}

// Report is the structured result of Verify: what was checked, what failed
// (naming the entry or checkpoint), and the balances replay recomputed.
type Report struct {
	OK         bool      `json:"ok"`
	Origin     string    `json:"origin"`
	Entries    int64     `json:"entries"`
	Replayed   int64     `json:"replayed"` // entries replayed before the first that does not reproduce; Accounts are as of then
	Root       tlog.Hash `json:"root"`
	KeysPinned bool      `json:"keys_pinned"`
	// FederationPinned says the federation's parties were pinned from
	// outside the log (VerifyOptions.Directory or GenesisHash).
	FederationPinned bool  `json:"federation_pinned"`
	Accepted         int64 `json:"accepted"`
	Refused          int64 `json:"refused"`
	Duplicates       int64 `json:"duplicates"`
	// CheckpointTime is the time (seconds since the Unix epoch) by which a
	// majority of the auditors had cosigned the latest checkpoint; Age is
	// how long before the verifier's time that was, when it gave one.
	CheckpointTime int64              `json:"checkpoint_time"`
	Age            *int64             `json:"age_seconds,omitempty"`
	Checks         []Check            `json:"checks"`
	Checkpoints    []CheckpointReport `json:"checkpoints"`
	Accounts       []Account          `json:"accounts"`
	// SignedCheckpoints are the export's signed checkpoints as read, for
	// a verifier to keep the latest of a verified export.
	SignedCheckpoints [][]byte `json:"-"`
}

// Failures returns the checks that failed.
func (r *Report) Failures() []Check {
	var out []Check
	for _, c := range r.Checks {
		if !c.OK {
			out = append(out, c)
		}
	}
	return out
}

// OnlyUnpinned says the only failed check is that the federation was not
// pinned (VerifyOptions.Unpinned not given): everything else verified.
func (r *Report) OnlyUnpinned() bool {
	f := r.Failures()
	return len(f) == 1 && f[0].Name == CheckFederation && !r.FederationPinned
}

func (r *Report) add(c Check) {
	if !c.OK && len(r.Failures()) >= maxReportFail {
		return
	}
	r.Checks = append(r.Checks, c)
}

func entryRef(i int64) *int64 { return &i }
func cpRef(i int) *int        { return &i }

// Verify checks an export offline, trusting nothing in it but what it can
// recompute:
//
//   - every entry decodes, carries its own index (so none is missing or
//     reordered), and replaying its command on the state of the entries
//     before it reproduces it byte for byte — signatures, caps and
//     outcomes included;
//   - every checkpoint is signed by a majority of the auditors registered
//     at its size (or of TrustedKeys), is of this log's origin, and its root
//     is the tree hash of that many exported entries;
//   - the latest checkpoint covers every entry;
//   - each earlier checkpoint the verifier brings is extended by the export;
//   - no two checkpoints of the same size disagree (a fork);
//
// and it reports every hospital's ε as replay recomputes it. It is
// VerifyReader over the export's bytes.
func Verify(export []byte, opts VerifyOptions) *Report {
	return VerifyReader(context.Background(), bytes.NewReader(export), opts)
}

// VerifyReader is Verify reading the export from src as a stream, entry
// by entry: it keeps the decision state replay rebuilds, the right edge of
// the entries' Merkle tree with the roots of its latest sizes and of the
// earlier checkpoints' sizes, and the entries in flight — never the log.
// Signatures, decoding and costs are checked on every core ahead of the
// replay, which decides the entries one at a time in log order; the result
// is Verify's. An export checkpoint of a size more than 65,536 entries
// before the export's end (an auditor's export carries the checkpoint of
// its last entry) is checked by reading the entries again when src is an
// io.Seeker at the export's start, and fails otherwise.
func VerifyReader(ctx context.Context, src io.Reader, opts VerifyOptions) *Report {
	r := &Report{KeysPinned: len(opts.TrustedKeys) > 0, FederationPinned: len(opts.Directory) > 0 || len(opts.GenesisHash) > 0}
	defer func() {
		r.OK = len(r.Failures()) == 0
	}()
	undecoded := func(err error) *Report {
		*r = Report{KeysPinned: r.KeysPinned, FederationPinned: r.FederationPinned}
		r.add(Check{Name: "decode", Detail: err.Error()})
		return r
	}
	var start int64
	seeker, _ := src.(io.Seeker)
	if seeker != nil {
		var err error
		if start, err = seeker.Seek(0, io.SeekCurrent); err != nil {
			seeker = nil
		}
	}
	x, err := NewExportReader(src)
	if err != nil {
		return undecoded(err)
	}
	want := map[int64]bool{}
	for _, b := range opts.Earlier {
		if c, err := PeekCheckpoint(b); err == nil && c.Size < x.Len() {
			want[c.Size] = true
		}
	}
	v := newStreamVerify(x.Len(), want, cmp.Or(opts.keepRoots, recentRoots))
	if err := v.run(ctx, x, opts.Workers); err != nil {
		return undecoded(err)
	}
	keys, checkpoints, err := x.Tail()
	if err != nil {
		return undecoded(err)
	}
	r.add(Check{Name: "decode", OK: true, Detail: fmt.Sprintf("%d entries, %d checkpoints, %d keys", x.Len(), len(checkpoints), len(keys))})
	r.SignedCheckpoints = checkpoints
	r.Entries = x.Len()
	r.Root = v.tree.root()

	// The checkpoints' roots by size, and any the stream went past.
	roots := map[int64]tlog.Hash{}
	var missing []int64
	for _, b := range checkpoints {
		if c, err := PeekCheckpoint(b); err == nil {
			roots[c.Size] = c.Root
			if _, ok := v.rootAt(c.Size); !ok && c.Size <= r.Entries {
				missing = append(missing, c.Size)
			}
		}
	}
	if len(missing) > 0 && seeker != nil {
		if err := v.reread(ctx, seeker, start, missing); err != nil {
			r.add(Check{Name: "tree", Detail: fmt.Sprintf("reading the export again for the roots of checkpoints more than %d entries before its end: %v", len(v.ring), err)})
		}
	}

	// Replay stopped at the first entry that does not reproduce: the
	// state after it is not the log's.
	if v.blame != nil {
		want, known := roots[v.blame.i+1]
		v.stopErr = v.blame.resolve(want, known)
	}
	r.Replayed = v.replayed
	if v.stopped {
		var at *int64
		if re, ok := v.stopErr.(*ReplayError); ok {
			at = entryRef(re.Index)
		}
		r.add(Check{Name: "replay", Entry: at, Detail: v.stopErr.Error()})
		r.add(Check{Name: "replay", Entry: entryRef(v.replayed), Detail: fmt.Sprintf("entries %d to %d were not replayed: the state from entry %d on is not the log's", v.replayed, r.Entries-1, v.replayed)})
	} else {
		r.add(Check{Name: "replay", OK: true, Detail: fmt.Sprintf("all %d entries decode, are in order, and replaying their commands reproduces them (signatures, caps, outcomes, recorded roots)", v.replayed)})
	}
	for _, c := range v.costChecks {
		r.add(c)
	}
	if len(v.costChecks) == 0 {
		r.add(Check{Name: "cost", OK: true, Detail: fmt.Sprintf("each of the %d accepted charges and sessions states at least the cost recomputed from its mechanism and parameters", v.costChecked)})
	}
	r.Accepted, r.Refused, r.Duplicates = v.accepted, v.refused, v.duplicates
	st := v.st
	r.Origin = st.Origin()
	r.Accounts = st.Accounts()
	if r.Origin == "" {
		r.add(Check{Name: "genesis", Detail: "the log has no accepted genesis, so no origin and no auditors"})
		return r
	}

	r.pinFederation(st, v.genesis, opts)

	// Keys: the export's and the verifier's must be the log's auditors.
	logKeys, _ := st.AuditorKeys(st.TreeSize())
	for _, k := range keys {
		r.add(keyCheck("export key", k, logKeys))
	}
	for _, k := range opts.TrustedKeys {
		r.add(keyCheck("trusted key", k, logKeys))
	}
	if !r.KeysPinned {
		r.add(Check{Name: "keys", OK: true, Detail: "auditor keys taken from the log's own genesis and registrations; pin them with trusted keys to detect a wholly fabricated log"})
	}

	// Checkpoints.
	latest := int64(-1)
	for j, b := range checkpoints {
		if sc, ok := r.checkpoint("export", j, b, st, v, opts.TrustedKeys); ok {
			if sc.Size > latest || (sc.Size == latest && sc.Time > r.CheckpointTime) {
				latest, r.CheckpointTime = sc.Size, sc.Time
			}
		}
	}
	for j, b := range opts.Earlier {
		r.checkpoint("earlier", j, b, st, v, opts.TrustedKeys)
	}
	switch {
	case len(checkpoints) == 0:
		r.add(Check{Name: "coverage", Detail: "the export has no checkpoint: nothing shows the auditors agreed to these entries"})
	case latest < r.Entries:
		r.add(Check{Name: "coverage", Entry: entryRef(max(latest, 0)), Detail: fmt.Sprintf("entries from %d on are not covered by a quorum-signed checkpoint", max(latest, 0))})
	default:
		r.add(Check{Name: "coverage", OK: true, Detail: fmt.Sprintf("a quorum-signed checkpoint covers all %d entries", r.Entries)})
	}
	r.forks(checkpoints, opts.Earlier, st, opts.TrustedKeys)
	if latest >= 0 {
		r.freshness(opts)
	}
	return r
}

// freshness reports the age of the latest checkpoint and, with MaxAge,
// fails an export whose auditors' majority cosigned it too long ago.
func (r *Report) freshness(opts VerifyOptions) {
	if opts.Now == 0 {
		if opts.MaxAge > 0 {
			r.add(Check{Name: "freshness", Detail: "a maximum age needs the verifier's time"})
		}
		return
	}
	age := opts.Now - r.CheckpointTime
	r.Age = &age
	switch {
	case opts.MaxAge > 0 && age > opts.MaxAge:
		r.add(Check{Name: "freshness", Detail: fmt.Sprintf("a majority of the auditors cosigned the latest checkpoint %s ago, more than the maximum age %s: the export is stale or was frozen; fetch a fresh one from every auditor", FormatAge(age), FormatAge(opts.MaxAge))})
	case opts.MaxAge > 0:
		r.add(Check{Name: "freshness", OK: true, Detail: fmt.Sprintf("a majority of the auditors cosigned the latest checkpoint %s ago, within the maximum age %s", FormatAge(age), FormatAge(opts.MaxAge))})
	default:
		r.add(Check{Name: "freshness", OK: true, Detail: fmt.Sprintf("a majority of the auditors cosigned the latest checkpoint %s ago (no maximum age given: --max-age fails an older export)", FormatAge(age))})
	}
}

func keyCheck(name, key string, logKeys []string) Check {
	v, err := note.NewVerifier(key)
	if err != nil {
		return Check{Name: name, Detail: fmt.Sprintf("%q is not a verifier key: %v", key, err)}
	}
	if slices.Contains(logKeys, key) {
		return Check{Name: name, OK: true, Detail: fmt.Sprintf("%s is an auditor of the log with this key", v.Name())}
	}
	for _, k := range logKeys {
		if strings.HasPrefix(k, v.Name()+"+") {
			return Check{Name: name, Detail: fmt.Sprintf("the log registered a different key for auditor %s", v.Name())}
		}
	}
	return Check{Name: name, Detail: fmt.Sprintf("%s is not an auditor of the log", v.Name())}
}

// signingKeys returns the keys whose signatures count for a checkpoint of
// size: the auditors registered by then, restricted to the trusted keys if
// any. The majority is always of all registered auditors.
func signingKeys(st *State, size int64, trusted []string) []string {
	keys, _ := st.AuditorKeys(min(size, st.TreeSize()))
	if len(trusted) == 0 {
		return keys
	}
	return slices.DeleteFunc(keys, func(k string) bool { return !slices.Contains(trusted, k) })
}

// openQuorum opens signed, the checkpoint c of st's log, and requires a
// majority of the auditors st had registered at c's size to have signed it
// among the trusted keys. It returns the signers that verified and how many
// auditors the majority is of, also on error.
func openQuorum(st *State, c Checkpoint, signed []byte, trusted []string) (SignedCheckpoint, int, error) {
	all, _ := st.AuditorKeys(min(c.Size, st.TreeSize()))
	sc, err := OpenCheckpoint(signed, signingKeys(st, c.Size, trusted))
	sc.Quorum = Quorum(len(all))
	sc.Time = quorumTime(sc.Times, sc.Quorum)
	if err == nil && len(sc.Signers) < sc.Quorum {
		err = &QuorumError{Checkpoint: c, Signers: sc.Signers, Auditors: len(all)}
	}
	return sc, len(all), err
}

func (r *Report) checkpoint(source string, j int, b []byte, st *State, v *streamVerify, trusted []string) (SignedCheckpoint, bool) {
	name := source + " checkpoint"
	c, err := PeekCheckpoint(b)
	if err != nil {
		r.add(Check{Name: name, Checkpoint: cpRef(j), Detail: err.Error()})
		return SignedCheckpoint{}, false
	}
	rep := CheckpointReport{Source: source, Size: c.Size, Root: c.Root}
	defer func() { r.Checkpoints = append(r.Checkpoints, rep) }()
	if c.Origin != st.Origin() {
		r.add(Check{Name: name, Checkpoint: cpRef(j), Detail: fmt.Sprintf("origin %s is not the log's (%s)", c.Origin, st.Origin())})
		return SignedCheckpoint{}, false
	}
	sc, auditors, err := openQuorum(st, c, b, trusted)
	rep.Signers, rep.Quorum, rep.Time = sc.Signers, Quorum(auditors), sc.Time
	if err != nil {
		r.add(Check{Name: name, Checkpoint: cpRef(j), Detail: fmt.Sprintf("size %d: %v", c.Size, err)})
		return sc, false
	}
	if n := v.tree.Len(); c.Size > n {
		r.add(Check{Name: name, Checkpoint: cpRef(j), Entry: entryRef(n),
			Detail: fmt.Sprintf("signed for %d entries but the export has %d: entries were removed", c.Size, n)})
		return sc, false
	}
	root, ok := v.rootAt(c.Size)
	if !ok {
		r.add(Check{Name: name, Checkpoint: cpRef(j), Detail: fmt.Sprintf(
			"size %d: the export was read as a stream, which keeps the roots of its last %d sizes only, and this checkpoint is older: verify the export from a file", c.Size, len(v.ring))})
		return sc, false
	}
	if root != c.Root {
		// Every entry records the tree root of the entries before it, and
		// replay checked those records; so when replay passed, the first
		// entry nothing vouches for is the checkpoint's last one.
		var at *int64
		if c.Size > 0 {
			at = entryRef(c.Size - 1)
		}
		r.add(Check{Name: name, Checkpoint: cpRef(j), Entry: at, Detail: fmt.Sprintf(
			"size %d: root %s signed by %v, but the exported entries hash to %s: entry %d was changed (or the entries from an earlier one were rewritten together with the roots they record)",
			c.Size, c.Root, sc.Signers, root, c.Size-1)})
		return sc, false
	}
	rep.OK = true
	r.add(Check{Name: name, OK: true, Checkpoint: cpRef(j), Detail: fmt.Sprintf("size %d signed by %v (quorum %d of %d), root matches the entries", c.Size, sc.Signers, Quorum(auditors), auditors)})
	return sc, true
}

// forks compares every pair of checkpoints that carry at least one valid
// auditor signature: the same size with different roots is a fork, whoever
// signed it.
func (r *Report) forks(exported, earlier [][]byte, st *State, trusted []string) {
	type seen struct {
		c       Checkpoint
		signers []string
		where   string
	}
	var all []seen
	collect := func(where string, list [][]byte) {
		for j, b := range list {
			c, err := PeekCheckpoint(b)
			if err != nil || c.Origin != st.Origin() {
				continue
			}
			sc, err := OpenCheckpoint(b, signingKeys(st, c.Size, trusted))
			var qe *QuorumError
			if err != nil && !(errors.As(err, &qe) && len(qe.Signers) > 0) {
				continue
			}
			signers := sc.Signers
			if qe != nil {
				signers = qe.Signers
			}
			all = append(all, seen{c: c, signers: signers, where: fmt.Sprintf("%s checkpoint %d", where, j)})
		}
	}
	collect("export", exported)
	collect("earlier", earlier)
	found := false
	for i := range all {
		for k := i + 1; k < len(all); k++ {
			if err := DetectFork(all[i].c, all[k].c); err != nil {
				found = true
				r.add(Check{Name: "fork", Detail: fmt.Sprintf("%s (signed by %v) and %s (signed by %v) are both size %d with roots %s and %s",
					all[i].where, all[i].signers, all[k].where, all[k].signers, all[i].c.Size, all[i].c.Root, all[k].c.Root)})
			}
		}
	}
	if !found {
		r.add(Check{Name: "fork", OK: true, Detail: fmt.Sprintf("no two of the %d signed checkpoints disagree", len(all))})
	}
}

// WriteText writes the report for people: one line per check, then the
// recomputed accounts.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	status := "VERIFIED"
	switch {
	case !r.OK && r.OnlyUnpinned():
		status = "NOT VERIFIED (federation UNPINNED)"
	case !r.OK:
		status = "FAILED"
	case !r.FederationPinned:
		status = "VERIFIED (federation UNPINNED, accepted)"
	}
	fmt.Fprintf(&b, "%s: ledger %s, %d entries (%d accepted, %d refused, %d duplicates), root %s\n",
		status, r.Origin, r.Entries, r.Accepted, r.Refused, r.Duplicates, r.Root)
	for _, c := range r.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		where := ""
		if c.Checkpoint != nil {
			where += fmt.Sprintf(" [checkpoint %d]", *c.Checkpoint)
		}
		if c.Entry != nil {
			where += fmt.Sprintf(" [entry %d]", *c.Entry)
		}
		fmt.Fprintf(&b, "%s %s%s: %s\n", mark, c.Name, where, c.Detail)
	}
	if r.Replayed < r.Entries {
		fmt.Fprintf(&b, "balances below are after the first %d entries only: replay stopped there\n", r.Replayed)
	}
	for _, a := range r.Accounts {
		fmt.Fprintln(&b, a)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
