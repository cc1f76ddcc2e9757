package data

import (
	"errors"
	"fmt"
	"math/rand/v2"
)

// ErrPartition reports a partition that cannot be made.
var ErrPartition = errors.New("cannot partition")

// Partition splits the indices [0, n) into disjoint shards, first by hospital
// and then by teacher: teachers[h] is the number of teachers of hospital h.
// The indices are shuffled with a ChaCha8 stream seeded by seed; hospital h
// then receives a contiguous block of the shuffled order whose size is
// proportional to its number of teachers, and each block is cut into equal
// teacher shards (sizes differ by at most one). The result is indexed
// [hospital][teacher] and is the same for the same (n, teachers, seed).
// Every index lands in exactly one shard; a shard is never empty.
func Partition(n int, teachers []int, seed uint64) ([][][]int, error) {
	total := 0
	for h, k := range teachers {
		if k <= 0 {
			return nil, fmt.Errorf("%w: hospital %d has %d teachers, want at least 1", ErrPartition, h, k)
		}
		total += k
	}
	if total == 0 {
		return nil, fmt.Errorf("%w: no teachers", ErrPartition)
	}
	if n < total {
		return nil, fmt.Errorf("%w: %d examples for %d teachers; every teacher needs at least one", ErrPartition, n, total)
	}
	perm := Permutation(n, seed)
	// Shard t (over all hospitals, in order) gets perm[start(t):start(t+1)]
	// with start(t) = t*n/total: equal shards, grouped by hospital.
	out := make([][][]int, len(teachers))
	t := 0
	for h, k := range teachers {
		out[h] = make([][]int, k)
		for j := range k {
			lo, hi := t*n/total, (t+1)*n/total
			out[h][j] = perm[lo:hi:hi]
			t++
		}
	}
	return out, nil
}

// Permutation returns a permutation of [0, n) determined by seed.
func Permutation(n int, seed uint64) []int {
	var key [32]byte
	for i := range 8 {
		key[i] = byte(seed >> (8 * i))
	}
	copy(key[8:], "nzc/ml/data.Permutation")
	r := rand.New(rand.NewChaCha8(key))
	return r.Perm(n)
}
