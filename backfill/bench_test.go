package backfill

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/sluicehq/sluice/flows/batch"
)

type benchRow struct {
	ID     int64   `parquet:"id"`
	Name   string  `parquet:"name,dict"`
	Amount int64   `parquet:"amount,decimal(2:12)"`
	Price  float64 `parquet:"price"`
	At     int64   `parquet:"at,timestamp(microsecond)"`
	Note   *string `parquet:"note,optional"`
	OK     bool    `parquet:"ok"`
}

const benchRows = 1_000_000

func writeBenchFile(b *testing.B) string {
	b.Helper()
	path := filepath.Join(b.TempDir(), "bench.parquet")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := parquet.NewGenericWriter[benchRow](f, parquet.Compression(&parquet.Snappy), parquet.MaxRowsPerRowGroup(128<<10))
	rows := make([]benchRow, 0, 10_000)
	notes := []string{"first", "second", "a longer note about this order"}
	for i := range benchRows {
		r := benchRow{ID: int64(i), Name: fmt.Sprintf("customer-%d", i%5000), Amount: int64(i * 37 % 1_000_000),
			Price: float64(i) * 0.25, At: 1_700_000_000_000_000 + int64(i)*1000, OK: i%3 == 0}
		if i%4 != 0 {
			r.Note = &notes[i%3]
		}
		rows = append(rows, r)
		if len(rows) == cap(rows) {
			if _, err := w.Write(rows); err != nil {
				b.Fatal(err)
			}
			rows = rows[:0]
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	return path
}

// BenchmarkParquetRead reads a file of 1M rows (7 columns, row groups of
// 128Ki rows, Snappy) with the backfill reader into columnar batches, and
// with parquet-go's generic reader into structs, for comparison.
func BenchmarkParquetRead(b *testing.B) {
	path := writeBenchFile(b)
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	file := File{Name: "bench.parquet", Path: path, Size: st.Size()}
	schema := cols(col("id", batch.Int64, false), col("name", batch.String, false), col("amount", batch.Decimal(12, 2), false),
		col("price", batch.Float64, false), col("at", batch.Timestamp, false), col("note", batch.String, true), col("ok", batch.Bool, false))
	b.Run("backfill", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(st.Size())
		for b.Loop() {
			r, err := Open(file, FormatParquet, schema, ReadOptions{})
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for {
				c, err := r.Next(context.Background())
				if err == io.EOF {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
				n += c.Batch.Len()
			}
			r.Close()
			if n != benchRows {
				b.Fatalf("read %d rows", n)
			}
		}
		b.ReportMetric(float64(benchRows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	})
	b.Run("parquet-go-generic", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(st.Size())
		buf := make([]benchRow, 10_000)
		for b.Loop() {
			f, err := os.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			r := parquet.NewGenericReader[benchRow](f)
			n := 0
			for {
				k, err := r.Read(buf)
				n += k
				if err == io.EOF {
					break
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			r.Close()
			f.Close()
			if n != benchRows {
				b.Fatalf("read %d rows", n)
			}
		}
		b.ReportMetric(float64(benchRows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	})
}
