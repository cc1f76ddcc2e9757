package ledger

import (
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"

	"github.com/nzcfed/nzc/mechanism"
)

// Version is the encoding version of commands, entries, snapshots and
// exports. A decoder refuses any other version: a new version is a new
// encoding, introduced together with the code that reads it.
const Version uint8 = 1

// signContext is prefixed to the bytes a command signature covers, so that a
// signature made for a ledger command can never be mistaken for a signature
// over anything else made with the same key.
const signContext = "nzc-ledger command v1\x00"

// Kind names a command.
type Kind uint8

// The commands. The numbers are part of the encoding and never reused.
const (
	KindGenesis          Kind = 1 // start the ledger: origin and the first parties (signed by an administrator it lists)
	KindRegisterParty    Kind = 2 // add a party (signed by an administrator)
	KindOpenAccount      Kind = 3 // a hospital opens its budget account with its cap (signed by that hospital)
	KindChangeCap        Kind = 4 // a hospital changes its cap (signed by that hospital)
	KindRegisterStudent  Kind = 5 // allow a student to be charged for, with an optional quota (signed by an administrator)
	KindCharge           Kind = 6 // a privacy charge for one batch of answers (signed by an aggregator)
	KindOpenSession      Kind = 7 // open a sparse-vector session, charging its whole cost (signed by an aggregator)
	KindCloseSession     Kind = 8 // close a sparse-vector session, recording its counts (signed by an aggregator)
	KindRegisterEnsemble Kind = 9 // register a hospital's ensemble size and the federation's class count (signed by an administrator)
	// KindChargeV2 is a charge that also records each hospital's
	// registered ensemble size: Charge with Ensembles set. A charge
	// without them keeps the kind charge and its encoding.
	KindChargeV2 Kind = 10
	// KindGenesisV2 is a genesis that fixes the federation's cap bounds:
	// Genesis with EpsilonBound and DeltaBound set. A genesis without
	// them keeps the kind genesis and its encoding.
	KindGenesisV2 Kind = 11
	// KindReserve holds a batch's worst-case cost against its hospitals'
	// caps before any of them is asked for votes (signed by an aggregator).
	KindReserve Kind = 12
	// KindSuspend suspends or reinstates a hospital's account (signed by
	// an administrator).
	KindSuspend Kind = 13
	// KindGenesisV3 is a genesis that also fixes the share of any
	// hospital's cap one student may spend: Genesis with StudentShare set
	// (and its cap bounds). A genesis without it keeps its kind and
	// encoding.
	KindGenesisV3 Kind = 14
)

var kindNames = [...]string{
	KindGenesis:          "genesis",
	KindRegisterParty:    "register-party",
	KindOpenAccount:      "open-account",
	KindChangeCap:        "change-cap",
	KindRegisterStudent:  "register-student",
	KindCharge:           "charge",
	KindOpenSession:      "open-session",
	KindCloseSession:     "close-session",
	KindRegisterEnsemble: "register-ensemble",
	KindChargeV2:         "charge-v2",
	KindGenesisV2:        "genesis-v2",
	KindReserve:          "reserve",
	KindSuspend:          "suspend",
	KindGenesisV3:        "genesis-v3",
}

