package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/local/fsys"
)

var custSchema = batch.Schema{Columns: []batch.Column{
	{Name: "id", Type: batch.Int64},
	{Name: "name", Type: batch.String},
	{Name: "region", Type: batch.String, Nullable: true},
}}

var custTable = sinks.Table{Name: "cust", Schema: custSchema, Kind: sinks.KindSCD1, Keys: []string{"id"}}

func ck(id int64) string  { return fmt.Sprintf("k%09d", id) }
func cs(seq int64) string { return fmt.Sprintf("s%09d", seq) }

// cust is a row of the cust table shown at sequence seq.
type cust struct {
	id     int64
	name   string
	region string // "" is NULL
	seq    int64
}

func custRows(rs []cust) (*batch.Batch, []string, []string) {
	b := batch.New(custSchema, len(rs))
	var keys, seqs []string
	for _, r := range rs {
		b.Vectors[0].AppendInt(r.id)
		b.Vectors[1].AppendString(r.name)
		if r.region == "" {
			b.Vectors[2].AppendNull()
		} else {
			b.Vectors[2].AppendString(r.region)
		}
		keys = append(keys, ck(r.id))
		seqs = append(seqs, cs(r.seq))
	}
	return b, keys, seqs
}

// cdcChange is one load of changes to the cust table.
type cdcChange struct {
	up, rm   []cust
	truncate int64 // 0: none
	states   []sinks.StateEntry
}

func commitCDC(ctx context.Context, s *Sink, table string, c cdcChange) error {
	ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: nextLoadID(), Pipeline: "p", Flow: "cdc", Targets: []string{table}})
	if err != nil {
		return err
	}
	cl := ld.(sinks.CDCLoad)
	if c.truncate > 0 {
		if err := cl.TruncateBelow(ctx, table, cs(c.truncate)); err != nil {
			return err
		}
	}
	if len(c.rm) > 0 {
		b, k, q := custRows(c.rm)
		if err := cl.Remove(ctx, table, b, k, q); err != nil {
			return err
		}
	}
	if len(c.up) > 0 {
		b, k, q := custRows(c.up)
		if err := cl.Upsert(ctx, table, b, k, q); err != nil {
			return err
		}
	}
	if len(c.states) > 0 {
		if err := cl.PutState(ctx, table, c.states); err != nil {
			return err
		}
	}
	return ld.Commit(ctx, sinks.Commit{})
}

// custContent returns the table's rows as id -> "name/region".
func custContent(t *testing.T, s *Sink, table string) map[int64]string {
	t.Helper()
	b, err := s.Scan(context.Background(), table)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(b.Schema.Names(), custSchema.Names()) {
		t.Fatalf("scan columns %v, want %v", b.Schema.Names(), custSchema.Names())
	}
	out := map[int64]string{}
	for i := range b.Len() {
		id := b.Vectors[0].Ints[i]
		if _, dup := out[id]; dup {
			t.Fatalf("key %d twice in %s", id, table)
		}
		region := "NULL"
		if !b.Vectors[2].IsNull(i) {
			region = b.Vectors[2].Strs[i]
		}
		out[id] = b.Vectors[1].Strs[i] + "/" + region
	}
	return out
}

func sameContent(t *testing.T, what string, got, want map[int64]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d rows, want %d", what, len(got), len(want))
	}
	for id, w := range want {
		if g, ok := got[id]; !ok || g != w {
			t.Fatalf("%s: key %d is %q (present %v), want %q", what, id, g, ok, w)
		}
	}
}

// model applies changes to an expected content.
func model(m map[int64]string, c cdcChange, seqs map[int64]int64) {
	if c.truncate > 0 {
		for id, s := range seqs {
			if s < c.truncate {
				delete(m, id)
				delete(seqs, id)
			}
		}
	}
	for _, r := range c.rm {
		delete(m, r.id)
		delete(seqs, r.id)
	}
	for _, r := range c.up {
		region := r.region
		if region == "" {
			region = "NULL"
		}
		m[r.id] = r.name + "/" + region
		seqs[r.id] = r.seq
	}
}

