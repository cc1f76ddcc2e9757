package crypto

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"
)

// Layout of a federation directory. Paths in a [Manifest] are relative to it.
const (
	ManifestFile = "federation.json"
	CACertFile   = "ca/ca.crt"
	CAKeyFile    = "ca/ca.key"
	// The administrator's signing key, separate from the CA key: it signs
	// the ledger's genesis and the registrations of parties added later.
	AdminKeyFile          = "admin/admin.key"
	AdminVerifyingKeyFile = "admin/admin.pub"
	// Files in each party's directory, <dir>/<id>/.
	PartyCertFile         = "tls.crt"
	PartyKeyFile          = "tls.key"
	AgeIdentityFile       = "age.key"
	AgeRecipientFile      = "age.pub"
	SigningKeyFile        = "sign.key"
	VerifyingKeyFile      = "sign.pub"
	defaultFederationName = "NZC federation CA"
)

// Default validity periods.
const (
	DefaultCAValidity   = 10 * 365 * 24 * time.Hour
	DefaultCertValidity = 2 * 365 * 24 * time.Hour
)

// ErrFederationExists is matched (errors.Is) when Provision would replace an
// existing federation without force. It also matches ErrExists.
var ErrFederationExists = fmt.Errorf("%w: a federation is already provisioned there", ErrExists)

