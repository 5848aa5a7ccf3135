package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/shopspring/decimal"
)

// benchEnv reads a positive integer from an environment variable, def when
// unset.
func benchEnv(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// The backfill benchmarks' sizes: SLUICE_BENCH_BACKFILL_ROWS rows (default
// 5,000,000) in SLUICE_BENCH_BACKFILL_FILES files (default 50), written in
// row groups of backfillRowGroup rows.
func backfillBenchSize() (rows, files int) {
	return benchEnv("SLUICE_BENCH_BACKFILL_ROWS", 5_000_000), benchEnv("SLUICE_BENCH_BACKFILL_FILES", 50)
}

const (
	backfillRowGroup = 50_000
	// backfillBatch is the rows of one raw insert, sluice's default
	// batch.rows.
	backfillBatch = 100_000
)

// backfillBenchSpec is a pipeline of one append once-flow of every Parquet
// file under in/ into target t (the eight columns of backfillRow), in
// sluice's default batches. Argument: destination.
const backfillBenchSpec = `pipeline: bench_backfill
destination: %s
tables:
  - name: t
    columns:
` + backfillColumns + `flows:
  - name: hist
    target: t
    kind: append
    once: true
    source: {files: {path: "in/**/*.parquet"}}
`

// BenchmarkBackfillLocal measures a backfill of Parquet files into the local
// destination by the binary (`sluice update` of an append once-flow, wall
// time and peak RSS), against parquet-go reading the same files (every
// column, page by page) and parquet-go writing the same rows into one file
// per input file, in the same run. Run it with -benchtime 1x (make bench
// does).
func BenchmarkBackfillLocal(b *testing.B) { benchBackfill(b, "local") }

// BenchmarkBackfillClickHouse is BenchmarkBackfillLocal into ClickHouse, its
// raw insert a clickhouse-go columnar insert of the same rows into a plain
// MergeTree table; it needs SLUICE_CLICKHOUSE_ADDR.
func BenchmarkBackfillClickHouse(b *testing.B) { benchBackfill(b, "clickhouse") }

func benchBackfill(b *testing.B, kind string) {
	var addr string
	if kind == "clickhouse" {
		addr = clickHouseAddr(b)
	}
	n, nFiles := backfillBenchSize()
	perFile := n / nFiles
	n = perFile * nFiles
	for b.Loop() {
		var d destination = localDest{}
		if kind == "clickhouse" {
			d = newClickHouseDest(b, addr)
		}
		spec := writeSpecText(b, fmt.Sprintf(backfillBenchSpec, d.yaml()))
		dir := filepath.Dir(spec)
		began := time.Now()
		files := writeBackfillFiles(b, dir, "in", nFiles, perFile, backfillRowGroup, 0)
		var size int64
		for _, f := range files {
			st, err := os.Stat(filepath.Join(dir, f.name))
			if err != nil {
				b.Fatal(err)
			}
			size += st.Size()
		}
		fmt.Printf("backfill into %s: %d rows in %d Parquet files (%.1f MB, row groups of %d), written in %s\n",
			kind, n, nFiles, float64(size)/1e6, backfillRowGroup, time.Since(began).Round(time.Millisecond))

		read := rawParquetRead(b, dir, files)
		run := timedUpdate(b, spec)
		if rows, distinct := d.count(b, spec, "t", "id"); rows != int64(n) || distinct != int64(n) {
			b.Fatalf("backfill: %d rows, %d distinct ids; want %d each", rows, distinct, n)
		}
		var raw time.Duration
		switch d := d.(type) {
		case *clickHouseDest:
			raw = rawClickHouseInsert(b, d, n)
		default:
			raw = rawParquetWrite(b, b.TempDir(), files)
		}

		rate, readRate, rawRate := float64(n)/run.took.Seconds(), float64(n)/read.Seconds(), float64(n)/raw.Seconds()
		b.ReportMetric(rate, "backfill_rows/s")
		b.ReportMetric(float64(run.maxRSS)/(1<<20), "backfill_peak_RSS_MiB")
		b.ReportMetric(readRate, "raw_read_rows/s")
		b.ReportMetric(rawRate, "raw_insert_rows/s")
		b.ReportMetric(rate/rawRate, "ratio_vs_raw_insert")
		b.ReportMetric(rate/readRate, "ratio_vs_raw_read")
		rawName := "parquet-go write, one file per input file"
		if kind == "clickhouse" {
			rawName = "clickhouse-go columnar insert, batches of 100k"
		}
		fmt.Printf("  sluice update  %9.0f rows/s (%.1f MB/s of Parquet, %s), peak RSS %d MiB\n",
			rate, float64(size)/1e6/run.took.Seconds(), run.took.Round(time.Millisecond), run.maxRSS>>20)
		fmt.Printf("  raw read       %9.0f rows/s (%s; parquet-go, every column, %d files at once)\n",
			readRate, read.Round(time.Millisecond), runtime.GOMAXPROCS(0))
		fmt.Printf("  raw insert     %9.0f rows/s (%s; %s)\n", rawRate, raw.Round(time.Millisecond), rawName)
		fmt.Printf("  backfill / raw insert %.2f, backfill / raw read %.2f\n", rate/rawRate, rate/readRate)
	}
}

// rawParquetRead reads every value of every column of the files with
// parquet-go, page by page, as many files at once as there are CPUs (as
// sluice's files source by default), and returns the time it took.
func rawParquetRead(b *testing.B, dir string, files []backfillFile) time.Duration {
	b.Helper()
	var rows, values, next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, len(files))
	start := time.Now()
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			buf := make([]parquet.Value, 4096)
			for {
				i := int(next.Add(1)) - 1
				if i >= len(files) {
					return
				}
				r, v, err := readAllValues(filepath.Join(dir, files[i].name), buf)
				if err != nil {
					errs <- err
					return
				}
				rows.Add(r)
				values.Add(v)
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	var want int64
	for _, f := range files {
		want += f.rows
	}
	if cols := int64(len(parquet.SchemaOf(backfillRow{}).Columns())); rows.Load() != want || values.Load() != want*cols {
		b.Fatalf("raw read: %d rows and %d values, want %d rows of %d columns", rows.Load(), values.Load(), want, cols)
	}
	return took
}

// readAllValues decodes every page of every column chunk of a Parquet file
// and returns its rows (the values of its first column) and values.
func readAllValues(path string, buf []parquet.Value) (rows, values int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, 0, err
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", path, err)
	}
	for _, rg := range pf.RowGroups() {
		for c, cc := range rg.ColumnChunks() {
			pages := cc.Pages()
			for {
				p, err := pages.ReadPage()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					pages.Close()
					return 0, 0, fmt.Errorf("%s: %w", path, err)
				}
				vr := p.Values()
				for {
					k, err := vr.ReadValues(buf)
					values += int64(k)
					if c == 0 {
						rows += int64(k)
					}
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						pages.Close()
						return 0, 0, fmt.Errorf("%s: %w", path, err)
					}
				}
				parquet.Release(p)
			}
			pages.Close()
		}
	}
	return rows, values, nil
}

