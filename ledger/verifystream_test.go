package ledger

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"testing"
)

// readStream reads b with an ExportReader into an Export.
func readStream(b []byte) (Export, error) {
	x, err := NewExportReader(bytes.NewReader(b))
	if err != nil {
		return Export{}, err
	}
	var out Export
	for {
		e, err := x.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return Export{}, err
		}
		out.Entries = append(out.Entries, e)
	}
	out.Keys, out.Checkpoints, err = x.Tail()
	if err != nil {
		return Export{}, err
	}
	return out, nil
}

// sameExport says whether two exports hold the same entries, keys and
// checkpoints.
func sameExport(a, b Export) bool {
	eq := func(x, y [][]byte) bool { return slices.EqualFunc(x, y, bytes.Equal) }
	return eq(a.Entries, b.Entries) && slices.Equal(a.Keys, b.Keys) && eq(a.Checkpoints, b.Checkpoints)
}

// The stream reader accepts exactly what DecodeExport accepts, and reads
// the same export from it.
func TestExportReaderReadsWhatDecodeReads(t *testing.T) {
	_, x := goldenExport(t)
	good := encodeExport(t, x)
	header := func(version, tag byte, n uint64) []byte {
		e := &encoder{}
		e.u8(version)
		e.u8(tag)
		e.u64(n)
		return e.buf
	}
	tests := []struct {
		name string
		b    []byte
		ok   bool
	}{
		{"golden", good, true},
		{"empty log", encodeExport(t, Export{}), true},
		{"nothing", nil, false},
		{"cut in the header", good[:5], false},
		{"cut in an entry", good[:len(good)/2], false},
		{"cut in the tail", good[:len(good)-3], false},
		{"trailing byte", append(bytes.Clone(good), 0), false},
		{"wrong version", append(header(Version+1, exportTag, 0), 0, 0, 0, 0, 0, 0, 0, 0), false},
		{"snapshot tag", append(header(Version, snapshotTag, 0), 0, 0, 0, 0, 0, 0, 0, 0), false},
		{"more entries than bytes", append(header(Version, exportTag, 1<<40), 0, 0, 0, 0, 0, 0, 0, 0), false},
		{"entry over the limit", append(header(Version, exportTag, 1), 0xff, 0xff, 0xff, 0xff), false},
		{"keys over the limit", append(header(Version, exportTag, 0), 0, 0, 0x10, 0x01), false},
		{"key not text", append(header(Version, exportTag, 0), 0, 0, 0, 1, 0, 0, 0, 1, '\n', 0, 0, 0, 0), false},
		{"checkpoint over the note limit", append(header(Version, exportTag, 0), 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 1), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want, werr := DecodeExport(tc.b)
			got, gerr := readStream(tc.b)
			if (werr == nil) != tc.ok || (gerr == nil) != tc.ok {
				t.Fatalf("DecodeExport: %v, ExportReader: %v; want ok=%v", werr, gerr, tc.ok)
			}
			if gerr != nil && !errors.Is(gerr, ErrMalformed) {
				t.Fatalf("ExportReader: %v does not wrap ErrMalformed", gerr)
			}
			if tc.ok && !sameExport(got, want) {
				t.Fatal("ExportReader read another export than DecodeExport")
			}
		})
	}
}

func FuzzExportReader(f *testing.F) {
	_, x := goldenExport(f)
	b, _ := x.Encode()
	f.Add(b)
	f.Add(b[:len(b)/3])
	f.Fuzz(func(t *testing.T, b []byte) {
		want, werr := DecodeExport(b)
		got, gerr := readStream(b)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("DecodeExport: %v, ExportReader: %v", werr, gerr)
		}
		if werr == nil && !sameExport(got, want) {
			t.Fatal("ExportReader read another export than DecodeExport")
		}
	})
}

// The report does not depend on how many workers check entries ahead of
// the replay, for a good export, an empty one, one of the genesis alone,
// and exports with a byte changed in any entry.
func TestVerifyReaderWorkersChangeNothing(t *testing.T) {
	f, x := goldenExport(t)
	keys := auditorKeys(t, f.st)
	rng := rand.New(rand.NewPCG(3, 4))
	exports := [][]byte{encodeExport(t, x), encodeExport(t, Export{}), encodeExport(t, Export{Entries: x.Entries[:1]})}
	for k := range x.Entries {
		bad := x
		bad.Entries = slices.Clone(x.Entries)
		bad.Entries[k] = bytes.Clone(x.Entries[k])
		bad.Entries[k][rng.IntN(len(bad.Entries[k]))] ^= 0x04
		exports = append(exports, encodeExport(t, bad))
	}
	for i, b := range exports {
		var reports []string
		for _, workers := range []int{0, 1, 2, 5} {
			r := VerifyReader(t.Context(), bytes.NewReader(b), VerifyOptions{TrustedKeys: keys, Unpinned: true, Workers: workers})
			j, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			reports = append(reports, string(j))
		}
		for w := 1; w < len(reports); w++ {
			if reports[w] != reports[0] {
				t.Fatalf("export %d: the report with more workers differs:\n%s\n%s", i, reports[0], reports[w])
			}
		}
	}
}

// onlyReader hides every method of a reader but Read: a stream that cannot
// be read again.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

// swapSeeker reads first, and after a seek back to the start reads then:
// a file replaced between two readings.
type swapSeeker struct {
	*bytes.Reader
	then []byte
}

func (s *swapSeeker) Seek(off int64, whence int) (int64, error) {
	if s.then != nil && off == 0 && whence == io.SeekStart {
		s.Reader, s.then = bytes.NewReader(s.then), nil
	}
	return s.Reader.Seek(off, whence)
}

