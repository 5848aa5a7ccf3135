package flows_test

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/consumer"
	"github.com/sluicehq/sluice/flows"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks/destination"
)

// TestJSONInferenceAndEvolution checks that an append flow of JSON
// messages into a table that declares no columns creates the table from
// its first messages, adds the new fields of each later batch as nullable
// columns in the load that first carries them (names normalized), keeps
// the rows loaded before with NULL in them, and sends values that do not
// fit their inferred column to a variant column.
func TestJSONInferenceAndEvolution(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		topic := "infer_" + dname
		s := newStepper(t, broker.Addr(), dest(t), eventsSpec(topic, ""))
		s.produce(topic)
		s.update() // nothing yet: no table
		if err := s.tryScan("events"); err == nil {
			t.Fatal("the table exists before its first message")
		}
		s.produce(topic, `{}`, `{"gone": null}`)
		s.update() // no field with a value: dead letters, and still no table
		if err := s.tryScan("events"); err == nil {
			t.Fatal("the table exists before a message with a value")
		}
		s.produce(topic, `{"id": 1, "userName": "ann"}`, `{"id": 2, "userName": "bob", "gone": null}`)
		s.update()
		if got, want := s.rows("events", batch.LoadIDColumn), []string{"1,ann", "2,bob"}; !slices.Equal(got, want) {
			t.Fatalf("first batch: rows %q, want %q", got, want)
		}
		s.produce(topic, `{"id": 3, "userName": "cy", "Score": 1.5, "at": "2024-05-01T10:00:00.25Z"}`)
		s.update()
		s.produce(topic, `{"id": 4, "ok": true, "Score": 2}`, `{"id": "five"}`, `{"id": 6, "at": 1714557600}`)
		s.update()
		cols := columnsOf(t, s, "events")
		want := []string{"id int64 nullable", "user_name string nullable", "score float64 nullable", "at timestamp nullable", "ok bool nullable",
			"id__v_string string nullable", "at__v_int64 int64 nullable"}
		if !slices.Equal(cols, want) {
			t.Fatalf("columns %q, want %q", cols, want)
		}
		wantRows := []string{
			"1,ann,∞,∞,∞,∞,∞",
			"2,bob,∞,∞,∞,∞,∞",
			"3,cy,1.5,2024-05-01T10:00:00.25Z,∞,∞,∞",
			"4,∞,2,∞,true,∞,∞",
			"6,∞,∞,∞,∞,∞,1714557600",
			"∞,∞,∞,∞,∞,five,∞",
		}
		if got := s.rows("events", batch.LoadIDColumn); !slices.Equal(got, wantRows) {
			t.Fatalf("rows %q, want %q", got, wantRows)
		}
		bad := s.rows(batch.DeadLettersTable, "at", "payload", "pipeline", "target")
		if len(bad) != 2 || strings.Count(strings.Join(bad, "\n"), "has no columns yet") != 2 {
			t.Fatalf("dead letters %q, want the two messages without a value", bad)
		}
		// A restart reads the columns from the destination and goes on.
		s.produce(topic, `{"id": 7, "userName": "dee", "extra": "x"}`)
		s.update()
		if got := columnsOf(t, s, "events"); len(got) != 8 || got[7] != "extra string nullable" {
			t.Fatalf("columns after a restart %q", got)
		}
		if got := s.rows("events", batch.LoadIDColumn); len(got) != 7 || got[5] != "7,dee,∞,∞,∞,∞,∞,x" {
			t.Fatalf("rows after a restart %q", got)
		}
		// Each batch that changed the columns wrote a version, with the
		// pipeline's schema of then; the first, of the messages without a
		// value, has no table.
		vs := s.rows(batch.VersionTable, "inserted_at", batch.LoadIDColumn, "pipeline", "version_hash")
		if len(vs) != 5 || !strings.Contains(vs[0], `"tables":[]`) {
			t.Fatalf("%s: %q, want 5 versions", batch.VersionTable, vs)
		}
		vs = vs[1:]
		for i, v := range vs {
			if !strings.HasPrefix(v, fmt.Sprint(i+2)+",") || !strings.HasSuffix(v, ",live") {
				t.Fatalf("version %d: %q", i+2, v)
			}
		}
		if !strings.Contains(vs[0], `{"name":"user_name","type":"string","nullable":true}`) || strings.Contains(vs[0], "score") ||
			!strings.Contains(vs[0], `"flows":[{"name":"live","names":{"userName":"user_name"}}]`) ||
			!strings.Contains(vs[1], `"names":{"Score":"score","userName":"user_name"}`) ||
			!strings.Contains(vs[2], "id__v_string") || !strings.Contains(vs[3], `"extra"`) {
			t.Fatalf("version schemas %q", vs)
		}
		// Each load names the version it was written under.
		hashes := s.rows(batch.VersionTable, "pipeline", "version", "schema", "flow", "inserted_at", batch.LoadIDColumn)
		loads := s.rows(batch.LoadsTable, "load_id", "pipeline", "flow", "targets", "positions", "rows", "dead_letters", "generation", "committed_at")
		if len(loads) != 5 {
			t.Fatalf("loads %q, want 5", loads)
		}
		for _, h := range loads {
			if !slices.Contains(hashes, h) {
				t.Fatalf("a load's schema_version_hash %q is none of the versions %q", h, hashes)
			}
		}
		if v := s.report().Schema; v == nil || v.Version != 5 || len(v.Hash) != 64 {
			t.Fatalf("status shows schema %+v, want version 5", v)
		}
		if dname == "local" {
			// parquet-go alone reads the table's files, older ones without
			// the columns added since.
			got := readEvents(t, filepath.Join(s.p.Path(s.p.Destination.Local.Path), "events"))
			want := []string{",,,,", "1,ann,,,", "2,bob,,,", "3,cy,1.5,,", "4,,2,true,", "6,,,,", "7,dee,,,x"}
			if !slices.Equal(got, want) {
				t.Fatalf("files read by parquet-go: %q, want %q", got, want)
			}
		}
	})
}