// rawParquetWrite writes the rows of each input file with parquet-go into
// one Snappy-compressed file of its own (like sluice's load files), in
// batches of backfillBatch rows, and returns the time of the writes (the
// rows are made beforehand, untimed).
func rawParquetWrite(b *testing.B, dir string, files []backfillFile) time.Duration {
	b.Helper()
	var took time.Duration
	rows := make([]backfillRow, 0, backfillBatch)
	for i, f := range files {
		fh, err := os.Create(filepath.Join(dir, fmt.Sprintf("out-%03d.parquet", i)))
		if err != nil {
			b.Fatal(err)
		}
		w := parquet.NewGenericWriter[backfillRow](fh, parquet.Compression(&parquet.Snappy), parquet.MaxRowsPerRowGroup(backfillBatch))
		for lo := f.first; lo < f.first+f.rows; lo += backfillBatch {
			rows = rows[:0]
			for id := lo; id < min(lo+backfillBatch, f.first+f.rows); id++ {
				rows = append(rows, newBackfillRow(id))
			}
			start := time.Now()
			if _, err := w.Write(rows); err != nil {
				b.Fatal(err)
			}
			took += time.Since(start)
		}
		start := time.Now()
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
		if err := fh.Close(); err != nil {
			b.Fatal(err)
		}
		took += time.Since(start)
	}
	return took
}

