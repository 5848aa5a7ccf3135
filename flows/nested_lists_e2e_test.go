package flows_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks/destination"
)

// TestParquetListsOfListsLikeJSON loads orders with a list of lists of
// scalars, a list of lists of structs and a list of structs with a list
// twice, from a Parquet file into a
// table typed by its files and as JSON lines into a table typed by its
// lines: in both, each inner list is a row of <table>__<field> and each
// element a row of <table>__<field>__value (a list field of an item, of
// <table>__<field>__<subfield>), the child tables joined back
// give the input, and the two pipelines' child tables are the same, ids
// derived alike from their parents'.
func TestParquetListsOfListsLikeJSON(t *testing.T) {
	type box struct {
		SKU string `parquet:"sku" json:"sku"`
		Qty int64  `parquet:"qty" json:"qty"`
	}
	type item struct {
		SKU  string   `parquet:"sku" json:"sku"`
		Tags []string `parquet:"tags,list" json:"tags,omitempty"`
	}
	type order struct {
		ID     int64     `parquet:"id" json:"id"`
		Matrix [][]int64 `parquet:"matrix,list" json:"matrix,omitempty"`
		Boxes  [][]box   `parquet:"boxes,list" json:"boxes,omitempty"`
		Items  []item    `parquet:"items,list" json:"items,omitempty"`
	}
	orders := []order{
		{ID: 1, Matrix: [][]int64{{1, 2}, {}, {3}}, Boxes: [][]box{{{"a", 1}}, {{"b", 2}, {"c", 3}}}, Items: []item{{"p", []string{"x", "y"}}, {"q", nil}}},
		{ID: 2},
		{ID: 3, Matrix: [][]int64{{4}}, Boxes: [][]box{{}, {{"d", 4}}}, Items: []item{{"r", []string{"z"}}}},
		{ID: 4, Matrix: [][]int64{{5, 6, 7}, {8}}, Boxes: [][]box{{{"e", 5}, {"f", 6}}}},
	}
	// The input as rows of the child tables, by the order's id and the
	// list indexes.
	want := map[string][]string{}
	for _, o := range orders {
		for i, inner := range o.Matrix {
			want["matrix"] = append(want["matrix"], fmt.Sprintf("%d[%d]:", o.ID, i))
			for j, v := range inner {
				want["matrix__value"] = append(want["matrix__value"], fmt.Sprintf("%d[%d][%d]: value=%d", o.ID, i, j, v))
			}
		}
		for i, inner := range o.Boxes {
			want["boxes"] = append(want["boxes"], fmt.Sprintf("%d[%d]:", o.ID, i))
			for j, b := range inner {
				want["boxes__value"] = append(want["boxes__value"], fmt.Sprintf("%d[%d][%d]: qty=%d sku=%s", o.ID, i, j, b.Qty, b.SKU))
			}
		}
		for i, it := range o.Items {
			want["items"] = append(want["items"], fmt.Sprintf("%d[%d]: sku=%s", o.ID, i, it.SKU))
			for j, tag := range it.Tags {
				want["items__tags"] = append(want["items__tags"], fmt.Sprintf("%d[%d][%d]: value=%s", o.ID, i, j, tag))
			}
		}
	}
	for _, rows := range want {
		slices.Sort(rows)
	}
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		s := newStepper(t, broker.Addr(), dest(t), `tables:
  - name: pq
  - name: js
flows:
  - name: pqf
    target: pq
    kind: append
    source: {files: {path: "in/*.parquet"}}
  - name: jsf
    target: js
    kind: append
    source: {files: {path: "jl/*.jsonl"}}
`)
		writeParquet(t, filepath.Join(s.dir, "in", "a.parquet"), orders)
		var lines []byte
		for _, o := range orders {
			b, err := json.Marshal(o)
			if err != nil {
				t.Fatal(err)
			}
			lines = append(append(lines, b...), '\n')
		}
		if err := os.MkdirAll(filepath.Join(s.dir, "jl"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(s.dir, "jl", "a.jsonl"), lines, 0o644); err != nil {
			t.Fatal(err)
		}
		s.update()
		suffixes := []string{"matrix", "matrix__value", "boxes", "boxes__value", "items", "items__tags"}
		pq := listTables(t, s, "pq", suffixes)
		js := listTables(t, s, "js", suffixes)
		for _, suffix := range suffixes {
			if !slices.Equal(pq[suffix], want[suffix]) {
				t.Errorf("pq__%s joined back\n%q\nwant\n%q", suffix, pq[suffix], want[suffix])
			}
			if !slices.Equal(js[suffix], pq[suffix]) {
				t.Errorf("js__%s\n%q\nbut pq__%s\n%q", suffix, js[suffix], suffix, pq[suffix])
			}
		}
		for _, table := range []string{"pq", "js"} {
			if got, want := s.rows(table, batch.LoadIDColumn, batch.IDColumn), []string{"1", "2", "3", "4"}; !slices.Equal(got, want) {
				t.Errorf("%s %q, want %q", table, got, want)
			}
		}
	})
}

