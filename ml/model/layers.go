package model

import (
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"

	"github.com/nzcfed/nzc/ml/data"
)

// param is one trainable tensor and its gradient.
type param struct {
	w, g []float32
}

// weights makes a network's parameters in the order its layers hold them:
// drawn from r (normal with the given deviation; zero where it is 0), or
// copied from from, or shared with from (share: the weights are from's,
// read only, and there are no gradients).
type weights struct {
	r     *rand.Rand
	from  []*param
	share bool
	i     int
}

func (wi *weights) next(size int, std float64) param {
	if wi.from != nil {
		src := wi.from[wi.i]
		wi.i++
		if wi.share {
			return param{w: src.w}
		}
		return param{w: slices.Clone(src.w), g: make([]float32, size)}
	}
	p := param{w: make([]float32, size), g: make([]float32, size)}
	if std != 0 {
		for i := range p.w {
			p.w[i] = float32(wi.r.NormFloat64() * std)
		}
	}
	return p
}

// layer is one stage of a network operating on a batch of rows.
// forward keeps what backward needs; backward returns the gradient with
// respect to the layer's input (nil when needDX is false) and fills the
// gradients of the layer's parameters.
type layer interface {
	outSize() int
	forward(x []float32, batch int) []float32
	backward(dy []float32, batch int, needDX bool) []float32
	params() []*param
	flops() int // multiply-adds ×2 per example, forward
}

func grow(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}

// sgemm computes C = op(A)·op(B) + beta·C for row-major matrices. Products
// without transposes and with beta 0 or 1 (every convolution's and every
// dense layer's forward product) go to gemmNN where the processor has its
// kernel; the rest to gonum's BLAS.
func sgemm(tA, tB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if !tA && !tB && (beta == 0 || beta == 1) && hasKernel() {
		if beta == 0 {
			for i := range m {
				clear(c[i*ldc : i*ldc+n])
			}
		}
		gemmNN(m, n, k, a, lda, b, ldb, c, ldc)
		return
	}
	ta, tb := blas.NoTrans, blas.NoTrans
	if tA {
		ta = blas.Trans
	}
	if tB {
		tb = blas.Trans
	}
	gonum.Implementation{}.Sgemm(ta, tb, m, n, k, 1, a, lda, b, ldb, beta, c, ldc)
}

// parallelFor runs fn(lo, hi) over [0, n) split into contiguous chunks, one
// per core, when work (a rough count of operations) makes it worth it.
// Chunks write disjoint outputs, so the result does not depend on scheduling.
func parallelFor(n, work int, fn func(lo, hi int)) {
	p := runtime.GOMAXPROCS(0)
	if p == 1 || n < 2 || work < 1<<16 {
		fn(0, n)
		return
	}
	p = min(p, n)
	var wg sync.WaitGroup
	for i := range p {
		lo, hi := i*n/p, (i+1)*n/p
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(lo, hi)
		}()
	}
	wg.Wait()
}

// dense is a fully connected layer y = x·W + b with W of shape in×out.
type dense struct {
	in, out int
	w, b    param
	x       []float32 // input of the last forward (aliased)
	y, dx   []float32
}

func newDense(in, out int, gain float64, wi *weights) *dense {
	d := &dense{in: in, out: out}
	d.w = wi.next(in*out, gain/math.Sqrt(float64(in)))
	d.b = wi.next(out, 0)
	return d
}

func (d *dense) outSize() int     { return d.out }
func (d *dense) params() []*param { return []*param{&d.w, &d.b} }
func (d *dense) flops() int       { return 2 * d.in * d.out }

func (d *dense) forward(x []float32, batch int) []float32 {
	d.x = x
	d.y = grow(d.y, batch*d.out)
	for i := range batch {
		copy(d.y[i*d.out:(i+1)*d.out], d.b.w)
	}
	sgemm(false, false, batch, d.out, d.in, x, d.in, d.w.w, d.out, 1, d.y, d.out)
	return d.y
}

func (d *dense) backward(dy []float32, batch int, needDX bool) []float32 {
	sgemm(true, false, d.in, d.out, batch, d.x, d.in, dy, d.out, 0, d.w.g, d.out)
	clear(d.b.g)
	for i := range batch {
		row := dy[i*d.out : (i+1)*d.out]
		for j, v := range row {
			d.b.g[j] += v
		}
	}
	if !needDX {
		return nil
	}
	d.dx = grow(d.dx, batch*d.in)
	sgemm(false, true, batch, d.in, d.out, dy, d.out, d.w.w, d.out, 0, d.dx, d.in)
	return d.dx
}

// relu is max(0, x) elementwise.
type relu struct {
	n     int
	y, dx []float32
}

