package provision

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/nzcfed/nzc/crypto"
)

const defaultFederationName = "NZC federation CA"

// Default validity periods of the federation CA and of party certificates.
const (
	DefaultCAValidity   = 10 * 365 * 24 * time.Hour
	DefaultCertValidity = 2 * 365 * 24 * time.Hour
)

// ErrFederationExists is matched (errors.Is) when Provision would replace an
// existing federation without force. It also matches crypto.ErrExists.
var ErrFederationExists = fmt.Errorf("%w: a federation is already provisioned there", crypto.ErrExists)

// Spec describes a federation to create.
type Spec struct {
	// Name is the CA's common name; empty means "NZC federation CA".
	Name      string
	Hospitals int // at least 1
	Auditors  int // at least 1; 3 or 5 for a fault-tolerant ledger
	Students  int // at least 1
	// Hosts are extra DNS names or IP addresses put into every party
	// certificate, besides 127.0.0.1, ::1 and localhost.
	Hosts []string
	// PartyHosts are DNS names or IP addresses put only into the
	// certificate of the party with that id: so that a client dialling a
	// party's host name can be sure to reach that party, not any other.
	PartyHosts map[string][]string
	// Now is the start of validity; zero means the current time.
	Now          time.Time
	CAValidity   time.Duration // zero means DefaultCAValidity
	CertValidity time.Duration // zero means DefaultCertValidity
	// Rand supplies key material; nil means crypto/rand. (age identities
	// always use crypto/rand.)
	Rand io.Reader
	// Force replaces an existing federation's files.
	Force bool
}

// HasSigningKey says which roles get an ed25519 signing key: the aggregator
// signs ledger charges, auditors cosign checkpoints, and each hospital signs
// the request that opens its ledger account and sets its own cap.
func HasSigningKey(r crypto.Role) bool {
	return r == crypto.RoleAggregator || r == crypto.RoleAuditor || r == crypto.RoleHospital
}

// Provision creates a federation in dir: a CA, the administrator's signing
// key (admin/admin.key, kept apart from the CA key), and for each party a TLS
// certificate and key, an age identity and, for the aggregator, the
// auditors and the hospitals, an ed25519 signing key. Parties are hospital-1…, auditor-1…,
// student-1…, aggregator and compliance. It refuses, with an error matching
// ErrFederationExists, to replace an existing federation unless spec.Force.
// The manifest is written last, so a directory without one is incomplete.
func Provision(dir string, spec Spec) (*crypto.Manifest, error) {
	if spec.Hospitals < 1 || spec.Auditors < 1 || spec.Students < 1 {
		return nil, fmt.Errorf("a federation needs at least 1 hospital, 1 auditor and 1 student (got %d, %d, %d)",
			spec.Hospitals, spec.Auditors, spec.Students)
	}
	if !spec.Force {
		for _, f := range []string{crypto.ManifestFile, crypto.CAKeyFile, crypto.CACertFile} {
			if _, err := os.Lstat(filepath.Join(dir, f)); err == nil {
				return nil, fmt.Errorf("%w in %s (found %s): choose another directory or force to replace every key", ErrFederationExists, dir, f)
			}
		}
	}
	now, rnd := spec.Now, spec.Rand
	if now.IsZero() {
		now = time.Now()
	}
	if rnd == nil {
		rnd = rand.Reader
	}
	caValidity, certValidity := orDefault(spec.CAValidity, DefaultCAValidity), orDefault(spec.CertValidity, DefaultCertValidity)
	name := spec.Name
	if name == "" {
		name = defaultFederationName
	}
	// Start validity a minute early: clocks of the parties are not in step.
	notBefore := now.Add(-time.Minute).UTC().Truncate(time.Second)
	ca, err := crypto.NewCA(rnd, name, notBefore, notBefore.Add(caValidity))
	if err != nil {
		return nil, err
	}
	admin, err := crypto.GenerateSigningKey(rnd)
	if err != nil {
		return nil, err
	}
	var peers []crypto.Peer
	add := func(role crypto.Role, n int) {
		for i := 1; i <= n; i++ {
			peers = append(peers, crypto.Peer{Role: role, ID: string(role) + "-" + strconv.Itoa(i)})
		}
	}
	add(crypto.RoleHospital, spec.Hospitals)
	peers = append(peers, crypto.Peer{Role: crypto.RoleAggregator, ID: string(crypto.RoleAggregator)})
	add(crypto.RoleAuditor, spec.Auditors)
	add(crypto.RoleStudent, spec.Students)
	peers = append(peers, crypto.Peer{Role: crypto.RoleCompliance, ID: string(crypto.RoleCompliance)})

	for id := range spec.PartyHosts {
		if !slices.ContainsFunc(peers, func(p crypto.Peer) bool { return p.ID == id }) {
			return nil, fmt.Errorf("host names for %q: the federation has no such party (ids are role-N, aggregator, compliance)", id)
		}
	}
	// Generate everything before writing anything.
	parties := make([]*partyKeys, len(peers))
	for i, p := range peers {
		hosts := append(slices.Clone(spec.Hosts), spec.PartyHosts[p.ID]...)
		parties[i], err = newPartyKeys(ca, rnd, p, hosts, notBefore, notBefore.Add(certValidity))
		if err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(crypto.CAKeyFile)), 0o700); err != nil {
		return nil, fmt.Errorf("create federation directory: %w", err)
	}
	if err := crypto.WritePrivateKey(filepath.Join(dir, crypto.CAKeyFile), ca.Key(), spec.Force); err != nil {
		return nil, err
	}
	if err := crypto.WriteCert(filepath.Join(dir, crypto.CACertFile), ca.Cert, spec.Force); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(crypto.AdminKeyFile)), 0o700); err != nil {
		return nil, fmt.Errorf("create federation directory: %w", err)
	}
	if err := crypto.WriteSigningKey(filepath.Join(dir, crypto.AdminKeyFile), filepath.Join(dir, crypto.AdminVerifyingKeyFile), admin, spec.Force); err != nil {
		return nil, err
	}
	m := &crypto.Manifest{Dir: dir, Name: name, CAFingerprint: ca.Fingerprint(), CACert: crypto.CACertFile, CAKey: crypto.CAKeyFile,
		AdminKey: crypto.AdminKeyFile, AdminVerifyingKey: crypto.AdminVerifyingKeyFile, Created: now.UTC()}
	for _, pk := range parties {
		pf, err := pk.write(dir, spec.Force)
		if err != nil {
			return nil, err
		}
		m.Parties = append(m.Parties, pf)
	}
	if err := writeManifest(m); err != nil {
		return nil, err
	}
	return m, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// AddPartyOptions tune AddParty.
