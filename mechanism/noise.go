package mechanism

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"math/bits"
)

// Source is where every sampler draws its randomness from: crypto/rand.Reader
// in production, a seeded *rand.ChaCha8 (math/rand/v2) in tests. The samplers
// consume uniformly random bytes only; they never use floating point.
type Source interface {
	Read(p []byte) (n int, err error)
}

// ErrSource reports that the random source failed. Nothing is released when
// it does.
var ErrSource = errors.New("mechanism: the random source failed; check the system's randomness and retry")

// ErrBadNoise reports a noise parameter that is not a finite positive number.
var ErrBadNoise = errors.New("mechanism: a noise scale must be a finite number greater than 0")

// rng buffers a Source and hands out uniform words and bits.
type rng struct {
	src  Source
	buf  [128]byte
	pos  int
	word uint64 // spare random bits for bit()
	left int
}

func newRNG(src Source) *rng { return &rng{src: src, pos: len(rng{}.buf)} }

func (r *rng) fill() error {
	if _, err := io.ReadFull(r.src, r.buf[:]); err != nil {
		return fmt.Errorf("%w: %v", ErrSource, err)
	}
	r.pos = 0
	return nil
}

func (r *rng) uint64() (uint64, error) {
	if r.pos+8 > len(r.buf) {
		if err := r.fill(); err != nil {
			return 0, err
		}
	}
	v := binary.LittleEndian.Uint64(r.buf[r.pos:])
	r.pos += 8
	return v, nil
}

func (r *rng) bit() (bool, error) {
	if r.left == 0 {
		w, err := r.uint64()
		if err != nil {
			return false, err
		}
		r.word, r.left = w, 64
	}
	b := r.word&1 == 1
	r.word >>= 1
	r.left--
	return b, nil
}

// uniform64 returns a uniform integer in [0, n), n > 0, by masked rejection.
func (r *rng) uniform64(n uint64) (uint64, error) {
	if n == 1 {
		return 0, nil
	}
	mask := uint64(1)<<bits.Len64(n-1) - 1
	if mask == 0 {
		mask = math.MaxUint64
	}
	for {
		v, err := r.uint64()
		if err != nil {
			return 0, err
		}
		if v &= mask; v < n {
			return v, nil
		}
	}
}

// sampler holds the scratch space of the exact samplers. It is not safe for
// concurrent use; every answer makes its own.
type sampler struct {
	r *rng
	// scratch, one set per function so that nested calls do not clash
	uni              big.Int
	bdKD             big.Int
	lapU, lapX, lapV big.Int
	gNum             big.Int
	one              big.Int // always 1; never modified
}

func newSampler(src Source) *sampler {
	s := &sampler{r: newRNG(src)}
	s.one.SetInt64(1)
	return s
}

// uniform sets dst to a uniform integer in [0, n), n > 0.
func (s *sampler) uniform(dst, n *big.Int) error {
	if n.IsUint64() {
		v, err := s.r.uniform64(n.Uint64())
		if err != nil {
			return err
		}
		dst.SetUint64(v)
		return nil
	}
	bl := n.BitLen()
	nbytes := (bl + 7) / 8
	b := make([]byte, nbytes)
	for {
		for i := 0; i < nbytes; i += 8 {
			w, err := s.r.uint64()
			if err != nil {
				return err
			}
			var tmp [8]byte
			binary.BigEndian.PutUint64(tmp[:], w)
			copy(b[i:], tmp[:])
		}
		if extra := nbytes*8 - bl; extra > 0 {
			b[0] &= byte(0xff >> extra)
		}
		dst.SetBytes(b)
		if dst.Cmp(n) < 0 {
			return nil
		}
	}
}

// bernoulli returns true with probability num/den, 0 ≤ num ≤ den, den > 0.
func (s *sampler) bernoulli(num, den *big.Int) (bool, error) {
	if den.IsUint64() {
		u, err := s.r.uniform64(den.Uint64())
		return u < num.Uint64(), err
	}
	if err := s.uniform(&s.uni, den); err != nil {
		return false, err
	}
	return s.uni.Cmp(num) < 0, nil
}