// rawClickHouseInsert creates a plain MergeTree table of backfillRow's
// columns and inserts rows 0..n-1 with clickhouse-go's columnar batches of
// backfillBatch rows; it returns the time of the inserts (the columns are
// made beforehand, untimed) after checking the table's count.
func rawClickHouseInsert(b *testing.B, d *clickHouseDest, n int) time.Duration {
	b.Helper()
	ctx := context.Background()
	table := d.db + ".raw"
	ddl := "CREATE TABLE " + table + ` (id Int64, customer_id Int64, created_at DateTime, status String, country String,
	amount Decimal(12, 2), note Nullable(String), items Int64) ENGINE = MergeTree ORDER BY tuple()`
	if err := d.conn.Exec(ctx, ddl); err != nil {
		b.Fatal(err)
	}
	var took time.Duration
	var (
		id, customer, items []int64
		created             []time.Time
		status, country     []string
		amount              []decimal.Decimal
		note                []*string
	)
	for lo := 0; lo < n; lo += backfillBatch {
		id, customer, items, created, status, country, amount, note = id[:0], customer[:0], items[:0], created[:0], status[:0], country[:0], amount[:0], note[:0]
		for i := lo; i < min(lo+backfillBatch, n); i++ {
			r := newBackfillRow(int64(i))
			id, customer, items = append(id, r.ID), append(customer, r.CustomerID), append(items, r.Items)
			created, status, country = append(created, r.CreatedAt), append(status, r.Status), append(country, r.Country)
			amount, note = append(amount, decimal.New(r.Amount, -2)), append(note, r.Note)
		}
		start := time.Now()
		bt, err := d.conn.PrepareBatch(ctx, "INSERT INTO "+table+" (id, customer_id, created_at, status, country, amount, note, items)")
		if err != nil {
			b.Fatal(err)
		}
		for i, col := range []any{id, customer, created, status, country, amount, note, items} {
			if err := bt.Column(i).Append(col); err != nil {
				b.Fatalf("column %d: %v", i, err)
			}
		}
		if err := bt.Send(); err != nil {
			b.Fatal(err)
		}
		took += time.Since(start)
	}
	var rows, distinct uint64
	d.queryRow(b, []any{&rows, &distinct}, "SELECT count(), uniqExact(id) FROM "+table)
	if rows != uint64(n) || distinct != uint64(n) {
		b.Fatalf("raw insert: %d rows, %d distinct ids; want %d each", rows, distinct, n)
	}
	return took
}

// snapshotBenchSpec is a pipeline of one auto_cdc_from_snapshot flow (SCD
// type 1, key id) of the versions under snaps/ into target t. Argument:
// destination.
var snapshotBenchSpec = `pipeline: bench_snapshot
destination: %s
tables:
  - name: t
flows:
  - name: snap
    target: t
    kind: auto_cdc_from_snapshot
    source:
      snapshots:
        path: "snaps/{version}/*.parquet"
        format: parquet
        columns:
` + strings.ReplaceAll(backfillColumns, "      - ", "          - ") + `    keys: [id]
    stored_as_scd_type: 1
`

// snapshotFiles is the number of files of a snapshot version.
const snapshotFiles = 4

