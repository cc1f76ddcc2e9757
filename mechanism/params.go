package mechanism

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ReferenceTeachers is the ensemble size the presets are set for (the
// source paper's and PATE 2018's 250 teachers). Parameters measured in votes
// scale with the ensemble size; see Params.ForEnsemble.
const ReferenceTeachers = 250

// Preset returns the preset parameters of mechanism k for ReferenceTeachers
// teachers (Teachers and Classes unset). Scale them with ForEnsemble.
func Preset(k Kind) (Params, error) {
	d, err := Lookup(k)
	if err != nil {
		return Params{}, err
	}
	return d.Preset(), nil
}

// Presets returns the preset parameters of every mechanism, by name.
func Presets() map[string]Params {
	out := map[string]Params{}
	for _, k := range Kinds() {
		p, _ := Preset(k) // every listed kind is registered
		out[string(k)] = p
	}
	return out
}

// ForEnsemble returns p, whose parameters are set for ReferenceTeachers
// teachers, adapted to an ensemble of k teachers voting on the given number
// of classes. The paper's mechanisms (lnmax, nzc) keep their parameters, as
// the paper did. For gnmax, confident-gnmax and nzc-svt the parameters
// measured in votes (σ, T, σ1, σ2, the distance threshold) scale by k/250,
// so that the mechanism sees the same vote fractions; the privacy cost then
// changes, and is reported as it is. nzc-svt's threshold is rounded down
// (distances are whole numbers of votes). An unknown mechanism's parameters
// are kept, for Validate to name.
func (p Params) ForEnsemble(k, classes int) Params {
	p.Teachers, p.Classes = k, classes
	d, err := Lookup(p.Mechanism)
	if err != nil {
		return p
	}
	return d.ForEnsemble(p, float64(k)/ReferenceTeachers)
}

// String describes the mechanism's parameters in the one format every
// report uses, e.g. "σ=40" or "T=200, σ1=150, σ2=40". Numbers have at most
// four significant digits; the ledger keeps the exact values (LedgerParams).
func (p Params) String() string {
	d, err := Lookup(p.Mechanism)
	if err != nil {
		return string(p.Mechanism)
	}
	return d.Describe(p)
}

// f4 spells x with at most four significant digits, as String does.
func f4(x float64) string { return strconv.FormatFloat(x, 'g', 4, 64) }

// Trim returns p with every parameter its mechanism does not take set to
// zero. A configuration is layered over defaults that are set for another
// mechanism (confident-gnmax's threshold under a gnmax name, say); Trim
// keeps what the named mechanism reads. An unknown mechanism is kept as it
// is, for Validate to name.
func (p Params) Trim() Params {
	keys := ledgerKeys(p)
	if keys == nil {
		return p
	}
	out := Params{Mechanism: p.Mechanism, Teachers: p.Teachers, Classes: p.Classes}
	for _, k := range keys {
		switch dst := out.field(k).(type) {
		case *float64:
			*dst = *p.field(k).(*float64)
		case *int:
			*dst = *p.field(k).(*int)
		case *Noise:
			*dst = *p.field(k).(*Noise)
		}
	}
	return out
}

// field returns a pointer to the field of p that holds the key k: an *int,
// a *float64 or a *Noise; nil for an unknown key.
func (p *Params) field(k string) any {
	switch k {
	case keyClasses:
		return &p.Classes
	case keyTeachers:
		return &p.Teachers
	case keyMaxRefusals:
		return &p.MaxRefusals
	case keyNoise:
		return &p.Noise
	case keyConstant:
		return &p.Constant
	case keyDistanceScale:
		return &p.DistanceScale
	case keyScale:
		return &p.Scale
	case keySigma:
		return &p.Sigma
	case keySigma1:
		return &p.Sigma1
	case keySigma2:
		return &p.Sigma2
	case keyThreshold:
		return &p.Threshold
	}
	return nil
}

// KV is one mechanism parameter as a ledger entry records it: a key and
// its value in the one spelling ParseLedgerParams accepts.
type KV struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// The ledger keys, which are also the configuration keys.
const (
	keyClasses       = "classes"
	keyConstant      = "constant"
	keyDistanceScale = "distance_scale"
	keyMaxRefusals   = "max_refusals"
	keyNoise         = "noise"
	keyScale         = "scale"
	keySigma         = "sigma"
	keySigma1        = "sigma1"
	keySigma2        = "sigma2"
	keyTeachers      = "teachers"
	keyThreshold     = "threshold"
)

// paramKeys are the keys of every parameter but teachers and classes, in
// the order Validate names those a mechanism does not read.
func paramKeys() []string {
	return []string{keyScale, keySigma, keyConstant, keyThreshold, keySigma1, keySigma2, keyDistanceScale, keyNoise, keyMaxRefusals}
}

// ledgerKeys returns the sorted key set of p's mechanism, teachers and
// classes included; nil for an unknown mechanism.
func ledgerKeys(p Params) []string {
	d, err := Lookup(p.Mechanism)
	if err != nil {
		return nil
	}
	ks := append(d.Keys(p), keyClasses, keyTeachers)
	slices.Sort(ks)
	return ks
}

// defaulter is implemented by a Def whose configuration may leave a
// parameter to a default that the ledger spells out (nzc-svt's distance
// scale): withDefaults returns p with the value used.
type defaulter interface {
	withDefaults(p Params) Params
}

func formatFloat(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

// LedgerParams lists p's parameters as a ledger entry records them: every
// parameter of its mechanism, teachers and classes included, sorted by key,
// integers in decimal and other numbers in strconv's shortest 'g' spelling.
// nzc-svt's distance scale is written as the value used (2·K·scale when p
// leaves it zero). p should be valid (Validate).
func (p Params) LedgerParams() []KV {
	keys := ledgerKeys(p)
	if d, err := Lookup(p.Mechanism); err == nil {
		if dd, ok := d.(defaulter); ok {
			p = dd.withDefaults(p)
		}
	}
	out := make([]KV, 0, len(keys))
	for _, k := range keys {
		var v string
		switch f := p.field(k).(type) {
		case *int:
			v = strconv.Itoa(*f)
		case *float64:
			v = formatFloat(*f)
		case *Noise:
			v = string(*f)
		}
		out = append(out, KV{Key: k, Value: v})
	}
	return out
}

// ParseLedgerParams is the inverse of LedgerParams: it rebuilds the
// parameters of mechanism kind from a ledger entry's list and validates
// them. The list must hold exactly the keys of the mechanism, sorted, each
// once, and every value in the one spelling LedgerParams writes (so "40.0",
// "4e1" or "+40" for 40 are refused): a ledger entry has one reading.
func ParseLedgerParams(kind Kind, kvs []KV) (Params, error) {
	d, err := Lookup(kind)
	if err != nil {
		return Params{}, err
	}
	p := Params{Mechanism: kind}
	for _, kv := range kvs {
		if kv.Key == keyNoise {
			p.Noise = Noise(kv.Value)
		}
	}
	keys := ledgerKeys(p)
	got := make([]string, len(kvs))
	for i, kv := range kvs {
		got[i] = kv.Key
	}
	if !slices.Equal(got, keys) {
		return Params{}, &ParamError{Param: "parameters", Value: strings.Join(got, ","),
			Reason: fmt.Sprintf("%s takes exactly the keys %s, sorted, each once", kind, strings.Join(keys, ","))}
	}
	for _, kv := range kvs {
		var err error
		switch f := p.field(kv.Key).(type) {
		case *int:
			*f, err = parseInt(kv)
		case *float64:
			*f, err = parseFloat(kv)
		case *Noise:
			*f = Noise(kv.Value)
		}
		if err != nil {
			return Params{}, err
		}
	}
	if dd, ok := d.(defaulter); ok {
		// A default would give the entry a second reading: the ledger
		// spells out the value used.
		for i, kv := range dd.withDefaults(p).LedgerParams() {
			if kv != kvs[i] {
				return Params{}, &ParamError{Param: kv.Key, Value: kvs[i].Value, Reason: "must be the value used, not 0 for its default"}
			}
		}
	}
	if err := p.Validate(); err != nil {
		return Params{}, err
	}
	return p, nil
}

func parseInt(kv KV) (int, error) {
	n, err := strconv.Atoi(kv.Value)
	if err != nil || strconv.Itoa(n) != kv.Value {
		return 0, &ParamError{Param: kv.Key, Value: kv.Value, Reason: "must be a whole number in decimal, without sign or leading zeros"}
	}
	return n, nil
}

func parseFloat(kv KV) (float64, error) {
	x, err := strconv.ParseFloat(kv.Value, 64)
	if err != nil || formatFloat(x) != kv.Value {
		return 0, &ParamError{Param: kv.Key, Value: kv.Value, Reason: fmt.Sprintf("must be a number in its shortest spelling (%s)", formatFloat(x))}
	}
	return x, nil
}

// BatchResult is what a mechanism released for a batch of queries.
type BatchResult struct {
	// Outcomes has one entry per query; queries not looked at (after a
	// session stopped) are refusals.
	Outcomes []Outcome
	// Processed is how many queries the mechanism looked at (all of them
	// unless a session stopped); Answered and Refused split them.
	Processed, Answered, Refused int
	// Stopped reports that a session used its K refusals before the end of
	// the batch; the queries after it were not looked at.
	Stopped bool
}

// AnswerBatch answers every histogram of a batch with m, in order. A
// Session stops at its K-th refusal: the rest of the
// batch is refused unseen and Stopped is set. An error of m (a bad
// histogram, a failing source) names the query and releases nothing.
func AnswerBatch(m Mechanism, src Source, hs []Histogram) (BatchResult, error) {
	r := BatchResult{Outcomes: make([]Outcome, len(hs))}
	for i := range r.Outcomes {
		r.Outcomes[i] = Refusal()
	}
	for q, h := range hs {
		o, err := m.Answer(src, h)
		if errors.Is(err, ErrSessionExhausted) {
			r.Stopped = true
			break
		}
		if err != nil {
			return BatchResult{}, fmt.Errorf("query %d: %w", q, err)
		}
		r.Outcomes[q] = o
		r.Processed++
		if o.Refused {
			r.Refused++
		} else {
			r.Answered++
		}
	}
	if s, ok := m.(Session); ok && s.Exhausted() {
		r.Stopped = true
	}
	return r, nil
}