func manifestOf(t *testing.T, s *Sink, table string) manifest {
	t.Helper()
	m, err := s.current(table)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// keysInBuckets returns n ids from from on whose keys fall in the given
// buckets of count.
func keysInBuckets(from int64, n, count int, buckets ...int) []int64 {
	var out []int64
	for id := from; len(out) < n; id++ {
		if slices.Contains(buckets, bucketOf(bucketHash(ck(id)), count)) {
			out = append(out, id)
		}
	}
	return out
}

func TestCDCRewritesOnlyTouchedBuckets(t *testing.T) {
	ctx := context.Background()
	opts := testOpts(t.TempDir())
	opts.BucketRows = 16
	s := openTest(t, opts)
	if err := s.Ensure(ctx, []sinks.Table{custTable}); err != nil {
		t.Fatal(err)
	}
	want, seqs := map[int64]string{}, map[int64]int64{}
	apply := func(c cdcChange) {
		t.Helper()
		if err := commitCDC(ctx, s, custTable.Name, c); err != nil {
			t.Fatal(err)
		}
		model(want, c, seqs)
	}
	var first cdcChange
	for id := range int64(300) {
		first.up = append(first.up, cust{id, fmt.Sprintf("n%d", id), "", 1})
	}
	apply(first)
	m1 := manifestOf(t, s, custTable.Name)
	// 300 rows at 16 per bucket: 19 buckets, rounded up to 32.
	if m1.Buckets != 32 || len(m1.Files) != 32 {
		t.Fatalf("%d buckets in %d files, want 32 in 32", m1.Buckets, len(m1.Files))
	}
	sameContent(t, "after the first load", custContent(t, s, custTable.Name), want)

	tests := []struct {
		name    string
		change  func() cdcChange
		changed int // files rewritten
	}{
		{"upserts into two buckets", func() cdcChange {
			var c cdcChange
			for _, id := range keysInBuckets(0, 20, 32, 3, 27) {
				c.up = append(c.up, cust{id, "updated", "eu", 2})
			}
			return c
		}, 2},
		{"removals and new keys in three buckets", func() cdcChange {
			var c cdcChange
			for _, id := range keysInBuckets(100, 6, 32, 5, 6) {
				c.rm = append(c.rm, cust{id: id, seq: 1})
			}
			for _, id := range keysInBuckets(50000, 6, 32, 6, 30) {
				c.up = append(c.up, cust{id, "new", "us", 3})
			}
			return c
		}, 3},
		{"removal of keys that have no row", func() cdcChange {
			var c cdcChange
			for _, id := range keysInBuckets(90000, 5, 32, 9) {
				c.rm = append(c.rm, cust{id: id, seq: 1})
			}
			return c
		}, 0},
		{"a truncate below every row", func() cdcChange { return cdcChange{truncate: 1} }, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := manifestOf(t, s, custTable.Name)
			apply(tc.change())
			after := manifestOf(t, s, custTable.Name)
			kept := 0
			names := map[string]bool{}
			for _, f := range before.Files {
				names[f.Name] = true
			}
			for _, f := range after.Files {
				if names[f.Name] {
					kept++
				}
			}
			if got := len(before.Files) - kept; got != tc.changed || len(after.Files) != 32 {
				t.Fatalf("%d of %d files rewritten (%d after), want %d", got, len(before.Files), len(after.Files), tc.changed)
			}
			sameContent(t, "after the load", custContent(t, s, custTable.Name), want)
		})
	}

	// Growing past twice the bucket size multiplies the buckets and
	// rewrites every file once.
	var grow cdcChange
	for id := int64(100000); id < 100000+800; id++ {
		grow.up = append(grow.up, cust{id, "g", "", 5})
	}
	apply(grow)
	m := manifestOf(t, s, custTable.Name)
	if n := bucketsFor(32, int64(len(want)), 16); m.Buckets != n || n != 128 {
		t.Fatalf("%d buckets after growing to %d rows, want %d (128)", m.Buckets, len(want), n)
	}
	if len(m.Files) != 128 {
		t.Fatalf("%d files in 128 buckets", len(m.Files))
	}
	sameContent(t, "after growing", custContent(t, s, custTable.Name), want)
	checkSidecars(t, s, custTable.Name)
	sameContent(t, "in a new sink", custContent(t, openTest(t, opts), custTable.Name), want)
}