// readEvents reads every Parquet file of a local table's current version
// with parquet-go.
func readEvents(t *testing.T, dir string) []string {
	t.Helper()
	type row struct {
		ID       *int64   `parquet:"id,optional"`
		UserName *string  `parquet:"user_name,optional"`
		Score    *float64 `parquet:"score,optional"`
		OK       *bool    `parquet:"ok,optional"`
		Extra    *string  `parquet:"extra,optional"`
	}
	str := func(v any) string {
		switch v := v.(type) {
		case *int64:
			if v != nil {
				return fmt.Sprint(*v)
			}
		case *string:
			if v != nil {
				return *v
			}
		case *float64:
			if v != nil {
				return fmt.Sprint(*v)
			}
		case *bool:
			if v != nil {
				return fmt.Sprint(*v)
			}
		}
		return ""
	}
	return readLocalFiles(t, dir, func(r row) string {
		return strings.Join([]string{str(r.ID), str(r.UserName), str(r.Score), str(r.OK), str(r.Extra)}, ",")
	})
}

// columnsOf lists a table's columns as "name type [nullable]".
func columnsOf(t *testing.T, s *stepper, table string) []string {
	t.Helper()
	ctx := t.Context()
	sink, err := destination.Open(ctx, s.p, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	cols, err := sink.Columns(ctx, table)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range cols.Columns {
		d := c.Name + " " + c.Type.String()
		if c.Nullable {
			d += " nullable"
		}
		out = append(out, d)
	}
	return out
}

// TestJSONSchemaContracts checks schema_contract freeze and discard_row on
// a table typed by its messages: a new field and a value of another type
// are dead letters schema_contract under freeze, and left out and counted
// under discard_row.
func TestJSONSchemaContracts(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		topic := "contract_" + dname
		s := newStepper(t, broker.Addr(), dest(t), `tables:
  - name: frozen
  - name: strict
flows:
  - name: first
    target: frozen
    kind: append
    source: {kafka: {topic: `+topic+`}}
    schema_contract: {columns: freeze, data_type: freeze}
  - name: second
    target: strict
    kind: append
    source: {kafka: {topic: `+topic+`}}
    schema_contract: {columns: discard_row, data_type: discard_row}
    expectations:
      - {name: small, expr: "id < 4", on_violation: drop}
`)
		// The first batch types the tables; freeze and discard_row govern
		// the changes after it.
		s.produce(topic, `{"id": 1, "name": "a"}`)
		s.update()
		s.produce(topic, `{"id": 2, "name": "b", "new": 1}`, `{"id": "three"}`, `{"id": 4}`)
		s.update()
		if got, want := s.rows("frozen", batch.LoadIDColumn), []string{"1,a", "4,∞"}; !slices.Equal(got, want) {
			t.Fatalf("frozen: rows %q, want %q", got, want)
		}
		if got, want := s.rows("strict", batch.LoadIDColumn), []string{"1,a"}; !slices.Equal(got, want) {
			t.Fatalf("strict: rows %q, want %q", got, want)
		}
		bad := s.rows(batch.DeadLettersTable, "at", "pipeline", "target", "source", "error", batch.LoadIDColumn)
		all := strings.Join(bad, "\n")
		if len(bad) != 3 || strings.Count(all, "first,1/0,"+batch.ReasonSchemaContract) != 0 || strings.Count(all, batch.ReasonSchemaContract) != 2 {
			t.Fatalf("dead letters %q, want the new field and the string id of flow first", bad)
		}
		// The expectation's dead letter is the record it read, not one the
		// contract left out before it.
		if !slices.ContainsFunc(bad, func(d string) bool {
			return strings.HasPrefix(d, "second,0/3,expectation,") && strings.HasSuffix(d, `[123 34 105 100 34 58 32 52 125]`)
		}) {
			t.Fatalf("dead letters %q, want record 0/3 {\"id\": 4} dropped by expectation small", bad)
		}
		counts := s.rows(batch.ExpectationsTable, "at", batch.LoadIDColumn, "pipeline")
		if !slices.Contains(counts, "second,strict,(schema_contract),discard_row,2") {
			t.Fatalf("counts %q, want the two records discard_row left out", counts)
		}
		if got := s.status("second").Expectations; len(got) != 2 {
			t.Fatalf("status counts %+v, want the contract's and the expectation's", got)
		}
	})
}

