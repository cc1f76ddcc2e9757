package aggregator

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nzcfed/nzc/ledger"

	"github.com/nzcfed/nzc/crypto"
)

// State of an outbox record.
const (
	// StatePending: the answers are drawn and sealed and the charge signed,
	// but the ledger has not confirmed the charge. Nothing may be released.
	StatePending = "pending"
	// StateCommitted: the ledger committed the charge; the answers may be
	// delivered, as often as the student asks.
	StateCommitted = "committed"
)

// outboxVersion is the version of the record encoding.
const outboxVersion = 1

// Record is one batch in the outbox. The labels are sealed to the student:
// the outbox never holds them in the clear.
type Record struct {
	Version    int      `json:"version"`
	BatchID    string   `json:"batch_id"` // hex of the student's batch id
	Student    string   `json:"student"`
	State      string   `json:"state"`
	NumQueries uint32   `json:"num_queries"`
	FeatureDim uint32   `json:"feature_dim"`
	Answered   int      `json:"answered"`
	Hospitals  []string `json:"hospitals"`
	// LeftOut are the connected hospitals whose budgets could not pay for
	// the batch's worst case, or that are left out for a while after
	// missing a batch deadline: they were not asked and are not charged.
	LeftOut      []string `json:"left_out,omitempty"`
	Command      []byte   `json:"command"` // the signed ledger charge
	SealedLabels []byte   `json:"sealed_labels"`
	AnswersHash  []byte   `json:"answers_hash"`
	LedgerIndex  uint64   `json:"ledger_index,omitempty"`
	// Receipt proves the commit (committed records): what the student is
	// given with the labels.
	Receipt *ledger.Receipt `json:"receipt,omitempty"`
	// Committed is when the commit was recorded (unix milliseconds): the
	// record is pruned a retention period later.
	Committed int64 `json:"committed_unix_ms,omitempty"`
}

// ErrCorruptOutbox is matched by errors reading a damaged outbox record.
var ErrCorruptOutbox = errors.New("aggregator: outbox record is damaged")

// Outbox is a directory of records, one file per batch, each written
// atomically (temporary file, fsync, rename).
type Outbox struct{ dir string }

// OpenOutbox opens (creating if needed) the outbox directory.
func OpenOutbox(dir string) (*Outbox, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("aggregator: create outbox %s: %w", dir, err)
	}
	return &Outbox{dir: dir}, nil
}

// A batch record's file is named after its student (in hex) and its batch
// id: each student's batch ids are its own, so one student can neither
// claim another's batch nor learn that an id was used. Records written
// before (named after the batch id alone) are still read, and moved to
// their new name when their student asks for them.
func (o *Outbox) path(student, batch string) string {
	return filepath.Join(o.dir, hex.EncodeToString([]byte(student))+"-"+batch+".json")
}

func (o *Outbox) legacyPath(batch string) string { return filepath.Join(o.dir, batch+".json") }

// Put writes r atomically, replacing any earlier record of its batch.
func (o *Outbox) Put(r *Record) error {
	r.Version = outboxVersion
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return crypto.WriteFile(o.path(r.Student, r.BatchID), b, 0o600, true)
}

// Get returns the record of a student's batch; ok is false when there is
// none.
func (o *Outbox) Get(student, batch string) (*Record, bool, error) {
	r, ok, err := o.read(o.path(student, batch), student, batch)
	if ok || err != nil {
		return r, ok, err
	}
	legacy := o.legacyPath(batch)
	if r, ok, err = o.read(legacy, "", batch); !ok || err != nil || r.Student != student {
		return nil, false, err
	}
	if err := o.Put(r); err != nil {
		return nil, false, fmt.Errorf("aggregator: move outbox record %s: %w", legacy, err)
	}
	if err := os.Remove(legacy); err != nil {
		return nil, false, fmt.Errorf("aggregator: move outbox record %s: %w", legacy, err)
	}
	return r, true, nil
}

// read reads the record at path, which must be of batch (and of student,
// unless it is empty).
func (o *Outbox) read(path, student, batch string) (*Record, bool, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("aggregator: read outbox: %w", err)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil || r.Version != outboxVersion || r.BatchID != batch ||
		(student != "" && r.Student != student) || (r.State != StatePending && r.State != StateCommitted) {
		return nil, false, fmt.Errorf("%w: %s: restore it from a backup or move it away (its batch will then be refused by the ledger as a conflict)", ErrCorruptOutbox, path)
	}
	return &r, true, nil
}