// checkSidecars verifies that every file's identities are its rows' keys in
// order, in the bucket the file is in.
func checkSidecars(t *testing.T, s *Sink, table string) {
	t.Helper()
	m := manifestOf(t, s, table)
	def, err := s.readTable(table)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range m.Files {
		ids, err := readPairs(s.disk, filepath.Join(s.lay.idsDir(table, m.Version), f.Name+idsSuffix))
		if err != nil {
			t.Fatal(err)
		}
		b := batch.New(def.Schema, 0)
		if err := readFile(s.disk, filepath.Join(s.lay.versionDir(table, m.Version), f.Name), b, nil); err != nil {
			t.Fatal(err)
		}
		if b.Len() != ids.len() || int64(b.Len()) != f.Rows {
			t.Fatalf("%s: %d rows, %d identities, manifest %d", f.Name, b.Len(), ids.len(), f.Rows)
		}
		for i, id := range b.Vectors[0].Ints {
			if ids.a[i] != ck(id) {
				t.Fatalf("%s row %d: key %d, sidecar %q", f.Name, i, id, ids.a[i])
			}
			if got := bucketOf(bucketHash(ids.a[i]), m.Buckets); got != f.Bucket {
				t.Fatalf("%s row %d: key in bucket %d, file in %d", f.Name, i, got, f.Bucket)
			}
			if i > 0 && compareIdent(ids.a[i-1], ids.b[i-1], ids.a[i], ids.b[i]) >= 0 {
				t.Fatalf("%s row %d: identities out of order", f.Name, i)
			}
			if string(f.MinSeq) > ids.b[i] {
				t.Fatalf("%s: min seq %q above row %d's %q", f.Name, f.MinSeq, i, ids.b[i])
			}
		}
	}
}

func TestCDCTruncateRewritesOnlyOlderFiles(t *testing.T) {
	ctx := context.Background()
	opts := testOpts(t.TempDir())
	opts.BucketRows = 64
	s := openTest(t, opts)
	if err := s.Ensure(ctx, []sinks.Table{custTable}); err != nil {
		t.Fatal(err)
	}
	want, seqs := map[int64]string{}, map[int64]int64{}
	var first cdcChange
	for id := range int64(4000) {
		first.up = append(first.up, cust{id, "a", "", 10})
	}
	// Three keys in one bucket hold an older sequence.
	old := keysInBuckets(10000, 3, 64, 17)
	for _, id := range old {
		first.up = append(first.up, cust{id, "old", "", 2})
	}
	for _, c := range []cdcChange{first, {truncate: 5}} {
		before := manifestOf(t, s, custTable.Name)
		if err := commitCDC(ctx, s, custTable.Name, c); err != nil {
			t.Fatal(err)
		}
		model(want, c, seqs)
		if c.truncate > 0 {
			after := manifestOf(t, s, custTable.Name)
			changed := 0
			for i := range after.Files {
				if !slices.ContainsFunc(before.Files, func(f fileEntry) bool { return f.Name == after.Files[i].Name }) {
					changed++
				}
			}
			if changed != 1 {
				t.Fatalf("truncate rewrote %d files, want 1 (the bucket with the older rows)", changed)
			}
		}
	}
	got := custContent(t, s, custTable.Name)
	sameContent(t, "after the truncate", got, want)
	for _, id := range old {
		if _, ok := got[id]; ok {
			t.Fatalf("key %d below the truncate survived", id)
		}
	}
}

