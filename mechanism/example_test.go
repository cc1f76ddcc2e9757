package mechanism_test

import (
	"fmt"
	"math/rand/v2"

	"github.com/nzcfed/nzc/mechanism"
)

// The data-independent charge of a batch: 100 GNMax answers at σ = 40.
func ExampleParams_Charge() {
	p := mechanism.Params{Mechanism: mechanism.GNMax, Teachers: 250, Sigma: 40}
	ch, err := p.Charge(mechanism.DefaultGrid(), 100, 0)
	if err != nil {
		panic(err)
	}
	conv, _ := ch.Epsilon(1e-5)
	fmt.Printf("ε = %.3f at δ = %g (order %v)\n", conv.Epsilon, conv.Delta, conv.Order)
	// Output: ε = 1.478 at δ = 1e-05 (order 13)
}

// The source paper's mechanism at its own settings: the true cost of one
// answer is 2(c+1)/b = 2e110, not ε≈0.
func ExampleParams_Charge_paper() {
	p := mechanism.Params{Mechanism: mechanism.NZC, Teachers: 250, Noise: mechanism.NoiseLaplace, Scale: 1e-10, Constant: 1e100}
	ch, _ := p.Charge(mechanism.DefaultGrid(), 1, 0)
	fmt.Printf("pure ε = %.3g\n", ch.PureEpsilon)
	// Output: pure ε = 2e+110
}

// An nzc-svt session: its cost is fixed when it opens; stable queries are
// answered with the exact argmax, unstable ones refused, and after K
// refusals the session is exhausted.
func ExampleSession() {
	p := mechanism.Params{Mechanism: mechanism.NZCSVT, Teachers: 250, Scale: 2, Threshold: 60, MaxRefusals: 1, DistanceScale: 5}
	s, err := mechanism.Open(p)
	if err != nil {
		panic(err)
	}
	ch, _ := p.Charge(mechanism.DefaultGrid(), 0, 0)
	fmt.Printf("session: ε = %.2f, δ = %.1e\n", ch.PureEpsilon, ch.Delta)
	src := rand.NewChaCha8([32]byte{1})
	for _, h := range []mechanism.Histogram{{240, 5, 5}, {230, 10, 10}, {120, 125, 5}, {240, 5, 5}} {
		o, err := s.Answer(src, h)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(o)
	}
	// Output:
	// session: ε = 0.90, δ = 3.3e-06
	// 0
	// 0
	// refused
	// mechanism: the nzc-svt session has used all its refusals; open a new session
}
