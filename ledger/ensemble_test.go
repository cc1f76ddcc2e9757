package ledger

import (
	"bytes"
	"reflect"
	"slices"
	"testing"

	"github.com/nzcfed/nzc/mechanism"
)

// registered is newFed with ensembles registered for h1 (100 teachers) and
// h3 (150) on 10 classes: together the 250 teachers of gnmaxParams.
func registered(t *testing.T) *fed {
	f := newFed(t)
	f.must(&RegisterEnsemble{Hospital: "h1", Version: 1, Teachers: 100, Classes: 10, Timestamp: f.now()}, "admin")
	f.must(&RegisterEnsemble{Hospital: "h3", Version: 1, Teachers: 150, Classes: 10, Timestamp: f.now()}, "admin")
	return f
}

func TestRegisterEnsembleRefusals(t *testing.T) {
	for _, tc := range []struct {
		name   string
		body   *RegisterEnsemble
		signer string
		code   Code
	}{
		{"signed by the hospital", &RegisterEnsemble{Hospital: "h2", Version: 1, Teachers: 50, Classes: 10}, "h2", CodeWrongSigner},
		{"signed by the aggregator", &RegisterEnsemble{Hospital: "h2", Version: 1, Teachers: 50, Classes: 10}, "agg", CodeWrongSigner},
		{"not a hospital", &RegisterEnsemble{Hospital: "s1", Version: 1, Teachers: 50, Classes: 10}, "admin", CodeUnknownHospital},
		{"unknown party", &RegisterEnsemble{Hospital: "h9", Version: 1, Teachers: 50, Classes: 10}, "admin", CodeUnknownHospital},
		{"no teachers", &RegisterEnsemble{Hospital: "h2", Version: 1, Teachers: 0, Classes: 10}, "admin", CodeBadEnsemble},
		{"4,000,000,000 teachers", &RegisterEnsemble{Hospital: "h2", Version: 1, Teachers: 4_000_000_000, Classes: 10}, "admin", CodeBadEnsemble},
		{"one class", &RegisterEnsemble{Hospital: "h2", Version: 1, Teachers: 50, Classes: 1}, "admin", CodeBadEnsemble},
		{"other classes than the federation's", &RegisterEnsemble{Hospital: "h2", Version: 1, Teachers: 50, Classes: 3}, "admin", CodeBadEnsemble},
		{"a version ahead", &RegisterEnsemble{Hospital: "h2", Version: 2, Teachers: 50, Classes: 10}, "admin", CodeStaleEnsemble},
		{"the registered version again", &RegisterEnsemble{Hospital: "h1", Version: 1, Teachers: 90, Classes: 10}, "admin", CodeStaleEnsemble},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := registered(t)
			before := f.st.Ensembles()
			r := f.apply(f.sign(tc.body, tc.signer))
			if r.Status != StatusRefused || r.Code != tc.code {
				t.Fatalf("%s/%s: %s, want %s", r.Status, r.Code, r.Message, tc.code)
			}
			if after := f.st.Ensembles(); !slices.Equal(before, after) {
				t.Fatalf("the refusal changed the ensembles: %v → %v", before, after)
			}
		})
	}
	f := registered(t)
	f.must(&RegisterEnsemble{Hospital: "h1", Version: 2, Teachers: 90, Classes: 10, Timestamp: f.now()}, "admin")
	got := f.st.Ensembles()
	if len(got) != 2 || got[0].Hospital != "h1" || got[0].Teachers != 90 || got[0].Version != 2 || got[1].Teachers != 150 {
		t.Fatalf("ensembles %+v", got)
	}
	restored := restoredCopy(t, f.st)
	if !slices.Equal(restored.Ensembles(), got) {
		t.Fatalf("restored ensembles %+v, want %+v", restored.Ensembles(), got)
	}
}