// TestCDCModel applies random loads and compares with a plain model, over
// small buckets, a partitioned table and a table growing its buckets.
func TestCDCModel(t *testing.T) {
	tests := []struct {
		name        string
		partitioned bool
		bucketRows  int
	}{
		{"one bucket", false, 1 << 20},
		{"small buckets", false, 32},
		{"partitioned", true, 64},
	}
	regions := []string{"", "eu", "us", "ap"}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			opts := testOpts(t.TempDir())
			opts.BucketRows = tc.bucketRows
			s := openTest(t, opts)
			table := custTable
			if tc.partitioned {
				table.PartitionBy = []string{"region"}
			}
			if err := s.Ensure(ctx, []sinks.Table{table}); err != nil {
				t.Fatal(err)
			}
			want, seqs := map[int64]string{}, map[int64]int64{}
			rnd := uint64(42)
			next := func(n int) int {
				rnd ^= rnd << 13
				rnd ^= rnd >> 7
				rnd ^= rnd << 17
				return int(rnd % uint64(n))
			}
			for load := range 12 {
				var c cdcChange
				seq := int64(10 + load*10)
				used := map[int64]bool{}
				for range next(100) {
					id := int64(next(400))
					if used[id] {
						continue
					}
					used[id] = true
					if _, ok := want[id]; ok && next(4) == 0 {
						c.rm = append(c.rm, cust{id: id, seq: seqs[id]})
						continue
					}
					c.up = append(c.up, cust{id, fmt.Sprintf("v%d-%d", id, load), regions[next(len(regions))], seq + int64(next(5))})
				}
				if load%6 == 5 {
					c.truncate = seq - 25
				}
				if err := commitCDC(ctx, s, table.Name, c); err != nil {
					t.Fatalf("load %d: %v", load, err)
				}
				model(want, c, seqs)
				sameContent(t, fmt.Sprintf("after load %d", load), custContent(t, s, table.Name), want)
			}
			checkSidecars(t, s, table.Name)
			m := manifestOf(t, s, table.Name)
			if tc.partitioned {
				for _, f := range m.Files {
					if !strings.HasPrefix(f.Name, "region=") {
						t.Fatalf("file %s of a partitioned table is not in a region folder", f.Name)
					}
				}
			}
			if tc.bucketRows == 32 && m.Buckets < 2 {
				t.Fatalf("%d bucket after loads of up to %d rows at 32 per bucket: the buckets never grew", m.Buckets, 100)
			}
		})
	}
}

