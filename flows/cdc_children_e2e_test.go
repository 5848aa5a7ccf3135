package flows_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/destination"
)

// TestCDCChildTables loads orders with items into SCD1 and SCD2 targets
// typed by their messages: the items of each change land in the child
// table in the load of the change, named by its _sluice_id, so that joined
// to the target they are those of its current rows (SCD1: a key updated
// with fewer items shows those, a deleted key none, a re-inserted one its
// new ones; SCD2: each version its own, a late change splitting a version
// with its items); a bad element two levels down is a dead letter by its
// path while the rest lands.
func TestCDCChildTables(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		topic := "cdc_kids_" + dname
		s := newStepper(t, broker.Addr(), dest(t), ordersHistorySpec(topic))
		s.produce(topic,
			`{"order_id": 1, "seq": 10, "items": [{"sku": "a", "qty": 2}, {"sku": "b", "qty": 1}]}`,
			`{"order_id": 2, "seq": 10, "items": [{"sku": "c", "qty": 1}]}`,
		)
		s.update()
		s.produce(topic,
			`{"order_id": 1, "seq": 30, "items": [{"sku": "a", "qty": 3}]}`,
			`{"order_id": 2, "seq": 20, "op": "D"}`,
			`{"order_id": 3, "seq": 10, "items": [{"sku": "ok", "qty": 1}, {"sku": "caf`+"\xe9"+`", "qty": 1}]}`,
		)
		s.update()
		s.produce(topic,
			`{"order_id": 2, "seq": 40, "items": [{"sku": "d", "qty": 1}, {"sku": "e", "qty": 5}]}`,
			`{"order_id": 1, "seq": 20, "items": [{"sku": "z", "qty": 9}]}`,
		)
		s.update()

		if got, want := currentJoined(t, s, "orders", "orders__items", "order_id"), []string{
			"1[0]: a,3", "2[0]: d,1", "2[1]: e,5",
		}; !slices.Equal(got, want) {
			t.Fatalf("orders' items %q, want %q", got, want)
		}
		if got, want := currentJoined(t, s, "history", "history__items", "order_id", "__START_AT"), []string{
			"1/10[0]: a,2", "1/10[1]: b,1", "1/20[0]: z,9", "1/30[0]: a,3", "2/10[0]: c,1", "2/40[0]: d,1", "2/40[1]: e,5",
		}; !slices.Equal(got, want) {
			t.Fatalf("history's items %q, want %q", got, want)
		}
		if got, want := s.rows("history", batch.IDColumn), []string{"1,10,∞,10,20", "1,20,∞,20,30", "1,30,∞,30,∞", "2,10,∞,10,20", "2,40,∞,40,∞"}; !slices.Equal(got, want) {
			t.Fatalf("history %q, want %q", got, want)
		}
		bad := s.rows(batch.DeadLettersTable, "at", "payload", "pipeline", "target", "source", batch.LoadIDColumn)
		wantBad := []string{
			`scd1,0/4,invalid_utf8,field "items[1].sku": "caf\xe9" is not valid UTF-8 (declare the column bytes to keep any bytes)`,
			`scd2,0/4,invalid_utf8,field "items[1].sku": "caf\xe9" is not valid UTF-8 (declare the column bytes to keep any bytes)`,
		}
		if !slices.Equal(bad, wantBad) {
			t.Fatalf("dead letters\n%s\nwant\n%s", strings.Join(bad, "\n"), strings.Join(wantBad, "\n"))
		}
	})
}

// ordersHistorySpec is a pipeline of orders with items from topic into
// an SCD1 target orders and an SCD2 target history, both typed by the
// messages, op "D" a delete.
func ordersHistorySpec(topic string) string {
	return `tables:
  - name: orders
  - name: history
flows:
  - name: scd1
    target: orders
    kind: auto_cdc
    source: {kafka: {topic: ` + topic + `}}
    keys: [order_id]
    sequence_by: seq
    apply_as_deletes: 'op == "D"'
  - name: scd2
    target: history
    kind: auto_cdc
    source: {kafka: {topic: ` + topic + `}}
    keys: [order_id]
    sequence_by: seq
    apply_as_deletes: 'op == "D"'
    stored_as_scd_type: 2
`
}

