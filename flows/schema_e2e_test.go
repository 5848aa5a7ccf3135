package flows_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/sluicehq/sluice/flows"
	"github.com/sluicehq/sluice/flows/batch"

	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse"
	"github.com/sluicehq/sluice/sinks/destination"
)

// Tables whose columns come from the data: Parquet files carry their own
// schema, and a target that declares none takes it (docs/schema.md).

// rawFromFiles is a table that declares no columns, written by a Parquet
// files flow that declares none either.
const rawFromFiles = `tables:
  - name: raw
flows:
  - name: bf
    target: raw
    kind: append
    source: {files: {path: "in/*.parquet"}}
`

type wideRow struct {
	ID    int64   `parquet:"id"`
	Name  string  `parquet:"name"`
	Score *int64  `parquet:"score,optional"`
	Note  *string `parquet:"note,optional"`
}

type namedRow struct {
	OrderID  int64  `parquet:"orderID"`
	UserName string `parquet:"User Name"`
}

type respelledRow struct {
	OrderID  int64  `parquet:"order_id"`
	UserName string `parquet:"userName"`
}

type clashRow struct {
	A string `parquet:"userName"`
	B string `parquet:"user_name"`
}

type historyRow struct {
	ID   int64  `parquet:"id"`
	Name string `parquet:"name"`
	Seq  int64  `parquet:"seq"`
}