// TestCDCReaders checks what other readers see: the table folder holds only
// Parquet files with the logical columns; identities and state live under
// _sluice.
func TestCDCReaders(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, testOpts(dir))
	table := custTable
	table.PartitionBy = []string{"region"}
	if err := s.Ensure(ctx, []sinks.Table{table}); err != nil {
		t.Fatal(err)
	}
	if err := commitCDC(ctx, s, table.Name, cdcChange{
		up:     []cust{{1, "a", "eu", 1}, {2, "b", "us", 1}, {3, "c", "", 1}},
		states: []sinks.StateEntry{{Key: ck(1), Value: []byte("x")}},
	}); err != nil {
		t.Fatal(err)
	}
	var rows int64
	err := filepath.WalkDir(filepath.Join(dir, table.Name)+"/", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if !strings.HasSuffix(p, ".parquet") {
			t.Errorf("%s in the table folder is not a Parquet file", p)
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		st, _ := f.Stat()
		pf, err := parquet.OpenFile(f, st.Size())
		if err != nil {
			return err
		}
		var names []string
		for _, c := range pf.Schema().Fields() {
			names = append(names, c.Name())
		}
		if !slices.Equal(names, custSchema.Names()) {
			t.Errorf("%s has columns %v, want %v", p, names, custSchema.Names())
		}
		rows += pf.NumRows()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if rows != 3 {
		t.Fatalf("table folder holds %d rows, want 3", rows)
	}
	for _, d := range []string{"region=eu", "region=us", "region=" + hiveNull} {
		if _, err := os.Stat(filepath.Join(dir, table.Name, d)); err != nil {
			t.Errorf("partition folder %s: %v", d, err)
		}
	}
}

// TestCDCCrash kills a Sink at each step of committing a CDC load and
// checks that a new one recovers exactly the committed rows and states.
func TestCDCCrash(t *testing.T) {
	tests := []struct {
		name      string
		at        moment
		between   bool // at the first end of a transaction of the states instead
		committed bool
		recover   bool // call Recover; else rely on GetState and the next commit
	}{
		{"after staging", afterStaging, false, false, true},
		{"in the ledger append", inLedgerAppend, false, false, true},
		{"after the ledger append", afterLedgerAppend, false, true, true},
		{"after the ledger append, no Recover", afterLedgerAppend, false, true, false},
		{"after the version folder, before its swap", beforeSwap, false, true, true},
		{"after the swap", afterSwap, false, true, true},
		{"after the swap, no Recover", afterSwap, false, true, false},
		{"before the states", beforeStates, false, true, true},
		{"after the states", afterStates, false, true, true},
		{"between the states' transactions", moment{}, true, true, true},
		{"between the states' transactions, no Recover", moment{}, true, true, false},
	}
	// Chunks of one state each, a transaction for each: the crashing load's
	// states take two transactions.
	defer func(n, tx int) { chunkTarget, stateTxChunks = n, tx }(chunkTarget, stateTxChunks)
	chunkTarget, stateTxChunks = 1, 1
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			opts := testOpts(dir)
			opts.BucketRows = 16
			s1 := openTest(t, opts)
			s1.syncStates = true // the crash points of the states are in the commit
			if err := s1.Ensure(ctx, []sinks.Table{custTable}); err != nil {
				t.Fatal(err)
			}
			want, seqs := map[int64]string{}, map[int64]int64{}
			var first cdcChange
			for id := range int64(200) {
				first.up = append(first.up, cust{id, "a", "", 1})
			}
			first.states = []sinks.StateEntry{{Key: ck(1), Value: []byte("one")}, {Key: ck(2), Value: []byte("two")}, {Key: "", Value: []byte("t1")}}
			if err := commitCDC(ctx, s1, custTable.Name, first); err != nil {
				t.Fatal(err)
			}
			model(want, first, seqs)
			wantState := map[string]string{ck(1): "one", ck(2): "two", "": "t1"}

			crashing := cdcChange{
				up:       []cust{{1, "b", "", 3}, {500, "new", "", 3}},
				rm:       []cust{{id: 2, seq: 1}},
				truncate: 1,
				states:   []sinks.StateEntry{{Key: ck(1), Value: []byte("one@3")}, {Key: ck(2), Value: nil}, {Key: ck(500), Value: []byte("500")}},
			}
			cr := crash(t, s1, tc.at, 1)
			if tc.between {
				// No file operation marks the moment: bbolt writes state.db.
				s1.betweenStates = func() error { cr.die(); return errCrash }
			}
			expectCrash(t, cr, "commit", commitCDC(ctx, s1, custTable.Name, crashing))
			s1.kill()
			if tc.committed {
				model(want, crashing, seqs)
				wantState = map[string]string{ck(1): "one@3", ck(500): "500", "": "t1"}
			}

			s2 := openTest(t, opts)
			if tc.recover {
				if err := s2.Recover(ctx); err != nil {
					t.Fatalf("Recover: %v", err)
				}
			}
			got, err := s2.GetState(ctx, custTable.Name, []string{ck(1), ck(2), ck(3), ck(500), ""})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(wantState) {
				t.Errorf("states %q, want %q", got, wantState)
			}
			for k, v := range wantState {
				if string(got[k]) != v {
					t.Errorf("state of %q: %q, want %q", k, got[k], v)
				}
			}
			sameContent(t, "after recovery", custContent(t, s2, custTable.Name), want)
			if !tc.recover {
				if err := s2.Recover(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if left := entries(t, filepath.Join(dir, stateDir, "staging")); len(left) != 0 {
				t.Errorf("staging holds %v after recovery", left)
			}
			for _, name := range entries(t, filepath.Join(dir, stateDir, "tables", custTable.Name)) {
				if strings.HasPrefix(name, "v") && !strings.HasSuffix(name, ".json") {
					if v, _ := parseVersionName(strings.TrimSuffix(name, idsSuffix)); v != manifestOf(t, s2, custTable.Name).Version {
						t.Errorf("stray version folder %s after recovery", name)
					}
				}
			}
			checkSidecars(t, s2, custTable.Name)
			// The next load applies on top.
			next := cdcChange{up: []cust{{600, "later", "", 9}}, states: []sinks.StateEntry{{Key: ck(600), Value: []byte("600")}}}
			if err := commitCDC(ctx, s2, custTable.Name, next); err != nil {
				t.Fatal(err)
			}
			model(want, next, seqs)
			sameContent(t, "after the next load", custContent(t, s2, custTable.Name), want)
		})
	}
}

