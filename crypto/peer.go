package crypto

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Role is the part a party plays in the federation.
type Role string

// The roles of the federation.
const (
	RoleHospital   Role = "hospital"
	RoleAggregator Role = "aggregator"
	RoleStudent    Role = "student"
	RoleAuditor    Role = "auditor"
	RoleCompliance Role = "compliance"
)

// Roles lists every role, in a fixed order.
func Roles() []Role {
	return []Role{RoleHospital, RoleAggregator, RoleStudent, RoleAuditor, RoleCompliance}
}

// ParseRole returns the role named s, or an error that lists the valid roles.
func ParseRole(s string) (Role, error) {
	for _, r := range Roles() {
		if string(r) == s {
			return r, nil
		}
	}
	return "", fmt.Errorf("unknown role %q: use one of hospital, aggregator, student, auditor, compliance", s)
}

// URIScheme is the scheme of the URI SAN that names a party.
const URIScheme = "nzc"

// maxIDLen bounds party ids so they fit in a DNS label and in log lines.
const maxIDLen = 63

// Peer is the identity of a party as named by its certificate.
type Peer struct {
	Role Role
	ID   string
}

// String returns the party's URI, nzc://<role>/<id>.
func (p Peer) String() string { return URIScheme + "://" + string(p.Role) + "/" + p.ID }

// URI returns the party's URI SAN.
func (p Peer) URI() *url.URL {
	return &url.URL{Scheme: URIScheme, Host: string(p.Role), Path: "/" + p.ID}
}

// Validate checks that the role is known and the id is 1–63 characters of
// lower-case letters, digits and '-', starting with a letter or digit.
func (p Peer) Validate() error {
	if _, err := ParseRole(string(p.Role)); err != nil {
		return err
	}
	return ValidateID(p.ID)
}

// ValidateID checks a party id: 1–63 characters of lower-case letters,
// digits and '-', starting with a letter or a digit.
func ValidateID(id string) error {
	if id == "" || len(id) > maxIDLen {
		return fmt.Errorf("party id %q must be 1 to %d characters long", id, maxIDLen)
	}
	for i, c := range id {
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' && i > 0
		if !ok {
			return fmt.Errorf("party id %q: use only lower-case letters, digits and '-' (not first)", id)
		}
	}
	return nil
}

// Expect returns nil when the peer has one of the given roles, and a
// *WrongRoleError otherwise.
func (p Peer) Expect(roles ...Role) error {
	for _, r := range roles {
		if p.Role == r {
			return nil
		}
	}
	return &WrongRoleError{Peer: p, Want: roles}
}

// ErrWrongRole is matched (errors.Is) by *WrongRoleError.
var ErrWrongRole = errors.New("peer has the wrong role")

// WrongRoleError says a peer authenticated correctly but plays a role that
// may not do what it asked or be what the caller expected.
type WrongRoleError struct {
	Peer Peer
	Want []Role
}

func (e *WrongRoleError) Error() string {
	want := make([]string, len(e.Want))
	for i, r := range e.Want {
		want[i] = string(r)
	}
	return fmt.Sprintf("peer %s has role %q, but only %s may do this: check which party's certificate is configured",
		e.Peer, e.Peer.Role, strings.Join(want, " or "))
}

// Is reports whether target is ErrWrongRole.
func (e *WrongRoleError) Is(target error) bool { return target == ErrWrongRole }

// ErrNoPeerIdentity is matched (errors.Is) when a certificate does not carry
// exactly one well-formed nzc://<role>/<id> URI SAN.
var ErrNoPeerIdentity = errors.New("certificate names no federation party")

// PeerFromCert returns the party named by cert's nzc:// URI SAN. It does not
// verify the certificate: use [VerifyPeer] on certificates from the network.
func PeerFromCert(cert *x509.Certificate) (Peer, error) {
	p, err := peerFromCert(cert)
	if err != nil {
		return Peer{}, fmt.Errorf("%w: %v", ErrNoPeerIdentity, err)
	}
	return p, nil
}

// peerFromCert returns the reason without the ErrNoPeerIdentity prefix.
func peerFromCert(cert *x509.Certificate) (Peer, error) {
	var found []*url.URL
	for _, u := range cert.URIs {
		if u.Scheme == URIScheme {
			found = append(found, u)
		}
	}
	switch len(found) {
	case 0:
		return Peer{}, fmt.Errorf("no %s:// URI SAN in certificate %q; reissue it with the federation CA", URIScheme, cert.Subject.CommonName)
	case 1:
	default:
		return Peer{}, fmt.Errorf("%d %s:// URI SANs in certificate %q, want exactly one", len(found), URIScheme, cert.Subject.CommonName)
	}
	return parsePeerURI(found[0])
}

func parsePeerURI(u *url.URL) (Peer, error) {
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Port() != "" || u.Opaque != "" {
		return Peer{}, fmt.Errorf("malformed party URI %q: want %s://<role>/<id>", u.String(), URIScheme)
	}
	id, ok := strings.CutPrefix(u.Path, "/")
	if !ok {
		return Peer{}, fmt.Errorf("malformed party URI %q: want %s://<role>/<id>", u.String(), URIScheme)
	}
	p := Peer{Role: Role(u.Host), ID: id}
	if err := p.Validate(); err != nil {
		return Peer{}, fmt.Errorf("malformed party URI %q: %v", u.String(), err)
	}
	return p, nil
}
