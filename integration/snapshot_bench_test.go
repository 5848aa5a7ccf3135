package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
)

// snapScaleRow is a row of the snapshot-at-scale benchmark: a key and two
// light columns, so that tens of millions of rows stay quick to write.
type snapScaleRow struct {
	ID    int64  `parquet:"id"`
	Name  string `parquet:"name"`
	Score int64  `parquet:"score"`
}

// snapScaleSpec is a pipeline of one auto_cdc_from_snapshot flow into t.
// Arguments: destination, SCD type.
const snapScaleSpec = `pipeline: bench_snapshot_scale
destination: %s
tables:
  - name: t
flows:
  - name: s
    target: t
    kind: auto_cdc_from_snapshot
    source:
      snapshots:
        path: "snaps/{version}/*.parquet"
        format: parquet
        columns:
          - {name: id, type: int64}
          - {name: name, type: string}
          - {name: score, type: int64}
    keys: [id]
    stored_as_scd_type: %d
`

// snapScaleFiles is the number of files of a snapshot version, and
// snapScaleGroup the rows of their row groups.
const (
	snapScaleFiles = 8
	snapScaleGroup = 100_000
)

// writeSnapScale writes snapshot version v of ids [from, to) into
// dir/snaps/v, in snapScaleFiles files, a row group at a time, with its
// _SUCCESS marker; name and score follow from the id and, every tenth id,
// from the version too.
func writeSnapScale(b *testing.B, dir string, v int, from, to int64) {
	b.Helper()
	folder := filepath.Join(dir, "snaps", strconv.Itoa(v))
	if err := os.MkdirAll(folder, 0o755); err != nil {
		b.Fatal(err)
	}
	per := (to - from + snapScaleFiles - 1) / snapScaleFiles
	rows := make([]snapScaleRow, 0, snapScaleGroup)
	for f := range int64(snapScaleFiles) {
		fh, err := os.Create(filepath.Join(folder, fmt.Sprintf("part-%d.parquet", f)))
		if err != nil {
			b.Fatal(err)
		}
		w := parquet.NewGenericWriter[snapScaleRow](fh, parquet.Compression(&parquet.Snappy), parquet.MaxRowsPerRowGroup(snapScaleGroup))
		lo, hi := min(from+f*per, to), min(from+(f+1)*per, to)
		for id := lo; id < hi; id += snapScaleGroup {
			rows = rows[:0]
			for i := id; i < min(id+snapScaleGroup, hi); i++ {
				rows = append(rows, snapScaleRowOf(i, v))
			}
			if _, err := w.Write(rows); err != nil {
				b.Fatal(err)
			}
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

func snapScaleRowOf(id int64, v int) snapScaleRow {
	r := snapScaleRow{ID: id, Name: "name-" + strconv.FormatInt(id, 10), Score: id % 1000}
	if id%10 == 0 && v > 1 {
		r.Name += "-v" + strconv.Itoa(v)
	}
	return r
}

// BenchmarkSnapshotScaleLocal measures auto_cdc_from_snapshot applying a
// version of SLUICE_BENCH_SNAPSHOT_SCALE_ROWS rows (default 1,000,000) onto
// a target holding the previous version of as many rows (1% of the keys
// gone, 1% new, every tenth row changed), for SCD type 1 and 2: the
// binary's wall time and peak RSS for the first version and for the diff.
// Run it with -benchtime 1x.
func BenchmarkSnapshotScaleLocal(b *testing.B) { benchSnapScale(b, "local") }

// BenchmarkSnapshotScaleClickHouse is BenchmarkSnapshotScaleLocal into
// ClickHouse; it needs SLUICE_CLICKHOUSE_ADDR.
func BenchmarkSnapshotScaleClickHouse(b *testing.B) { benchSnapScale(b, "clickhouse") }

func benchSnapScale(b *testing.B, kind string) {
	var addr string
	if kind == "clickhouse" {
		addr = clickHouseAddr(b)
	}
	n := int64(benchEnv("SLUICE_BENCH_SNAPSHOT_SCALE_ROWS", 1_000_000))
	gone := n / 100
	for _, scd := range []int{1, 2} {
		b.Run(fmt.Sprintf("scd%d", scd), func(b *testing.B) {
			for b.Loop() {
				var d destination = localDest{}
				if kind == "clickhouse" {
					d = newClickHouseDest(b, addr)
				}
				spec := writeSpecText(b, fmt.Sprintf(snapScaleSpec, d.yaml(), scd))
				dir := filepath.Dir(spec)
				writeSnapScale(b, dir, 1, 0, n)
				first := timedUpdate(b, spec)
				if rows, distinct := d.count(b, spec, "t", "id"); rows != n || distinct != n {
					b.Fatalf("version 1: %d rows, %d distinct ids; want %d each", rows, distinct, n)
				}
				began := time.Now()
				writeSnapScale(b, dir, 2, gone, n+gone)
				written := time.Since(began)
				diff := timedUpdate(b, spec)
				// Ids [gone, n) stay, every tenth of them changed; [n, n+gone) are new.
				changed := (n-1)/10 - (gone-1)/10
				wantRows, wantDistinct := n, n
				if scd == 2 {
					wantRows, wantDistinct = n+changed+gone, n+gone
				}
				if rows, distinct := d.count(b, spec, "t", "id"); rows != wantRows || distinct != wantDistinct {
					b.Fatalf("version 2: %d rows, %d distinct ids; want %d and %d", rows, distinct, wantRows, wantDistinct)
				}
				fmt.Printf("snapshot at scale into %s, SCD type %d: %d rows per version (%d changed, %d gone, %d new; version written in %s)\n",
					kind, scd, n, changed, gone, gone, written.Round(time.Millisecond))
				for _, m := range []struct {
					name string
					r    measured
				}{{"version 1 (empty target)", first}, {"version 2 (the diff)", diff}} {
					fmt.Printf("  %-25s %s, %9.0f rows/s, peak RSS %d MiB\n", m.name, m.r.took.Round(time.Millisecond),
						float64(n)/m.r.took.Seconds(), m.r.maxRSS>>20)
				}
				b.ReportMetric(first.took.Seconds(), "first_s")
				b.ReportMetric(float64(first.maxRSS)/(1<<20), "first_peak_RSS_MiB")
				b.ReportMetric(diff.took.Seconds(), "diff_s")
				b.ReportMetric(float64(diff.maxRSS)/(1<<20), "diff_peak_RSS_MiB")
			}
		})
	}
}
