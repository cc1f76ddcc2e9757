package ledger

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"

	"github.com/nzcfed/nzc/internal/cputime"
	"github.com/nzcfed/nzc/mechanism"
)

// benchFed is a federation whose caps no benchmark charge reaches.
func benchFed(b testing.TB) *fed {
	f := &fed{t: b, st: New(), ts: 1}
	g := genesisBody()
	g.EpsilonBound, g.DeltaBound = 1e12, 1e-5
	f.must(g, "admin")
	for _, h := range []string{"h1", "h2", "h3"} {
		f.must(&OpenAccount{Hospital: h, CapEpsilon: 1e12, CapDelta: 1e-5, Timestamp: f.now()}, h)
	}
	f.must(&RegisterStudent{Student: "s2", Timestamp: f.now()}, "admin")
	return f
}

func signedCharges(b testing.TB, n int) [][]byte {
	f := &fed{t: b}
	curve := gaussCurve(40, 256)
	out := make([][]byte, n)
	for i := range out {
		out[i] = f.sign(chargeBody(fmt.Sprintf("batch-%06d", i), []string{"h1", "h2", "h3"}, curve, 256), "agg")
	}
	return out
}

// BenchmarkApplyCharge measures applying one signed charge for three
// hospitals: decode, signature check, cap check at each hospital's δ,
// composition, entry encoding and Merkle hashing.
func BenchmarkApplyCharge(b *testing.B) {
	pool := signedCharges(b, 2048)
	f := benchFed(b)
	i := 0
	for b.Loop() {
		if i == len(pool) {
			b.StopTimer()
			f, i = benchFed(b), 0
			b.StartTimer()
		}
		if r := f.apply(pool[i]); r.Status != StatusAccepted {
			b.Fatalf("charge %d: %s %s", i, r.Code, r.Message)
		}
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "charges/s")
}

// BenchmarkDeriveCost measures the recomputation step of applying the same
// charge alone, as apply runs it: look the parameters up (parsed once per
// parameter list), compose the realized and the worst-case cost with
// mechanism, compare with the stated curve and round onto the lattice. Its time over BenchmarkApplyCharge's is the share of
// apply that deriving costs takes (docs/PERFORMANCE.md).
func BenchmarkDeriveCost(b *testing.B) {
	c, err := DecodeCommand(signedCharges(b, 1)[0])
	if err != nil {
		b.Fatal(err)
	}
	ch := c.Body.(*Charge)
	g := mechanism.DefaultGrid()
	stated, err := g.CurveOf(ch.Curve)
	if err != nil {
		b.Fatal(err)
	}
	cache := newCostCache()
	for b.Loop() {
		if _, r, ok := deriveCharge(g, cache, ch, stated); !ok {
			b.Fatalf("%s %s", r.Code, r.Message)
		}
	}
}

// BenchmarkVerify10k measures the full offline verification of a
// 10,000-entry export with one quorum-signed checkpoint, read as a stream
// and checked on every core ahead of the replay; ns/entry is the wall time
// per entry, cpu-µs/entry the process's CPU time per entry.
func BenchmarkVerify10k(b *testing.B) {
	const n = 10_000
	f := benchFed(b)
	for _, c := range signedCharges(b, n-int(f.st.TreeSize())) {
		f.apply(c)
	}
	export, err := f.st.Export([][]byte{signedAt(b, f.st, n, "a1", "a2")})
	if err != nil {
		b.Fatal(err)
	}
	keys := auditorKeys(b, f.st)
	b.SetBytes(int64(len(export)))
	cpu0, _ := cputime.Process()
	for b.Loop() {
		r := VerifyReader(b.Context(), bytes.NewReader(export), VerifyOptions{TrustedKeys: keys, Unpinned: true, Workers: runtime.GOMAXPROCS(0)})
		if !r.OK || r.Entries != n {
			b.Fatalf("verification failed: %+v", r.Failures())
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "entries/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n)/float64(b.N), "ns/entry")
	if cpu1, ok := cputime.Process(); ok {
		// Every core's: on a shared machine the steadier figure.
		b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(n)/float64(b.N), "cpu-µs/entry")
	}
}

// BenchmarkVerifyReceipt checks the receipts of one group commit, which
// share their checkpoint: each opened anew (VerifyReceipt), and through one
// Verifier, which opens the checkpoint once.
func BenchmarkVerifyReceipt(b *testing.B) {
	f := benchFed(b)
	first := f.st.TreeSize()
	cmds := signedCharges(b, 64)
	for _, c := range cmds {
		if r := f.apply(c); r.Status != StatusAccepted {
			b.Fatalf("%s %s", r.Code, r.Message)
		}
	}
	signed := signedAt(b, f.st, f.st.TreeSize(), "a1", "a2")
	receipts := make([]Receipt, len(cmds))
	digests := make([][32]byte, len(cmds))
	for i, c := range cmds {
		r, err := f.st.Receipt(first+int64(i), signed)
		if err != nil {
			b.Fatal(err)
		}
		cmd, err := DecodeCommand(c)
		if err != nil {
			b.Fatal(err)
		}
		receipts[i] = r
		digests[i], _ = cmd.Digest()
	}
	keys := auditorKeys(b, f.st)
	b.Run("each", func(b *testing.B) {
		i := 0
		for b.Loop() {
			if _, _, err := newVerifier(b, keys).Receipt(receipts[i%len(cmds)], digests[i%len(cmds)]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("verifier", func(b *testing.B) {
		v, err := NewVerifier(keys)
		if err != nil {
			b.Fatal(err)
		}
		i := 0
		for b.Loop() {
			if _, _, err := v.Receipt(receipts[i%len(cmds)], digests[i%len(cmds)]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}
