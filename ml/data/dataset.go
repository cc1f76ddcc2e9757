package data

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
)

// Shape is the layout of one example's features: Height×Width×Channels,
// stored channel-last (HWC). Tabular data has Height = Channels = 1.
type Shape struct {
	Height, Width, Channels int
}

// Size is the number of features of one example.
func (s Shape) Size() int { return s.Height * s.Width * s.Channels }

func (s Shape) String() string { return fmt.Sprintf("%dx%dx%d", s.Height, s.Width, s.Channels) }

// Dataset is a set of labelled examples held in memory. Features are
// float32, row-major, one row of Shape.Size() values per example; labels are
// class indices in [0, Classes).
type Dataset struct {
	X       []float32
	Y       []int
	Shape   Shape
	Classes int
}

// ErrInvalid reports a data set whose fields do not agree with each other.
var ErrInvalid = errors.New("invalid data set")

// Len is the number of examples.
func (d *Dataset) Len() int { return len(d.Y) }

// Dim is the number of features per example.
func (d *Dataset) Dim() int { return d.Shape.Size() }

// Row returns the features of example i (aliasing d.X).
func (d *Dataset) Row(i int) []float32 {
	n := d.Dim()
	return d.X[i*n : (i+1)*n : (i+1)*n]
}

// Validate checks that the fields agree: sizes, and labels in range.
func (d *Dataset) Validate() error {
	if d.Shape.Height <= 0 || d.Shape.Width <= 0 || d.Shape.Channels <= 0 {
		return fmt.Errorf("%w: shape %v must be positive", ErrInvalid, d.Shape)
	}
	if d.Classes < 2 {
		return fmt.Errorf("%w: %d classes, need at least 2", ErrInvalid, d.Classes)
	}
	if len(d.X) != len(d.Y)*d.Dim() {
		return fmt.Errorf("%w: %d feature values for %d examples of %d features", ErrInvalid, len(d.X), len(d.Y), d.Dim())
	}
	for i, y := range d.Y {
		if y < 0 || y >= d.Classes {
			return fmt.Errorf("%w: example %d has label %d outside [0,%d)", ErrInvalid, i, y, d.Classes)
		}
	}
	return nil
}

// Subset returns a new data set holding copies of the examples at idx, in that order.
func (d *Dataset) Subset(idx []int) *Dataset {
	n := d.Dim()
	out := &Dataset{
		X:       make([]float32, len(idx)*n),
		Y:       make([]int, len(idx)),
		Shape:   d.Shape,
		Classes: d.Classes,
	}
	for j, i := range idx {
		copy(out.X[j*n:(j+1)*n], d.Row(i))
		out.Y[j] = d.Y[i]
	}
	return out
}

// Slice returns the examples [from, to) without copying.
func (d *Dataset) Slice(from, to int) *Dataset {
	n := d.Dim()
	return &Dataset{X: d.X[from*n : to*n], Y: d.Y[from:to], Shape: d.Shape, Classes: d.Classes}
}

// Hash is a SHA-256 over the shape, class count, features and labels: two
// data sets with the same hash hold the same examples in the same order.
func (d *Dataset) Hash() string {
	h := sha256.New()
	var buf [8]byte
	for _, v := range []int{d.Shape.Height, d.Shape.Width, d.Shape.Channels, d.Classes, len(d.Y)} {
		binary.LittleEndian.PutUint64(buf[:], uint64(v))
		h.Write(buf[:])
	}
	const chunk = 4096
	b := make([]byte, 0, chunk*4)
	for i := 0; i < len(d.X); i += chunk {
		b = b[:0]
		for _, v := range d.X[i:min(i+chunk, len(d.X))] {
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
		h.Write(b)
	}
	b = b[:0]
	for _, y := range d.Y {
		b = binary.LittleEndian.AppendUint32(b, uint32(y))
		if len(b) >= chunk*4 {
			h.Write(b)
			b = b[:0]
		}
	}
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}
