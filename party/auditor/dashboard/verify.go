package dashboard

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/nzcfed/nzc/ledger"
)

// Verification is GET /api/verification: ledger.Verify run on this
// auditor's log up to the cosigned checkpoint — every entry replayed and
// reproduced byte for byte, the checkpoint's signatures checked against the
// auditors' keys, its root against the entries — and what it found.
type Verification struct {
	Ran        bool           `json:"ran"`
	OK         bool           `json:"ok"`
	Summary    string         `json:"summary"`
	CheckedAt  string         `json:"checked_at"` // UTC
	Millis     int64          `json:"millis"`     // how long the verification took
	Entries    int64          `json:"entries"`
	Root       string         `json:"root"`
	KeysPinned bool           `json:"keys_pinned"`
	Accepted   int64          `json:"accepted"`
	Refused    int64          `json:"refused"`
	Duplicates int64          `json:"duplicates"`
	Signers    []string       `json:"signers"`
	Checks     []ledger.Check `json:"checks"`
	// Accounts are the balances the replay recomputed, to compare with
	// the live accounts.
	Accounts []AccountView `json:"accounts"`
}

type verifier struct {
	mu  sync.Mutex
	key [32]byte
	at  time.Time
	res *Verification
}

func notRun(why string) *Verification {
	return &Verification{Summary: "not run: " + why, Checks: []ledger.Check{}, Signers: []string{}, Accounts: []AccountView{}}
}

// verification verifies the log up to the view's checkpoint. It runs at
// most once per Options.VerifyEvery (a run replays the whole log), and
// reuses the last result while neither the entries nor the signatures
// changed (the outcome is a function of the exported bytes and the trusted
// keys). Until the next run the result shown is of an earlier checkpoint,
// which it names.
func (d *Dashboard) verification(v *view) *Verification {
	if v.cp == nil {
		return notRun(v.checkpoint.Error)
	}
	d.ver.mu.Lock()
	defer d.ver.mu.Unlock()
	now := d.opts.Now()
	if d.ver.res != nil && now.Sub(d.ver.at) < d.opts.VerifyEvery {
		return d.ver.res
	}
	size := v.checkpoint.Size
	// The export is written as it is read from the history, twice: once
	// to hash it (a run is skipped when the bytes have not changed), once
	// to verify it. Neither holds the log in memory.
	h := sha256.New()
	if err := ledger.WriteExport(h, d.src, size, [][]byte{v.cp}); err != nil {
		return notRun(err.Error())
	}
	var key [32]byte
	h.Sum(key[:0])
	if d.ver.res != nil && d.ver.key == key {
		d.ver.at = now
		return d.ver.res
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(ledger.WriteExport(pw, d.src, size, [][]byte{v.cp})) }()
	// One worker beside the replay: the auditor keeps its other core.
	rep := ledger.VerifyReader(context.Background(), pr, ledger.VerifyOptions{TrustedKeys: d.opts.TrustedKeys, Unpinned: true, Workers: 1}) // its own replica: the auditor pins its genesis itself (genesis_hash)
	pr.CloseWithError(errors.New("the verification ended"))
	res := &Verification{
		Ran: true, OK: rep.OK, CheckedAt: now.UTC().Format("2006-01-02 15:04:05") + " UTC",
		Millis:  d.opts.Now().Sub(now).Milliseconds(),
		Entries: rep.Entries, Root: rep.Root.String(), KeysPinned: rep.KeysPinned,
		Accepted: rep.Accepted, Refused: rep.Refused, Duplicates: rep.Duplicates,
		Checks: rep.Checks, Signers: []string{}, Accounts: []AccountView{},
	}
	quorum := 0
	for _, c := range rep.Checkpoints {
		if c.Source == "export" {
			res.Signers, quorum = append(res.Signers, c.Signers...), c.Quorum
		}
	}
	for _, a := range rep.Accounts {
		res.Accounts = append(res.Accounts, accountView(a))
	}
	failed := len(rep.Failures())
	switch {
	case rep.OK:
		res.Summary = fmt.Sprintf("Verified: all %d entries replay and reproduce; the checkpoint of size %d carries %d auditors' signatures (quorum %d)", rep.Replayed, size, len(res.Signers), quorum)
	default:
		res.Summary = fmt.Sprintf("Verification FAILED: %d of %d checks failed", failed, len(rep.Checks))
	}
	d.ver.key, d.ver.at, d.ver.res = key, now, res
	return res
}
