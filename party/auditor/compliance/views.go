package compliance

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nzcfed/nzc/ledger"
)

// Auditor is the client of one auditor's API, with the auditor it is.
type Auditor struct {
	ID     string
	Addr   string
	Client *Client
}

// View is what one auditor showed: its status and its latest checkpoint,
// checked here against the pinned auditor keys.
type View struct {
	Auditor string `json:"auditor"`
	Addr    string `json:"addr"`
	// Error is why the auditor could not be asked; the rest is then empty.
	Error  string  `json:"error,omitempty"`
	Status *Status `json:"status,omitempty"`
	// Checkpoint is its latest checkpoint with the cosigners it claims;
	// Cosigned says the note verified here against the pinned keys with a
	// majority, and Time is when that majority had cosigned it (seconds
	// since the Unix epoch).
	Checkpoint      *CheckpointInfo `json:"checkpoint,omitempty"`
	Cosigned        bool            `json:"cosigned"`
	Signers         []string        `json:"signers,omitempty"`
	Time            int64           `json:"time,omitempty"`
	CheckpointError string          `json:"checkpoint_error,omitempty"`

	signed ledger.SignedCheckpoint
}

// Views are the views of several auditors, compared.
type Views struct {
	Asked    int    `json:"asked"`
	Answered int    `json:"answered"`
	Views    []View `json:"views"`
	// Largest is the largest checkpoint a majority cosigned, and who
	// served it (nil when no auditor served one).
	Largest *Largest `json:"largest,omitempty"`
	// Consistent says no two cosigned views disagree: each was proven a
	// prefix of the largest (Proofs consistency proofs checked);
	// Disagreements say how views differ otherwise: a split view or a fork.
	Consistent    bool     `json:"consistent"`
	Proofs        int      `json:"proofs"`
	Disagreements []string `json:"disagreements,omitempty"`
	// Warnings say what the comparison could not cover: auditors that did
	// not answer or whose checkpoint did not verify.
	Warnings []string `json:"warnings,omitempty"`
	// Missing are the auditors that did not answer at all.
	Missing []string `json:"missing,omitempty"`
	// Needed is how many auditors make a majority: of the keys compared
	// against, unless the caller sets it from the federation.
	Needed int `json:"needed"`
}

// ErrNoMajority means fewer than a majority of the auditors answered with
// a view a majority cosigned: the ledger cannot be read, since a checkpoint
// needs a majority's signatures, until enough of them are up.
var ErrNoMajority = errors.New("no majority of the auditors answered: start the missing auditors or check the network to them, then try again")

// Majority returns nil when one of the auditors served a checkpoint a
// majority cosigned and, when every auditor was asked (Asked ≥ Needed), at
// least Needed of them answered; otherwise an error wrapping ErrNoMajority
// that names each auditor that did not answer, or whose checkpoint did
// not verify, and why.
func (vs Views) Majority() error {
	if (vs.Asked < vs.Needed || vs.Answered >= vs.Needed) && vs.Largest != nil {
		return nil
	}
	var why []string
	for _, v := range vs.Views {
		switch {
		case v.Error != "":
			why = append(why, fmt.Sprintf("auditor %s did not answer: %s", v.Name(), v.Error))
		case !v.Cosigned:
			why = append(why, fmt.Sprintf("auditor %s's checkpoint does not verify against the federation's auditor keys with a majority: %s", v.Name(), v.CheckpointError))
		}
	}
	return fmt.Errorf("%w: %d of %d auditors answered, %d needed; %s", ErrNoMajority, vs.Answered, vs.Asked, vs.Needed, strings.Join(why, "; "))
}

// MissingLine says which auditors did not answer and that a majority did,
// for a report's text; "" when every auditor answered.
func (vs Views) MissingLine() string {
	if len(vs.Missing) == 0 {
		return ""
	}
	if vs.Majority() != nil {
		return fmt.Sprintf("missing: %s did not answer; %d of %d answered, fewer than the majority (%d) a read needs", strings.Join(vs.Missing, ", "), vs.Answered, vs.Asked, vs.Needed)
	}
	return fmt.Sprintf("missing: %s did not answer; %d of %d answered, and a majority (%d) is enough to read", strings.Join(vs.Missing, ", "), vs.Answered, vs.Asked, vs.Needed)
}

// Largest is the largest cosigned checkpoint of a comparison.
type Largest struct {
	Auditor string `json:"auditor"`
	Addr    string `json:"addr"`
	ledger.Checkpoint
	Time int64  `json:"time"`
	Note string `json:"note"`
}

