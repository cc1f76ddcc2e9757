package protocol

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nzcfed/nzc/protocol/nzcpb"
)

func TestErrorCodesRoundTrip(t *testing.T) {
	names := map[string]bool{}
	for _, c := range Codes() {
		if names[c.String()] {
			t.Fatalf("duplicate name %q", c)
		}
		names[c.String()] = true
		sent := fmt.Errorf("handling batch: %w", Errorf(c, "because %d", 7))
		w := ToWire(sent)
		if Code(w.GetCode()) != c || w.GetMessage() != "because 7" {
			t.Fatalf("%v: wire = %v", c, w)
		}
		got := FromWire(w)
		if !errors.Is(got, c.Sentinel()) {
			t.Fatalf("%v: errors.Is(%v, sentinel) is false", c, got)
		}
		for _, other := range Codes() {
			if other != c && errors.Is(got, other.Sentinel()) {
				t.Fatalf("%v matches %v's sentinel", c, other)
			}
		}
		// A wrapped sentinel keeps its code.
		if w := ToWire(fmt.Errorf("x: %w", c.Sentinel())); Code(w.GetCode()) != c {
			t.Fatalf("wrapped sentinel %v became %v", c, w.GetCode())
		}
	}
	for _, want := range []string{"bad-request", "unauthorized", "unknown-type", "too-large", "budget-exhausted",
		"quorum-not-met", "ledger-unavailable", "not-leader", "internal", "unavailable"} {
		if !names[want] {
			t.Errorf("no code %q", want)
		}
	}
}

func TestToWireClassifies(t *testing.T) {
	tests := []struct {
		err  error
		code Code
	}{
		{&FrameTooLargeError{Type: TypeHello, Length: 20, Max: 10}, CodeTooLarge},
		{&UnknownTypeError{Type: 99}, CodeUnknownType},
		{fmt.Errorf("decode: %w", ErrBadMessage), CodeBadRequest},
		{fmt.Errorf("read: %w", ErrTruncated), CodeBadRequest},
		{context.DeadlineExceeded, CodeUnavailable},
		{errors.New("open /secret/path: permission denied"), CodeInternal},
	}
	for _, tc := range tests {
		w := ToWire(tc.err)
		if Code(w.GetCode()) != tc.code {
			t.Errorf("%v: code %v, want %v", tc.err, Code(w.GetCode()), tc.code)
		}
	}
	if w := ToWire(errors.New("open /secret/path")); strings.Contains(w.GetMessage(), "secret") {
		t.Errorf("internal error text sent to the peer: %q", w.GetMessage())
	}
	// Frame errors match across the wire.
	if !errors.Is(FromWire(ToWire(&FrameTooLargeError{Max: 1})), ErrFrameTooLarge) {
		t.Error("too-large does not match ErrFrameTooLarge after the round trip")
	}
}

func TestNotLeaderAndRetry(t *testing.T) {
	w := ToWire(NotLeader("10.0.0.2:7400"))
	got := FromWire(w)
	if !errors.Is(got, ErrNotLeader) || got.LeaderAddress != "10.0.0.2:7400" || !strings.Contains(got.Error(), "10.0.0.2:7400") {
		t.Fatalf("not leader: %+v", got)
	}
	e := &Error{Code: CodeUnavailable, Message: "starting", RetryAfter: 1500 * time.Millisecond}
	if back := FromWire(ToWire(e)); back.RetryAfter != 1500*time.Millisecond || !back.Code.Retryable() {
		t.Fatalf("retry after: %+v", back)
	}
	if CodeBudgetExhausted.Retryable() || CodeUnauthorized.Retryable() {
		t.Fatal("permanent refusals marked retryable")
	}
	unknown := FromWire(&nzcpb.Error{Code: 77, Message: "new"})
	if unknown.Code != CodeInternal || !strings.Contains(unknown.Message, "77") {
		t.Fatalf("unknown code: %+v", unknown)
	}
}
