package ledger

import (
	"crypto/sha256"
	"fmt"

	"golang.org/x/mod/sumdb/tlog"
)

// Status is the outcome of applying a command.
type Status uint8

// The statuses. The numbers are part of the entry encoding.
const (
	StatusAccepted  Status = 1 // the command changed the state as it asked
	StatusRefused   Status = 2 // the command changed nothing; Code says why
	StatusDuplicate Status = 3 // a retry of an accepted command: nothing changed, Original names the first entry
)

func (s Status) String() string {
	switch s {
	case StatusAccepted:
		return "accepted"
	case StatusRefused:
		return "refused"
	case StatusDuplicate:
		return "duplicate"
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// Code says why a command was refused. The numbers are part of the entry
// encoding and never reused.
type Code uint8

// The refusal codes.
const (
	CodeOK                Code = 0
	CodeMalformed         Code = 1  // the command bytes do not decode
	CodeNoGenesis         Code = 2  // a command before the genesis was accepted
	CodeGenesisRepeated   Code = 3  // a genesis after the genesis was accepted
	CodeUnknownSigner     Code = 4  // the signer is not a registered party
	CodeBadSignature      Code = 5  // the signature does not verify with the signer's registered key
	CodeWrongSigner       Code = 6  // the signer's role (or identity) may not issue this command
	CodeBadGenesis        Code = 7  // genesis lacks an administrator or an auditor
	CodePartyExists       Code = 8  // the party ID is already registered
	CodeUnknownHospital   Code = 9  // a named hospital is not a registered hospital
	CodeNoAccount         Code = 10 // a named hospital has not opened its account
	CodeAccountExists     Code = 11 // the hospital's account is already open
	CodeBadCap            Code = 12 // a cap ε not finite and > 0, or a cap δ not in (0, 1)
	CodeStaleCapVersion   Code = 13 // a cap change whose version is not the next one
	CodeUnknownStudent    Code = 14 // the student is not registered as a student
	CodeStudentExists     Code = 15 // the student is already registered
	CodeQuotaExceeded     Code = 16 // the student's answer quota would be exceeded
	CodeBadCharge         Code = 17 // the charge is inconsistent (counts, δ, hospitals, session cost)
	CodeBadCurve          Code = 18 // the RDP curve is not on the default grid or has a negative value
	CodeDeltaExhausted    Code = 19 // a hospital's δ would be all spent by additive δ, leaving none for the conversion
	CodeCapExceeded       Code = 20 // a hospital's ε would exceed its cap
	CodeConflict          Code = 21 // the batch or session ID was used for a different command
	CodeUnknownSession    Code = 22 // the session is not open in this ledger
	CodeSessionClosed     Code = 23 // the session is closed
	CodeSessionMismatch   Code = 24 // the charge names another student than its session, or a hospital outside it
	CodeSessionExhausted  Code = 25 // the session's refusal bound K would be exceeded
	CodeBadParams         Code = 26 // the mechanism or its parameters do not parse canonically, or do not fit the command
	CodeUnderCost         Code = 27 // the stated curve or δ is below the cost the ledger derives from the mechanism and parameters
	CodeSessionSuperseded Code = 28 // the session was replaced by a later one of the same aggregator, student and hospitals
	// CodeEnsembleMismatch: a charge states an ensemble size or class count
	// other than the registered one, or states none for a hospital that
	// has one.
	CodeEnsembleMismatch Code = 29
	CodeBadEnsemble      Code = 30 // an ensemble registration's teachers or classes are out of range, or its classes differ from the federation's
	CodeStaleEnsemble    Code = 31 // an ensemble registration whose version is not the next one
	CodeRateLimited      Code = 32 // a hospital's account command beyond its pace (pace.go), or stamped too far from the proposer's clock
	CodeSuspended        Code = 33 // a charge, reservation or session names a hospital an administrator suspended
	CodeStaleSuspension  Code = 34 // a suspension or reinstatement whose version is not the next one, or that changes nothing
	CodeShareExceeded    Code = 35 // one student's ε of a hospital would exceed the genesis's share of its cap
)

var codeNames = [...]string{
	CodeOK:                "ok",
	CodeMalformed:         "malformed",
	CodeNoGenesis:         "no-genesis",
	CodeGenesisRepeated:   "genesis-repeated",
	CodeUnknownSigner:     "unknown-signer",
	CodeBadSignature:      "bad-signature",
	CodeWrongSigner:       "wrong-signer",
	CodeBadGenesis:        "bad-genesis",
	CodePartyExists:       "party-exists",
	CodeUnknownHospital:   "unknown-hospital",
	CodeNoAccount:         "no-account",
	CodeAccountExists:     "account-exists",
	CodeBadCap:            "bad-cap",
	CodeStaleCapVersion:   "stale-cap-version",
	CodeUnknownStudent:    "unknown-student",
	CodeStudentExists:     "student-exists",
	CodeQuotaExceeded:     "quota-exceeded",
	CodeBadCharge:         "bad-charge",
	CodeBadCurve:          "bad-curve",
	CodeDeltaExhausted:    "delta-exhausted",
	CodeCapExceeded:       "cap-exceeded",
	CodeConflict:          "conflict",
	CodeUnknownSession:    "unknown-session",
	CodeSessionClosed:     "session-closed",
	CodeSessionMismatch:   "session-mismatch",
	CodeSessionExhausted:  "session-exhausted",
	CodeBadParams:         "bad-params",
	CodeUnderCost:         "under-cost",
	CodeSessionSuperseded: "session-superseded",
	CodeEnsembleMismatch:  "ensemble-mismatch",
	CodeBadEnsemble:       "bad-ensemble",
	CodeStaleEnsemble:     "stale-ensemble-version",
	CodeRateLimited:       "rate-limited",
	CodeSuspended:         "suspended",
	CodeStaleSuspension:   "stale-suspension",
	CodeShareExceeded:     "share-exceeded",
}

func (c Code) String() string { return enumName(codeNames[:], c, "code") }

// Budgetary reports whether a refusal of this code is a budget running
// out — a hospital's ε cap or δ, a student's quota, a session's refusal
// bound — for a command that is otherwise sound: what an honest proposer
// meets when its charges race others, and what the log records so that
// the federation sees refused spending. A command refused with any other
// code is one its signer could not have proposed honestly (bytes that do
// not decode, an unknown or forged signer, a charge naming unregistered
// hospitals or understating its cost, a stale version); a proposer refuses
// it before it reaches the log, with State.Check.
func (c Code) Budgetary() bool {
	switch c {
	case CodeCapExceeded, CodeDeltaExhausted, CodeQuotaExceeded, CodeSessionExhausted, CodeShareExceeded:
		return true
	}
	return false
}

func (c Code) valid() bool { return int(c) < len(codeNames) }

// Outcome is the part of a command's result that is recorded in its entry.
// It holds no floating-point numbers: replicas on different architectures
// may differ in the last bit of a logarithm, and the entry bytes — hence
// the Merkle root every auditor signs — must not. The ε figures are
// recomputed from the entries by anyone who replays them.
type Outcome struct {
	Status   Status `json:"status"`
	Code     Code   `json:"code"`
	Subject  string `json:"subject,omitempty"`  // the party, batch or session a refusal names
	Original uint64 `json:"original,omitempty"` // for a duplicate: the index of the accepted entry
}

// Entry is one leaf of the ledger's Merkle log. An entry holding its
// command (version 1) is
//
//	version u8 | index u64 | previous root [32]byte | command (u32 length, bytes)
//	  | status u8 | code u8 | subject | original u64
//
// and a refusal record (version RecordVersion) holds, instead of the
// command, a fixed-size record of it:
//
//	version u8 | index u64 | previous root [32]byte
//	  | SHA-256 of the command [32]byte | kind u8 | signer
//	  | status u8 | code u8 | subject | original u64
//
// PrevRoot is the tree hash of the entries before this one, so every entry
// commits to the whole history before it and a changed entry is named by
// the next one. Command holds the proposed bytes exactly as applied, even
// when they do not decode, so replaying the log reproduces every entry.
// Apply records every refusal as a Record: a refused command changes
// nothing, so its bytes are not needed to replay the log, and a sender
// gets at most a fixed-size entry for each command it has refused. Logs
// that hold refused commands whole (written before records) still decode
// and replay.
type Entry struct {
	Index    uint64
	PrevRoot tlog.Hash
	Command  []byte
	// Record stands for Command in a refusal record; nil otherwise.
	Record *Record
	Outcome
}

// RecordVersion is the version byte of an entry that is a refusal record.
const RecordVersion uint8 = 2

// Record is what a refusal record keeps of the refused command: the
// SHA-256 of its bytes, and its kind and signer (zero and empty when it did
// not decode).
type Record struct {
	Digest [32]byte `json:"digest"`
	Kind   Kind     `json:"kind"`
	Signer string   `json:"signer,omitempty"`
}

// recordOf is the refusal record of cmd.
func recordOf(cmd []byte) *Record {
	r := &Record{Digest: sha256.Sum256(cmd)}
	if c, err := DecodeCommand(cmd); err == nil {
		r.Kind, r.Signer = c.Body.Kind(), c.Signer
	}
	return r
}

// Encode returns the canonical bytes of the entry.
func (en Entry) Encode() ([]byte, error) {
	e := &encoder{}
	if en.Record != nil {
		if en.Command != nil || en.Status != StatusRefused {
			e.fail("a refusal record holds no command and records a refusal")
		}
		if en.Record.Kind != 0 && !en.Record.Kind.valid() {
			e.fail("unknown kind %d", en.Record.Kind)
		}
		e.u8(RecordVersion)
		e.u64(en.Index)
		e.fixed("previous root", en.PrevRoot[:], hashSize)
		e.fixed("digest", en.Record.Digest[:], hashSize)
		e.u8(uint8(en.Record.Kind))
		e.optID("signer", en.Record.Signer)
		en.Outcome.encode(e)
		return e.buf, e.err
	}
	e.u8(Version)
	e.u64(en.Index)
	e.fixed("previous root", en.PrevRoot[:], hashSize)
	e.blob("command", en.Command)
	en.Outcome.encode(e)
	return e.buf, e.err
}

func (o Outcome) encode(e *encoder) {
	if o.Status < StatusAccepted || o.Status > StatusDuplicate {
		e.fail("unknown status %d", o.Status)
	}
	if !o.Code.valid() || (o.Code == CodeOK) != (o.Status != StatusRefused) {
		e.fail("code %d does not fit status %s", o.Code, o.Status)
	}
	if o.Status != StatusDuplicate && o.Original != 0 {
		e.fail("only a duplicate names an original entry")
	}
	e.u8(uint8(o.Status))
	e.u8(uint8(o.Code))
	e.optID("subject", o.Subject)
	e.u64(o.Original)
}

// DecodeEntry decodes the canonical encoding of an entry.
func DecodeEntry(b []byte) (Entry, error) {
	d := &decoder{buf: b}
	var en Entry
	v := d.u8()
	if d.err == nil && v != Version && v != RecordVersion {
		return Entry{}, fmt.Errorf("%w: entry version %d, this ledger reads versions %d and %d", ErrMalformed, v, Version, RecordVersion)
	}
	en.Index = d.u64()
	copy(en.PrevRoot[:], d.take(hashSize))
	if v == RecordVersion {
		en.Record = &Record{}
		copy(en.Record.Digest[:], d.take(hashSize))
		en.Record.Kind = Kind(d.u8())
		en.Record.Signer = d.optID("signer")
	} else {
		en.Command = d.blob("command")
	}
	en.Status = Status(d.u8())
	en.Code = Code(d.u8())
	en.Subject = d.optID("subject")
	en.Original = d.u64()
	if err := d.end(); err != nil {
		return Entry{}, err
	}
	// Re-encoding checks the status, code and original fields with the
	// same rules the encoder applies.
	if _, err := en.Encode(); err != nil {
		return Entry{}, err
	}
	return en, nil
}

// AcceptedCommand decodes b as an entry and, when it records an accepted
// command, that command; ok is false for any other entry and for bytes
// that do not decode. Readers that look only at what the ledger accepted
// (the charges it holds, the parties it registered) scan entries with it.
func AcceptedCommand(b []byte) (en Entry, c Command, ok bool) {
	en, err := DecodeEntry(b)
	if err != nil || en.Status != StatusAccepted {
		return Entry{}, Command{}, false
	}
	if c, err = DecodeCommand(en.Command); err != nil {
		return Entry{}, Command{}, false
	}
	return en, c, true
}
