package ledger

import (
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/nzcfed/nzc/mechanism"
)

// CostTolerance is the relative amount by which a stated RDP value or δ may
// fall below the ledger's own recomputation and still be accepted. Such a
// command is charged the recomputed cost, never the stated one, so the
// tolerance only decides accept-or-refuse for costs that agree to nine
// digits (recomputation on another machine may differ in the last bits:
// see the package documentation); it never lets less be charged.
const CostTolerance = 1e-9

// latticeBits sets the lattice charged curves are rounded up onto:
// multiples of 2^-40.
const latticeBits = 40

// latticeUp returns the least multiple of 2^-latticeBits that is ≥ v. Values
// of 2^(52−latticeBits) and above are multiples already (their ulp is at
// least 2^-latticeBits); 0 and +Inf are kept. The scaling by a power of two
// is exact, so the result is the same on every machine.
func latticeUp(v float64) float64 {
	const q = 1 << latticeBits
	if v == 0 || math.IsInf(v, 0) || math.IsNaN(v) || v >= 1<<(52-latticeBits) {
		return v
	}
	return math.Ceil(float64(v*q)) / q
}

// below reports whether a stated value is under a recomputed one by more
// than the tolerance. A +Inf recomputation is met only by +Inf.
func below(stated, derived float64) bool {
	if math.IsInf(derived, 1) {
		return !math.IsInf(stated, 1)
	}
	return stated < float64(derived*(1-CostTolerance))
}

// derived is a command's cost as the ledger derives it: admit is composed
// for the cap check (the data-independent worst case of the command), and
// charge into the accounts (what the command's outcome cost). charge ≤
// admit at every order, so an admitted command never takes an account over
// its cap.
type derived struct {
	admit, charge           mechanism.Curve
	admitDelta, chargeDelta float64
	// admitPure and chargePure are the pure ε of the same two costs
	// (+Inf when the mechanism is not pure DP), rounded up onto the lattice:
	// an account also composes them by addition, which holds under
	// adaptive composition for pure DP, and the smaller bound stands.
	admitPure, chargePure float64
}

// maxLattice returns the order-wise maximum of a and b rounded up onto the
// lattice.
func maxLattice(a, b mechanism.Curve) mechanism.Curve {
	av, bv := a.Values(), b.Values()
	for i := range av {
		av[i] = latticeUp(max(av[i], bv[i]))
	}
	c, _ := a.Grid().CurveOf(av) // same grid, non-negative values
	return c
}

// underCost returns the refusal of a stated cost below the derived one.
func underCost(g mechanism.Grid, id, what string, stated mechanism.Curve, statedDelta float64, want mechanism.Charge) (Result, bool) {
	for i := range g.Len() {
		if below(stated.At(i), want.RDP.At(i)) {
			return refuse(CodeUnderCost, id, "%s states RDP %v at order %v, below the %v its mechanism and parameters cost; sign the cost mechanism.Params.Charge computes",
				what, stated.At(i), g.Order(i), want.RDP.At(i)), false
		}
	}
	if below(statedDelta, want.Delta) {
		return refuse(CodeUnderCost, id, "%s states δ %v, below the %v its mechanism and parameters cost", what, statedDelta, want.Delta), false
	}
	return Result{}, true
}

func badParams(id, what string, err error) Result {
	return refuse(CodeBadParams, id, "%s: %v; list the parameters as mechanism.Params.LedgerParams does", what, err)
}

// parsed is a parameter list as apply reads it: the parameters, and for a
// per-query mechanism its per-query cost.
type parsed struct {
	p   mechanism.Params
	qc  mechanism.QueryCost
	err error
	// charges remembers the charges of the answered and refused counts
	// seen with these parameters (a federation charges batches of a few
	// sizes over and over); nil when err is set or for a mechanism that
	// answers in sessions.
	charges *chargeMemo
}

// chargeMemo holds QueryCost.Charge's results by answered and refused
// counts, at most maxCharges of them. Like the cost cache, it changes no
// result: an entry is exactly what Charge computed, and curves are values
// no one changes.
type chargeMemo struct {
	mu sync.Mutex
	m  map[[2]int]mechanism.Charge
}

const maxCharges = 64

// charge is pc.qc.Charge(answered, refused), from the memo when it holds it.
func (pc parsed) charge(answered, refused int) (mechanism.Charge, error) {
	k := [2]int{answered, refused}
	pc.charges.mu.Lock()
	c, ok := pc.charges.m[k]
	pc.charges.mu.Unlock()
	if ok {
		return c, nil
	}
	c, err := pc.qc.Charge(answered, refused)
	if err != nil {
		return c, err
	}
	pc.charges.mu.Lock()
	defer pc.charges.mu.Unlock()
	if len(pc.charges.m) >= maxCharges {
		clear(pc.charges.m)
	}
	pc.charges.m[k] = c
	return c, nil
}

// costCache keeps the parsed parameter lists apply has seen, so that a
// federation's stream of charges with the same parameters parses them and
// computes their per-query cost once. It changes no result: an entry is
// exactly what parseCost computes. At most maxCached lists are kept. It
// has its own lock: State.Check decides under the state's read lock, so
// readers may fill it at once.
type costCache struct {
	mu sync.Mutex
	m  map[string]parsed
}

