package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/ml/data"
	"github.com/nzcfed/nzc/party/student"
	"github.com/nzcfed/nzc/party/teacher"
	"github.com/nzcfed/nzc/protocol/quicnet"
)

// SVTBurn is what a hospital holding a third of the teachers, all voting
// for the class after the others' choice, costs the honest hospitals under
// nzc-svt over a whole student run: each honest hospital's ε (the largest
// of them) beside one session's ε, at the accounts' δ.
type SVTBurn struct {
	Mechanism string `json:"mechanism"`
	// Teachers are the ensemble's, AdversaryTeachers the adversary's.
	Teachers          int `json:"teachers"`
	AdversaryTeachers int `json:"adversary_teachers"`
	// Queries the student asked, of which Answered were answered, before
	// it stopped (Stopped says why).
	Queries  int    `json:"queries"`
	Answered int    `json:"answered"`
	Stopped  string `json:"stopped,omitempty"`
	// HonestMaxEpsilon is the largest ε an honest hospital spent;
	// SessionEpsilon one session's ε. The bound: HonestMaxEpsilon ≤
	// SessionEpsilon.
	HonestMaxEpsilon float64 `json:"honest_max_epsilon"`
	SessionEpsilon   float64 `json:"session_epsilon"`
}

// agreeVoter votes like a trained ensemble that mostly agrees: for each
// query a class drawn from its pixels, nine in ten of the teachers for it
// and the rest for the class two after. With against, every teacher votes
// for the class after it instead: against the other hospitals.
type agreeVoter struct {
	teachers int
	against  bool
}

func (v agreeVoter) Teachers() int { return v.teachers }
func (v agreeVoter) Classes() int  { return 10 }
func (v agreeVoter) Dim() int      { return mnistShape().Size() }
func (v agreeVoter) Votes(_ context.Context, x []float32) ([][]int, error) {
	dim := v.Dim()
	out := make([][]int, len(x)/dim)
	for q := range out {
		sum := 0.0
		for _, p := range x[q*dim : (q+1)*dim] {
			sum += float64(p)
		}
		c := int(math.Abs(sum)*1000) % 10
		h := make([]int, 10)
		if v.against {
			h[(c+1)%10] = v.teachers
		} else {
			agree := v.teachers * 9 / 10
			h[c], h[(c+2)%10] = agree, v.teachers-agree
		}
		out[q] = h
	}
	return out, nil
}

// runSVTBurn starts a federation under the default session mechanism's
// preset (nzc-svt's) for cfg.Teachers
// whose last hospital votes against the others, lets a student label q,
// and reads the hospitals' ε from the ledger.
func runSVTBurn(ctx context.Context, cfg Config, log *slog.Logger, q *data.Dataset) (SVTBurn, error) {
	p, err := mechanism.Preset(mechanism.DefaultSessionKind())
	if err != nil {
		return SVTBurn{}, err
	}
	p = p.ForEnsemble(cfg.Teachers, 10)
	f, err := startFederation(ctx, cfg, log, nil, func(f *federation) {
		f.mech = p
		f.voter = func(i, n int) teacher.Voter { return agreeVoter{teachers: n, against: i == hospitals-1} }
	})
	if err != nil {
		return SVTBurn{}, fmt.Errorf("start the nzc-svt federation: %w", err)
	}
	defer f.close()
	out := SVTBurn{Mechanism: p.String(), Teachers: cfg.Teachers, AdversaryTeachers: len(f.hospitalNets[hospitals-1]), Queries: q.Len()}
	st, err := f.newStudent(cfg.BatchSize, 1, quicnet.Backoff{Min: 20 * time.Millisecond, Max: 300 * time.Millisecond})
	if err != nil {
		return out, err
	}
	res, err := st.Label(ctx, q, nil)
	if err != nil && !errors.Is(err, student.ErrStopped) {
		return out, fmt.Errorf("student beside the adversarial hospital: %w", err)
	}
	if res != nil {
		out.Answered, out.Stopped = res.Answered, res.Stopped
	}
	cost, err := p.Charge(mechanism.DefaultGrid(), 0, 0)
	if err != nil {
		return out, err
	}
	out.SessionEpsilon = cost.PureEpsilon
	if c, err := cost.RDP.FilterEpsilon(capDelta - cost.Delta); err == nil && !cost.RDP.IsZero() {
		out.SessionEpsilon = min(out.SessionEpsilon, c.Epsilon)
	}
	leader, err := f.leader(ctx)
	if err != nil {
		return out, err
	}
	state := f.machines[slices.Index(f.nodes, leader)].State()
	for _, h := range f.m.ByRole(crypto.RoleHospital)[:hospitals-1] {
		a, ok := state.Account(h.ID)
		if !ok {
			return out, fmt.Errorf("hospital %s has no account", h.ID)
		}
		out.HonestMaxEpsilon = max(out.HonestMaxEpsilon, a.Epsilon)
	}
	return out, nil
}
