package local

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
)

var verSchema = batch.Schema{Columns: []batch.Column{
	{Name: "id", Type: batch.Int64},
	{Name: "name", Type: batch.String},
	{Name: "__START_AT", Type: batch.Int64},
	{Name: "__END_AT", Type: batch.Int64, Nullable: true},
}}

var verTable = sinks.Table{Name: "ver", Schema: verSchema, Kind: sinks.KindSCD2, Keys: []string{"id"}}

// ver is a version of a key of the ver table; end 0 is NULL (current).
type ver struct {
	id         int64
	name       string
	start, end int64
}

func (v ver) ident() ident { return ident{ck(v.id), cs(v.start)} }

// verChange is one load of changes to the ver table.
type verChange struct{ up, rm []ver }

func verRows(vs []ver) (*batch.Batch, []string, []string) {
	b := batch.New(verSchema, len(vs))
	var keys, seqs []string
	for _, v := range vs {
		b.Vectors[0].AppendInt(v.id)
		b.Vectors[1].AppendString(v.name)
		b.Vectors[2].AppendInt(v.start)
		if v.end == 0 {
			b.Vectors[3].AppendNull()
		} else {
			b.Vectors[3].AppendInt(v.end)
		}
		keys = append(keys, ck(v.id))
		seqs = append(seqs, cs(v.start))
	}
	return b, keys, seqs
}

func commitVer(ctx context.Context, s *Sink, c verChange) error {
	ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: nextLoadID(), Pipeline: "p", Flow: "scd2", Targets: []string{verTable.Name}})
	if err != nil {
		return err
	}
	cl := ld.(sinks.CDCLoad)
	if len(c.rm) > 0 {
		b, k, q := verRows(c.rm)
		if err := cl.Remove(ctx, verTable.Name, b, k, q); err != nil {
			return err
		}
	}
	if len(c.up) > 0 {
		b, k, q := verRows(c.up)
		if err := cl.Upsert(ctx, verTable.Name, b, k, q); err != nil {
			return err
		}
	}
	return ld.Commit(ctx, sinks.Commit{})
}

// verModel is the expected content of the ver table.
type verModel map[ident]ver

func (m verModel) apply(c verChange) {
	for _, v := range c.rm {
		delete(m, v.ident())
	}
	for _, v := range c.up {
		m[v.ident()] = v
	}
}

// checkVer compares the table's rows (every file of its folder) with the
// model, and checks the layout: current rows only in current files, closed
// ones only in history files, at most maxHistoryFiles history files per
// bucket, sidecars exact, sequence ranges holding the files' rows.
func checkVer(t *testing.T, s *Sink, want verModel) {
	t.Helper()
	if err := verProblem(s, want); err != nil {
		t.Fatal(err)
	}
}

