package teacher

import (
	"testing"

	"github.com/nzcfed/nzc/ml/data"
)

func TestPartsAreDisjointAndCover(t *testing.T) {
	const n = 103
	d := &data.Dataset{X: make([]float32, n), Y: make([]int, n), Shape: data.Shape{Height: 1, Width: 1, Channels: 1}, Classes: 2}
	for i := range n {
		d.X[i] = float32(i)
	}
	seen := map[float32]int{}
	for part := 1; part <= 3; part++ {
		p, err := Part(d, part, 3, 42)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range p.X {
			seen[x]++
		}
	}
	if len(seen) != n {
		t.Fatalf("the parts cover %d of %d examples", len(seen), n)
	}
	for x, c := range seen {
		if c != 1 {
			t.Fatalf("example %v is in %d parts", x, c)
		}
	}
	if _, err := Part(d, 4, 3, 42); err == nil {
		t.Error("part 4 of 3 accepted")
	}
}
