package ledger

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

// Auditors sign checkpoints as timestamped cosignatures, the C2SP
// tlog-cosignature format (cosignature/v1) for ed25519 keys:
//
//	signature line:  — <auditor id> base64(key ID || timestamp || ed25519 signature)
//	key ID:          SHA-256(<auditor id> || "\n" || 0x04 || public key)[:4]
//	timestamp:       u64 big-endian, seconds since the Unix epoch
//	signed message:  "cosignature/v1\n" || "time <timestamp>\n" || checkpoint text
//
// The timestamp is the auditor's statement that, at that time, the
// checkpoint was a prefix of the log it held. It is what tells a verifier
// how fresh a checkpoint is: an export frozen at some time carries the
// signatures of then. The ledger reads no clock: the signer is given the
// time.
//
// The key an auditor is pinned by stays its ed25519 note verifier key
// (VerifierKey, algorithm 1); the cosignature verifier is derived from it.

// cosignatureAlg is the signature type byte of ed25519 cosignature/v1.
const cosignatureAlg = 0x04

// cosignatureLen is the length of a cosignature/v1 signature: the
// timestamp and the ed25519 signature.
const cosignatureLen = 8 + ed25519.SignatureSize

func cosignatureKeyHash(name string, pub ed25519.PublicKey) uint32 {
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte{'\n', cosignatureAlg})
	h.Write(pub)
	return binary.BigEndian.Uint32(h.Sum(nil))
}

func cosignatureMessage(t uint64, msg []byte) []byte {
	return append(fmt.Appendf(nil, "cosignature/v1\ntime %d\n", t), msg...)
}

// cosigner is a note.Signer of cosignature/v1 at a fixed time.
type cosigner struct {
	name string
	hash uint32
	key  ed25519.PrivateKey
	time uint64
}

func (s *cosigner) Name() string    { return s.name }
func (s *cosigner) KeyHash() uint32 { return s.hash }
func (s *cosigner) Sign(msg []byte) ([]byte, error) {
	sig := binary.BigEndian.AppendUint64(make([]byte, 0, cosignatureLen), s.time)
	return append(sig, ed25519.Sign(s.key, cosignatureMessage(s.time, msg))...), nil
}

// cosignatureVerifier is the note.Verifier of an auditor's cosignatures.
type cosignatureVerifier struct {
	name string
	hash uint32
	pub  ed25519.PublicKey
}

func (v *cosignatureVerifier) Name() string    { return v.name }
func (v *cosignatureVerifier) KeyHash() uint32 { return v.hash }
func (v *cosignatureVerifier) Verify(msg, sig []byte) bool {
	if len(sig) != cosignatureLen {
		return false
	}
	t := binary.BigEndian.Uint64(sig)
	if t > math.MaxInt64 {
		return false
	}
	return ed25519.Verify(v.pub, cosignatureMessage(t, msg), sig[8:])
}

// CheckpointVerifier returns the verifier of the checkpoint cosignatures
// of the auditor whose note verifier key (see VerifierKey) is vkey.
func CheckpointVerifier(vkey string) (note.Verifier, error) {
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return nil, fmt.Errorf("ledger: auditor key %q: %w", vkey, err)
	}
	// A valid ed25519 vkey is name+hash+base64(0x01 || 32-byte key).
	// (A name holds no '+'; the base64 may.)
	parts := strings.SplitN(vkey, "+", 3)
	if len(parts) != 3 {
		return nil, fmt.Errorf("ledger: auditor key %q is not name+hash+key", vkey)
	}
	raw, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil || len(raw) != 1+ed25519.PublicKeySize || raw[0] != 1 {
		return nil, fmt.Errorf("ledger: auditor key %q is not an ed25519 key", vkey)
	}
	pub := ed25519.PublicKey(raw[1:])
	return &cosignatureVerifier{name: v.Name(), hash: cosignatureKeyHash(v.Name(), pub), pub: pub}, nil
}

// CheckpointVerifiers returns the cosignature verifiers of the auditors
// whose verifier keys are vkeys, refusing two keys for one auditor.
func CheckpointVerifiers(vkeys []string) ([]note.Verifier, error) {
	var vs []note.Verifier
	names := map[string]bool{}
	for _, k := range vkeys {
		v, err := CheckpointVerifier(k)
		if err != nil {
			return nil, err
		}
		if names[v.Name()] {
			return nil, fmt.Errorf("ledger: two keys for auditor %s", v.Name())
		}
		names[v.Name()] = true
		vs = append(vs, v)
	}
	return vs, nil
}

// SignatureTime returns the timestamp of a cosignature/v1 note signature,
// in seconds since the Unix epoch. It does not verify the signature: use it
// on the signatures of a note that verified.
func SignatureTime(s note.Signature) (int64, error) {
	raw, err := base64.StdEncoding.DecodeString(s.Base64)
	if err != nil || len(raw) != 4+cosignatureLen {
		return 0, fmt.Errorf("%w: the signature of %s is not a cosignature/v1 (key ID, time, ed25519 signature)", ErrCheckpoint, s.Name)
	}
	t := binary.BigEndian.Uint64(raw[4:])
	if t > math.MaxInt64 {
		return 0, fmt.Errorf("%w: the signature of %s has time %d, beyond 2^63-1", ErrCheckpoint, s.Name, t)
	}
	return int64(t), nil
}

// quorumTime returns the latest time at which at least q of the signers
// had signed: the q-th newest of times. A minority cannot move it forward
// by stamping a time of its choosing. It is 0 if fewer than q signed.
func quorumTime(times map[string]int64, q int) int64 {
	if q <= 0 || len(times) < q {
		return 0
	}
	ts := make([]int64, 0, len(times))
	for _, t := range times {
		ts = append(ts, t)
	}
	slices.Sort(ts)
	return ts[len(ts)-q]
}

// FormatAge returns an age in seconds as people read it.
func FormatAge(seconds int64) string {
	neg := seconds < 0
	if neg {
		seconds = -seconds
	}
	var s string
	switch {
	case seconds < 120:
		s = strconv.FormatInt(seconds, 10) + "s"
	case seconds < 3600:
		s = fmt.Sprintf("%dm%02ds", seconds/60, seconds%60)
	case seconds < 2*86400:
		s = fmt.Sprintf("%dh%02dm", seconds/3600, seconds%3600/60)
	default:
		s = fmt.Sprintf("%dd%02dh", seconds/86400, seconds%86400/3600)
	}
	if neg {
		return "-" + s + " (in the future)"
	}
	return s
}