// TestJSONInferenceAcrossPartitions checks that the batches of several
// partitions, loaded side by side, each adding its own fields to one table,
// give the table every field and every row.
func TestJSONInferenceAcrossPartitions(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		topic := "infer_parts_" + dname
		s := newStepper(t, broker.Addr(), dest(t), eventsSpec(topic, `    batch: {rows: 5}
`))
		ctx := t.Context()
		if err := consumer.CreateTopic(ctx, []string{broker.Addr()}, topic, 4); err != nil {
			t.Fatal(err)
		}
		var ms []consumer.Message
		want := map[string]bool{"id": true}
		for p := range 4 {
			for i := range 20 {
				field := fmt.Sprintf("f%d_%d", p, i%7)
				want[field] = true
				ms = append(ms, consumer.Message{Partition: int32(p), Value: fmt.Appendf(nil, `{"id": %d, %q: "v"}`, p*100+i, field)})
			}
		}
		if err := consumer.Produce(ctx, []string{broker.Addr()}, topic, ms); err != nil {
			t.Fatal(err)
		}
		s.update()
		got := map[string]bool{}
		for _, c := range columnsOf(t, s, "events") {
			got[strings.Fields(c)[0]] = true
		}
		if !maps.Equal(got, want) {
			t.Fatalf("columns %v, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
		}
		if rows := s.rows("events", batch.LoadIDColumn); len(rows) != 80 {
			t.Fatalf("%d rows, want 80", len(rows))
		}
		if dls := s.rows(batch.DeadLettersTable); len(dls) != 0 {
			t.Fatalf("dead letters %q", dls)
		}
	})
}