func TestParquetWithoutColumns(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		t.Run("once-flow", func(t *testing.T) {
			s := newStepper(t, broker.Addr(), dest(t), `tables:
  - name: raw
flows:
  - name: bf
    target: raw
    kind: append
    once: true
    source: {files: {path: "history/*.parquet"}}
`)
			writeParquet(t, filepath.Join(s.dir, "history", "r1.parquet"), []rawRow{{1, "r1a"}, {2, "r1b"}})
			writeParquet(t, filepath.Join(s.dir, "history", "r2.parquet"), []rawRow{{3, "r2a"}})
			s.update()
			want := []string{"1,r1a", "2,r1b", "3,r2a"}
			if got := s.rows("raw", "_sluice_load_id"); !slices.Equal(got, want) {
				t.Fatalf("rows %q, want %q", got, want)
			}
			if st := s.status("bf"); st.Once != "complete" || st.FilesDone != 2 || st.Rows != 3 {
				t.Fatalf("status of bf: %+v, want complete with 2 files and 3 rows", st)
			}
		})
		t.Run("union-over-files-and-hive", func(t *testing.T) {
			s := newStepper(t, broker.Addr(), dest(t), `tables:
  - name: raw
flows:
  - name: bf
    target: raw
    kind: append
    source: {files: {path: "history/year=*/*.parquet"}}
`)
			writeParquet(t, filepath.Join(s.dir, "history", "year=2023", "a.parquet"), []rawRow{{1, "a"}})
			score := int64(7)
			writeParquet(t, filepath.Join(s.dir, "history", "year=2024", "b.parquet"), []wideRow{{ID: 2, Name: "b", Score: &score}})
			s.update()
			want := []string{"1,a,∞,∞,2023", "2,b,7,∞,2024"}
			if got := s.rows("raw", "_sluice_load_id"); !slices.Equal(got, want) {
				t.Fatalf("rows %q, want %q", got, want)
			}
		})
		t.Run("created-when-first-files-arrive", func(t *testing.T) {
			s := newStepper(t, broker.Addr(), dest(t), rawFromFiles)
			s.update()
			if err := s.tryScan("raw"); !errors.Is(err, sinks.ErrUnknownTable) {
				t.Fatalf("scan before any file: %v, want ErrUnknownTable", err)
			}
			writeParquet(t, filepath.Join(s.dir, "in", "a.parquet"), []rawRow{{1, "a"}})
			s.update()
			if got, want := s.rows("raw", "_sluice_load_id"), []string{"1,a"}; !slices.Equal(got, want) {
				t.Fatalf("rows %q, want %q", got, want)
			}
			// A later file with a new column: the next start adds it.
			score := int64(9)
			writeParquet(t, filepath.Join(s.dir, "in", "b.parquet"), []wideRow{{ID: 2, Name: "b", Score: &score}})
			s.update()
			if got, want := s.rows("raw", "_sluice_load_id"), []string{"1,a,∞,∞", "2,b,9,∞"}; !slices.Equal(got, want) {
				t.Fatalf("rows after a new column %q, want %q", got, want)
			}
			if dname == "local" {
				// parquet-go alone reads the table's files as docs/local.md
				// says DuckDB does (union_by_name): the older file has no
				// score, which reads as NULL.
				got := readLocalTable(t, filepath.Join(s.p.Path(s.p.Destination.Local.Path), "raw"))
				if want := []string{"1,a,<nil>", "2,b,9"}; !slices.Equal(got, want) {
					t.Fatalf("the table's files read by parquet-go: %q, want %q", got, want)
				}
			}
		})
		t.Run("names-normalized", func(t *testing.T) {
			s := newStepper(t, broker.Addr(), dest(t), rawFromFiles)
			writeParquet(t, filepath.Join(s.dir, "in", "a.parquet"), []namedRow{{1, "ann"}, {2, "bob"}})
			s.update()
			sink, err := destination.Open(t.Context(), s.p, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer sink.Close()
			b, err := sink.Scan(t.Context(), "raw")
			if err != nil {
				t.Fatal(err)
			}
			if got := b.Schema.Names(); !slices.Equal(got[:2], []string{"order_id", "user_name"}) {
				t.Fatalf("columns %q, want order_id, user_name first", got)
			}
			if got, want := s.rows("raw", "_sluice_load_id"), []string{"1,ann", "2,bob"}; !slices.Equal(got, want) {
				t.Fatalf("rows %q, want %q", got, want)
			}
			// A later file spells the names otherwise: each file is read
			// by its own names.
			writeParquet(t, filepath.Join(s.dir, "in", "b.parquet"), []respelledRow{{3, "cy"}})
			s.update()
			if got, want := s.rows("raw", "_sluice_load_id"), []string{"1,ann", "2,bob", "3,cy"}; !slices.Equal(got, want) {
				t.Fatalf("rows after a file spelling the names otherwise %q, want %q", got, want)
			}
		})
		t.Run("structs-flattened", func(t *testing.T) {
			type address struct {
				Zip string `parquet:"zip"`
			}
			type customer struct {
				FirstName string   `parquet:"firstName"`
				Address   *address `parquet:"address,optional"`
			}
			type row struct {
				ID       int64     `parquet:"id"`
				Customer *customer `parquet:"customer,optional"`
			}
			s := newStepper(t, broker.Addr(), dest(t), rawFromFiles)
			writeParquet(t, filepath.Join(s.dir, "in", "a.parquet"), []row{{1, &customer{"ann", &address{"1000"}}}, {2, nil}})
			s.update()
			want := []string{"id int64", "customer__first_name string nullable", "customer__address__zip string nullable"}
			if got := columnsOf(t, s, "raw"); !slices.Equal(got, want) {
				t.Fatalf("columns %q, want %q", got, want)
			}
			if got, want := s.rows("raw", "_sluice_load_id"), []string{"1,ann,1000", "2,∞,∞"}; !slices.Equal(got, want) {
				t.Fatalf("rows %q, want %q", got, want)
			}
		})
		t.Run("lists-into-child-tables", func(t *testing.T) {
			type item struct {
				SKU string `parquet:"sku"`
				Qty int64  `parquet:"qty"`
			}
			type order struct {
				ID    int64    `parquet:"id"`
				Items []item   `parquet:"items,list"`
				Tags  []string `parquet:"tags,list"`
			}
			type giftItem struct {
				SKU  string `parquet:"sku"`
				Qty  int64  `parquet:"qty"`
				Gift bool   `parquet:"gift"`
			}
			type order2 struct {
				ID    int64      `parquet:"id"`
				Items []giftItem `parquet:"items,list"`
			}
			s := newStepper(t, broker.Addr(), dest(t), rawFromFiles)
			writeParquet(t, filepath.Join(s.dir, "in", "a.parquet"), []order{
				{ID: 1, Items: []item{{"a", 2}, {"b", 1}}, Tags: []string{"x"}},
				{ID: 2},
				{ID: 3, Items: []item{{"caf\xe9", 1}}},
			})
			s.update()
			if got, want := s.rows("raw", "_sluice_load_id", batch.IDColumn), []string{"1", "2"}; !slices.Equal(got, want) {
				t.Fatalf("rows %q, want %q", got, want)
			}
			if got, want := joined(t, s, "raw", "raw__items", "id"), []string{"1[0]: a,2", "1[1]: b,1"}; !slices.Equal(got, want) {
				t.Fatalf("items %q, want %q", got, want)
			}
			if got, want := joined(t, s, "raw", "raw__tags", "id"), []string{"1[0]: x"}; !slices.Equal(got, want) {
				t.Fatalf("tags %q, want %q", got, want)
			}
			bad := s.rows(batch.DeadLettersTable, "at", "payload", "pipeline", "target", "flow", batch.LoadIDColumn)
			if want := []string{`in/a.parquet,3,invalid_utf8,field "items[0].sku": "caf\xe9" is not valid UTF-8 (declare the column bytes to keep any bytes)`}; !slices.Equal(bad, want) {
				t.Fatalf("dead letters %q, want %q", bad, want)
			}
			// A later file whose items have a new field: the next start
			// adds the column to the child table.
			writeParquet(t, filepath.Join(s.dir, "in", "b.parquet"), []order2{{ID: 4, Items: []giftItem{{"c", 1, true}}}})
			s.update()
			if got, want := joined(t, s, "raw", "raw__items", "id"), []string{"1[0]: a,2,∞", "1[1]: b,1,∞", "4[0]: c,1,true"}; !slices.Equal(got, want) {
				t.Fatalf("items after a new field %q, want %q", got, want)
			}
			if st := s.status("bf"); fmt.Sprint(st.ChildTables) != "[{raw__items raw} {raw__tags raw}]" {
				t.Fatalf("status lists the child tables %v", st.ChildTables)
			}
		})
		t.Run("names-that-collide", func(t *testing.T) {
			s := newStepper(t, broker.Addr(), dest(t), rawFromFiles)
			writeParquet(t, filepath.Join(s.dir, "in", "a.parquet"), []clashRow{{"a", "b"}})
			if err := s.tryUpdateWith(flows.Options{}); err == nil || !strings.Contains(err.Error(), `"userName" and "user_name" both become user_name`) {
				t.Fatalf("update: %v, want the collision named", err)
			}
		})
		t.Run("snapshots", func(t *testing.T) {
			s := newStepper(t, broker.Addr(), dest(t), `tables:
  - name: t
flows:
  - name: s
    target: t
    kind: auto_cdc_from_snapshot
    source: {snapshots: {path: "snaps/{version}/*.parquet"}}
    keys: [id]
    stored_as_scd_type: 2
`)
			snapshotAt(t, s.dir, "1", []rawRow{{1, "a"}, {2, "b"}})
			snapshotAt(t, s.dir, "2", []rawRow{{1, "a"}, {2, "c"}})
			s.update()
			want := []string{"1,a,1,∞", "2,b,1,2", "2,c,2,∞"}
			if got := s.rows("t"); !slices.Equal(got, want) {
				t.Fatalf("rows %q, want %q", got, want)
			}
		})
		t.Run("scd2-migration", func(t *testing.T) {
			s := newStepper(t, broker.Addr(), dest(t), `tables:
  - name: t
flows:
  - name: h
    target: t
    kind: auto_cdc
    once: true
    source: {files: {path: "history/*.parquet"}}
    keys: [id]
    sequence_by: seq
    stored_as_scd_type: 2
`)
			writeParquet(t, filepath.Join(s.dir, "history", "a.parquet"), []historyRow{{1, "a", 1}, {2, "b", 1}, {1, "a2", 5}})
			s.update()
			want := []string{"1,a,1,1,5", "1,a2,5,5,∞", "2,b,1,1,∞"}
			if got := s.rows("t"); !slices.Equal(got, want) {
				t.Fatalf("rows %q, want %q", got, want)
			}
		})
	})
}

