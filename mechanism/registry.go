package mechanism

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Def defines one mechanism: the parameters it reads, how it answers and
// what a query costs. Each mechanism is one type implementing Def,
// registered under its Kind; Params, the ledger's cost derivation and the
// parties reach it through Lookup and never test its name. A Def holds no
// state: every method is a pure function of its arguments.
//
// The methods other than Kind and Preset are called only through Params,
// which checks what is common to every mechanism first (teachers, classes,
// the parameters the mechanism does not read) and calls New, QueryCost and
// Describe with parameters that validate.
type Def interface {
	// Kind is the mechanism's name, as configurations and ledger entries
	// spell it.
	Kind() Kind
	// Preset returns the mechanism's parameters for ReferenceTeachers
	// teachers, Teachers and Classes unset.
	Preset() Params
	// Keys returns the ledger keys of the parameters the mechanism reads
	// from p (without teachers and classes), in any order. Every other
	// parameter must be unset.
	Keys(p Params) []string
	// Check checks the parameters the mechanism reads, each error a
	// *ParamError.
	Check(p Params) error
	// ForEnsemble returns p adapted to an ensemble f = k/ReferenceTeachers
	// times the reference one (see Params.ForEnsemble).
	ForEnsemble(p Params, f float64) Params
	// Describe describes p's parameters for a report (see Params.String).
	Describe(p Params) string
	// New builds the mechanism p describes. A SessionDef opens a session.
	New(p Params) (Mechanism, error)
	// QueryCost returns the data-independent cost of one query of p, every
	// value rounded up. A SessionDef's queries are covered by the cost of
	// their session: both curves are zero.
	QueryCost(g Grid, p Params) (QueryCost, error)
}

// SessionDef is the capability of a mechanism that answers in sessions:
// its whole privacy cost is fixed, and paid, when a session opens, and a
// session answers queries until it has refused its K (Params.MaxRefusals)
// of them. Callers ask for it with Kind.Sessions or a type assertion on
// Lookup's Def, never by name.
type SessionDef interface {
	Def
	// SessionCharge returns the fixed cost of one whole session of p.
	SessionCharge(g Grid, p Params) (Charge, error)
	// Open opens a new session of p.
	Open(p Params) (Session, error)
	// Resume reopens a session of p in a state its State returned.
	Resume(p Params, st SessionState) (Session, error)
	// Plan returns the parameters of one session for an ensemble of
	// teachers and classes whose whole cost is at most eps (pure) with its
	// own additive δ at most delta, allowing maxRefusals refusals.
	Plan(eps, delta float64, maxRefusals, teachers, classes int) (Params, error)
}

// Session is an open session of a SessionDef: a sequential, stateful
// mechanism whose cost was paid when it opened. After its K-th refusal it
// answers ErrSessionExhausted and releases nothing.
type Session interface {
	Mechanism
	// Refusals returns how many queries the session has refused.
	Refusals() int
	// Exhausted reports whether the session has used its K refusals.
	Exhausted() bool
	// State returns the session's state, to resume it later (Resume). It
	// is secret — it holds privacy noise — and must be stored only sealed.
	State() SessionState
}

// ErrRegistered reports a Register of a kind that is already registered.
var ErrRegistered = errors.New("mechanism: a mechanism of that name is already registered; choose another name")

// registry maps kinds to their definitions, in registration order. The
// built-in mechanisms are registered when it is made and cannot be
// replaced.
type registry struct {
	mu   sync.RWMutex
	defs map[Kind]Def
	kind []Kind
}

func newRegistry(defs ...Def) *registry {
	r := &registry{defs: map[Kind]Def{}}
	for _, d := range defs {
		r.defs[d.Kind()] = d
		r.kind = append(r.kind, d.Kind())
	}
	return r
}

// mechanisms is the registry Lookup reads: the built-in mechanisms and
// any that Register adds.
var mechanisms = newRegistry(nzcDef{}, lnmaxDef{}, gnmaxDef{}, confidentDef{}, svtDef{})

