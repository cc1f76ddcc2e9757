package cli

import (
	"github.com/spf13/cobra"

	"github.com/nzcfed/nzc/mechanism"
)

// MechanismFlags are the flags that describe an aggregation mechanism and
// its parameters.
type MechanismFlags struct {
	Mechanism, Noise                                  string
	Scale, Sigma, Constant, Threshold, Sigma1, Sigma2 float64
	DistanceScale                                     float64
	MaxRefusals, Teachers                             int
}

// AddMechanismFlags adds the mechanism flags to cmd: --mechanism (default
// def) and every parameter; teachersHelp is the help of --teachers.
func AddMechanismFlags(cmd *cobra.Command, def, teachersHelp string) *MechanismFlags {
	f := &MechanismFlags{}
	fs := cmd.Flags()
	fs.StringVar(&f.Mechanism, "mechanism", def, "aggregation mechanism: nzc, lnmax, gnmax, confident-gnmax or nzc-svt")
	fs.StringVar(&f.Noise, "noise", "", "noise of nzc: laplace (default) or gaussian")
	fs.Float64Var(&f.Scale, "scale", 0, "discrete Laplace scale b (nzc with laplace noise, lnmax; nzc-svt: threshold noise)")
	fs.Float64Var(&f.Sigma, "sigma", 0, "discrete Gaussian σ (nzc with gaussian noise, gnmax)")
	fs.Float64Var(&f.Constant, "constant", 0, "nzc: the whole number c added to the top vote count (the paper uses 1e100)")
	fs.Float64Var(&f.Threshold, "threshold", 0, "threshold T (confident-gnmax: on the noisy top count; nzc-svt: on the noisy distance to instability)")
	fs.Float64Var(&f.Sigma1, "sigma1", 0, "confident-gnmax: σ of the threshold test")
	fs.Float64Var(&f.Sigma2, "sigma2", 0, "confident-gnmax: σ of the answer")
	fs.IntVar(&f.MaxRefusals, "max-refusals", 0, "nzc-svt: refusals K after which a session stops")
	fs.Float64Var(&f.DistanceScale, "distance-scale", 0, "nzc-svt: Laplace scale on the distance (default 2·K·scale)")
	fs.IntVar(&f.Teachers, "teachers", 0, teachersHelp)
	return f
}

// Params returns the mechanism's parameters as given (nzc's noise defaults
// to Laplace); the class count is left to the caller.
func (f *MechanismFlags) Params() mechanism.Params {
	p := mechanism.Params{
		Mechanism: mechanism.Kind(f.Mechanism), Noise: mechanism.Noise(f.Noise),
		Scale: f.Scale, Sigma: f.Sigma, Constant: f.Constant, Threshold: f.Threshold,
		Sigma1: f.Sigma1, Sigma2: f.Sigma2, MaxRefusals: f.MaxRefusals, DistanceScale: f.DistanceScale,
		Teachers: f.Teachers,
	}
	if p.Mechanism == mechanism.NZC && p.Noise == "" {
		p.Noise = mechanism.NoiseLaplace
	}
	return p
}