// tryScan scans a table and returns the error.
func (s *stepper) tryScan(table string) error {
	s.t.Helper()
	ctx := s.t.Context()
	sink, err := destination.Open(ctx, s.p, nil)
	if err != nil {
		return err
	}
	defer sink.Close()
	_, err = sink.Scan(ctx, table)
	return err
}

// TestInvalidUTF8IsADeadLetter checks that a string that is not UTF-8, in a
// Kafka message or a Parquet file, goes to the dead letters with reason
// invalid_utf8 instead of being stored as is, and that a bytes column keeps
// the same bytes.
func TestInvalidUTF8IsADeadLetter(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		topic := "utf8_" + dname
		s := newStepper(t, broker.Addr(), dest(t), `tables:
  - name: raw
    columns:
      - {name: id, type: int64}
      - {name: name, type: string}
  - name: blobs
    columns:
      - {name: id, type: int64}
      - {name: name, type: bytes}
flows:
  - name: live
    target: raw
    kind: append
    source: {kafka: {topic: `+topic+`, format: json}}
  - name: bf
    target: raw
    kind: append
    source: {files: {path: "in/*.parquet"}}
  - name: keep
    target: blobs
    kind: append
    source: {files: {path: "blobs/*.jsonl"}}
`)
		s.produce(topic, `{"id":1,"name":"cafe"}`, "{\"id\":2,\"name\":\"caf\xe9\"}", `{"id":3,"name":"café"}`)
		writeParquet(t, filepath.Join(s.dir, "in", "a.parquet"), []rawRow{{10, "ok"}, {11, "caf\xe9"}})
		if err := os.MkdirAll(filepath.Join(s.dir, "blobs"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(s.dir, "blobs", "b.jsonl"), []byte(`{"id":1,"name":"Y2Fm6Q=="}`+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		s.update()
		if got, want := s.rows("raw", "_sluice_load_id"), []string{"1,cafe", "3,café", "10,ok"}; !slices.Equal(got, want) {
			t.Fatalf("rows %q, want %q", got, want)
		}
		if got, want := s.rows("blobs", "_sluice_load_id"), []string{"1,[99 97 102 233]"}; !slices.Equal(got, want) {
			t.Fatalf("blobs %q, want %q", got, want)
		}
		var bad []string
		for _, d := range s.rows(batch.DeadLettersTable, "at", "payload", "pipeline", "target") {
			if strings.Contains(d, batch.ReasonInvalidUTF8) {
				bad = append(bad, d)
			}
		}
		if len(bad) != 2 || !strings.Contains(bad[0]+bad[1], `caf\xe9`) {
			t.Fatalf("dead letters %q, want the two invalid names as %s", bad, batch.ReasonInvalidUTF8)
		}
	})
}

// TestTimestampUnit checks that epoch seconds declared unit: s are read as
// seconds, in a Kafka message and in a JSON lines file.
func TestTimestampUnit(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		topic := "unit_" + dname
		s := newStepper(t, broker.Addr(), dest(t), `tables:
  - name: ev
    columns:
      - {name: id, type: int64}
      - {name: at, type: timestamp, unit: s}
flows:
  - name: live
    target: ev
    kind: append
    source: {kafka: {topic: `+topic+`, format: json}}
  - name: bf
    target: ev
    kind: append
    source: {files: {path: "in/*.jsonl"}}
`)
		s.produce(topic, `{"id":1,"at":1700000000}`, `{"id":2,"at":"2024-01-02T03:04:05Z"}`)
		if err := os.MkdirAll(filepath.Join(s.dir, "in"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(s.dir, "in", "a.jsonl"), []byte(`{"id":3,"at":86400}`+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		s.update()
		want := []string{"1,2023-11-14T22:13:20Z", "2,2024-01-02T03:04:05Z", "3,1970-01-02T00:00:00Z"}
		if got := s.rows("ev", "_sluice_load_id"); !slices.Equal(got, want) {
			t.Fatalf("rows %q, want %q", got, want)
		}
	})
}

// TestChangedSequenceTypeRefused checks that an existing CDC target whose
// flow's sequence_by changed type is refused at start, naming the table,
// old and new and the remedy, instead of comparing new sequences with
// stored ones of another type; and that the remedy, a refresh of the flow,
// works.
func TestChangedSequenceTypeRefused(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		topic := "seqtype_" + dname
		d := dest(t)
		flowOf := func(seqType string) string {
			return `tables:
  - name: t
flows:
  - name: c
    target: t
    kind: auto_cdc
    source:
      kafka:
        topic: ` + topic + `
        format: json
        columns:
          - {name: id, type: int64}
          - {name: name, type: string}
          - {name: seq, type: ` + seqType + `}
    keys: [id]
    sequence_by: seq
    except_column_list: [seq]
`
		}
		s := newStepper(t, broker.Addr(), d, flowOf("int64"))
		s.produce(topic, `{"id":1,"name":"a","seq":5}`)
		s.update()
		s2 := newStepper(t, broker.Addr(), d, flowOf("string"))
		s2.produce(topic, `{"id":1,"name":"b","seq":"9"}`)
		err := s2.tryUpdateWith(flows.Options{})
		if err == nil || !strings.Contains(err.Error(), "table t") || !strings.Contains(err.Error(), "int64") ||
			!strings.Contains(err.Error(), "string") || !strings.Contains(err.Error(), "sluice update --refresh c") {
			t.Fatalf("update after the sequence type changed: %v, want a refusal naming table t, int64, string and the remedy", err)
		}
		if got, want := s2.rows("t"), []string{"1,a"}; !slices.Equal(got, want) {
			t.Fatalf("rows after the refusal %q, want %q", got, want)
		}
		// The remedy: the flow replays from the start under the new type.
		// The first message's seq is a JSON number, not a string: a dead
		// letter now.
		s2.updateWith(flows.Options{Refresh: []string{"c"}})
		if got, want := s2.rows("t"), []string{"1,b"}; !slices.Equal(got, want) {
			t.Fatalf("rows after the refresh %q, want %q", got, want)
		}
		s2.update()
	})
}

