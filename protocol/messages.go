package protocol

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"math"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// ProtocolVersion is the version carried in Hello and Ack.
const ProtocolVersion = 1

// Limits on message contents, beyond the frame limit.
const (
	MinBatchIDLen   = 16
	MaxBatchIDLen   = 64
	MaxBatchQueries = 1 << 20
	MaxFeatureDim   = 1 << 20
	MaxClasses      = 1 << 16
	// MaxTeachers bounds one hospital's registered ensemble: far above any
	// real ensemble, small enough that summing every hospital's votes
	// cannot overflow.
	MaxTeachers   = 1 << 20
	MaxPartyIDLen = 63
	MaxHospitals  = 1 << 12
	// MaxChargeReceipts bounds the receipts one query batch hands a
	// hospital.
	MaxChargeReceipts = 256
	// MaxRegistration bounds a hospital's ledger registration carried in
	// Hello and passed on to students: its registration, or the genesis
	// that registers a founding hospital (about 60 bytes a party).
	MaxRegistration = 1 << 14
)

// ErrBadMessage is matched (errors.Is) by every decoding or validation
// error of a message body.
var ErrBadMessage = errors.New("bad message")

// frameMessages holds, by frame type, the message a frame of that type
// carries (a nil pointer of its type): New, TypeOf and each type's name
// all read it, so the two directions cannot disagree.
var frameMessages = [...]proto.Message{
	TypeError:          (*nzcpb.Error)(nil),
	TypeHello:          (*nzcpb.Hello)(nil),
	TypeAck:            (*nzcpb.Ack)(nil),
	TypeQueryBatch:     (*nzcpb.QueryBatch)(nil),
	TypeVoteBatch:      (*nzcpb.VoteBatch)(nil),
	TypeLabelRequest:   (*nzcpb.LabelRequest)(nil),
	TypeLabelResponse:  (*nzcpb.LabelResponse)(nil),
	TypeBudgetRequest:  (*nzcpb.BudgetRequest)(nil),
	TypeBudgetResponse: (*nzcpb.BudgetResponse)(nil),
	TypeLedgerSubmit:   (*nzcpb.LedgerSubmit)(nil),
	TypeLedgerResult:   (*nzcpb.LedgerResult)(nil),
}

// New returns an empty message of frame type t.
func New(t MsgType) (proto.Message, error) {
	if !t.Known() {
		return nil, &UnknownTypeError{Type: t}
	}
	return frameMessages[t].ProtoReflect().Type().New().Interface(), nil
}

// TypeOf returns the frame type of m.
func TypeOf(m proto.Message) (MsgType, error) {
	if m != nil {
		name := m.ProtoReflect().Descriptor().FullName()
		for t := TypeError; t <= maxType; t++ {
			if frameMessages[t].ProtoReflect().Descriptor().FullName() == name {
				return t, nil
			}
		}
	}
	return 0, fmt.Errorf("%T is not a frame message of this protocol", m)
}

// Marshal encodes m deterministically: equal messages give equal bytes, so
// encodings may be hashed, signed and compared with golden files.
func Marshal(m proto.Message) ([]byte, error) {
	return AppendMarshal(nil, m)
}

// AppendMarshal appends m's deterministic encoding to dst.
func AppendMarshal(dst []byte, m proto.Message) ([]byte, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend(dst, m)
	if err != nil {
		return nil, fmt.Errorf("encode %T: %w", m, err)
	}
	return b, nil
}

// Decode parses and validates a frame body of type t.
func Decode(t MsgType, body []byte) (proto.Message, error) {
	m, err := New(t)
	if err != nil {
		return nil, err
	}
	if err := unmarshalValid(body, m); err != nil {
		return nil, fmt.Errorf("%s: %w", t, err)
	}
	return m, nil
}

