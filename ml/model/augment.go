package model

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/nzcfed/nzc/ml/data"
)

// Augment is a random distortion of an example, the "strong" view of
// consistency training: a network should give a distorted example the class
// it gives the original. For images (height and width above 1) it applies,
// in order, a random affine map (rotation, scaling, translation) composed
// with a random elastic displacement (bilinear sampling, zero outside), a
// cutout (a square of zeros at a random place) and additive noise; for
// other data, the noise only.
type Augment struct {
	Rotate float64 `json:"rotate,omitempty"` // largest rotation, degrees
	Scale  float64 `json:"scale,omitempty"`  // largest relative change of size, in [0, 0.5]
	Shift  float64 `json:"shift,omitempty"`  // largest translation, pixels
	Cutout int     `json:"cutout,omitempty"` // side of the zeroed square, pixels
	// Noise is the standard deviation of Gaussian noise added to every
	// feature.
	Noise float64 `json:"noise,omitempty"`
	// Elastic is the root-mean-square length, in pixels, of an elastic
	// distortion's displacements (Simard, Steinkraus and Platt 2003): every
	// pixel reads its input from a point moved by a smooth random field,
	// white Gaussian noise blurred by a Gaussian of ElasticSmooth pixels,
	// so nearby strokes bend together the way handwriting varies. 0: off.
	Elastic float64 `json:"elastic,omitempty"`
	// ElasticSmooth is the blur's standard deviation in pixels (how far
	// apart two points must be to move independently); 0 means 4.
	ElasticSmooth float64 `json:"elastic_smooth,omitempty"`
}

// defaultElasticSmooth is ElasticSmooth's value when it is 0: Simard et
// al.'s σ for 28×28 digits.
const defaultElasticSmooth = 4

// Validate checks the settings.
func (a Augment) Validate() error {
	switch {
	case !(a.Rotate >= 0 && a.Rotate <= 180):
		return fmt.Errorf("%w: rotation %v must be in [0,180] degrees", ErrConfig, a.Rotate)
	case !(a.Scale >= 0 && a.Scale <= 0.5):
		return fmt.Errorf("%w: scale %v must be in [0,0.5]", ErrConfig, a.Scale)
	case !(a.Shift >= 0 && a.Shift <= 64):
		return fmt.Errorf("%w: shift %v must be in [0,64] pixels", ErrConfig, a.Shift)
	case a.Cutout < 0 || a.Cutout > 64:
		return fmt.Errorf("%w: cutout %d must be in [0,64] pixels", ErrConfig, a.Cutout)
	case !(a.Noise >= 0 && a.Noise <= 10):
		return fmt.Errorf("%w: noise %v must be in [0,10]", ErrConfig, a.Noise)
	case !(a.Elastic >= 0 && a.Elastic <= 16):
		return fmt.Errorf("%w: elastic displacement %v must be in [0,16] pixels", ErrConfig, a.Elastic)
	case !(a.ElasticSmooth >= 0 && a.ElasticSmooth <= 16):
		return fmt.Errorf("%w: elastic smoothing %v must be in [0,16] pixels (0: %v)", ErrConfig, a.ElasticSmooth, defaultElasticSmooth)
	}
	return nil
}

// Apply writes a random distortion of src (one example of shape sh) into
// dst, drawing from r. dst and src must not overlap.
func (a Augment) Apply(dst, src []float32, sh data.Shape, r *rand.Rand) {
	image := sh.Height > 1 && sh.Width > 1
	if !image || (a.Rotate == 0 && a.Scale == 0 && a.Shift == 0 && a.Elastic == 0) {
		copy(dst, src)
	} else {
		a.affine(dst, src, sh, r)
	}
	if image && a.Cutout > 0 {
		c := a.Cutout
		y0, x0 := r.IntN(sh.Height)-c/2, r.IntN(sh.Width)-c/2
		for y := max(0, y0); y < min(sh.Height, y0+c); y++ {
			lo, hi := max(0, x0), min(sh.Width, x0+c)
			if lo < hi {
				clear(dst[(y*sh.Width+lo)*sh.Channels : (y*sh.Width+hi)*sh.Channels])
			}
		}
	}
	if a.Noise > 0 {
		for i := range dst {
			dst[i] += float32(a.Noise * r.NormFloat64())
		}
	}
}