// TestSubSecondSCD2Versions checks that SCD type 2 versions a fraction of a
// second apart keep their instants in both destinations (on a ClickHouse
// server without DateTime64 too): no version's __START_AT equals its
// __END_AT.
func TestSubSecondSCD2Versions(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		topic := "subsec_" + dname
		s := newStepper(t, broker.Addr(), dest(t), `tables:
  - name: t
flows:
  - name: c
    target: t
    kind: auto_cdc
    source:
      kafka:
        topic: `+topic+`
        format: json
        columns:
          - {name: id, type: int64}
          - {name: name, type: string}
          - {name: at, type: timestamp}
    keys: [id]
    sequence_by: at
    stored_as_scd_type: 2
`)
		s.produce(topic,
			`{"id":1,"name":"a","at":"2024-05-01T10:00:00.1Z"}`,
			`{"id":1,"name":"b","at":"2024-05-01T10:00:00.6Z"}`,
			`{"id":1,"name":"c","at":"2024-05-01T10:00:00.9Z"}`)
		s.update()
		want := []string{
			"1,a,2024-05-01T10:00:00.1Z,2024-05-01T10:00:00.1Z,2024-05-01T10:00:00.6Z",
			"1,b,2024-05-01T10:00:00.6Z,2024-05-01T10:00:00.6Z,2024-05-01T10:00:00.9Z",
			"1,c,2024-05-01T10:00:00.9Z,2024-05-01T10:00:00.9Z,∞",
		}
		if got := s.rows("t"); !slices.Equal(got, want) {
			t.Fatalf("rows %q, want %q", got, want)
		}
	})
}

