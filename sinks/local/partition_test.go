package local

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/local/fsys"
)

func TestPartitionFolder(t *testing.T) {
	ts := time.Date(2024, 5, 6, 7, 8, 9, 120000000, time.UTC).UnixMicro()
	tests := []struct {
		name string
		t    batch.Type
		add  func(v *batch.Vector)
		want string
	}{
		{"string", batch.String, func(v *batch.Vector) { v.AppendString("eu-west") }, "c=eu-west"},
		{"escaped string", batch.String, func(v *batch.Vector) { v.AppendString("a/b=c:d%") }, "c=a%2Fb%3Dc%3Ad%25"},
		{"unicode string", batch.String, func(v *batch.Vector) { v.AppendString("Zürich") }, "c=Zürich"},
		{"empty string", batch.String, func(v *batch.Vector) { v.AppendString("") }, "c=" + hiveNull},
		{"null", batch.String, func(v *batch.Vector) { v.AppendNull() }, "c=" + hiveNull},
		{"int64", batch.Int64, func(v *batch.Vector) { v.AppendInt(-42) }, "c=-42"},
		{"date", batch.Date, func(v *batch.Vector) { v.AppendInt(-1) }, "c=1969-12-31"},
		{"timestamp", batch.Timestamp, func(v *batch.Vector) { v.AppendInt(ts) }, "c=2024-05-06 07%3A08%3A09.12"},
		{"decimal", batch.Decimal(10, 2), func(v *batch.Vector) { v.AppendDecimal(batch.Dec128FromInt64(-1234)) }, "c=-12.34"},
		{"bool", batch.Bool, func(v *batch.Vector) { v.AppendBool(true) }, "c=true"},
		{"bytes", batch.Bytes, func(v *batch.Vector) { v.AppendBytes([]byte{'a', 0xff, '\n'}) }, "c=a%FF%0A"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := batch.Schema{Columns: []batch.Column{{Name: "c", Type: tc.t, Nullable: true}}}
			p, err := newPartitioner(s, []string{"c"})
			if err != nil {
				t.Fatal(err)
			}
			b := batch.New(s, 1)
			tc.add(b.Vectors[0])
			dirs, _, err := p.split(b)
			if err != nil {
				t.Fatal(err)
			}
			if len(dirs) != 1 || dirs[0] != tc.want {
				t.Fatalf("folder %q, want %q", dirs, tc.want)
			}
		})
	}
}

// TestPartitionedTable loads a table partitioned by two columns: each
// partition is a col=value/ folder of the table, rows scan back once, and
// compaction merges within a partition only.
func TestPartitionedTable(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := testOpts(dir)
	opts.CompactMinFiles = 2
	s := openTest(t, opts)
	table := sinks.Table{Name: "orders", Schema: ordersSchema, PartitionBy: []string{"country", "status"}}
	if err := s.Ensure(ctx, []sinks.Table{table}); err != nil {
		t.Fatal(err)
	}
	from := int64(-1)
	for i := range 3 {
		if _, err := commitOrders(ctx, s, 0, from, i*70, 70); err != nil {
			t.Fatal(err)
		}
		from = int64(i*70 + 70)
	}
	// 7 countries x 5 statuses, every combination present.
	files, err := filepath.Glob(filepath.Join(dir, "orders", "country=*", "status=*", "*.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3*35 {
		t.Fatalf("%d files in partition folders, want %d", len(files), 3*35)
	}
	if _, err := os.Stat(filepath.Join(dir, "orders", "country=DE", "status=paid")); err != nil {
		t.Fatalf("partition folder: %v", err)
	}
	check := func(s *Sink, when string) {
		t.Helper()
		if n := checkConsistent(t, s, "orders"); n != 210 {
			t.Fatalf("%s: %d rows, want 210", when, n)
		}
		m, err := s.current("orders")
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m.Files {
			sub := filepath.Dir(f.Name)
			if !strings.HasPrefix(sub, "country=") || !strings.Contains(sub, "/status=") {
				t.Fatalf("%s: file %s outside a partition folder", when, f.Name)
			}
		}
	}
	check(s, "after loads")
	if err := s.Compact(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	m, err := s.current("orders")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Files) != 35 {
		t.Fatalf("%d files after compaction, want one per partition (35)", len(m.Files))
	}
	check(s, "after compaction")
	for _, f := range m.Files {
		b := batch.New(batch.Schema{Columns: append(slices.Clone(ordersSchema.Columns),
			batch.Column{Name: batch.LoadIDColumn, Type: batch.String})}, 0)
		if err := readFile(fsys.OS{}, filepath.Join(dir, "orders", f.Name), b, nil); err != nil {
			t.Fatal(err)
		}
		for r := range b.Len() {
			want := "country=" + b.Vectors[3].Strs[r] + "/status=" + b.Vectors[2].Strs[r]
			if filepath.Dir(f.Name) != want {
				t.Fatalf("row in %s belongs to %s", f.Name, want)
			}
		}
	}
	s2 := openTest(t, opts)
	if err := s2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	check(s2, "after reopening")

	// partition_by is fixed once the table exists.
	table.PartitionBy = []string{"country"}
	if err := s2.Ensure(ctx, []sinks.Table{table}); err == nil || !strings.Contains(err.Error(), "partition_by") {
		t.Fatalf("Ensure with another partition_by: %v, want an error naming partition_by", err)
	}
}

func TestPartitionedCrash(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s1 := openTest(t, testOpts(dir))
	table := sinks.Table{Name: "orders", Schema: ordersSchema, PartitionBy: []string{"country"}}
	if err := s1.Ensure(ctx, []sinks.Table{table}); err != nil {
		t.Fatal(err)
	}
	if _, err := commitOrders(ctx, s1, 0, -1, 0, 20); err != nil {
		t.Fatal(err)
	}
	cr := crash(t, s1, beforeSwap, 1)
	_, err := commitOrders(ctx, s1, 0, 20, 20, 20)
	expectCrash(t, cr, "commit", err)
	s1.kill()
	s2 := openTest(t, testOpts(dir))
	if err := s2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if n := checkConsistent(t, s2, "orders"); n != 40 {
		t.Fatalf("%d rows, want 40", n)
	}
	if v := versionDirs(t, dir, "orders"); len(v) != 1 {
		t.Fatalf("versions %v after recovery, want one", v)
	}
}