// TestJSONInferenceWithRules checks that a table typed by its messages
// takes computed columns and a where filter, the computed columns staying
// after the columns of the messages as new fields arrive.
func TestJSONInferenceWithRules(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		topic := "infer_rules_" + dname
		s := newStepper(t, broker.Addr(), dest(t), eventsSpec(topic, `    computed_columns:
      - {name: double, type: int64, nullable: true, expr: "n * 2"}
    where: 'n != 3'
`))
		s.produce(topic, `{"n": 1}`, `{"n": 3}`)
		s.update()
		s.produce(topic, `{"n": 2, "x": "a"}`)
		s.update()
		if got, want := s.rows("events", batch.LoadIDColumn), []string{"1,∞,2", "2,a,4"}; !slices.Equal(got, want) {
			t.Fatalf("rows %q, want %q", got, want)
		}
	})
}

// eventsSpec is a spec of table events typed by the messages of flow live
// from topic, with more keys of the flow.
func eventsSpec(topic, flowKeys string) string {
	return `tables:
  - name: events
flows:
  - name: live
    target: events
    kind: append
    source: {kafka: {topic: ` + topic + `}}
` + flowKeys
}

// TestJSONLInference checks that an append flow of JSONL files into a
// table that declares no columns types the table from the lines, as from
// messages: the Hive segments of the paths become columns, each pass adds
// the new fields of its files, and what the table cannot hold (a nested
// value, a field named like a Hive segment, invalid UTF-8) is a dead
// letter named by its file and line.
func TestJSONLInference(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		s := newStepper(t, broker.Addr(), dest(t), `tables:
  - name: events
flows:
  - name: bf
    target: events
    kind: append
    source: {files: {path: "in/day=*/*.jsonl"}}
`)
		write := func(name string, lines ...string) {
			t.Helper()
			path := filepath.Join(s.dir, "in", name)
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		write("day=2024-05-01/a.jsonl",
			`{"id": 1, "userName": "ann"}`,
			``,
			`{"id": 2, "userName": "bob", "Score": 1.5}`,
			`{"id": "three"}`,
			`{"id": 4, "day": "2024-01-01"}`,
			`{"id": 5, "tags": ["a"]}`,
			"{\"id\": 6, \"userName\": \"caf\xe9\"}",
		)
		s.update()
		// The Hive columns come first: the table has them before its
		// first lines are decoded.
		want := []string{"day date nullable", "id int64 nullable", "user_name string nullable", "score float64 nullable", "_sluice_id string nullable", "id__v_string string nullable"}
		if got := columnsOf(t, s, "events"); !slices.Equal(got, want) {
			t.Fatalf("columns %q, want %q", got, want)
		}
		wantRows := []string{"2024-05-01,1,ann,∞,∞", "2024-05-01,2,bob,1.5,∞", "2024-05-01,5,∞,∞,∞", "2024-05-01,∞,∞,∞,three"}
		if got := s.rows("events", batch.LoadIDColumn, batch.IDColumn); !slices.Equal(got, wantRows) {
			t.Fatalf("rows %q, want %q", got, wantRows)
		}
		if got, want := joined(t, s, "events", "events__tags", "id"), []string{"5[0]: a"}; !slices.Equal(got, want) {
			t.Fatalf("events__tags joined to events: %q, want %q", got, want)
		}
		bad := s.rows(batch.DeadLettersTable, "at", "payload", "pipeline", "target", "flow", batch.LoadIDColumn)
		wantBad := []string{
			`in/day=2024-05-01/a.jsonl,5,type_mismatch,field "day": is also a Hive segment of the file's path, which fills column day: rename the field or the segment`,
			`in/day=2024-05-01/a.jsonl,7,invalid_utf8,field "user_name": "caf\xe9" is not valid UTF-8 (declare the column bytes to keep any bytes)`,
		}
		if !slices.Equal(bad, wantBad) {
			t.Fatalf("dead letters\n%s\nwant\n%s", strings.Join(bad, "\n"), strings.Join(wantBad, "\n"))
		}
		// A later file with a new field: the next pass adds the column.
		write("day=2024-05-02/b.jsonl", `{"id": 7, "ok": true}`)
		s.update()
		want = append(want, "ok bool nullable")
		if got := columnsOf(t, s, "events"); !slices.Equal(got, want) {
			t.Fatalf("columns after a new field %q, want %q", got, want)
		}
		wantRows = []string{"2024-05-01,1,ann,∞,∞,∞", "2024-05-01,2,bob,1.5,∞,∞", "2024-05-01,5,∞,∞,∞,∞", "2024-05-01,∞,∞,∞,three,∞", "2024-05-02,7,∞,∞,∞,true"}
		if got := s.rows("events", batch.LoadIDColumn, batch.IDColumn); !slices.Equal(got, wantRows) {
			t.Fatalf("rows after a new field %q, want %q", got, wantRows)
		}
		if vs := s.rows(batch.VersionTable); len(vs) != 2 {
			t.Fatalf("versions %q, want two: the first file's columns, then ok", vs)
		}
	})
}

