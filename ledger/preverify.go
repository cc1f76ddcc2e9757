package ledger

import (
	"crypto/ed25519"
	"crypto/sha256"
	"sync"
)

// Preverify checks, on up to workers goroutines, the signatures of commands about to be
// applied, against the keys their signers have registered now, and
// remembers those that verified, so that Apply, which must decide commands
// one at a time in log order, need not check them again. It changes no
// result: Apply still checks every signature it has not seen verified
// here under the same key, message and signature bytes (a command whose
// signer registers another key before it is applied is checked again), and
// a command that does not decode or whose signer is unknown is left to
// Apply to refuse. It also keeps each command as it decoded it, so that
// Apply does not decode the same bytes again. What Preverify remembers is
// dropped at its next call, so it holds at most one batch.
func (s *State) Preverify(cmds [][]byte, workers int) {
	type job struct {
		key ed25519.PublicKey
		msg []byte
		sig []byte
	}
	jobs := make([]job, 0, len(cmds))
	decoded := make(map[string]Command, len(cmds))
	s.mu.RLock()
	for _, b := range cmds {
		c, err := DecodeCommand(b)
		if err != nil {
			continue
		}
		decoded[string(b)] = c
		signer, ok := s.parties[c.Signer]
		if !ok {
			continue // a genesis, or an unknown signer: Apply decides
		}
		m, err := c.SignedMessage()
		if err != nil || len(signer.PublicKey) != ed25519.PublicKeySize || len(c.Signature) != signatureLen {
			continue
		}
		jobs = append(jobs, job{key: signer.PublicKey, msg: m, sig: c.Signature})
	}
	s.mu.RUnlock()

	ok := make([]bool, len(jobs))
	workers = max(1, min(workers, len(jobs)))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(jobs); i += workers {
				ok[i] = ed25519.Verify(jobs[i].key, jobs[i].msg, jobs[i].sig)
			}
		})
	}
	wg.Wait()

	s.sigs.mu.Lock()
	defer s.sigs.mu.Unlock()
	clear(s.sigs.ok)
	s.sigs.decoded = decoded
	for i, j := range jobs {
		if ok[i] {
			s.sigs.ok[sigDigest(j.key, j.msg, j.sig)] = struct{}{}
		}
	}
}

// sigMemo holds the signatures Preverify saw verify, each as the SHA-256 of
// its key, message and signature. Like the cost cache, it changes no
// result.
type sigMemo struct {
	mu      sync.Mutex
	ok      map[[32]byte]struct{}
	decoded map[string]Command // by the command's bytes
}

// decode is DecodeCommand, unless Preverify decoded the same bytes.
func (s *State) decode(cmd []byte) (Command, error) {
	s.sigs.mu.Lock()
	c, ok := s.sigs.decoded[string(cmd)]
	s.sigs.mu.Unlock()
	if ok {
		return c, nil
	}
	return DecodeCommand(cmd)
}

// sigDigest identifies a key, a message and a signature on it.
func sigDigest(key ed25519.PublicKey, msg, sig []byte) [32]byte {
	h := sha256.New()
	h.Write(key)
	h.Write(sig)
	h.Write(msg)
	var d [32]byte
	h.Sum(d[:0])
	return d
}

// verify is c.Verify(key), unless Preverify saw the same signature verify
// under the same key.
func (s *State) verify(c Command, key ed25519.PublicKey) bool {
	m, err := c.SignedMessage()
	if err != nil || len(key) != ed25519.PublicKeySize || len(c.Signature) != signatureLen {
		return false
	}
	s.sigs.mu.Lock()
	_, seen := s.sigs.ok[sigDigest(key, m, c.Signature)]
	s.sigs.mu.Unlock()
	return seen || ed25519.Verify(key, m, c.Signature)
}
