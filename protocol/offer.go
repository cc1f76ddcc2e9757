package protocol

import (
	"github.com/nzcfed/nzc/mechanism"
	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// maxOfferParams bounds a MechanismOffer's parameters: every mechanism
// takes fewer keys.
const maxOfferParams = 16

// checkOffer validates an optional offer's shape: a mechanism name and at
// most maxOfferParams parameters, each with a key. Whether the parameters
// are the mechanism's is OfferFromWire's to decide.
func checkOffer(o *nzcpb.MechanismOffer) error {
	if o == nil {
		return nil
	}
	if o.GetMechanism() == "" {
		return bad("a mechanism offer without a mechanism")
	}
	if len(o.GetParams()) > maxOfferParams {
		return bad("a mechanism offer of %d parameters, at most %d", len(o.GetParams()), maxOfferParams)
	}
	for _, kv := range o.GetParams() {
		if kv == nil || kv.GetKey() == "" {
			return bad("a mechanism offer with a parameter without a key")
		}
	}
	return nil
}

// OfferToWire returns the wire form of a per-query mechanism offered to
// students: its parameters as a ledger entry records them, for an ensemble
// of one teacher on the given classes (the ensemble of each batch is its
// voters').
func OfferToWire(p mechanism.Params, classes int) *nzcpb.MechanismOffer {
	p.Teachers, p.Classes = 1, classes
	o := &nzcpb.MechanismOffer{Mechanism: string(p.Mechanism)}
	for _, kv := range p.LedgerParams() {
		o.Params = append(o.Params, &nzcpb.MechanismParam{Key: kv.Key, Value: kv.Value})
	}
	return o
}

// OfferFromWire returns the mechanism an offer names, its parameters
// parsed as the ledger parses a charge's (mechanism.ParseLedgerParams: a
// registered mechanism, exactly its keys, sorted, one spelling per value);
// nil gives ok = false. A mechanism that answers in sessions is no
// per-query offer and is refused.
func OfferFromWire(o *nzcpb.MechanismOffer) (p mechanism.Params, ok bool, err error) {
	if o == nil {
		return mechanism.Params{}, false, nil
	}
	if err := checkOffer(o); err != nil {
		return mechanism.Params{}, false, err
	}
	kvs := make([]mechanism.KV, len(o.GetParams()))
	for i, kv := range o.GetParams() {
		kvs[i] = mechanism.KV{Key: kv.GetKey(), Value: kv.GetValue()}
	}
	p, err = mechanism.ParseLedgerParams(mechanism.Kind(o.GetMechanism()), kvs)
	if err != nil {
		return mechanism.Params{}, false, bad("mechanism offer: %v", err)
	}
	if p.Mechanism.Sessions() {
		return mechanism.Params{}, false, bad("mechanism offer: %s answers in sessions, not per query", p.Mechanism)
	}
	return p, true, nil
}
