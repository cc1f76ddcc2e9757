// Package mechanism holds the privacy core: vote histograms, the aggregation
// mechanisms, secure integer noise, and privacy accounting in Rényi
// differential privacy.
//
// The package is pure: it uses the standard library only, takes randomness
// as an injected Source (crypto/rand.Reader in production) and never reads
// the clock, so the ledger can replay its accounting deterministically.
//
// # Privacy unit
//
// One teacher changes its votes (one patient record touches one teacher).
// Per query the histogram changes by one vote moved between two classes (or
// one vote added or removed): ℓ1 ≤ 2, ℓ2 ≤ √2, ℓ∞ = 1.
//
// # Noise
//
// Votes are integers, so noise is integer: DiscreteLaplace and
// DiscreteGaussian are exact samplers (Canonne, Kamath and Steinke 2020,
// Algorithms 1–3) in rational arithmetic (math/big), driven by uniformly
// random bytes. A float64 parameter is used as the exact dyadic rational it
// denotes (σ² = σ·σ exactly), so the distribution sampled is exactly the
// one the analysis assumes. There is no floating-point noise on any path
// that releases a label.
//
// # Mechanisms and their data-independent costs (per query)
//
//	nzc              argmax(n + c·e_top + Z), the source paper's mechanism,
//	                 computed exactly in math/big (c = 1e100 included).
//	                 Laplace: pure ε = 2(c+1)/b. Gaussian: RDP α(c+1)²/σ².
//	                 With the paper's c ≫ noise the output is the exact
//	                 argmax and these costs are astronomical or +Inf:
//	                 the paper's "ε≈0" is false.
//	lnmax            argmax(n + Lap_Z(b)): pure ε = 2/b.
//	gnmax            argmax(n + N_Z(0, σ²)): RDP α/σ².
//	confident-gnmax  refuse unless max(n) + N_Z(0, σ1²) ≥ T, else GNMax(σ2):
//	                 RDP α/(2σ1²) per query, + α/σ2² when answered.
//	nzc-svt          the exact argmax when a noisy distance to instability
//	                 clears a noisy threshold; a session stops after K
//	                 refusals; its (ε, δ) is fixed when it opens (svt.go).
//
// # The set of mechanisms
//
// Each mechanism is one type implementing Def, registered by Kind
// (registry.go): Params.Validate, LedgerParams, ParseLedgerParams,
// QueryCost, Charge, Preset, ForEnsemble, String and New look the kind up
// and call its Def, so adding a mechanism touches its own file and one
// line of the registry, never these. A mechanism that answers in sessions
// implements SessionDef too; callers ask Kind.Sessions, never a name.
// Register adds a mechanism defined elsewhere; the registry is the
// package's one piece of shared state, and a registered kind is never
// replaced.
//
// Ties in every argmax go to the lowest class index, a rule that does not
// depend on the data. Params.Charge returns the data-independent charge of
// a batch (an RDP Curve, an additive δ, and the sum of pure ε where there
// is one); every value is rounded up and overflow is +Inf, never small.
//
// # Data-dependent analysis
//
// GNMaxDataDependent and ConfidentDataDependent compute PATE 2018's
// data-dependent bounds (Theorem 6), which depend on the raw votes and are
// not private: analysis only. ReleaseSmoothSensitivity publishes them
// properly (PATE 2018, section 4). See QBound for the bound that holds for
// the discrete Gaussian noise sampled here.
package mechanism
