package local

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestMerged checks the merge of an output's segments against a stable
// sort of all their rows: identity order, ties in segment then row order,
// whether a segment comes sorted or not.
func TestMerged(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 2))
		segs := make([]segment, rng.IntN(12))
		var all []rowRef
		for i := range segs {
			n := rng.IntN(30)
			keys, seqs := make([]string, n), make([]string, n)
			for r := range n {
				keys[r], seqs[r] = fmt.Sprint("k", rng.IntN(10)), fmt.Sprint(rng.IntN(3))
				all = append(all, rowRef{int32(i), int32(r)})
			}
			if rng.IntN(2) == 0 {
				// Sorted, as the files this package writes.
				order := make([]int, n)
				for r := range order {
					order[r] = r
				}
				slices.SortStableFunc(order, func(a, b int) int { return compareIdent(keys[a], seqs[a], keys[b], seqs[b]) })
				keys, seqs = gather(keys, order), gather(seqs, order)
			}
			segs[i] = segment{keys: keys, seqs: seqs}
		}
		slices.SortStableFunc(all, func(a, b rowRef) int {
			x, y := segs[a.seg], segs[b.seg]
			return compareIdent(x.keys[a.row], x.seqs[a.row], y.keys[b.row], y.seqs[b.row])
		})
		if got := merged(segs); !slices.Equal(got, all) {
			t.Fatalf("seed %d: merged %v, want %v", seed, got, all)
		}
	}
}
