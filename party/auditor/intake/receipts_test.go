package intake

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/party/internal/fedtest"
)

// receiptKeys sign the commands and checkpoints of the tests' ledgers.
const receiptKeys = fedtest.Keys("intake test key ")

// receiptLedger is a ledger with three auditors, and a cosigner that signs
// its latest checkpoint with two of them.
type receiptLedger struct {
	st       *ledger.State
	receipts *ledger.Verifier // with the auditors' keys
	calls    atomic.Int32
	gate     chan struct{} // when not nil, each cosign waits for a value
	fail     atomic.Bool
}

func newReceiptLedger(t *testing.T) *receiptLedger {
	t.Helper()
	l := receiptKeys.NewLedger(t)
	receipts, err := ledger.NewVerifier(l.AuditorKeys())
	if err != nil {
		t.Fatal(err)
	}
	return &receiptLedger{st: l.State, receipts: receipts}
}

func (rl *receiptLedger) cosign(ctx context.Context) ([]byte, error) {
	rl.calls.Add(1)
	if rl.gate != nil {
		select {
		case <-rl.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if rl.fail.Load() {
		return nil, errors.New("only one auditor answered")
	}
	return receiptKeys.Cosign(rl.st, "a1", "a2")
}

// registerStudent applies one more accepted command and returns its index
// and digest.
func (rl *receiptLedger) registerStudent(t *testing.T, id string) (int64, [32]byte) {
	t.Helper()
	p, err := ledger.Sign(&ledger.RegisterParty{Party: receiptKeys.Party(id, ledger.RoleStudent), Timestamp: 2}, "admin", receiptKeys.Key("admin"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := rl.st.Apply(p)
	if err != nil || r.Status != ledger.StatusAccepted {
		t.Fatalf("register: %+v %v", r, err)
	}
	c, _ := ledger.DecodeCommand(p)
	d, _ := c.Digest()
	return int64(r.Index), d
}

func TestReceiptsShareARound(t *testing.T) {
	rl := newReceiptLedger(t)
	rl.gate = make(chan struct{})
	rs := NewReceipts(rl.st, rl.cosign, 0)
	idx, digest := rl.registerStudent(t, "s2")

	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			r, err := rs.For(t.Context(), idx)
			if err == nil {
				_, _, err = rl.receipts.Receipt(r, digest)
			}
			errs <- err
		})
	}
	// Let exactly one round through once every caller waits on it.
	rl.gate <- struct{}{}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := rl.calls.Load(); n != 1 {
		t.Fatalf("%d cosigning rounds for 16 receipts of one entry, want 1", n)
	}

	// A newer entry needs a newer checkpoint: one more round.
	idx2, digest2 := rl.registerStudent(t, "s3")
	go func() { rl.gate <- struct{}{} }()
	r, err := rs.For(t.Context(), idx2)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := rl.receipts.Receipt(r, digest2); err != nil {
		t.Fatal(err)
	}
	// The older entry is covered by the newest checkpoint: no round.
	if _, err := rs.For(t.Context(), idx); err != nil || rl.calls.Load() != 2 {
		t.Fatalf("older entry: %v after %d rounds", err, rl.calls.Load())
	}
}

func TestReceiptsWithoutAMajority(t *testing.T) {
	rl := newReceiptLedger(t)
	rl.fail.Store(true)
	rs := NewReceipts(rl.st, rl.cosign, 0)
	idx, digest := rl.registerStudent(t, "s2")
	if _, err := rs.For(t.Context(), idx); err == nil {
		t.Fatal("a receipt without a majority's cosignatures")
	}
	// The next call tries again and succeeds once a majority answers.
	rl.fail.Store(false)
	r, err := rs.For(t.Context(), idx)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := rl.receipts.Receipt(r, digest); err != nil {
		t.Fatal(err)
	}
	// An entry not yet applied here is waited for, within the context.
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, err := rs.For(ctx, rl.st.TreeSize()); !errors.Is(err, ledger.ErrReceipt) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an entry not applied here: %v", err)
	}
	next := rl.st.TreeSize()
	done := make(chan error, 1)
	go func() { _, err := rs.For(t.Context(), next); done <- err }()
	rl.registerStudent(t, "s3")
	if err := <-done; err != nil {
		t.Fatalf("an entry applied while its receipt was asked for: %v", err)
	}
}
