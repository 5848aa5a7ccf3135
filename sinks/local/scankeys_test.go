package local

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/local/fsys"
)

// text returns a vector of one string.
func text(s string) *batch.Vector {
	v := batch.NewVector(batch.String, 1)
	v.AppendString(s)
	return v
}

func TestScanKeys(t *testing.T) {
	ctx := context.Background()
	opts := testOpts(t.TempDir())
	opts.BucketRows = 16 // many bucket files
	s := openTest(t, opts)
	if err := s.Ensure(ctx, []sinks.Table{custTable}); err != nil {
		t.Fatal(err)
	}
	var rows []cust
	var all, nullRegion []int64
	for id := int64(1); id <= 300; id++ {
		r := cust{id: id, name: "n", seq: 1}
		if id%3 != 0 {
			r.region = "eu"
		} else {
			nullRegion = append(nullRegion, id)
		}
		rows = append(rows, r)
		all = append(all, id)
	}
	if err := commitCDC(ctx, s, "cust", cdcChange{up: rows}); err != nil {
		t.Fatal(err)
	}
	// A second load removes some rows: the scan sees the current version.
	if err := commitCDC(ctx, s, "cust", cdcChange{rm: rows[:30]}); err != nil {
		t.Fatal(err)
	}
	all = all[30:]
	nullRegion = slices.DeleteFunc(nullRegion, func(id int64) bool { return id <= 30 })
	if n := len(manifestOf(t, s, "cust").Files); n < 2 {
		t.Fatalf("the table has %d files, want several", n)
	}

	tests := []struct {
		name  string
		cols  []string
		where sinks.KeyFilter
		want  []int64
	}{
		{name: "every row", cols: []string{"id"}, want: all},
		{name: "rows whose region is null", cols: []string{"id"}, where: sinks.KeyFilter{Column: "region"}, want: nullRegion},
		{name: "two columns, filtered on one of them", cols: []string{"id", "region"}, where: sinks.KeyFilter{Column: "region"}, want: nullRegion},
		{name: "rows whose region is null or after eu", cols: []string{"id"}, where: sinks.KeyFilter{Column: "region", After: text("eu")}, want: nullRegion},
		{name: "rows whose region is null or after a", cols: []string{"id"}, where: sinks.KeyFilter{Column: "region", After: text("a")}, want: all},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []int64
			err := s.ScanKeys(ctx, "cust", tc.cols, tc.where, func(b *batch.Batch) error {
				if !slices.Equal(b.Schema.Names(), tc.cols) {
					t.Fatalf("batch columns %q, want %q", b.Schema.Names(), tc.cols)
				}
				got = append(got, b.Vectors[0].Ints...)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got ids %v, want %v", got, tc.want)
			}
		})
	}

	t.Run("errors", func(t *testing.T) {
		stop := errors.New("stop")
		if err := s.ScanKeys(ctx, "cust", []string{"id"}, sinks.KeyFilter{}, func(*batch.Batch) error { return stop }); err != stop {
			t.Fatalf("fn's error: got %v, want it as is", err)
		}
		if err := s.ScanKeys(ctx, "missing", []string{"id"}, sinks.KeyFilter{}, func(*batch.Batch) error { return nil }); !errors.Is(err, sinks.ErrUnknownTable) {
			t.Fatalf("missing table: %v, want ErrUnknownTable", err)
		}
		if err := s.ScanKeys(ctx, "cust", []string{"nope"}, sinks.KeyFilter{}, func(*batch.Batch) error { return nil }); err == nil {
			t.Fatal("an unknown column scanned without error")
		}
	})
}

// TestScanSkipsRowGroups: a scan filtered on "null or after V" reads no row
// group whose statistics show neither a null nor a value after V, and
// hands over the same rows as reading every group.
func TestScanSkipsRowGroups(t *testing.T) {
	defer func(n int) { rowGroupRows = n }(rowGroupRows)
	rowGroupRows = 100
	schema := batch.Schema{Columns: []batch.Column{{Name: "id", Type: batch.Int64}, {Name: "end", Type: batch.Int64, Nullable: true}}}
	// Ids 0..999 in groups of 100: ends up to the id before 900, then a
	// late end or null.
	b := batch.New(schema, 1000)
	for id := range int64(1000) {
		b.Vectors[0].AppendInt(id)
		switch {
		case id < 900:
			b.Vectors[1].AppendInt(id)
		case id%2 == 0:
			b.Vectors[1].AppendInt(5000)
		default:
			b.Vectors[1].AppendNull()
		}
	}
	path := filepath.Join(t.TempDir(), "f.parquet")
	fw, err := createPlainFile(fsys.OS{}, path, schema, loadCodec)
	if err != nil {
		t.Fatal(err)
	}
	if err := fw.write(b); err != nil {
		t.Fatal(err)
	}
	if err := fw.endWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := fw.close(); err != nil {
		t.Fatal(err)
	}
	at := func(v int64) sinks.KeyFilter {
		after := batch.NewVector(batch.Int64, 1)
		after.AppendInt(v)
		return sinks.KeyFilter{Column: "end", After: after}
	}
	for _, tc := range []struct {
		after        int64
		groups, rows int
	}{
		{after: 899, groups: 1, rows: 100}, // only the last group has an end after 899 or null
		{after: 450, groups: 6, rows: 549}, // 451..999
		{after: -1, groups: 10, rows: 1000},
	} {
		f, err := fsys.OS{}.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		groups := 0
		out := batch.New(schema, 0)
		err = readOpenFileSkipping(f, out, skipper(schema.Columns[1], 1, at(tc.after)), func() error { groups++; return nil })
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if groups != tc.groups {
			t.Errorf("after %d: %d row groups read, want %d", tc.after, groups, tc.groups)
		}
		f, _ = fsys.OS{}.Open(path)
		var ids []int64
		err = scanFiles(t.Context(), []fsys.File{f}, schema, batch.Schema{Columns: schema.Columns[:1]}, 1, at(tc.after), func(b *batch.Batch) error {
			ids = append(ids, b.Vectors[0].Ints...)
			return nil
		})
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		var want []int64
		for id := range b.Len() {
			if at(tc.after).Pass(b.Vectors[1], id) {
				want = append(want, int64(id))
			}
		}
		if len(want) != tc.rows || !slices.Equal(ids, want) {
			t.Errorf("after %d: ids %v, want %d: %v", tc.after, ids, tc.rows, want)
		}
	}
}