// TestCDCPreparedOnStaleVersion commits two loads staged against the same
// version: the second's prepared files are stale and rebuilt when it
// publishes.
func TestCDCPreparedOnStaleVersion(t *testing.T) {
	ctx := context.Background()
	opts := testOpts(t.TempDir())
	s := openTest(t, opts)
	if err := s.Ensure(ctx, []sinks.Table{custTable}); err != nil {
		t.Fatal(err)
	}
	if err := commitCDC(ctx, s, custTable.Name, cdcChange{up: []cust{{1, "a", "", 1}, {2, "b", "", 1}}}); err != nil {
		t.Fatal(err)
	}
	begin := func(c cdcChange) sinks.Load {
		ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: nextLoadID(), Pipeline: "p", Flow: "cdc"})
		if err != nil {
			t.Fatal(err)
		}
		b, k, q := custRows(c.up)
		if err := ld.(sinks.CDCLoad).Upsert(ctx, custTable.Name, b, k, q); err != nil {
			t.Fatal(err)
		}
		return ld
	}
	l1 := begin(cdcChange{up: []cust{{1, "a1", "", 2}}})
	l2 := begin(cdcChange{up: []cust{{2, "b2", "", 2}}})
	// l2 prepares its files against version 1; before it takes the lock,
	// l1 commits and publishes version 2.
	when(t, s, afterStaging, 1, func() {
		if err := l1.Commit(ctx, sinks.Commit{}); err != nil {
			t.Errorf("commit of l1: %v", err)
		}
	})
	if err := l2.Commit(ctx, sinks.Commit{}); err != nil {
		t.Fatal(err)
	}
	s.led.mu.Lock()
	last := s.led.entries[len(s.led.entries)-1]
	s.led.mu.Unlock()
	if ce := last.cdcFor(custTable.Name); ce == nil || ce.Prepared != 1 {
		t.Fatalf("the second load's entry %+v, want files prepared on version 1", last.CDC)
	}
	if m := manifestOf(t, s, custTable.Name); m.Version != 3 {
		t.Fatalf("version %d, want 3", m.Version)
	}
	sameContent(t, "after both loads", custContent(t, s, custTable.Name), map[int64]string{1: "a1/NULL", 2: "b2/NULL"})
}

func TestCDCLease(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s1, s2 := openTest(t, testOpts(dir)), openTest(t, testOpts(dir))
	if err := s1.Ensure(ctx, []sinks.Table{custTable}); err != nil {
		t.Fatal(err)
	}
	if err := s1.AcquireLease(ctx, custTable.Name, "one", 0); err != nil {
		t.Fatal(err)
	}
	// A writer without the lease is refused while another holds it.
	err := commitCDC(ctx, s2, custTable.Name, cdcChange{up: []cust{{1, "x", "", 1}}})
	if !errors.Is(err, sinks.ErrLeaseHeld) || !strings.Contains(err.Error(), "holder one") {
		t.Fatalf("commit without the lease: %v, want ErrLeaseHeld naming holder one", err)
	}
	if err := commitCDC(ctx, s1, custTable.Name, cdcChange{up: []cust{{1, "a", "", 1}}}); err != nil {
		t.Fatalf("commit by the holder: %v", err)
	}
	// The holder dies: the lease is free.
	s1.kill()
	if err := s2.AcquireLease(ctx, custTable.Name, "two", 0); err != nil {
		t.Fatalf("AcquireLease after the holder died: %v", err)
	}
	if err := commitCDC(ctx, s2, custTable.Name, cdcChange{up: []cust{{2, "b", "", 1}}}); err != nil {
		t.Fatal(err)
	}
	sameContent(t, "after both holders", custContent(t, s2, custTable.Name), map[int64]string{1: "a/NULL", 2: "b/NULL"})
	if err := s2.Close(); err != nil {
		t.Fatal(err)
	}
	s3 := openTest(t, testOpts(dir))
	if err := s3.AcquireLease(ctx, custTable.Name, "three", 0); err != nil {
		t.Fatalf("AcquireLease after Close: %v", err)
	}
}