// DecodeInto parses and validates a frame body of type t into m, whose
// type must be t's.
func DecodeInto(t MsgType, body []byte, m proto.Message) error {
	want, err := TypeOf(m)
	if err != nil {
		return err
	}
	if t != want {
		return fmt.Errorf("%w: got a %s frame, want %s", ErrBadMessage, t, want)
	}
	if err := unmarshalValid(body, m); err != nil {
		return fmt.Errorf("%s: %w", t, err)
	}
	return nil
}

// DecodePlain parses and validates the plaintext of a sealed payload
// (Features, Histograms or Labels).
func DecodePlain(body []byte, m proto.Message) error {
	return unmarshalValid(body, m)
}

func unmarshalValid(body []byte, m proto.Message) error {
	if err := (proto.UnmarshalOptions{}).Unmarshal(body, m); err != nil {
		return fmt.Errorf("%w: %v", ErrBadMessage, err)
	}
	return Validate(m)
}

func bad(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadMessage, fmt.Sprintf(format, args...))
}

// Validate checks the invariants of a message that protobuf cannot express.
// Errors match ErrBadMessage and say which field is wrong.
func Validate(m proto.Message) error {
	switch m := m.(type) {
	case *nzcpb.Error:
		// A code unknown to this version is kept: FromWire maps it to internal.
		if m.GetCode() == nzcpb.ErrorCode_ERROR_CODE_UNSPECIFIED {
			return bad("error without a code")
		}
	case *nzcpb.Hello:
		return validHello(m)
	case *nzcpb.Ack:
		return validAck(m)
	case *nzcpb.QueryBatch:
		return validQueryBatch(m)
	case *nzcpb.VoteBatch:
		return validVoteBatch(m)
	case *nzcpb.LabelRequest:
		return validLabelRequest(m)
	case *nzcpb.LabelResponse:
		return validLabelResponse(m)
	case *nzcpb.BudgetRequest:
		return validBudgetRequest(m)
	case *nzcpb.BudgetResponse:
		return validBudgetResponse(m)
	case *nzcpb.LedgerSubmit:
		if len(m.GetCommand()) == 0 {
			return bad("empty ledger command")
		}
	case *nzcpb.LedgerResult:
		if m.GetCode() == nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_UNSPECIFIED || nzcpb.LedgerResultCode_name[int32(m.GetCode())] == "" {
			return bad("ledger result without a known code")
		}
		if err := checkReceipt(m.GetReceipt()); err != nil {
			return err
		}
	case *nzcpb.Features:
		return validFeatures(m)
	case *nzcpb.Histograms:
		return validHistograms(m)
	case *nzcpb.Labels:
		return validLabels(m)
	}
	return nil
}

func validHello(m *nzcpb.Hello) error {
	if m.GetProtocolVersion() != ProtocolVersion {
		return bad("protocol version %d, this party speaks %d: upgrade the older party", m.GetProtocolVersion(), ProtocolVersion)
	}
	if m.GetRole() == nzcpb.Role_ROLE_UNSPECIFIED || nzcpb.Role_name[int32(m.GetRole())] == "" {
		return bad("hello without a known role")
	}
	if err := checkPartyID("party_id", m.GetPartyId()); err != nil {
		return err
	}
	if err := checkRecipient(m.GetAgeRecipient()); err != nil {
		return err
	}
	h := m.GetHospital()
	if (m.GetRole() == nzcpb.Role_ROLE_HOSPITAL) != (h != nil) {
		return bad("hospital info must be set exactly when the role is hospital")
	}
	if h == nil && (len(m.GetRecipientSignature()) > 0 || len(m.GetRegistration()) > 0) {
		return bad("only a hospital signs its age recipient or brings its registration")
	}
	if n := len(m.GetRecipientSignature()); n != 0 && n != ed25519.SignatureSize {
		return bad("recipient signature of %d bytes, want %d (ed25519)", n, ed25519.SignatureSize)
	}
	if len(m.GetRegistration()) > MaxRegistration {
		return bad("registration of %d bytes, at most %d", len(m.GetRegistration()), MaxRegistration)
	}
	if h != nil {
		if h.GetNumTeachers() < 1 {
			return bad("a hospital needs at least one teacher")
		}
		if err := checkClasses(h.GetNumClasses()); err != nil {
			return err
		}
	}
	return nil
}