// A charge records each hospital's registered ensemble size, and the
// ledger holds it to the registrations: a charge stating another size (as
// an aggregator that took a hospital's word would), no size for a
// registered hospital, a size for an unregistered one, or parameters whose
// ensemble is not the registered sum is refused and charges nothing.
func TestChargeStatesTheRegisteredEnsembles(t *testing.T) {
	small := gaussCurve(40, 10)
	sized := func(batch string, hospitals []string, sizes ...uint64) *Charge {
		b := chargeBody(batch, hospitals, small, 10)
		b.Ensembles = sizes
		return b
	}
	for _, tc := range []struct {
		name    string
		body    *Charge
		code    Code
		subject string
	}{
		{"another size", sized("b1", []string{"h1", "h3"}, 100, 151), CodeEnsembleMismatch, "h3"},
		{"a hospital's sizes swapped", sized("b1", []string{"h1", "h3"}, 150, 100), CodeEnsembleMismatch, "h1"},
		{"no sizes for registered hospitals", sized("b1", []string{"h1", "h3"}), CodeEnsembleMismatch, "h1"},
		{"a size for an unregistered hospital", sized("b1", []string{"h1", "h2"}, 100, 150), CodeEnsembleMismatch, "h2"},
		{"parameters of another ensemble", func() *Charge {
			b := sized("b1", []string{"h1", "h3"}, 100, 150)
			b.Params = mechanism.Params{Mechanism: mechanism.GNMax, Teachers: 4000, Classes: 10, Sigma: 40}.LedgerParams()
			return b
		}(), CodeEnsembleMismatch, "b1"},
		{"parameters of other classes", func() *Charge {
			b := sized("b1", []string{"h1", "h3"}, 100, 150)
			b.Params = mechanism.Params{Mechanism: mechanism.GNMax, Teachers: 250, Classes: 3, Sigma: 40}.LedgerParams()
			return b
		}(), CodeEnsembleMismatch, "b1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := registered(t)
			before := f.st.Accounts()
			r := f.apply(f.sign(tc.body, "agg"))
			if r.Status != StatusRefused || r.Code != tc.code || r.Subject != tc.subject {
				t.Fatalf("%s/%s (%s): %s, want %s naming %s", r.Status, r.Code, r.Subject, r.Message, tc.code, tc.subject)
			}
			if after := f.st.Accounts(); !slices.EqualFunc(before, after, func(a, b Account) bool { return a.Charges == b.Charges && a.Answers == b.Answers }) {
				t.Fatal("the refused charge was charged")
			}
		})
	}
	f := registered(t)
	cmd := f.sign(sized("b1", []string{"h1", "h3"}, 100, 150), "agg")
	if r := f.apply(cmd); r.Status != StatusAccepted {
		t.Fatalf("the registered sizes: %s/%s: %s", r.Status, r.Code, r.Message)
	}
	c, err := DecodeCommand(cmd)
	if err != nil || c.Body.Kind() != KindChargeV2 || !slices.Equal(c.Body.(*Charge).Ensembles, []uint64{100, 150}) {
		t.Fatalf("decoded %v %v", c.Body, err)
	}
	// A charge of hospitals with no registration keeps the old kind and
	// bytes, and is accepted as before.
	old := f.sign(chargeBody("b2", []string{"h2"}, gaussCurve(40, 1), 1), "agg")
	if old[1] != byte(KindCharge) {
		t.Fatalf("kind %d", old[1])
	}
	if r := f.apply(old); r.Status != StatusAccepted {
		t.Fatalf("an unregistered hospital's charge: %s/%s: %s", r.Status, r.Code, r.Message)
	}
}