// verProblem is checkVer's check: the first problem it finds.
func verProblem(s *Sink, want verModel) error {
	b, err := s.Scan(context.Background(), verTable.Name)
	if err != nil {
		return err
	}
	got := verModel{}
	for i := range b.Len() {
		v := ver{id: b.Vectors[0].Ints[i], name: b.Vectors[1].Strs[i], start: b.Vectors[2].Ints[i]}
		if !b.Vectors[3].IsNull(i) {
			v.end = b.Vectors[3].Ints[i]
		}
		if _, dup := got[v.ident()]; dup {
			return fmt.Errorf("version %+v twice", v)
		}
		got[v.ident()] = v
	}
	if len(got) != len(want) {
		return fmt.Errorf("%d versions, want %d", len(got), len(want))
	}
	for id, w := range want {
		if g, ok := got[id]; !ok || g != w {
			return fmt.Errorf("version %v is %+v (present %v), want %+v", id, g, ok, w)
		}
	}
	m, err := s.current(verTable.Name)
	if err != nil {
		return err
	}
	hist := map[outKey]int{}
	for _, f := range m.Files {
		ids, err := readPairs(s.disk, filepath.Join(s.lay.idsDir(verTable.Name, m.Version), f.Name+idsSuffix))
		if err != nil {
			return err
		}
		rows := batch.New(verSchema, 0)
		if err := readFile(s.disk, filepath.Join(s.lay.versionDir(verTable.Name, m.Version), f.Name), rows, nil); err != nil {
			return err
		}
		if rows.Len() != ids.len() || int64(rows.Len()) != f.Rows {
			return fmt.Errorf("%s: %d rows, %d identities, manifest %d", f.Name, rows.Len(), ids.len(), f.Rows)
		}
		if f.Kind == kindHistory {
			hist[outKey{bucket: f.Bucket, dir: dirOf(f.Name)}]++
		}
		for i := range rows.Len() {
			if ids.a[i] != ck(rows.Vectors[0].Ints[i]) || ids.b[i] != cs(rows.Vectors[2].Ints[i]) {
				return fmt.Errorf("%s row %d: identity %q %q for id %d start %d", f.Name, i, ids.a[i], ids.b[i], rows.Vectors[0].Ints[i], rows.Vectors[2].Ints[i])
			}
			if bucketOf(bucketHash(ids.a[i]), m.Buckets) != f.Bucket {
				return fmt.Errorf("%s row %d: key outside bucket %d", f.Name, i, f.Bucket)
			}
			if open := rows.Vectors[3].IsNull(i); open != (f.Kind == kindCurrent) && f.Kind != kindMixed {
				return fmt.Errorf("%s (%s) row %d: open %v", f.Name, f.Kind, i, open)
			}
			if ids.b[i] < string(f.MinSeq) || (f.Kind != kindMixed && ids.b[i] > string(f.MaxSeq)) {
				return fmt.Errorf("%s row %d: seq %q outside [%q, %q]", f.Name, i, ids.b[i], f.MinSeq, f.MaxSeq)
			}
		}
	}
	for k, n := range hist {
		if n > maxHistoryFiles {
			return fmt.Errorf("bucket %d holds %d history files, at most %d", k.bucket, n, maxHistoryFiles)
		}
	}
	return nil
}

// filesOf returns the names of the current version's files of a bucket by
// kind.
func filesOf(t *testing.T, s *Sink, bucket int, kind string) []string {
	t.Helper()
	var out []string
	for _, f := range manifestOf(t, s, verTable.Name).Files {
		if f.Bucket == bucket && f.Kind == kind {
			out = append(out, f.Name)
		}
	}
	slices.Sort(out)
	return out
}

// verSetup makes a ver table of 200 keys, each with a closed version
// [10, 20) and a current one from 20, spread over 4 buckets.
func verSetup(t *testing.T, opts Options) (*Sink, verModel) {
	t.Helper()
	ctx := context.Background()
	s := openTest(t, opts)
	if err := s.Ensure(ctx, []sinks.Table{verTable}); err != nil {
		t.Fatal(err)
	}
	want := verModel{}
	var first verChange
	for id := range int64(100) {
		first.up = append(first.up, ver{id, "a", 10, 20}, ver{id, "b", 20, 0})
	}
	if err := commitVer(ctx, s, first); err != nil {
		t.Fatal(err)
	}
	want.apply(first)
	if m := manifestOf(t, s, verTable.Name); m.Buckets != 4 {
		t.Fatalf("%d buckets, want 4", m.Buckets)
	}
	return s, want
}

// setupKeys returns the keys verSetup made that fall in the buckets (of
// 4), or all of them.
func setupKeys(buckets ...int) []int64 {
	var out []int64
	for id := range int64(100) {
		if len(buckets) == 0 || slices.Contains(buckets, bucketOf(bucketHash(ck(id)), 4)) {
			out = append(out, id)
		}
	}
	return out
}

// closeAt closes the current version of each key, from at, and opens one
// from at+10.
func closeAt(keys []int64, at int64) verChange {
	var c verChange
	for _, id := range keys {
		c.up = append(c.up, ver{id, fmt.Sprint("v", at), at, at + 10}, ver{id, fmt.Sprint("v", at+10), at + 10, 0})
	}
	return c
}