// TestNestedJSON checks nested objects end to end: a table typed by its
// messages flattens them into <parent>__<child> columns and keeps a value
// deeper than max_nesting as its JSON text; a declared column takes a
// nested field by its path; a bad nested value is a dead letter named by
// its path while the rest of the batch lands.
func TestNestedJSON(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		topic, declared := "nested_"+dname, "nested_declared_"+dname
		s := newStepper(t, broker.Addr(), dest(t), `tables:
  - name: events
  - name: orders
    columns:
      - {name: id, type: int64}
      - {name: zip, type: string, nullable: true, path: customer.address.zip}
      - {name: qty, type: int64, nullable: true, path: items.0.qty}
flows:
  - name: live
    target: events
    kind: append
    source: {kafka: {topic: `+topic+`}}
    max_nesting: 2
  - name: orders_in
    target: orders
    kind: append
    source: {kafka: {topic: `+declared+`}}
`)
		s.produce(topic,
			`{"id": 1, "customer": {"firstName": "ann", "address": {"zip": "1000", "geo": {"lat": 1.5}}}}`,
			`{"id": 2, "customer": {"firstName": "bob", "address": {"zip": 2000}}}`,
			`{"id": 3, "customer": {"address": {"geo": {"tags": ["a", "b"]}}}}`,
			`{"id": 4, "customer": {"firstName": "cy", "extra": [1]}}`,
		)
		s.produce(declared,
			`{"id": 1, "customer": {"address": {"zip": "1000"}}, "items": [{"qty": 2}]}`,
			`{"id": 2}`,
			`{"id": 3, "customer": {"address": {"zip": 3}}}`,
		)
		s.update()
		want := []string{"id int64 nullable", "customer__first_name string nullable", "customer__address__zip string nullable",
			"customer__address__geo string nullable", "_sluice_id string nullable", "customer__address__zip__v_int64 int64 nullable"}
		if got := columnsOf(t, s, "events"); !slices.Equal(got, want) {
			t.Fatalf("columns %q, want %q", got, want)
		}
		wantRows := []string{
			`1,ann,1000,{"lat":1.5},∞`,
			`2,bob,∞,∞,2000`,
			`3,∞,∞,{"tags":["a","b"]},∞`,
			`4,cy,∞,∞,∞`,
		}
		if got := s.rows("events", batch.LoadIDColumn, batch.IDColumn); !slices.Equal(got, wantRows) {
			t.Fatalf("rows %q, want %q", got, wantRows)
		}
		if got, want := joined(t, s, "events", "events__customer__extra", "id"), []string{"4[0]: 1"}; !slices.Equal(got, want) {
			t.Fatalf("events__customer__extra joined to events: %q, want %q", got, want)
		}
		if got, want := s.rows("orders", batch.LoadIDColumn), []string{"1,1000,2", "2,∞,∞"}; !slices.Equal(got, want) {
			t.Fatalf("orders %q, want %q", got, want)
		}
		bad := s.rows(batch.DeadLettersTable, "at", "payload", "pipeline", "target", "source", batch.LoadIDColumn)
		wantBad := []string{
			`orders_in,0/2,type_mismatch,field "customer.address.zip": 3 is not a string`,
		}
		if !slices.Equal(bad, wantBad) {
			t.Fatalf("dead letters\n%s\nwant\n%s", strings.Join(bad, "\n"), strings.Join(wantBad, "\n"))
		}
	})
}