func newCostCache() *costCache { return &costCache{m: map[string]parsed{}} }

const maxCached = 256

func parseCost(g mechanism.Grid, kind string, params []Param) parsed {
	p, err := mechanism.ParseLedgerParams(mechanism.Kind(kind), params)
	if err != nil {
		return parsed{err: err}
	}
	if p.Mechanism.Sessions() {
		return parsed{p: p}
	}
	qc, err := p.QueryCost(g)
	if err != nil {
		return parsed{p: p, err: err}
	}
	return parsed{p: p, qc: qc, charges: &chargeMemo{m: map[[2]int]mechanism.Charge{}}}
}

// get returns the parsed list, from the cache when it holds it (a nil
// cache computes every time).
func (c *costCache) get(g mechanism.Grid, kind string, params []Param) parsed {
	if c == nil {
		return parseCost(g, kind, params)
	}
	var b strings.Builder
	b.WriteString(kind)
	for _, kv := range params {
		b.WriteString("\x00" + kv.Key + "\x00" + kv.Value)
	}
	key := b.String()
	c.mu.Lock()
	v, ok := c.m[key]
	c.mu.Unlock()
	if ok {
		return v
	}
	v = parseCost(g, kind, params)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= maxCached {
		clear(c.m)
	}
	c.m[key] = v
	return v
}

// deriveCharge recomputes a per-query charge's cost from its mechanism,
// parameters and counts: the realized cost of Answers answered and
// Queries − Answers refused queries, and the worst case of all Queries
// answered, which admission uses so that the decision does not depend on
// how many were.
func deriveCharge(g mechanism.Grid, cache *costCache, b *Charge, stated mechanism.Curve) (derived, Result, bool) {
	what := "batch " + b.BatchID
	pc := cache.get(g, b.Mechanism, b.Params)
	if pc.err != nil {
		return derived{}, badParams(b.BatchID, what, pc.err), false
	}
	if pc.p.Mechanism.Sessions() {
		return derived{}, refuse(CodeBadParams, b.BatchID, "%s: %s is charged when its session opens; name the session", what, pc.p.Mechanism), false
	}
	q, a := b.Queries, b.Answers
	if q > math.MaxInt32 {
		return derived{}, refuse(CodeBadCharge, b.BatchID, "%s: %d queries is more than one charge may cover", what, q), false
	}
	realized, err := pc.charge(int(a), int(q-a))
	if err != nil {
		return derived{}, badParams(b.BatchID, what, err), false
	}
	worst := realized
	if a != q {
		if worst, err = pc.charge(int(q), 0); err != nil {
			return derived{}, badParams(b.BatchID, what, err), false
		}
	}
	if r, ok := underCost(g, b.BatchID, what, stated, b.Delta, realized); !ok {
		return derived{}, r, false
	}
	d := derived{charge: maxLattice(stated, realized.RDP), chargeDelta: max(b.Delta, realized.Delta), chargePure: latticeUp(realized.PureEpsilon)}
	d.admit, d.admitDelta, d.admitPure = d.charge, d.chargeDelta, d.chargePure
	if a != q {
		d.admit, d.admitDelta, d.admitPure = maxLattice(stated, worst.RDP), max(b.Delta, worst.Delta), latticeUp(worst.PureEpsilon)
	}
	return d, Result{}, true
}

// deriveReserve recomputes a reservation's worst case: the charge of every
// query answered. A batch of a mechanism that answers in sessions is paid
// for by its session's opening, so its reservation states a zero cost and
// holds nothing but its queries against the student's quota (inSession).
func deriveReserve(g mechanism.Grid, cache *costCache, b *Reserve, stated mechanism.Curve) (d derived, inSession bool, r Result, ok bool) {
	if p, err := mechanism.ParseLedgerParams(mechanism.Kind(b.Mechanism), b.Params); err == nil && p.Mechanism.Sessions() {
		for i := range stated.Grid().Len() {
			if stated.At(i) != 0 {
				return derived{}, false, refuse(CodeBadCharge, b.BatchID, "batch %s of %s must reserve a zero curve and zero δ: its session paid its cost at opening", b.BatchID, p.Mechanism), false
			}
		}
		if b.Delta != 0 {
			return derived{}, false, refuse(CodeBadCharge, b.BatchID, "batch %s of %s must reserve a zero curve and zero δ: its session paid its cost at opening", b.BatchID, p.Mechanism), false
		}
		return derived{admit: g.Zero(), charge: g.Zero()}, true, Result{}, true
	}
	worst := &Charge{BatchID: b.BatchID, Student: b.Student, Hospitals: b.Hospitals, Mechanism: b.Mechanism, Params: b.Params,
		Queries: b.Queries, Answers: b.Queries, Curve: b.Curve, Delta: b.Delta}
	d, r, ok = deriveCharge(g, cache, worst, stated)
	return d, false, r, ok
}

