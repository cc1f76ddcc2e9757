package dashboard

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/nzcfed/nzc/internal/jsonnum"
	"github.com/nzcfed/nzc/ledger"
)

// FormatEpsilon is how the dashboard shows an ε or an ε cap: three
// decimals, exponent form from a million on, ∞ when unbounded.
func FormatEpsilon(e float64) string {
	switch {
	case math.IsInf(e, 1) || math.IsNaN(e):
		return "∞"
	case math.Abs(e) >= 1e6:
		return strconv.FormatFloat(e, 'e', 3, 64)
	}
	return strconv.FormatFloat(e, 'f', 3, 64)
}

// FormatDelta is how the dashboard shows a δ: three significant digits.
func FormatDelta(d float64) string { return strconv.FormatFloat(d, 'g', 3, 64) }

func formatTime(ts int64) string {
	if ts == 0 {
		return ""
	}
	return time.Unix(0, ts).UTC().Format("2006-01-02 15:04:05")
}

// Overview is GET /api/overview: the log's size and every account.
type Overview struct {
	Auditor     string        `json:"auditor"`
	Origin      string        `json:"origin"`
	Entries     int64         `json:"entries"`
	GeneratedAt string        `json:"generated_at"` // UTC, when the log was last read
	Accounts    []AccountView `json:"accounts"`
	// Burnt are the nzc-svt sessions that burnt (BurntSession), oldest
	// first: the alert that a hospital may be voting against the others.
	Burnt []BurntSession `json:"burnt_sessions"`
}

// AccountView is one hospital's account as the page shows it.
type AccountView struct {
	Hospital    string         `json:"hospital"`
	Epsilon     jsonnum.OrNull `json:"epsilon"`
	EpsilonText string         `json:"epsilon_text"`
	CapEpsilon  jsonnum.OrNull `json:"cap_epsilon"`
	CapText     string         `json:"cap_text"`
	Used        jsonnum.OrNull `json:"used"` // ε / cap
	UsedText    string         `json:"used_text"`
	DeltaSpent  float64        `json:"delta_spent"`
	CapDelta    float64        `json:"cap_delta"`
	DeltaText   string         `json:"delta_text"` // "spent of cap"
	Charges     uint64         `json:"charges"`
	Answers     uint64         `json:"answers"`
	// FederationText is the account's ε at the federation's δ bound, the
	// figure every account states at the same δ.
	FederationText string `json:"federation_text"`
	// CapChanges lists every change of the cap, oldest first.
	CapChanges []CapChangeView `json:"cap_changes"`
	// Suspended is set while the administrator's suspension holds;
	// SuspendedText says since which entry and why.
	Suspended     bool   `json:"suspended"`
	SuspendedText string `json:"suspended_text,omitempty"`
}

// CapChangeView is one cap change as the page shows it.
type CapChangeView struct {
	Entry uint64 `json:"entry"`
	Time  string `json:"time"`
	Text  string `json:"text"` // who, from → to
	Raise bool   `json:"raise"`
}

// History is GET /api/history: each hospital's ε after every entry that
// charged it or changed its cap (ledger.SpendHistory), in entry order.
type History struct {
	Entries int64    `json:"entries"`
	Series  []Series `json:"series"`
	Error   string   `json:"error,omitempty"` // why there is no history
	// From and To span the points' timestamps (unix milliseconds, as the
	// entries' proposers stamped them), FromTime and ToTime the same in
	// UTC: the charts' time axis, shared by every hospital. Unset without
	// points.
	From     int64  `json:"from_unix_ms,omitempty"`
	To       int64  `json:"to_unix_ms,omitempty"`
	FromTime string `json:"from_time,omitempty"`
	ToTime   string `json:"to_time,omitempty"`
}

// Series is one hospital's spend over time.
type Series struct {
	Hospital string  `json:"hospital"`
	Thinned  bool    `json:"thinned,omitempty"` // points were left out to bound the chart
	Points   []Point `json:"points"`
}