func (l *relu) outSize() int     { return l.n }
func (l *relu) params() []*param { return nil }
func (l *relu) flops() int       { return 0 }

func (l *relu) forward(x []float32, batch int) []float32 {
	l.y = grow(l.y, len(x))
	for i, v := range x {
		l.y[i] = max(v, 0)
	}
	return l.y
}

func (l *relu) backward(dy []float32, batch int, needDX bool) []float32 {
	if !needDX {
		return nil
	}
	l.dx = grow(l.dx, len(dy))
	for i, v := range dy {
		if l.y[i] > 0 {
			l.dx[i] = v
		} else {
			l.dx[i] = 0
		}
	}
	return l.dx
}

// conv is a stride-1 "same" convolution over channel-last (HWC) images,
// computed as one matrix product per batch. With R = batch·H·W output
// pixels and K = k·k·C values per receptive field, the input is unrolled
// into colsᵀ (K×R, im2col transposed) and Yᵀ = W·colsᵀ + b with W of shape
// F×K. Keeping the long dimension R innermost lets the BLAS kernels run on
// long vectors even when F is small. Yᵀ is then transposed back to HWC.
type conv struct {
	in     data.Shape
	f, k   int
	w, b   param
	colsT  []float32 // K×R unrolled input of the last forward
	yT, y  []float32
	dyT    []float32
	dcolsT []float32
	dx     []float32
	gT, wT []float32 // Wᵀ and its gradient, K×F, for the backward products
	rows   int
}

func newConv(in data.Shape, filters, kernel int, wi *weights) *conv {
	c := &conv{in: in, f: filters, k: kernel}
	kk := kernel * kernel * in.Channels
	c.w = wi.next(filters*kk, math.Sqrt(2/float64(kk)))
	c.b = wi.next(filters, 0)
	return c
}

func (c *conv) pixels() int      { return c.in.Height * c.in.Width }
func (c *conv) kdim() int        { return c.k * c.k * c.in.Channels }
func (c *conv) outSize() int     { return c.pixels() * c.f }
func (c *conv) params() []*param { return []*param{&c.w, &c.b} }
func (c *conv) flops() int       { return 2 * c.pixels() * c.kdim() * c.f }

// transpose writes the rows×cols matrix a into b as cols×rows.
func transpose(a []float32, rows, cols int, b []float32) {
	const blk = 32
	parallelFor((rows+blk-1)/blk, rows*cols, func(lo, hi int) {
		for i0 := lo * blk; i0 < min(hi*blk, rows); i0 += blk {
			for j0 := 0; j0 < cols; j0 += blk {
				for i := i0; i < min(i0+blk, rows); i++ {
					for j := j0; j < min(j0+blk, cols); j++ {
						b[j*rows+i] = a[i*cols+j]
					}
				}
			}
		}
	})
}

func (c *conv) forward(x []float32, batch int) []float32 {
	P, K, C, H, W, k := c.pixels(), c.kdim(), c.in.Channels, c.in.Height, c.in.Width, c.k
	pad := k / 2
	inSize := c.in.Size()
	R := batch * P
	c.rows = R
	c.colsT = grow(c.colsT, K*R)
	// Row (ky·k + kx)·C + ch of colsᵀ holds, for every output pixel, the
	// input value at offset (ky, kx) in channel ch.
	parallelFor(K, K*R, func(lo, hi int) {
		for kr := lo; kr < hi; kr++ {
			ch := kr % C
			kx := (kr / C) % k
			ky := kr / (C * k)
			row := c.colsT[kr*R : (kr+1)*R]
			// Output columns lo..hi-1 read inside the image.
			lo, hi := max(0, pad-kx), min(W, W+pad-kx)
			for b := range batch {
				img := x[b*inSize : (b+1)*inSize]
				out := row[b*P : (b+1)*P]
				for oy := range H {
					iy := oy + ky - pad
					o := out[oy*W : (oy+1)*W]
					if iy < 0 || iy >= H || lo >= hi {
						clear(o)
						continue
					}
					clear(o[:lo])
					clear(o[hi:])
					src := img[(iy*W+lo+kx-pad)*C+ch:]
					if C == 1 {
						copy(o[lo:hi], src)
						continue
					}
					dst := o[lo:hi]
					src = src[:(len(dst)-1)*C+1]
					for i := range dst {
						dst[i] = src[i*C]
					}
				}
			}
		}
	})
	c.yT = grow(c.yT, c.f*R)
	for j := range c.f {
		row := c.yT[j*R : (j+1)*R]
		for i := range row {
			row[i] = c.b.w[j]
		}
	}
	sgemm(false, false, c.f, R, K, c.w.w, K, c.colsT, R, 1, c.yT, R)
	c.y = grow(c.y, R*c.f)
	transpose(c.yT, c.f, R, c.y)
	return c.y
}