// TestRulesEndToEnd checks computed columns, where and expectations of each
// kind on an append flow and a CDC flow, their counts in status and
// _sluice_expectations, and that a refresh leaves each count once.
func TestRulesEndToEnd(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		topic, ctopic := "rules_"+dname, "rules_cdc_"+dname
		d := dest(t)
		body := `tables:
  - name: orders
  - name: customers
flows:
  - name: o
    target: orders
    kind: append
    source:
      kafka:
        topic: ` + topic + `
        format: json
        columns:
          - {name: id, type: int64}
          - {name: amount, type: float64, nullable: true}
          - {name: country, type: string}
    computed_columns:
      - {name: cents, type: int64, nullable: true, expr: "amount * 100"}
    where: 'country != "XX"'
    expectations:
      - {name: positive, expr: "amount > 0", on_violation: drop}
      - {name: small, expr: "cents < 100000"}
  - name: c
    target: customers
    kind: auto_cdc
    source:
      kafka:
        topic: ` + ctopic + `
        format: json
        columns:
          - {name: id, type: int64}
          - {name: email, type: string, nullable: true}
          - {name: seq, type: int64}
          - {name: op, type: string, nullable: true}
    keys: [id]
    sequence_by: seq
    apply_as_deletes: 'op == "d"'
    except_column_list: [op]
    expectations:
      - {name: has_at, expr: 'email != nil && email contains "@"', on_violation: drop}
`
		s := newStepper(t, broker.Addr(), d, body)
		s.produce(topic,
			`{"id":1,"amount":12.5,"country":"NL"}`,
			`{"id":2,"amount":-3,"country":"NL"}`,
			`{"id":3,"amount":2000,"country":"NL"}`,
			`{"id":4,"amount":1,"country":"XX"}`,
			`{"id":5,"amount":0.001,"country":"NL"}`)
		s.produce(ctopic, `{"id":1,"email":"a@x","seq":1}`, `{"id":1,"email":"nope","seq":2}`,
			`{"id":2,"email":"b@x","seq":1}`, `{"id":2,"seq":3,"op":"d"}`) // a delete without an email deletes
		s.update()
		if got, want := s.rows("orders", "_sluice_load_id"), []string{"1,12.5,NL,1250", "3,2000,NL,200000"}; !slices.Equal(got, want) {
			t.Fatalf("orders %q, want %q", got, want)
		}
		if got, want := s.rows("customers"), []string{"1,a@x,1"}; !slices.Equal(got, want) {
			t.Fatalf("customers %q, want %q", got, want)
		}
		reasons := map[string]int{}
		for _, row := range s.rows(batch.DeadLettersTable, "at", "payload", "pipeline", "target") {
			for _, r := range []string{"expectation", "expression_error"} {
				if strings.Contains(row, ","+r+",") {
					reasons[r]++
				}
			}
		}
		if reasons["expectation"] != 2 || reasons["expression_error"] != 1 {
			t.Fatalf("dead letters by reason %v, want 2 expectation (o, c) and 1 expression_error", reasons)
		}
		check := func(when string) {
			t.Helper()
			got := map[string]int64{}
			for _, f := range []string{"o", "c"} {
				for _, e := range s.status(f).Expectations {
					got[f+"/"+e.Expectation+"/"+e.Action] = e.Rows
				}
			}
			want := map[string]int64{"o/positive/drop": 1, "o/small/warn": 1, "o//filtered": 1, "c/has_at/drop": 1}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("%s: expectation counts %v, want %v", when, got, want)
			}
		}
		check("after the update")
		s.updateWith(flows.Options{FullRefresh: true})
		check("after a full refresh")

		// A fail expectation stops the flow with nothing of the batch.
		s2 := newStepper(t, broker.Addr(), d, strings.Replace(body, "on_violation: drop}\n      - {name: small", "on_violation: fail}\n      - {name: small", 1))
		s2.produce(topic, `{"id":6,"amount":-1,"country":"NL"}`)
		if err := s2.tryUpdateWith(flows.Options{}); err == nil || !strings.Contains(err.Error(), "expectation positive violated") {
			t.Fatalf("update with a fail expectation violated: %v", err)
		}
	})
}

