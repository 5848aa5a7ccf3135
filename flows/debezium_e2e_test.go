package flows_test

import (
	"fmt"
	"slices"
	"testing"
)

// TestDebeziumUnavailableValues loads PostgreSQL changes whose updates
// leave TOAST columns out (Debezium's placeholder in their place, a list of
// it for an array): each keeps its value, in SCD1 and SCD2 targets,
// whatever order the changes arrive in, and a row whose array no change
// gave yet is not written until one does; a placeholder set in the spec
// replaces the default.
func TestDebeziumUnavailableValues(t *testing.T) {
	change := func(op string, id int, doc, note string, lsn int) string {
		tags := `["t` + fmt.Sprint(lsn) + `"]`
		if doc == "__debezium_unavailable_value" {
			tags = `["__debezium_unavailable_value"]`
		}
		return fmt.Sprintf(`{"before":null,"after":{"id":%d,"doc":%q,"note":%q,"tags":%s},"source":{"connector":"postgresql","ts_ms":1,"lsn":%d},"op":%q,"ts_ms":2}`,
			id, doc, note, tags, lsn, op)
	}
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		topic, custom := "toast_"+dname, "toast_custom_"+dname
		source := func(topic, extra string) string {
			return `    source:
      kafka:
        topic: ` + topic + `
        format: debezium` + extra + `
        columns:
          - {name: id, type: int64}
          - {name: doc, type: string, nullable: true}
          - {name: note, type: string, nullable: true}
          - {name: tags, type: array(string)}
          - {name: _source_lsn, type: int64}
    keys: [id]
    sequence_by: _source_lsn
`
		}
		s := newStepper(t, broker.Addr(), dest(t), `tables:
  - name: latest
  - name: history
  - name: custom
flows:
  - name: scd1
    target: latest
    kind: auto_cdc
`+source(topic, "")+`  - name: scd2
    target: history
    kind: auto_cdc
`+source(topic, "")+`    stored_as_scd_type: 2
  - name: own
    target: custom
    kind: auto_cdc
`+source(custom, "\n        unavailable_value_placeholder: \"?toast?\"")+``)
		// Key 2's update arrives before its insert.
		s.produce(topic,
			change("c", 1, "big text", "n1", 10),
			change("u", 1, "__debezium_unavailable_value", "n2", 20),
			change("u", 2, "__debezium_unavailable_value", "m2", 40),
		)
		s.produce(custom, change("c", 1, "x", "a", 1))
		s.update()
		// Before key 2's insert arrived, its row is not known: its tags,
		// an array, are never null.
		if got, want := s.rows("latest"), []string{"1,big text,n2,[t10],20"}; !slices.Equal(got, want) {
			t.Fatalf("latest before the insert %q, want %q", got, want)
		}
		if got, want := s.rows("history"), []string{"1,big text,n1,[t10],10,10,20", "1,big text,n2,[t10],20,20,∞"}; !slices.Equal(got, want) {
			t.Fatalf("history before the insert %q, want %q", got, want)
		}
		s.produce(topic,
			change("c", 2, "other text", "m1", 30),
			change("u", 1, "__debezium_unavailable_value", "__debezium_unavailable_value", 50),
		)
		s.produce(custom, change("u", 1, "?toast?", "b", 2), change("u", 1, "__debezium_unavailable_value", "c", 3))
		s.update()
		if got, want := s.rows("latest"), []string{"1,big text,n2,[t10],50", "2,other text,m2,[t30],40"}; !slices.Equal(got, want) {
			t.Fatalf("latest %q, want %q", got, want)
		}
		want := []string{"1,big text,n1,[t10],10,10,20", "1,big text,n2,[t10],20,20,50", "1,big text,n2,[t10],50,50,∞", "2,other text,m1,[t30],30,30,40", "2,other text,m2,[t30],40,40,∞"}
		if got := s.rows("history"); !slices.Equal(got, want) {
			t.Fatalf("history %q, want %q", got, want)
		}
		if got, want := s.rows("custom"), []string{"1,__debezium_unavailable_value,c,[__debezium_unavailable_value],3"}; !slices.Equal(got, want) {
			t.Fatalf("custom %q, want %q", got, want)
		}
	})
}

// TestDebeziumMySQLSnapshotOrder is the order docs/cdc.md gives MySQL
// changes: by binlog position alone. A write committed while the initial
// snapshot ran (a later position, an earlier time than the snapshot rows
// of a table exported after it began) wins over the snapshot row of its
// key, whatever the arrival order.
func TestDebeziumMySQLSnapshotOrder(t *testing.T) {
	change := func(op string, id int, status string, ts int64, pos int) string {
		return fmt.Sprintf(`{"before":null,"after":{"order_id":%d,"status":%q},"source":{"connector":"mysql","ts_ms":%d,"file":"mysql-bin.000003","pos":%d,"snapshot":%q},"op":%q,"ts_ms":%d}`,
			id, status, ts, pos, map[bool]string{true: "true", false: "false"}[op == "r"], op, ts)
	}
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		topic := "mysql_" + dname
		s := newStepper(t, broker.Addr(), dest(t), `tables:
  - name: orders
flows:
  - name: f
    target: orders
    kind: auto_cdc
    source:
      kafka:
        topic: `+topic+`
        format: debezium
        columns:
          - {name: order_id, type: int64}
          - {name: status, type: string}
          - {name: _source_ts_ms, type: timestamp}
          - {name: _source_file, type: string}
          - {name: _source_pos, type: int64}
    keys: [order_id]
    sequence_by: [_source_file, _source_pos]
    except_column_list: [_source_file, _source_pos]
`)
		// The snapshot started at position 100; table orders was exported
		// at 2000 ms, after the write at 1500 ms (position 150) committed.
		s.produce(topic, change("u", 1, "paid", 1500, 150), change("r", 1, "placed", 2000, 100), change("r", 2, "placed", 2000, 100))
		s.update()
		if got, want := s.rows("orders"), []string{"1,paid,1970-01-01T00:00:01.5Z", "2,placed,1970-01-01T00:00:02Z"}; !slices.Equal(got, want) {
			t.Fatalf("orders %q, want %q", got, want)
		}
	})
}