// affine samples src through a random rotation, scaling and translation
// about the image's centre and, with Elastic on, a random elastic
// displacement (bilinear, zero outside).
func (a Augment) affine(dst, src []float32, sh data.Shape, r *rand.Rand) {
	uni := func(m float64) float64 { return (2*r.Float64() - 1) * m }
	th := uni(a.Rotate)
	s := 1 + uni(a.Scale)
	ty, tx := uni(a.Shift), uni(a.Shift)
	var field []float64
	if a.Elastic > 0 {
		sigma := a.ElasticSmooth
		if sigma == 0 {
			sigma = defaultElasticSmooth
		}
		field = elasticField(sh.Height, sh.Width, a.Elastic, sigma, r)
	}
	warp(dst, src, sh, th, s, ty, tx, field)
}

// elasticField returns a random displacement field for an h×w image: for
// each pixel its (dy, dx), interleaved. Each component is white Gaussian
// noise convolved with a Gaussian of standard deviation sigma (truncated
// at 3σ, zero beyond the image) and scaled so that, away from the
// borders, its standard deviation is rms/√2: the displacement's
// root-mean-square length is rms.
func elasticField(h, w int, rms, sigma float64, r *rand.Rand) []float64 {
	radius := int(math.Ceil(3 * sigma))
	kernel := make([]float64, 2*radius+1)
	var sum, sq float64
	for i := range kernel {
		d := float64(i - radius)
		kernel[i] = math.Exp(-d * d / (2 * sigma * sigma))
		sum += kernel[i]
	}
	for i := range kernel {
		kernel[i] /= sum
		sq += kernel[i] * kernel[i]
	}
	// A separable kernel's 2-D sum of squares is the 1-D one squared, so
	// the blurred noise's standard deviation is sq.
	gain := rms / math.Sqrt2 / sq
	field := make([]float64, 2*h*w)
	noise := make([]float64, h*w)
	rows := make([]float64, h*w)
	both := make([]float64, h*w)
	for c := range 2 {
		for i := range noise {
			noise[i] = r.NormFloat64()
		}
		blur(rows, noise, kernel, h, w, false)
		blur(both, rows, kernel, h, w, true)
		for i, v := range both {
			field[2*i+c] = gain * v
		}
	}
	return field
}

// blur writes into dst the h×w image src convolved with kernel (odd
// length, centred) along its columns (vertical) or its rows, zero outside
// the image.
func blur(dst, src, kernel []float64, h, w int, vertical bool) {
	radius := len(kernel) / 2
	for y := range h {
		for x := range w {
			v := 0.0
			for k, g := range kernel {
				yy, xx := y, x+k-radius
				if vertical {
					yy, xx = y+k-radius, x
				}
				if yy >= 0 && yy < h && xx >= 0 && xx < w {
					v += g * src[yy*w+xx]
				}
			}
			dst[y*w+x] = v
		}
	}
}

// Warp writes into dst the image src (one example of shape sh) rotated by
// degrees about its centre, scaled by scale and moved by (ty, tx) pixels:
// bilinear sampling, zero outside. dst and src must not overlap.
func Warp(dst, src []float32, sh data.Shape, degrees, scale, ty, tx float64) {
	warp(dst, src, sh, degrees, scale, ty, tx, nil)
}

// warp is Warp where output pixel (y, x), before the affine map, is moved
// by (field[2(yW+x)], field[2(yW+x)+1]) when field is not nil.
func warp(dst, src []float32, sh data.Shape, degrees, scale, ty, tx float64, field []float64) {
	th := degrees * math.Pi / 180
	s := scale
	// Inverse map: output pixel (y, x) reads input at R(-θ)·((y,x)-c-t)/s + c.
	cos, sin := math.Cos(th)/s, math.Sin(th)/s
	H, W, C := sh.Height, sh.Width, sh.Channels
	cy, cx := float64(H-1)/2, float64(W-1)/2
	at := func(y, x, ch int) float64 {
		if y < 0 || y >= H || x < 0 || x >= W {
			return 0
		}
		return float64(src[(y*W+x)*C+ch])
	}
	for y := range H {
		for x := range W {
			dy, dx := float64(y)-cy-ty, float64(x)-cx-tx
			if field != nil {
				dy += field[2*(y*W+x)]
				dx += field[2*(y*W+x)+1]
			}
			sy := cos*dy + sin*dx + cy
			sx := -sin*dy + cos*dx + cx
			y0, x0 := int(math.Floor(sy)), int(math.Floor(sx))
			fy, fx := sy-float64(y0), sx-float64(x0)
			for ch := range C {
				v := (1-fy)*((1-fx)*at(y0, x0, ch)+fx*at(y0, x0+1, ch)) + fy*((1-fx)*at(y0+1, x0, ch)+fx*at(y0+1, x0+1, ch))
				dst[(y*W+x)*C+ch] = float32(v)
			}
		}
	}
}