// Point is a hospital's ε and cap right after entry Index, which its
// proposer stamped at Time (UTC; UnixMs in unix milliseconds).
type Point struct {
	Index   uint64         `json:"index"`
	Time    string         `json:"time"`
	UnixMs  int64          `json:"unix_ms"`
	Epsilon jsonnum.OrNull `json:"epsilon"`
	Cap     jsonnum.OrNull `json:"cap"`
}

// Activity is GET /api/activity: the most recent charges and refusals,
// newest first.
type Activity struct {
	Charges  []ChargeView  `json:"charges"`
	Refusals []RefusalView `json:"refusals"`
}

// ChargeView is an accepted charge or session opening.
type ChargeView struct {
	Index     uint64 `json:"index"`
	Time      string `json:"time"`
	Kind      string `json:"kind"` // "charge" or "open-session"
	Batch     string `json:"batch"`
	Student   string `json:"student"`
	Session   string `json:"session,omitempty"`
	Mechanism string `json:"mechanism"`
	Params    string `json:"params"`
	Queries   uint64 `json:"queries"`
	Answers   uint64 `json:"answers"`
	Costs     []Cost `json:"costs"` // empty for a charge inside a session (paid at opening)
}

// Cost is how much one charge raised one hospital's ε.
type Cost struct {
	Hospital     string         `json:"hospital"`
	Increase     jsonnum.OrNull `json:"increase"`
	IncreaseText string         `json:"increase_text"`
	EpsilonText  string         `json:"epsilon_text"` // the hospital's ε after the charge
}

// RefusalView is a refused command.
type RefusalView struct {
	Index   uint64 `json:"index"`
	Time    string `json:"time"`
	Kind    string `json:"kind"`
	Signer  string `json:"signer"`
	Batch   string `json:"batch,omitempty"`
	Code    string `json:"code"`
	Subject string `json:"subject,omitempty"`
	Reason  string `json:"reason"`
}

// CheckpointView is GET /api/checkpoint: the latest checkpoint and who
// cosigned it.
type CheckpointView struct {
	OK       bool     `json:"ok"` // signed by a majority of the auditors
	Size     int64    `json:"size"`
	Entries  int64    `json:"entries"` // the log's size when read: entries after Size await the next checkpoint
	Root     string   `json:"root"`
	Origin   string   `json:"origin"`
	Auditors []string `json:"auditors"`
	Signers  []string `json:"signers"`
	Missing  []string `json:"missing"`
	Quorum   int      `json:"quorum"`
	Error    string   `json:"error,omitempty"`
	Note     string   `json:"note"` // the signed note as served
	// Members are the auditors of this auditor's raft membership, and
	// Membership names each way they differ from the auditors the ledger
	// registers (empty when they agree or Options.Members is nil).
	Members    []string `json:"members"`
	Membership []string `json:"membership"`
}

// view is everything the page shows, read at one time.
type view struct {
	size       int64
	cp         []byte // the cosigned checkpoint, nil if there is none
	overview   Overview
	history    History
	activity   Activity
	checkpoint CheckpointView
}

type cache struct {
	mu sync.Mutex
	v  *view
	at time.Time
	// replay follows the log: each read replays only the new entries.
	replay    *ledger.SpendReplay
	points    []ledger.SpendPoint
	replayErr error
	// sessions follows the sessions of the entries replayed.
	sessions sessionScan
}

// chunk bounds the entries read from the source at once.
const chunk = 4096

// view returns the data the page shows, reading the log again when the
// last read is older than Options.Refresh.
func (d *Dashboard) view(ctx context.Context) (*view, error) {
	d.data.mu.Lock()
	defer d.data.mu.Unlock()
	now := d.opts.Now()
	if d.data.v != nil && now.Sub(d.data.at) < d.opts.Refresh {
		return d.data.v, nil
	}
	v, err := d.build(ctx, d.data.v, now)
	if err != nil {
		return nil, err
	}
	d.data.v, d.data.at = v, now
	return v, nil
}

