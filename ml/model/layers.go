package model

import (
	"math"
	"math/rand/v2"
	"runtime"
	"sync"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"

	"github.com/nzcfed/nzc/ml/data"
)

// param is one trainable tensor and its gradient.
type param struct {
	w, g []float32
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

// sgemm computes C = alpha·op(A)·op(B) + beta·C for row-major matrices.
func sgemm(tA, tB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
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

func newDense(in, out int, gain float64, r *rand.Rand) *dense {
	d := &dense{in: in, out: out}
	d.w = param{w: make([]float32, in*out), g: make([]float32, in*out)}
	d.b = param{w: make([]float32, out), g: make([]float32, out)}
	std := gain / math.Sqrt(float64(in))
	for i := range d.w.w {
		d.w.w[i] = float32(r.NormFloat64() * std)
	}
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
// computed as one matrix product per batch: im2col(x)·W + b, with W of shape
// (k·k·C)×F. Its output is again HWC.
type conv struct {
	in      data.Shape
	f, k    int
	w, b    param
	cols    []float32 // im2col of the last forward input
	y, dcol []float32
	dx      []float32
}

func newConv(in data.Shape, filters, kernel int, r *rand.Rand) *conv {
	c := &conv{in: in, f: filters, k: kernel}
	kk := kernel * kernel * in.Channels
	c.w = param{w: make([]float32, kk*filters), g: make([]float32, kk*filters)}
	c.b = param{w: make([]float32, filters), g: make([]float32, filters)}
	std := math.Sqrt(2 / float64(kk))
	for i := range c.w.w {
		c.w.w[i] = float32(r.NormFloat64() * std)
	}
	return c
}

func (c *conv) pixels() int      { return c.in.Height * c.in.Width }
func (c *conv) kdim() int        { return c.k * c.k * c.in.Channels }
func (c *conv) outSize() int     { return c.pixels() * c.f }
func (c *conv) params() []*param { return []*param{&c.w, &c.b} }
func (c *conv) flops() int       { return 2 * c.pixels() * c.kdim() * c.f }

func (c *conv) forward(x []float32, batch int) []float32 {
	P, K, C, H, W, k := c.pixels(), c.kdim(), c.in.Channels, c.in.Height, c.in.Width, c.k
	pad := k / 2
	inSize := c.in.Size()
	c.cols = grow(c.cols, batch*P*K)
	parallelFor(batch, batch*P*K, func(lo, hi int) {
		for b := lo; b < hi; b++ {
			img := x[b*inSize : (b+1)*inSize]
			for oy := range H {
				for ox := range W {
					row := c.cols[((b*H+oy)*W+ox)*K:][:K]
					for ky := range k {
						iy := oy + ky - pad
						seg := row[ky*k*C : (ky+1)*k*C]
						if iy < 0 || iy >= H {
							clear(seg)
							continue
						}
						for kx := range k {
							ix := ox + kx - pad
							dst := seg[kx*C : (kx+1)*C]
							if ix < 0 || ix >= W {
								clear(dst)
							} else {
								copy(dst, img[(iy*W+ix)*C:(iy*W+ix+1)*C])
							}
						}
					}
				}
			}
		}
	})
	rows := batch * P
	c.y = grow(c.y, rows*c.f)
	for i := range rows {
		copy(c.y[i*c.f:(i+1)*c.f], c.b.w)
	}
	sgemm(false, false, rows, c.f, K, c.cols, K, c.w.w, c.f, 1, c.y, c.f)
	return c.y
}

func (c *conv) backward(dy []float32, batch int, needDX bool) []float32 {
	P, K, C, H, W, k := c.pixels(), c.kdim(), c.in.Channels, c.in.Height, c.in.Width, c.k
	rows := batch * P
	sgemm(true, false, K, c.f, rows, c.cols, K, dy, c.f, 0, c.w.g, c.f)
	clear(c.b.g)
	for i := range rows {
		for j, v := range dy[i*c.f : (i+1)*c.f] {
			c.b.g[j] += v
		}
	}
	if !needDX {
		return nil
	}
	c.dcol = grow(c.dcol, rows*K)
	sgemm(false, true, rows, K, c.f, dy, c.f, c.w.w, c.f, 0, c.dcol, K)
	inSize := c.in.Size()
	c.dx = grow(c.dx, batch*inSize)
	pad := k / 2
	parallelFor(batch, batch*P*K, func(lo, hi int) {
		for b := lo; b < hi; b++ {
			img := c.dx[b*inSize : (b+1)*inSize]
			clear(img)
			for oy := range H {
				for ox := range W {
					row := c.dcol[((b*H+oy)*W+ox)*K:][:K]
					for ky := range k {
						iy := oy + ky - pad
						if iy < 0 || iy >= H {
							continue
						}
						for kx := range k {
							ix := ox + kx - pad
							if ix < 0 || ix >= W {
								continue
							}
							dst := img[(iy*W+ix)*C : (iy*W+ix+1)*C]
							for ch, v := range row[(ky*k+kx)*C : (ky*k+kx+1)*C] {
								dst[ch] += v
							}
						}
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
				for ch := range C {
					best := base + ch
					for _, off := range [3]int{C, W * C, (W + 1) * C} {
						if img[base+ch+off] > img[best] {
							best = base + ch + off
						}
					}
					i := b*outSize + (oy*o.Width+ox)*C + ch
					p.y[i] = img[best]
					p.arg[i] = int32(best)
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