// bernoulliExp64 is bernoulliExp for γ = num/den ≤ 1 with small operands.
func (s *sampler) bernoulliExp64(num, den uint64) (bool, error) {
	// Canonne, Kamath, Steinke 2020, Algorithm 1, γ ∈ [0, 1]:
	// K ← 1; while Bernoulli(γ/K) { K ← K+1 }; return K odd.
	k := uint64(1)
	for {
		hi, kd := bits.Mul64(den, k)
		if hi != 0 {
			return s.bernoulliExpBig(new(big.Int).SetUint64(num), new(big.Int).SetUint64(den), k)
		}
		u, err := s.r.uniform64(kd)
		if err != nil {
			return false, err
		}
		if u >= num {
			return k%2 == 1, nil
		}
		k++
	}
}

// bernoulliExpBig continues Algorithm 1 from K = k with big operands.
func (s *sampler) bernoulliExpBig(num, den *big.Int, k uint64) (bool, error) {
	var kk big.Int
	kk.SetUint64(k)
	for {
		s.bdKD.Mul(den, &kk)
		a, err := s.bernoulli(num, &s.bdKD)
		if err != nil {
			return false, err
		}
		if !a {
			return kk.Bit(0) == 1, nil
		}
		kk.Add(&kk, &s.one)
	}
}

// bernoulliExp returns true with probability exp(−num/den), num ≥ 0, den > 0,
// exactly (Canonne, Kamath, Steinke 2020, Algorithm 1).
func (s *sampler) bernoulliExp(num, den *big.Int) (bool, error) {
	if num.Cmp(den) <= 0 {
		if num.IsUint64() && den.IsUint64() {
			return s.bernoulliExp64(num.Uint64(), den.Uint64())
		}
		return s.bernoulliExpBig(num, den, 1)
	}
	// γ > 1: exp(−γ) = exp(−1)^⌊γ⌋ · exp(−(γ−⌊γ⌋)).
	var q, r big.Int
	q.QuoRem(num, den, &r)
	if q.IsUint64() {
		for i := q.Uint64(); i > 0; i-- {
			ok, err := s.bernoulliExp64(1, 1)
			if err != nil || !ok {
				return false, err
			}
		}
	} else {
		for q.Sign() > 0 {
			ok, err := s.bernoulliExp64(1, 1)
			if err != nil || !ok {
				return false, err
			}
			q.Sub(&q, &s.one)
		}
	}
	if r.IsUint64() && den.IsUint64() {
		return s.bernoulliExp64(r.Uint64(), den.Uint64())
	}
	return s.bernoulliExpBig(&r, den, 1)
}

// geometricExp1 returns V ≥ 0 with P[V = v] = (1 − e^{−1}) e^{−v}.
func (s *sampler) geometricExp1() (uint64, error) {
	var v uint64
	for {
		ok, err := s.bernoulliExp64(1, 1)
		if err != nil {
			return 0, err
		}
		if !ok {
			return v, nil
		}
		v++
	}
}

// laplace sets dst to a sample of the discrete Laplace distribution with
// scale t/sc: P[X = x] ∝ exp(−|x|·sc/t) (Canonne, Kamath, Steinke 2020,
// Algorithm 2).
func (s *sampler) laplace(dst, t, sc *big.Int) error {
	for {
		if err := s.uniform(&s.lapU, t); err != nil {
			return err
		}
		d, err := s.bernoulliExp(&s.lapU, t)
		if err != nil {
			return err
		}
		if !d {
			continue
		}
		v, err := s.geometricExp1()
		if err != nil {
			return err
		}
		// X = U + t·V; Y = ⌊X/sc⌋
		s.lapV.SetUint64(v)
		s.lapX.Mul(t, &s.lapV)
		s.lapX.Add(&s.lapX, &s.lapU)
		dst.Quo(&s.lapX, sc)
		neg, err := s.r.bit()
		if err != nil {
			return err
		}
		if neg && dst.Sign() == 0 {
			continue
		}
		if neg {
			dst.Neg(dst)
		}
		return nil
	}
}

// gaussian sets dst to a sample of the discrete Gaussian N_Z(0, σ²) with
// σ² = p/q, using t = ⌊σ⌋+1 (Canonne, Kamath, Steinke 2020, Algorithm 3):
// draw Y from the discrete Laplace of scale t and accept it with probability
// exp(−(|Y| − σ²/t)²/(2σ²)) = exp(−(|Y|·q·t − p)² / (2·p·q·t²)).
func (s *sampler) gaussian(dst *big.Int, g *DiscreteGaussian) error {
	for {
		if err := s.laplace(dst, g.t, &s.one); err != nil {
			return err
		}
		s.gNum.Abs(dst)
		s.gNum.Mul(&s.gNum, g.qt)
		s.gNum.Sub(&s.gNum, g.p)
		s.gNum.Mul(&s.gNum, &s.gNum)
		ok, err := s.bernoulliExp(&s.gNum, g.den)
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
	}
}

