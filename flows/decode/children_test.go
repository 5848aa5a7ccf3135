package decode

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/naming"
)

// childDecode decodes msgs with an inferring decoder of s and children,
// and returns its rows, child rows, dead letters and what it found.
func childDecode(t *testing.T, s batch.Schema, children map[string]batch.Schema, c Contract, msgs ...string) (*batch.Batch, map[string]*batch.Batch, []batch.DeadLetter, []batch.Column, map[string]FoundChild) {
	t.Helper()
	d, err := NewInferring(s, naming.SnakeCase)
	if err != nil {
		t.Fatal(err)
	}
	d.Govern(c)
	d.SetChildren(children)
	recs := make([]batch.Record, len(msgs))
	for i, m := range msgs {
		recs[i] = batch.Record{Topic: "t", Offset: int64(i), Value: []byte(m)}
	}
	out := batch.New(s, len(recs))
	dls := d.DecodeAll(recs, out, nil)
	return out, d.ChildRows(), dls, d.Found(), d.FoundChildren()
}

// withLinks is a child table's columns: the link columns, then cols.
func withLinks(cols []batch.Column) batch.Schema {
	s := batch.Schema{Columns: []batch.Column{
		{Name: batch.RootIDColumn, Type: batch.String}, {Name: batch.ParentIDColumn, Type: batch.String},
		{Name: batch.ListIdxColumn, Type: batch.Int64}, {Name: batch.IDColumn, Type: batch.String},
	}}
	s.Columns = append(s.Columns, cols...)
	return s
}