func (c *conv) backward(dy []float32, batch int, needDX bool) []float32 {
	P, K, C, H, W, k := c.pixels(), c.kdim(), c.in.Channels, c.in.Height, c.in.Width, c.k
	R := c.rows
	c.dyT = grow(c.dyT, c.f*R)
	transpose(dy, R, c.f, c.dyT)
	// dWᵀ = colsᵀ·dY (K×F), a product without transposes, then into W's
	// F×K layout.
	c.gT = grow(c.gT, K*c.f)
	sgemm(false, false, K, c.f, R, c.colsT, R, dy, c.f, 0, c.gT, c.f)
	transpose(c.gT, K, c.f, c.w.g)
	for j := range c.f {
		var s float32
		for _, v := range c.dyT[j*R : (j+1)*R] {
			s += v
		}
		c.b.g[j] = s
	}
	if !needDX {
		return nil
	}
	c.dcolsT = grow(c.dcolsT, K*R)
	c.wT = grow(c.wT, K*c.f)
	transpose(c.w.w, c.f, K, c.wT)
	sgemm(false, false, K, R, c.f, c.wT, c.f, c.dyT, R, 0, c.dcolsT, R)
	inSize := c.in.Size()
	c.dx = grow(c.dx, batch*inSize)
	pad := k / 2
	parallelFor(batch, batch*P*K, func(lo, hi int) {
		for b := lo; b < hi; b++ {
			img := c.dx[b*inSize : (b+1)*inSize]
			clear(img)
			for kr := range K {
				ch := kr % C
				kx := (kr / C) % k
				ky := kr / (C * k)
				src := c.dcolsT[kr*R+b*P : kr*R+(b+1)*P]
				for oy := range H {
					iy := oy + ky - pad
					if iy < 0 || iy >= H {
						continue
					}
					lo, hi := max(0, pad-kx), min(W, W+pad-kx)
					if lo >= hi {
						continue
					}
					s := src[oy*W+lo : oy*W+hi]
					dst := img[(iy*W+lo+kx-pad)*C+ch:]
					dst = dst[:(len(s)-1)*C+1]
					for i, v := range s {
						dst[i*C] += v
					}
				}
			}
		}
	})
	return c.dx
}

// maxPool is 2×2 max pooling with stride 2 over HWC images (odd edges dropped).
type maxPool struct {
	in    data.Shape
	arg   []int32 // index into the input of each output's maximum
	y, dx []float32
}

func (p *maxPool) out() data.Shape {
	return data.Shape{Height: p.in.Height / 2, Width: p.in.Width / 2, Channels: p.in.Channels}
}
func (p *maxPool) outSize() int     { return p.out().Size() }
func (p *maxPool) params() []*param { return nil }
func (p *maxPool) flops() int       { return 0 }

func (p *maxPool) forward(x []float32, batch int) []float32 {
	o := p.out()
	inSize, outSize, C, W := p.in.Size(), o.Size(), p.in.Channels, p.in.Width
	p.y = grow(p.y, batch*outSize)
	if cap(p.arg) < batch*outSize {
		p.arg = make([]int32, batch*outSize)
	}
	p.arg = p.arg[:batch*outSize]
	for b := range batch {
		img := x[b*inSize : (b+1)*inSize]
		for oy := range o.Height {
			for ox := range o.Width {
				base := ((2*oy)*W + 2*ox) * C
				// The window's four pixels, C channels each; ties go to the
				// first in reading order.
				p00, p01 := img[base:base+C], img[base+C:base+2*C]
				p10, p11 := img[base+W*C:base+W*C+C], img[base+(W+1)*C:base+(W+2)*C]
				ys := p.y[b*outSize+(oy*o.Width+ox)*C:][:C]
				args := p.arg[b*outSize+(oy*o.Width+ox)*C:][:C]
				for ch := range C {
					best, v := base+ch, p00[ch]
					if p01[ch] > v {
						best, v = base+C+ch, p01[ch]
					}
					if p10[ch] > v {
						best, v = base+W*C+ch, p10[ch]
					}
					if p11[ch] > v {
						best, v = base+(W+1)*C+ch, p11[ch]
					}
					ys[ch], args[ch] = v, int32(best)
				}
			}
		}
	}
	return p.y
}

func (p *maxPool) backward(dy []float32, batch int, needDX bool) []float32 {
	if !needDX {
		return nil
	}
	inSize, outSize := p.in.Size(), p.out().Size()
	p.dx = grow(p.dx, batch*inSize)
	clear(p.dx)
	for b := range batch {
		for j := range outSize {
			i := b*outSize + j
			p.dx[b*inSize+int(p.arg[i])] += dy[i]
		}
	}
	return p.dx
}