// ProvisionSpec describes a federation to create.
type ProvisionSpec struct {
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

// Manifest lists what a federation directory holds: public facts only.
// Paths are relative to Dir.
type Manifest struct {
	Dir           string `json:"-"`
	Name          string `json:"name"`
	CAFingerprint string `json:"ca_fingerprint_sha256"`
	CACert        string `json:"ca_cert"`
	CAKey         string `json:"ca_key"`
	// AdminKey and AdminVerifyingKey are the administrator's signing key
	// pair. A manifest written before the administrator had a key of its
	// own has neither; its CA key is then the administrator's.
	AdminKey          string       `json:"admin_key,omitempty"`
	AdminVerifyingKey string       `json:"admin_verifying_key,omitempty"`
	Parties           []PartyFiles `json:"parties"`
	Created           time.Time    `json:"created"`
}

// PartyFiles are one party's files and public keys.
type PartyFiles struct {
	Role         Role      `json:"role"`
	ID           string    `json:"id"`
	URI          string    `json:"uri"`
	Cert         string    `json:"cert"`
	Key          string    `json:"key"`
	AgeIdentity  string    `json:"age_identity"`
	AgeRecipient string    `json:"age_recipient"` // the age1… public key itself
	SigningKey   string    `json:"signing_key,omitempty"`
	VerifyingKey string    `json:"verifying_key,omitempty"`
	NotAfter     time.Time `json:"cert_not_after"`
}

// Peer returns the party's identity.
func (p PartyFiles) Peer() Peer { return Peer{Role: p.Role, ID: p.ID} }

// Path returns rel joined to the federation directory.
func (m *Manifest) Path(rel string) string {
	if rel == "" || filepath.IsAbs(rel) {
		return rel
	}
	return filepath.Join(m.Dir, rel)
}

// Party returns the entry of the party with the given role and id.
func (m *Manifest) Party(role Role, id string) (PartyFiles, bool) {
	for _, p := range m.Parties {
		if p.Role == role && p.ID == id {
			return p, true
		}
	}
	return PartyFiles{}, false
}

// ByRole returns the parties with the given role, in manifest order.
func (m *Manifest) ByRole(role Role) []PartyFiles {
	var out []PartyFiles
	for _, p := range m.Parties {
		if p.Role == role {
			out = append(out, p)
		}
	}
	return out
}

// HasSigningKey says which roles get an ed25519 signing key: the aggregator
// signs ledger charges, auditors cosign checkpoints, and each hospital signs
// the request that opens its ledger account and sets its own cap.
func HasSigningKey(r Role) bool {
	return r == RoleAggregator || r == RoleAuditor || r == RoleHospital
}

// Provision creates a federation in dir: a CA, the administrator's signing
// key (admin/admin.key, kept apart from the CA key), and for each party a TLS
// certificate and key, an age identity and, for the aggregator, the
// auditors and the hospitals, an ed25519 signing key. Parties are hospital-1…, auditor-1…,
// student-1…, aggregator and compliance. It refuses, with an error matching
// ErrFederationExists, to replace an existing federation unless spec.Force.
// The manifest is written last, so a directory without one is incomplete.
func Provision(dir string, spec ProvisionSpec) (*Manifest, error) {
	if spec.Hospitals < 1 || spec.Auditors < 1 || spec.Students < 1 {
		return nil, fmt.Errorf("a federation needs at least 1 hospital, 1 auditor and 1 student (got %d, %d, %d)",
			spec.Hospitals, spec.Auditors, spec.Students)
	}
	if !spec.Force {
		for _, f := range []string{ManifestFile, CAKeyFile, CACertFile} {
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
	ca, err := NewCA(rnd, name, notBefore, notBefore.Add(caValidity))
	if err != nil {
		return nil, err
	}
	admin, err := GenerateSigningKey(rnd)
	if err != nil {
		return nil, err
	}
	var peers []Peer
	add := func(role Role, n int) {
		for i := 1; i <= n; i++ {
			peers = append(peers, Peer{Role: role, ID: string(role) + "-" + strconv.Itoa(i)})
		}
	}
	add(RoleHospital, spec.Hospitals)
	peers = append(peers, Peer{Role: RoleAggregator, ID: string(RoleAggregator)})
	add(RoleAuditor, spec.Auditors)
	add(RoleStudent, spec.Students)
	peers = append(peers, Peer{Role: RoleCompliance, ID: string(RoleCompliance)})

	for id := range spec.PartyHosts {
		if !slices.ContainsFunc(peers, func(p Peer) bool { return p.ID == id }) {
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
	if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(CAKeyFile)), 0o700); err != nil {
		return nil, fmt.Errorf("create federation directory: %w", err)
	}
	if err := WritePrivateKey(filepath.Join(dir, CAKeyFile), ca.key, spec.Force); err != nil {
		return nil, err
	}
	if err := WriteCert(filepath.Join(dir, CACertFile), ca.Cert, spec.Force); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(AdminKeyFile)), 0o700); err != nil {
		return nil, fmt.Errorf("create federation directory: %w", err)
	}
	if err := WriteSigningKey(filepath.Join(dir, AdminKeyFile), filepath.Join(dir, AdminVerifyingKeyFile), admin, spec.Force); err != nil {
		return nil, err
	}
	m := &Manifest{Dir: dir, Name: name, CAFingerprint: ca.Fingerprint(), CACert: CACertFile, CAKey: CAKeyFile,
		AdminKey: AdminKeyFile, AdminVerifyingKey: AdminVerifyingKeyFile, Created: now.UTC()}
	for _, pk := range parties {
		pf, err := pk.write(dir, spec.Force)
		if err != nil {
			return nil, err
		}
		m.Parties = append(m.Parties, pf)
	}
	if err := m.write(); err != nil {
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
func AddParty(dir string, role Role, id string, opts AddPartyOptions) (*Manifest, PartyFiles, error) {
	return AddPartyWith(dir, Peer{Role: role, ID: id}, opts, nil)
}

// IssueFunc writes the files of one party, its certificate signed by ca
// and valid from notBefore to notAfter, and says what they are.
type IssueFunc func(ca *CA, rnd io.Reader, notBefore, notAfter time.Time) (PartyFiles, error)

// AddPartyWith adds the party p to the federation in dir, its id picked
// when empty, with the files issue writes for it under the CA's signature,
// and records it in the manifest. A nil issue makes every key here, as
// AddParty does; a party that keeps its own keys brings an issue that
// certifies them (see federation/provision's key requests).
func AddPartyWith(dir string, p Peer, opts AddPartyOptions, issue IssueFunc) (*Manifest, PartyFiles, error) {
	role, id := p.Role, p.ID
	if _, err := ParseRole(string(role)); err != nil {
		return nil, PartyFiles{}, err
	}
	m, err := LoadManifest(dir)
	if err != nil {
		return nil, PartyFiles{}, err
	}
	if id == "" {
		for i := 1; ; i++ {
			cand := string(role) + "-" + strconv.Itoa(i)
			if !m.idTaken(cand) {
				id = cand
				break
			}
		}
	}
	p = Peer{Role: role, ID: id}
	if err := p.Validate(); err != nil {
		return nil, PartyFiles{}, err
	}
	replace := -1
	for i, q := range m.Parties {
		if q.ID == id {
			if !opts.Force || q.Role != role {
				return nil, PartyFiles{}, fmt.Errorf("%w: party id %q is already used by %s; pick another id", ErrExists, id, q.URI)
			}
			replace = i
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, id)); err == nil && replace < 0 && !opts.Force {
		return nil, PartyFiles{}, fmt.Errorf("%w: directory %s; remove it or pick another id", ErrExists, filepath.Join(dir, id))
	}
	ca, err := LoadCA(m.Path(m.CACert), m.Path(m.CAKey))
	if err != nil {
		return nil, PartyFiles{}, err
	}
	if got := ca.Fingerprint(); got != m.CAFingerprint {
		return nil, PartyFiles{}, fmt.Errorf("CA certificate fingerprint %s does not match the manifest's %s: the federation directory was altered", got, m.CAFingerprint)
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
		issue = func(ca *CA, rnd io.Reader, notBefore, notAfter time.Time) (PartyFiles, error) {
			pk, err := newPartyKeys(ca, rnd, p, opts.Hosts, notBefore, notAfter)
			if err != nil {
				return PartyFiles{}, err
			}
			return pk.write(dir, opts.Force)
		}
	}
	pf, err := issue(ca, rnd, notBefore, notAfter)
	if err != nil {
		return nil, PartyFiles{}, err
	}
	if replace >= 0 {
		m.Parties[replace] = pf
	} else {
		m.Parties = append(m.Parties, pf)
	}
	if err := m.write(); err != nil {
		return nil, PartyFiles{}, err
	}
	return m, pf, nil
}

func (m *Manifest) idTaken(id string) bool {
	for _, p := range m.Parties {
		if p.ID == id {
			return true
		}
	}
	return false
}

// LoadManifest reads dir's federation manifest.
func LoadManifest(dir string) (*Manifest, error) {
	data, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no federation in %s (no %s): provision one first", dir, ManifestFile)
	}
	if err != nil {
		return nil, fmt.Errorf("read federation manifest: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("parse %s: %w", filepath.Join(dir, ManifestFile), err)
	}
	m.Dir = dir
	return &m, nil
}

func (m *Manifest) write() error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encode manifest: %w", err)
	}
	return WriteFile(filepath.Join(m.Dir, ManifestFile), append(data, '\n'), PublicFileMode, true)
}

type partyKeys struct {
	peer Peer
	cred *Credential
	age  *Identity
	sign ed25519.PrivateKey
}

func newPartyKeys(ca *CA, rnd io.Reader, p Peer, hosts []string, notBefore, notAfter time.Time) (*partyKeys, error) {
	cred, err := ca.Issue(rnd, IssueRequest{Peer: p, Hosts: hosts, NotBefore: notBefore, NotAfter: notAfter})
	if err != nil {
		return nil, err
	}
	id, err := GenerateIdentity()
	if err != nil {
		return nil, err
	}
	pk := &partyKeys{peer: p, cred: cred, age: id}
	if HasSigningKey(p.Role) {
		if pk.sign, err = GenerateSigningKey(rnd); err != nil {
			return nil, err
		}
	}
	return pk, nil
}

func (pk *partyKeys) write(dir string, force bool) (PartyFiles, error) {
	rel := pk.peer.ID
	if err := os.MkdirAll(filepath.Join(dir, rel), 0o700); err != nil {
		return PartyFiles{}, fmt.Errorf("create party directory: %w", err)
	}
	pf := PartyFiles{
		Role:         pk.peer.Role,
		ID:           pk.peer.ID,
		URI:          pk.peer.String(),
		Cert:         filepath.Join(rel, PartyCertFile),
		Key:          filepath.Join(rel, PartyKeyFile),
		AgeIdentity:  filepath.Join(rel, AgeIdentityFile),
		AgeRecipient: pk.age.Recipient().String(),
		NotAfter:     pk.cred.Cert.NotAfter.UTC(),
	}
	if err := WriteCredential(filepath.Join(dir, pf.Cert), filepath.Join(dir, pf.Key), pk.cred, force); err != nil {
		return PartyFiles{}, err
	}
	if err := WriteIdentity(filepath.Join(dir, pf.AgeIdentity), pk.age, force); err != nil {
		return PartyFiles{}, err
	}
	if err := WriteRecipient(filepath.Join(dir, rel, AgeRecipientFile), pk.age.Recipient(), force); err != nil {
		return PartyFiles{}, err
	}
	if pk.sign != nil {
		pf.SigningKey = filepath.Join(rel, SigningKeyFile)
		pf.VerifyingKey = filepath.Join(rel, VerifyingKeyFile)
		if err := WriteSigningKey(filepath.Join(dir, pf.SigningKey), filepath.Join(dir, pf.VerifyingKey), pk.sign, force); err != nil {
			return PartyFiles{}, err
		}
	}
	return pf, nil
}