func TestSCD2HistoryFiles(t *testing.T) {
	ctx := context.Background()
	opts := testOpts(t.TempDir())
	opts.BucketRows = 64
	s, want := verSetup(t, opts)
	checkVer(t, s, want)
	keys := keysInBuckets(0, 3, 4, 1)
	k := keys[0]
	seq := int64(20) // k's current version starts here

	apply := func(c verChange) (dropped []string) {
		t.Helper()
		before := manifestOf(t, s, verTable.Name)
		if err := commitVer(ctx, s, c); err != nil {
			t.Fatal(err)
		}
		want.apply(c)
		checkVer(t, s, want)
		after := map[string]bool{}
		for _, f := range manifestOf(t, s, verTable.Name).Files {
			after[f.Name] = true
		}
		for _, f := range before.Files {
			if !after[f.Name] {
				dropped = append(dropped, f.Name)
			}
		}
		slices.Sort(dropped)
		return dropped
	}
	// next closes k's current version and opens one at seq+10.
	next := func() verChange {
		c := verChange{up: []ver{{k, fmt.Sprint("v", seq), seq, seq + 10}, {k, fmt.Sprint("v", seq+10), seq + 10, 0}}}
		seq += 10
		return c
	}

	// An in-order change rewrites the bucket's current file only, and adds
	// a history file.
	hist := filesOf(t, s, 1, kindHistory)
	cur := filesOf(t, s, 1, kindCurrent)
	if len(hist) != 1 || len(cur) != 1 {
		t.Fatalf("bucket 1: history %v, current %v; want one of each", hist, cur)
	}
	if got := apply(next()); !slices.Equal(got, cur) {
		t.Fatalf("an in-order change dropped %v, want %v", got, cur)
	}
	if got := filesOf(t, s, 1, kindHistory); len(got) != 2 || !slices.Contains(got, hist[0]) {
		t.Fatalf("history files %v, want %s and a new one", got, hist[0])
	}

	// A new key with two versions in one load: its closed version goes to
	// a new history file, and no history file is rewritten.
	fresh := keysInBuckets(1000, 1, 4, 1)[0]
	cur = filesOf(t, s, 1, kindCurrent)
	if got := apply(verChange{up: []ver{{fresh, "x", 100, 110}, {fresh, "y", 110, 0}}}); !slices.Equal(got, cur) {
		t.Fatalf("a new key dropped %v, want %v", got, cur)
	}

	// A late event splitting k's first version [10, 20) rewrites the history
	// file that holds it; the file holds most of the bucket's history, so
	// its other rows join the load's new history file (see
	// TestSCD2LateHistoryFiles).
	cur = filesOf(t, s, 1, kindCurrent)
	late := verChange{up: []ver{{k, "a", 10, 15}, {k, "late", 15, 20}}}
	if got := apply(late); !slices.Equal(got, append(slices.Clone(cur), hist[0])) {
		t.Fatalf("a late event dropped %v, want %v and %s", got, cur, hist[0])
	}

	// A late removal of a closed version (the zero-width version a delete
	// at the same sequence erases) rewrites its history file.
	cur = filesOf(t, s, 1, kindCurrent)
	var holder string
	for _, h := range filesOf(t, s, 1, kindHistory) {
		m := manifestOf(t, s, verTable.Name)
		ids, err := readPairs(s.disk, filepath.Join(s.lay.idsDir(verTable.Name, m.Version), h+idsSuffix))
		if err != nil {
			t.Fatal(err)
		}
		for i := range ids.a {
			if ids.a[i] == ck(k) && ids.b[i] == cs(15) {
				holder = h
			}
		}
	}
	if holder == "" {
		t.Fatal("no history file holds the late version")
	}
	rm := verChange{rm: []ver{{id: k, start: 15}}, up: []ver{{k, "a", 10, 20}}}
	if got := apply(rm); !slices.Equal(got, append(slices.Clone(cur), holder)) {
		t.Fatalf("a late removal dropped %v, want %v and %s", got, cur, holder)
	}

	// In-order changes add a history file per load until there are too
	// many: then the smallest are merged into the new one.
	most := 0
	for range 3 * maxHistoryFiles {
		apply(next())
		most = max(most, len(filesOf(t, s, 1, kindHistory)))
	}
	if most != maxHistoryFiles {
		t.Fatalf("at most %d history files in bucket 1, want %d", most, maxHistoryFiles)
	}
	// The other buckets were never touched.
	for _, b := range []int{0, 2, 3} {
		if n := len(filesOf(t, s, b, kindHistory)); n != 1 {
			t.Fatalf("bucket %d: %d history files, want 1", b, n)
		}
	}
	checkVer(t, openTest(t, opts), want)
}

