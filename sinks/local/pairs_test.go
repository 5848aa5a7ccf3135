package local

import (
	"path/filepath"
	"strings"
	"testing"
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
			pw, err := createPairs(path)
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
			p, err := readPairs(path)
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

// TestIsGone checks the lookup of removed and replaced identities: by key
// for SCD type 1, by key and sequence for SCD type 2.
func TestIsGone(t *testing.T) {
	mk := func(scd2 bool) *cdcChanges {
		c := &cdcChanges{scd2: scd2, removed: map[ident]struct{}{}, upserted: map[ident]struct{}{}}
		c.removed[c.id("r", "1")] = struct{}{}
		c.upKeys, c.upSeqs = []string{"u", "u", "v"}, []string{"2", "3", "4"}
		if !scd2 {
			c.scd1Upserts()
			return c
		}
		c.gone = map[string]struct{}{}
		var buf []byte
		for _, id := range []ident{{"r", "1"}, {"u", "2"}, {"u", "3"}, {"v", "4"}} {
			buf = c.idKey(buf[:0], id.key, id.seq)
			c.gone[string(buf)] = struct{}{}
		}
		return c
	}
	for _, tc := range []struct {
		name     string
		scd2     bool
		key, seq string
		want     bool
	}{
		{"scd1 removed, any sequence", false, "r", "9", true},
		{"scd1 upserted", false, "u", "0", true},
		{"scd1 untouched", false, "w", "1", false},
		{"scd1 key prefix", false, "", "u", false},
		{"scd2 removed version", true, "r", "1", true},
		{"scd2 other version", true, "r", "2", false},
		{"scd2 upserted version", true, "u", "3", true},
		{"scd2 untouched", true, "w", "1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf []byte
			if got := mk(tc.scd2).isGone(&buf, tc.key, tc.seq); got != tc.want {
				t.Fatalf("isGone(%q, %q) = %v, want %v", tc.key, tc.seq, got, tc.want)
			}
		})
	}
	c := mk(false)
	if len(c.upRows) != 2 || c.upRows[0] != 1 || c.upRows[1] != 2 {
		t.Fatalf("SCD type 1 rows that count: %v, want [1 2] (the last upsert of each key)", c.upRows)
	}
}