// currentJoined joins the rows of a child table of a CDC target to the
// target's rows: each child row whose record is a row of the target now, as
// "<the row's keys, joined by />[<its list index>]: <its other columns>",
// sorted. The child rows of changes the target shows no more are left out.
func currentJoined(t *testing.T, s *stepper, parent, child string, keys ...string) []string {
	t.Helper()
	return joinChild(t, s, parent, child, batch.RootIDColumn, false, keys...)
}

// joinChild joins the rows of a child table to its parent's by the link
// column: each child row as "<the parent's keys, joined by />[<its list
// index>]: <its other columns>", sorted. With strict, a child row whose
// parent is missing fails the test; otherwise it is left out, and so are
// tables that do not exist yet.
func joinChild(t *testing.T, s *stepper, parent, child, link string, strict bool, keys ...string) []string {
	t.Helper()
	ctx := t.Context()
	sink, err := destination.Open(ctx, s.p, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	p, err := sink.Scan(ctx, parent)
	if err != nil {
		t.Fatal(err)
	}
	if p.Column(batch.IDColumn) == nil && !strict {
		return nil // no record had a list yet
	}
	rows := map[any]string{}
	for i := range p.Len() {
		var k []string
		for _, n := range keys {
			k = append(k, fmt.Sprint(p.Column(n).Value(i)))
		}
		rows[p.Column(batch.IDColumn).Value(i)] = strings.Join(k, "/")
	}
	c, err := sink.Scan(ctx, child)
	if errors.Is(err, sinks.ErrUnknownTable) && !strict {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var rest []string
	for _, n := range c.Schema.Names() {
		if !batch.IsLinkColumn(n) && n != batch.LoadIDColumn {
			rest = append(rest, n)
		}
	}
	var out []string
	for i := range c.Len() {
		pk, ok := rows[c.Column(link).Value(i)]
		switch {
		case strict && (!ok || c.Column(batch.RootIDColumn).Value(i) == nil):
			t.Fatalf("%s row %d has no parent row in %s", child, i, parent)
		case !ok:
			continue
		}
		var parts []string
		for _, n := range rest {
			v := c.Column(n).Value(i)
			if v == nil {
				v = "∞"
			}
			parts = append(parts, fmt.Sprint(v))
		}
		out = append(out, fmt.Sprintf("%s[%v]: %s", pk, c.Column(batch.ListIdxColumn).Value(i), strings.Join(parts, ",")))
	}
	slices.Sort(out)
	return out
}

// TestCDCChildTablesFromFiles loads Parquet files of orders with their
// items into an SCD1 target typed by its files: each row's items land in
// the child table, and joined to the target they are those of its current
// rows, a later file's update of a key with fewer items included.
func TestCDCChildTablesFromFiles(t *testing.T) {
	type item struct {
		SKU string `parquet:"sku"`
		Qty int64  `parquet:"qty"`
	}
	type order struct {
		OrderID int64  `parquet:"order_id"`
		Seq     int64  `parquet:"seq"`
		Items   []item `parquet:"items,list"`
	}
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		s := newStepper(t, broker.Addr(), dest(t), `tables:
  - name: orders
flows:
  - name: bf
    target: orders
    kind: auto_cdc
    source: {files: {path: "in/*.parquet"}}
    keys: [order_id]
    sequence_by: seq
`)
		writeParquet(t, filepath.Join(s.dir, "in", "a.parquet"), []order{
			{OrderID: 1, Seq: 1, Items: []item{{"a", 2}, {"b", 1}}},
			{OrderID: 2, Seq: 1, Items: []item{{"c", 1}}},
		})
		s.update()
		writeParquet(t, filepath.Join(s.dir, "in", "b.parquet"), []order{
			{OrderID: 1, Seq: 2, Items: []item{{"a", 3}}},
			{OrderID: 2, Seq: 0, Items: []item{{"old", 1}}},
		})
		s.update()
		if got, want := currentJoined(t, s, "orders", "orders__items", "order_id"), []string{"1[0]: a,3", "2[0]: c,1"}; !slices.Equal(got, want) {
			t.Fatalf("orders' items %q, want %q", got, want)
		}
		if got, want := s.rows("orders", batch.IDColumn), []string{"1,2", "2,1"}; !slices.Equal(got, want) {
			t.Fatalf("orders %q, want %q", got, want)
		}
	})
}