// build reads the log; d.data.mu is held.
func (d *Dashboard) build(ctx context.Context, prev *view, now time.Time) (*view, error) {
	// The checkpoint first: the log read after it holds at least its entries.
	cctx, cancel := context.WithTimeout(ctx, d.opts.CosignTimeout)
	cp, cpErr := d.src.CosignedCheckpoint(cctx)
	cancel()

	v := &view{size: d.src.TreeSize()}
	c := &d.data
	if c.replay == nil || v.size < c.replay.Len() {
		c.replay, c.points, c.replayErr = ledger.NewSpendReplay(), nil, nil
		c.sessions = sessionScan{}
	}
	for c.replayErr == nil && c.replay.Len() < v.size {
		from := c.replay.Len()
		es, err := d.src.Entries(from, min(from+chunk, v.size))
		if err != nil {
			return nil, err
		}
		// A log that does not replay is shown, with the error, rather
		// than refused: the verification then names the entry.
		ps, err := c.replay.Append(es)
		c.points = append(c.points, ps...)
		c.sessions.scan(es[:c.replay.Len()-from], uint64(d.opts.SVTMinAnswers))
		if err != nil {
			c.replayErr = err
			d.opts.Logger.Error("dashboard: the ledger's log does not replay", "err", err)
		}
	}
	if prev != nil && prev.size == v.size {
		v.history, v.activity = prev.history, prev.activity
	} else {
		v.history = d.history(c.points, v.size)
		if c.replayErr != nil {
			v.history.Error = "the log does not replay: " + c.replayErr.Error()
		}
		var err error
		if v.activity, err = d.activity(v.size, c.points); err != nil {
			return nil, err
		}
	}
	v.overview = Overview{Auditor: d.opts.Auditor, Entries: v.size, GeneratedAt: now.UTC().Format("2006-01-02 15:04:05") + " UTC",
		Accounts: []AccountView{}, Burnt: append([]BurntSession{}, c.sessions.burnt...)}
	for _, a := range d.src.Accounts() {
		v.overview.Accounts = append(v.overview.Accounts, accountView(a))
	}
	v.checkpoint, v.cp = d.checkpoint(cp, cpErr, v.size)
	v.checkpoint.Members, v.checkpoint.Membership = d.membership(v.size)
	v.overview.Origin = v.checkpoint.Origin
	return v, nil
}

func accountView(a ledger.Account) AccountView {
	used := a.Epsilon / a.CapEpsilon
	usedText := "—"
	if !math.IsInf(used, 0) && !math.IsNaN(used) {
		usedText = strconv.FormatFloat(100*used, 'f', 1, 64) + "%"
	} else if math.IsInf(a.Epsilon, 1) {
		usedText = "unbounded"
	}
	return AccountView{
		Hospital: a.Hospital, Epsilon: jsonnum.OrNull(a.Epsilon), EpsilonText: FormatEpsilon(a.Epsilon),
		CapEpsilon: jsonnum.OrNull(a.CapEpsilon), CapText: FormatEpsilon(a.CapEpsilon),
		Used: jsonnum.OrNull(used), UsedText: usedText,
		DeltaSpent: a.DeltaSpent, CapDelta: a.CapDelta,
		DeltaText: FormatDelta(a.DeltaSpent) + " of " + FormatDelta(a.CapDelta),
		Charges:   a.Charges, Answers: a.Answers,
		FederationText: FormatEpsilon(a.EpsilonAtFederationDelta) + " at the federation's δ " + FormatDelta(a.FederationDelta),
		CapChanges:     capChanges(a.CapChanges),
		Suspended:      a.Suspended,
		SuspendedText:  suspendedText(a),
	}
}

