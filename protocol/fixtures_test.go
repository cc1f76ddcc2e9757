package protocol

import (
	"bytes"

	"google.golang.org/protobuf/proto"

	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// Fixed messages for the golden files and as valid examples. Sealed fields
// hold fixed stand-in bytes: the wire layer treats them as opaque.
var (
	batchID   = bytes.Repeat([]byte{0xb1}, 16)
	recipient = "age1qyqszqgpqyqszqgpqyqszqgpqyqszqgpqyqszqgpqyqszqgpqyqs3290gq"
)

type fixture struct {
	name string
	msg  proto.Message
}

func fixtures() []fixture {
	return []fixture{
		{"hello-hospital", &nzcpb.Hello{ProtocolVersion: 1, Role: nzcpb.Role_ROLE_HOSPITAL, PartyId: "hospital-1",
			AgeRecipient: recipient, Hospital: &nzcpb.HospitalInfo{NumTeachers: 50, NumClasses: 10}, Software: "nzc-teacher test"}},
		{"hello-hospital-signed", &nzcpb.Hello{ProtocolVersion: 1, Role: nzcpb.Role_ROLE_HOSPITAL, PartyId: "hospital-3",
			AgeRecipient: recipient, Hospital: &nzcpb.HospitalInfo{NumTeachers: 50, NumClasses: 10}, Software: "nzc-teacher test",
			RecipientSignature: bytes.Repeat([]byte{0x5a}, 64), Registration: []byte("administrator-signed registration")}},
		{"ack-directory", &nzcpb.Ack{ProtocolVersion: 1, PartyId: "aggregator", AgeRecipient: recipient, Message: "registered; ready",
			Hospitals: []*nzcpb.SignedRecipient{
				{HospitalId: "hospital-1", AgeRecipient: recipient, Signature: bytes.Repeat([]byte{0x51}, 64)},
				{HospitalId: "hospital-3", AgeRecipient: recipient, Signature: bytes.Repeat([]byte{0x53}, 64), Registration: []byte("administrator-signed registration")}}}},
		{"hello-student", &nzcpb.Hello{ProtocolVersion: 1, Role: nzcpb.Role_ROLE_STUDENT, PartyId: "student-1", AgeRecipient: recipient}},
		{"ack", &nzcpb.Ack{ProtocolVersion: 1, PartyId: "aggregator", AgeRecipient: recipient, Message: "registered; waiting for 2 of 3 hospitals"}},
		{"ack-fallback", &nzcpb.Ack{ProtocolVersion: 1, PartyId: "aggregator", AgeRecipient: recipient, Message: "registered; ready",
			Fallback: &nzcpb.MechanismOffer{Mechanism: "gnmax", Params: []*nzcpb.MechanismParam{{Key: "classes", Value: "10"}, {Key: "sigma", Value: "40"}, {Key: "teachers", Value: "1"}}}}},
		{"query-batch", &nzcpb.QueryBatch{BatchId: batchID, NumQueries: 2, FeatureDim: 3, NumClasses: 10,
			SealedFeatures: []byte("sealed-features"), HospitalIds: []string{"hospital-1", "hospital-2"}, DeadlineUnixMs: 1767323045000}},
		{"query-batch-receipts", &nzcpb.QueryBatch{BatchId: batchID, NumQueries: 2, FeatureDim: 3, NumClasses: 10,
			SealedFeatures: []byte("sealed-features"), HospitalIds: []string{"hospital-1"}, DeadlineUnixMs: 1767323045000,
			ChargeReceipts: []*nzcpb.Receipt{{Entry: []byte("accepted charge entry"), Proof: [][]byte{bytes.Repeat([]byte{0xc1}, 32), bytes.Repeat([]byte{0xc2}, 32)},
				Checkpoint: []byte("nzc ledger\n43\nroot\n\n— auditor-1 sig\n")}}}},
		{"vote-batch", &nzcpb.VoteBatch{BatchId: batchID, HospitalId: "hospital-2", NumQueries: 2, NumClasses: 10, SealedHistograms: []byte("sealed-histograms")}},
		{"label-request", &nzcpb.LabelRequest{BatchId: batchID, NumQueries: 2, FeatureDim: 3, SealedFeatures: []byte("sealed-features")}},
		{"label-request-fallback", &nzcpb.LabelRequest{BatchId: batchID, NumQueries: 2, FeatureDim: 3, SealedFeatures: []byte("sealed-features"), Fallback: true}},
		{"label-response", &nzcpb.LabelResponse{BatchId: batchID, NumQueries: 2, SealedLabels: []byte("sealed-labels"),
			LedgerIndex: 42, AnswersHash: bytes.Repeat([]byte{0xaa}, 32), Replayed: true}},
		{"label-response-directory", &nzcpb.LabelResponse{BatchId: batchID, NumQueries: 2, SealedLabels: []byte("sealed-labels"),
			LedgerIndex: 43, AnswersHash: bytes.Repeat([]byte{0xaa}, 32),
			Receipt:   &nzcpb.Receipt{Entry: []byte("accepted charge entry"), Proof: [][]byte{bytes.Repeat([]byte{0xc1}, 32)}, Checkpoint: []byte("nzc ledger\n44\nroot\n")},
			Hospitals: []*nzcpb.SignedRecipient{{HospitalId: "hospital-3", AgeRecipient: recipient, Signature: bytes.Repeat([]byte{0x53}, 64), Registration: []byte("administrator-signed registration")}}}},
		{"budget-request", &nzcpb.BudgetRequest{HospitalIds: []string{"hospital-1"}, Delta: 1e-6}},
		{"budget-response", &nzcpb.BudgetResponse{LedgerSize: 7, Budgets: []*nzcpb.HospitalBudget{
			{HospitalId: "hospital-1", EpsilonCap: 8, DeltaCap: 1e-5, EpsilonSpent: 1.25, Delta: 1e-6, QueriesAnswered: 300, Charges: 3}}}},
		{"ledger-submit", &nzcpb.LedgerSubmit{Command: []byte("canonical ledger command")}},
		{"ledger-result", &nzcpb.LedgerResult{Index: 42, Code: nzcpb.LedgerResultCode_LEDGER_RESULT_CODE_COMMITTED, Checkpoint: []byte("nzc ledger\n42\nroot\n")}},
		{"error-not-leader", &nzcpb.Error{Code: nzcpb.ErrorCode_ERROR_CODE_NOT_LEADER, Message: "send the request to 10.0.0.2:7400", LeaderAddress: "10.0.0.2:7400"}},
		{"features", &nzcpb.Features{NumQueries: 2, FeatureDim: 3, Values: []float32{0, 0.5, 1, -1, 2.25, 3}}},
		{"histograms", &nzcpb.Histograms{NumQueries: 2, NumClasses: 3, NumTeachers: 5, Counts: []uint32{5, 0, 0, 1, 2, 2}}},
		{"labels", &nzcpb.Labels{Labels: []int32{7, -1, 0}, Refused: []bool{false, true, false}}},
	}
}