// TestSnapshotChildTables applies snapshots of customers with their items
// to an SCD1 and an SCD2 target typed by their files: a key whose items
// changed has the new ones, an unchanged key keeps its items (written
// once) and, in SCD2, its version, a change of a column alone starts a
// version that keeps the items, a key absent from the next snapshot is
// deleted with its items, and items that come back after a change are
// those of a new row.
func TestSnapshotChildTables(t *testing.T) {
	type item struct {
		SKU string `parquet:"sku"`
		Qty int64  `parquet:"qty"`
	}
	type customer struct {
		ID    int64  `parquet:"id"`
		Name  string `parquet:"name"`
		Items []item `parquet:"items,list"`
	}
	versions := [][]customer{
		{{1, "a", []item{{"x", 1}, {"y", 2}}}, {2, "b", []item{{"z", 1}}}, {3, "c", nil}},
		{{1, "a", []item{{"x", 1}}}, {2, "b", []item{{"z", 1}}}, {3, "c2", nil}, {4, "d", []item{{"w", 5}}}},
		{{1, "a", []item{{"x", 1}, {"y", 2}}}, {2, "b", []item{{"z", 1}}}},
	}
	scd1 := [][]string{
		{"1[0]: x,1", "1[1]: y,2", "2[0]: z,1"},
		{"1[0]: x,1", "2[0]: z,1", "4[0]: w,5"},
		{"1[0]: x,1", "1[1]: y,2", "2[0]: z,1"},
	}
	scd1Rows := [][]string{{"1,a", "2,b", "3,c"}, {"1,a", "2,b", "3,c2", "4,d"}, {"1,a", "2,b"}}
	scd2 := [][]string{
		{"1/1[0]: x,1", "1/1[1]: y,2", "2/1[0]: z,1"},
		{"1/1[0]: x,1", "1/1[1]: y,2", "1/2[0]: x,1", "2/1[0]: z,1", "4/2[0]: w,5"},
		{"1/1[0]: x,1", "1/1[1]: y,2", "1/2[0]: x,1", "1/3[0]: x,1", "1/3[1]: y,2", "2/1[0]: z,1", "4/2[0]: w,5"},
	}
	scd2Rows := [][]string{
		{"1,a,1,∞", "2,b,1,∞", "3,c,1,∞"},
		{"1,a,1,2", "1,a,2,∞", "2,b,1,∞", "3,c,1,2", "3,c2,2,∞", "4,d,2,∞"},
		{"1,a,1,2", "1,a,2,3", "1,a,3,∞", "2,b,1,∞", "3,c,1,2", "3,c2,2,3", "4,d,2,3"},
	}
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		s := newStepper(t, broker.Addr(), dest(t), `tables:
  - name: s1
  - name: s2
flows:
  - name: snap1
    target: s1
    kind: auto_cdc_from_snapshot
    source: {snapshots: {path: "snaps/{version}/*.parquet"}}
    keys: [id]
  - name: snap2
    target: s2
    kind: auto_cdc_from_snapshot
    source: {snapshots: {path: "snaps/{version}/*.parquet"}}
    keys: [id]
    stored_as_scd_type: 2
`)
		for v, rows := range versions {
			snapshotAt(t, s.dir, fmt.Sprint(v+1), rows)
			s.update()
			if got := currentJoined(t, s, "s1", "s1__items", "id"); !slices.Equal(got, scd1[v]) {
				t.Fatalf("version %d: SCD1 items %q, want %q", v+1, got, scd1[v])
			}
			if got := s.rows("s1", batch.IDColumn); !slices.Equal(got, scd1Rows[v]) {
				t.Fatalf("version %d: SCD1 rows %q, want %q", v+1, got, scd1Rows[v])
			}
			if got := currentJoined(t, s, "s2", "s2__items", "id", "__START_AT"); !slices.Equal(got, scd2[v]) {
				t.Fatalf("version %d: SCD2 items %q, want %q", v+1, got, scd2[v])
			}
			if got := s.rows("s2", batch.IDColumn); !slices.Equal(got, scd2Rows[v]) {
				t.Fatalf("version %d: SCD2 rows %q, want %q", v+1, got, scd2Rows[v])
			}
		}
		// Unchanged keys wrote their items once: the child tables hold
		// those of each content a key was given, no more.
		if got := len(s.rows("s1__items")); got != 2+1+1+1+2 {
			t.Errorf("s1__items holds %d rows, want 7", got)
		}
		if got := len(s.rows("s2__items")); got != 2+1+1+1+2 {
			t.Errorf("s2__items holds %d rows, want 7", got)
		}
	})
}