// readLocalTable reads every Parquet file of a local table's current
// version with parquet-go, by column name, as id,name,score.
func readLocalTable(t *testing.T, dir string) []string {
	t.Helper()
	type row struct {
		ID    int64  `parquet:"id"`
		Name  string `parquet:"name"`
		Score *int64 `parquet:"score,optional"`
	}
	return readLocalFiles(t, dir, func(r row) string {
		score := "<nil>"
		if r.Score != nil {
			score = fmt.Sprint(*r.Score)
		}
		return fmt.Sprintf("%d,%s,%s", r.ID, r.Name, score)
	})
}

// readLocalFiles reads with parquet-go every Parquet file of a local
// table's current version (dir, its symlink) into rows of type T, and
// returns them rendered by format, sorted.
func readLocalFiles[T any](t *testing.T, dir string, format func(T) string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir+"/", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".parquet") {
			return err
		}
		rows, err := parquet.ReadFile[T](path)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		for _, r := range rows {
			out = append(out, format(r))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// TestRefreshRecreatesAChangedTable checks that a target whose stored
// definition the spec changed (a column's type on an append table, the SCD
// type of a CDC target) is refused at start naming the refresh that
// recreates it, and that the refresh does.
func TestRefreshRecreatesAChangedTable(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		topic, ctopic := "recreate_"+dname, "recreate_cdc_"+dname
		d := dest(t)
		specOf := func(amount string, scd int) string {
			return fmt.Sprintf(`tables:
  - name: orders
    columns:
      - {name: id, type: int64}
      - {name: amount, type: %s}
  - name: customers
flows:
  - name: o
    target: orders
    kind: append
    source: {kafka: {topic: %s, format: json}}
  - name: c
    target: customers
    kind: auto_cdc
    source:
      kafka:
        topic: %s
        format: json
        columns:
          - {name: id, type: int64}
          - {name: name, type: string}
          - {name: seq, type: int64}
    keys: [id]
    sequence_by: seq
    except_column_list: [seq]
    stored_as_scd_type: %d
`, amount, topic, ctopic, scd)
		}
		s := newStepper(t, broker.Addr(), d, specOf("int64", 1))
		s.produce(topic, `{"id":1,"amount":5}`)
		s.produce(ctopic, `{"id":1,"name":"a","seq":1}`, `{"id":1,"name":"b","seq":2}`)
		s.update()

		s2 := newStepper(t, broker.Addr(), d, specOf(`"decimal(10,2)"`, 2))
		err := s2.tryUpdateWith(flows.Options{})
		if err == nil || !strings.Contains(err.Error(), "sluice update --refresh o") || !strings.Contains(err.Error(), "sluice update --refresh c") {
			t.Fatalf("update after the definitions changed: %v, want refusals naming --refresh o and --refresh c", err)
		}
		s2.updateWith(flows.Options{FullRefresh: true})
		if got, want := s2.rows("orders", "_sluice_load_id"), []string{"1,5.00"}; !slices.Equal(got, want) {
			t.Fatalf("orders after the refresh %q, want %q", got, want)
		}
		if got, want := s2.rows("customers"), []string{"1,a,1,2", "1,b,2,∞"}; !slices.Equal(got, want) {
			t.Fatalf("customers after the refresh %q, want %q", got, want)
		}
		s2.produce(ctopic, `{"id":1,"name":"c","seq":3}`)
		s2.update()
		if got, want := s2.rows("customers"), []string{"1,a,1,2", "1,b,2,3", "1,c,3,∞"}; !slices.Equal(got, want) {
			t.Fatalf("customers after one more change %q, want %q", got, want)
		}
	})
}