type AddPartyOptions struct {
	Hosts    []string
	Now      time.Time     // zero means the current time
	Validity time.Duration // zero means DefaultCertValidity
	Rand     io.Reader     // nil means crypto/rand
	// Force replaces the files of a party that already exists.
	Force bool
}

// AddParty issues keys for one more party in an existing federation,
// leaving every other party's files untouched. An empty id picks the next
// free "<role>-N". It refuses to replace an existing party without Force.
func AddParty(dir string, role crypto.Role, id string, opts AddPartyOptions) (*crypto.Manifest, crypto.PartyFiles, error) {
	return AddPartyWith(dir, crypto.Peer{Role: role, ID: id}, opts, nil)
}

// IssueFunc writes the files of one party, its certificate signed by ca
// and valid from notBefore to notAfter, and says what they are.
type IssueFunc func(ca *crypto.CA, rnd io.Reader, notBefore, notAfter time.Time) (crypto.PartyFiles, error)

// AddPartyWith adds the party p to the federation in dir, its id picked
// when empty, with the files issue writes for it under the CA's signature,
// and records it in the manifest. A nil issue makes every key here, as
// AddParty does; a party that keeps its own keys brings an issue that
// certifies them (see [AddPartyFromRequest]).
func AddPartyWith(dir string, p crypto.Peer, opts AddPartyOptions, issue IssueFunc) (*crypto.Manifest, crypto.PartyFiles, error) {
	role, id := p.Role, p.ID
	if _, err := crypto.ParseRole(string(role)); err != nil {
		return nil, crypto.PartyFiles{}, err
	}
	m, err := crypto.LoadManifest(dir)
	if err != nil {
		return nil, crypto.PartyFiles{}, err
	}
	if id == "" {
		for i := 1; ; i++ {
			cand := string(role) + "-" + strconv.Itoa(i)
			if !idTaken(m, cand) {
				id = cand
				break
			}
		}
	}
	p = crypto.Peer{Role: role, ID: id}
	if err := p.Validate(); err != nil {
		return nil, crypto.PartyFiles{}, err
	}
	replace := -1
	for i, q := range m.Parties {
		if q.ID == id {
			if !opts.Force || q.Role != role {
				return nil, crypto.PartyFiles{}, fmt.Errorf("%w: party id %q is already used by %s; pick another id", crypto.ErrExists, id, q.URI)
			}
			replace = i
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, id)); err == nil && replace < 0 && !opts.Force {
		return nil, crypto.PartyFiles{}, fmt.Errorf("%w: directory %s; remove it or pick another id", crypto.ErrExists, filepath.Join(dir, id))
	}
	ca, err := crypto.LoadCA(m.Path(m.CACert), m.Path(m.CAKey))
	if err != nil {
		return nil, crypto.PartyFiles{}, err
	}
	if got := ca.Fingerprint(); got != m.CAFingerprint {
		return nil, crypto.PartyFiles{}, fmt.Errorf("crypto.CA certificate fingerprint %s does not match the manifest's %s: the federation directory was altered", got, m.CAFingerprint)
	}
	now, rnd := opts.Now, opts.Rand
	if now.IsZero() {
		now = time.Now()
	}
	if rnd == nil {
		rnd = rand.Reader
	}
	notBefore := now.Add(-time.Minute).UTC().Truncate(time.Second)
	notAfter := notBefore.Add(orDefault(opts.Validity, DefaultCertValidity))
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	if issue == nil {
		issue = func(ca *crypto.CA, rnd io.Reader, notBefore, notAfter time.Time) (crypto.PartyFiles, error) {
			pk, err := newPartyKeys(ca, rnd, p, opts.Hosts, notBefore, notAfter)
			if err != nil {
				return crypto.PartyFiles{}, err
			}
			return pk.write(dir, opts.Force)
		}
	}
	pf, err := issue(ca, rnd, notBefore, notAfter)
	if err != nil {
		return nil, crypto.PartyFiles{}, err
	}
	if replace >= 0 {
		m.Parties[replace] = pf
	} else {
		m.Parties = append(m.Parties, pf)
	}
	if err := writeManifest(m); err != nil {
		return nil, crypto.PartyFiles{}, err
	}
	return m, pf, nil
}

