package integration

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/parquet-go/parquet-go"
)

// readColumn reads one column of every Parquet file in a table's folder
// (and its partition folders) with parquet-go alone, the way any other
// Parquet reader sees the table. Nulls come back as nil.
func readColumn(t testing.TB, tableDir, column string) []parquet.Value {
	t.Helper()
	// Resolve the table's symlink once, as docs/local.md asks of readers: a
	// swap meanwhile (a publish, a compaction) must not move the files read.
	if dir, err := filepath.EvalSymlinks(tableDir); err == nil {
		tableDir = dir
	}
	var files []string
	err := filepath.WalkDir(tableDir+"/", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && filepath.Ext(path) == ".parquet" {
			files = append(files, path)
		}
		return err
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	var out []parquet.Value
	for _, path := range files {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		st, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		pf, err := parquet.OpenFile(f, st.Size())
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		leaf, ok := pf.Schema().Lookup(column)
		if !ok {
			t.Fatalf("%s: no column %q in %v", path, column, pf.Schema())
		}
		r := parquet.NewReader(pf)
		rows := make([]parquet.Row, 512)
		for {
			n, err := r.ReadRows(rows)
			for _, row := range rows[:n] {
				for _, v := range row {
					if v.Column() == leaf.ColumnIndex {
						out = append(out, v.Clone())
					}
				}
			}
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
		}
		r.Close()
		f.Close()
	}
	return out
}

// readIDs reads an int64 column and returns its values sorted.
func readIDs(t testing.TB, tableDir, column string) []int64 {
	t.Helper()
	vals := readColumn(t, tableDir, column)
	ids := make([]int64, 0, len(vals))
	for _, v := range vals {
		if v.IsNull() {
			t.Fatalf("null in %s", column)
		}
		ids = append(ids, v.Int64())
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// checkExactlyOnce fails unless ids are exactly from..to-1, each once.
func checkExactlyOnce(t testing.TB, ids []int64, from, to int) {
	t.Helper()
	want := to - from
	if len(ids) != want {
		dups, missing := 0, 0
		seen := map[int64]int{}
		for _, id := range ids {
			seen[id]++
			if seen[id] == 2 {
				dups++
			}
		}
		for id := from; id < to; id++ {
			if seen[int64(id)] == 0 {
				missing++
			}
		}
		t.Fatalf("got %d rows, want %d: %d ids duplicated, %d missing", len(ids), want, dups, missing)
	}
	for i, id := range ids {
		if id != int64(from+i) {
			t.Fatalf("row %d: id %d, want %d (a duplicate or a gap)", i, id, from+i)
		}
	}
}