func validAck(m *nzcpb.Ack) error {
	if m.GetProtocolVersion() != ProtocolVersion {
		return bad("protocol version %d, this party speaks %d: upgrade the older party", m.GetProtocolVersion(), ProtocolVersion)
	}
	if m.GetAgeRecipient() != "" {
		if err := checkRecipient(m.GetAgeRecipient()); err != nil {
			return err
		}
	}
	if err := checkOffer(m.GetFallback()); err != nil {
		return err
	}
	return checkSignedRecipients(m.GetHospitals())
}

// checkSignedRecipients checks the form of a directory of signed
// recipients; the signatures are the student's to verify.
func checkSignedRecipients(rs []*nzcpb.SignedRecipient) error {
	if len(rs) > MaxHospitals {
		return bad("%d signed recipients, at most %d", len(rs), MaxHospitals)
	}
	seen := make(map[string]bool, len(rs))
	for _, r := range rs {
		if r == nil {
			return bad("an empty signed recipient")
		}
		if err := checkPartyID("hospitals.hospital_id", r.GetHospitalId()); err != nil {
			return err
		}
		if seen[r.GetHospitalId()] {
			return bad("the recipient of hospital %q is given twice", r.GetHospitalId())
		}
		seen[r.GetHospitalId()] = true
		if err := checkRecipient(r.GetAgeRecipient()); err != nil {
			return err
		}
		if len(r.GetSignature()) != ed25519.SignatureSize {
			return bad("the recipient of hospital %q has a signature of %d bytes, want %d (ed25519)", r.GetHospitalId(), len(r.GetSignature()), ed25519.SignatureSize)
		}
		if len(r.GetRegistration()) > MaxRegistration {
			return bad("the registration of hospital %q has %d bytes, at most %d", r.GetHospitalId(), len(r.GetRegistration()), MaxRegistration)
		}
	}
	return nil
}

// RecipientMessage is what a hospital signs with its ledger key to vouch
// for its age recipient: a student seals features to the recipient only
// when this signature verifies against the hospital's registered key, so
// an aggregator cannot substitute a recipient of its own.
func RecipientMessage(hospital, recipient string) []byte {
	return []byte("nzc hospital age recipient v1\n" + hospital + "\n" + recipient + "\n")
}

func validQueryBatch(m *nzcpb.QueryBatch) error {
	if err := checkBatch(m.GetBatchId(), m.GetNumQueries()); err != nil {
		return err
	}
	if err := checkDim(m.GetFeatureDim(), m.GetNumQueries()); err != nil {
		return err
	}
	if err := checkClasses(m.GetNumClasses()); err != nil {
		return err
	}
	if len(m.GetSealedFeatures()) == 0 {
		return bad("query batch without sealed features")
	}
	if n := len(m.GetHospitalIds()); n == 0 || n > MaxHospitals {
		return bad("query batch names %d hospitals, want 1 to %d", n, MaxHospitals)
	}
	seen := make(map[string]bool, len(m.GetHospitalIds()))
	for _, id := range m.GetHospitalIds() {
		if err := checkPartyID("hospital_ids", id); err != nil {
			return err
		}
		if seen[id] {
			return bad("hospital %q named twice", id)
		}
		seen[id] = true
	}
	if m.GetDeadlineUnixMs() <= 0 {
		return bad("query batch without a deadline")
	}
	if m.GetStudentId() != "" {
		if err := checkPartyID("student_id", m.GetStudentId()); err != nil {
			return err
		}
	}
	if n := len(m.GetChargeReceipts()); n > MaxChargeReceipts {
		return bad("query batch hands over %d charge receipts, at most %d", n, MaxChargeReceipts)
	}
	for _, r := range m.GetChargeReceipts() {
		if r == nil {
			return bad("query batch with an empty charge receipt")
		}
		if err := checkReceipt(r); err != nil {
			return err
		}
	}
	return nil
}

