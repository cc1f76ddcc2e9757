package ledger

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"sync"
)

// Preverify checks, on up to workers goroutines, the signatures of commands
// about to be applied, against the keys their signers have registered now,
// and remembers those that verified, so that Apply, which must decide
// commands one at a time in log order, need not check them again. It also
// keeps each command as it decoded it, so that Apply does not decode the
// same bytes again. It changes no result: a command's bytes hold its message
// and signature, and Apply skips only the check of a signature Preverify saw
// verify in the same bytes under the same key (a command whose signer
// registers another key before it is applied is checked again); a command
// that does not decode or whose signer is unknown is left to Apply to
// refuse. What Preverify remembers is dropped at its next call, so it holds
// at most one batch.
func (s *State) Preverify(cmds [][]byte, workers int) {
	type job struct {
		cmd string
		key ed25519.PublicKey
		msg []byte
		sig []byte
	}
	memo := make(map[string]decoded, len(cmds))
	var jobs []job
	s.mu.RLock()
	for _, b := range cmds {
		c, err := DecodeCommand(b)
		if err != nil {
			continue
		}
		memo[string(b)] = decoded{cmd: c}
		signer, ok := s.parties[c.Signer]
		if !ok {
			continue // a genesis, or an unknown signer: Apply decides
		}
		if s.checks.has(sha256.Sum256(b), signer.PublicKey) { // Check saw it verify
			memo[string(b)] = decoded{cmd: c, verifiedWith: signer.PublicKey}
			continue
		}
		m, err := c.SignedMessage()
		if err != nil || len(signer.PublicKey) != ed25519.PublicKeySize || len(c.Signature) != signatureLen {
			continue
		}
		jobs = append(jobs, job{cmd: string(b), key: signer.PublicKey, msg: m, sig: c.Signature})
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
	for i, j := range jobs {
		if ok[i] {
			d := memo[j.cmd]
			d.verifiedWith = j.key
			memo[j.cmd] = d
		}
	}
	s.pre.mu.Lock()
	s.pre.memo = memo
	s.pre.mu.Unlock()
}

// preverified holds what Preverify learnt of its batch, by each command's
// bytes. Like the cost cache, it changes no result.
type preverified struct {
	mu   sync.Mutex
	memo map[string]decoded
}

// decoded is a command as Preverify decoded it, and the key its signature
// verified with (nil if none did).
type decoded struct {
	cmd          Command
	verifiedWith ed25519.PublicKey
}

// decode is DecodeCommand, unless Preverify decoded the same bytes: then
// it also returns the key the command's signature verified with there (nil
// if none did).
func (s *State) decode(cmd []byte) (Command, ed25519.PublicKey, error) {
	s.pre.mu.Lock()
	d, ok := s.pre.memo[string(cmd)]
	s.pre.mu.Unlock()
	if ok {
		return d.cmd, d.verifiedWith, nil
	}
	c, err := DecodeCommand(cmd)
	return c, nil, err
}

// verify is c.Verify(key), unless the signature already verified with key
// (verifiedWith, from decode).
func verify(c Command, key, verifiedWith ed25519.PublicKey) bool {
	return (verifiedWith != nil && bytes.Equal(verifiedWith, key)) || c.Verify(key)
}

// verified is verify, remembering a signature that verified from scratch
// (by its command's digest and the key), so that the same bytes, checked by
// a proposer with Check and then applied, are verified once.
func (s *State) verified(cmd []byte, c Command, key, verifiedWith ed25519.PublicKey) bool {
	if verifiedWith != nil && bytes.Equal(verifiedWith, key) {
		return true
	}
	d := sha256.Sum256(cmd)
	if s.checks.has(d, key) {
		return true
	}
	if !c.Verify(key) {
		return false
	}
	s.checks.add(d, key)
	return true
}

// maxCheckedSigs bounds the signatures checkedSigs remembers: a few batches'
// worth of commands checked before they are proposed.
const maxCheckedSigs = 8192

// checkedSigs remembers, by command digest, the keys signatures verified
// with lately, the oldest forgotten first. Like the preverified batch, it
// changes no result.
type checkedSigs struct {
	mu    sync.Mutex
	keys  map[[32]byte]ed25519.PublicKey
	order [][32]byte // insertion order, a ring once full
	next  int
}

func (c *checkedSigs) has(d [32]byte, key ed25519.PublicKey) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	k, ok := c.keys[d]
	return ok && bytes.Equal(k, key)
}

func (c *checkedSigs) add(d [32]byte, key ed25519.PublicKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.keys[d]; ok {
		return
	}
	if len(c.order) < maxCheckedSigs {
		c.order = append(c.order, d)
	} else {
		delete(c.keys, c.order[c.next])
		c.order[c.next] = d
		c.next = (c.next + 1) % maxCheckedSigs
	}
	c.keys[d] = key
}
