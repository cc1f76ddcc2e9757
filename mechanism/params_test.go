package mechanism

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestLedgerParamsRoundTrip(t *testing.T) {
	cases := []Params{
		{Mechanism: NZC, Teachers: 250, Classes: 10, Noise: NoiseLaplace, Scale: 1e-10, Constant: 1e100},
		{Mechanism: NZC, Teachers: 3, Classes: 2, Noise: NoiseGaussian, Sigma: 0.5, Constant: 0},
		{Mechanism: LNMax, Teachers: 250, Classes: 10, Scale: 20},
		{Mechanism: GNMax, Teachers: 30, Classes: 0, Sigma: 4.8},
		{Mechanism: ConfidentGNMax, Teachers: 250, Classes: 10, Threshold: 0, Sigma1: 150, Sigma2: 40},
		{Mechanism: NZCSVT, Teachers: 250, Classes: 10, Scale: 2, Threshold: 100, MaxRefusals: 1 << 40, DistanceScale: 4},
	}
	for _, p := range cases {
		t.Run(p.String(), func(t *testing.T) {
			kvs := p.LedgerParams()
			if !slices.IsSortedFunc(kvs, func(a, b KV) int { return strings.Compare(a.Key, b.Key) }) {
				t.Fatalf("keys not sorted: %v", kvs)
			}
			back, err := ParseLedgerParams(p.Mechanism, kvs)
			if err != nil {
				t.Fatalf("ParseLedgerParams(%v): %v", kvs, err)
			}
			if !reflect.DeepEqual(back, p) {
				t.Fatalf("round trip: got %+v, want %+v", back, p)
			}
			if again := back.LedgerParams(); !slices.Equal(again, kvs) {
				t.Fatalf("second listing differs: %v vs %v", again, kvs)
			}
		})
	}
}

func TestLedgerParamsDefaultDistanceScaleSpelledOut(t *testing.T) {
	p := Params{Mechanism: NZCSVT, Teachers: 10, Scale: 0.5, Threshold: 4, MaxRefusals: 3}
	back, err := ParseLedgerParams(NZCSVT, p.LedgerParams())
	if err != nil {
		t.Fatal(err)
	}
	if back.DistanceScale != 3 {
		t.Fatalf("distance scale %v, want 2·K·scale = 3", back.DistanceScale)
	}
	a, _ := p.Charge(DefaultGrid(), 0, 0)
	b, _ := back.Charge(DefaultGrid(), 0, 0)
	if !slices.Equal(a.RDP.Values(), b.RDP.Values()) || a.Delta != b.Delta {
		t.Fatal("the spelled-out distance scale changes the session's cost")
	}
}

func TestParseLedgerParamsRefuses(t *testing.T) {
	good := Params{Mechanism: GNMax, Teachers: 250, Classes: 10, Sigma: 40}.LedgerParams()
	with := func(key, value string) []KV {
		out := slices.Clone(good)
		for i := range out {
			if out[i].Key == key {
				out[i].Value = value
			}
		}
		return out
	}
	cases := []struct {
		name string
		kind Kind
		kvs  []KV
		want string
	}{
		{"unknown mechanism", "median", good, "mechanism"},
		{"missing teachers", GNMax, []KV{{"classes", "10"}, {"sigma", "40"}}, "parameters"},
		{"missing classes", GNMax, []KV{{"sigma", "40"}, {"teachers", "250"}}, "parameters"},
		{"unknown key", GNMax, append(slices.Clone(good), KV{"zeta", "1"}), "parameters"},
		{"repeated key", GNMax, []KV{{"classes", "10"}, {"sigma", "40"}, {"sigma", "40"}, {"teachers", "250"}}, "parameters"},
		{"unsorted", GNMax, []KV{{"sigma", "40"}, {"classes", "10"}, {"teachers", "250"}}, "parameters"},
		{"another mechanism's key", GNMax, []KV{{"classes", "10"}, {"scale", "40"}, {"teachers", "250"}}, "parameters"},
		{"trailing zero", GNMax, with("sigma", "40.0"), "sigma"},
		{"exponent", GNMax, with("sigma", "4e1"), "sigma"},
		{"plus sign", GNMax, with("sigma", "+40"), "sigma"},
		{"hex float", GNMax, with("sigma", "0x1.4p5"), "sigma"},
		{"NaN", GNMax, with("sigma", "NaN"), "sigma"},
		{"infinite", GNMax, with("sigma", "+Inf"), "sigma"},
		{"zero sigma", GNMax, with("sigma", "0"), "sigma"},
		{"leading zero teachers", GNMax, with("teachers", "0250"), "teachers"},
		{"float teachers", GNMax, with("teachers", "250.0"), "teachers"},
		{"zero teachers", GNMax, with("teachers", "0"), "teachers"},
		{"negative classes", GNMax, with("classes", "-1"), "classes"},
		{"fractional nzc constant", NZC, []KV{{"classes", "10"}, {"constant", "0.5"}, {"noise", "laplace"}, {"scale", "1"}, {"teachers", "3"}}, "constant"},
		{"bad noise", NZC, []KV{{"classes", "10"}, {"constant", "1"}, {"noise", "uniform"}, {"scale", "1"}, {"teachers", "3"}}, "noise"},
		{"gaussian nzc with scale", NZC, []KV{{"classes", "10"}, {"constant", "1"}, {"noise", "gaussian"}, {"scale", "1"}, {"teachers", "3"}}, "parameters"},
		{"svt default distance scale", NZCSVT, []KV{{"classes", "10"}, {"distance_scale", "0"}, {"max_refusals", "2"}, {"scale", "1"}, {"teachers", "3"}, {"threshold", "1"}}, "distance_scale"},
		{"svt zero K", NZCSVT, []KV{{"classes", "10"}, {"distance_scale", "4"}, {"max_refusals", "0"}, {"scale", "1"}, {"teachers", "3"}, {"threshold", "1"}}, "max-refusals"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseLedgerParams(c.kind, c.kvs)
			if !errors.Is(err, ErrBadParams) {
				t.Fatalf("got %v, want ErrBadParams", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q does not name %q", err, c.want)
			}
		})
	}
}

