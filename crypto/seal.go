package crypto

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"

	"filippo.io/age"
)

// Identity is an age X25519 identity: the private key that opens payloads
// sealed to its [Recipient].
type Identity struct {
	x *age.X25519Identity
}

// Recipient is an age X25519 recipient, a public key of the form age1….
type Recipient struct {
	x *age.X25519Recipient
}

// GenerateIdentity creates a new random X25519 identity.
func GenerateIdentity() (*Identity, error) {
	x, err := age.GenerateX25519Identity()
	if err != nil {
		return nil, fmt.Errorf("generate age identity: %w", err)
	}
	return &Identity{x: x}, nil
}

// ParseIdentity parses an AGE-SECRET-KEY-1… string.
func ParseIdentity(s string) (*Identity, error) {
	x, err := age.ParseX25519Identity(strings.TrimSpace(s))
	if err != nil {
		// age's message never includes the key itself.
		return nil, fmt.Errorf("parse age identity: %w", err)
	}
	return &Identity{x: x}, nil
}

// Recipient returns the public key that seals payloads for i.
func (i *Identity) Recipient() *Recipient { return &Recipient{x: i.x.Recipient()} }

// SecretString returns the identity's AGE-SECRET-KEY-1… encoding. It is a
// secret: write it only to a private file.
func (i *Identity) SecretString() string { return i.x.String() }

// String describes the identity by its public key, never the secret.
func (i *Identity) String() string { return "age identity for " + i.Recipient().String() }

// ParseRecipient parses an age1… public key.
func ParseRecipient(s string) (*Recipient, error) {
	x, err := age.ParseX25519Recipient(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("parse age recipient: %w", err)
	}
	return &Recipient{x: x}, nil
}

// String returns the recipient's age1… encoding.
func (r *Recipient) String() string { return r.x.String() }

// Equal reports whether r and o are the same public key.
func (r *Recipient) Equal(o *Recipient) bool { return r.String() == o.String() }

// Errors of Seal and Open.
var (
	ErrNoRecipients = errors.New("seal: no recipients given")
	// ErrNotForMe is matched (errors.Is) by *NotForMeError.
	ErrNotForMe = errors.New("payload was not sealed to this identity")
	// ErrMalformed is matched when a sealed payload is not a valid age file
	// or was altered.
	ErrMalformed = errors.New("sealed payload is malformed or was tampered with")
)

// NotForMeError says a payload was sealed to other recipients than the
// identity that tried to open it.
type NotForMeError struct {
	// Have is the recipient of the identity that was tried.
	Have string
	// Recipients is how many recipients the payload was sealed to.
	Recipients int
}

func (e *NotForMeError) Error() string {
	return fmt.Sprintf("payload was sealed to %d other recipient(s), not to %s: open it with the age identity of one of its intended recipients (check which party's age.key is configured)",
		e.Recipients, e.Have)
}

// Is reports whether target is ErrNotForMe.
func (e *NotForMeError) Is(target error) bool { return target == ErrNotForMe }

// Seal encrypts plaintext with age so that any one of the recipients can
// open it. Recipients may repeat; the set is what counts.
func Seal(plaintext []byte, recipients ...*Recipient) ([]byte, error) {
	if len(recipients) == 0 {
		return nil, ErrNoRecipients
	}
	rs := make([]age.Recipient, 0, len(recipients))
	seen := make(map[string]bool, len(recipients))
	for _, r := range recipients {
		if r == nil || r.x == nil {
			return nil, errors.New("seal: nil recipient")
		}
		if s := r.String(); !seen[s] {
			seen[s] = true
			rs = append(rs, r.x)
		}
	}
	var buf bytes.Buffer
	buf.Grow(len(plaintext) + 200*len(rs) + 64)
	w, err := age.Encrypt(&buf, rs...)
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	if _, err := w.Write(plaintext); err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	return buf.Bytes(), nil
}

// Open decrypts a payload made by Seal. A payload for other recipients gives
// a *NotForMeError; a corrupted or altered one an error matching ErrMalformed.
func Open(ciphertext []byte, id *Identity) ([]byte, error) {
	plain, _, err := OpenFrom(ciphertext, id, 0)
	return plain, err
}