func suspendedText(a ledger.Account) string {
	if !a.Suspended {
		return ""
	}
	return fmt.Sprintf("SUSPENDED by the federation's administrator at entry %d (%s): every charge naming it is refused", a.SuspendedAt, a.SuspendedReason)
}

func capChanges(cs []ledger.CapChange) []CapChangeView {
	out := make([]CapChangeView, len(cs))
	for i, c := range cs {
		out[i] = CapChangeView{Entry: c.Entry, Time: formatTime(c.Timestamp), Raise: c.Raise,
			Text: fmt.Sprintf("%s: ε %s, δ %s → ε %s, δ %s", c.Signer, FormatEpsilon(c.FromEpsilon), FormatDelta(c.FromDelta), FormatEpsilon(c.ToEpsilon), FormatDelta(c.ToDelta))}
	}
	return out
}

func (d *Dashboard) history(points []ledger.SpendPoint, size int64) History {
	h := History{Entries: size, Series: []Series{}}
	at := map[string]int{}
	for n, p := range points {
		i, ok := at[p.Hospital]
		if !ok {
			i = len(h.Series)
			at[p.Hospital] = i
			h.Series = append(h.Series, Series{Hospital: p.Hospital})
		}
		h.Series[i].Points = append(h.Series[i].Points, Point{Index: p.Index, Time: formatTime(p.Timestamp),
			UnixMs: p.Timestamp / int64(time.Millisecond), Epsilon: jsonnum.OrNull(p.Epsilon), Cap: jsonnum.OrNull(p.CapEpsilon)})
		// Proposers' clocks differ: the span is the earliest and latest
		// stamp, not the first and last entry's.
		if ms := p.Timestamp / int64(time.Millisecond); n == 0 || ms < h.From {
			h.From, h.FromTime = ms, formatTime(p.Timestamp)
		}
		if ms := p.Timestamp / int64(time.Millisecond); n == 0 || ms > h.To {
			h.To, h.ToTime = ms, formatTime(p.Timestamp)
		}
	}
	for i := range h.Series {
		h.Series[i].Points, h.Series[i].Thinned = thin(h.Series[i].Points, d.opts.MaxPoints)
	}
	slices.SortFunc(h.Series, func(a, b Series) int { return strings.Compare(a.Hospital, b.Hospital) })
	return h
}

// thin keeps at most about max points of a series: evenly spaced ones,
// the first and the last, and every point where the cap changed (so the
// chart's cap line stays exact).
func thin(ps []Point, max int) ([]Point, bool) {
	if len(ps) <= max {
		return ps, false
	}
	stride := (len(ps) + max - 1) / max
	out := make([]Point, 0, max+8)
	for i, p := range ps {
		if i%stride == 0 || i == len(ps)-1 || p.Cap != ps[i-1].Cap {
			out = append(out, p)
		}
	}
	return out, true
}