func FuzzParseLedgerParams(f *testing.F) {
	for _, p := range Presets() {
		p = p.ForEnsemble(250, 10)
		var b strings.Builder
		for _, kv := range p.LedgerParams() {
			b.WriteString(kv.Key + "=" + kv.Value + ";")
		}
		f.Add(string(p.Mechanism), b.String())
	}
	f.Fuzz(func(t *testing.T, kind, list string) {
		var kvs []KV
		for _, item := range strings.Split(list, ";") {
			if k, v, ok := strings.Cut(item, "="); ok {
				kvs = append(kvs, KV{Key: k, Value: v})
			}
		}
		p, err := ParseLedgerParams(Kind(kind), kvs)
		if err != nil {
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("accepted invalid parameters %+v: %v", p, err)
		}
		// One reading: an accepted list is exactly the canonical listing.
		if got := p.LedgerParams(); !slices.Equal(got, kvs) {
			t.Fatalf("accepted %v, whose canonical listing is %v", kvs, got)
		}
	})
}

func TestPresetsAndEnsemble(t *testing.T) {
	for _, k := range Kinds() {
		p, err := Preset(k)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{1, 30, 250, 2500} {
			q := p.ForEnsemble(n, 10)
			if err := q.Validate(); err != nil {
				t.Errorf("%s for %d teachers: %v", k, n, err)
			}
			if q.String() == "" || q.String() == string(k) {
				t.Errorf("%s: no description", k)
			}
		}
	}
	if _, err := Preset("median"); !errors.Is(err, ErrBadParams) {
		t.Fatalf("unknown preset: %v", err)
	}
	g := Params{Mechanism: GNMax, Sigma: 40}.ForEnsemble(125, 10)
	if g.Sigma != 20 || g.Teachers != 125 || g.Classes != 10 {
		t.Fatalf("gnmax for 125 teachers: %+v", g)
	}
	s := Params{Mechanism: NZCSVT, Scale: 2, Threshold: 100, MaxRefusals: 2}.ForEnsemble(30, 10)
	if s.Threshold != 12 {
		t.Fatalf("svt threshold for 30 teachers: %v, want ⌊100·30/250⌋ = 12", s.Threshold)
	}
	if got := (Params{Mechanism: ConfidentGNMax, Threshold: 200, Sigma1: 150, Sigma2: 40}).String(); got != "T=200, σ1=150, σ2=40" {
		t.Fatalf("String: %q", got)
	}
}

// countingSession wraps a session to count the queries it is shown.
type countingMech struct {
	Mechanism
	seen int
}

func (c *countingMech) Answer(src Source, h Histogram) (Outcome, error) {
	c.seen++
	return c.Mechanism.Answer(src, h)
}