func TestCDCMisuse(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, testOpts(t.TempDir()))
	if err := s.Ensure(ctx, []sinks.Table{custTable, ordersTable}); err != nil {
		t.Fatal(err)
	}
	b, k, q := custRows([]cust{{1, "a", "", 1}})
	tests := []struct {
		name string
		call func(ld sinks.CDCLoad) error
	}{
		{"Write to a CDC target", func(ld sinks.CDCLoad) error { return ld.Write(ctx, custTable.Name, b) }},
		{"Upsert into an append target", func(ld sinks.CDCLoad) error { return ld.Upsert(ctx, "orders", ordersBatch(0, 1), k, q) }},
		{"Upsert into a missing table", func(ld sinks.CDCLoad) error { return ld.Upsert(ctx, "nope", b, k, q) }},
		{"Upsert with too few keys", func(ld sinks.CDCLoad) error { return ld.Upsert(ctx, custTable.Name, b, nil, nil) }},
		{"Upsert of other columns", func(ld sinks.CDCLoad) error { return ld.Upsert(ctx, custTable.Name, ordersBatch(0, 1), k, q) }},
		{"Remove with keys and seqs of different lengths", func(ld sinks.CDCLoad) error { return ld.Remove(ctx, custTable.Name, nil, k, nil) }},
		{"PutState of an append target", func(ld sinks.CDCLoad) error {
			return ld.PutState(ctx, "orders", []sinks.StateEntry{{Key: "a", Value: []byte("b")}})
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: nextLoadID(), Pipeline: "p", Flow: "cdc"})
			if err != nil {
				t.Fatal(err)
			}
			defer ld.Abort(ctx)
			if err := tc.call(ld.(sinks.CDCLoad)); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	if _, err := s.GetState(ctx, "orders", []string{"a"}); err == nil {
		t.Fatal("GetState of an append target succeeded")
	}
	if _, err := s.GetState(ctx, "nope", []string{"a"}); !errors.Is(err, sinks.ErrUnknownTable) {
		t.Fatalf("GetState of a missing table: %v, want ErrUnknownTable", err)
	}
}

// TestCDCCompactionAndGC: compaction leaves CDC targets alone, and
// superseded versions go with their sidecars.
func TestCDCCompactionAndGC(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := testOpts(dir)
	opts.CompactMinFiles = 2
	opts.BucketRows = 4
	s := openTest(t, opts)
	if err := s.Ensure(ctx, []sinks.Table{custTable}); err != nil {
		t.Fatal(err)
	}
	want, seqs := map[int64]string{}, map[int64]int64{}
	for i := range int64(5) {
		c := cdcChange{up: []cust{{i, "a", "", 1}, {i + 100, "b", "", 1}}}
		if err := commitCDC(ctx, s, custTable.Name, c); err != nil {
			t.Fatal(err)
		}
		model(want, c, seqs)
	}
	before := manifestOf(t, s, custTable.Name)
	if err := s.Compact(ctx, custTable.Name); err != nil {
		t.Fatal(err)
	}
	if after := manifestOf(t, s, custTable.Name); after.Version != before.Version {
		t.Fatalf("compaction made version %d of a CDC target", after.Version)
	}
	sameContent(t, "after compaction", custContent(t, s, custTable.Name), want)
	var left []string
	for _, name := range entries(t, filepath.Join(dir, stateDir, "tables", custTable.Name)) {
		if strings.HasPrefix(name, "v") {
			left = append(left, name)
		}
	}
	v := versionName(before.Version)
	if want := []string{v, v + ".ids", v + ".json"}; !slices.Equal(left, want) {
		t.Fatalf("versions on disk %v, want %v", left, want)
	}
}