// listTables reads the child tables of table, by suffix, parents before
// their children: each row as "<the order's id>[<list index>]...: <its
// other columns, by name>", sorted. A row whose parent is missing, whose
// root is not its parent's, or whose id is not derived from its parent's
// id, its table and its index, fails the test.
func listTables(t *testing.T, s *stepper, table string, suffixes []string) map[string][]string {
	t.Helper()
	ctx := t.Context()
	sink, err := destination.Open(ctx, s.p, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	root, err := sink.Scan(ctx, table)
	if err != nil {
		t.Fatal(err)
	}
	label := map[string]string{} // _sluice_id -> label
	rootOf := map[string]string{}
	for i := range root.Len() {
		id := root.Column(batch.IDColumn).Value(i).(string)
		label[id] = fmt.Sprint(root.Column("id").Value(i))
		rootOf[id] = id
	}
	out := map[string][]string{}
	for _, suffix := range suffixes {
		c, err := sink.Scan(ctx, table+"__"+suffix)
		if err != nil {
			t.Fatal(err)
		}
		var rest []string
		for _, n := range c.Schema.Names() {
			if !batch.IsLinkColumn(n) && n != batch.LoadIDColumn {
				rest = append(rest, n)
			}
		}
		slices.Sort(rest)
		var rows []string
		for i := range c.Len() {
			parent := c.Column(batch.ParentIDColumn).Value(i).(string)
			idx := c.Column(batch.ListIdxColumn).Value(i).(int64)
			id := c.Column(batch.IDColumn).Value(i).(string)
			pl, ok := label[parent]
			if !ok {
				t.Fatalf("%s__%s row %d: no parent row", table, suffix, i)
			}
			if r := c.Column(batch.RootIDColumn).Value(i).(string); r != rootOf[parent] {
				t.Fatalf("%s__%s row %d: root %s, its parent's %s", table, suffix, i, r, rootOf[parent])
			}
			key := parent + "\x00" + suffix + "\x00" + strconv.FormatInt(idx, 10)
			if want := string(batch.AppendLinkID(nil, []byte(key))); id != want {
				t.Fatalf("%s__%s row %d: id %s, want %s (of its parent, table and index)", table, suffix, i, id, want)
			}
			label[id] = fmt.Sprintf("%s[%d]", pl, idx)
			rootOf[id] = rootOf[parent]
			var vals []string
			for _, n := range rest {
				vals = append(vals, fmt.Sprintf("%s=%v", n, c.Column(n).Value(i)))
			}
			rows = append(rows, strings.TrimSpace(label[id]+": "+strings.Join(vals, " ")))
		}
		slices.Sort(rows)
		out[suffix] = rows
	}
	return out
}
