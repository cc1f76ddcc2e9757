package aggregator

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/nzcfed/nzc/protocol"
)

// refusedRetries asks for the same confident-gnmax batch of 16 queries 30
// times against hospitals with a cap of ε = 5, which the batch's worst case
// (every query answered: ε ≈ 30) exceeds while the votes, near the
// threshold, let only some queries through. It returns the refusals and how
// often the hospitals were asked to vote.
func refusedRetries(t *testing.T, split bool, seed uint64) ([]*protocol.Error, int) {
	t.Helper()
	f := newFixture(t, 2, 5)
	for _, h := range f.hospitals {
		h.split = split // 20 of 40 votes on the top class, under T = 24
	}
	cfg := f.cfg
	cfg.Rand = rand.NewChaCha8([32]byte{byte(seed)})
	a := f.start(t, cfg)
	req, _ := f.request(t, 9, 16)
	before := f.led.m.State().Accounts()
	var out []*protocol.Error
	for range 30 {
		resp, err := a.Label(t.Context(), "student-1", req)
		if resp != nil {
			t.Fatal("a refused batch released labels")
		}
		var pe *protocol.Error
		if !errors.As(err, &pe) {
			t.Fatalf("got %v, want a typed refusal", err)
		}
		out = append(out, pe)
	}
	if len(f.led.charges(t)) != 0 {
		t.Fatal("a refused batch was charged")
	}
	after := f.led.m.State().Accounts()
	for i := range after {
		if after[i].Epsilon != before[i].Epsilon || after[i].Charges != before[i].Charges {
			t.Fatalf("a refused batch changed %s's account", after[i].Hospital)
		}
	}
	if _, ok, _ := a.outbox.Get("student-1", batchHex(req)); ok {
		t.Fatal("a refused batch's answers were kept")
	}
	calls := 0
	for _, h := range f.hospitals {
		calls += h.calls
	}
	return out, calls
}

// TestRefusalRevealsNothingAboutTheVotes: a batch refused for budget tells
// the student the same thing on every retry and whatever the votes are, and
// asks no hospital to vote: the decision is made before any vote is summed
// or noise drawn, from the batch's worst case. (A refusal computed from the
// realized cost, after the mechanism ran, gave "plus this ε=…", a function of
// how many queries passed the private threshold test, drawn afresh on every
// retry.)
func TestRefusalRevealsNothingAboutTheVotes(t *testing.T) {
	split, splitCalls := refusedRetries(t, true, 1)
	agree, agreeCalls := refusedRetries(t, false, 2)
	for i, pe := range append(split, agree...) {
		if pe.Code != protocol.CodeBudgetExhausted {
			t.Fatalf("refusal %d: %s, want budget-exhausted", i, pe.Code)
		}
		if pe.Message != split[0].Message {
			t.Fatalf("refusal %d says %q, the first said %q", i, pe.Message, split[0].Message)
		}
	}
	if splitCalls != 0 || agreeCalls != 0 {
		t.Fatalf("the hospitals were asked to vote %d and %d times on a batch refused before noise", splitCalls, agreeCalls)
	}
}

// TestComposedBudgetRefusedBeforeVotes: a batch whose worst case and the
// spent budget are each under the cap, together over it, is refused by the
// admission — which composes the account's curve with the worst case as the
// ledger's gate does — before any hospital votes, and again, identically,
// on every retry. (Before the budget read carried the account's curve, the
// votes were summed and the noise drawn once, and the ledger refused.)
func TestComposedBudgetRefusedBeforeVotes(t *testing.T) {
	f := newFixture(t, 2, 5)
	a := f.start(t, f.cfg)
	first, _ := f.request(t, 1, 1)
	label(t, a, first)
	for _, h := range f.hospitals {
		h.calls = 0
	}
	req, _ := f.request(t, 2, 1)
	var msgs []string
	for range 10 {
		_, err := a.Label(t.Context(), "student-1", req)
		var pe *protocol.Error
		if !errors.As(err, &pe) || pe.Code != protocol.CodeBudgetExhausted {
			t.Fatalf("got %v, want budget-exhausted", err)
		}
		msgs = append(msgs, pe.Message)
	}
	if !strings.Contains(msgs[0], "is not admitted") || !strings.Contains(msgs[0], "nothing was asked of the hospitals or drawn") {
		t.Fatalf("want the admission's refusal (each batch alone fits the cap, not both), got %q", msgs[0])
	}
	for _, m := range msgs {
		if m != msgs[0] {
			t.Fatalf("refusals differ: %q, %q", msgs[0], m)
		}
	}
	for _, h := range f.hospitals {
		if h.calls != 0 {
			t.Fatalf("hospital %s voted %d times on a refused batch and its retries, want never", h.id, h.calls)
		}
	}
	if len(f.led.charges(t)) != 1 {
		t.Fatal("the refused batch was charged")
	}
}