// enumName is the name of v in names, or unknown(v) when it has none.
func enumName[E ~uint8](names []string, v E, unknown string) string {
	if int(v) < len(names) && names[v] != "" {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", unknown, uint8(v))
}

func (k Kind) String() string { return enumName(kindNames[:], k, "kind") }

func (k Kind) valid() bool { return k > 0 && int(k) < len(kindNames) && kindNames[k] != "" }

// Role is what a party may do.
type Role uint8

// The roles. The numbers are part of the encoding.
const (
	RoleAdmin      Role = 1 // federation administrator: registers parties and students
	RoleAggregator Role = 2 // proposes charges and sparse-vector sessions
	RoleHospital   Role = 3 // owns a budget account and sets its cap
	RoleStudent    Role = 4 // is charged for (through the aggregator); signs nothing in the ledger
	RoleAuditor    Role = 5 // runs a ledger replica and signs checkpoints
)

var roleNames = [...]string{
	RoleAdmin:      "admin",
	RoleAggregator: "aggregator",
	RoleHospital:   "hospital",
	RoleStudent:    "student",
	RoleAuditor:    "auditor",
}

func (r Role) String() string { return enumName(roleNames[:], r, "role") }

func (r Role) valid() bool { return r >= RoleAdmin && r <= RoleAuditor }

// Party is a member of the federation and its ed25519 public key.
type Party struct {
	ID        string            `json:"id"`
	Role      Role              `json:"role"`
	PublicKey ed25519.PublicKey `json:"public_key"`
}

// Param is one mechanism parameter. Parameters are a list sorted by key with
// no repeated key, so that their encoding is canonical; a charge's list is
// the mechanism's own (mechanism.Params.LedgerParams), which apply parses
// back with mechanism.ParseLedgerParams.
type Param = mechanism.KV

// Body is the content of a command. It is implemented by Genesis,
// RegisterParty, OpenAccount, ChangeCap, RegisterStudent, Charge, OpenSession,
// CloseSession, RegisterEnsemble, Reserve and Suspend.
type Body interface {
	Kind() Kind
	// Stamp is the time its proposer put in, in unix nanoseconds.
	Stamp() int64
	fields(f fields)
}

// Genesis starts the ledger. It names the log's origin (the first line of
// every checkpoint) and the first parties, among them at least one
// administrator and at least one auditor. It must be signed by an
// administrator it lists, and it is accepted only as the first accepted
// command.
type Genesis struct {
	Origin  string  // e.g. "nzc.example.org/ledger"; identifiers only, no spaces
	Parties []Party // sorted by ID, no repeats
	// EpsilonBound and DeltaBound bound every hospital's cap: a cap's ε
	// may not exceed EpsilonBound nor its δ DeltaBound, and every account
	// also reports its ε at DeltaBound, so that accounts compare at one
	// δ. Both set (finite ε > 0, δ in (0, 1)): the genesis is of kind
	// genesis-v2, which encodes them after the parties. Both zero: kind
	// genesis, encoded as before, and the ledger bounds caps by
	// DefaultEpsilonBound and DefaultDeltaBound.
	EpsilonBound float64
	DeltaBound   float64
	// StudentShare is the largest share of any hospital's cap ε one
	// student may spend (its charges and live reservations against that
	// hospital, composed and converted as the hospital's are), in (0, 1].
	// Set (with the cap bounds): kind genesis-v3, which encodes it after
	// them. Zero: the earlier kinds, and no share below the whole cap.
	StudentShare float64
	Timestamp    int64 // unix nanoseconds, put in by the proposer
}

// The cap bounds of a federation whose genesis states none.
const (
	DefaultEpsilonBound = 100
	DefaultDeltaBound   = 1e-5
)

// Share returns the share of any hospital's cap ε one student may spend:
// the genesis's own, or 1 (the whole cap) when it states none, so that a
// log begun before shares replays as it was decided.
func (b *Genesis) Share() float64 {
	if b.StudentShare == 0 {
		return 1
	}
	return b.StudentShare
}

// validShare reports whether a student share is in (0, 1].
func validShare(share float64) bool { return share > 0 && share <= 1 }

// Bounds returns the genesis's cap bounds (ε, δ): its own, or the
// defaults when it states none.
func (b *Genesis) Bounds() (epsilon, delta float64) {
	if b.EpsilonBound == 0 && b.DeltaBound == 0 {
		return DefaultEpsilonBound, DefaultDeltaBound
	}
	return b.EpsilonBound, b.DeltaBound
}

// RegisterParty adds one party. Signed by an administrator. A party ID is
// never reused and a registered key is never replaced.
type RegisterParty struct {
	Party     Party
	Timestamp int64
}

// OpenAccount opens a hospital's budget account with its cap (ε, δ). It must
// be signed by the hospital itself: no other party can set a hospital's cap.
type OpenAccount struct {
	Hospital   string
	CapEpsilon float64 // finite, > 0
	CapDelta   float64 // in (0, 1)
	Timestamp  int64
}

// ChangeCap replaces a hospital's cap. It must be signed by the hospital and
// carry the next cap version (1 + the number of earlier changes), so a signed
// request can be applied once only and never replayed later. A cap may be
// lowered below what is already spent; the account then refuses every charge.
type ChangeCap struct {
	Hospital   string
	Version    uint64 // 1 for the first change, 2 for the second, …
	CapEpsilon float64
	CapDelta   float64
	Timestamp  int64
}

// RegisterStudent allows charges for a student party. MaxAnswers > 0 limits
// the total number of answered queries the student may receive; 0 means no
// quota. Signed by an administrator.
type RegisterStudent struct {
	Student    string
	MaxAnswers uint64
	Timestamp  int64
}

// RegisterEnsemble records a hospital's ensemble size (its number of
// teachers, each of whom casts one vote per query) and the number of
// classes they vote on, which is the federation's: every registration names
// the same. Signed by an administrator. Version is 1 for a hospital's first
// registration and one more for each replacement, so that an old
// registration cannot be replayed. The aggregator takes each hospital's
// size from here, never from the hospital, and every charge naming the
// hospital must state this size.
type RegisterEnsemble struct {
	Hospital  string
	Version   uint64 // 1 for the first registration, 2 for the second, …
	Teachers  uint64 // 1 to MaxTeachers
	Classes   uint64 // 2 to MaxClasses
	Timestamp int64
}

// Suspend suspends (Suspended true) or reinstates (false) a hospital's
// account: while it is suspended, the ledger refuses every charge,
// reservation and session opening that names the hospital, whatever its
// budget. It is the federation's remedy against a hospital whose votes
// keep costing the others without answers. Signed by an administrator.
// Version is 1 for a hospital's first suspension or reinstatement and one
// more for each after, so that a signed command applies once only and an
// old one cannot be replayed. Reason is free text for the record.
type Suspend struct {
	Hospital  string
	Version   uint64 // 1 for the first, 2 for the second, …
	Suspended bool
	Reason    string // at most 1024 bytes of UTF-8 text
	Timestamp int64
}

// Relayed reports whether b is one party's own registration or account
// command (a party or ensemble registration, an account opening, a cap
// change), which the aggregator relays or a hospital submits itself, rather
// than the aggregator's own work. A proposer decides such a command
// against its replica and proposes it only when it would be accepted.
func Relayed(b Body) bool {
	switch b.(type) {
	case *RegisterParty, *OpenAccount, *ChangeCap, *RegisterEnsemble:
		return true
	}
	return false
}

// Receipted reports whether the commit of b releases something — a charge
// or a sparse-vector session opening — and is proven by a receipt that a
// majority of the auditors cosigned. A retry of such a command is proposed
// again and answered as a duplicate naming the original entry.
func Receipted(b Body) bool {
	switch b.(type) {
	case *Charge, *OpenSession:
		return true
	}
	return false
}

// AccountSubject returns the hospital a hospital's own command concerns,
// and whether the hospital signs it: its account commands (open-account,
// change-cap), which only it signs, and its registrations (register-party
// of a hospital, register-ensemble), which an administrator signs. ok is
// false for every other command. Those who pass commands on for a
// hospital check with it that a hospital passes on only its own.
func AccountSubject(b Body) (hospital string, bySelf, ok bool) {
	switch b := b.(type) {
	case *OpenAccount:
		return b.Hospital, true, true
	case *ChangeCap:
		return b.Hospital, true, true
	case *RegisterParty:
		return b.Party.ID, false, b.Party.Role == RoleHospital
	case *RegisterEnsemble:
		return b.Hospital, false, true
	}
	return "", false, false
}

// Bounds of a registered ensemble.
const (
	MaxTeachers = 1 << 20
	MaxClasses  = 1 << 16
)

// Charge is the privacy cost of one batch of answers, computed by the
// aggregator with the mechanism package and committed before any answer is
// released. Curve is the RDP curve of the whole batch on the default order
// grid and Delta its additive δ. A charge inside a sparse-vector session
// (Session set) must have a zero curve and zero δ: the session paid at
// opening. Its Hospitals are those of the session's that voted on the
// batch (any of them, no other: the others' teachers abstained), and its
// Params the session's, whose ensemble is all of the session's teachers.
type Charge struct {
	BatchID     string
	Student     string
	Hospitals   []string // sorted, no repeats, at least one
	Session     string   // empty outside a sparse-vector session
	Mechanism   string
	Params      []Param // sorted by key, no repeated key
	Queries     uint64
	Answers     uint64 // ≤ Queries
	Curve       []float64
	Delta       float64
	AnswersHash [32]byte // SHA-256 of the released answers
	Timestamp   int64
	// Ensembles, when set, is each hospital's registered ensemble size, in
	// the order of Hospitals (the charge is then of kind charge-v2, which
	// encodes it after the hospitals); the ledger refuses a charge whose
	// sizes are not the registered ones. Empty in a charge of hospitals
	// with no registration (kind charge, encoded as before).
	Ensembles []uint64
}

// OpenSession opens a sparse-vector session and charges its whole fixed cost
// (Curve, Delta) to every participating hospital at once. Charges that name
// the session then cost nothing more. MaxRefusals is the session's K: the
// ledger refuses any charge that would bring the session's refused queries
// (Queries − Answers, summed) above it, because the session's cost holds only
// while that bound does.
type OpenSession struct {
	SessionID   string
	Student     string
	Hospitals   []string
	Mechanism   string
	Params      []Param
	MaxRefusals uint64
	Curve       []float64
	Delta       float64
	Timestamp   int64
}

// Reserve holds the worst case of a batch — every one of its Queries
// answered by Mechanism with Params — against the caps of Hospitals, before
// any hospital is asked for votes or any noise is drawn. While it is live,
// every other admission (a reservation, a charge, a session opening) counts
// it as spent; the batch's charge then settles within it (a charge of at
// most its queries, of hospitals it names, costing no more at any order)
// without a second cap check, and releases it. A reservation that is not
// settled expires ReservationWindow entries after its own and is
// released. A second reservation of the same batch replaces the first.
// Its Queries also count as answered against the student's quota while it
// is live. A batch of a mechanism that answers in sessions reserves a zero
// Curve and Delta (its session paid at opening): it holds the quota only,
// and the batch's charge in its session releases it.
type Reserve struct {
	BatchID   string
	Student   string
	Hospitals []string // sorted, no repeats, at least one
	Mechanism string
	Params    []Param
	Queries   uint64
	Curve     []float64 // the worst case's RDP curve; the ledger recomputes it
	Delta     float64
	Timestamp int64
}

// ReservationWindow is how many entries after its own a reservation stays
// live: an expiry by entry count, which every replica decides alike.
const ReservationWindow = 4096

func (b *Reserve) key() string { return b.Student + "\x00" + b.BatchID }

func (b *Reserve) fields(f fields) {
	f.id("batch id", &b.BatchID)
	f.id("student", &b.Student)
	f.ids("hospitals", &b.Hospitals)
	f.id("mechanism", &b.Mechanism)
	f.params(&b.Params)
	f.u64(&b.Queries)
	f.curve(&b.Curve)
	f.f64("delta", &b.Delta)
	f.i64(&b.Timestamp)
}

// CloseSession closes a sparse-vector session; charges naming it are refused
// afterwards. The counts are the aggregator's totals for the session and are
// recorded as they are.
type CloseSession struct {
	SessionID string
	Queries   uint64
	Answers   uint64
	Timestamp int64
}

// Kind is genesis-v3 for a genesis that states a student share,
// genesis-v2 for one that states only its cap bounds, genesis otherwise.
func (b *Genesis) Kind() Kind {
	if b.StudentShare != 0 {
		return KindGenesisV3
	}
	if b.EpsilonBound != 0 || b.DeltaBound != 0 {
		return KindGenesisV2
	}
	return KindGenesis
}
func (*RegisterParty) Kind() Kind    { return KindRegisterParty }
func (*OpenAccount) Kind() Kind      { return KindOpenAccount }
func (*ChangeCap) Kind() Kind        { return KindChangeCap }
func (*RegisterStudent) Kind() Kind  { return KindRegisterStudent }
func (*RegisterEnsemble) Kind() Kind { return KindRegisterEnsemble }
func (*Suspend) Kind() Kind          { return KindSuspend }

// Kind is charge-v2 for a charge that records the ensemble sizes, charge
// otherwise.
func (b *Charge) Kind() Kind {
	if len(b.Ensembles) > 0 {
		return KindChargeV2
	}
	return KindCharge
}
func (*OpenSession) Kind() Kind  { return KindOpenSession }
func (*Reserve) Kind() Kind      { return KindReserve }
func (*CloseSession) Kind() Kind { return KindCloseSession }

func (b *Genesis) Stamp() int64          { return b.Timestamp }
func (b *RegisterParty) Stamp() int64    { return b.Timestamp }
func (b *OpenAccount) Stamp() int64      { return b.Timestamp }
func (b *ChangeCap) Stamp() int64        { return b.Timestamp }
func (b *RegisterStudent) Stamp() int64  { return b.Timestamp }
func (b *Charge) Stamp() int64           { return b.Timestamp }
func (b *OpenSession) Stamp() int64      { return b.Timestamp }
func (b *Reserve) Stamp() int64          { return b.Timestamp }
func (b *CloseSession) Stamp() int64     { return b.Timestamp }
func (b *RegisterEnsemble) Stamp() int64 { return b.Timestamp }
func (b *Suspend) Stamp() int64          { return b.Timestamp }

// fields reads or writes a body's fields. Each body lists its fields once,
// in their canonical order (Body.fields), and the same list serves the
// encoder (writer) and the decoder (reader), so the two cannot disagree on
// the layout. Writing checks a value against the canonical form before it
// is appended; reading checks it as it is taken.
type fields interface {
	id(field string, s *string)
	// optID is an identifier that may be empty.
	optID(field string, s *string)
	u64(v *uint64)
	i64(v *int64)
	f64(field string, v *float64)
	hash(field string, h *[hashSize]byte)
	// ids is a list of identifiers, sorted with no repeats.
	ids(field string, v *[]string)
	// params is a mechanism's parameters, sorted by key with no repeats.
	params(v *[]Param)
	curve(v *[]float64)
	party(p *Party)
	// parties is the genesis's parties, sorted by id with no repeats.
	parties(v *[]Party)
	// ensembles is a charge's ensemble size for each of its hospitals:
	// present in a charge-v2 (a charge that states them), absent in a
	// charge.
	ensembles(hospitals []string, v *[]uint64)
	// bounds is a genesis's cap bounds and student share: the bounds
	// present in a genesis-v2, the bounds and the share in a genesis-v3,
	// neither in a genesis.
	bounds(epsilon, delta, share *float64)
	// flag is a boolean: one byte, 0 or 1.
	flag(field string, v *bool)
	// text is free UTF-8 text of at most maxTextLen bytes.
	text(field string, s *string)
}

// writer writes a body's fields to an encoder.
type writer struct{ e *encoder }

func (w writer) id(field string, s *string)           { w.e.id(field, *s) }
func (w writer) optID(field string, s *string)        { w.e.optID(field, *s) }
func (w writer) u64(v *uint64)                        { w.e.u64(*v) }
func (w writer) i64(v *int64)                         { w.e.i64(*v) }
func (w writer) f64(field string, v *float64)         { w.e.f64(field, *v) }
func (w writer) hash(field string, h *[hashSize]byte) { w.e.fixed(field, h[:], hashSize) }

func (w writer) ids(field string, ids *[]string) {
	w.e.count(field, len(*ids))
	for i, s := range *ids {
		if i > 0 && s <= (*ids)[i-1] {
			w.e.fail("%s must be sorted with no repeats (%q after %q)", field, s, (*ids)[i-1])
		}
		w.e.id(field, s)
	}
}

func (w writer) params(v *[]Param) {
	ps := *v
	w.e.count("parameters", len(ps))
	for i, p := range ps {
		if i > 0 && p.Key <= ps[i-1].Key {
			w.e.fail("parameters must be sorted by key with no repeats (%q after %q)", p.Key, ps[i-1].Key)
		}
		w.e.id("parameter key", p.Key)
		w.e.str("parameter "+p.Key, p.Value, maxTextLen)
	}
}

func (w writer) curve(v *[]float64) {
	w.e.count("curve", len(*v))
	for _, x := range *v {
		w.e.f64("curve value", x)
	}
}

func (w writer) party(p *Party) {
	w.e.id("party id", p.ID)
	if !p.Role.valid() {
		w.e.fail("party %s has unknown role %d", p.ID, p.Role)
	}
	w.e.u8(uint8(p.Role))
	w.e.fixed("public key of "+p.ID, p.PublicKey, publicKeyLen)
}

func (w writer) parties(v *[]Party) {
	ps := *v
	w.e.count("parties", len(ps))
	for i := range ps {
		if i > 0 && ps[i].ID <= ps[i-1].ID {
			w.e.fail("genesis parties must be sorted by id with no repeats (%q after %q)", ps[i].ID, ps[i-1].ID)
		}
		w.party(&ps[i])
	}
}

func (w writer) ensembles(hospitals []string, v *[]uint64) {
	if len(*v) == 0 {
		return
	}
	if len(*v) != len(hospitals) {
		w.e.fail("a charge states %d ensemble sizes for %d hospitals", len(*v), len(hospitals))
	}
	for _, n := range *v {
		if n < 1 || n > MaxTeachers {
			w.e.fail("ensemble size %d is outside [1, %d]", n, MaxTeachers)
		}
		w.e.u64(n)
	}
}

func (w writer) bounds(epsilon, delta, share *float64) {
	if *epsilon == 0 && *delta == 0 && *share == 0 {
		return
	}
	if !validCap(*epsilon, *delta) {
		w.e.fail("cap bounds ε=%v δ=%v: ε must be finite and > 0, δ in (0, 1) (a genesis with a student share states its cap bounds too)", *epsilon, *delta)
	}
	w.e.f64("epsilon bound", *epsilon)
	w.e.f64("delta bound", *delta)
	if *share == 0 {
		return
	}
	if !validShare(*share) {
		w.e.fail("student share %v: it must be in (0, 1]", *share)
	}
	w.e.f64("student share", *share)
}

func (w writer) flag(field string, v *bool) {
	if *v {
		w.e.u8(1)
	} else {
		w.e.u8(0)
	}
}

func (w writer) text(field string, s *string) { w.e.str(field, *s, maxTextLen) }

// reader reads a body's fields from a decoder.
type reader struct{ d *decoder }

func (r reader) id(field string, s *string)           { *s = r.d.id(field) }
func (r reader) optID(field string, s *string)        { *s = r.d.optID(field) }
func (r reader) u64(v *uint64)                        { *v = r.d.u64() }
func (r reader) i64(v *int64)                         { *v = r.d.i64() }
func (r reader) f64(field string, v *float64)         { *v = r.d.f64(field) }
func (r reader) hash(field string, h *[hashSize]byte) { copy(h[:], r.d.take(hashSize)) }

func (r reader) ids(field string, v *[]string) {
	n := r.d.count(field)
	ids := make([]string, 0, n)
	for i := 0; i < n && r.d.err == nil; i++ {
		s := r.d.id(field)
		if i > 0 && s <= ids[i-1] && r.d.err == nil {
			r.d.fail("%s must be sorted with no repeats (%q after %q)", field, s, ids[i-1])
		}
		ids = append(ids, s)
	}
	*v = ids
}

func (r reader) params(v *[]Param) {
	n := r.d.count("parameters")
	ps := make([]Param, 0, n)
	for i := 0; i < n && r.d.err == nil; i++ {
		var p Param
		p.Key = r.d.id("parameter key")
		p.Value = r.d.str("parameter value", maxTextLen)
		if i > 0 && p.Key <= ps[i-1].Key && r.d.err == nil {
			r.d.fail("parameters must be sorted by key with no repeats (%q after %q)", p.Key, ps[i-1].Key)
		}
		ps = append(ps, p)
	}
	*v = ps
}

func (r reader) curve(v *[]float64) {
	n := r.d.count("curve")
	c := make([]float64, 0, n)
	for i := 0; i < n && r.d.err == nil; i++ {
		c = append(c, r.d.f64("curve value"))
	}
	*v = c
}

func (r reader) party(p *Party) {
	p.ID = r.d.id("party id")
	p.Role = Role(r.d.u8())
	if r.d.err == nil && !p.Role.valid() {
		r.d.fail("party %s has unknown role %d", p.ID, p.Role)
	}
	p.PublicKey = r.d.fixed(publicKeyLen)
}

func (r reader) parties(v *[]Party) {
	n := r.d.count("parties")
	for i := 0; i < n && r.d.err == nil; i++ {
		var p Party
		r.party(&p)
		if i > 0 && p.ID <= (*v)[i-1].ID && r.d.err == nil {
			r.d.fail("genesis parties must be sorted by id with no repeats (%q after %q)", p.ID, (*v)[i-1].ID)
		}
		*v = append(*v, p)
	}
}

func (r reader) ensembles(hospitals []string, v *[]uint64) {
	if r.d.kind != KindChargeV2 {
		return
	}
	if len(hospitals) == 0 && r.d.err == nil {
		r.d.fail("a charge-v2 names no hospital")
	}
	*v = make([]uint64, 0, len(hospitals))
	for range hospitals {
		n := r.d.u64()
		if (n < 1 || n > MaxTeachers) && r.d.err == nil {
			r.d.fail("ensemble size %d is outside [1, %d]", n, MaxTeachers)
		}
		*v = append(*v, n)
	}
}

func (r reader) bounds(epsilon, delta, share *float64) {
	if r.d.kind != KindGenesisV2 && r.d.kind != KindGenesisV3 {
		return
	}
	*epsilon = r.d.f64("epsilon bound")
	*delta = r.d.f64("delta bound")
	if r.d.err == nil && !validCap(*epsilon, *delta) {
		r.d.fail("cap bounds ε=%v δ=%v: ε must be finite and > 0, δ in (0, 1)", *epsilon, *delta)
	}
	if r.d.kind != KindGenesisV3 {
		return
	}
	*share = r.d.f64("student share")
	if r.d.err == nil && !validShare(*share) {
		r.d.fail("student share %v: it must be in (0, 1]", *share)
	}
}

func (r reader) flag(field string, v *bool) {
	switch b := r.d.u8(); {
	case r.d.err != nil:
	case b > 1:
		r.d.fail("%s is %d, want 0 or 1", field, b)
	default:
		*v = b == 1
	}
}

func (r reader) text(field string, s *string) { *s = r.d.str(field, maxTextLen) }

func (b *Genesis) fields(f fields) {
	f.id("origin", &b.Origin)
	f.parties(&b.Parties)
	f.bounds(&b.EpsilonBound, &b.DeltaBound, &b.StudentShare)
	f.i64(&b.Timestamp)
}

func (b *RegisterParty) fields(f fields) {
	f.party(&b.Party)
	f.i64(&b.Timestamp)
}

func (b *OpenAccount) fields(f fields) {
	f.id("hospital", &b.Hospital)
	f.f64("cap ε", &b.CapEpsilon)
	f.f64("cap δ", &b.CapDelta)
	f.i64(&b.Timestamp)
}

func (b *ChangeCap) fields(f fields) {
	f.id("hospital", &b.Hospital)
	f.u64(&b.Version)
	f.f64("cap ε", &b.CapEpsilon)
	f.f64("cap δ", &b.CapDelta)
	f.i64(&b.Timestamp)
}

func (b *RegisterStudent) fields(f fields) {
	f.id("student", &b.Student)
	f.u64(&b.MaxAnswers)
	f.i64(&b.Timestamp)
}

// key is the charge's batch in the ledger's record of charged batches:
// batch ids are each student's own, so one student's batch id never
// collides with, or reveals, another's.
func (b *Charge) key() string { return b.Student + "\x00" + b.BatchID }

func (b *Charge) fields(f fields) {
	f.id("batch id", &b.BatchID)
	f.id("student", &b.Student)
	f.ids("hospitals", &b.Hospitals)
	f.ensembles(b.Hospitals, &b.Ensembles)
	f.optID("session", &b.Session)
	f.id("mechanism", &b.Mechanism)
	f.params(&b.Params)
	f.u64(&b.Queries)
	f.u64(&b.Answers)
	f.curve(&b.Curve)
	f.f64("δ", &b.Delta)
	f.hash("answers hash", &b.AnswersHash)
	f.i64(&b.Timestamp)
}

func (b *RegisterEnsemble) fields(f fields) {
	f.id("hospital", &b.Hospital)
	f.u64(&b.Version)
	f.u64(&b.Teachers)
	f.u64(&b.Classes)
	f.i64(&b.Timestamp)
}

func (b *Suspend) fields(f fields) {
	f.id("hospital", &b.Hospital)
	f.u64(&b.Version)
	f.flag("suspended", &b.Suspended)
	f.text("reason", &b.Reason)
	f.i64(&b.Timestamp)
}

func (b *OpenSession) fields(f fields) {
	f.id("session", &b.SessionID)
	f.id("student", &b.Student)
	f.ids("hospitals", &b.Hospitals)
	f.id("mechanism", &b.Mechanism)
	f.params(&b.Params)
	f.u64(&b.MaxRefusals)
	f.curve(&b.Curve)
	f.f64("δ", &b.Delta)
	f.i64(&b.Timestamp)
}

func (b *CloseSession) fields(f fields) {
	f.id("session", &b.SessionID)
	f.u64(&b.Queries)
	f.u64(&b.Answers)
	f.i64(&b.Timestamp)
}

// Command is a signed body:
//
//	version u8 | kind u8 | body | signer id | signature [64]byte
//
// The signature is ed25519 by the signer's registered key over
// "nzc-ledger command v1\x00" followed by every byte before the signature.
type Command struct {
	Body      Body
	Signer    string // the ID of the signing party
	Signature []byte

	signed []byte // set by DecodeCommand: the signed message, taken from the decoded bytes
}

// signedPrefix returns the bytes the signature covers, without the context.
func (c Command) signedPrefix() ([]byte, error) {
	if c.Body == nil {
		return nil, fmt.Errorf("%w: command has no body", ErrMalformed)
	}
	e := &encoder{}
	e.u8(Version)
	e.u8(uint8(c.Body.Kind()))
	c.Body.fields(writer{e})
	e.id("signer", c.Signer)
	return e.buf, e.err
}

// Encode returns the canonical bytes of the command.
func (c Command) Encode() ([]byte, error) {
	b, err := c.signedPrefix()
	if err != nil {
		return nil, err
	}
	if len(c.Signature) != signatureLen {
		return nil, fmt.Errorf("%w: signature is %d bytes, want %d", ErrMalformed, len(c.Signature), signatureLen)
	}
	return append(b, c.Signature...), nil
}

// SignedMessage returns the exact bytes the command's signature covers.
func (c Command) SignedMessage() ([]byte, error) {
	if c.signed != nil {
		return c.signed, nil
	}
	b, err := c.signedPrefix()
	if err != nil {
		return nil, err
	}
	return append([]byte(signContext), b...), nil
}

// Digest returns the SHA-256 of the signed message: it identifies the
// command's content independently of the signature bytes.
func (c Command) Digest() ([32]byte, error) {
	m, err := c.SignedMessage()
	if err != nil {
		return [32]byte{}, err
	}
	return sha256.Sum256(m), nil
}

// Verify checks the command's signature with the given key.
func (c Command) Verify(key ed25519.PublicKey) bool {
	m, err := c.SignedMessage()
	if err != nil || len(key) != ed25519.PublicKeySize || len(c.Signature) != signatureLen {
		return false
	}
	return ed25519.Verify(key, m, c.Signature)
}

// Sign signs body as the party signer with key and returns the encoded
// command, ready to be proposed to the ledger.
func Sign(body Body, signer string, key ed25519.PrivateKey) ([]byte, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("ledger: signing key is %d bytes, want an ed25519 private key of %d", len(key), ed25519.PrivateKeySize)
	}
	c := Command{Body: body, Signer: signer}
	m, err := c.SignedMessage()
	if err != nil {
		return nil, err
	}
	c.Signature = ed25519.Sign(key, m)
	return c.Encode()
}

