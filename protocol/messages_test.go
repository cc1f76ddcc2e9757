package protocol

import (
	"errors"
	"math"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/nzcfed/nzc/protocol/nzcpb"
)

func fixtureMsg(name string) proto.Message {
	for _, fx := range fixtures() {
		if fx.name == name {
			return proto.Clone(fx.msg)
		}
	}
	panic("no fixture " + name)
}

func TestValidateFixtures(t *testing.T) {
	for _, fx := range fixtures() {
		if err := Validate(fx.msg); err != nil {
			t.Errorf("%s: %v", fx.name, err)
		}
	}
}

func TestValidateRejects(t *testing.T) {
	tests := []struct {
		name   string
		base   string
		mutate func(proto.Message)
	}{
		{"hello wrong version", "hello-hospital", func(m proto.Message) { m.(*nzcpb.Hello).ProtocolVersion = 2 }},
		{"hello no role", "hello-hospital", func(m proto.Message) { m.(*nzcpb.Hello).Role = 0 }},
		{"hello unknown role", "hello-student", func(m proto.Message) { m.(*nzcpb.Hello).Role = 99 }},
		{"hello bad id", "hello-hospital", func(m proto.Message) { m.(*nzcpb.Hello).PartyId = "Hospital 1" }},
		{"hello bad recipient", "hello-hospital", func(m proto.Message) { m.(*nzcpb.Hello).AgeRecipient = "ssh-ed25519 AAAA" }},
		{"hospital without info", "hello-hospital", func(m proto.Message) { m.(*nzcpb.Hello).Hospital = nil }},
		{"student with info", "hello-student", func(m proto.Message) { m.(*nzcpb.Hello).Hospital = &nzcpb.HospitalInfo{NumTeachers: 1, NumClasses: 2} }},
		{"hospital no teachers", "hello-hospital", func(m proto.Message) { m.(*nzcpb.Hello).Hospital.NumTeachers = 0 }},
		{"hospital one class", "hello-hospital", func(m proto.Message) { m.(*nzcpb.Hello).Hospital.NumClasses = 1 }},
		{"hello short recipient signature", "hello-hospital-signed", func(m proto.Message) { m.(*nzcpb.Hello).RecipientSignature = []byte{1, 2, 3} }},
		{"hello registration too long", "hello-hospital-signed", func(m proto.Message) {
			m.(*nzcpb.Hello).Registration = make([]byte, MaxRegistration+1)
		}},
		{"student signs a recipient", "hello-student", func(m proto.Message) { m.(*nzcpb.Hello).RecipientSignature = make([]byte, 64) }},
		{"student brings a registration", "hello-student", func(m proto.Message) { m.(*nzcpb.Hello).Registration = []byte("r") }},
		{"directory unsigned", "ack-directory", func(m proto.Message) { m.(*nzcpb.Ack).Hospitals[0].Signature = nil }},
		{"directory bad id", "ack-directory", func(m proto.Message) { m.(*nzcpb.Ack).Hospitals[0].HospitalId = "Hospital 1" }},
		{"directory bad recipient", "ack-directory", func(m proto.Message) { m.(*nzcpb.Ack).Hospitals[0].AgeRecipient = "ssh-ed25519 AAAA" }},
		{"directory hospital twice", "ack-directory", func(m proto.Message) { m.(*nzcpb.Ack).Hospitals[1].HospitalId = "hospital-1" }},
		{"directory empty entry", "ack-directory", func(m proto.Message) { m.(*nzcpb.Ack).Hospitals[1] = nil }},
		{"directory empty shared registration", "ack-directory", func(m proto.Message) { m.(*nzcpb.Ack).Registrations = [][]byte{{}} }},
		{"directory shared registration too long", "ack-directory", func(m proto.Message) {
			m.(*nzcpb.Ack).Registrations = [][]byte{make([]byte, MaxRegistration+1)}
		}},
		{"directory more shared registrations than recipients", "ack-directory", func(m proto.Message) {
			a := m.(*nzcpb.Ack)
			a.Registrations = make([][]byte, len(a.Hospitals)+1)
			for i := range a.Registrations {
				a.Registrations[i] = []byte("r")
			}
		}},
		{"label response shared registration too long", "label-response-directory", func(m proto.Message) {
			m.(*nzcpb.LabelResponse).Registrations = [][]byte{make([]byte, MaxRegistration+1)}
		}},
		{"label response directory registration too long", "label-response-directory", func(m proto.Message) {
			m.(*nzcpb.LabelResponse).Hospitals[0].Registration = make([]byte, MaxRegistration+1)
		}},
		{"label response directory short signature", "label-response-directory", func(m proto.Message) {
			m.(*nzcpb.LabelResponse).Hospitals[0].Signature = make([]byte, 63)
		}},
		{"query short batch id", "query-batch", func(m proto.Message) { m.(*nzcpb.QueryBatch).BatchId = []byte("short") }},
		{"query no queries", "query-batch", func(m proto.Message) { m.(*nzcpb.QueryBatch).NumQueries = 0 }},
		{"query no features", "query-batch", func(m proto.Message) { m.(*nzcpb.QueryBatch).SealedFeatures = nil }},
		{"query no hospitals", "query-batch", func(m proto.Message) { m.(*nzcpb.QueryBatch).HospitalIds = nil }},
		{"query duplicate hospital", "query-batch", func(m proto.Message) {
			m.(*nzcpb.QueryBatch).HospitalIds = []string{"hospital-1", "hospital-1"}
		}},
		{"query no deadline", "query-batch", func(m proto.Message) { m.(*nzcpb.QueryBatch).DeadlineUnixMs = 0 }},
		{"query too many values", "query-batch", func(m proto.Message) {
			m.(*nzcpb.QueryBatch).NumQueries, m.(*nzcpb.QueryBatch).FeatureDim = MaxBatchQueries, MaxFeatureDim
		}},
		{"query receipt short hash", "query-batch-receipts", func(m proto.Message) {
			m.(*nzcpb.QueryBatch).ChargeReceipts[0].Proof[1] = []byte{1}
		}},
		{"query receipt no checkpoint", "query-batch-receipts", func(m proto.Message) { m.(*nzcpb.QueryBatch).ChargeReceipts[0].Checkpoint = nil }},
		{"query empty receipt", "query-batch-receipts", func(m proto.Message) {
			m.(*nzcpb.QueryBatch).ChargeReceipts = append(m.(*nzcpb.QueryBatch).ChargeReceipts, nil)
		}},
		{"query too many receipts", "query-batch-receipts", func(m proto.Message) {
			q := m.(*nzcpb.QueryBatch)
			for len(q.ChargeReceipts) <= MaxChargeReceipts {
				q.ChargeReceipts = append(q.ChargeReceipts, q.ChargeReceipts[0])
			}
		}},
		{"vote no hospital", "vote-batch", func(m proto.Message) { m.(*nzcpb.VoteBatch).HospitalId = "" }},
		{"vote no payload", "vote-batch", func(m proto.Message) { m.(*nzcpb.VoteBatch).SealedHistograms = nil }},
		{"label request long id", "label-request", func(m proto.Message) { m.(*nzcpb.LabelRequest).BatchId = make([]byte, 65) }},
		{"label request no dim", "label-request", func(m proto.Message) { m.(*nzcpb.LabelRequest).FeatureDim = 0 }},
		{"label response short hash", "label-response", func(m proto.Message) { m.(*nzcpb.LabelResponse).AnswersHash = []byte{1} }},
		{"budget delta", "budget-request", func(m proto.Message) { m.(*nzcpb.BudgetRequest).Delta = 1 }},
		{"budget NaN", "budget-response", func(m proto.Message) { m.(*nzcpb.BudgetResponse).Budgets[0].EpsilonSpent = math.NaN() }},
		{"ensemble of no teachers", "budget-response", func(m proto.Message) {
			r := m.(*nzcpb.BudgetResponse)
			r.Classes, r.Ensembles = 10, []*nzcpb.RegisteredEnsemble{{HospitalId: "h1", Teachers: 0, Version: 1}}
		}},
		{"ensemble too large", "budget-response", func(m proto.Message) {
			r := m.(*nzcpb.BudgetResponse)
			r.Classes, r.Ensembles = 10, []*nzcpb.RegisteredEnsemble{{HospitalId: "h1", Teachers: MaxTeachers + 1, Version: 1}}
		}},
		{"ensemble without hospital", "budget-response", func(m proto.Message) {
			m.(*nzcpb.BudgetResponse).Ensembles = []*nzcpb.RegisteredEnsemble{{Teachers: 5, Version: 1}}
		}},
		{"one registered class", "budget-response", func(m proto.Message) { m.(*nzcpb.BudgetResponse).Classes = 1 }},
		{"ledger empty", "ledger-submit", func(m proto.Message) { m.(*nzcpb.LedgerSubmit).Command = nil }},
		{"ledger result no code", "ledger-result", func(m proto.Message) { m.(*nzcpb.LedgerResult).Code = 0 }},
		{"error no code", "error-not-leader", func(m proto.Message) { m.(*nzcpb.Error).Code = 0 }},
		{"features count", "features", func(m proto.Message) { m.(*nzcpb.Features).Values = m.(*nzcpb.Features).Values[1:] }},
		{"features NaN", "features", func(m proto.Message) { m.(*nzcpb.Features).Values[2] = float32(math.NaN()) }},
		{"features Inf", "features", func(m proto.Message) { m.(*nzcpb.Features).Values[2] = float32(math.Inf(1)) }},
		{"histogram sum", "histograms", func(m proto.Message) { m.(*nzcpb.Histograms).Counts[0] = 4 }},
		{"histogram count", "histograms", func(m proto.Message) { m.(*nzcpb.Histograms).Counts = []uint32{5, 0, 0} }},
		{"labels lengths", "labels", func(m proto.Message) { m.(*nzcpb.Labels).Refused = nil }},
		{"refused with label", "labels", func(m proto.Message) { m.(*nzcpb.Labels).Refused[0] = true }},
		{"answered without label", "labels", func(m proto.Message) { m.(*nzcpb.Labels).Refused[1] = false }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := fixtureMsg(tc.base)
			tc.mutate(m)
			if err := Validate(m); !errors.Is(err, ErrBadMessage) {
				t.Fatalf("Validate = %v, want ErrBadMessage", err)
			}
			// The same refusal comes out of Decode, and maps to bad-request.
			body, err := Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			var derr error
			if typ, terr := TypeOf(m); terr == nil {
				_, derr = Decode(typ, body)
			} else {
				derr = DecodePlain(body, m.ProtoReflect().New().Interface())
			}
			if !errors.Is(derr, ErrBadMessage) || Code(ToWire(derr).GetCode()) != CodeBadRequest {
				t.Fatalf("Decode = %v", derr)
			}
		})
	}
}

func TestDecodeIntoTypeMismatch(t *testing.T) {
	body, _ := Marshal(fixtureMsg("ack"))
	if err := DecodeInto(TypeHello, body, &nzcpb.Ack{}); !errors.Is(err, ErrBadMessage) {
		t.Fatalf("err = %v", err)
	}
	if _, err := Decode(TypeAck, []byte{0xff}); !errors.Is(err, ErrBadMessage) {
		t.Fatalf("garbage body: err = %v", err)
	}
}

func TestMarshalDeterministic(t *testing.T) {
	m := fixtureMsg("budget-response")
	a, _ := Marshal(m)
	b, _ := Marshal(proto.Clone(m))
	if string(a) != string(b) {
		t.Fatal("equal messages encode differently")
	}
}