// joined joins the rows of a child table to its parent's: each child row
// as "<the parent's key>[<its list index>]: <its other columns>", sorted;
// a child row whose parent is missing fails the test.
func joined(t *testing.T, s *stepper, parent, child, key string) []string {
	t.Helper()
	return joinChild(t, s, parent, child, batch.ParentIDColumn, true, key)
}

// TestChildTablesEndToEnd checks orders with items into a table typed by
// its messages: the items, and the tags of each item, land in child tables
// linked to their parents in the load of their order; a bad tag two levels
// down sends its whole order to the dead letters, named by its path, while
// the rest lands; a restart goes on with the child tables and adds the
// columns of new item fields; a where that leaves an order out leaves its
// items out; _sluice_version records the child tables.
func TestChildTablesEndToEnd(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		topic := "children_" + dname
		s := newStepper(t, broker.Addr(), dest(t), eventsSpec(topic, "    where: 'id != 99'\n"))
		s.produce(topic,
			`{"id": 1, "items": [{"sku": "a", "qty": 2, "tags": ["x", "y"]}, {"sku": "b", "qty": 1}]}`,
			`{"id": 2, "items": [{"sku": "c", "qty": 1, "tags": ["z"]}]}`,
			"{\"id\": 3, \"items\": [{\"sku\": \"d\", \"qty\": 1}, {\"sku\": \"e\", \"qty\": 1, \"tags\": [\"ok\", \"caf\xe9\"]}]}",
			`{"id": 99, "items": [{"sku": "zz", "qty": 9}]}`,
		)
		s.update()
		if got, want := s.rows("events", batch.LoadIDColumn, batch.IDColumn), []string{"1", "2"}; !slices.Equal(got, want) {
			t.Fatalf("events %q, want %q", got, want)
		}
		if got, want := joined(t, s, "events", "events__items", "id"), []string{"1[0]: a,2", "1[1]: b,1", "2[0]: c,1"}; !slices.Equal(got, want) {
			t.Fatalf("items joined to their orders: %q, want %q", got, want)
		}
		if got, want := joined(t, s, "events__items", "events__items__tags", "sku"), []string{"a[0]: x", "a[1]: y", "c[0]: z"}; !slices.Equal(got, want) {
			t.Fatalf("tags joined to their items: %q, want %q", got, want)
		}
		bad := s.rows(batch.DeadLettersTable, "at", "payload", "pipeline", "target", "source", "flow", batch.LoadIDColumn)
		if want := []string{`0/2,invalid_utf8,field "items[1].tags[1]": "caf\xe9" is not valid UTF-8 (declare the column bytes to keep any bytes)`}; !slices.Equal(bad, want) {
			t.Fatalf("dead letters %q, want %q", bad, want)
		}

		// A restart, and items with a new field.
		s.produce(topic, `{"id": 4, "items": [{"sku": "f", "qty": 1, "gift": true}]}`)
		s.update()
		if got, want := joined(t, s, "events", "events__items", "id"), []string{"1[0]: a,2,∞", "1[1]: b,1,∞", "2[0]: c,1,∞", "4[0]: f,1,true"}; !slices.Equal(got, want) {
			t.Fatalf("items after a restart: %q, want %q", got, want)
		}
		vs := s.rows(batch.VersionTable, "inserted_at", batch.LoadIDColumn, "pipeline", "version_hash")
		if last := vs[len(vs)-1]; !strings.Contains(last, `"name":"events__items__tags","parent":"events__items","root":"events"`) || !strings.Contains(last, `"gift"`) {
			t.Fatalf("the last version %s lacks the child tables", last)
		}
		if st := s.status("live"); fmt.Sprint(st.ChildTables) != "[{events__items events} {events__items__tags events__items}]" {
			t.Fatalf("status lists the child tables %v", st.ChildTables)
		}
		// A full refresh empties the child tables with their table: the
		// replay gives each item once.
		s.updateWith(flows.Options{FullRefresh: true})
		if got, want := joined(t, s, "events", "events__items", "id"), []string{"1[0]: a,2,∞", "1[1]: b,1,∞", "2[0]: c,1,∞", "4[0]: f,1,true"}; !slices.Equal(got, want) {
			t.Fatalf("items after a full refresh: %q, want %q", got, want)
		}
		if got, want := joined(t, s, "events__items", "events__items__tags", "sku"), []string{"a[0]: x", "a[1]: y", "c[0]: z"}; !slices.Equal(got, want) {
			t.Fatalf("tags after a full refresh: %q, want %q", got, want)
		}
		if dname == "local" {
			// parquet-go alone reads the child table's files.
			type item struct {
				Parent *string `parquet:"_sluice_parent_id,optional"`
				Idx    *int64  `parquet:"_sluice_list_idx,optional"`
				SKU    *string `parquet:"sku,optional"`
			}
			got := readLocalFiles(t, filepath.Join(s.p.Path(s.p.Destination.Local.Path), "events__items"), func(r item) string {
				return fmt.Sprintf("%v,%d,%s", r.Parent != nil, *r.Idx, *r.SKU)
			})
			if want := []string{"true,0,a", "true,0,c", "true,0,f", "true,1,b"}; !slices.Equal(got, want) {
				t.Fatalf("events__items read by parquet-go: %q, want %q", got, want)
			}
		}
	})
}