// TestRefreshRecreatesAnOlderDateTimeTable checks, on ClickHouse, that a
// target an older sluice created with a DateTime column refuses a fraction
// of a second, naming the refresh, and that the refresh creates it anew
// with exact timestamps.
func TestRefreshRecreatesAnOlderDateTimeTable(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		if dname != "clickhouse" {
			return
		}
		topic := "olddt_" + dname
		s := newStepper(t, broker.Addr(), dest(t), `tables:
  - name: ev
    columns:
      - {name: id, type: int64}
      - {name: at, type: timestamp}
flows:
  - name: e
    target: ev
    kind: append
    source: {kafka: {topic: `+topic+`, format: json}}
`)
		sink, err := destination.Open(t.Context(), s.p, nil)
		if err != nil {
			t.Fatal(err)
		}
		conn, db := sink.(*clickhouse.Sink).Conn()
		for _, q := range []string{"CREATE DATABASE IF NOT EXISTS " + db,
			"CREATE TABLE " + db + ".ev (id Int64, at DateTime('UTC'), _sluice_load_id String) ENGINE = MergeTree ORDER BY tuple()"} {
			if err := conn.Exec(t.Context(), q); err != nil {
				t.Fatal(err)
			}
		}
		sink.Close()
		s.produce(topic, `{"id":1,"at":"2024-05-01T10:00:00.25Z"}`)
		if err := s.tryUpdateWith(flows.Options{}); err == nil || !strings.Contains(err.Error(), "a refresh of the table's flows creates it anew") {
			t.Fatalf("a fraction into the older DateTime column: %v, want a refusal naming the refresh", err)
		}
		s.updateWith(flows.Options{Refresh: []string{"e"}})
		if got, want := s.rows("ev", "_sluice_load_id"), []string{"1,2024-05-01T10:00:00.25Z"}; !slices.Equal(got, want) {
			t.Fatalf("rows after the refresh %q, want %q", got, want)
		}
	})
}

