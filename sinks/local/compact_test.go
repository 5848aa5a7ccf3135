package local

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go/format"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
)

func TestCompact(t *testing.T) {
	tests := []struct {
		name      string
		loads     int
		minFiles  int
		small     int64
		wantFiles int
	}{
		{"too few small files", 3, 4, 1 << 20, 3},
		{"merges all small files", 6, 4, 1 << 20, 1},
		{"files above the size limit stay", 6, 2, 1, 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			opts := testOpts(dir)
			opts.CompactMinFiles, opts.CompactSmallBytes = tc.minFiles, tc.small
			s := openTest(t, opts)
			if err := s.Ensure(ctx, []sinks.Table{ordersTable}); err != nil {
				t.Fatal(err)
			}
			from := int64(-1)
			for i := range tc.loads {
				if _, err := commitOrders(ctx, s, 0, from, i*100, 100); err != nil {
					t.Fatal(err)
				}
				from = int64(i*100 + 100)
			}
			before, err := s.Scan(ctx, "orders")
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Compact(ctx, "orders"); err != nil {
				t.Fatalf("Compact: %v", err)
			}
			m, err := s.current("orders")
			if err != nil {
				t.Fatal(err)
			}
			if len(m.Files) != tc.wantFiles {
				t.Fatalf("%d files after compaction, want %d", len(m.Files), tc.wantFiles)
			}
			if n := checkConsistent(t, s, "orders"); n != tc.loads*100 {
				t.Fatalf("%d rows after compaction, want %d", n, tc.loads*100)
			}
			after, err := s.Scan(ctx, "orders")
			if err != nil {
				t.Fatal(err)
			}
			if !sameRows(before, after) {
				t.Fatal("compaction changed the rows")
			}
			if len(m.Files) == 1 {
				checkCodec(t, filepath.Join(dir, "orders", m.Files[0].Name), format.Zstd)
			}
		})
	}
}

// sameRows compares two batches of one schema as multisets of rows.
func sameRows(a, b *batch.Batch) bool {
	if a.Len() != b.Len() || !a.Schema.Equal(b.Schema) {
		return false
	}
	count := map[string]int{}
	for i := range a.Len() {
		count[rowKey(a, i)]++
	}
	for i := range b.Len() {
		count[rowKey(b, i)]--
	}
	for _, n := range count {
		if n != 0 {
			return false
		}
	}
	return true
}

func rowKey(b *batch.Batch, i int) string {
	var s string
	for _, v := range b.Row(i) {
		s += "|" + formatAny(v)
	}
	return s
}

func formatAny(v any) string {
	switch x := v.(type) {
	case nil:
		return "NULL"
	case []byte:
		return "b:" + string(x)
	case time.Time:
		return x.Format(time.RFC3339Nano)
	case interface{ String() string }:
		return x.String()
	}
	return fmt.Sprint(v)
}

func checkCodec(t *testing.T, path string, want format.CompressionCodec) {
	t.Helper()
	pf := openParquet(t, path)
	for _, rg := range pf.Metadata().RowGroups {
		for _, c := range rg.Columns {
			if c.MetaData.Codec != want {
				t.Fatalf("%s: column %v compressed with %v, want %v", path, c.MetaData.PathInSchema, c.MetaData.Codec, want)
			}
		}
	}
}

