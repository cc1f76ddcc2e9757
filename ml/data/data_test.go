package data

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// encodeIDX builds a uint8 idx file with the given dimensions and values.
func encodeIDX(dims []int, vals []byte) []byte {
	b := []byte{0, 0, idxUint8, byte(len(dims))}
	for _, d := range dims {
		b = binary.BigEndian.AppendUint32(b, uint32(d))
	}
	return append(b, vals...)
}

func gz(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestDecodeIDX(t *testing.T) {
	img := encodeIDX([]int{2, 2, 3}, []byte{0, 255, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10})
	tests := []struct {
		name    string
		in      []byte
		dims    []int
		problem string // substring of the error; empty for success
	}{
		{"plain", img, []int{2, 2, 3}, ""},
		{"gzipped", gz(t, img), []int{2, 2, 3}, ""},
		{"empty", nil, nil, "truncated"},
		{"bad magic", append([]byte{1, 0}, img[2:]...), nil, "not an idx file"},
		{"unknown type", append([]byte{0, 0, 0x42}, img[3:]...), nil, "unknown idx element type"},
		{"zero dims", []byte{0, 0, 8, 0}, nil, "zero dimensions"},
		{"truncated header", img[:9], nil, "truncated header"},
		{"truncated data", img[:len(img)-1], nil, "truncated"},
		{"trailing bytes", append(slices.Clone(img), 0), nil, "unexpected bytes"},
		{"huge dims", encodeIDX([]int{1 << 20, 1 << 20, 1 << 20}, nil), nil, "more than"},
		{"bad gzip", []byte{0x1f, 0x8b, 0, 0}, nil, "gzip"},
		{"int16", append([]byte{0, 0, idxInt16, 1, 0, 0, 0, 2}, 0xff, 0xfe, 0, 7), []int{2}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, err := DecodeIDX("f.idx", tt.in)
			if tt.problem == "" {
				if err != nil {
					t.Fatalf("DecodeIDX: %v", err)
				}
				if !slices.Equal(x.Dims, tt.dims) {
					t.Fatalf("dims %v, want %v", x.Dims, tt.dims)
				}
				return
			}
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a *FormatError", err)
			}
			if fe.File != "f.idx" || !strings.Contains(fe.Problem, tt.problem) {
				t.Fatalf("error %q, want file f.idx and problem containing %q", err, tt.problem)
			}
		})
	}
	x, err := DecodeIDX("f", append([]byte{0, 0, idxInt16, 1, 0, 0, 0, 2}, 0xff, 0xfe, 0, 7))
	if err != nil || !slices.Equal(x.Data, []float64{-2, 7}) {
		t.Fatalf("int16 decode: %v %v", x, err)
	}
}

