package ledger

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// ErrCheckpoint reports a checkpoint that does not parse, is not signed by a
// quorum of auditors, or does not match the log.
var ErrCheckpoint = errors.New("ledger: bad checkpoint")

// Checkpoint is a commitment to the first Size entries of the log. Its text
// is the checkpoint format of transparency logs (C2SP tlog-checkpoint):
//
//	<origin>\n<size in decimal>\n<base64 root hash>\n
//
// and it is signed as a note (golang.org/x/mod/sumdb/note) by each auditor
// with its ed25519 key, under a key name equal to the auditor's party ID,
// as a timestamped cosignature (cosignature.go).
type Checkpoint struct {
	Origin string    `json:"origin"`
	Size   int64     `json:"size"`
	Root   tlog.Hash `json:"root"`
}

// Text returns the checkpoint's note text.
func (c Checkpoint) Text() []byte {
	return fmt.Appendf(nil, "%s\n%d\n%s\n", c.Origin, c.Size, base64.StdEncoding.EncodeToString(c.Root[:]))
}

// ParseCheckpoint parses a checkpoint text strictly: exactly the three lines
// of Text, a size without sign or leading zeros, a canonical base64 root.
func ParseCheckpoint(text []byte) (Checkpoint, error) {
	lines := strings.Split(string(text), "\n")
	if len(lines) != 4 || lines[3] != "" {
		return Checkpoint{}, fmt.Errorf("%w: want 3 lines (origin, size, root), each ending in a newline", ErrCheckpoint)
	}
	c := Checkpoint{Origin: lines[0]}
	if !validID(c.Origin) {
		return Checkpoint{}, fmt.Errorf("%w: origin %q is not an identifier", ErrCheckpoint, c.Origin)
	}
	n, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != lines[1] {
		return Checkpoint{}, fmt.Errorf("%w: size %q is not a canonical non-negative decimal", ErrCheckpoint, lines[1])
	}
	c.Size = n
	root, err := base64.StdEncoding.Strict().DecodeString(lines[2])
	if err != nil || len(root) != tlog.HashSize || base64.StdEncoding.EncodeToString(root) != lines[2] {
		return Checkpoint{}, fmt.Errorf("%w: root %q is not a base64 SHA-256 hash", ErrCheckpoint, lines[2])
	}
	copy(c.Root[:], root)
	return c, nil
}

// Checkpoint returns the checkpoint of the whole log. The log must have its
// genesis, which names the origin.
func (s *State) Checkpoint() (Checkpoint, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if !s.genesis {
		return Checkpoint{}, fmt.Errorf("%w: the log has no genesis yet, so no origin", ErrCheckpoint)
	}
	n := s.log.size()
	root, err := s.log.treeHash(n)
	if err != nil {
		return Checkpoint{}, err
	}
	return Checkpoint{Origin: s.origin, Size: n, Root: root}, nil
}

// VerifierKey returns the note verifier key ("<id>+<hash>+<key>") of an
// auditor's ed25519 public key. It is what a compliance officer pins.
func VerifierKey(id string, pub ed25519.PublicKey) (string, error) {
	if !validID(id) {
		return "", fmt.Errorf("ledger: %q is not a party id", id)
	}
	return note.NewEd25519VerifierKey(id, pub)
}

// NewCheckpointSigner returns the note signer of an auditor: key name id,
// ed25519 private key key. Its signatures are cosignature/v1 (see
// cosignature.go) stamped with at, the signing time in seconds since the
// Unix epoch, which the caller reads from its clock.
func NewCheckpointSigner(id string, key ed25519.PrivateKey, at int64) (note.Signer, error) {
	if len(key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("ledger: checkpoint key of %s is %d bytes, want an ed25519 private key", id, len(key))
	}
	if !validID(id) {
		return nil, fmt.Errorf("ledger: %q is not a party id", id)
	}
	if at < 0 {
		return nil, fmt.Errorf("ledger: checkpoint time %d is before the Unix epoch", at)
	}
	pub := key.Public().(ed25519.PublicKey)
	return &cosigner{name: id, hash: cosignatureKeyHash(id, pub), key: key, time: uint64(at)}, nil
}

// SignCheckpoint returns the checkpoint as a note signed by the signers.
func SignCheckpoint(c Checkpoint, signers ...note.Signer) ([]byte, error) {
	if _, err := ParseCheckpoint(c.Text()); err != nil {
		return nil, err
	}
	return note.Sign(&note.Note{Text: string(c.Text())}, signers...)
}