func TestPairs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p")
	pw, err := createPairs(fsys.OS{}, path)
	if err != nil {
		t.Fatal(err)
	}
	pw.add("a", "")
	pw.addValue("", nil)
	pw.addValue("\x00\xff", []byte("v"))
	pw.add(strings.Repeat("k", 300), strings.Repeat("s", 70000))
	if n, err := pw.close(); err != nil || n != 4 {
		t.Fatalf("close: %d, %v", n, err)
	}
	p, err := readPairs(fsys.OS{}, path)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(p.a[:3], p.b[:3], p.absent) != fmt.Sprint([]string{"a", "", "\x00\xff"}, []string{"", "", "v"}, []bool{false, true, false, false}) ||
		p.a[3] != strings.Repeat("k", 300) || p.b[3] != strings.Repeat("s", 70000) {
		t.Fatalf("read back %q %q %v", p.a[:3], p.b[:3], p.absent)
	}
	data, _ := os.ReadFile(path)
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"cut", data[:len(data)-10]},
		{"flipped byte", append(append(slices.Clone(data[:20]), data[20]^1), data[21:]...)},
		{"empty", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := decodePairs(tc.data); err == nil {
				t.Fatal("a corrupt pairs file was accepted")
			}
		})
	}
}

// TestPrepareTakesStagedUpserts checks that a load of one upsert is
// prepared from the rows it staged, as read back from its staged file
// would give them, and that a load of several upserts (a snapshot's) keeps
// none in memory.
func TestPrepareTakesStagedUpserts(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, testOpts(t.TempDir()))
	if err := s.Ensure(ctx, []sinks.Table{custTable}); err != nil {
		t.Fatal(err)
	}
	begin := func() (*load, sinks.CDCLoad) {
		t.Helper()
		ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: nextLoadID(), Pipeline: "p", Flow: "cdc", Targets: []string{custTable.Name}})
		if err != nil {
			t.Fatal(err)
		}
		return ld.(*load), ld.(sinks.CDCLoad)
	}
	l, cl := begin()
	// Out of key order, a key twice (the later wins), NULLs, a removal.
	rm, rk, rq := custRows([]cust{{7, "x", "", 1}})
	if err := cl.Remove(ctx, custTable.Name, rm, rk, rq); err != nil {
		t.Fatal(err)
	}
	up, uk, uq := custRows([]cust{{5, "e", "eu", 3}, {2, "b", "", 2}, {5, "f", "", 4}, {9, "i", "us", 2}})
	if err := cl.Upsert(ctx, custTable.Name, up, uk, uq); err != nil {
		t.Fatal(err)
	}
	st := l.cdc[custTable.Name]
	if st.upBatch == nil {
		t.Fatal("a load's only upsert is not kept for its preparation")
	}
	ces, err := l.finishCDC(nil)
	if err != nil || len(ces) != 1 {
		t.Fatalf("finish: %v, %d tables", err, len(ces))
	}
	def, err := s.readTable(custTable.Name)
	if err != nil {
		t.Fatal(err)
	}
	fromFile, err := s.readChanges(l.meta.LoadID, custTable.Name, def, &ces[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	fromMemory, err := s.readChanges(l.meta.LoadID, custTable.Name, def, &ces[0], st.upBatch)
	if err != nil {
		t.Fatal(err)
	}
	rowsOf := func(c *cdcChanges) [][]any {
		var out [][]any
		for _, r := range c.upRows {
			out = append(out, c.up.Row(r))
		}
		return out
	}
	if !reflect.DeepEqual(rowsOf(fromMemory), rowsOf(fromFile)) ||
		!slices.Equal(fromMemory.upKeys, fromFile.upKeys) || !slices.Equal(fromMemory.upSeqs, fromFile.upSeqs) ||
		!slices.Equal(fromMemory.gone, fromFile.gone) {
		t.Fatalf("changes from the staged rows\n%v %v %v\ndiffer from the staged file's\n%v %v %v",
			rowsOf(fromMemory), fromMemory.upKeys, fromMemory.gone, rowsOf(fromFile), fromFile.upKeys, fromFile.gone)
	}
	if len(fromFile.upRows) != 3 || len(fromFile.gone) != 4 {
		t.Fatalf("%d upserts and %d identities gone, want 3 and 4", len(fromFile.upRows), len(fromFile.gone))
	}
	l.discard()

	l, cl = begin()
	for range 2 {
		if err := cl.Upsert(ctx, custTable.Name, up, uk, uq); err != nil {
			t.Fatal(err)
		}
	}
	if l.cdc[custTable.Name].upBatch != nil {
		t.Fatal("a load of two upserts keeps one in memory")
	}
	l.discard()
}
