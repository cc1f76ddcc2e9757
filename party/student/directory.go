package student

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/ledger"
	"github.com/nzcfed/nzc/protocol"
	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// ErrRecipient is matched (errors.Is) by a *RecipientError: the aggregator
// passed a hospital's age recipient that the hospital's registered key did
// not sign. Features are never sealed to it.
var ErrRecipient = errors.New("student: a hospital's age recipient is not signed by its registered key")

// RecipientError names the hospital whose recipient, as passed by the
// aggregator, was refused, and why.
type RecipientError struct {
	Hospital   string
	Aggregator string
	Reason     string
}

func (e *RecipientError) Error() string {
	if e.Hospital == "" {
		return fmt.Sprintf("student: the aggregator at %s passed a registration shared by several hospitals that was refused: %s; nothing was sealed to them — the aggregator may be substituting keys of its own: stop and have its operator investigate", e.Aggregator, e.Reason)
	}
	return fmt.Sprintf("student: the aggregator at %s passed an age recipient for hospital %s that was refused: %s; nothing was sealed to it — the aggregator may be substituting a key of its own: stop and have its operator investigate", e.Aggregator, e.Hospital, e.Reason)
}

func (e *RecipientError) Unwrap() error { return ErrRecipient }

// directory holds the recipients features are sealed to: those pinned in
// the configuration, which always stay, and those the aggregator passed
// with a signature by the hospital's registered ledger key.
type directory struct {
	admin  ed25519.PublicKey // verifies hospitals' registrations; nil: nothing is learned
	pinned []*crypto.Recipient

	mu      sync.Mutex
	learned map[string]*crypto.Recipient // by hospital id
}

func newDirectory(admin ed25519.PublicKey, pinned []*crypto.Recipient) *directory {
	return &directory{admin: admin, pinned: pinned, learned: map[string]*crypto.Recipient{}}
}

// recipients returns every recipient to seal to: the pinned ones, then the
// learned ones not pinned, in hospital order.
func (d *directory) recipients() []*crypto.Recipient {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := slices.Clone(d.pinned)
	ids := make([]string, 0, len(d.learned))
	for id := range d.learned {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if r := d.learned[id]; !d.pinnedLocked(r.String()) {
			out = append(out, r)
		}
	}
	return out
}

func (d *directory) pinnedLocked(r string) bool {
	return slices.ContainsFunc(d.pinned, func(p *crypto.Recipient) bool { return p.String() == r })
}

// learn takes the signed recipients the aggregator passed, and the
// registrations several of them share. A recipient already pinned is kept
// as it is; one whose signature verifies against its hospital's
// administrator-signed registration — its own, or else the shared one that
// registers its hospital — is sealed to from now on; one that does not
// verify is refused and named in the error, and nothing of the list is
// learned. A registration is the administrator's register-party of the
// hospital, or the genesis that names it; a hospital passed without one is
// sealed to only when pinned. It returns the hospitals newly learned, and
// those passed without a registration.
func (d *directory) learn(aggregator string, rs []*nzcpb.SignedRecipient, shared [][]byte) (added []string, unverifiable []string, err error) {
	if d.admin == nil {
		return nil, nil, nil
	}
	sharedKeys := map[string]ed25519.PublicKey{}
	for i, reg := range shared {
		keys, err := registeredKeys(d.admin, reg)
		if err != nil {
			return nil, nil, &RecipientError{Aggregator: aggregator, Reason: fmt.Sprintf("shared registration %d: %v", i, err)}
		}
		for id, k := range keys {
			sharedKeys[id] = k
		}
	}
	found := map[string]*crypto.Recipient{}
	for _, s := range rs {
		d.mu.Lock()
		pinned := d.pinnedLocked(s.GetAgeRecipient())
		d.mu.Unlock()
		if pinned {
			continue
		}
		var r *crypto.Recipient
		var err error
		switch key, ok := sharedKeys[s.GetHospitalId()]; {
		case len(s.GetRegistration()) > 0:
			r, err = verifyRecipient(d.admin, s)
		case ok:
			r, err = signedRecipient(key, s)
		default:
			unverifiable = append(unverifiable, s.GetHospitalId())
			continue
		}
		if err != nil {
			return nil, nil, &RecipientError{Hospital: s.GetHospitalId(), Aggregator: aggregator, Reason: err.Error()}
		}
		found[s.GetHospitalId()] = r
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, r := range found {
		if old, ok := d.learned[id]; !ok || old.String() != r.String() {
			added = append(added, id)
		}
		d.learned[id] = r
	}
	slices.Sort(added)
	return added, unverifiable, nil
}

// verifyRecipient checks that s's registration is the administrator's
// registration of hospital s.HospitalId, signed with admin, and that s's
// signature over the recipient verifies against the key it registers.
func verifyRecipient(admin ed25519.PublicKey, s *nzcpb.SignedRecipient) (*crypto.Recipient, error) {
	keys, err := registeredKeys(admin, s.GetRegistration())
	if err != nil {
		return nil, err
	}
	key, ok := keys[s.GetHospitalId()]
	if !ok {
		c, _ := ledger.DecodeCommand(s.GetRegistration())
		return nil, fmt.Errorf("its registration (%s) does not register hospital %s", c.Body.Kind(), s.GetHospitalId())
	}
	return signedRecipient(key, s)
}

// registeredKeys checks that reg is a registration signed with admin — a
// register-party or a genesis — and returns the keys of the hospitals it
// registers, by id.
func registeredKeys(admin ed25519.PublicKey, reg []byte) (map[string]ed25519.PublicKey, error) {
	c, err := ledger.DecodeCommand(reg)
	if err != nil {
		return nil, fmt.Errorf("its registration is not a ledger command: %v", err)
	}
	if !c.Verify(admin) {
		return nil, errors.New("its registration is not signed by the federation's administrator key")
	}
	keys := map[string]ed25519.PublicKey{}
	switch b := c.Body.(type) {
	case *ledger.RegisterParty:
		if b.Party.Role == ledger.RoleHospital {
			keys[b.Party.ID] = b.Party.PublicKey
		}
	case *ledger.Genesis:
		for _, p := range b.Parties {
			if p.Role == ledger.RoleHospital {
				keys[p.ID] = p.PublicKey
			}
		}
	}
	return keys, nil
}

// signedRecipient checks s's signature over its recipient with the
// hospital's registered key.
func signedRecipient(key ed25519.PublicKey, s *nzcpb.SignedRecipient) (*crypto.Recipient, error) {
	if !ed25519.Verify(key, protocol.RecipientMessage(s.GetHospitalId(), s.GetAgeRecipient()), s.GetSignature()) {
		return nil, fmt.Errorf("recipient %s is not signed by the hospital's registered key", s.GetAgeRecipient())
	}
	r, err := crypto.ParseRecipient(s.GetAgeRecipient())
	if err != nil {
		return nil, fmt.Errorf("recipient: %v", err)
	}
	return r, nil
}
