package aggregator

import (
	"encoding/json"
	"errors"
	"os"
	"testing"
)

// FuzzOutboxRecord feeds arbitrary record files to the outbox, as a
// restarted aggregator reads them: each is a record of its own batch in a
// known state, or an error matching ErrCorruptOutbox, never an empty outbox
// or a panic.
func FuzzOutboxRecord(f *testing.F) {
	const batch = "00aa"
	good, _ := json.Marshal(&Record{Version: outboxVersion, BatchID: batch, Student: "student-1", State: StatePending,
		NumQueries: 2, FeatureDim: 3, Answered: 2, Hospitals: []string{"hospital-1"}, Command: []byte{1, 2}, SealedLabels: []byte("age"), AnswersHash: make([]byte, 32)})
	f.Add(good)
	f.Add([]byte(`{"version":1,"batch_id":"00aa","student":"student-1","state":"committed","ledger_index":7}`))
	f.Add([]byte(`{"version":1,"batch_id":"00aa","student":"student-2","state":"pending"}`))
	f.Add([]byte(`{"version":2,"batch_id":"00aa","state":"pending"}`))
	f.Add([]byte(`{"version":1,"batch_id":"00ab","state":"pending"}`))
	f.Add([]byte(`{"version":1,"batch_id":"00aa","state":"released"}`))
	f.Add([]byte(`{"version":1,`))
	ob, err := OpenOutbox(f.TempDir()) // its one record is rewritten for each input
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, file []byte) {
		if err := os.WriteFile(ob.path("student-1", batch), file, 0o600); err != nil {
			t.Fatal(err)
		}
		r, ok, err := ob.Get("student-1", batch)
		if err != nil {
			if !errors.Is(err, ErrCorruptOutbox) {
				t.Fatalf("untyped error %T: %v", err, err)
			}
		} else if !ok || r.BatchID != batch || r.Student != "student-1" || (r.State != StatePending && r.State != StateCommitted) {
			t.Fatalf("Get accepted %+v (ok %v)", r, ok)
		}
		pending, perr := ob.Pending()
		switch {
		case err != nil && !errors.Is(perr, ErrCorruptOutbox):
			t.Fatalf("Pending over a damaged record: %v, want ErrCorruptOutbox", perr)
		case err == nil && perr != nil:
			t.Fatalf("Pending: %v", perr)
		case err == nil && (len(pending) == 1) != (r.State == StatePending):
			t.Fatalf("Pending lists %d records for a %s one", len(pending), r.State)
		}
	})
}

// FuzzOutboxSession feeds arbitrary session record files to the outbox: each
// is a record of its own session with an opening, or an error matching
// ErrCorruptOutbox, never a panic; batch records are not disturbed.
func FuzzOutboxSession(f *testing.F) {
	const id = "svt-00aa"
	good, _ := json.Marshal(&SessionRecord{Version: outboxVersion, SessionID: id, Student: "student-1", Hospitals: []string{"hospital-1"},
		Teachers: 10, Classes: 2, Open: []byte{1, 2}, Opened: true, SealedState: []byte("age")})
	f.Add(good)
	f.Add([]byte(`{"version":1,"session_id":"svt-00ab","open":"AQI="}`))
	f.Add([]byte(`{"version":1,"session_id":"svt-00aa"}`))
	f.Add([]byte(`{"version":1,`))
	ob, err := OpenOutbox(f.TempDir())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, file []byte) {
		if err := os.WriteFile(ob.sessionPath(id), file, 0o600); err != nil {
			t.Fatal(err)
		}
		recs, err := ob.Sessions()
		if err != nil {
			if !errors.Is(err, ErrCorruptOutbox) {
				t.Fatalf("untyped error %T: %v", err, err)
			}
		} else if len(recs) != 1 || recs[0].SessionID != id || len(recs[0].Open) == 0 {
			t.Fatalf("Sessions accepted %+v", recs)
		}
		if p, err := ob.Pending(); err != nil || len(p) != 0 {
			t.Fatalf("a session record disturbs the batches: %v %v", p, err)
		}
	})
}