// A checkpoint older than the roots a streamed verification keeps is
// checked by reading the export again when it can be, fails when it
// cannot, and fails when the export read again is not the one verified.
func TestVerifyReaderOldCheckpoint(t *testing.T) {
	f, x := goldenExport(t) // checkpoints of 7 entries and of all 12
	keys := auditorKeys(t, f.st)
	b := encodeExport(t, x)
	opts := VerifyOptions{TrustedKeys: keys, Unpinned: true, Workers: 2, keepRoots: 3}

	if r := VerifyReader(t.Context(), bytes.NewReader(b), opts); !r.OK {
		t.Fatalf("a seekable export failed: %+v", r.Failures())
	}
	r := VerifyReader(t.Context(), onlyReader{bytes.NewReader(b)}, opts)
	if ff := firstFailure(r); r.OK || ff == nil || ff.Name != "export checkpoint" || !strings.Contains(ff.Detail, "verify the export from a file") {
		t.Fatalf("a stream with an old checkpoint: first failure %+v", ff)
	}
	// The export read again has entry 3 changed, as a file replaced while
	// it was verified.
	bad := x
	bad.Entries = slices.Clone(x.Entries)
	bad.Entries[3] = bytes.Clone(x.Entries[3])
	bad.Entries[3][len(bad.Entries[3])-1] ^= 1
	r = VerifyReader(t.Context(), &swapSeeker{Reader: bytes.NewReader(b), then: encodeExport(t, bad)}, opts)
	if r.OK || !failed(r, "tree") {
		t.Fatalf("an export changed between two readings verified: %+v", r.Failures())
	}
	// An earlier checkpoint's size is known before the stream: its root is
	// kept whatever its age.
	opts.Earlier = [][]byte{x.Checkpoints[0]}
	if r := VerifyReader(t.Context(), onlyReader{bytes.NewReader(b)}, opts); !slices.ContainsFunc(r.Checkpoints, func(c CheckpointReport) bool { return c.Source == "earlier" && c.OK }) {
		t.Fatalf("the earlier checkpoint of 7 entries was not checked on a stream: %+v", r.Checkpoints)
	}
}

// peakLive reads through r and, every few reads, collects and samples the
// heap found live, keeping the largest: the heap held while r is read.
type peakLive struct {
	r      io.Reader
	reads  int
	sample []metrics.Sample
	peak   uint64
}

func newPeakLive(r io.Reader) *peakLive {
	p := &peakLive{r: r, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	p.collect()
	return p
}

func (p *peakLive) collect() {
	runtime.GC()
	metrics.Read(p.sample)
	p.peak = max(p.peak, p.sample[0].Value.Uint64())
}

func (p *peakLive) Read(b []byte) (int, error) {
	if p.reads++; p.reads%2 == 0 {
		p.collect()
	}
	return p.r.Read(b)
}

// Verifying an export holds the decision state and a bounded window of
// entries, not the log: ten times the entries grow the heap it keeps live
// by a small factor, and far less than the export.
func TestVerifyReaderHeapIsBounded(t *testing.T) {
	const n = 1000
	dir := t.TempDir()
	f := benchFed(t)
	for _, c := range signedCharges(t, 10*n) {
		if r := f.apply(c); r.Status != StatusAccepted {
			t.Fatalf("%s %s", r.Code, r.Message)
		}
	}
	keys := auditorKeys(t, f.st)
	var paths []string
	var sizes []int64
	for _, size := range []int64{n, 10 * n} {
		p := filepath.Join(dir, "export")
		p += string(rune('0' + len(paths)))
		out, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.st.WriteExport(out, size, [][]byte{signedAt(t, f.st, size, "a1", "a2")}); err != nil {
			t.Fatal(err)
		}
		st, _ := out.Stat()
		sizes = append(sizes, st.Size())
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	f = nil // the log it verifies is not in this process's heap
	// On one core the replay and the workers make little progress while
	// a collection marks: what it finds live is what verify holds, not
	// what it allocated meanwhile.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	var grew []uint64
	for _, p := range paths {
		in, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		src := newPeakLive(in)
		base := src.peak
		r := VerifyReader(t.Context(), src, VerifyOptions{TrustedKeys: keys, Unpinned: true, Workers: 2})
		in.Close()
		if !r.OK {
			t.Fatalf("%s: %+v", p, r.Failures())
		}
		grew = append(grew, src.peak-base)
	}
	t.Logf("exports of %d and %d bytes; the live heap grew by at most %d and %d bytes", sizes[0], sizes[1], grew[0], grew[1])
	if grew[1] > 4*grew[0] || grew[1] > uint64(sizes[1])/2 {
		t.Fatalf("verifying %d entries kept %d bytes live, %d entries %d bytes: the heap grows with the export (%d bytes)", n, grew[0], 10*n, grew[1], sizes[1])
	}
}

// A verification whose context ends stops, and its report says so and
// verifies nothing.
func TestVerifyReaderStopsWithItsContext(t *testing.T) {
	f, x := goldenExport(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	r := VerifyReader(ctx, bytes.NewReader(encodeExport(t, x)), VerifyOptions{TrustedKeys: auditorKeys(t, f.st), Unpinned: true, Workers: 2})
	if ff := firstFailure(r); r.OK || ff == nil || ff.Name != "decode" || !strings.Contains(ff.Detail, context.Canceled.Error()) || len(r.Checks) != 1 {
		t.Fatalf("a cancelled verification reported %+v", r.Checks)
	}
}
