package render

import (
	"bytes"
	"cmp"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/flows/batch"
)

// Sort orders the rows of b by the columns at the indexes by, compared left
// to right, keeping the order of equal rows (a stable sort). NULL sorts
// before every value. Values compare by type: numbers numerically (a float
// NaN before every other number, -0 equal to 0), strings and bytes bytewise,
// timestamps and dates chronologically, decimals exactly, false before true.
// Every index in by must name a column of b.
func Sort(b *batch.Batch, by []int) {
	n := b.Len()
	if n < 2 || len(by) == 0 {
		return
	}
	perm := make([]int, n)
	for i := range perm {
		perm[i] = i
	}
	vecs := make([]*batch.Vector, len(by))
	for k, c := range by {
		vecs[k] = b.Vectors[c]
	}
	slices.SortStableFunc(perm, func(x, y int) int {
		for _, v := range vecs {
			if r := compare(v, x, y); r != 0 {
				return r
			}
		}
		return 0
	})
	for _, v := range b.Vectors {
		permute(v, perm)
	}
}

// compare compares rows i and j of v.
func compare(v *batch.Vector, i, j int) int {
	ni, nj := v.IsNull(i), v.IsNull(j)
	switch {
	case ni && nj:
		return 0
	case ni:
		return -1
	case nj:
		return 1
	}
	switch v.Type.Kind {
	case batch.KindInt64, batch.KindTimestamp, batch.KindDate:
		return cmp.Compare(v.Ints[i], v.Ints[j])
	case batch.KindFloat64:
		return cmp.Compare(v.Floats[i], v.Floats[j])
	case batch.KindBool:
		switch a, b := v.Bools[i], v.Bools[j]; {
		case a == b:
			return 0
		case !a:
			return -1
		}
		return 1
	case batch.KindString:
		return strings.Compare(v.Strs[i], v.Strs[j])
	case batch.KindBytes:
		return bytes.Compare(v.Bytes[i], v.Bytes[j])
	case batch.KindDecimal:
		return v.Decs[i].Cmp(v.Decs[j])
	case batch.KindArray:
		ilo, ihi := v.Array(i)
		jlo, jhi := v.Array(j)
		for ; ilo < ihi && jlo < jhi; ilo, jlo = ilo+1, jlo+1 {
			if c := compare(v.Elems, ilo, jlo); c != 0 {
				return c
			}
		}
		return cmp.Compare(ihi-ilo, jhi-jlo)
	}
	return 0
}

// permute reorders v so that its row k is the old row perm[k].
func permute(v *batch.Vector, perm []int) { *v = *v.Take(perm) }