// Delete removes a student's batch record (after the ledger refused its
// charge, or once its retention is over).
func (o *Outbox) Delete(student, batch string) error { return remove(o.path(student, batch)) }

// remove deletes a record file; one already gone is not an error.
func remove(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// list returns the outbox's record files: the sessions' (sessions true) or
// the batches'.
func (o *Outbox) list(sessions bool) ([]fs.DirEntry, error) {
	ents, err := os.ReadDir(o.dir)
	if err != nil {
		return nil, fmt.Errorf("aggregator: list outbox: %w", err)
	}
	var out []fs.DirEntry
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || strings.HasPrefix(name, ".") || strings.HasPrefix(name, sessionPrefix) != sessions || !strings.HasSuffix(name, ".json") {
			continue
		}
		out = append(out, e)
	}
	return out, nil
}

// records returns every batch record, by batch id.
func (o *Outbox) records() ([]*Record, error) {
	ents, err := o.list(false)
	if err != nil {
		return nil, err
	}
	var out []*Record
	for _, e := range ents {
		name := strings.TrimSuffix(e.Name(), ".json")
		path, student, batch := filepath.Join(o.dir, e.Name()), "", name
		if hs, b, ok := strings.Cut(name, "-"); ok {
			st, err := hex.DecodeString(hs)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: not an outbox record name; move it away", ErrCorruptOutbox, path)
			}
			student, batch = string(st), b
		}
		r, ok, err := o.read(path, student, batch)
		if err != nil {
			return nil, err
		}
		if ok {
			if r.Committed == 0 && r.State == StateCommitted {
				if fi, err := e.Info(); err == nil {
					r.Committed = fi.ModTime().UnixMilli() // written before commit times were kept
				}
			}
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].BatchID < out[j].BatchID })
	return out, nil
}

// Pending returns the records still waiting for the ledger, by batch id.
func (o *Outbox) Pending() ([]*Record, error) {
	all, err := o.records()
	if err != nil {
		return nil, err
	}
	var out []*Record
	for _, r := range all {
		if r.State == StatePending {
			out = append(out, r)
		}
	}
	return out, nil
}

