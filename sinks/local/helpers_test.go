package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/local/fsys"
)

// openParquet opens the Parquet file at path with parquet-go, for the
// rest of the test.
func openParquet(t testing.TB, path string) *parquet.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return pf
}

// testOpts are Options for tests: no background compaction, superseded
// versions removed at once.
func testOpts(dir string) Options {
	return Options{Path: dir, Pipeline: "p", CompactInterval: -1, KeepVersions: -1}
}

// openTest opens a Sink for the rest of the test. Unless opts has a file
// system, a test's Sink gets an fsys.Faulty of its own (a benchmark's the
// real one), for faulty, crash and when to arm.
func openTest(t testing.TB, opts Options) *Sink {
	t.Helper()
	if _, bench := t.(*testing.B); opts.FS == nil && !bench {
		opts.FS = fsys.NewFaulty(fsys.OS{}, nil)
	}
	s, err := Open(context.Background(), opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var ordersSchema = batch.Schema{Columns: []batch.Column{
	{Name: "order_id", Type: batch.Int64},
	{Name: "customer", Type: batch.String},
	{Name: "status", Type: batch.String},
	{Name: "country", Type: batch.String},
	{Name: "sku", Type: batch.String},
	{Name: "amount", Type: batch.Decimal(12, 2)},
	{Name: "created_at", Type: batch.Timestamp},
	{Name: "quantity", Type: batch.Int64},
}}

var ordersTable = sinks.Table{Name: "orders", Schema: ordersSchema}

var statuses = []string{"new", "paid", "shipped", "delivered", "returned"}
var countries = []string{"DE", "FR", "US", "JP", "BR", "IN", "GB"}

// ordersBatch returns rows with order ids base..base+n-1.
func ordersBatch(base, n int) *batch.Batch {
	b := batch.New(ordersSchema, n)
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	for i := base; i < base+n; i++ {
		b.Vectors[0].AppendInt(int64(i))
		b.Vectors[1].AppendString(fmt.Sprintf("customer-%06d", i%50000))
		b.Vectors[2].AppendString(statuses[i%len(statuses)])
		b.Vectors[3].AppendString(countries[i%len(countries)])
		b.Vectors[4].AppendString(fmt.Sprintf("sku-%05d", (i*7919)%20000))
		b.Vectors[5].AppendDecimal(batch.Dec128FromInt64(int64(i%100000)*13 + 99))
		b.Vectors[6].AppendInt(t0 + int64(i)*1_000_003)
		b.Vectors[7].AppendInt(int64(1 + i%9))
	}
	return b
}

var loadSeq atomic.Int64

func nextLoadID() string { return fmt.Sprintf("L%d-%08d", os.Getpid(), loadSeq.Add(1)) }

// commitOrders commits one load of n orders from base for partition p,
// continuing from offset from (-1: none).
func commitOrders(ctx context.Context, s *Sink, p int32, from int64, base, n int) (string, error) {
	id := nextLoadID()
	ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: id, Pipeline: "p", Flow: "f", Targets: []string{"orders"}})
	if err != nil {
		return id, err
	}
	if err := ld.Write(ctx, "orders", ordersBatch(base, n)); err != nil {
		ld.Abort(ctx)
		return id, err
	}
	to := from + int64(n)
	if from < 0 {
		to = int64(n)
	}
	return id, ld.Commit(ctx, sinks.Commit{
		From: batch.Positions{{Topic: "orders", Partition: p, Offset: from}},
		To:   batch.Positions{{Topic: "orders", Partition: p, Offset: to}},
		Rows: int64(n),
	})
}

// checkConsistent verifies that a table holds exactly the rows of the
// committed loads: each load's Rows rows once, no row of another load, no
// order id twice. It returns the number of rows.
func checkConsistent(t *testing.T, s *Sink, table string) int {
	t.Helper()
	ctx := context.Background()
	led, err := s.Ledger(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Scan(ctx, table)
	if err != nil {
		t.Fatal(err)
	}
	perLoad := map[string]int64{}
	for _, id := range b.Column(batch.LoadIDColumn).Strs {
		perLoad[id]++
	}
	committed := map[string]bool{}
	for _, l := range led.Loads {
		committed[l.LoadID] = true
		if got := perLoad[l.LoadID]; got != l.Rows {
			t.Errorf("load %s: %d rows in %s, ledger says %d", l.LoadID, got, table, l.Rows)
		}
	}
	for id, n := range perLoad {
		if !committed[id] {
			t.Errorf("%d rows of uncommitted load %s in %s", n, id, table)
		}
	}
	seen := map[int64]bool{}
	for _, id := range b.Column("order_id").Ints {
		if seen[id] {
			t.Errorf("order %d twice", id)
		}
		seen[id] = true
	}
	return b.Len()
}

// entries lists a folder's names, for assertions on leftovers.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// versionDirs lists a table's version folders.
func versionDirs(t *testing.T, dir, table string) []string {
	t.Helper()
	var out []string
	for _, n := range entries(t, filepath.Join(dir, stateDir, "tables", table)) {
		if _, ok := parseVersionName(n); ok {
			out = append(out, n)
		}
	}
	return out
}