// activity lists the recent charges and refusals of the first size
// entries, reading the log backwards.
func (d *Dashboard) activity(size int64, points []ledger.SpendPoint) (Activity, error) {
	// Each point's rise over the hospital's previous one, by entry.
	costs := map[uint64][]Cost{}
	last := map[string]ledger.SpendPoint{}
	before := func(h string, index uint64) (ledger.SpendPoint, bool) {
		// the hospital's last point before index (points are in entry order)
		i, _ := slices.BinarySearchFunc(points, index, func(p ledger.SpendPoint, idx uint64) int {
			if p.Index < idx {
				return -1
			}
			return 1
		})
		for i--; i >= 0; i-- {
			if points[i].Hospital == h {
				return points[i], true
			}
		}
		return ledger.SpendPoint{}, false
	}
	for _, p := range points {
		prev := last[p.Hospital]
		last[p.Hospital] = p
		inc := p.Epsilon - prev.Epsilon
		costs[p.Index] = append(costs[p.Index], Cost{Hospital: p.Hospital, Increase: jsonnum.OrNull(inc),
			IncreaseText: "+" + FormatEpsilon(inc), EpsilonText: FormatEpsilon(p.Epsilon)})
	}
	a := Activity{Charges: []ChargeView{}, Refusals: []RefusalView{}}
	var entries [][]byte
	base := size
	for i := size - 1; i >= 0 && (len(a.Charges) < d.opts.Recent || len(a.Refusals) < d.opts.Recent); i-- {
		if i < base {
			base = max(0, i+1-chunk/16)
			var err error
			if entries, err = d.src.Entries(base, i+1); err != nil {
				return a, err
			}
		}
		en, err := ledger.DecodeEntry(entries[i-base])
		if err != nil {
			continue // the verification reports it
		}
		c, cerr := ledger.DecodeCommand(en.Command)
		switch {
		case en.Status == ledger.StatusRefused && len(a.Refusals) < d.opts.Recent:
			r := RefusalView{Index: en.Index, Kind: "undecodable", Code: en.Code.String(), Subject: en.Subject}
			if rec := en.Record; rec != nil {
				if rec.Kind != 0 {
					r.Kind = rec.Kind.String()
				}
				r.Signer = rec.Signer
			}
			if cerr == nil {
				r.Kind, r.Signer, r.Time = c.Body.Kind().String(), c.Signer, formatTime(c.Body.Stamp())
				if ch, ok := c.Body.(*ledger.Charge); ok {
					r.Batch = ch.BatchID
				}
			}
			r.Reason = reason(en, before)
			a.Refusals = append(a.Refusals, r)
		case en.Status == ledger.StatusAccepted && cerr == nil && len(a.Charges) < d.opts.Recent:
			cv := ChargeView{Index: en.Index, Kind: c.Body.Kind().String(), Costs: costs[en.Index]}
			switch b := c.Body.(type) {
			case *ledger.Charge:
				cv.Time, cv.Batch, cv.Student, cv.Session = formatTime(b.Timestamp), b.BatchID, b.Student, b.Session
				cv.Mechanism, cv.Params, cv.Queries, cv.Answers = b.Mechanism, params(b.Params), b.Queries, b.Answers
				if b.Session != "" {
					cv.Costs = nil // paid when the session opened
				}
			case *ledger.OpenSession:
				cv.Time, cv.Session, cv.Student = formatTime(b.Timestamp), b.SessionID, b.Student
				cv.Mechanism, cv.Params = b.Mechanism, params(b.Params)
			default:
				continue
			}
			if cv.Costs == nil {
				cv.Costs = []Cost{}
			}
			a.Charges = append(a.Charges, cv)
		}
	}
	return a, nil
}

func params(ps []ledger.Param) string {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(p.Key + "=" + p.Value)
	}
	return b.String()
}

// reason explains a refusal from what its entry records (the code and the
// subject it names) and, for a cap refusal, the hospital's spend before it.
func reason(en ledger.Entry, before func(string, uint64) (ledger.SpendPoint, bool)) string {
	s := en.Subject
	switch en.Code {
	case ledger.CodeCapExceeded:
		if p, ok := before(s, en.Index); ok {
			return fmt.Sprintf("%s had spent ε %s of its cap %s; this charge would have taken it over the cap", s, FormatEpsilon(p.Epsilon), FormatEpsilon(p.CapEpsilon))
		}
		return s + "'s ε would have exceeded its cap"
	case ledger.CodeDeltaExhausted:
		return s + "'s additive δ would leave none of its δ cap for the conversion"
	case ledger.CodeQuotaExceeded:
		return "student " + s + "'s answer quota would be exceeded"
	case ledger.CodeBadSignature:
		return "the signature does not verify with " + s + "'s registered key"
	case ledger.CodeUnknownSigner:
		return s + " is not a registered party"
	case ledger.CodeWrongSigner:
		return s + " may not issue this command"
	case ledger.CodeUnknownHospital:
		return s + " is not a registered hospital"
	case ledger.CodeNoAccount:
		return s + " has not opened its account"
	case ledger.CodeConflict:
		return s + " was already used for a different command"
	case ledger.CodeSessionExhausted:
		return "session " + s + " would exceed its refusal bound"
	case ledger.CodeSessionClosed:
		return "session " + s + " is closed"
	}
	if s != "" {
		return en.Code.String() + " (" + s + ")"
	}
	return en.Code.String()
}

