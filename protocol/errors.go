package protocol

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// Code is a typed error code carried by an Error frame.
type Code int32

// Error codes; the values are those of nzcpb.ErrorCode.
const (
	CodeBadRequest        = Code(nzcpb.ErrorCode_ERROR_CODE_BAD_REQUEST)
	CodeUnauthorized      = Code(nzcpb.ErrorCode_ERROR_CODE_UNAUTHORIZED)
	CodeUnknownType       = Code(nzcpb.ErrorCode_ERROR_CODE_UNKNOWN_TYPE)
	CodeTooLarge          = Code(nzcpb.ErrorCode_ERROR_CODE_TOO_LARGE)
	CodeBudgetExhausted   = Code(nzcpb.ErrorCode_ERROR_CODE_BUDGET_EXHAUSTED)
	CodeQuorumNotMet      = Code(nzcpb.ErrorCode_ERROR_CODE_QUORUM_NOT_MET)
	CodeLedgerUnavailable = Code(nzcpb.ErrorCode_ERROR_CODE_LEDGER_UNAVAILABLE)
	CodeNotLeader         = Code(nzcpb.ErrorCode_ERROR_CODE_NOT_LEADER)
	CodeInternal          = Code(nzcpb.ErrorCode_ERROR_CODE_INTERNAL)
	CodeUnavailable       = Code(nzcpb.ErrorCode_ERROR_CODE_UNAVAILABLE)
)

// Sentinel errors, one per code: errors.Is(err, ErrBudgetExhausted) holds
// for an *Error with that code, whichever side of the wire made it. The
// codes unknown-type and too-large use the frame errors ErrUnknownType and
// ErrFrameTooLarge.
var (
	ErrBadRequest        = errors.New("bad request")
	ErrUnauthorized      = errors.New("unauthorized")
	ErrBudgetExhausted   = errors.New("privacy budget exhausted")
	ErrQuorumNotMet      = errors.New("quorum of hospitals not met")
	ErrLedgerUnavailable = errors.New("ledger unavailable")
	ErrNotLeader         = errors.New("not the ledger leader")
	ErrInternal          = errors.New("internal error")
	ErrUnavailable       = errors.New("unavailable")
)

// Codes lists every code, in numeric order.
func Codes() []Code {
	return []Code{CodeBadRequest, CodeUnauthorized, CodeUnknownType, CodeTooLarge, CodeBudgetExhausted,
		CodeQuorumNotMet, CodeLedgerUnavailable, CodeNotLeader, CodeInternal, CodeUnavailable}
}

// Sentinel returns the sentinel error of c (ErrInternal for an unknown code).
func (c Code) Sentinel() error {
	switch c {
	case CodeBadRequest:
		return ErrBadRequest
	case CodeUnauthorized:
		return ErrUnauthorized
	case CodeUnknownType:
		return ErrUnknownType
	case CodeTooLarge:
		return ErrFrameTooLarge
	case CodeBudgetExhausted:
		return ErrBudgetExhausted
	case CodeQuorumNotMet:
		return ErrQuorumNotMet
	case CodeLedgerUnavailable:
		return ErrLedgerUnavailable
	case CodeNotLeader:
		return ErrNotLeader
	case CodeUnavailable:
		return ErrUnavailable
	default:
		return ErrInternal
	}
}

// String returns the code's name, e.g. "budget-exhausted".
func (c Code) String() string {
	switch c {
	case CodeBadRequest:
		return "bad-request"
	case CodeUnauthorized:
		return "unauthorized"
	case CodeUnknownType:
		return "unknown-type"
	case CodeTooLarge:
		return "too-large"
	case CodeBudgetExhausted:
		return "budget-exhausted"
	case CodeQuorumNotMet:
		return "quorum-not-met"
	case CodeLedgerUnavailable:
		return "ledger-unavailable"
	case CodeNotLeader:
		return "not-leader"
	case CodeInternal:
		return "internal"
	case CodeUnavailable:
		return "unavailable"
	default:
		return fmt.Sprintf("code(%d)", int32(c))
	}
}

// Retryable reports whether the same request may succeed later unchanged.
func (c Code) Retryable() bool {
	return c == CodeLedgerUnavailable || c == CodeNotLeader || c == CodeUnavailable || c == CodeQuorumNotMet
}

// Error is a typed protocol error: what a handler returns to refuse a
// request, and what a caller gets back from an Error frame.
type Error struct {
	Code    Code
	Message string
	// LeaderAddress is set for CodeNotLeader when the leader is known.
	LeaderAddress string
	// RetryAfter is a suggested wait, for retryable codes.
	RetryAfter time.Duration
}

// Errorf returns an *Error with a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// NotLeader returns the error an auditor answers when it is not the raft
// leader; addr is the leader's address, or empty when unknown.
func NotLeader(addr string) *Error {
	msg := "this auditor is not the ledger leader and the leader is unknown: retry shortly"
	if addr != "" {
		msg = "this auditor is not the ledger leader: send the request to " + addr
	}
	return &Error{Code: CodeNotLeader, Message: msg, LeaderAddress: addr}
}

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Code.String()
	}
	return e.Code.String() + ": " + e.Message
}

// Is matches the sentinel of e's code.
func (e *Error) Is(target error) bool { return target == e.Code.Sentinel() }

// ToWire turns err into an Error message. An *Error anywhere in err's
// chain keeps its code and text; errors matching a sentinel (ErrBadRequest,
// …) or a frame error get that code; a cancelled or timed-out context is
// unavailable; anything else is internal, and its text is not sent, since
// it may describe private state: log it where it happened.
func ToWire(err error) *nzcpb.Error {
	var pe *Error
	if errors.As(err, &pe) {
		return &nzcpb.Error{Code: nzcpb.ErrorCode(pe.Code), Message: pe.Message,
			LeaderAddress: pe.LeaderAddress, RetryAfterMs: uint64(pe.RetryAfter.Milliseconds())}
	}
	code, msg := classify(err)
	return &nzcpb.Error{Code: nzcpb.ErrorCode(code), Message: msg}
}

func classify(err error) (Code, string) {
	switch {
	case errors.Is(err, ErrBadMessage), errors.Is(err, ErrTruncated), errors.Is(err, ErrMalformedHeader):
		return CodeBadRequest, err.Error()
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return CodeUnavailable, "the request was cancelled or timed out before it completed: retry"
	}
	for _, c := range Codes() {
		if c != CodeInternal && errors.Is(err, c.Sentinel()) {
			return c, err.Error()
		}
	}
	return CodeInternal, "internal error: the operator can find the cause in this party's log"
}

// FromWire turns an Error message into an *Error. An unknown or missing
// code becomes CodeInternal, with the original number in the message.
func FromWire(m *nzcpb.Error) *Error {
	c := Code(m.GetCode())
	msg := m.GetMessage()
	if !knownCode(c) {
		msg = fmt.Sprintf("peer sent error code %d, unknown to this version: %s", int32(c), msg)
		c = CodeInternal
	}
	return &Error{Code: c, Message: msg, LeaderAddress: m.GetLeaderAddress(),
		RetryAfter: time.Duration(min(m.GetRetryAfterMs(), uint64(24*time.Hour/time.Millisecond))) * time.Millisecond}
}

func knownCode(c Code) bool { return c >= CodeBadRequest && c <= CodeUnavailable }