// deriveSession recomputes a session's fixed cost from its mechanism, which
// must answer in sessions, and parameters, whose K must be the session's.
func deriveSession(g mechanism.Grid, b *OpenSession, stated mechanism.Curve) (derived, Result, bool) {
	what := "session " + b.SessionID
	p, err := mechanism.ParseLedgerParams(mechanism.Kind(b.Mechanism), b.Params)
	if err != nil {
		return derived{}, badParams(b.SessionID, what, err), false
	}
	if !p.Mechanism.Sessions() {
		return derived{}, refuse(CodeBadParams, b.SessionID, "%s: a session runs %s, not %s", what, sessionKinds(), p.Mechanism), false
	}
	if uint64(p.MaxRefusals) != b.MaxRefusals {
		return derived{}, refuse(CodeBadParams, b.SessionID, "%s: refusal bound %d, but its parameters say max_refusals=%d", what, b.MaxRefusals, p.MaxRefusals), false
	}
	want, err := p.Charge(g, 0, 0)
	if err != nil {
		return derived{}, badParams(b.SessionID, what, err), false
	}
	if r, ok := underCost(g, b.SessionID, what, stated, b.Delta, want); !ok {
		return derived{}, r, false
	}
	c := maxLattice(stated, want.RDP)
	d := max(b.Delta, want.Delta)
	pure := latticeUp(want.PureEpsilon)
	return derived{admit: c, charge: c, admitDelta: d, chargeDelta: d, admitPure: pure, chargePure: pure}, Result{}, true
}

// sessionParams checks that a charge in a session names a mechanism that
// answers in sessions, with canonical parameters and the session's refusal
// bound.
func sessionParams(batch, kind string, params []Param, k uint64, checkK bool) (Result, bool) {
	p, err := mechanism.ParseLedgerParams(mechanism.Kind(kind), params)
	if err != nil {
		return badParams(batch, "batch "+batch, err), false
	}
	if !p.Mechanism.Sessions() || (checkK && uint64(p.MaxRefusals) != k) {
		return refuse(CodeBadParams, batch, "batch %s: a charge in a session names %s with the session's max_refusals=%d, not %s with %d", batch, sessionKinds(), k, p.Mechanism, p.MaxRefusals), false
	}
	return Result{}, true
}

// sessionBound refuses a charge in a session that names another mechanism
// or other parameters than the session opened with: the session's cost
// holds only for the mechanism it paid for (a charge naming T = 0 inside a
// session opened at T = 120 would release what that cost does not cover).
// Parameters have one spelling each (mechanism.ParseLedgerParams), so equal
// parameters are equal bytes.
func sessionBound(b *Charge, mech string, params []Param) (Result, bool) {
	if b.Mechanism != mech || !slices.Equal(b.Params, params) {
		return refuse(CodeSessionMismatch, b.Session, "batch %s names %s with %s; session %s was opened, and paid for, with %s %s",
			b.BatchID, b.Mechanism, formatParams(b.Params), b.Session, mech, formatParams(params)), false
	}
	return Result{}, true
}

func formatParams(ps []Param) string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Key + "=" + p.Value
	}
	return strings.Join(out, ",")
}

// sessionKinds names the mechanisms that answer in sessions, for a
// refusal's message.
func sessionKinds() string {
	var names []string
	for _, k := range mechanism.SessionKinds() {
		names = append(names, string(k))
	}
	return strings.Join(names, " or ")
}

// CostCheck recomputes the cost of an accepted charge or session from its
// mechanism and parameters, as apply does, and returns the refusal apply
// would give one that states less (or whose parameters do not parse); nil
// for other commands and for costs that hold. Verification runs it on every
// entry, so that an export names every under-costed entry, not only the
// first one replay stops at.
func CostCheck(c Command) *RefusalError { return costCheck(c, nil) }

// costCheck is CostCheck parsing each parameter list once through cache
// (nil parses every time): the cache changes no result.
func costCheck(c Command, cache *costCache) *RefusalError {
	g := mechanism.DefaultGrid()
	var r Result
	ok := true
	switch b := c.Body.(type) {
	case *Charge:
		if b.Session != "" {
			r, ok = sessionParams(b.BatchID, b.Mechanism, b.Params, 0, false)
			break
		}
		stated, err := g.CurveOf(b.Curve)
		if err != nil {
			return &RefusalError{Code: CodeBadCurve, Subject: b.BatchID, Message: err.Error()}
		}
		_, r, ok = deriveCharge(g, cache, b, stated)
	case *OpenSession:
		stated, err := g.CurveOf(b.Curve)
		if err != nil {
			return &RefusalError{Code: CodeBadCurve, Subject: b.SessionID, Message: err.Error()}
		}
		_, r, ok = deriveSession(g, b, stated)
	case *Reserve:
		stated, err := g.CurveOf(b.Curve)
		if err != nil {
			return &RefusalError{Code: CodeBadCurve, Subject: b.BatchID, Message: err.Error()}
		}
		_, _, r, ok = deriveReserve(g, cache, b, stated)
	}
	if ok {
		return nil
	}
	return r.Err().(*RefusalError)
}