// TestChildTables checks that lists become the rows of child tables
// linked to their parents, that a bad element makes its whole record a
// dead letter named by the element's path, and that the ids depend on the
// record's position only.
func TestChildTables(t *testing.T) {
	evolve := Contract{Columns: Evolve, DataType: Evolve}
	msgs := []string{
		`{"id": 1, "items": [{"sku": "a", "qty": 2, "tags": ["x", "y"]}, {"sku": "b", "qty": 1}], "codes": [7, null]}`,
		`{"id": 2, "items": []}`,
		`{"id": 3, "items": [{"sku": "c", "qty": 1}, {"sku": "d", "qty": 1, "tags": ["z", 5]}]}`,
	}
	_, _, dls, found, children := childDecode(t, batch.Schema{}, nil, evolve, msgs...)
	if len(dls) != 0 {
		t.Fatalf("dead letters %v", dls)
	}
	if got := (batch.Schema{Columns: found}).Names(); !slices.Equal(got, []string{"id", batch.IDColumn}) {
		t.Fatalf("found %v", got)
	}
	names := func(cols []batch.Column) []string { return batch.Schema{Columns: cols}.Names() }
	if got := names(children["items"].Columns); !slices.Equal(got, []string{"sku", "qty"}) || children["items"].Parent != "" {
		t.Fatalf("items: %v", children["items"])
	}
	if got := children["items__tags"]; len(got.Columns) != 1 || got.Columns[0].Name != ValueColumn || got.Columns[0].Type != batch.String || got.Parent != "items" {
		t.Fatalf("items__tags: %v, want a string value under items (5 widens nothing: a variant once it exists)", got)
	}
	if got := children["codes"].Columns; len(got) != 1 || got[0].Type != batch.Int64 {
		t.Fatalf("codes: %v", got)
	}

	root := batch.Schema{Columns: found}
	kids := map[string]batch.Schema{
		"items":       withLinks(children["items"].Columns),
		"items__tags": withLinks(children["items__tags"].Columns),
		"codes":       withLinks(children["codes"].Columns),
	}
	out, rows, dls, found, more := childDecode(t, root, kids, evolve, msgs...)
	if len(dls) != 0 || len(found) != 0 || len(more) != 1 || more["items__tags"].Columns[0].Name != "value__v_int64" {
		t.Fatalf("second pass: dead letters %v, found %v %v", dls, found, more)
	}
	if out.Len() != 3 || rows["items"].Len() != 4 || rows["items__tags"].Len() != 4 || rows["codes"].Len() != 2 {
		t.Fatalf("rows: %d, items %d, tags %d, codes %d", out.Len(), rows["items"].Len(), rows["items__tags"].Len(), rows["codes"].Len())
	}
	id := func(b *batch.Batch, col string, i int) any { return b.Vectors[b.Schema.Index(col)].Value(i) }
	items, tags := rows["items"], rows["items__tags"]
	if id(items, batch.ParentIDColumn, 0) != id(out, batch.IDColumn, 0) || id(items, batch.RootIDColumn, 1) != id(out, batch.IDColumn, 0) ||
		id(items, batch.ListIdxColumn, 1) != int64(1) || id(items, "sku", 1) != "b" {
		t.Fatalf("items rows do not link to their order: %v / %v", items, out)
	}
	if id(tags, batch.ParentIDColumn, 1) != id(items, batch.IDColumn, 0) || id(tags, batch.RootIDColumn, 1) != id(out, batch.IDColumn, 0) || id(tags, ValueColumn, 1) != "y" {
		t.Fatalf("tags rows do not link to their item: %v", tags)
	}
	if id(rows["codes"], ValueColumn, 1) != nil {
		t.Fatalf("a null element: %v", rows["codes"])
	}
	// The same records at the same positions give the same ids.
	out2, rows2, _, _, _ := childDecode(t, root, kids, evolve, msgs...)
	if id(out2, batch.IDColumn, 2) != id(out, batch.IDColumn, 2) || id(rows2["items__tags"], batch.IDColumn, 2) != id(tags, batch.IDColumn, 2) {
		t.Fatal("a replay gives other ids")
	}

	// One bad element two levels down: the whole record is a dead letter,
	// with the element's path; the records around it land whole.
	bad := []string{
		`{"id": 4, "items": [{"sku": "e", "qty": 1, "tags": ["w"]}]}`,
		"{\"id\": 5, \"items\": [{\"sku\": \"f\", \"qty\": 1}, {\"sku\": \"g\", \"qty\": 2, \"tags\": [\"ok\", \"caf\xe9\"]}]}",
		`{"id": 6, "items": [{"sku": "h", "qty": "x"}]}`,
		`{"id": 7, "items": [{"sku": "i", "qty": 3}]}`,
	}
	kids["items__tags"] = withLinks(append(children["items__tags"].Columns, batch.Column{Name: "value__v_int64", Type: batch.Int64, Nullable: true}))
	root2 := root
	out, rows, dls, _, _ = childDecode(t, root2, kids, Contract{Columns: Evolve, DataType: Freeze}, bad...)
	var got []string
	for _, dl := range dls {
		got = append(got, dl.Position+" "+dl.Reason+" "+dl.Error)
	}
	want := []string{
		`0/1 invalid_utf8 field "items[1].tags[1]": "caf\xe9" is not valid UTF-8 (declare the column bytes to keep any bytes)`,
		`0/2 schema_contract field "items[0].qty": "x" is not an int64 (schema_contract data_type: freeze)`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("dead letters\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if out.Len() != 2 || rows["items"].Len() != 2 || rows["items__tags"].Len() != 1 {
		t.Fatalf("rows %d, items %d, tags %d: want those of records 4 and 7 only", out.Len(), rows["items"].Len(), rows["items__tags"].Len())
	}

	// A new child table under columns: freeze.
	_, _, dls, _, _ = childDecode(t, root, kids, Contract{Columns: Freeze, DataType: Freeze}, `{"id": 8, "extras": [1]}`)
	if len(dls) != 1 || dls[0].Reason != batch.ReasonSchemaContract || !strings.Contains(dls[0].Error, `"extras"`) {
		t.Fatalf("dead letters %v, want extras refused by the contract", dls)
	}
}

// TestChildTablesUnderContracts checks that a list the contract leaves out
// (discard_value, no child table yet) leaves the record's other lists in,
// and that two paths naming one child table are refused.
func TestChildTablesUnderContracts(t *testing.T) {
	root := batch.Schema{Columns: []batch.Column{{Name: "id", Type: batch.Int64, Nullable: true}, {Name: batch.IDColumn, Type: batch.String, Nullable: true}}}
	kids := map[string]batch.Schema{"b": withLinks([]batch.Column{{Name: ValueColumn, Type: batch.Int64, Nullable: true}})}
	out, rows, dls, found, more := childDecode(t, root, kids, Contract{Columns: DiscardValue, DataType: Freeze},
		`{"id": 1, "a": [1], "b": [2, 3]}`, `{"id": 2, "b": [4]}`)
	if out.Len() != 2 || len(dls) != 0 || len(found) != 0 || len(more) != 0 || rows["b"].Len() != 3 {
		t.Fatalf("rows %d, b %v, dead letters %v, found %v %v; want 2 rows, 3 of b, nothing else", out.Len(), rows["b"], dls, found, more)
	}
	_, _, dls, _, _ = childDecode(t, batch.Schema{}, nil, Contract{Columns: Evolve, DataType: Evolve},
		`{"id": 1, "a": {"b": [1]}}`, `{"id": 2, "a": [{"b": [2]}]}`)
	if len(dls) != 1 || dls[0].Position != "0/1" || !strings.Contains(dls[0].Error, `field "a[0].b": is a list whose child table is also that of a list at another path`) {
		t.Fatalf("dead letters %v, want the second path to a__b refused", dls)
	}
}

// TestChildIDs pins the ids (docs/schema.md#child-tables): a top row's is
// the hash of its record's position, a child row's that of its parent's
// id, its table and its index, whichever way its element was decoded (the
// first element of a table field by field, the next ones as settled rows).
func TestChildIDs(t *testing.T) {
	msgs := []string{
		`{"id": 1, "items": [{"sku": "a", "tags": ["x", "y"]}, {"sku": "b"}, {"sku": "c"}]}`,
		`{"id": 2, "items": [{"sku": "d"}, {"qty": 1, "sku": "e"}]}`,
	}
	evolve := Contract{Columns: Evolve, DataType: Evolve}
	_, _, _, found, children := childDecode(t, batch.Schema{}, nil, evolve, msgs...)
	kids := map[string]batch.Schema{}
	for suffix, c := range children {
		kids[suffix] = withLinks(c.Columns)
	}
	out, rows, dls, more, moreKids := childDecode(t, batch.Schema{Columns: found}, kids, evolve, msgs...)
	if len(dls) != 0 || len(more) != 0 || len(moreKids) != 0 {
		t.Fatalf("dead letters %v, found %v %v", dls, more, moreKids)
	}
	hash := func(key string) string { return string(batch.AppendLinkID(nil, []byte(key))) }
	str := func(b *batch.Batch, col string, i int) string { s, _ := b.Column(col).Value(i).(string); return s }
	// The first record is at t/0/0 (childDecode): its id, pinned.
	if got, want := str(out, batch.IDColumn, 0), "4BTeUznyMQuAl4XWGzUQ8Q"; got != want || hash("t\x000\x000") != want {
		t.Fatalf("record 0/0: id %s, hash %s, want %s", got, hash("t\x000\x000"), want)
	}
	items, tags := rows["items"], rows["items__tags"]
	if items.Len() != 5 || tags.Len() != 2 {
		t.Fatalf("items %d, tags %d", items.Len(), tags.Len())
	}
	for i, want := range []struct {
		rec, idx int
		sku      string
	}{{0, 0, "a"}, {0, 1, "b"}, {0, 2, "c"}, {1, 0, "d"}, {1, 1, "e"}} {
		top := hash("t\x000\x00" + strconv.Itoa(want.rec))
		if got := str(out, batch.IDColumn, want.rec); got != top {
			t.Fatalf("record %d: id %s, want %s", want.rec, got, top)
		}
		id := hash(top + "\x00items\x00" + strconv.Itoa(want.idx))
		if str(items, batch.IDColumn, i) != id || str(items, batch.ParentIDColumn, i) != top || str(items, batch.RootIDColumn, i) != top ||
			items.Column(batch.ListIdxColumn).Value(i) != int64(want.idx) || str(items, "sku", i) != want.sku {
			t.Fatalf("items row %d: %v, want id %s under %s at %d, sku %s", i, items.Row(i), id, top, want.idx, want.sku)
		}
	}
	item0 := str(items, batch.IDColumn, 0)
	for i, v := range []string{"x", "y"} {
		id := hash(item0 + "\x00items__tags\x00" + strconv.Itoa(i))
		if str(tags, batch.IDColumn, i) != id || str(tags, batch.ParentIDColumn, i) != item0 || str(tags, batch.RootIDColumn, i) != str(out, batch.IDColumn, 0) || str(tags, ValueColumn, i) != v {
			t.Fatalf("tags row %d: %v, want id %s under %s", i, tags.Row(i), id, item0)
		}
	}
	if items.Column("qty").Value(4) != int64(1) || items.Column("qty").Value(3) != nil {
		t.Fatalf("qty: %v %v, want 1 and NULL", items.Column("qty").Value(4), items.Column("qty").Value(3))
	}
}

// TestSettledElements checks that an element decoded in one visit
// (settled: like the element before it) gives what field-by-field
// decoding gives, and that anything unlike the element before (a repeated
// field, another order, a misfit) still gets its last-wins value, its
// variant or its error.
func TestSettledElements(t *testing.T) {
	cols := []batch.Column{{Name: "a", Type: batch.Int64, Nullable: true}, {Name: "b", Type: batch.String, Nullable: true}}
	variant := append(slices.Clone(cols), batch.Column{Name: "a__v_string", Type: batch.String, Nullable: true})
	root := batch.Schema{Columns: []batch.Column{{Name: batch.IDColumn, Type: batch.String, Nullable: true}}}
	for _, tc := range []struct {
		name     string
		cols     []batch.Column
		contract Contract
		items    string
		want     []string // per row: a b [a__v_string]
		dl       string   // the record's dead letter
		found    []string
	}{
		{name: "alike", cols: cols, items: `[{"a": 1, "b": "x"}, {"a": 2, "b": "y"}, {"a": 3, "b": "z"}]`, want: []string{"1 x", "2 y", "3 z"}},
		{name: "null and missing", cols: cols, items: `[{"a": 1, "b": "x"}, {"a": null, "b": "y"}, {"b": "z"}, {}]`, want: []string{"1 x", "<nil> y", "<nil> z", "<nil> <nil>"}},
		{name: "repeated field, last wins", cols: cols, items: `[{"a": 1, "b": "x", "a": 4}, {"a": 2, "b": "y", "a": 5}, {"a": 6, "a": 7}]`, want: []string{"4 x", "5 y", "7 <nil>"}},
		{name: "other order", cols: cols, items: `[{"a": 1, "b": "x"}, {"b": "y", "a": 2}, {"b": "z", "a": 3}]`, want: []string{"1 x", "2 y", "3 z"}},
		{name: "misfit under freeze", cols: cols, contract: Contract{Columns: Freeze, DataType: Freeze}, items: `[{"a": 1, "b": "x"}, {"a": "two", "b": "y"}]`,
			dl: `schema_contract field "items[1].a": "two" is not an int64 (schema_contract data_type: freeze)`},
		{name: "invalid UTF-8", cols: cols, items: "[{\"a\": 1, \"b\": \"x\"}, {\"a\": 2, \"b\": \"caf\xe9\"}]",
			dl: `invalid_utf8 field "items[1].b": "caf\xe9" is not valid UTF-8 (declare the column bytes to keep any bytes)`},
		{name: "misfit to its variant", cols: variant, items: `[{"a": 1, "b": "x"}, {"a": "two", "b": "y"}, {"a": 3, "b": "z"}]`, want: []string{"1 x <nil>", "<nil> y two", "3 z <nil>"}},
		{name: "misfit found a variant", cols: cols, items: `[{"a": 1, "b": "x"}, {"a": "two", "b": "y"}]`, want: []string{"1 x", "<nil> y"}, found: []string{"a__v_string"}},
		{name: "new field", cols: cols, items: `[{"a": 1, "b": "x"}, {"a": 2, "c": true}]`, want: []string{"1 x", "2 <nil>"}, found: []string{"c"}},
		{name: "nested object", cols: cols, items: `[{"a": 1, "b": "x"}, {"a": 2, "b": {"c": 1}}]`, want: []string{"1 x", "2 <nil>"}, found: []string{"b__c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.contract
			if c.Columns == "" {
				c = Contract{Columns: Evolve, DataType: Evolve}
			}
			kids := map[string]batch.Schema{"items": withLinks(tc.cols)}
			_, rows, dls, _, more := childDecode(t, root, kids, c, `{"items": `+tc.items+`}`)
			if tc.dl != "" {
				if len(dls) != 1 || dls[0].Reason+" "+dls[0].Error != tc.dl || rows["items"].Len() != 0 {
					t.Fatalf("dead letters %v, rows %v; want %s and no rows", dls, rows["items"], tc.dl)
				}
				return
			}
			if len(dls) != 0 {
				t.Fatalf("dead letters %v", dls)
			}
			var found []string
			for _, col := range more["items"].Columns {
				found = append(found, col.Name)
			}
			if !slices.Equal(found, tc.found) {
				t.Fatalf("found %v, want %v", found, tc.found)
			}
			items := rows["items"]
			var got []string
			for i := range items.Len() {
				if idx := items.Column(batch.ListIdxColumn).Value(i); idx != int64(i) {
					t.Fatalf("row %d at index %v", i, idx)
				}
				var vals []string
				for _, col := range tc.cols {
					vals = append(vals, fmt.Sprint(items.Column(col.Name).Value(i)))
				}
				got = append(got, strings.Join(vals, " "))
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("rows %q, want %q", got, tc.want)
			}
		})
	}
}

// TestChildRowsPresized checks that the room DecodeAll makes for a
// batch's child rows, estimated from its first records, holds what the
// records give, more or less than estimated, within 8 rows a record.
func TestChildRowsPresized(t *testing.T) {
	for _, tc := range []struct {
		name  string
		items func(i int) int // items of record i
	}{
		{"alike", func(int) int { return 3 }},
		{"more later", func(i int) int { return i / 10 }},
		{"fewer later", func(i int) int { return max(0, 40-i) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var msgs []string
			total := 0
			for i := range 320 {
				var items []string
				for j := range tc.items(i) {
					items = append(items, fmt.Sprintf(`{"n": %d}`, j))
				}
				total += tc.items(i)
				msgs = append(msgs, fmt.Sprintf(`{"id": %d, "items": [%s]}`, i, strings.Join(items, ",")))
			}
			evolve := Contract{Columns: Evolve, DataType: Evolve}
			_, _, _, found, children := childDecode(t, batch.Schema{}, nil, evolve, msgs...)
			kids := map[string]batch.Schema{"items": withLinks(children["items"].Columns)}
			_, rows, dls, _, _ := childDecode(t, batch.Schema{Columns: found}, kids, evolve, msgs...)
			items := rows["items"]
			if len(dls) != 0 || items.Len() != total {
				t.Fatalf("dead letters %v, %d items, want %d", dls, items.Len(), total)
			}
			at, n := 0, items.Column("n")
			for i := range msgs {
				for j := range tc.items(i) {
					if n.Value(at) != int64(j) || items.Column(batch.ListIdxColumn).Value(at) != int64(j) {
						t.Fatalf("item %d: %v, want record %d's item %d", at, items.Row(at), i, j)
					}
					at++
				}
			}
			if c := cap(n.Ints); c > max(2*total, 8*len(msgs)) {
				t.Fatalf("room for %d items, %d needed", c, total)
			}
		})
	}
}
