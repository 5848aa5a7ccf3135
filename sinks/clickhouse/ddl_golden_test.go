package clickhouse

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// goldenTarget has a column of every type that needs a comment or another
// type on some server.
var goldenTarget = sinks.Table{Name: "t", Schema: batch.Schema{Columns: []batch.Column{
	{Name: "id", Type: batch.Int64},
	{Name: "day", Type: batch.Date},
	{Name: "at", Type: batch.Timestamp, Nullable: true},
	{Name: "raw", Type: batch.Bytes},
	{Name: "tags", Type: batch.ArrayOf(batch.Timestamp)},
}}, OrderBy: []string{"id"}, PartitionBy: []string{"day"}}

// clusterOpts are Options of a cluster, with the defaults.
var clusterOpts = func() Options {
	o := Options{Database: "db", Cluster: "c", ZooKeeper: []string{"zk:2181"}}
	o.withDefaults()
	return o
}()

// ddlText renders the statements the sink creates its tables with: its own
// tables, an append target, the physical tables and views of CDC targets.
func ddlText(s *Sink) string {
	var b strings.Builder
	for _, st := range s.systemDDL() {
		b.WriteString("-- create " + st.table + "\n" + st.sql + ";\n\n")
	}
	b.WriteString("-- create table t\n" + s.createSQL(goldenTarget.Name, goldenTarget.Schema.Columns, goldenTarget.OrderBy, keyExpr(goldenTarget.PartitionBy)) + ";\n\n")
	for _, ct := range []sinks.Table{custTable, histTable} {
		b.WriteString("-- create table " + physName(ct.Name) + "\n" + s.createPhysSQL(ct) + ";\n\n")
		cols := []column{{Column: batch.Column{Name: "id"}}, {Column: batch.Column{Name: "name"}}}
		b.WriteString("-- create view " + ct.Name + "\n" + s.createViewSQL(ct.Name, cols) + ";\n\n")
	}
	return b.String()
}

// TestDDLGolden: the statements creating tables, on 18.16 and on a current
// server, on one server and on a cluster, as testdata/ddl_*.sql holds them
// (refresh with -update).
func TestDDLGolden(t *testing.T) {
	tests := []struct {
		file string
		s    *Sink
	}{
		{"ddl_18.16.sql", &Sink{opts: Options{Database: "db"}, feat: featuresOf(18, 16)}},
		{"ddl_24.8.sql", &Sink{opts: Options{Database: "db"}, feat: featuresOf(24, 8)}},
		{"ddl_cluster_18.16.sql", &Sink{opts: clusterOpts, feat: featuresOf(18, 16)}},
		{"ddl_cluster_24.8.sql", &Sink{opts: clusterOpts, feat: featuresOf(24, 8)}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			got := ddlText(tc.s)
			path := filepath.Join("testdata", tc.file)
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to write it)", err)
			}
			if got != string(want) {
				t.Fatalf("DDL differs from %s (run with -update if the change is meant):\n%s", path, got)
			}
		})
	}
}
