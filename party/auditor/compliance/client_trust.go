package compliance

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/sumdb/note"

	"github.com/nzcfed/nzc/crypto"
	"github.com/nzcfed/nzc/ledger"
)

// This file is what a client of the compliance API trusts from outside any
// auditor: the auditors' keys from a federation directory (or keys given
// by hand), and the last checkpoint it
// verified, kept so that a log rolled back or rewritten behind it fails.

// KeptCheckpointPath is the file in dir that keeps the last checkpoint
// verified for the federation whose auditors' keys are trusted: one file
// per set of auditor keys.
func KeptCheckpointPath(dir string, trusted []string) string {
	h := sha256.Sum256([]byte(strings.Join(slices.Sorted(slices.Values(trusted)), "\n")))
	return filepath.Join(dir, hex.EncodeToString(h[:8])+".checkpoint")
}

// KeepLatest writes the largest of a verified export's signed checkpoints
// (ledger.Report.SignedCheckpoints) to path, unless the checkpoint kept
// there is larger, and returns the kept size. The export was verified to
// extend what path held.
func KeepLatest(path string, checkpoints [][]byte) (int64, error) {
	var best []byte
	var size int64 = -1
	for _, b := range checkpoints {
		if c, err := ledger.PeekCheckpoint(b); err == nil && c.Size > size {
			best, size = b, c.Size
		}
	}
	kept, err := KeptCheckpoint(path)
	if err != nil {
		return 0, err
	}
	if best == nil || (kept != nil && kept.Size > size) {
		if kept != nil {
			return kept.Size, nil
		}
		return 0, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return 0, fmt.Errorf("keep the checkpoint: %w", err)
	}
	if err := crypto.WriteFile(path, best, crypto.PublicFileMode, true); err != nil {
		return 0, fmt.Errorf("keep the checkpoint: %w", err)
	}
	return size, nil
}

// TrustedKeys returns the note verifier keys of the auditors named by a
// federation directory (none when fedDir is "") and by values, as given to
// --keys: verifier keys, files of verifier keys (one a line), or auditors'
// sign.pub files (the auditor's id is the name of its directory).
func TrustedKeys(fedDir string, values []string) ([]string, error) {
	var out []string
	if fedDir != "" {
		m, err := crypto.LoadManifest(fedDir)
		if err != nil {
			return nil, err
		}
		if out, err = AuditorKeys(m); err != nil {
			return nil, fmt.Errorf("federation %s: %w", fedDir, err)
		}
	}
	for _, v := range values {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		if _, err := note.NewVerifier(v); err == nil {
			out = append(out, v)
			continue
		}
		b, err := os.ReadFile(v)
		if err != nil {
			return nil, fmt.Errorf("--keys %q is neither a verifier key nor a readable file: %w", v, err)
		}
		if bytes.Contains(b, []byte("-----BEGIN")) {
			k, err := auditorKeyFile(filepath.Base(filepath.Dir(v)), v)
			if err != nil {
				return nil, err
			}
			out = append(out, k)
			continue
		}
		n := 0
		for _, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			if _, err := note.NewVerifier(line); err != nil {
				return nil, fmt.Errorf("%s: %q is not a verifier key: %w", v, line, err)
			}
			out = append(out, line)
			n++
		}
		if n == 0 {
			return nil, fmt.Errorf("%s holds no verifier keys", v)
		}
	}
	return out, nil
}

// AuditorKeys returns the note verifier keys (ledger.VerifierKey) of the
// federation's auditors, from their public signing keys in the manifest:
// what the aggregator, the students and compliance officers pin to check
// checkpoints and receipts.
func AuditorKeys(m *crypto.Manifest) ([]string, error) {
	auditors := m.ByRole(crypto.RoleAuditor)
	if len(auditors) == 0 {
		return nil, errors.New("the federation lists no auditors")
	}
	var out []string
	for _, a := range auditors {
		if a.VerifyingKey == "" {
			return nil, fmt.Errorf("auditor %s has no verifying key in %s", a.ID, crypto.ManifestFile)
		}
		k, err := auditorKeyFile(a.ID, m.Path(a.VerifyingKey))
		if err != nil {
			return nil, err
		}
		out = append(out, k)
	}
	return out, nil
}

// auditorKeyFile returns the verifier key of auditor id from its sign.pub.
func auditorKeyFile(id, path string) (string, error) {
	pub, err := crypto.LoadPublicKey(path)
	if err != nil {
		return "", fmt.Errorf("auditor %s: %w", id, err)
	}
	k, err := ledger.VerifierKey(id, ed25519.PublicKey(pub))
	if err != nil {
		return "", fmt.Errorf("auditor %s (key %s): %w", id, path, err)
	}
	return k, nil
}

// KeptCheckpoint reads the checkpoint a --save-checkpoint file already
// holds: nil when there is no file yet. Its signatures were checked when
// it was saved; what matters now is that the next one extends it.
func KeptCheckpoint(path string) (*ledger.Checkpoint, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the kept checkpoint: %w", err)
	}
	c, err := ledger.PeekCheckpoint(b)
	if err != nil {
		return nil, fmt.Errorf("%s holds no checkpoint (%w): move it away, or save to another file", path, err)
	}
	return &c, nil
}
