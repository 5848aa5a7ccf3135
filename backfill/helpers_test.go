package backfill

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/sluicehq/sluice/flows/batch"
)

// pcol is a column of a test Parquet file: its node and one value per row
// (a parquet.Value, or nil for NULL).
type pcol struct {
	name string
	node parquet.Node
	vals []any
	path []string // the leaf's path when the column is a group; default name
}

// writeParquet writes cols to path, rowGroup rows per row group (0: one),
// with extra writer options (small pages, data page v1, ...).
func writeParquet(t testing.TB, path string, cols []pcol, rowGroup int, opts ...parquet.WriterOption) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	g := parquet.Group{}
	for _, c := range cols {
		g[c.name] = c.node
	}
	schema := parquet.NewSchema("test", g)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := parquet.NewWriter(f, append([]parquet.WriterOption{schema}, opts...)...)
	n := 0
	if len(cols) > 0 {
		n = len(cols[0].vals)
	}
	type leafInfo struct {
		idx, maxDef int
	}
	leaves := make([]leafInfo, len(cols))
	for i, c := range cols {
		path := c.path
		if path == nil {
			path = []string{c.name}
		}
		lc, ok := schema.Lookup(path...)
		if !ok {
			t.Fatalf("no leaf %s", c.name)
		}
		leaves[i] = leafInfo{lc.ColumnIndex, lc.MaxDefinitionLevel}
	}
	for r := range n {
		row := make(parquet.Row, len(cols))
		for i, c := range cols {
			li := leaves[i]
			var v parquet.Value
			def := li.maxDef
			if c.vals[r] == nil {
				def = 0
			} else {
				v = c.vals[r].(parquet.Value)
			}
			row[li.idx] = v.Level(0, def, li.idx)
		}
		if _, err := w.WriteRows([]parquet.Row{row}); err != nil {
			t.Fatal(err)
		}
		if rowGroup > 0 && (r+1)%rowGroup == 0 && r+1 < n {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func fileOf(t testing.TB, path string) File {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return File{Name: filepath.Base(path), Path: path, Size: st.Size(), ModTime: st.ModTime()}
}

// readAll reads a whole file and returns its chunks.
func readAll(t testing.TB, f File, format string, s batch.Schema, opts ReadOptions) ([]*Chunk, error) {
	t.Helper()
	r, err := Open(f, format, s, opts)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []*Chunk
	for {
		c, err := r.Next(context.Background())
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		if c.Batch == nil && opts.Lines {
			out = append(out, c)
			continue
		}
		if err := c.Batch.Check(); err != nil {
			t.Fatalf("chunk %d: %v", len(out), err)
		}
		out = append(out, c)
	}
}

// rowsText renders the rows of chunks, one line per row, values joined by |.
func rowsText(chunks []*Chunk) []string {
	var out []string
	for _, c := range chunks {
		for i := range c.Batch.Len() {
			out = append(out, rowText(c.Batch, i))
		}
	}
	return out
}

func rowText(b *batch.Batch, i int) string {
	parts := make([]string, len(b.Vectors))
	for c, v := range b.Row(i) {
		switch x := v.(type) {
		case nil:
			parts[c] = "NULL"
		case time.Time:
			parts[c] = x.Format(time.RFC3339Nano)
		case []byte:
			parts[c] = fmt.Sprintf("0x%x", x)
		default:
			parts[c] = fmt.Sprint(x)
		}
	}
	return strings.Join(parts, "|")
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func cols(cs ...batch.Column) batch.Schema { return batch.Schema{Columns: cs} }

func col(name string, t batch.Type, nullable bool) batch.Column {
	return batch.Column{Name: name, Type: t, Nullable: nullable}
}