func TestChargeV2DecodeRejects(t *testing.T) {
	f := &fed{t: t, st: New()}
	good := f.sign(&Charge{BatchID: "b", Student: "s1", Hospitals: []string{"h1"}, Mechanism: "gnmax", Curve: []float64{0}, Ensembles: []uint64{7}}, "agg")
	// version, kind, "b" and "s1" (4+1, 4+2), the hospitals (4 + 4+2),
	// then the size.
	at := 2 + 5 + 6 + 10
	if !bytes.Equal(good[at:at+8], []byte{0, 0, 0, 0, 0, 0, 0, 7}) {
		t.Fatalf("the size is not at %d: % x", at, good[at:at+8])
	}
	zero := bytes.Clone(good)
	zero[at+7] = 0
	huge := bytes.Clone(good)
	huge[at] = 0xff
	v1 := bytes.Clone(good)
	v1[1] = byte(KindCharge) // the sizes are then bytes no charge has
	// Cut inside the sizes, the charge does not decode.
	cut := bytes.Clone(good[:at+4])
	for name, b := range map[string][]byte{"size 0": zero, "size above MaxTeachers": huge, "a charge's kind with sizes": v1, "cut inside the sizes": cut} {
		if _, err := DecodeCommand(b); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	for _, e := range [][]uint64{{1, 2}, {0}} {
		if _, err := Sign(&Charge{BatchID: "b", Student: "s1", Hospitals: []string{"h1"}, Mechanism: "gnmax", Curve: []float64{0}, Ensembles: e}, "agg", testKey("agg")); err == nil {
			t.Errorf("encoded sizes %v for one hospital", e)
		}
	}
}

func TestAccountSubject(t *testing.T) {
	for _, tc := range []struct {
		body          Body
		hospital      string
		bySelf, found bool
	}{
		{&OpenAccount{Hospital: "h1"}, "h1", true, true},
		{&ChangeCap{Hospital: "h2"}, "h2", true, true},
		{&RegisterParty{Party: testParty("h4", RoleHospital)}, "h4", false, true},
		{&RegisterEnsemble{Hospital: "h3"}, "h3", false, true},
		{&RegisterParty{Party: testParty("s9", RoleStudent)}, "s9", false, false},
		{&Charge{Hospitals: []string{"h1"}}, "", false, false},
		{&RegisterStudent{Student: "s1"}, "", false, false},
	} {
		h, bySelf, ok := AccountSubject(tc.body)
		if ok != tc.found || (ok && (h != tc.hospital || bySelf != tc.bySelf)) {
			t.Errorf("%s: %q %v %v, want %q %v %v", tc.body.Kind(), h, bySelf, ok, tc.hospital, tc.bySelf, tc.found)
		}
	}
}

// A batch in a session names the session's hospitals that voted on it:
// any subset of them, each with its registered ensemble, under the
// session's parameters (every teacher of the session, the absent ones
// abstaining). A batch naming a hospital outside the session, which did
// not pay for it, is refused and changes nothing.
func TestSessionChargeNamesASubsetOfItsHospitals(t *testing.T) {
	f := registered(t)
	f.must(&RegisterEnsemble{Hospital: "h2", Version: 1, Teachers: 50, Classes: 10, Timestamp: f.now()}, "admin")
	open := openSession(t, "svt1", "s2", []string{"h1", "h3"}, 3) // 250 teachers: h1's and h3's
	open.Timestamp = f.now()
	f.must(open, "agg")
	zero := make([]float64, mechanism.DefaultGrid().Len())
	in := func(batch string, hospitals []string, sizes ...uint64) *Charge {
		b := chargeBody(batch, hospitals, zero, 4)
		b.Session, b.Mechanism, b.Params, b.Queries, b.Ensembles = "svt1", "nzc-svt", svtParams(3).LedgerParams(), 5, sizes
		b.Timestamp = f.now()
		return b
	}
	for _, tc := range []struct {
		name    string
		body    *Charge
		code    Code
		subject string
	}{
		{"a hospital outside the session", in("out1", []string{"h1", "h2"}, 100, 50), CodeSessionMismatch, "h2"},
		{"only a hospital outside the session", in("out2", []string{"h2"}, 50), CodeSessionMismatch, "h2"},
		{"another size", in("size", []string{"h1"}, 90), CodeEnsembleMismatch, "h1"},
		{"no size for a registered hospital", in("nosize", []string{"h1"}), CodeEnsembleMismatch, "h1"},
		{"the voters' ensemble as parameters", func() *Charge {
			b := in("params", []string{"h1"}, 100)
			p := svtParams(3)
			p.Teachers = 100
			b.Params = p.LedgerParams()
			return b
		}(), CodeEnsembleMismatch, "params"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := f.st.Accounts()
			r := f.apply(f.sign(tc.body, "agg"))
			if r.Status != StatusRefused || r.Code != tc.code || r.Subject != tc.subject {
				t.Fatalf("%s/%s on %s: %s; want %s on %s", r.Status, r.Code, r.Subject, r.Message, tc.code, tc.subject)
			}
			if after := f.st.Accounts(); !reflect.DeepEqual(before, after) {
				t.Fatalf("the refusal changed the accounts: %+v → %+v", before, after)
			}
		})
	}
	before := f.st.Accounts()
	f.must(in("b1", []string{"h1"}, 100), "agg") // h3 absent: its teachers abstained
	f.must(in("b2", []string{"h3"}, 150), "agg") // h1 absent
	f.must(in("b3", []string{"h1", "h3"}, 100, 150), "agg")
	after := f.st.Accounts()
	for i, want := range []uint64{8, 0, 8} { // h1, h2, h3: the answers of the batches each voted on
		if after[i].Epsilon != before[i].Epsilon || after[i].Answers-before[i].Answers != want {
			t.Errorf("%s: ε %v → %v, answers +%d; want ε unchanged (paid at opening) and +%d", after[i].Hospital, before[i].Epsilon, after[i].Epsilon, after[i].Answers-before[i].Answers, want)
		}
	}
	if r := f.apply(f.sign(in("b4", []string{"h1"}, 100), "agg")); r.Code != CodeSessionExhausted {
		t.Fatalf("a fourth refusal past K=3 in a subset's batch: %s/%s", r.Status, r.Code)
	}
}
