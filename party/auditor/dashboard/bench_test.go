package dashboard

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nzcfed/nzc/ledger"
)

// benchLedger is a ledger of n charges split between two hospitals with
// caps large enough for all of them.
func benchLedger(b *testing.B, n int) *fed {
	f := newFedWithCaps(b, 1e6, 1e6)
	for i := range n {
		hs := []string{"h1", "h2"}
		if i%3 == 0 {
			hs = hs[:1]
		}
		if r := f.charge(fmt.Sprintf("b%d", i), hs, 1); r.Status != ledger.StatusAccepted {
			b.Fatalf("charge %d: %s", i, r.Message)
		}
	}
	return f
}

// BenchmarkRead is one read of the log for the page, without the
// verification: "first" replays the whole log (ledger.SpendReplay) as after
// a start, "again" is a later read, which replays only new entries (none
// here) but rebuilds the history, the recent activity and the accounts.
func BenchmarkRead(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		f := benchLedger(b, n)
		d, err := New(LedgerSource(f.st, f.cosign(auditorIDs...)), Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("first/entries=%d", n), func(b *testing.B) {
			for b.Loop() {
				d.data.replay = nil
				if _, err := d.build(context.Background(), nil, time.Now()); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("again/entries=%d", n), func(b *testing.B) {
			if _, err := d.build(context.Background(), nil, time.Now()); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := d.build(context.Background(), nil, time.Now()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkVerify is the live verification of the whole log (ledger.Verify
// on the log up to the cosigned checkpoint), which runs once per new
// checkpoint.
func BenchmarkVerify(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			f := benchLedger(b, n)
			d, err := New(LedgerSource(f.st, f.cosign(auditorIDs...)), Options{})
			if err != nil {
				b.Fatal(err)
			}
			v, err := d.build(context.Background(), nil, time.Now())
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				d.ver.res = nil // run it again
				if r := d.verification(v); !r.OK {
					b.Fatal(r.Summary)
				}
			}
		})
	}
}