// TestCDCPaths checks an AUTO CDC flow whose key, sequence and a column
// come from nested fields by path: changes apply by the nested key, and
// a nested value of the wrong type is a dead letter named by its path.
func TestCDCPaths(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		topic := "cdc_paths_" + dname
		s := newStepper(t, broker.Addr(), dest(t), `tables:
  - name: customers
flows:
  - name: c
    target: customers
    kind: auto_cdc
    source:
      kafka:
        topic: `+topic+`
        columns:
          - {name: id, type: int64, path: key.id}
          - {name: city, type: string, nullable: true, path: after.address.city}
          - {name: seq, type: int64, path: meta.seq}
    keys: [id]
    sequence_by: seq
    except_column_list: [seq]
`)
		s.produce(topic,
			`{"key": {"id": 1}, "after": {"address": {"city": "Oslo"}}, "meta": {"seq": 1}}`,
			`{"key": {"id": 2}, "after": {"address": {"city": "Rome"}}, "meta": {"seq": 1}}`,
			`{"key": {"id": 1}, "after": {"address": {"city": "Bergen"}}, "meta": {"seq": 3}}`,
			`{"key": {"id": 1}, "after": {"address": {"city": "Late"}}, "meta": {"seq": 2}}`,
			`{"key": {"id": 3}, "after": {"address": {"city": 7}}, "meta": {"seq": 1}}`,
		)
		s.update()
		if got, want := s.rows("customers"), []string{"1,Bergen", "2,Rome"}; !slices.Equal(got, want) {
			t.Fatalf("customers %q, want %q", got, want)
		}
		bad := s.rows(batch.DeadLettersTable, "at", "payload", "pipeline", "target", "source", "flow", batch.LoadIDColumn)
		if want := []string{`0/4,type_mismatch,field "after.address.city": 7 is not a string`}; !slices.Equal(bad, want) {
			t.Fatalf("dead letters %q, want %q", bad, want)
		}
	})
}

// TestJSONLEmptyFileWithRules checks that an empty JSONL file, and a file
// of blank lines, of a table typed by its lines load nothing and fail
// nothing when the flow has rules.
func TestJSONLEmptyFileWithRules(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		s := newStepper(t, broker.Addr(), dest(t), `tables:
  - name: events
flows:
  - name: bf
    target: events
    kind: append
    source: {files: {path: "in/*.jsonl"}}
    where: 'id > 1'
`)
		if err := os.MkdirAll(filepath.Join(s.dir, "in"), 0o755); err != nil {
			t.Fatal(err)
		}
		for name, text := range map[string]string{"a.jsonl": "", "b.jsonl": "\n\n", "c.jsonl": `{"id": 1}` + "\n" + `{"id": 2}` + "\n"} {
			if err := os.WriteFile(filepath.Join(s.dir, "in", name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		s.update()
		if got, want := s.rows("events", batch.LoadIDColumn), []string{"2"}; !slices.Equal(got, want) {
			t.Fatalf("events %q, want %q", got, want)
		}
	})
}
