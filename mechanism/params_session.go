package mechanism

import (
	"fmt"
	"math/big"
)

// SessionState is what a session keeps between queries: the number of
// queries refused and, for nzc-svt, the threshold noise ρ (drawn at the
// first query; empty before). It is secret — ρ is privacy noise — and must
// be stored only sealed.
type SessionState struct {
	Rho      string `json:"rho,omitempty"` // ρ in decimal; "" before the first query
	Refusals int    `json:"refusals"`
}

// State returns the session's state, to resume it later (ResumeSession).
func (s *svtSession) State() SessionState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := SessionState{Refusals: s.refusals}
	if s.rho != nil {
		st.Rho = s.rho.String()
	}
	return st
}

// Resume reopens a session of valid parameters p with the same ρ and
// refusals. A state that does not parse, or has more refusals than K, is
// an error.
func (d svtDef) Resume(p Params, st SessionState) (Session, error) {
	m, err := d.Open(p)
	if err != nil {
		return nil, err
	}
	s := m.(*svtSession)
	if st.Refusals < 0 || st.Refusals > p.MaxRefusals {
		return nil, fmt.Errorf("%w: a session state with %d refusals, K = %d", ErrBadParams, st.Refusals, p.MaxRefusals)
	}
	s.refusals = st.Refusals
	if st.Rho != "" {
		rho, ok := new(big.Int).SetString(st.Rho, 10)
		if !ok || rho.String() != st.Rho {
			return nil, fmt.Errorf("%w: a session state's ρ %q is not a decimal integer", ErrBadParams, st.Rho)
		}
		s.rho = rho
	}
	return s, nil
}