func validVoteBatch(m *nzcpb.VoteBatch) error {
	if err := checkBatch(m.GetBatchId(), m.GetNumQueries()); err != nil {
		return err
	}
	if err := checkPartyID("hospital_id", m.GetHospitalId()); err != nil {
		return err
	}
	if err := checkClasses(m.GetNumClasses()); err != nil {
		return err
	}
	if len(m.GetSealedHistograms()) == 0 {
		return bad("vote batch without sealed histograms")
	}
	return nil
}

func validLabelRequest(m *nzcpb.LabelRequest) error {
	if err := checkBatch(m.GetBatchId(), m.GetNumQueries()); err != nil {
		return err
	}
	if err := checkDim(m.GetFeatureDim(), m.GetNumQueries()); err != nil {
		return err
	}
	if len(m.GetSealedFeatures()) == 0 {
		return bad("label request without sealed features")
	}
	return nil
}

func validLabelResponse(m *nzcpb.LabelResponse) error {
	if err := checkBatch(m.GetBatchId(), m.GetNumQueries()); err != nil {
		return err
	}
	if len(m.GetSealedLabels()) == 0 {
		return bad("label response without sealed labels")
	}
	if len(m.GetAnswersHash()) != 32 {
		return bad("answers hash of %d bytes, want 32 (SHA-256)", len(m.GetAnswersHash()))
	}
	if err := checkReceipt(m.GetReceipt()); err != nil {
		return err
	}
	return checkSignedRecipients(m.GetHospitals())
}

func validBudgetRequest(m *nzcpb.BudgetRequest) error {
	if d := m.GetDelta(); d < 0 || d >= 1 || math.IsNaN(d) {
		return bad("delta %v outside [0, 1)", d)
	}
	for _, id := range m.GetHospitalIds() {
		if err := checkPartyID("hospital_ids", id); err != nil {
			return err
		}
	}
	if id := m.GetStudentId(); id != "" {
		if err := checkPartyID("student_id", id); err != nil {
			return err
		}
	}
	return nil
}

func validBudgetResponse(m *nzcpb.BudgetResponse) error {
	if st := m.GetStudent(); st != nil {
		if err := checkPartyID("student.student_id", st.GetStudentId()); err != nil {
			return err
		}
	}
	for _, e := range m.GetEnsembles() {
		if err := checkPartyID("ensembles.hospital_id", e.GetHospitalId()); err != nil {
			return err
		}
		if e.GetTeachers() < 1 || e.GetTeachers() > MaxTeachers {
			return bad("the registered ensemble of %q has %d teachers, want 1 to %d", e.GetHospitalId(), e.GetTeachers(), MaxTeachers)
		}
	}
	if c := m.GetClasses(); c != 0 && (c < 2 || c > MaxClasses) {
		return bad("the registered class count %d is outside [2, %d]", c, MaxClasses)
	}
	for _, b := range m.GetBudgets() {
		if err := checkPartyID("hospital_id", b.GetHospitalId()); err != nil {
			return err
		}
		for _, v := range append([]float64{b.GetEpsilonCap(), b.GetDeltaCap(), b.GetEpsilonSpent(), b.GetDelta(), b.GetPureEpsilon()}, b.GetCurve()...) {
			if math.IsNaN(v) || v < 0 {
				return bad("budget of %q holds %v", b.GetHospitalId(), v)
			}
		}
		if len(b.GetCurve()) > maxCurve {
			return bad("budget of %q has a curve of %d orders, at most %d", b.GetHospitalId(), len(b.GetCurve()), maxCurve)
		}
	}
	return nil
}