// OpenFrom is Open trying the payload's recipient stanza at index first
// before the others, and it returns the index of the stanza that opened it.
// Each stanza tried costs a key agreement, so a party that opens many
// payloads sealed to the same recipients in the same order — a hospital
// opening a student's batches, each sealed to every hospital — passes the
// index of the last one and pays one key agreement a payload, not one per
// hospital sealed to before it. The result is Open's whatever first is.
func OpenFrom(ciphertext []byte, id *Identity, first int) (plain []byte, at int, err error) {
	if id == nil || id.x == nil {
		return nil, 0, errors.New("open: nil identity")
	}
	h := &hintedIdentity{x: id.x, first: first}
	r, err := age.Decrypt(bytes.NewReader(ciphertext), h)
	if err != nil {
		var nm *age.NoIdentityMatchError
		if errors.As(err, &nm) {
			return nil, 0, &NotForMeError{Have: id.Recipient().String(), Recipients: len(nm.StanzaTypes)}
		}
		return nil, 0, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	// The payload is shorter than the ciphertext: one allocation.
	out := bytes.NewBuffer(make([]byte, 0, len(ciphertext)))
	if _, err := out.ReadFrom(r); err != nil {
		return nil, 0, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return out.Bytes(), h.at, nil
}

// hintedIdentity unwraps with x, trying the stanza at index first before
// the others in their order, and records the index that unwrapped.
type hintedIdentity struct {
	x         *age.X25519Identity
	first, at int
}

func (h *hintedIdentity) Unwrap(stanzas []*age.Stanza) ([]byte, error) {
	try := func(i int) ([]byte, error) {
		key, err := h.x.Unwrap(stanzas[i : i+1])
		if err == nil {
			h.at = i
		}
		return key, err
	}
	// Any error but success at first leaves the stanzas to be tried in
	// their order, as age tries them, so a malformed stanza fails the
	// payload where age would.
	skip := -1
	if h.first > 0 && h.first < len(stanzas) {
		key, err := try(h.first)
		if err == nil {
			return key, nil
		}
		if errors.Is(err, age.ErrIncorrectIdentity) {
			skip = h.first
		}
	}
	for i := range stanzas {
		if i == skip {
			continue
		}
		if key, err := try(i); !errors.Is(err, age.ErrIncorrectIdentity) {
			return key, err
		}
	}
	return nil, age.ErrIncorrectIdentity
}

// WriteIdentity writes an identity file in the format of age-keygen (mode
// 0600), with its public key in a comment.
func WriteIdentity(path string, id *Identity, force bool) error {
	data := "# public key: " + id.Recipient().String() + "\n" + id.SecretString() + "\n"
	return WriteFile(path, []byte(data), PrivateFileMode, force)
}

// LoadIdentity reads an age identity file holding exactly one X25519
// identity, after checking the file's permissions.
func LoadIdentity(path string) (*Identity, error) {
	data, err := ReadPrivateFile(path)
	if err != nil {
		return nil, err
	}
	ids, err := age.ParseIdentities(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(ids) != 1 {
		return nil, fmt.Errorf("%s: holds %d identities, want exactly one", path, len(ids))
	}
	x, ok := ids[0].(*age.X25519Identity)
	if !ok {
		return nil, fmt.Errorf("%s: not an X25519 identity (AGE-SECRET-KEY-1…)", path)
	}
	return &Identity{x: x}, nil
}

// WriteRecipient writes a recipient file (one age1… line, mode 0644).
func WriteRecipient(path string, r *Recipient, force bool) error {
	return WriteFile(path, []byte(r.String()+"\n"), PublicFileMode, force)
}

// LoadRecipient reads a file holding one age1… recipient; comment lines
// starting with '#' and blank lines are ignored.
func LoadRecipient(path string) (*Recipient, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read age recipient: %w", err)
	}
	var found []string
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") {
			found = append(found, line)
		}
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("%s: holds %d recipients, want exactly one", path, len(found))
	}
	r, err := ParseRecipient(found[0])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}
