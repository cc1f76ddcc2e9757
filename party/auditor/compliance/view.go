package compliance

import (
	"encoding/base64"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/nzcfed/nzc/ledger"
)

// Entry is one ledger entry as /v1/entries serves it: the canonical bytes
// (Raw, base64 in JSON), their RFC 6962 leaf hash, and the decoded fields.
// Raw is what a verifier hashes; the decoded fields are for reading.
type Entry struct {
	Index    uint64    `json:"index"`
	LeafHash tlog.Hash `json:"leaf_hash"`
	Raw      []byte    `json:"raw"`
	PrevRoot tlog.Hash `json:"prev_root"`
	Status   string    `json:"status"`
	Code     string    `json:"code,omitempty"`
	Subject  string    `json:"subject,omitempty"`
	Original uint64    `json:"original,omitempty"`
	// Command is the decoded command; CommandError says why it is absent
	// (the ledger records commands that do not decode, refused). A refusal
	// record holds no command, only Record: the command's digest, kind and
	// signer.
	Command      *Command       `json:"command,omitempty"`
	CommandError string         `json:"command_error,omitempty"`
	Record       *ledger.Record `json:"record,omitempty"`
}

// Command is a decoded ledger command. Body holds the kind's fields, with
// the names of ledger's encoding (docs/LEDGER.md); keys and hashes are
// base64, an RDP value that is infinite is "+Inf".
type Command struct {
	Kind      string         `json:"kind"`
	Signer    string         `json:"signer"`
	Signature []byte         `json:"signature"`
	Body      map[string]any `json:"body"`
}

// DecodeEntry returns the view of one encoded entry.
func DecodeEntry(raw []byte) (Entry, error) {
	en, err := ledger.DecodeEntry(raw)
	if err != nil {
		return Entry{}, err
	}
	v := Entry{
		Index: en.Index, LeafHash: tlog.RecordHash(raw), Raw: raw, PrevRoot: en.PrevRoot,
		Status: en.Status.String(), Subject: en.Subject, Original: en.Original,
	}
	if en.Status == ledger.StatusRefused {
		v.Code = en.Code.String()
	}
	if en.Record != nil {
		v.Record = en.Record
		return v, nil
	}
	c, err := ledger.DecodeCommand(en.Command)
	if err != nil {
		v.CommandError = err.Error()
		return v, nil
	}
	v.Command = &Command{Kind: c.Body.Kind().String(), Signer: c.Signer, Signature: c.Signature, Body: body(c.Body)}
	return v, nil
}

// number is a float64 that JSON carries even when infinite ("+Inf"), in
// the ledger's encoding.
type number = ledger.JSONFloat

func numbers(vs []float64) []number {
	out := make([]number, len(vs))
	for i, v := range vs {
		out[i] = number(v)
	}
	return out
}

func params(ps []ledger.Param) map[string]string {
	out := make(map[string]string, len(ps))
	for _, p := range ps {
		out[p.Key] = p.Value
	}
	return out
}

func party(p ledger.Party) map[string]any {
	return map[string]any{"id": p.ID, "role": p.Role.String(), "public_key": base64.StdEncoding.EncodeToString(p.PublicKey)}
}

func body(b ledger.Body) map[string]any {
	switch b := b.(type) {
	case *ledger.Genesis:
		ps := make([]map[string]any, len(b.Parties))
		for i, p := range b.Parties {
			ps[i] = party(p)
		}
		m := map[string]any{"origin": b.Origin, "parties": ps, "timestamp": b.Timestamp}
		if k := b.Kind(); k == ledger.KindGenesisV2 || k == ledger.KindGenesisV3 {
			m["epsilon_bound"], m["delta_bound"] = number(b.EpsilonBound), number(b.DeltaBound)
		}
		if b.Kind() == ledger.KindGenesisV3 {
			m["student_share"] = number(b.StudentShare)
		}
		return m
	case *ledger.RegisterParty:
		return map[string]any{"party": party(b.Party), "timestamp": b.Timestamp}
	case *ledger.OpenAccount:
		return map[string]any{"hospital": b.Hospital, "cap_epsilon": number(b.CapEpsilon), "cap_delta": number(b.CapDelta), "timestamp": b.Timestamp}
	case *ledger.ChangeCap:
		return map[string]any{"hospital": b.Hospital, "cap_version": b.Version, "cap_epsilon": number(b.CapEpsilon), "cap_delta": number(b.CapDelta), "timestamp": b.Timestamp}
	case *ledger.RegisterStudent:
		return map[string]any{"student": b.Student, "max_answers": b.MaxAnswers, "timestamp": b.Timestamp}
	case *ledger.Reserve:
		return map[string]any{"batch": b.BatchID, "student": b.Student, "hospitals": b.Hospitals, "mechanism": b.Mechanism,
			"params": params(b.Params), "queries": b.Queries, "curve": numbers(b.Curve), "delta": number(b.Delta), "timestamp": b.Timestamp}
	case *ledger.Charge:
		m := map[string]any{
			"batch": b.BatchID, "student": b.Student, "hospitals": b.Hospitals, "session": b.Session,
			"mechanism": b.Mechanism, "params": params(b.Params), "queries": b.Queries, "answers": b.Answers,
			"curve": numbers(b.Curve), "delta": number(b.Delta), "answers_hash": base64.StdEncoding.EncodeToString(b.AnswersHash[:]),
			"timestamp": b.Timestamp,
		}
		if len(b.Ensembles) > 0 {
			m["ensembles"] = b.Ensembles
		}
		return m
	case *ledger.RegisterEnsemble:
		return map[string]any{"hospital": b.Hospital, "version": b.Version, "teachers": b.Teachers, "classes": b.Classes, "timestamp": b.Timestamp}
	case *ledger.OpenSession:
		return map[string]any{
			"session": b.SessionID, "student": b.Student, "hospitals": b.Hospitals, "mechanism": b.Mechanism,
			"params": params(b.Params), "max_refusals": b.MaxRefusals, "curve": numbers(b.Curve), "delta": number(b.Delta),
			"timestamp": b.Timestamp,
		}
	case *ledger.CloseSession:
		return map[string]any{"session": b.SessionID, "queries": b.Queries, "answers": b.Answers, "timestamp": b.Timestamp}
	case *ledger.Suspend:
		return map[string]any{"hospital": b.Hospital, "version": b.Version, "suspended": b.Suspended, "reason": b.Reason, "timestamp": b.Timestamp}
	}
	return map[string]any{}
}
