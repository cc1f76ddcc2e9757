package data

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
)

// Hardening derives a harder image data set from one: every image loses a
// square of Block×Block pixels, erased to zero at a place drawn for that
// image, and then gets Gaussian noise of standard deviation Noise added to
// every pixel, the erased ones too (the result clipped to [0, 1]). Labels are kept. What each image
// loses is drawn from a ChaCha8 stream keyed by Seed, the part's name and
// the image's index, so the same data set, part and Seed always give the
// same images. An image whose erased square covers the strokes that tell
// its class apart is ambiguous to every model alike, so the errors of an
// ensemble trained on it are correlated, as on data harder than the one it
// was made from.
type Hardening struct {
	Block int     `json:"block"`
	Noise float64 `json:"noise"`
	Seed  uint64  `json:"seed"`
}

// Validate checks the hardening against images of shape s.
func (h Hardening) Validate(s Shape) error {
	if h.Block < 0 || h.Block > min(s.Height, s.Width) {
		return fmt.Errorf("%w: an erased square of %d pixels in %v images", ErrInvalid, h.Block, s)
	}
	if !(h.Noise >= 0 && h.Noise <= 1) {
		return fmt.Errorf("%w: pixel noise %v, want 0 to 1", ErrInvalid, h.Noise)
	}
	return nil
}

// Apply returns a hardened copy of d; part names it ("train", "test"), so
// the two parts of a split draw different squares for the same index.
func (h Hardening) Apply(d *Dataset, part string) (*Dataset, error) {
	if err := h.Validate(d.Shape); err != nil {
		return nil, err
	}
	out := &Dataset{X: make([]float32, len(d.X)), Y: append([]int(nil), d.Y...), Shape: d.Shape, Classes: d.Classes}
	copy(out.X, d.X)
	hs, ws, c := d.Shape.Height, d.Shape.Width, d.Shape.Channels
	for i := range d.Len() {
		r := h.rand(part, i)
		x := out.Row(i)
		if h.Block > 0 {
			top, left := r.IntN(hs-h.Block+1), r.IntN(ws-h.Block+1)
			for y := top; y < top+h.Block; y++ {
				for xx := left; xx < left+h.Block; xx++ {
					for ch := range c {
						x[(y*ws+xx)*c+ch] = 0
					}
				}
			}
		}
		if h.Noise > 0 {
			for j, v := range x {
				x[j] = min(1, max(0, v+float32(r.NormFloat64()*h.Noise)))
			}
		}
	}
	return out, nil
}

// ApplySplit hardens both parts of s.
func (h Hardening) ApplySplit(s *Split) (*Split, error) {
	train, err := h.Apply(s.Train, "train")
	if err != nil {
		return nil, err
	}
	test, err := h.Apply(s.Test, "test")
	if err != nil {
		return nil, err
	}
	return &Split{Train: train, Test: test}, nil
}

// rand is the stream of image i of part.
func (h Hardening) rand(part string, i int) *rand.Rand {
	b := binary.LittleEndian.AppendUint64(nil, h.Seed)
	b = binary.LittleEndian.AppendUint64(b, uint64(i))
	b = append(b, "nzc/ml/data.Hardening/"+part...)
	return rand.New(rand.NewChaCha8(sha256.Sum256(b)))
}
