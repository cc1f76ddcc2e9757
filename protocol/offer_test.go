package protocol

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/protocol/nzcpb"
)

func TestOfferRoundTrip(t *testing.T) {
	for _, p := range []mechanism.Params{
		{Mechanism: mechanism.GNMax, Sigma: 40},
		{Mechanism: mechanism.LNMax, Scale: 12.5},
		{Mechanism: mechanism.ConfidentGNMax, Threshold: 200, Sigma1: 150, Sigma2: 40},
	} {
		o := OfferToWire(p, 10)
		got, ok, err := OfferFromWire(o)
		if err != nil || !ok {
			t.Fatalf("%s: %v", p, err)
		}
		want := p
		want.Teachers, want.Classes = 1, 10
		if got != want {
			t.Fatalf("offer of %+v read back as %+v", want, got)
		}
	}
	if _, ok, err := OfferFromWire(nil); ok || err != nil {
		t.Fatalf("no offer: ok %v, err %v", ok, err)
	}
}

func TestOfferRefused(t *testing.T) {
	kv := func(pairs ...string) []*nzcpb.MechanismParam {
		var out []*nzcpb.MechanismParam
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, &nzcpb.MechanismParam{Key: pairs[i], Value: pairs[i+1]})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		o    *nzcpb.MechanismOffer
	}{
		{"no mechanism", &nzcpb.MechanismOffer{Params: kv("sigma", "40")}},
		{"unknown mechanism", &nzcpb.MechanismOffer{Mechanism: "gnmax2", Params: kv("classes", "10", "sigma", "40", "teachers", "1")}},
		{"a session mechanism", &nzcpb.MechanismOffer{Mechanism: "nzc-svt",
			Params: kv("classes", "10", "distance_scale", "4", "max_refusals", "2", "scale", "1", "teachers", "100", "threshold", "40")}},
		{"a key missing", &nzcpb.MechanismOffer{Mechanism: "gnmax", Params: kv("classes", "10", "teachers", "1")}},
		{"unsorted", &nzcpb.MechanismOffer{Mechanism: "gnmax", Params: kv("sigma", "40", "classes", "10", "teachers", "1")}},
		{"a second spelling", &nzcpb.MechanismOffer{Mechanism: "gnmax", Params: kv("classes", "10", "sigma", "40.0", "teachers", "1")}},
		{"no noise", &nzcpb.MechanismOffer{Mechanism: "gnmax", Params: kv("classes", "10", "sigma", "0", "teachers", "1")}},
		{"an empty key", &nzcpb.MechanismOffer{Mechanism: "gnmax", Params: kv("", "10")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, ok, err := OfferFromWire(tc.o); ok || !errors.Is(err, ErrBadMessage) {
				t.Fatalf("ok %v, err %v; want ErrBadMessage", ok, err)
			}
		})
	}
}

// FuzzOfferFromWire: whatever an aggregator sends, an offer either reads
// as a valid per-query mechanism that writes back to the same parameters,
// or is refused with ErrBadMessage; it never panics.
func FuzzOfferFromWire(f *testing.F) {
	for _, p := range []mechanism.Params{{Mechanism: mechanism.GNMax, Sigma: 40}, {Mechanism: mechanism.LNMax, Scale: 3}} {
		b, _ := proto.Marshal(OfferToWire(p, 10))
		f.Add(b)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var o nzcpb.MechanismOffer
		if proto.Unmarshal(b, &o) != nil {
			return
		}
		p, ok, err := OfferFromWire(&o)
		if err != nil {
			if !errors.Is(err, ErrBadMessage) || ok {
				t.Fatalf("refusal %v (ok %v) does not match ErrBadMessage", err, ok)
			}
			return
		}
		if err := p.Validate(); err != nil || p.Mechanism.Sessions() {
			t.Fatalf("accepted %+v: %v", p, err)
		}
		back := OfferToWire(p, p.Classes)
		back.Params = back.Params[:0]
		for _, kv := range p.LedgerParams() {
			back.Params = append(back.Params, &nzcpb.MechanismParam{Key: kv.Key, Value: kv.Value})
		}
		if !proto.Equal(back, &o) {
			t.Fatalf("accepted %v, which writes back as %v", &o, back)
		}
	})
}
