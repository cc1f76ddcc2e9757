package teacher

import (
	"crypto/sha256"
	"encoding/binary"
	"math"
	"testing"

	"github.com/nzcfed/nzc/protocol/nzcpb"
)

// The digest a hospital records its votes under is SHA-256 of the batch's
// shape and then every value, big-endian: whatever way the bytes reach the
// hash, around its chunk boundaries too.
func TestQueryDigestHashesEveryValueInOrder(t *testing.T) {
	for _, n := range []int{0, 1, 1023, 1024, 1025, 2048, 5000} {
		vals := make([]float32, n)
		for i := range vals {
			vals[i] = float32(i)*0.25 - 7
		}
		f := &nzcpb.Features{NumQueries: uint32(max(n, 1)), FeatureDim: 1, Values: vals}
		want := make([]byte, 8, 8+4*n)
		binary.BigEndian.PutUint32(want[:4], f.NumQueries)
		binary.BigEndian.PutUint32(want[4:], f.FeatureDim)
		for _, v := range vals {
			want = binary.BigEndian.AppendUint32(want, math.Float32bits(v))
		}
		if got := queryDigest(f); got != sha256.Sum256(want) {
			t.Errorf("%d values: digest %x, want %x", n, got, sha256.Sum256(want))
		}
	}
}