// Prune removes the committed records committed before cutoff and returns
// how many. Pending records are never pruned: their charge may still
// commit.
func (o *Outbox) Prune(cutoff time.Time) (int, error) {
	all, err := o.records()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range all {
		if r.State != StateCommitted || !time.UnixMilli(r.Committed).Before(cutoff) {
			continue
		}
		if err := os.Remove(o.path(r.Student, r.BatchID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return n, err
		}
		if err := os.Remove(o.legacyPath(r.BatchID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return n, err
		}
		n++
	}
	return n, nil
}

// sessionPrefix starts the file names of session records; batch ids are
// hex, so the two never meet.
const sessionPrefix = "session-"

// SessionRecord is a session kept across restarts: written before
// its opening is proposed, so that a restarted aggregator proposes the same
// signed opening again (the ledger answers duplicate and the session is
// paid for once) and, once the ledger committed it, resumes the session
// instead of paying for another.
type SessionRecord struct {
	Version   int      `json:"version"`
	SessionID string   `json:"session_id"`
	Student   string   `json:"student"`
	Hospitals []string `json:"hospitals"`
	// Ensembles are the hospitals' ensemble sizes when the session opened,
	// in their order (absent from records written before sessions outlived
	// churn).
	Ensembles []int  `json:"ensembles,omitempty"`
	Teachers  int    `json:"teachers"`
	Classes   int    `json:"classes"`
	Open      []byte `json:"open"` // the signed OpenSession
	Opened    bool   `json:"opened"`
	// SealedState is the session's mechanism.SessionState (its secret
	// noise and refusals), sealed to the aggregator's own age
	// recipient: the outbox never holds noise in the clear.
	SealedState []byte `json:"sealed_state"`
	// Answered is how many queries the session has answered.
	Answered int `json:"answered,omitempty"`
}

func (o *Outbox) sessionPath(id string) string { return filepath.Join(o.dir, sessionPrefix+id+".json") }

// PutSession writes a session record atomically.
func (o *Outbox) PutSession(r *SessionRecord) error {
	r.Version = outboxVersion
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return crypto.WriteFile(o.sessionPath(r.SessionID), b, 0o600, true)
}

// DeleteSession removes a session record (the session is over).
func (o *Outbox) DeleteSession(id string) error { return remove(o.sessionPath(id)) }

// Sessions returns the session records, by session id.
func (o *Outbox) Sessions() ([]*SessionRecord, error) {
	ents, err := o.list(true)
	if err != nil {
		return nil, err
	}
	var out []*SessionRecord
	for _, e := range ents {
		id := strings.TrimSuffix(strings.TrimPrefix(e.Name(), sessionPrefix), ".json")
		b, err := os.ReadFile(o.sessionPath(id))
		if err != nil {
			return nil, fmt.Errorf("aggregator: read outbox: %w", err)
		}
		var r SessionRecord
		if err := json.Unmarshal(b, &r); err != nil || r.Version != outboxVersion || r.SessionID != id || len(r.Open) == 0 {
			return nil, fmt.Errorf("%w: %s: restore it from a backup or move it away (its session will then be replaced, and paid for again)", ErrCorruptOutbox, o.sessionPath(id))
		}
		out = append(out, &r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SessionID < out[j].SessionID })
	return out, nil
}

// burnsFile holds the burnt sessions' marks (burns), next to the batch and
// session records; its name is not a record's, so the outbox's listings
// skip it.
const burnsFile = "svt-burns.state"

// BurnMark is one hospital's mark: the nzc-svt session that burnt with it.
type BurnMark struct {
	Hospital  string   `json:"hospital"`
	Session   string   `json:"session"`
	Hospitals []string `json:"hospitals"` // the session's
	Answered  int      `json:"answered"`
	Refusals  int      `json:"refusals"`
}

type burnsState struct {
	Version int        `json:"version"`
	Marks   []BurnMark `json:"marks"`
}

// PutBurns writes the marks atomically (temporary file, fsync, rename),
// replacing the earlier ones.
func (o *Outbox) PutBurns(marks []BurnMark) error {
	b, err := json.Marshal(burnsState{Version: outboxVersion, Marks: marks})
	if err != nil {
		return err
	}
	return crypto.WriteFile(filepath.Join(o.dir, burnsFile), b, 0o600, true)
}

// Burns returns the marks PutBurns wrote last, none when it never did. A
// damaged file is an error matching ErrCorruptOutbox: the aggregator
// refuses to start rather than forget that sessions burnt.
func (o *Outbox) Burns() ([]BurnMark, error) {
	path := filepath.Join(o.dir, burnsFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("aggregator: read outbox: %w", err)
	}
	marks, err := decodeBurns(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v; restore it from a backup, or remove it to forget every burnt session (each of their hospitals may then pay for one more)", ErrCorruptOutbox, path, err)
	}
	return marks, nil
}

// decodeBurns decodes a burns file: its version, and marks of valid
// hospital and session ids, one per hospital, each hospital among its
// session's.
func decodeBurns(b []byte) ([]BurnMark, error) {
	var st burnsState
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data")
	}
	if st.Version != outboxVersion {
		return nil, fmt.Errorf("version %d, this aggregator reads %d", st.Version, outboxVersion)
	}
	seen := map[string]bool{}
	for _, m := range st.Marks {
		if err := crypto.ValidateID(m.Hospital); err != nil {
			return nil, fmt.Errorf("hospital: %w", err)
		}
		if seen[m.Hospital] {
			return nil, fmt.Errorf("hospital %s is marked twice", m.Hospital)
		}
		seen[m.Hospital] = true
		if m.Session == "" || len(m.Session) > 128 {
			return nil, fmt.Errorf("mark of %s names no session", m.Hospital)
		}
		if !slices.Contains(m.Hospitals, m.Hospital) {
			return nil, fmt.Errorf("mark of %s: session %s is not of its hospitals", m.Hospital, m.Session)
		}
		if m.Answered < 0 || m.Refusals < 0 {
			return nil, fmt.Errorf("mark of %s: negative counts", m.Hospital)
		}
	}
	return st.Marks, nil
}
