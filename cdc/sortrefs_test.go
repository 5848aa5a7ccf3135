package cdc

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSortRefs checks the radix sort of a batch's records against a sort
// by the same comparison: prefixes shared by all records, by many, and
// records that tie on the prefix and differ after it.
func TestSortRefs(t *testing.T) {
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 3))
		n := rng.IntN(3 * radixMin)
		refs := make([]rowRef, n)
		shared := rng.Uint64() &^ 0xffffff // the high bytes every prefix has
		for i := range refs {
			kp := shared | uint64(rng.IntN(1+rng.IntN(5000)))
			if seed%3 == 0 {
				kp = rng.Uint64()
			}
			refs[i] = rowRef{row: int32(i), kp: kp, k0: int32(rng.IntN(4)), sp: uint64(rng.IntN(3)), s0: int32(rng.IntN(3))}
		}
		// The comparison: by kp, then what the prefix leaves (k0 and sp
		// stand for the rest of the key and the sequence), then row.
		compare := func(x, y rowRef) int {
			if c := cmp.Compare(x.kp, y.kp); c != 0 {
				return c
			}
			if c := cmp.Compare(x.k0, y.k0); c != 0 {
				return c
			}
			if c := cmp.Compare(x.sp, y.sp); c != 0 {
				return c
			}
			return cmp.Compare(x.row, y.row)
		}
		want := slices.Clone(refs)
		slices.SortFunc(want, compare)
		var scratch []rowRef
		if seed%2 == 0 {
			scratch = make([]rowRef, 0, n/2) // too small: sortRefs makes its own
		}
		got, spare := sortRefs(slices.Clone(refs), scratch, compare)
		if !slices.Equal(got, want) {
			t.Fatalf("seed %d (%d refs): sorted differently", seed, n)
		}
		if n >= radixMin && (len(spare) != n || &spare[0] == &got[0]) {
			t.Fatalf("seed %d: the spare buffer is not the other one", seed)
		}
	}
}
