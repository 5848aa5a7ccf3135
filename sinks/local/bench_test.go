package local

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/local/fsys"
)

// batchBytes is the size of a batch's values in memory, for b.SetBytes.
func batchBytes(b *batch.Batch) int64 {
	var n int64
	for _, v := range b.Vectors {
		n += int64(8 * len(v.Ints))
		n += int64(8 * len(v.Floats))
		n += int64(len(v.Bools))
		n += int64(16 * len(v.Decs))
		for _, s := range v.Strs {
			n += int64(len(s))
		}
		for _, s := range v.Bytes {
			n += int64(len(s))
		}
	}
	return n
}

// BenchmarkLoad commits 100k-row loads of an orders table through
// Begin/Write/Commit: staging, fsyncs, the ledger append and publishing.
func BenchmarkLoad(b *testing.B) {
	const rows = 100_000
	ctx := context.Background()
	opts := testOpts(b.TempDir())
	opts.KeepVersions = 0 // the default
	s := openTest(b, opts)
	if err := s.Ensure(ctx, []sinks.Table{ordersTable}); err != nil {
		b.Fatal(err)
	}
	data := ordersBatch(0, rows)
	b.SetBytes(batchBytes(data))
	b.ReportAllocs()
	b.ResetTimer()
	from := int64(-1)
	for i := range b.N {
		ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: fmt.Sprintf("bench-%d", i), Pipeline: "p", Flow: "f", Targets: []string{"orders"}})
		if err != nil {
			b.Fatal(err)
		}
		if err := ld.Write(ctx, "orders", data); err != nil {
			b.Fatal(err)
		}
		to := max(from, 0) + rows
		if err := ld.Commit(ctx, sinks.Commit{
			From: batch.Positions{{Topic: "orders", Offset: from}},
			To:   batch.Positions{{Topic: "orders", Offset: to}},
			Rows: rows,
		}); err != nil {
			b.Fatal(err)
		}
		from = to
	}
	b.ReportMetric(float64(b.N*rows)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkWriteFile writes 1M orders to one Parquet file: the encoding
// cost alone.
func BenchmarkWriteFile(b *testing.B) {
	const rows = 1_000_000
	dir := b.TempDir()
	data := ordersBatch(0, rows)
	b.SetBytes(batchBytes(data))
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		fw, err := createFile(fsys.OS{}, filepath.Join(dir, fmt.Sprintf("f%d.parquet", i)), ordersSchema, "0123456789abcdef0123456789abcdef", loadCodec)
		if err != nil {
			b.Fatal(err)
		}
		if err := fw.write(data); err != nil {
			b.Fatal(err)
		}
		if _, err := fw.close(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*rows)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkScan reads back 1M orders.
func BenchmarkScan(b *testing.B) {
	ctx := context.Background()
	s := openTest(b, testOpts(b.TempDir()))
	if err := s.Ensure(ctx, []sinks.Table{ordersTable}); err != nil {
		b.Fatal(err)
	}
	for i := range 10 {
		ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: fmt.Sprintf("scan-%d", i), Pipeline: "p", Flow: "f"})
		if err != nil {
			b.Fatal(err)
		}
		if err := ld.Write(ctx, "orders", ordersBatch(i*100_000, 100_000)); err != nil {
			b.Fatal(err)
		}
		if err := ld.Commit(ctx, sinks.Commit{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		out, err := s.Scan(ctx, "orders")
		if err != nil || out.Len() != 1_000_000 {
			b.Fatalf("scan: %d rows, %v", out.Len(), err)
		}
	}
	b.ReportMetric(float64(b.N*1_000_000)/b.Elapsed().Seconds(), "rows/s")
}

// cdcBench is a CDC target of rows rows (ids 0..rows-1) and as many key
// states.
func cdcBench(b *testing.B, rows int) *Sink {
	b.Helper()
	ctx := context.Background()
	opts := testOpts(b.TempDir())
	s := openTest(b, opts)
	if err := s.Ensure(ctx, []sinks.Table{custTable}); err != nil {
		b.Fatal(err)
	}
	const chunk = 250_000
	for from := 0; from < rows; from += chunk {
		c := cdcChange{}
		for id := int64(from); id < int64(min(rows, from+chunk)); id++ {
			c.up = append(c.up, cust{id, fmt.Sprintf("customer-%d", id), "eu", 1})
			c.states = append(c.states, sinks.StateEntry{Key: ck(id), Value: []byte(fmt.Sprintf("state of %d at 1", id))})
		}
		if err := commitCDC(ctx, s, custTable.Name, c); err != nil {
			b.Fatal(err)
		}
	}
	return s
}

// BenchmarkCDCLoad commits 100k upserts (and their states) into a 1M-row
// SCD type 1 target: keys spread over every bucket (the whole table is
// rewritten) or held in two of its 16 buckets (an eighth is).
func BenchmarkCDCLoad(b *testing.B) {
	const rows, n = 1_000_000, 100_000
	ctx := context.Background()
	s := cdcBench(b, rows)
	buckets := manifestOf(&testing.T{}, s, custTable.Name).Buckets
	for _, tc := range []struct {
		name string
		ids  func(round int) []int64
	}{
		{"every_bucket", func(round int) []int64 {
			out := make([]int64, n)
			for i := range out {
				out[i] = int64((i*9 + round) % rows)
			}
			return out
		}},
		{"two_buckets", func(round int) []int64 {
			ids := keysInBuckets(0, n, buckets, 1, 2)
			return ids
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				var c cdcChange
				for _, id := range tc.ids(i) {
					c.up = append(c.up, cust{id, "updated", "eu", int64(2 + i)})
					c.states = append(c.states, sinks.StateEntry{Key: ck(id), Value: []byte("state at 2")})
				}
				if err := commitCDC(ctx, s, custTable.Name, c); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// BenchmarkGetState reads the states of 100k random keys of a 1M-key
// target.
func BenchmarkGetState(b *testing.B) {
	const rows, n = 1_000_000, 100_000
	ctx := context.Background()
	s := cdcBench(b, rows)
	keys := make([]string, n)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		for j := range keys {
			keys[j] = ck(int64((j*7919 + i*31) % rows))
		}
		got, err := s.GetState(ctx, custTable.Name, keys)
		if err != nil {
			b.Fatal(err)
		}
		if len(got) < n*9/10 {
			b.Fatalf("%d states for %d keys", len(got), n)
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "keys/s")
}
