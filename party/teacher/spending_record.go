package teacher

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nzcfed/nzc/internal/atomicfile"
)

// VoteRecordFile is the file, in the teacher's state directory, that keeps
// the hospital's record of the batches it voted on and which of them it
// has seen charged to it with a majority's proof. It is replaced whole,
// atomically, before each vote leaves and after each proof is seen, so a
// restarted hospital still counts the votes it has not seen proven and
// still stops at proof_lag.
const VoteRecordFile = "votes.json"

const (
	// voteRecordVersion 2 adds each batch's binding (digest, student,
	// after) and the record's seen; a version 1 record is read with
	// unknown bindings, so no retry matches them and any student's charge
	// of the right count proves them.
	voteRecordVersion = 2
	// maxVoteRecordBytes bounds the file read at start: the record holds
	// at most proof_lag unproven batches, about 130 bytes each.
	maxVoteRecordBytes = 64 << 20
)

// VoteRecordError is a vote record that cannot be read faithfully. The
// hospital does not start over it: starting afresh would forget the votes
// it has not seen proven.
type VoteRecordError struct {
	Path string
	Err  error
}

func (e *VoteRecordError) Error() string {
	return fmt.Sprintf("teacher: the record of this hospital's votes %s cannot be read: %v; restore it from a backup of the state directory "+
		"(removing it forgets the votes not yet proven, letting the aggregator use up to proof_lag more batches of them uncharged)", e.Path, e.Err)
}

func (e *VoteRecordError) Unwrap() error { return e.Err }

// voteRecord is the file's content: the counters of Spending and every
// unproven batch, sorted by batch id.
type voteRecord struct {
	Version  int            `json:"version"`
	Hospital string         `json:"hospital"`
	Voted    int64          `json:"voted"`
	Proven   int64          `json:"proven"`
	Rejected int64          `json:"rejected"`
	Seen     uint64         `json:"seen,omitempty"` // spending.seen
	Unproven []unprovenVote `json:"unproven"`
}

type unprovenVote struct {
	Batch   string    `json:"batch"` // hex batch id
	Queries uint32    `json:"queries"`
	Digest  string    `json:"digest,omitempty"` // hex queryDigest of the features
	Student string    `json:"student,omitempty"`
	After   uint64    `json:"after,omitempty"` // the least ledger index of its charge
	At      time.Time `json:"at"`
}

func encodeVoteRecord(r voteRecord) ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// decodeVoteRecord parses a record of hospital's votes, refusing anything
// encodeVoteRecord would not have written for it.
func decodeVoteRecord(b []byte, hospital string) (voteRecord, error) {
	var r voteRecord
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return voteRecord{}, fmt.Errorf("not a vote record: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return voteRecord{}, errors.New("trailing data after the record")
	}
	switch {
	case r.Version != 1 && r.Version != voteRecordVersion:
		return voteRecord{}, fmt.Errorf("version %d, this build reads versions 1 to %d", r.Version, voteRecordVersion)
	case r.Version == 1 && r.Seen != 0:
		return voteRecord{}, errors.New("a version 1 record holds no seen size")
	case r.Hospital != hospital:
		return voteRecord{}, fmt.Errorf("it is hospital %q's record, not %q's", r.Hospital, hospital)
	case r.Voted < 0 || r.Proven < 0 || r.Rejected < 0 || r.Proven > r.Voted || int64(len(r.Unproven)) > r.Voted-r.Proven:
		return voteRecord{}, fmt.Errorf("inconsistent counts: %d voted, %d proven, %d unproven, %d rejected", r.Voted, r.Proven, len(r.Unproven), r.Rejected)
	}
	for i, u := range r.Unproven {
		id, err := hex.DecodeString(u.Batch)
		switch {
		case err != nil || len(id) == 0 || u.Batch != strings.ToLower(u.Batch):
			return voteRecord{}, fmt.Errorf("unproven batch %d: %q is not a lower-case hex batch id", i, u.Batch)
		case i > 0 && r.Unproven[i-1].Batch >= u.Batch:
			return voteRecord{}, fmt.Errorf("unproven batch %d: %s is out of order or repeated", i, u.Batch)
		case r.Version == 1 && (u.Digest != "" || u.Student != "" || u.After != 0):
			return voteRecord{}, fmt.Errorf("unproven batch %d: a version 1 record holds no binding", i)
		case u.After > r.Seen:
			return voteRecord{}, fmt.Errorf("unproven batch %d: its least charge index %d is past the record's seen size %d", i, u.After, r.Seen)
		case u.Digest == "" && u.Student == "":
			continue // voted on before bindings were kept
		}
		if d, err := hex.DecodeString(u.Digest); err != nil || len(d) != sha256.Size || u.Digest != strings.ToLower(u.Digest) {
			return voteRecord{}, fmt.Errorf("unproven batch %d: %q is not a lower-case hex SHA-256 digest", i, u.Digest)
		}
		if u.Student == "" {
			return voteRecord{}, fmt.Errorf("unproven batch %d: no student", i)
		}
	}
	return r, nil
}

// loadVoteRecord reads the record at path into s; a missing file is a
// hospital that has not voted yet.
func (s *spending) load(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return &VoteRecordError{Path: path, Err: err}
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxVoteRecordBytes+1))
	if err != nil {
		return &VoteRecordError{Path: path, Err: err}
	}
	if len(b) > maxVoteRecordBytes {
		return &VoteRecordError{Path: path, Err: fmt.Errorf("larger than %d bytes", maxVoteRecordBytes)}
	}
	r, err := decodeVoteRecord(b, s.id)
	if err != nil {
		return &VoteRecordError{Path: path, Err: err}
	}
	s.voted, s.proven, s.rejected, s.seen = r.Voted, r.Proven, r.Rejected, r.Seen
	for _, u := range r.Unproven {
		v := voted{binding: binding{student: u.Student, count: u.Queries}, after: u.After, at: u.At}
		if u.Digest != "" {
			// A version 1 record's digest stays zero: no query digest is.
			hex.Decode(v.queries[:], []byte(u.Digest))
		}
		s.unproven[u.Batch] = v
	}
	return nil
}

// saveLocked replaces the record on disk by s's; s.mu is held. Without a
// path the record lives in memory only.
func (s *spending) saveLocked() error {
	if s.path == "" {
		return nil
	}
	r := voteRecord{Version: voteRecordVersion, Hospital: s.id, Voted: s.voted, Proven: s.proven, Rejected: s.rejected, Seen: s.seen,
		Unproven: make([]unprovenVote, 0, len(s.unproven))}
	for id, v := range s.unproven {
		u := unprovenVote{Batch: id, Queries: v.count, Student: v.student, After: v.after, At: v.at.UTC()}
		if v.queries != ([32]byte{}) {
			u.Digest = hex.EncodeToString(v.queries[:])
		}
		r.Unproven = append(r.Unproven, u)
	}
	slices.SortFunc(r.Unproven, func(a, b unprovenVote) int { return strings.Compare(a.Batch, b.Batch) })
	b, err := encodeVoteRecord(r)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(s.path, b, 0o600, true); err != nil {
		return fmt.Errorf("teacher: save the record of votes: %w", err)
	}
	return nil
}