func TestAnswerBatch(t *testing.T) {
	unstable := Histogram{5, 5} // distance 0: always refused by a session with T ≥ 0 and tiny noise
	stable := Histogram{10, 0}
	t.Run("per-query", func(t *testing.T) {
		m, err := New(Params{Mechanism: GNMax, Teachers: 10, Sigma: 1e-3})
		if err != nil {
			t.Fatal(err)
		}
		r, err := AnswerBatch(m, seeded(1), []Histogram{stable, stable, {0, 10}})
		if err != nil {
			t.Fatal(err)
		}
		if r.Processed != 3 || r.Answered != 3 || r.Refused != 0 || r.Stopped || r.Outcomes[2].Label != 1 {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("session stops", func(t *testing.T) {
		s, err := Open(Params{Mechanism: NZCSVT, Teachers: 10, Scale: 1e-3, DistanceScale: 1e-3, Threshold: 3, MaxRefusals: 2})
		if err != nil {
			t.Fatal(err)
		}
		c := &countingMech{Mechanism: s}
		r, err := AnswerBatch(c, seeded(2), []Histogram{stable, unstable, unstable, stable, unstable})
		if err != nil {
			t.Fatal(err)
		}
		if r.Processed != 3 || r.Answered != 1 || r.Refused != 2 || !r.Stopped {
			t.Fatalf("%+v", r)
		}
		if !r.Outcomes[3].Refused || r.Outcomes[3].Label != -1 || !r.Outcomes[4].Refused {
			t.Fatalf("queries after the stop must be refusals: %+v", r.Outcomes)
		}
		if c.seen != 4 { // the fourth call returns ErrSessionExhausted and looks at nothing
			t.Fatalf("the session was asked %d times, want 4", c.seen)
		}
	})
	t.Run("bad histogram", func(t *testing.T) {
		m, _ := New(Params{Mechanism: GNMax, Teachers: 10, Sigma: 1})
		if _, err := AnswerBatch(m, seeded(3), []Histogram{stable, {11, 0}}); !errors.Is(err, ErrTooManyVotes) || !strings.Contains(err.Error(), "query 1") {
			t.Fatalf("got %v", err)
		}
	})
}

func TestTrim(t *testing.T) {
	layered := Params{Mechanism: GNMax, Teachers: 5, Sigma: 2, Threshold: 200, Sigma1: 150, Sigma2: 40}
	if got, want := layered.Trim(), (Params{Mechanism: GNMax, Teachers: 5, Sigma: 2}); got != want {
		t.Fatalf("Trim: %+v, want %+v", got, want)
	}
	svt := Params{Mechanism: NZCSVT, Scale: 1, Sigma1: 150, MaxRefusals: 2, DistanceScale: 3, Threshold: 4}
	if got := svt.Trim(); got.Sigma1 != 0 || got.Scale != 1 || got.DistanceScale != 3 || got.MaxRefusals != 2 || got.Threshold != 4 {
		t.Fatalf("Trim: %+v", got)
	}
	if got := (Params{Mechanism: "median", Sigma: 1}).Trim(); got.Sigma != 1 {
		t.Fatal("Trim changed an unknown mechanism")
	}
}

// A resumed session answers exactly as the session it was saved from.
func TestSessionResumes(t *testing.T) {
	p := Params{Mechanism: NZCSVT, Teachers: 10, Scale: 1, Threshold: 2, MaxRefusals: 20}
	hs := []Histogram{{10, 0}, {5, 5}, {6, 4}, {7, 3}, {5, 5}, {9, 1}, {4, 6}, {5, 5}}
	a, _ := Open(p)
	src := seeded(5)
	if _, err := AnswerBatch(a, src, hs[:3]); err != nil {
		t.Fatal(err)
	}
	st := a.State()
	if st.Rho == "" {
		t.Fatal("no ρ after three queries")
	}
	b, err := ResumeSession(p, st)
	if err != nil {
		t.Fatal(err)
	}
	src2 := *src // the same noise for both from here on
	ra, _ := AnswerBatch(a, src, hs[3:])
	rb, _ := AnswerBatch(b, &src2, hs[3:])
	if !reflect.DeepEqual(ra, rb) || a.State() != b.State() {
		t.Fatalf("resumed session differs: %+v vs %+v", ra, rb)
	}
	for _, bad := range []SessionState{{Rho: "1.5"}, {Rho: "007"}, {Refusals: 21}, {Refusals: -1}} {
		if _, err := ResumeSession(p, bad); !errors.Is(err, ErrBadParams) {
			t.Errorf("state %+v: %v", bad, err)
		}
	}
}