// TestSCD2LateHistoryFiles checks where the rest of a history file a late
// event rewrites goes: into a file of its own when the files rewritten hold
// a minority of the bucket's history (history files keep their age, so that
// late events rewrite the recent ones), into the load's new history file
// when they hold most of it.
func TestSCD2LateHistoryFiles(t *testing.T) {
	ctx := context.Background()
	opts := testOpts(t.TempDir())
	opts.BucketRows = 64
	s, want := verSetup(t, opts)
	keys := setupKeys(1)
	n := int64(len(keys))
	history := func() map[string]int64 {
		out := map[string]int64{}
		for _, f := range manifestOf(t, s, verTable.Name).Files {
			if f.Bucket == 1 && f.Kind == kindHistory {
				out[f.Name] = f.Rows
			}
		}
		return out
	}
	// apply commits c and returns the rows of bucket 1's history files it
	// added, sorted, and the names of those it dropped.
	apply := func(c verChange) (added []int64, dropped []string) {
		t.Helper()
		before := history()
		if err := commitVer(ctx, s, c); err != nil {
			t.Fatal(err)
		}
		want.apply(c)
		checkVer(t, s, want)
		after := history()
		for name, rows := range after {
			if _, ok := before[name]; !ok {
				added = append(added, rows)
			}
		}
		for name := range before {
			if _, ok := after[name]; !ok {
				dropped = append(dropped, name)
			}
		}
		slices.Sort(added)
		slices.Sort(dropped)
		return added, dropped
	}
	// Two in-order loads close a version of every key of the bucket: three
	// history files of n rows, [10, 20), [20, 30) and [30, 40).
	for _, at := range []int64{20, 30} {
		if got, _ := apply(closeAt(keys, at)); !slices.Equal(got, []int64{n}) {
			t.Fatalf("an in-order load added history files of %v rows, want [%d]", got, n)
		}
	}
	files := history()
	holding := func(start int64) string {
		for name := range files {
			m := manifestOf(t, s, verTable.Name)
			ids, err := readPairs(s.disk, filepath.Join(s.lay.idsDir(verTable.Name, m.Version), name+idsSuffix))
			if err != nil {
				t.Fatal(err)
			}
			if slices.Contains(ids.b, cs(start)) {
				return name
			}
		}
		t.Fatalf("no history file holds versions from %d", start)
		return ""
	}
	f10, f20, f30 := holding(10), holding(20), holding(30)

	// A late event in the [20, 30) file, a third of the history: the file
	// is replaced by one of its other rows, the split's two versions go to
	// the load's new file, the other files stay.
	k := keys[0]
	added, dropped := apply(verChange{up: []ver{{k, "v20", 20, 25}, {k, "late", 25, 30}}})
	if !slices.Equal(added, []int64{2, n - 1}) || !slices.Equal(dropped, []string{f20}) {
		t.Fatalf("a late event added files of %v rows and dropped %v; want [2 %d] and %s", added, dropped, n-1, f20)
	}

	// Late events in the [10, 20), [30, 40) and rest-of-[20, 30) files, most
	// of the history: they all join the load's new file.
	files = history()
	rest := ""
	for name, rows := range files {
		if rows == n-1 {
			rest = name
		}
	}
	k2 := keys[1]
	added, dropped = apply(verChange{up: []ver{{k2, "v10", 10, 15}, {k2, "late", 15, 20},
		{k2, "v20", 20, 25}, {k2, "late", 25, 30}, {k2, "v30", 30, 35}, {k2, "late", 35, 40}}})
	if gone := []string{f10, f30, rest}; !slices.Equal(dropped, slices.Sorted(slices.Values(gone))) || !slices.Equal(added, []int64{3*n + 2}) {
		t.Fatalf("late events all over the history added files of %v rows and dropped %v; want [%d] and %v", added, dropped, 3*n+2, gone)
	}
	checkVer(t, openTest(t, opts), want)
}