// AddSignatures adds signatures to a signed checkpoint, as each auditor signs
// the same checkpoint in turn. The existing signatures are kept unverified.
func AddSignatures(signed []byte, signers ...note.Signer) ([]byte, error) {
	text, err := checkpointText(signed)
	if err != nil {
		return nil, err
	}
	_, err = note.Open(signed, note.VerifierList())
	var unverified *note.UnverifiedNoteError
	if !errors.As(err, &unverified) {
		if err == nil {
			err = errors.New("no signatures")
		}
		return nil, fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	n := unverified.Note
	if n.Text != string(text) {
		return nil, fmt.Errorf("%w: note text differs", ErrCheckpoint)
	}
	return note.Sign(n, signers...)
}

// checkpointText returns the text of a signed note (before the blank line).
func checkpointText(signed []byte) ([]byte, error) {
	i := bytes.Index(signed, []byte("\n\n"))
	if i < 0 {
		return nil, fmt.Errorf("%w: not a signed note (no blank line before the signatures)", ErrCheckpoint)
	}
	return signed[:i+1], nil
}

// PeekCheckpoint parses the checkpoint inside a signed note without
// verifying any signature, to learn which auditor set must have signed it.
func PeekCheckpoint(signed []byte) (Checkpoint, error) {
	text, err := checkpointText(signed)
	if err != nil {
		return Checkpoint{}, err
	}
	return ParseCheckpoint(text)
}

// SignedCheckpoint is a checkpoint whose signatures were verified.
type SignedCheckpoint struct {
	Checkpoint
	Signers []string `json:"signers"` // auditor IDs whose signatures verified, sorted
	Quorum  int      `json:"quorum"`  // signatures needed
	// Times are the signers' cosignature times, seconds since the Unix
	// epoch; Time is the latest time by which a majority had signed (0
	// without a majority): how fresh the checkpoint is.
	Times map[string]int64 `json:"times"`
	Time  int64            `json:"time"`
}

// QuorumError reports a checkpoint signed by fewer auditors than a majority.
type QuorumError struct {
	Checkpoint Checkpoint
	Signers    []string
	Auditors   int
}

func (e *QuorumError) Error() string {
	return fmt.Sprintf("ledger: checkpoint of size %d is signed by %d of %d auditors %v; a majority (%d) must sign",
		e.Checkpoint.Size, len(e.Signers), e.Auditors, e.Signers, Quorum(e.Auditors))
}

// Quorum returns the majority of n auditors.
func Quorum(n int) int { return n/2 + 1 }

// OpenCheckpoint verifies a signed checkpoint against the verifier keys of
// all the auditors (see VerifierKey) and requires a majority of them to have
// signed. Signatures by other keys are ignored; a signature that claims an
// auditor's key and does not verify is an error.
func OpenCheckpoint(signed []byte, auditorKeys []string) (SignedCheckpoint, error) {
	vs, err := CheckpointVerifiers(auditorKeys)
	if err != nil {
		return SignedCheckpoint{}, err
	}
	return openCheckpoint(signed, vs)
}

// openCheckpoint is OpenCheckpoint with the auditors' keys parsed.
func openCheckpoint(signed []byte, vs []note.Verifier) (SignedCheckpoint, error) {
	c, err := PeekCheckpoint(signed)
	if err != nil {
		return SignedCheckpoint{}, err
	}
	sc := SignedCheckpoint{Checkpoint: c, Quorum: Quorum(len(vs))}
	n, err := note.Open(signed, note.VerifierList(vs...))
	var unverified *note.UnverifiedNoteError
	switch {
	case errors.As(err, &unverified):
		return sc, &QuorumError{Checkpoint: c, Auditors: len(vs)}
	case err != nil:
		return sc, fmt.Errorf("%w: %v", ErrCheckpoint, err)
	}
	sc.Times = map[string]int64{}
	for _, s := range n.Sigs {
		t, err := SignatureTime(s)
		if err != nil {
			return sc, err
		}
		sc.Signers = append(sc.Signers, s.Name)
		sc.Times[s.Name] = max(sc.Times[s.Name], t)
	}
	slices.Sort(sc.Signers)
	sc.Signers = slices.Compact(sc.Signers)
	sc.Time = quorumTime(sc.Times, sc.Quorum)
	if len(vs) == 0 || len(sc.Signers) < sc.Quorum {
		return sc, &QuorumError{Checkpoint: c, Signers: sc.Signers, Auditors: len(vs)}
	}
	return sc, nil
}

// AuditorKeys returns the verifier keys of the auditors registered by the
// first size entries: the set whose majority must sign a checkpoint of size.
func (s *State) AuditorKeys(size int64) ([]string, error) {
	var keys []string
	for _, p := range s.Auditors(size) {
		k, err := VerifierKey(p.ID, p.PublicKey)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, nil
}