// TestCompactAfterAddedColumn merges files written before and after a
// column was added: old rows read NULL in it, before and after.
func TestCompactAfterAddedColumn(t *testing.T) {
	ctx := context.Background()
	opts := testOpts(t.TempDir())
	opts.CompactMinFiles = 2
	s := openTest(t, opts)
	if err := s.Ensure(ctx, []sinks.Table{ordersTable}); err != nil {
		t.Fatal(err)
	}
	if _, err := commitOrders(ctx, s, 0, -1, 0, 10); err != nil {
		t.Fatal(err)
	}
	wider := batch.Schema{Columns: append(append([]batch.Column{}, ordersSchema.Columns...),
		batch.Column{Name: "note", Type: batch.String, Nullable: true})}
	if err := s.Ensure(ctx, []sinks.Table{{Name: "orders", Schema: wider}}); err != nil {
		t.Fatal(err)
	}
	b := &batch.Batch{Schema: wider, Vectors: append(ordersBatch(10, 5).Vectors, batch.NewVector(batch.String, 5))}
	for i := range 5 {
		b.Vectors[8].AppendString(string(rune('a' + i)))
	}
	ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: "wide", Pipeline: "p", Flow: "f"})
	if err != nil {
		t.Fatal(err)
	}
	if err := ld.Write(ctx, "orders", b); err != nil {
		t.Fatal(err)
	}
	if err := ld.Commit(ctx, sinks.Commit{Rows: 5}); err != nil {
		t.Fatal(err)
	}
	before, err := s.Scan(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	after, err := s.Scan(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := s.current("orders"); len(m.Files) != 1 {
		t.Fatalf("%d files after compaction, want 1", len(m.Files))
	}
	if !sameRows(before, after) {
		t.Fatal("compaction changed the rows")
	}
	nulls := 0
	for i := range after.Len() {
		if after.Vectors[8].IsNull(i) {
			nulls++
		}
	}
	if nulls != 10 {
		t.Fatalf("%d NULL notes, want the 10 rows loaded before the column existed", nulls)
	}
}

// TestCompactionConcurrentWithCommits runs compactions (the background loop
// and direct calls, in two Sinks on one folder as two processes would) while
// writers commit and a reader scans: no row is lost or doubled, no commit is
// lost, and every scan sees whole loads.
func TestCompactionConcurrentWithCommits(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := testOpts(dir)
	opts.CompactMinFiles = 3
	opts.CompactInterval = 5 * time.Millisecond
	s1 := openTest(t, opts)
	opts.CompactInterval = -1
	s2 := openTest(t, opts)
	if err := s1.Ensure(ctx, []sinks.Table{ordersTable}); err != nil {
		t.Fatal(err)
	}
	const writers, loads, rows = 3, 15, 20
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	done := make(chan struct{})
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := []*Sink{s1, s2}[w%2]
			from := int64(-1)
			for l := range loads {
				base := (w*loads + l) * rows
				if _, err := commitOrders(ctx, s, int32(w), from, base, rows); err != nil {
					errs <- err
					return
				}
				from = int64((l + 1) * rows)
			}
		}()
	}
	var side sync.WaitGroup
	side.Add(2)
	go func() { // direct compactions in the other Sink
		defer side.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := s2.Compact(ctx, "orders"); err != nil {
				errs <- err
				return
			}
		}
	}()
	go func() { // a reader: every scan holds whole loads
		defer side.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			b, err := s2.Scan(ctx, "orders")
			if err != nil {
				errs <- err
				return
			}
			perLoad := map[string]int{}
			for _, id := range b.Column(batch.LoadIDColumn).Strs {
				perLoad[id]++
			}
			for id, n := range perLoad {
				if n != rows {
					errs <- errors.New("scan saw part of load " + id)
					return
				}
			}
		}
	}()
	wg.Wait()
	close(done)
	side.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := s2.Compact(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if n := checkConsistent(t, s1, "orders"); n != writers*loads*rows {
		t.Fatalf("%d rows, want %d", n, writers*loads*rows)
	}
	led, err := s1.Ledger(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(led.Loads) != writers*loads {
		t.Fatalf("%d loads in the ledger, want %d", len(led.Loads), writers*loads)
	}
	m, err := s1.current("orders")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Files) >= writers*loads {
		t.Fatalf("%d files: nothing was compacted", len(m.Files))
	}
}

// TestBackgroundCompaction checks that Open's background loop compacts and
// that Close stops it.
func TestBackgroundCompaction(t *testing.T) {
	ctx := context.Background()
	opts := testOpts(t.TempDir())
	opts.CompactMinFiles = 3
	opts.CompactInterval = 5 * time.Millisecond
	s, err := Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ensure(ctx, []sinks.Table{ordersTable}); err != nil {
		t.Fatal(err)
	}
	from := int64(-1)
	for i := range 6 {
		if _, err := commitOrders(ctx, s, 0, from, i*10, 10); err != nil {
			t.Fatal(err)
		}
		from = int64(i*10 + 10)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, err := s.current("orders")
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Files) < 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %d files after 10s of background compaction", len(m.Files))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := checkConsistent(t, s, "orders"); n != 60 {
		t.Fatalf("%d rows, want 60", n)
	}
	done := make(chan error)
	go func() { done <- s.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not stop the background compaction")
	}
	if err := s.Compact(ctx, "orders"); !errors.Is(err, errClosed) {
		t.Fatalf("Compact after Close: %v, want errClosed", err)
	}
}

// TestSmallLoadsKeepFewFiles: many one-row loads do not pile files up in
// a table: a publication that leaves a size tier with CompactMinFiles small
// files wakes the background compaction at once, so the table's files stay
// bounded by the tiers, not by the loads.
func TestSmallLoadsKeepFewFiles(t *testing.T) {
	ctx := context.Background()
	opts := testOpts(t.TempDir())
	opts.CompactInterval, opts.CompactMinFiles = time.Hour, 4
	s := openTest(t, opts)
	if err := s.Ensure(ctx, []sinks.Table{ordersTable}); err != nil {
		t.Fatal(err)
	}
	most := 0
	from := int64(-1)
	for i := range 300 {
		if _, err := commitOrders(ctx, s, 0, from, i, 1); err != nil {
			t.Fatal(err)
		}
		from = int64(i + 1)
		// Under the lock: the background compaction publishes meanwhile,
		// and removes superseded versions at once (KeepVersions -1).
		unlock, err := s.lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m, err := s.current("orders")
		unlock()
		if err != nil {
			t.Fatal(err)
		}
		most = max(most, len(m.Files))
	}
	// At most a few tiers of fewer than 4 files, and the merges in flight.
	if most > 24 {
		t.Errorf("the table held up to %d files over 300 one-row loads, want a bound that does not grow with them", most)
	}
	if n := checkConsistent(t, s, "orders"); n != 300 {
		t.Fatalf("%d rows, want 300", n)
	}
	t.Logf("at most %d files over 300 loads", most)
}