// TestSCD2Rebucket grows the table past its buckets: every file, history
// included, is rewritten into the new buckets; there, the two newest
// history files stay files of their own (history files keep their age),
// the others are merged into one, beside the load's new history file.
func TestSCD2Rebucket(t *testing.T) {
	ctx := context.Background()
	opts := testOpts(t.TempDir())
	opts.BucketRows = 80 // four buckets until the table grows
	s, want := verSetup(t, opts)
	// Three in-order loads: four history files a bucket, of the versions
	// from 10, 20, 30 and 40.
	for _, at := range []int64{20, 30, 40} {
		c := closeAt(setupKeys(), at)
		if err := commitVer(ctx, s, c); err != nil {
			t.Fatal(err)
		}
		want.apply(c)
	}
	if h := filesOf(t, s, 1, kindHistory); len(h) != 4 {
		t.Fatalf("bucket 1 holds history files %v, want 4", h)
	}
	var grow verChange
	for id := int64(5000); id < 5300; id++ {
		grow.up = append(grow.up, ver{id, "g", 5, 7}, ver{id, "h", 7, 0})
	}
	if err := commitVer(ctx, s, grow); err != nil {
		t.Fatal(err)
	}
	want.apply(grow)
	checkVer(t, s, want)
	m := manifestOf(t, s, verTable.Name)
	if m.Buckets != 16 {
		t.Fatalf("%d buckets, want 16", m.Buckets)
	}
	for b := range 16 {
		c, h := filesOf(t, s, b, kindCurrent), filesOf(t, s, b, kindHistory)
		if len(c) != 1 || len(h) != 4 {
			t.Fatalf("bucket %d: current files %v, history files %v; want one, and four (the two newest, the others merged, the load's)", b, c, h)
		}
		var starts []string
		for _, f := range m.Files {
			if f.Bucket == b && f.Kind == kindHistory {
				starts = append(starts, string(f.MinSeq)+".."+string(f.MaxSeq))
			}
		}
		slices.Sort(starts)
		if want := []string{cs(5) + ".." + cs(5), cs(10) + ".." + cs(20), cs(30) + ".." + cs(30), cs(40) + ".." + cs(40)}; !slices.Equal(starts, want) {
			t.Fatalf("bucket %d: history files of starts %v, want %v", b, starts, want)
		}
	}
}

// TestSCD2MixedFiles opens a table whose manifest has no file kinds, as
// the code before the split into current and history wrote: its files are
// read as they are, and a bucket's are split when a load touches it.
func TestSCD2MixedFiles(t *testing.T) {
	ctx := context.Background()
	opts := testOpts(t.TempDir())
	opts.BucketRows = 64
	s, want := verSetup(t, opts)
	m := manifestOf(t, s, verTable.Name)
	for i := range m.Files {
		m.Files[i].Kind, m.Files[i].MaxSeq = kindMixed, nil
	}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.lay.manifestFile(verTable.Name, m.Version), data, 0o644); err != nil {
		t.Fatal(err)
	}
	s = openTest(t, opts)
	checkVer(t, s, want)
	k := keysInBuckets(0, 1, 4, 2)[0]
	c := verChange{up: []ver{{k, "b", 20, 30}, {k, "c", 30, 0}, {k, "early", 5, 10}}}
	if err := commitVer(ctx, s, c); err != nil {
		t.Fatal(err)
	}
	want.apply(c)
	checkVer(t, s, want)
	after := manifestOf(t, s, verTable.Name)
	for _, f := range after.Files {
		if split := f.Kind != kindMixed; split != (f.Bucket == 2) {
			t.Fatalf("%s (bucket %d) has kind %q", f.Name, f.Bucket, f.Kind)
		}
	}
}

