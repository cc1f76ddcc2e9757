package dashboard

import (
	"crypto/sha256"
	"fmt"
	"sync"

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
	res *Verification
}

// verification verifies the view's log up to its checkpoint, reusing the
// last result while neither the entries nor the signatures changed (the
// outcome is a function of the exported bytes and the trusted keys).
func (d *Dashboard) verification(v *view) *Verification {
	if v.cp == nil {
		return &Verification{Summary: "not run: " + v.checkpoint.Error, Checks: []ledger.Check{}, Signers: []string{}, Accounts: []AccountView{}}
	}
	size := min(v.checkpoint.Size, int64(len(v.entries)))
	keys, err := d.src.AuditorKeys(size)
	if err != nil {
		return &Verification{Summary: "not run: " + err.Error(), Checks: []ledger.Check{}, Signers: []string{}, Accounts: []AccountView{}}
	}
	exp, err := ledger.Export{Entries: v.entries[:size], Checkpoints: [][]byte{v.cp}, Keys: keys}.Encode()
	if err != nil {
		return &Verification{Summary: "not run: " + err.Error(), Checks: []ledger.Check{}, Signers: []string{}, Accounts: []AccountView{}}
	}
	key := sha256.Sum256(exp)

	d.ver.mu.Lock()
	defer d.ver.mu.Unlock()
	if d.ver.res != nil && d.ver.key == key {
		return d.ver.res
	}
	start := d.opts.Now()
	rep := ledger.Verify(exp, ledger.VerifyOptions{TrustedKeys: d.opts.TrustedKeys})
	res := &Verification{
		Ran: true, OK: rep.OK, CheckedAt: start.UTC().Format("2006-01-02 15:04:05") + " UTC",
		Millis:  d.opts.Now().Sub(start).Milliseconds(),
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
	d.ver.key, d.ver.res = key, res
	return res
}
