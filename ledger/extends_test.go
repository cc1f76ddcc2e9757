package ledger

import (
	"errors"
	"fmt"
	"testing"
)

// TestExtendsCheckpoint checks what a restore relies on: a log is accepted
// against a cosigned checkpoint only when it holds exactly the entries the
// majority signed, and is refused when cut short, rewritten, of another
// origin, or vouched for by too few (trusted) auditors.
func TestExtendsCheckpoint(t *testing.T) {
	f := goldenLog(t)
	n := f.st.TreeSize()
	keys := auditorKeys(t, f.st)

	longer := goldenLog(t)
	longer.must(chargeBody("b9", []string{"h1"}, gaussCurve(40, 10), 10), "agg")
	rewritten := newFed(t)
	for i := 0; rewritten.st.TreeSize() < n; i++ {
		rewritten.must(chargeBody(fmt.Sprintf("other-%d", i), []string{"h3"}, gaussCurve(40, 10), 10), "agg")
	}
	foreign, err := SignCheckpoint(Checkpoint{Origin: "another.federation/log", Size: n, Root: f.st.RootHash()}, auditorSigner(t, "a1"), auditorSigner(t, "a2"))
	if err != nil {
		t.Fatal(err)
	}

	var quorum *QuorumError
	for _, tc := range []struct {
		name    string
		signed  []byte
		trusted []string
		want    func(error) bool
	}{
		{"its own head", signedAt(t, f.st, n, "a1", "a2"), keys, nil},
		{"an earlier checkpoint", signedAt(t, f.st, 7, "a2", "a3"), nil, nil},
		{"cut short", signedAt(t, longer.st, n+1, "a1", "a2"), keys, is(ErrNotExtended)},
		{"rewritten", signedAt(t, rewritten.st, n, "a1", "a2", "a3"), keys, is(ErrNotExtended)},
		{"another origin", foreign, keys, is(ErrNotExtended)},
		{"one signature", signedAt(t, f.st, n, "a1"), keys, func(err error) bool { return errors.As(err, &quorum) }},
		{"majority outside the trusted keys", signedAt(t, f.st, n, "a1", "a2"), keys[:1], func(err error) bool { return errors.As(err, &quorum) }},
		{"not a checkpoint", []byte("size 3\n"), keys, is(ErrCheckpoint)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.st.ExtendsCheckpoint(tc.signed, tc.trusted)
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != nil && (err == nil || !tc.want(err)):
				t.Fatalf("got %v, want a refusal of this kind", err)
			}
		})
	}
}

func is(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}
