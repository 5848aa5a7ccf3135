package local

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/sinks/local/fsys"
)

// TestPairsPresized checks that a pairs file is read into slices sized by
// its pair count, for files of every shape of pair.
func TestPairsPresized(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pairs [][2]string // "\x00absent" as b writes an absent b
	}{
		{"none", nil},
		{"one", [][2]string{{"k", "v"}}},
		{"empty strings", [][2]string{{"", ""}, {"", ""}}},
		{"absent values", [][2]string{{"a", "\x00absent"}, {"b", "1"}, {"c", "\x00absent"}}},
		{"long", [][2]string{{strings.Repeat("k", 200), strings.Repeat("\x80", 20000)}, {"x", "y"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "p")
			pw, err := createPairs(fsys.OS{}, path)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range tc.pairs {
				if p[1] == "\x00absent" {
					pw.addValue(p[0], nil)
				} else {
					pw.add(p[0], p[1])
				}
			}
			if _, err := pw.close(); err != nil {
				t.Fatal(err)
			}
			p, err := readPairs(fsys.OS{}, path)
			if err != nil {
				t.Fatal(err)
			}
			if p.len() != len(tc.pairs) || cap(p.a) != len(tc.pairs) || cap(p.b) != len(tc.pairs) {
				t.Fatalf("%d pairs (capacities %d, %d), want %d", p.len(), cap(p.a), cap(p.b), len(tc.pairs))
			}
			for i, want := range tc.pairs {
				absent := want[1] == "\x00absent"
				gotAbsent := p.absent != nil && p.absent[i]
				if p.a[i] != want[0] || gotAbsent != absent || (!absent && p.b[i] != want[1]) {
					t.Fatalf("pair %d: %q %q (absent %v), want %q", i, p.a[i], p.b[i], gotAbsent, want)
				}
			}
		})
	}
}

// TestGoneCursor checks the lookup of removed and replaced identities: by
// key for SCD type 1, by key and sequence for SCD type 2; for rows in
// identity order and out of it.
func TestGoneCursor(t *testing.T) {
	mk := func(scd2 bool) *cdcChanges {
		// Removals and upserts out of order, a key removed and upserted, an
		// identity upserted twice.
		return newChanges(scd2, []string{"r", "u"}, []string{"1", "3"},
			[]string{"v", "u", "u", "v"}, []string{"4", "2", "3", "4"})
	}
	type row struct {
		key, seq string
		want     bool
	}
	for _, tc := range []struct {
		name string
		scd2 bool
		rows []row
	}{
		{"scd1", false, []row{{"", "u", false}, {"q", "1", false}, {"r", "9", true}, {"u", "0", true}, {"v", "1", true}, {"w", "1", false}}},
		{"scd2", true, []row{{"r", "1", true}, {"r", "2", false}, {"u", "1", false}, {"u", "2", true}, {"u", "3", true}, {"v", "3", false}, {"v", "4", true}, {"w", "1", false}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mk(tc.scd2)
			check := func(order []int) {
				g := goneCursor{gone: c.gone, scd2: tc.scd2}
				for _, i := range order {
					r := tc.rows[i]
					if got := g.has(r.key, r.seq); got != r.want {
						t.Fatalf("order %v: has(%q, %q) = %v, want %v", order, r.key, r.seq, got, r.want)
					}
				}
			}
			inOrder := make([]int, len(tc.rows))
			for i := range inOrder {
				inOrder[i] = i
			}
			check(inOrder)
			reversed := slices.Clone(inOrder)
			slices.Reverse(reversed)
			check(reversed)
			check([]int{3, 0, 4, 1, 5, 2})
		})
	}
	c := mk(false)
	if want := []ident{{key: "r"}, {key: "u"}, {key: "v"}}; !slices.Equal(c.gone, want) {
		t.Fatalf("SCD type 1 gone %v, want %v", c.gone, want)
	}
	if want := []int{2, 3}; !slices.Equal(c.upRows, want) {
		t.Fatalf("SCD type 1 rows that count: %v, want %v (the last upsert of each key)", c.upRows, want)
	}
	c = mk(true)
	if want := []ident{{"r", "1"}, {"u", "2"}, {"u", "3"}, {"v", "4"}}; !slices.Equal(c.gone, want) {
		t.Fatalf("SCD type 2 gone %v, want %v", c.gone, want)
	}
	if want := []int{1, 2, 3}; !slices.Equal(c.upRows, want) {
		t.Fatalf("SCD type 2 rows that count: %v, want %v (the last upsert of each identity)", c.upRows, want)
	}
}
