package model

import (
	"context"
	"fmt"
	"strings"

	"github.com/nzcfed/nzc/ml/data"
)

// Views are the copies of an image a network is asked about besides the
// image itself (test-time augmentation): moved by Shift pixels up, down,
// left and right; turned by ±Rotate degrees; resized by 1±Scale. A
// prediction averaged over them is steadier than one view's: a digit the
// network reads one way only when it sits exactly so is read the way most
// of its views say. Data that are not images have no views but
// themselves.
type Views struct {
	Shift  int     `json:"shift,omitempty"`
	Rotate float64 `json:"rotate,omitempty"`
	Scale  float64 `json:"scale,omitempty"`
}

// Validate checks the settings.
func (v Views) Validate() error {
	switch {
	case v.Shift < 0 || v.Shift > 8:
		return fmt.Errorf("%w: view shift %d, want 0..8 pixels", ErrConfig, v.Shift)
	case !(v.Rotate >= 0 && v.Rotate <= 45):
		return fmt.Errorf("%w: view rotation %v, want 0..45 degrees", ErrConfig, v.Rotate)
	case !(v.Scale >= 0 && v.Scale <= 0.5):
		return fmt.Errorf("%w: view scale %v, want 0..0.5", ErrConfig, v.Scale)
	}
	return nil
}

// String describes the views, for reports: "the image and its copies
// moved by 1 pixel up, down, left and right".
func (v Views) String() string {
	var parts []string
	if v.Shift > 0 {
		parts = append(parts, fmt.Sprintf("moved by %d pixel(s) up, down, left and right", v.Shift))
	}
	if v.Rotate > 0 {
		parts = append(parts, fmt.Sprintf("turned by ±%g°", v.Rotate))
	}
	if v.Scale > 0 {
		parts = append(parts, fmt.Sprintf("resized by 1 ± %g", v.Scale))
	}
	if len(parts) == 0 {
		return "the image itself"
	}
	return "the image and its copies " + strings.Join(parts, "; ")
}

// view is one copy of an image: moved by (dy, dx) pixels, or turned by
// degrees and resized by scale.
type view struct {
	dy, dx         int
	degrees, scale float64
}

// list returns the views of examples of shape sh, the example itself first.
func (v Views) list(sh data.Shape) []view {
	vs := []view{{scale: 1}}
	if sh.Height <= 1 || sh.Width <= 1 {
		return vs
	}
	if d := v.Shift; d > 0 {
		vs = append(vs, view{dy: d, scale: 1}, view{dy: -d, scale: 1}, view{dx: d, scale: 1}, view{dx: -d, scale: 1})
	}
	if r := v.Rotate; r > 0 {
		vs = append(vs, view{degrees: r, scale: 1}, view{degrees: -r, scale: 1})
	}
	if s := v.Scale; s > 0 {
		vs = append(vs, view{scale: 1 + s}, view{scale: 1 - s})
	}
	return vs
}

// Count is the number of views of an example of shape sh, itself included.
func (v Views) Count(sh data.Shape) int { return len(v.list(sh)) }

// ViewProbabilities returns, for each view (the example itself first), the
// class probabilities of every example of d (d.Len()×Classes, row-major).
func (n *Network) ViewProbabilities(ctx context.Context, d *data.Dataset, v Views) ([][]float32, error) {
	if err := v.Validate(); err != nil {
		return nil, err
	}
	if err := n.checkData(d); err != nil {
		return nil, err
	}
	vs := v.list(d.Shape)
	m, dim, sh := d.Len(), d.Dim(), d.Shape
	probs := make([][]float32, len(vs))
	var x []float32
	if len(vs) > 1 {
		x = make([]float32, len(d.X))
	}
	for j, w := range vs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		in := d.X // the image itself
		if w != (view{scale: 1}) {
			for i := range m {
				dst := x[i*dim : (i+1)*dim]
				if w.degrees == 0 && w.scale == 1 {
					translate(dst, d.Row(i), sh, w.dy, w.dx)
				} else {
					Warp(dst, d.Row(i), sh, w.degrees, w.scale, 0, 0)
				}
			}
			in = x
		}
		p, err := n.Probabilities(in)
		if err != nil {
			return nil, err
		}
		probs[j] = p
	}
	return probs, nil
}

// MeanClass returns, for each example, the class whose probability summed
// over probs (one slice per view, as ViewProbabilities returns them) is
// largest (ties go to the lowest class index), and that class's smallest
// probability on any view.
func MeanClass(probs [][]float32, classes int) (class []int, least []float64) {
	if len(probs) == 0 {
		return nil, nil
	}
	m := len(probs[0]) / classes
	class, least = make([]int, m), make([]float64, m)
	for i := range m {
		best, bm := 0, -1.0
		for c := range classes {
			s := 0.0
			for _, p := range probs {
				s += float64(p[i*classes+c])
			}
			if s > bm {
				best, bm = c, s
			}
		}
		lo := 1.0
		for _, p := range probs {
			lo = min(lo, float64(p[i*classes+best]))
		}
		class[i], least[i] = best, lo
	}
	return class, least
}

// AccuracyViews is the fraction of examples of d whose class, averaged over
// their views (MeanClass), is right. With no views it is Accuracy.
func (n *Network) AccuracyViews(ctx context.Context, d *data.Dataset, v Views) (float64, error) {
	if d.Len() == 0 {
		return 0, nil
	}
	probs, err := n.ViewProbabilities(ctx, d, v)
	if err != nil {
		return 0, err
	}
	class, _ := MeanClass(probs, n.spec.Classes)
	ok := 0
	for i, c := range class {
		if c == d.Y[i] {
			ok++
		}
	}
	return float64(ok) / float64(len(class)), nil
}