// TestFilesEvolveInOneRun checks that a `run` process adds to a table
// typed by its files the columns of files that arrive while it runs,
// before it reads them: a Parquet file with a new column, JSONL lines with
// a new field.
func TestFilesEvolveInOneRun(t *testing.T) {
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		s := newStepper(t, "127.0.0.1:1", dest(t), `tables:
  - name: raw
  - name: lines
flows:
  - name: bf
    target: raw
    kind: append
    source: {files: {path: "in/*.parquet"}}
  - name: jl
    target: lines
    kind: append
    source: {files: {path: "jl/*.jsonl"}}
`)
		writeParquet(t, filepath.Join(s.dir, "in", "a.parquet"), []rawRow{{1, "a"}})
		if err := os.MkdirAll(filepath.Join(s.dir, "jl"), 0o755); err != nil {
			t.Fatal(err)
		}
		writeText(t, filepath.Join(s.dir, "jl", "a.jsonl"), `{"id": 1}`+"\n")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		sink, err := destination.Open(ctx, s.p, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer sink.Close()
		done := make(chan error, 1)
		go func() {
			done <- flows.Execute(ctx, s.p, sink, flows.Options{Mode: flows.ModeRun, PollFiles: 50 * time.Millisecond,
				HeartbeatEvery: 200 * time.Millisecond, HeartbeatTTL: time.Second})
		}()
		waitRows := func(table string, want []string) {
			t.Helper()
			deadline := time.Now().Add(30 * time.Second)
			for {
				var got []string
				if b, err := sink.Scan(ctx, table); err == nil {
					got = rowStrings(b.Select(slices.DeleteFunc(b.Schema.Names(), func(n string) bool { return n == batch.LoadIDColumn })...))
				}
				if slices.Equal(got, want) {
					return
				}
				select {
				case err := <-done:
					t.Fatalf("run ended: %v; %s holds %q, want %q", err, table, got, want)
				default:
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: %q, want %q", table, got, want)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		waitRows("raw", []string{"1,a"})
		waitRows("lines", []string{"1"})
		score := int64(9)
		// Written aside and renamed: a poll never sees a part of a file.
		writeParquet(t, filepath.Join(s.dir, "b.parquet"), []wideRow{{ID: 2, Name: "b", Score: &score}})
		if err := os.Rename(filepath.Join(s.dir, "b.parquet"), filepath.Join(s.dir, "in", "b.parquet")); err != nil {
			t.Fatal(err)
		}
		writeText(t, filepath.Join(s.dir, "jl", "b.jsonl"), `{"id": 2, "note": "x"}`+"\n")
		waitRows("raw", []string{"1,a,∞,∞", "2,b,9,∞"})
		waitRows("lines", []string{"1,∞", "2,x"})
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("run: %v", err)
		}
	})
}

// writeText writes a file whole, atomically: a poll never sees a part.
func writeText(t *testing.T, path, text string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
