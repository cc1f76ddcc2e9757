package fedtest

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/protocol"
)

// A Ledger's charge is proven by a receipt a majority of its auditors
// signed, with the keys it reports, and not by one auditor's.
func TestLedgerProvesItsCharges(t *testing.T) {
	l := Keys("fedtest test key ").NewLedger(t, "h1", "h2")
	v, err := ledger.NewVerifier(l.AuditorKeys())
	if err != nil {
		t.Fatal(err)
	}
	batch, answers := []byte("batch-1"), sha256.Sum256([]byte("answers"))
	i := l.Charge(batch, []string{"h1", "h2"}, 3, answers)
	for _, tc := range []struct {
		signers []string
		proven  bool
	}{
		{[]string{"a1", "a2"}, true},
		{[]string{"a1", "a2", "a3"}, true},
		{[]string{"a3"}, false},
	} {
		r, ok, err := protocol.ReceiptFromWire(l.Receipt(i, tc.signers...))
		if err != nil || !ok {
			t.Fatalf("%v: no receipt (%v)", tc.signers, err)
		}
		_, _, _, err = v.ChargeReceipt(r, hex.EncodeToString(batch), "s1", make([]int32, 3), answers)
		if (err == nil) != tc.proven {
			t.Errorf("signed by %v: %v, want proven %v", tc.signers, err, tc.proven)
		}
	}
}