func writeIDXDir(t *testing.T, dir string, gzipped bool, nTrain, nTest int) {
	t.Helper()
	write := func(name string, dims []int, vals []byte) {
		b := encodeIDX(dims, vals)
		if gzipped {
			b = gz(t, b)
			name += ".gz"
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mk := func(n int) ([]byte, []byte) {
		img := make([]byte, n*4*3)
		lab := make([]byte, n)
		for i := range img {
			img[i] = byte(i * 7)
		}
		for i := range lab {
			lab[i] = byte(i % 3)
		}
		return img, lab
	}
	img, lab := mk(nTrain)
	write("train-images-idx3-ubyte", []int{nTrain, 4, 3}, img)
	write("train-labels-idx1-ubyte", []int{nTrain}, lab)
	img, lab = mk(nTest)
	write("t10k-images-idx3-ubyte", []int{nTest, 4, 3}, img)
	write("t10k-labels-idx1-ubyte", []int{nTest}, lab)
}

func TestLoadIDXDir(t *testing.T) {
	for _, gzipped := range []bool{false, true} {
		dir := t.TempDir()
		writeIDXDir(t, dir, gzipped, 10, 5)
		s, err := LoadIDXDir(dir)
		if err != nil {
			t.Fatalf("gzipped=%v: %v", gzipped, err)
		}
		if s.Train.Len() != 10 || s.Test.Len() != 5 || s.Train.Shape != (Shape{4, 3, 1}) || s.Train.Classes != 3 {
			t.Fatalf("got train %d test %d shape %v classes %d", s.Train.Len(), s.Test.Len(), s.Train.Shape, s.Train.Classes)
		}
		if err := s.Train.Validate(); err != nil {
			t.Fatal(err)
		}
		if got, want := s.Train.X[1], float32(7)/255; got != want {
			t.Fatalf("pixel 1 = %v, want %v", got, want)
		}
	}
	if _, err := LoadIDXDir(t.TempDir()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("empty dir: %v, want ErrNotFound", err)
	}
	// Label count mismatch.
	dir := t.TempDir()
	writeIDXDir(t, dir, false, 10, 5)
	if err := os.WriteFile(filepath.Join(dir, "t10k-labels-idx1-ubyte"), encodeIDX([]int{4}, []byte{0, 1, 2, 0}), 0o644); err != nil {
		t.Fatal(err)
	}
	var fe *FormatError
	if _, err := LoadIDXDir(dir); !errors.As(err, &fe) || !strings.Contains(fe.Problem, "4 labels for 5 images") {
		t.Fatalf("mismatch: %v", err)
	}
}

func TestDecodeCSV(t *testing.T) {
	tests := []struct {
		name, in string
		n, dim   int
		classes  int
		problem  string
	}{
		{"header", "age,bp,label\n1,2,0\n3,4.5,2\n", 2, 2, 3, ""},
		{"no header", "1,2,1\n3,4,0\n", 2, 2, 2, ""},
		{"comment", "# comment\n1,2,1\n", 1, 2, 2, ""},
		{"ragged", "1,2,1\n3,0\n", 0, 0, 0, "line 2"},
		{"bad feature", "1,2,1\n1,x,1\n", 0, 0, 0, "not a finite number"},
		{"nan feature", "1,NaN,1\n", 0, 0, 0, "not a finite number"},
		{"bad label", "1,2,1.5\n", 0, 0, 0, "label"},
		{"negative label", "1,2,-1\n", 0, 0, 0, "label"},
		{"one field", "1\n", 0, 0, 0, "field"},
		{"empty", "", 0, 0, 0, "no records"},
		{"header only", "a,b\n", 0, 0, 0, "no records"},
		{"bad quote", "1,\"2,1\n", 0, 0, 0, "line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := DecodeCSV("h.csv", strings.NewReader(tt.in))
			if tt.problem == "" {
				if err != nil {
					t.Fatal(err)
				}
				if d.Len() != tt.n || d.Dim() != tt.dim || d.Classes != tt.classes {
					t.Fatalf("got n=%d dim=%d classes=%d", d.Len(), d.Dim(), d.Classes)
				}
				if err := d.Validate(); err != nil {
					t.Fatal(err)
				}
				return
			}
			var fe *FormatError
			if !errors.As(err, &fe) || fe.File != "h.csv" || !strings.Contains(fe.Problem, tt.problem) {
				t.Fatalf("error %v, want a *FormatError for h.csv containing %q", err, tt.problem)
			}
		})
	}
}

func TestPartition(t *testing.T) {
	tests := []struct {
		n        int
		teachers []int
	}{
		{100, []int{3}},
		{101, []int{2, 5, 1}},
		{60000, []int{50, 50, 50, 50, 50}},
		{7, []int{7}},
	}
	for _, tt := range tests {
		p, err := Partition(tt.n, tt.teachers, 42)
		if err != nil {
			t.Fatal(err)
		}
		seen := make([]int, tt.n)
		total := 0
		for h, shards := range p {
			if len(shards) != tt.teachers[h] {
				t.Fatalf("hospital %d has %d shards, want %d", h, len(shards), tt.teachers[h])
			}
			for _, s := range shards {
				total++
				if len(s) == 0 {
					t.Fatal("empty shard")
				}
				for _, i := range s {
					seen[i]++
				}
			}
		}
		for i, c := range seen {
			if c != 1 {
				t.Fatalf("n=%d: index %d is in %d shards, want exactly 1", tt.n, i, c)
			}
		}
		// Shard sizes differ by at most one.
		lo, hi := tt.n, 0
		for _, shards := range p {
			for _, s := range shards {
				lo, hi = min(lo, len(s)), max(hi, len(s))
			}
		}
		if hi-lo > 1 {
			t.Fatalf("shard sizes range %d..%d", lo, hi)
		}
		again, _ := Partition(tt.n, tt.teachers, 42)
		other, _ := Partition(tt.n, tt.teachers, 43)
		same, differs := true, false
		for h := range p {
			for j := range p[h] {
				same = same && slices.Equal(p[h][j], again[h][j])
				differs = differs || !slices.Equal(p[h][j], other[h][j])
			}
		}
		if !same {
			t.Fatal("same seed gave a different partition")
		}
		if tt.n > 10 && !differs {
			t.Fatal("different seeds gave the same partition")
		}
	}
	for _, bad := range [][]int{nil, {0}, {3, -1}, {200}} {
		if _, err := Partition(100, bad, 1); !errors.Is(err, ErrPartition) {
			t.Fatalf("Partition(100, %v): %v, want ErrPartition", bad, err)
		}
	}
}

func TestSubsetHash(t *testing.T) {
	d := &Dataset{X: []float32{0, 1, 2, 3, 4, 5}, Y: []int{0, 1, 1}, Shape: Shape{1, 2, 1}, Classes: 2}
	s := d.Subset([]int{2, 0})
	if !slices.Equal(s.X, []float32{4, 5, 0, 1}) || !slices.Equal(s.Y, []int{1, 0}) {
		t.Fatalf("subset %v %v", s.X, s.Y)
	}
	if d.Hash() == s.Hash() || d.Hash() != d.Subset([]int{0, 1, 2}).Hash() {
		t.Fatal("hash does not track content")
	}
}

func TestMNIST(t *testing.T) {
	dir := filepath.Join("..", "..", "data", "mnist")
	if _, err := os.Stat(dir); err != nil {
		t.Skip("data/mnist is absent; run scripts/fetch-data.sh to test the MNIST loader")
	}
	// The test split only: the training split is six times larger and slow under -race.
	d, err := LoadIDXPair(filepath.Join(dir, "t10k-images-idx3-ubyte"), filepath.Join(dir, "t10k-labels-idx1-ubyte"))
	if err != nil {
		t.Fatal(err)
	}
	if d.Len() != 10000 || d.Shape != (Shape{28, 28, 1}) || d.Classes != 10 {
		t.Fatalf("unexpected MNIST test split: %d %v %d", d.Len(), d.Shape, d.Classes)
	}
}

func FuzzDecodeIDX(f *testing.F) {
	f.Add(encodeIDX([]int{2, 2}, []byte{1, 2, 3, 4}))
	f.Add(gz(f, encodeIDX([]int{1}, []byte{9})))
	f.Add([]byte{0, 0, idxFloat64, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		x, err := DecodeIDX("fuzz", b)
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		n := 1
		for _, d := range x.Dims {
			n *= d
		}
		if n != len(x.Data) {
			t.Fatalf("dims %v but %d values", x.Dims, len(x.Data))
		}
	})
}

func FuzzDecodeCSV(f *testing.F) {
	f.Add("a,b,label\n1,2,0\n3,4,1\n")
	f.Add("1,2,1\n")
	f.Add("1,\"2\n")
	f.Fuzz(func(t *testing.T, s string) {
		d, err := DecodeCSV("fuzz", strings.NewReader(s))
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if err := d.Validate(); err != nil {
			t.Fatalf("decoded an invalid data set: %v", err)
		}
	})
}