func validFeatures(m *nzcpb.Features) error {
	if m.GetNumQueries() < 1 || m.GetNumQueries() > MaxBatchQueries {
		return bad("features for %d queries, want 1 to %d", m.GetNumQueries(), MaxBatchQueries)
	}
	if err := checkDim(m.GetFeatureDim(), m.GetNumQueries()); err != nil {
		return err
	}
	if want := uint64(m.GetNumQueries()) * uint64(m.GetFeatureDim()); uint64(len(m.GetValues())) != want {
		return bad("features hold %d values, want %d × %d", len(m.GetValues()), m.GetNumQueries(), m.GetFeatureDim())
	}
	for i, v := range m.GetValues() {
		if f := float64(v); math.IsNaN(f) || math.IsInf(f, 0) {
			return bad("feature value %d is %v", i, v)
		}
	}
	return nil
}

func validHistograms(m *nzcpb.Histograms) error {
	nq, nc, nt := m.GetNumQueries(), m.GetNumClasses(), m.GetNumTeachers()
	if nq < 1 || nq > MaxBatchQueries {
		return bad("histograms for %d queries, want 1 to %d", nq, MaxBatchQueries)
	}
	if err := checkClasses(nc); err != nil {
		return err
	}
	if nt < 1 {
		return bad("histograms of %d teachers", nt)
	}
	counts := m.GetCounts()
	if uint64(len(counts)) != uint64(nq)*uint64(nc) {
		return bad("histograms hold %d counts, want %d × %d", len(counts), nq, nc)
	}
	for q := range int(nq) {
		var sum uint64
		for _, c := range counts[q*int(nc) : (q+1)*int(nc)] {
			sum += uint64(c)
		}
		if sum != uint64(nt) {
			return bad("histogram of query %d sums to %d votes, want %d (one per teacher)", q, sum, nt)
		}
	}
	return nil
}

func validLabels(m *nzcpb.Labels) error {
	if len(m.GetLabels()) != len(m.GetRefused()) {
		return bad("%d labels but %d refused flags", len(m.GetLabels()), len(m.GetRefused()))
	}
	for i, l := range m.GetLabels() {
		if m.GetRefused()[i] != (l == -1) || l < -1 || l >= MaxClasses {
			return bad("label %d is %d with refused=%v: a refused query has label -1, an answered one a class", i, l, m.GetRefused()[i])
		}
	}
	return nil
}

func checkBatch(id []byte, nq uint32) error {
	if len(id) < MinBatchIDLen || len(id) > MaxBatchIDLen {
		return bad("batch id of %d bytes, want %d to %d", len(id), MinBatchIDLen, MaxBatchIDLen)
	}
	if nq < 1 || nq > MaxBatchQueries {
		return bad("batch of %d queries, want 1 to %d", nq, MaxBatchQueries)
	}
	return nil
}

func checkDim(dim, nq uint32) error {
	if dim < 1 || dim > MaxFeatureDim {
		return bad("feature dimension %d, want 1 to %d", dim, MaxFeatureDim)
	}
	if uint64(dim)*uint64(nq)*4 > 1<<32 {
		return bad("%d queries of dimension %d are too many values for one batch", nq, dim)
	}
	return nil
}

func checkClasses(nc uint32) error {
	if nc < 2 || nc > MaxClasses {
		return bad("%d classes, want 2 to %d", nc, MaxClasses)
	}
	return nil
}

func checkPartyID(field, id string) error {
	if id == "" || len(id) > MaxPartyIDLen {
		return bad("%s %q must be 1 to %d characters", field, id, MaxPartyIDLen)
	}
	for i, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' && i > 0) {
			return bad("%s %q: use only lower-case letters, digits and '-'", field, id)
		}
	}
	return nil
}

func checkRecipient(r string) error {
	if !strings.HasPrefix(r, "age1") || len(r) > 200 {
		return bad("age recipient %q is not an age1… X25519 public key", r)
	}
	return nil
}

// maxCurve bounds an RDP curve on the wire: the default grid has 153 orders.
const maxCurve = 1024