// Register adds the mechanism d defines, under d.Kind(), to the set every
// party and the ledger accept. A kind that is registered already, or empty,
// is refused with ErrRegistered, and a definition whose preset is of
// another kind or reads a parameter Params does not have with ErrBadParams;
// either changes nothing. Every party and auditor of a federation must
// register the same mechanisms.
func Register(d Def) error {
	k := d.Kind()
	if p := d.Preset(); p.Mechanism != k {
		return fmt.Errorf("%w: the preset of %q is of mechanism %q", ErrBadParams, k, p.Mechanism)
	}
	keys := d.Keys(d.Preset())
	for i, key := range keys {
		if !slices.Contains(paramKeys(), key) || slices.Contains(keys[:i], key) {
			return fmt.Errorf("%w: mechanism %q reads the parameter %q, which is not one of %s or is named twice; add a field to Params for a new parameter",
				ErrBadParams, k, key, strings.Join(paramKeys(), ", "))
		}
	}
	mechanisms.mu.Lock()
	defer mechanisms.mu.Unlock()
	if _, ok := mechanisms.defs[k]; ok || k == "" {
		return fmt.Errorf("%w: %q", ErrRegistered, k)
	}
	mechanisms.defs[k] = d
	mechanisms.kind = append(mechanisms.kind, k)
	return nil
}

// Lookup returns the definition of mechanism k. An unknown kind is a
// *ParamError naming the known ones.
func Lookup(k Kind) (Def, error) {
	mechanisms.mu.RLock()
	d, ok := mechanisms.defs[k]
	mechanisms.mu.RUnlock()
	if !ok {
		return nil, &ParamError{Param: "mechanism", Value: string(k), Reason: "must be one of " + strings.Join(kindNames(), ", ")}
	}
	return d, nil
}

// Kinds lists every registered mechanism, the built-in ones first.
func Kinds() []Kind {
	mechanisms.mu.RLock()
	defer mechanisms.mu.RUnlock()
	return slices.Clone(mechanisms.kind)
}

func kindNames() []string {
	var out []string
	for _, k := range Kinds() {
		out = append(out, string(k))
	}
	return out
}

// Sessions reports whether mechanism k answers in sessions (its Def is a
// SessionDef): paid once per session, when it opens, rather than per
// query.
func (k Kind) Sessions() bool {
	_, ok := sessionDef(k)
	return ok
}

// SessionKinds lists the registered mechanisms that answer in sessions.
func SessionKinds() []Kind {
	return slices.DeleteFunc(Kinds(), func(k Kind) bool { return !k.Sessions() })
}

// DefaultSessionKind is the session mechanism a caller uses when it names
// none: the first registered, a built-in one.
func DefaultSessionKind() Kind {
	return SessionKinds()[0]
}

func sessionDef(k Kind) (SessionDef, bool) {
	d, err := Lookup(k)
	if err != nil {
		return nil, false
	}
	s, ok := d.(SessionDef)
	return s, ok
}

// Open opens a new session of p, whose mechanism must answer in sessions.
// Its cost (Params.Charge) is fixed now.
func Open(p Params) (Session, error) {
	d, ok := sessionDef(p.Mechanism)
	if !ok {
		return nil, &ParamError{Param: "mechanism", Value: string(p.Mechanism), Reason: "answers per query, not in sessions; a session is one of " + sessionNames()}
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return d.Open(p)
}

// ResumeSession reopens a session of parameters p in a state State
// returned: the session goes on as if it had never stopped, and its cost,
// paid when it opened, still covers it. A state that does not parse, or
// that the parameters do not allow, is an error.
func ResumeSession(p Params, st SessionState) (Session, error) {
	d, ok := sessionDef(p.Mechanism)
	if !ok {
		return nil, &ParamError{Param: "mechanism", Value: string(p.Mechanism), Reason: "answers per query, not in sessions; a session is one of " + sessionNames()}
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return d.Resume(p, st)
}

// PlanSession returns the parameters of one session of mechanism k for an
// ensemble of teachers and classes whose whole cost is at most eps (pure)
// with its own additive δ at most delta, allowing maxRefusals refusals. k
// must answer in sessions.
func (k Kind) PlanSession(eps, delta float64, maxRefusals, teachers, classes int) (Params, error) {
	d, ok := sessionDef(k)
	if !ok {
		return Params{}, &ParamError{Param: "mechanism", Value: string(k), Reason: "answers per query, not in sessions; a session is one of " + sessionNames()}
	}
	return d.Plan(eps, delta, maxRefusals, teachers, classes)
}

func sessionNames() string {
	var out []string
	for _, k := range SessionKinds() {
		out = append(out, string(k))
	}
	return strings.Join(out, ", ")
}