// CompareViews asks every auditor for its status and latest checkpoint at
// once, verifies each checkpoint against keys (the federation's auditors,
// pinned by the caller), and proves each cosigned view a prefix of the
// largest with a consistency proof from the auditor that served the
// largest. Two views of one size with different roots, or a view that is
// not a prefix of the largest, is a disagreement: some auditor shows a
// different log than the others.
//
// Once a majority of the keys' auditors served cosigned views, the others
// get ViewGrace more to answer: an auditor that is stopped or cut off
// (whose connection hangs rather than being refused) is reported as not
// answering instead of holding the comparison until ctx ends.
func CompareViews(ctx context.Context, auditors []Auditor, keys []string) Views {
	vs := Views{Asked: len(auditors), Views: make([]View, len(auditors)), Consistent: true, Needed: ledger.Quorum(len(keys))}
	asks, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan int, len(auditors))
	for i, a := range auditors {
		go func() {
			vs.Views[i] = view(asks, a, keys)
			done <- i
		}()
	}
	var grace <-chan time.Time
	late, cosignedViews := false, 0
	for range auditors {
		var i int
		select {
		case i = <-done:
		case <-grace:
			late, grace = true, nil
			stop()
			i = <-done
		}
		v := &vs.Views[i]
		if v.Cosigned {
			cosignedViews++
		} else if late {
			// Cut short: it had not answered when the others had.
			*v = View{Auditor: v.Auditor, Addr: v.Addr, Error: fmt.Sprintf("no answer within %v of a majority's (%s): down, stopped or cut off", ViewGrace, cmp.Or(v.Error, v.CheckpointError))}
		}
		if cosignedViews >= vs.Needed && grace == nil && !late {
			t := time.NewTimer(ViewGrace)
			defer t.Stop()
			grace = t.C
		}
	}
	var cosigned []int
	for i, v := range vs.Views {
		switch {
		case v.Error != "":
			vs.Missing = append(vs.Missing, v.Name())
			vs.Warnings = append(vs.Warnings, fmt.Sprintf("auditor %s at %s did not answer: its view is not compared", v.Name(), v.Addr))
		case !v.Cosigned:
			vs.Answered++
			vs.Warnings = append(vs.Warnings, fmt.Sprintf("auditor %s at %s serves no checkpoint a majority cosigned: its view is not compared", v.Name(), v.Addr))
		default:
			vs.Answered++
			cosigned = append(cosigned, i)
		}
	}
	if len(cosigned) == 0 {
		vs.Warnings = append(vs.Warnings, "no auditor served a checkpoint that verifies with a majority against the federation's auditor keys: nothing to compare")
		return vs
	}
	// The largest, and of equal sizes the most recently cosigned.
	slices.SortStableFunc(cosigned, func(a, b int) int {
		va, vb := vs.Views[a].signed, vs.Views[b].signed
		return cmp.Or(cmp.Compare(vb.Size, va.Size), cmp.Compare(vb.Time, va.Time))
	})
	top := vs.Views[cosigned[0]]
	vs.Largest = &Largest{Auditor: top.Auditor, Addr: top.Addr, Checkpoint: top.signed.Checkpoint, Time: top.signed.Time, Note: top.Checkpoint.Note}
	for _, i := range cosigned[1:] {
		v := vs.Views[i]
		c := v.signed.Checkpoint
		switch {
		case c.Size == top.signed.Size && c.Root != top.signed.Root:
			vs.Disagreements = append(vs.Disagreements, fmt.Sprintf("FORK: auditors %s and %s show cosigned checkpoints of %d entries with different roots (%s, %s)", v.Auditor, top.Auditor, c.Size, c.Root, top.signed.Root))
		case c.Size == top.signed.Size || c.Size == 0:
		default:
			p, err := auditors[cosigned[0]].Client.ConsistencyProof(ctx, c.Size, top.signed.Size)
			if err == nil {
				err = ledger.VerifyConsistency(c, top.signed.Checkpoint, p.Proof)
			}
			if err != nil {
				vs.Disagreements = append(vs.Disagreements, fmt.Sprintf("SPLIT VIEW: auditor %s's cosigned checkpoint of %d entries is not proven a prefix of auditor %s's of %d entries: %v", v.Auditor, c.Size, top.Auditor, top.signed.Size, err))
				continue
			}
			vs.Proofs++
		}
	}
	vs.Consistent = len(vs.Disagreements) == 0
	return vs
}

// ViewGrace is how long CompareViews waits for the other auditors once a
// majority served cosigned views.
const ViewGrace = time.Second

// Name is the auditor asked for, or "(any)" when the address alone was.
func (v View) Name() string {
	if v.Auditor == "" {
		return "(any)"
	}
	return v.Auditor
}

func view(ctx context.Context, a Auditor, keys []string) View {
	v := View{Auditor: a.ID, Addr: a.Addr}
	s, err := a.Client.Status(ctx)
	if err != nil {
		v.Error = err.Error()
		return v
	}
	v.Status = &s
	cp, err := a.Client.Checkpoint(ctx)
	if err != nil {
		v.CheckpointError = err.Error()
		return v
	}
	v.Checkpoint = &cp
	sc, err := ledger.OpenCheckpoint([]byte(cp.Note), keys)
	v.Signers, v.Time, v.signed = sc.Signers, sc.Time, sc
	switch {
	case err != nil:
		v.CheckpointError = err.Error()
	case sc.Checkpoint != cp.Checkpoint:
		v.CheckpointError = fmt.Sprintf("the auditor describes its checkpoint as %d entries, root %s, but its note says %d, %s", cp.Size, cp.Root, sc.Size, sc.Root)
	case sc.Origin != s.Origin:
		v.CheckpointError = fmt.Sprintf("the checkpoint is of %q, the auditor's ledger of %q", sc.Origin, s.Origin)
	default:
		v.Cosigned = true
	}
	return v
}