// checkpoint describes the cosigned checkpoint and returns its bytes when
// there is one to verify.
func (d *Dashboard) checkpoint(cp []byte, cpErr error, entries int64) (CheckpointView, []byte) {
	cv := CheckpointView{Entries: entries, Auditors: []string{}, Signers: []string{}, Missing: []string{}}
	if cp == nil {
		cv.Error = "no checkpoint"
		if cpErr != nil {
			cv.Error = cpErr.Error()
		}
		return cv, nil
	}
	cv.Note = string(cp)
	c, err := ledger.PeekCheckpoint(cp)
	if err != nil {
		cv.Error = err.Error()
		return cv, nil
	}
	cv.Size, cv.Root, cv.Origin = c.Size, c.Root.String(), c.Origin
	keys, err := d.src.AuditorKeys(c.Size)
	if err != nil {
		cv.Error = err.Error()
		return cv, cp
	}
	for _, k := range keys {
		if v, err := note.NewVerifier(k); err == nil {
			cv.Auditors = append(cv.Auditors, v.Name())
		}
	}
	sc, err := ledger.OpenCheckpoint(cp, keys)
	var qe *ledger.QuorumError
	switch {
	case errors.As(err, &qe):
		cv.Signers = append(cv.Signers, qe.Signers...)
		cv.Quorum = ledger.Quorum(qe.Auditors)
	case err != nil:
		cv.Quorum = ledger.Quorum(len(keys))
	default:
		cv.Signers = append(cv.Signers, sc.Signers...)
		cv.Quorum = sc.Quorum
	}
	if err == nil {
		err = cpErr // e.g. a fork reported while gathering signatures
	}
	if err != nil {
		cv.Error = err.Error()
	}
	cv.OK = err == nil
	for _, a := range cv.Auditors {
		if !slices.Contains(cv.Signers, a) {
			cv.Missing = append(cv.Missing, a)
		}
	}
	return cv, cp
}

// membership compares this auditor's raft membership with the auditors the
// first size entries register, and names each difference: a registered
// auditor raft lacks (displaced or removed) and a voter the ledger does not
// register.
func (d *Dashboard) membership(size int64) (members, diffs []string) {
	members, diffs = []string{}, []string{}
	if d.opts.Members == nil {
		return members, diffs
	}
	ms, err := d.opts.Members()
	if err != nil {
		return members, append(diffs, "the raft membership could not be read: "+err.Error())
	}
	members = append(members, ms...)
	slices.Sort(members)
	keys, err := d.src.AuditorKeys(size)
	if err != nil {
		return members, append(diffs, "the ledger's auditors could not be read: "+err.Error())
	}
	var registered []string
	for _, k := range keys {
		if v, err := note.NewVerifier(k); err == nil {
			registered = append(registered, v.Name())
		}
	}
	if len(registered) == 0 {
		return members, diffs // before the genesis the ledger registers nobody
	}
	slices.Sort(registered)
	for _, id := range registered {
		if !slices.Contains(members, id) {
			diffs = append(diffs, fmt.Sprintf("the ledger registers auditor %s, but this auditor's raft membership lacks it: it may have been displaced or removed; compare with the federation's configured peers", id))
		}
	}
	for _, id := range members {
		if !slices.Contains(registered, id) {
			diffs = append(diffs, fmt.Sprintf("this auditor's raft membership holds %s, which the ledger does not register as an auditor", id))
		}
	}
	return members, diffs
}