// DecodeCommand decodes the canonical encoding of a command. It does not
// check the signature (the state machine does, against the registered key).
func DecodeCommand(b []byte) (Command, error) {
	d := &decoder{buf: b}
	if v := d.u8(); d.err == nil && v != Version {
		return Command{}, fmt.Errorf("%w: command version %d, this ledger reads version %d", ErrMalformed, v, Version)
	}
	k := Kind(d.u8())
	if d.err != nil {
		return Command{}, d.err
	}
	var body Body
	switch k {
	case KindGenesis, KindGenesisV2, KindGenesisV3:
		body = &Genesis{}
	case KindRegisterParty:
		body = &RegisterParty{}
	case KindOpenAccount:
		body = &OpenAccount{}
	case KindChangeCap:
		body = &ChangeCap{}
	case KindRegisterStudent:
		body = &RegisterStudent{}
	case KindCharge, KindChargeV2:
		body = &Charge{}
	case KindOpenSession:
		body = &OpenSession{}
	case KindCloseSession:
		body = &CloseSession{}
	case KindRegisterEnsemble:
		body = &RegisterEnsemble{}
	case KindReserve:
		body = &Reserve{}
	case KindSuspend:
		body = &Suspend{}
	default:
		return Command{}, fmt.Errorf("%w: unknown command kind %d", ErrMalformed, k)
	}
	d.kind = k
	body.fields(reader{d})
	c := Command{Body: body}
	c.Signer = d.id("signer")
	c.Signature = d.fixed(signatureLen)
	if err := d.end(); err != nil {
		return Command{}, err
	}
	// The decoding is canonical, so the bytes before the signature are
	// exactly what encoding the decoded command gives.
	c.signed = append([]byte(signContext), b[:len(b)-signatureLen]...)
	return c, nil
}