// TestSCD2Crash kills the Sink at each step of a load that splits a
// closed version (rewriting a history file), or that merges history files,
// and checks that recovery gives exactly the committed content.
func TestSCD2Crash(t *testing.T) {
	type crashCase struct {
		name      string
		at        moment
		committed bool
		late      bool // the load splits a closed version; else it merges
	}
	var tests []crashCase
	for _, p := range []crashCase{
		{"after staging", afterStaging, false, false},
		{"after the ledger append", afterLedgerAppend, true, false},
		{"after the version folder, before its swap", beforeSwap, true, false},
		{"after the swap", afterSwap, true, false},
	} {
		tests = append(tests, p)
		p.name, p.late = p.name+", late event", true
		tests = append(tests, p)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			opts := testOpts(t.TempDir())
			opts.BucketRows = 64
			s1, want := verSetup(t, opts)
			keys := setupKeys(3)
			k := keys[0]
			// Fill bucket 3 with history files up to the bound, each closing
			// a version of every key of the bucket: the late split below
			// rewrites one of eight files alike, which a file of its other
			// rows replaces (or the merge takes).
			seq := int64(20)
			for range maxHistoryFiles - 1 {
				c := closeAt(keys, seq)
				if err := commitVer(ctx, s1, c); err != nil {
					t.Fatal(err)
				}
				want.apply(c)
				seq += 10
			}
			if n := len(filesOf(t, s1, 3, kindHistory)); n != maxHistoryFiles {
				t.Fatalf("%d history files, want %d", n, maxHistoryFiles)
			}
			// An in-order change (merging the history files), or a late
			// split of [10, 20) (rewriting the history file that holds it).
			crashing := verChange{up: []ver{{k, fmt.Sprint("v", seq), seq, seq + 10}, {k, "last", seq + 10, 0}}}
			if tc.late {
				crashing.up = append(crashing.up, ver{k, "a", 10, 12}, ver{k, "late", 12, 20})
			}
			cr := crash(t, s1, tc.at, 1)
			expectCrash(t, cr, "commit", commitVer(ctx, s1, crashing))
			s1.kill()
			if tc.committed {
				want.apply(crashing)
			}
			s2 := openTest(t, opts)
			if err := s2.Recover(ctx); err != nil {
				t.Fatalf("Recover: %v", err)
			}
			checkVer(t, s2, want)
			// After a merge: the two newest, the two largest others, the merged
			// file and the load's new one.
			if n := len(filesOf(t, s2, 3, kindHistory)); tc.committed && !tc.late && n > maxHistoryFiles/2+2 {
				t.Fatalf("%d history files after the merge, want at most %d", n, maxHistoryFiles/2+2)
			}
			// The crashed load's replaced or merged history went to files of
			// their own (h<bucket>-<version>-<n>).
			if h := filesOf(t, s2, 3, kindHistory); tc.committed && !slices.ContainsFunc(h, func(name string) bool { return strings.Count(name, "-") == 2 }) {
				t.Fatalf("history files %v: none replaces or merges others", h)
			}
			// Publishing again changes nothing; the next load applies on top.
			if err := s2.Recover(ctx); err != nil {
				t.Fatal(err)
			}
			checkVer(t, s2, want)
			next := verChange{up: []ver{{k, "late2", 11, 12}, {k, "a", 10, 11}}}
			if !tc.committed || !tc.late {
				next = verChange{up: []ver{{k, "late2", 11, 20}, {k, "a", 10, 11}}}
			}
			if err := commitVer(ctx, s2, next); err != nil {
				t.Fatal(err)
			}
			want.apply(next)
			checkVer(t, s2, want)
		})
	}
}

func TestHistoryHelpers(t *testing.T) {
	// Rows, and the greatest sequence: files 1 and 3 are the newest.
	rows := []int64{5, 1, 9, 2, 7, 3, 8, 4, 6}
	seqs := "394825176"
	var files []fileEntry
	for i, n := range rows {
		files = append(files, fileEntry{Rows: n, MaxSeq: []byte{seqs[i]}})
	}
	tests := []struct {
		name string
		stay []int
		want []int
	}{
		{"room for the new file", []int{0, 1, 2, 3, 4, 5, 6}, nil},
		{"one too many: all but the two newest and the two largest others merged", []int{0, 1, 2, 3, 4, 5, 6, 7}, []int{0, 4, 5, 7}},
		{"nine", []int{0, 1, 2, 3, 4, 5, 6, 7, 8}, []int{0, 4, 5, 7, 8}},
		{"few", []int{0, 2, 4}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := mergeHistory(files, tc.stay); !slices.Equal(got, tc.want) {
				t.Fatalf("merge %v, want %v", got, tc.want)
			}
		})
	}
	few := []fileEntry{{Rows: 10, MaxSeq: []byte("1")}, {Rows: 10, MaxSeq: []byte("2")}, {Rows: 80, MaxSeq: []byte("3")}}
	for _, tc := range []struct {
		name       string
		stay, lost []int
		rebucket   bool
		want       map[int]int
	}{
		{"a minority rewritten: replaced", []int{1, 2}, []int{0}, false, map[int]int{0: 1}},
		{"most rewritten: into the new file", []int{1}, []int{0, 2}, false, map[int]int{}},
		{"buckets grow: the two newest apart, the rest merged", nil, []int{0, 1, 2}, true, map[int]int{0: 4, 1: 2, 2: 3}},
	} {
		if got := historyOutputs(few, tc.stay, tc.lost, tc.rebucket); !maps.Equal(got, tc.want) {
			t.Errorf("%s: outputs %v, want %v", tc.name, got, tc.want)
		}
	}
	gone := []ident{{"a", "5"}, {"a", "3"}, {"b", "1"}, {"c", "9"}}
	cands := historyCandidates(gone, map[string]seqAt{"a": {"4", true}, "b": {}, "c": {"2", true}})
	if want := []ident{{"a", "3"}, {"b", "1"}}; !slices.Equal(cands, want) {
		t.Fatalf("candidates %v, want %v", cands, want)
	}
	if !mayHold(fileEntry{MinSeq: []byte("2"), MaxSeq: []byte("3")}, cands) || mayHold(fileEntry{MinSeq: []byte("4"), MaxSeq: []byte("8")}, cands) {
		t.Fatal("mayHold misjudges a sequence range")
	}
}

