package teacher

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nzcfed/nzc/internal/golden"
)

// A hospital that restarts before the proofs of its votes arrive still
// counts those votes: it keeps refusing to vote at proof_lag until the
// proofs come, and votes again once they do.
func TestHospitalVoteRecordSurvivesRestart(t *testing.T) {
	sl := newSpendLedger(t)
	h := newVoteHarness(t)
	state := filepath.Join(t.TempDir(), "state")
	start := func() *Node {
		t.Helper()
		n, err := New(Config{ID: "h1", Aggregator: "127.0.0.1:1", Identity: h.id, Voter: unanimous(3), AuditorKeys: sl.AuditorKeys(), ProofLag: 2, State: state})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	n := start()
	for i := byte(1); i <= 2; i++ {
		if err := h.vote(n, i); err != nil {
			t.Fatal(err)
		}
	}
	before := n.Spending()

	n = start() // the restart, before any proof arrived
	if got := n.Spending(); !reflect.DeepEqual(got, before) || !got.Stopped {
		t.Fatalf("after the restart the record is %+v, want %+v (stopped)", got, before)
	}
	if err := h.vote(n, 3); !stoppedVoting(err) {
		t.Fatalf("a restarted hospital with 2 unproven batches at lag 2 voted: %v", err)
	}
	if err := h.vote(n, 3, chargeReceipt(sl, spendBatch(1), []string{"h1", "h2"}, 4, "a1", "a2")); err != nil {
		t.Fatalf("with batch 1 proven: %v", err)
	}

	n = start() // the proof survives a restart too
	if s := n.Spending(); s.Voted != 3 || s.Proven != 1 || s.Unproven != 2 || !s.Stopped {
		t.Fatalf("after the second restart the record is %+v", s)
	}
	if err := h.vote(n, 4); !stoppedVoting(err) {
		t.Fatalf("batches 2 and 3 unproven: %v, want a refusal", err)
	}
}

// A vote whose record cannot be saved is not sent, and the record in
// memory does not count it.
func TestHospitalDoesNotVoteUnrecorded(t *testing.T) {
	sl := newSpendLedger(t)
	h := newVoteHarness(t)
	n, err := New(Config{ID: "h1", Aggregator: "127.0.0.1:1", Identity: h.id, Voter: unanimous(3), AuditorKeys: sl.AuditorKeys(), ProofLag: 2,
		State: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	n.spend.path = filepath.Join(t.TempDir(), "gone", VoteRecordFile) // a directory that does not exist
	if err := h.vote(n, 1); err == nil || !strings.Contains(err.Error(), "does not vote") {
		t.Fatalf("voting with an unsaveable record: %v, want a refusal", err)
	}
	if s := n.Spending(); s.Voted != 0 || s.Unproven != 0 {
		t.Fatalf("the unsent vote was counted: %+v", s)
	}
}

// A damaged or foreign record stops the hospital with an error naming the
// file and what to do; the file is left as it was.
func TestVoteRecordRefusesDamage(t *testing.T) {
	sl := newSpendLedger(t)
	h := newVoteHarness(t)
	good, err := os.ReadFile(filepath.Join("testdata", "votes-v2.golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, content, want string
	}{
		{"not JSON", "\x00\x01garbage", "not a vote record"},
		{"truncated", string(good[:len(good)/2]), "not a vote record"},
		{"another hospital's", strings.Replace(string(good), `"h1"`, `"h2"`, 1), `hospital "h2"'s record`},
		{"a later version", strings.Replace(string(good), `"version": 2`, `"version": 3`, 1), "version 3"},
		{"a digest not hex", strings.Replace(string(good), strings.Repeat("a", 64), strings.Repeat("z", 64), 1), "not a lower-case hex SHA-256 digest"},
		{"a short digest", strings.Replace(string(good), strings.Repeat("a", 64), strings.Repeat("a", 62), 1), "not a lower-case hex SHA-256 digest"},
		{"a digest without its student", strings.Replace(string(good), `"student": "s1",`, ``, 1), "no student"},
		{"a charge index past what was seen", strings.Replace(string(good), `"after": 12`, `"after": 41`, 1), "past the record's seen size"},
		{"a version 1 record with bindings", strings.Replace(string(good), `"version": 2`, `"version": 1`, 1), "version 1"},
		{"an unknown field", strings.Replace(string(good), `"voted"`, `"extra": 1, "voted"`, 1), "unknown field"},
		{"trailing data", string(good) + "{}", "trailing data"},
		{"more unproven than voted", strings.Replace(string(good), `"voted": 7`, `"voted": 4`, 1), "inconsistent counts"},
		{"a repeated batch", strings.Replace(string(good), "62626262", "61616161", 1), "out of order or repeated"},
		{"a batch id not hex", strings.Replace(string(good), "6161", "zz61", 1), "not a lower-case hex batch id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			path := filepath.Join(state, VoteRecordFile)
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := New(Config{ID: "h1", Aggregator: "127.0.0.1:1", Identity: h.id, Voter: unanimous(3), AuditorKeys: sl.AuditorKeys(), State: state})
			var re *VoteRecordError
			if !errors.As(err, &re) || re.Path != path || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "restore it from a backup") {
				t.Fatalf("start over %s: %v, want a *VoteRecordError naming %s and saying %q", tc.name, err, path, tc.want)
			}
			if b, _ := os.ReadFile(path); string(b) != tc.content {
				t.Fatal("the damaged record was changed")
			}
		})
	}
}

func goldenVoteRecord() voteRecord {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	digest := func(c string) string { return strings.Repeat(c, 64) }
	return voteRecord{Version: voteRecordVersion, Hospital: "h1", Voted: 7, Proven: 4, Rejected: 1, Seen: 40, Unproven: []unprovenVote{
		{Batch: "61616161", Queries: 32, Digest: digest("a"), Student: "s1", After: 12, At: at},
		{Batch: "62626262", Queries: 16, Digest: digest("b"), Student: "s2", After: 40, At: at.Add(time.Second)},
		{Batch: "63636363", Queries: 8, At: at.Add(2 * time.Second)}, // voted on before bindings were kept
	}}
}

// goldenVoteRecordV1 is the record of testdata/votes.golden.json, which a
// build before bindings wrote.
func goldenVoteRecordV1() voteRecord {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	return voteRecord{Version: 1, Hospital: "h1", Voted: 7, Proven: 4, Rejected: 1, Unproven: []unprovenVote{
		{Batch: "61616161", Queries: 32, At: at}, {Batch: "62626262", Queries: 16, At: at.Add(time.Second)},
		{Batch: "63636363", Queries: 8, At: at.Add(2 * time.Second)},
	}}
}

// The record's encoding is fixed by testdata/votes-v2.golden.json, and a
// hospital still reads the version 1 record of testdata/votes.golden.json.
func TestVoteRecordGolden(t *testing.T) {
	b, err := encodeVoteRecord(goldenVoteRecord())
	if err != nil {
		t.Fatal(err)
	}
	want := golden.Check(t, filepath.Join("testdata", "votes-v2.golden.json"), b)
	r, err := decodeVoteRecord(want, "h1")
	if err != nil || !reflect.DeepEqual(r, goldenVoteRecord()) {
		t.Fatalf("decode the golden record: %+v, %v", r, err)
	}
	v1, err := os.ReadFile(filepath.Join("testdata", "votes.golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	r, err = decodeVoteRecord(v1, "h1")
	if err != nil || !reflect.DeepEqual(r, goldenVoteRecordV1()) {
		t.Fatalf("decode the version 1 golden record: %+v, %v", r, err)
	}
}

// Whatever the file holds, decoding it either fails or yields a record
// that encodes and decodes to itself.
func FuzzDecodeVoteRecord(f *testing.F) {
	golden, err := encodeVoteRecord(goldenVoteRecord())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(golden)
	f.Add([]byte(`{"version":1,"hospital":"h1","voted":0,"proven":0,"rejected":0,"unproven":[]}`))
	f.Add([]byte(`{"version":1,"hospital":"h1","voted":-1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeVoteRecord(b, "h1")
		if err != nil {
			return
		}
		again, err := encodeVoteRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := decodeVoteRecord(again, "h1")
		if err != nil || !reflect.DeepEqual(r.Unproven, r2.Unproven) || r.Voted != r2.Voted || r.Proven != r2.Proven || r.Rejected != r2.Rejected {
			t.Fatalf("round trip: %+v, %v; from %+v", r2, err, r)
		}
	})
}

// TestBadAuditorKeysChangeNothing: keys the hospital cannot check receipts
// with are refused before its state directory is made.
func TestBadAuditorKeysChangeNothing(t *testing.T) {
	keys := newSpendLedger(t).AuditorKeys()
	h := newVoteHarness(t)
	for _, tc := range []struct {
		name string
		keys []string
	}{
		{"a key that does not parse", []string{"not-a-key"}},
		{"two keys of one auditor", append(slices.Clone(keys), keys[0])},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := filepath.Join(t.TempDir(), "state")
			_, err := New(Config{ID: "h1", Aggregator: "127.0.0.1:1", Identity: h.id, Voter: unanimous(3), AuditorKeys: tc.keys, State: state})
			if err == nil || !strings.Contains(err.Error(), "auditor keys") {
				t.Fatalf("New: %v, want an error naming the auditor keys", err)
			}
			if _, err := os.Stat(state); err == nil {
				t.Fatal("the state directory was made")
			}
		})
	}
}

// A restarted hospital keeps what each unproven batch id stands for and
// the log size it has seen proven: the receipt of an earlier charge of a
// batch id still proves no later use of it.
func TestHospitalVoteBindingsSurviveRestart(t *testing.T) {
	sl := newSpendLedger(t)
	h := newVoteHarness(t)
	state := filepath.Join(t.TempDir(), "state")
	start := func() *Node {
		t.Helper()
		n, err := New(Config{ID: "h1", Aggregator: "127.0.0.1:1", Identity: h.id, Voter: unanimous(3), AuditorKeys: sl.AuditorKeys(), ProofLag: 2, State: state})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	n := start()
	id := spendBatch(1)
	if err := h.ask(n, id, []float32{1, 2, 3, 4}, "s1"); err != nil {
		t.Fatal(err)
	}
	r := chargeReceipt(sl, id, []string{"h1", "h2"}, 4, "a1", "a2")
	if err := h.ask(n, id, []float32{5, 6, 7, 8}, "s1", r); err != nil {
		t.Fatalf("the batch id proven, then used again: %v", err)
	}
	n = start()
	if err := h.ask(n, id, []float32{9, 10, 11, 12}, "s1", r); !rebound(err) {
		t.Fatalf("after a restart, other queries under the unproven id: %v, want ErrBatchRebound", err)
	}
	if s := n.Spending(); s.Proven != 1 || s.Unproven != 1 || s.Rejected != 1 {
		t.Fatalf("after a restart the replayed receipt counted: %+v", s)
	}
}
