package render

import (
	"math"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/flows/batch"
)

func TestSortByType(t *testing.T) {
	cases := []struct {
		name string
		typ  batch.Type
		vals []cell // sorted column values; row i carries tag i
		want []int  // tags in sorted order
	}{
		{"int64", batch.Int64, []cell{int64(5), nil, int64(-3), int64(math.MaxInt64), int64(math.MinInt64), int64(0)}, []int{1, 4, 2, 5, 0, 3}},
		{"float64", batch.Float64, []cell{2.5, math.Inf(-1), nil, math.NaN(), -1e300, math.Inf(1), 0.0}, []int{2, 3, 1, 4, 6, 0, 5}},
		{"bool", batch.Bool, []cell{true, nil, false, true, false}, []int{1, 2, 4, 0, 3}},
		{"string bytewise", batch.String, []cell{"b", "B", "", nil, "ä", "a", "ab"}, []int{3, 2, 1, 5, 6, 0, 4}},
		{"bytes bytewise", batch.Bytes, []cell{[]byte{2}, []byte{}, nil, []byte{1, 255}, []byte{1}}, []int{2, 1, 4, 3, 0}},
		{"timestamp", batch.Timestamp, []cell{ts("2026-01-02T00:00:00Z"), ts("1969-12-31T23:59:59.999999Z"), nil, ts("2026-01-01T23:59:59.5Z")}, []int{2, 1, 3, 0}},
		{"date", batch.Date, []cell{day("2026-01-02"), nil, day("1900-03-01"), day("2000-02-29")}, []int{1, 2, 3, 0}},
		{"decimal exact", batch.Decimal(38, 2), []cell{"0.10", "-0.01", nil, "12345678901234567890.12", "12345678901234567890.11", "-12345678901234567890.12", "0.09"}, []int{2, 5, 1, 6, 0, 4, 3}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := batch.Schema{Columns: []batch.Column{{Name: "v", Type: tc.typ, Nullable: true}, {Name: "tag", Type: batch.Int64}}}
			rows := make([][]cell, len(tc.vals))
			for i, v := range tc.vals {
				rows[i] = []cell{v, int64(i)}
			}
			b := build(t, s, rows)
			Sort(b, []int{0})
			if err := b.Check(); err != nil {
				t.Fatal(err)
			}
			got := make([]int, b.Len())
			for i, tag := range b.Vectors[1].Ints {
				got[i] = int(tag)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("order %v, want %v", got, tc.want)
			}
			// The nulls moved with their rows.
			for i, tag := range got {
				if b.Vectors[0].IsNull(i) != (tc.vals[tag] == nil) {
					t.Fatalf("row %d (tag %d): null is %v", i, tag, b.Vectors[0].IsNull(i))
				}
			}
		})
	}
}

func TestSortStableAndMultiColumn(t *testing.T) {
	s := batch.Schema{Columns: []batch.Column{
		{Name: "k", Type: batch.String, Nullable: true},
		{Name: "seq", Type: batch.Int64, Nullable: true},
		{Name: "tag", Type: batch.Int64},
	}}
	rows := [][]cell{
		{"b", int64(2), int64(0)},
		{"a", nil, int64(1)},
		{nil, int64(9), int64(2)},
		{"b", int64(1), int64(3)},
		{"a", int64(1), int64(4)},
		{"b", int64(2), int64(5)}, // equal to tag 0: stays after it
		{nil, nil, int64(6)},
	}
	cases := []struct {
		name string
		by   []int
		want []int64
	}{
		{"key then seq", []int{0, 1}, []int64{6, 2, 1, 4, 3, 0, 5}},
		{"seq then key", []int{1, 0}, []int64{6, 1, 4, 3, 0, 5, 2}},
		{"key only keeps input order within a key", []int{0}, []int64{2, 6, 1, 4, 0, 3, 5}},
		{"no columns leaves the order", nil, []int64{0, 1, 2, 3, 4, 5, 6}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := build(t, s, rows)
			Sort(b, tc.by)
			if !slices.Equal(b.Vectors[2].Ints, tc.want) {
				t.Fatalf("order %v, want %v", b.Vectors[2].Ints, tc.want)
			}
		})
	}
}