func idTaken(m *crypto.Manifest, id string) bool {
	for _, p := range m.Parties {
		if p.ID == id {
			return true
		}
	}
	return false
}

func writeManifest(m *crypto.Manifest) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encode manifest: %w", err)
	}
	return crypto.WriteFile(filepath.Join(m.Dir, crypto.ManifestFile), append(data, '\n'), crypto.PublicFileMode, true)
}

type partyKeys struct {
	peer crypto.Peer
	cred *crypto.Credential
	age  *crypto.Identity
	sign ed25519.PrivateKey
}

func newPartyKeys(ca *crypto.CA, rnd io.Reader, p crypto.Peer, hosts []string, notBefore, notAfter time.Time) (*partyKeys, error) {
	cred, err := ca.Issue(rnd, crypto.IssueRequest{Peer: p, Hosts: hosts, NotBefore: notBefore, NotAfter: notAfter})
	if err != nil {
		return nil, err
	}
	id, err := crypto.GenerateIdentity()
	if err != nil {
		return nil, err
	}
	pk := &partyKeys{peer: p, cred: cred, age: id}
	if HasSigningKey(p.Role) {
		if pk.sign, err = crypto.GenerateSigningKey(rnd); err != nil {
			return nil, err
		}
	}
	return pk, nil
}

func (pk *partyKeys) write(dir string, force bool) (crypto.PartyFiles, error) {
	rel := pk.peer.ID
	if err := os.MkdirAll(filepath.Join(dir, rel), 0o700); err != nil {
		return crypto.PartyFiles{}, fmt.Errorf("create party directory: %w", err)
	}
	pf := crypto.PartyFiles{
		Role:         pk.peer.Role,
		ID:           pk.peer.ID,
		URI:          pk.peer.String(),
		Cert:         filepath.Join(rel, crypto.PartyCertFile),
		Key:          filepath.Join(rel, crypto.PartyKeyFile),
		AgeIdentity:  filepath.Join(rel, crypto.AgeIdentityFile),
		AgeRecipient: pk.age.Recipient().String(),
		NotAfter:     pk.cred.Cert.NotAfter.UTC(),
	}
	if err := crypto.WriteCredential(filepath.Join(dir, pf.Cert), filepath.Join(dir, pf.Key), pk.cred, force); err != nil {
		return crypto.PartyFiles{}, err
	}
	if err := crypto.WriteIdentity(filepath.Join(dir, pf.AgeIdentity), pk.age, force); err != nil {
		return crypto.PartyFiles{}, err
	}
	if err := crypto.WriteRecipient(filepath.Join(dir, rel, crypto.AgeRecipientFile), pk.age.Recipient(), force); err != nil {
		return crypto.PartyFiles{}, err
	}
	if pk.sign != nil {
		pf.SigningKey = filepath.Join(rel, crypto.SigningKeyFile)
		pf.VerifyingKey = filepath.Join(rel, crypto.VerifyingKeyFile)
		if err := crypto.WriteSigningKey(filepath.Join(dir, pf.SigningKey), filepath.Join(dir, pf.VerifyingKey), pk.sign, force); err != nil {
			return crypto.PartyFiles{}, err
		}
	}
	return pf, nil
}
