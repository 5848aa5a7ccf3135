package flows_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
)

// TestFilesConcurrentLoads loads files split into several chunks with two
// loads under way at once: every row lands once, and each chunk is a load
// of its own whose positions chain on the previous chunk of its file (a
// chunk committed out of order would be refused as stale).
func TestFilesConcurrentLoads(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		s := newStepper(t, broker.Addr(), dest(t), `tables:
  - name: raw
    columns:
      - {name: id, type: int64}
      - {name: name, type: string}
flows:
  - name: bf
    target: raw
    kind: append
    once: true
    source: {files: {path: "in/*.parquet", parallel: 2}}
    batch: {rows: 2}
`)
		const files, perFile = 4, 5
		var want []string
		for f := range files {
			rows := make([]rawRow, perFile)
			for i := range rows {
				id := int64(f*perFile + i)
				rows[i] = rawRow{id, fmt.Sprintf("f%d", f)}
				want = append(want, fmt.Sprintf("%d,f%d", id, f))
			}
			writeParquet(t, filepath.Join(s.dir, "in", fmt.Sprintf("p%d.parquet", f)), rows)
		}
		slices.SortFunc(want, func(a, b string) int {
			var x, y int
			fmt.Sscan(a, &x)
			fmt.Sscan(b, &y)
			return x - y
		})
		s.update()
		if got := s.rows("raw", "_sluice_load_id"); !slices.Equal(got, want) {
			t.Fatalf("rows: %q, want %q", got, want)
		}
		// Three chunks of at most two rows per file, each one load.
		if st := s.status("bf"); st.Once != "complete" || st.FilesDone != files || st.Rows != files*perFile || st.Loads != files*3 {
			t.Fatalf("status of bf: %+v, want complete with %d files, %d rows in %d loads", st, files, files*perFile, files*3)
		}
		s.update()
		if got := s.rows("raw", "_sluice_load_id"); !slices.Equal(got, want) {
			t.Fatalf("second update: %q, want %q", got, want)
		}
	})
}