// writeSnapshot writes snapshot version v of rows (sorted by id) into
// dir/snaps/v, in snapshotFiles files, with its _SUCCESS marker.
func writeSnapshot(b *testing.B, dir string, v int, rows []backfillRow) {
	b.Helper()
	folder := filepath.Join(dir, "snaps", strconv.Itoa(v))
	if err := os.MkdirAll(folder, 0o755); err != nil {
		b.Fatal(err)
	}
	per := (len(rows) + snapshotFiles - 1) / snapshotFiles
	for i := range snapshotFiles {
		part := rows[min(i*per, len(rows)):min((i+1)*per, len(rows))]
		fh, err := os.Create(filepath.Join(folder, fmt.Sprintf("part-%d.parquet", i)))
		if err != nil {
			b.Fatal(err)
		}
		w := parquet.NewGenericWriter[backfillRow](fh, parquet.Compression(&parquet.Snappy), parquet.MaxRowsPerRowGroup(backfillBatch))
		if _, err := w.Write(part); err != nil {
			b.Fatal(err)
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
		if err := fh.Close(); err != nil {
			b.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(folder, "_SUCCESS"), nil, 0o644); err != nil {
		b.Fatal(err)
	}
}

// snapshotVersions returns version 1, ids 0..n-1, and version 2: every
// tenth row changed (status "changed", amount + 1), every hundredth row
// (others than the changed ones) gone, and n/100 new rows with ids from n
// on.
func snapshotVersions(n int) (v1, v2 []backfillRow) {
	v1 = make([]backfillRow, n)
	v2 = make([]backfillRow, 0, n)
	for i := range v1 {
		r := newBackfillRow(int64(i))
		v1[i] = r
		switch {
		case i%10 == 0:
			r.Status, r.Amount = "changed", r.Amount+1
		case i%100 == 1:
			continue // deleted
		}
		v2 = append(v2, r)
	}
	for i := n; i < n+n/100; i++ {
		v2 = append(v2, newBackfillRow(int64(i)))
	}
	return v1, v2
}

// BenchmarkSnapshotDiffLocal measures an auto_cdc_from_snapshot flow
// (SCD type 1) applying a snapshot version of SLUICE_BENCH_SNAPSHOT_ROWS rows
// (default 1,000,000) onto a target holding the previous version of as many
// rows (10% of the rows changed, 1% deleted, 1% new): the binary's wall
// time and peak RSS for the first version and for the diff. Run it with
// -benchtime 1x (make bench does).
func BenchmarkSnapshotDiffLocal(b *testing.B) { benchSnapshotDiff(b, "local") }

// BenchmarkSnapshotDiffClickHouse is BenchmarkSnapshotDiffLocal into
// ClickHouse; it needs SLUICE_CLICKHOUSE_ADDR.
func BenchmarkSnapshotDiffClickHouse(b *testing.B) { benchSnapshotDiff(b, "clickhouse") }

func benchSnapshotDiff(b *testing.B, kind string) {
	var addr string
	if kind == "clickhouse" {
		addr = clickHouseAddr(b)
	}
	n := benchEnv("SLUICE_BENCH_SNAPSHOT_ROWS", 1_000_000)
	v1, v2 := snapshotVersions(n)
	want := make([]string, len(v2))
	for i, r := range v2 {
		want[i] = strconv.FormatInt(r.ID, 10) + "," + r.Status
	}
	slices.Sort(want)
	for b.Loop() {
		var d destination = localDest{}
		if kind == "clickhouse" {
			d = newClickHouseDest(b, addr)
		}
		spec := writeSpecText(b, fmt.Sprintf(snapshotBenchSpec, d.yaml()))
		dir := filepath.Dir(spec)
		writeSnapshot(b, dir, 1, v1)
		first := timedUpdate(b, spec)
		if rows, distinct := d.count(b, spec, "t", "id"); rows != int64(len(v1)) || distinct != int64(len(v1)) {
			b.Fatalf("version 1: %d rows, %d distinct ids; want %d each", rows, distinct, len(v1))
		}
		writeSnapshot(b, dir, 2, v2)
		diff := timedUpdate(b, spec)
		if got := targetRows(b, d, spec, "t", []string{"id", "status"}); !slices.Equal(got, want) {
			b.Fatalf("version 2: %d rows, want %d; first differences:\n%s", len(got), len(want), diffRows(got, want, 10))
		}
		changed, deleted, added := 0, len(v1), 0
		for _, r := range v2 {
			switch {
			case r.ID >= int64(n):
				added++
			case r.Status == "changed":
				changed++
			}
		}
		deleted -= len(v2) - added
		fmt.Printf("snapshot diff into %s (SCD type 1): version 1 of %d rows, version 2 of %d rows (%d changed, %d deleted, %d new)\n",
			kind, len(v1), len(v2), changed, deleted, added)
		for _, m := range []struct {
			name string
			r    measured
		}{{"version 1 (empty target)", first}, {"version 2 (the diff)", diff}} {
			fmt.Printf("  %-25s %s, %9.0f snapshot rows/s, peak RSS %d MiB\n", m.name, m.r.took.Round(time.Millisecond),
				float64(n)/m.r.took.Seconds(), m.r.maxRSS>>20)
		}
		b.ReportMetric(first.took.Seconds(), "first_s")
		b.ReportMetric(float64(first.maxRSS)/(1<<20), "first_peak_RSS_MiB")
		b.ReportMetric(diff.took.Seconds(), "diff_s")
		b.ReportMetric(float64(diff.maxRSS)/(1<<20), "diff_peak_RSS_MiB")
	}
}