// TestSCD2LayoutModel applies random loads to an SCD type 2 target whose
// buckets hold a handful of rows, so that late events replace history
// files, merges run and the buckets grow: in-order changes (a key's current
// version closed, a new one opened), late splits of closed versions, late
// removals that join two closed versions, deletes, new keys. After every
// load the table must equal a model of its versions and its layout must
// hold (checkVer).
func TestSCD2LayoutModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		dir, err := os.MkdirTemp("", "scd2-model-")
		if err != nil {
			rt.Fatal(err)
		}
		defer os.RemoveAll(dir)
		opts := testOpts(dir)
		opts.BucketRows = rapid.SampledFrom([]int{2, 8, 64}).Draw(rt, "bucketRows")
		s, err := Open(ctx, opts)
		if err != nil {
			rt.Fatal(err)
		}
		defer s.Close()
		if err := s.Ensure(ctx, []sinks.Table{verTable}); err != nil {
			rt.Fatal(err)
		}
		names := []string{"a", "b", "c"}
		versions := map[int64][]ver{} // each key's, by start; the last is current
		want := verModel{}
		clock := int64(0) // in-order changes happen at clock, late ones before it
		loads := rapid.IntRange(1, 24).Draw(rt, "loads")
		for l := range loads {
			var c verChange
			used := map[int64]bool{}
			for range rapid.IntRange(1, 8).Draw(rt, "changes") {
				id := rapid.Int64Range(0, 20).Draw(rt, "id")
				if used[id] {
					continue
				}
				used[id] = true
				vs := versions[id]
				name := rapid.SampledFrom(names).Draw(rt, "name")
				last := len(vs) - 1
				switch kind := rapid.IntRange(0, 4).Draw(rt, "kind"); {
				case len(vs) == 0 || (kind <= 1 && vs[last].end != 0): // a new key, or one deleted comes back
					clock += 10
					v := ver{id, name, clock, 0}
					c.up = append(c.up, v)
					vs = append(vs, v)
				case kind <= 1: // in order
					clock += 10
					closed := vs[last]
					closed.end = clock
					v := ver{id, name, clock, 0}
					c.up = append(c.up, closed, v)
					vs = append(vs[:last], closed, v)
				case kind == 4: // a delete closes the current version
					if vs[last].end != 0 {
						continue
					}
					clock += 10
					vs[last].end = clock
					c.up = append(c.up, vs[last])
				case kind == 2: // a late event splits a closed version
					i := rapid.IntRange(0, len(vs)-1).Draw(rt, "version")
					v := vs[i]
					if v.end == 0 || v.end-v.start < 2 {
						continue
					}
					at := v.start + 1 + rapid.Int64Range(0, v.end-v.start-2).Draw(rt, "at")
					left, right := ver{id, v.name, v.start, at}, ver{id, name, at, v.end}
					c.up = append(c.up, left, right)
					vs = slices.Insert(vs, i+1, right)
					vs[i] = left
				default: // a late removal joins two closed versions
					if len(vs) < 3 {
						continue
					}
					i := rapid.IntRange(0, len(vs)-3).Draw(rt, "version")
					a, b := vs[i], vs[i+1]
					joined := ver{id, a.name, a.start, b.end}
					c.rm = append(c.rm, b)
					c.up = append(c.up, joined)
					vs = slices.Delete(vs, i+1, i+2)
					vs[i] = joined
				}
				versions[id] = vs
			}
			if len(c.up) == 0 && len(c.rm) == 0 {
				continue
			}
			if err := commitVer(ctx, s, c); err != nil {
				rt.Fatalf("load %d: %v", l, err)
			}
			want.apply(c)
			if err := verProblem(s, want); err != nil {
				rt.Fatalf("after load %d: %v", l, err)
			}
		}
	})
}