// exactRat returns x as an exact fraction num/den in lowest terms. Every
// finite float64 is a dyadic rational, so nothing is rounded.
func exactRat(x float64) (num, den *big.Int) {
	r := new(big.Rat).SetFloat64(x)
	return new(big.Int).Set(r.Num()), new(big.Int).Set(r.Denom())
}

func checkScale(x float64) error {
	if math.IsNaN(x) || math.IsInf(x, 0) || x <= 0 {
		return fmt.Errorf("%w (got %v)", ErrBadNoise, x)
	}
	return nil
}

// DiscreteLaplace is the discrete Laplace distribution on the integers with
// scale b: P[X = x] = (1 − e^{−1/b})/(1 + e^{−1/b}) · e^{−|x|/b}. The scale is
// the float64 given, taken as the exact rational it denotes (every finite
// float64 is one), so the distribution sampled is exactly the one the
// privacy analysis assumes: adding it to an integer query of ℓ1
// sensitivity Δ is (Δ/b)-DP.
type DiscreteLaplace struct {
	scale float64
	t, s  *big.Int // b = t/s in lowest terms
}

// NewDiscreteLaplace returns the discrete Laplace distribution of scale b.
func NewDiscreteLaplace(b float64) (DiscreteLaplace, error) {
	if err := checkScale(b); err != nil {
		return DiscreteLaplace{}, err
	}
	t, s := exactRat(b)
	return DiscreteLaplace{scale: b, t: t, s: s}, nil
}

// Scale returns b.
func (d DiscreteLaplace) Scale() float64 { return d.scale }

// Sample draws one value from src.
func (d DiscreteLaplace) Sample(src Source) (*big.Int, error) {
	out := new(big.Int)
	return out, newSampler(src).laplace(out, d.t, d.s)
}

func (d DiscreteLaplace) sampleInto(s *sampler, dst *big.Int) error { return s.laplace(dst, d.t, d.s) }

// DiscreteGaussian is the discrete Gaussian N_Z(0, σ²) on the integers:
// P[X = x] ∝ exp(−x²/(2σ²)). σ is the float64 given and σ² is computed from it
// exactly as a rational (σ·σ of the dyadic rational σ), so the distribution
// sampled is exactly N_Z(0, σ²) for that σ, the parameter the privacy analysis
// uses: adding it to an integer query of ℓ2 sensitivity Δ is
// (α, αΔ²/(2σ²))-RDP (Canonne, Kamath, Steinke 2020, Theorem 15).
type DiscreteGaussian struct {
	sigma float64
	p, q  *big.Int // σ² = p/q
	t     *big.Int // ⌊σ⌋ + 1
	qt    *big.Int // q·t
	den   *big.Int // 2·p·q·t²
}

// NewDiscreteGaussian returns N_Z(0, σ²).
func NewDiscreteGaussian(sigma float64) (DiscreteGaussian, error) {
	if err := checkScale(sigma); err != nil {
		return DiscreteGaussian{}, err
	}
	r := new(big.Rat).SetFloat64(sigma)
	r2 := new(big.Rat).Mul(r, r)
	p, q := new(big.Int).Set(r2.Num()), new(big.Int).Set(r2.Denom())
	t := new(big.Int).Quo(r.Num(), r.Denom())
	t.Add(t, big.NewInt(1))
	qt := new(big.Int).Mul(q, t)
	den := new(big.Int).Mul(p, qt)
	den.Mul(den, t)
	den.Lsh(den, 1)
	return DiscreteGaussian{sigma: sigma, p: p, q: q, t: t, qt: qt, den: den}, nil
}

// Sigma returns σ.
func (d DiscreteGaussian) Sigma() float64 { return d.sigma }

// Sample draws one value from src.
func (d DiscreteGaussian) Sample(src Source) (*big.Int, error) {
	out := new(big.Int)
	return out, newSampler(src).gaussian(out, &d)
}

func (d DiscreteGaussian) sampleInto(s *sampler, dst *big.Int) error { return s.gaussian(dst, &d) }
