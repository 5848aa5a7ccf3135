package flows_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/sluicehq/sluice/consumer/devkafka"
	"github.com/sluicehq/sluice/flows"
	"github.com/sluicehq/sluice/sinks/destination"
)

// startRegistry starts the in-memory schema registry for the test.
func startRegistry(t *testing.T) *devkafka.Registry {
	t.Helper()
	reg, err := devkafka.StartRegistry("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	return reg
}

// registerAvro registers an Avro schema and returns its id and parsed
// form.
func registerAvro(t *testing.T, reg *devkafka.Registry, subject, schema string) (int, avro.Schema) {
	t.Helper()
	id, err := reg.Register(subject, sr.Schema{Schema: schema, Type: sr.TypeAvro})
	if err != nil {
		t.Fatalf("register %s: %v", subject, err)
	}
	s, err := avro.ParseWithCache(schema, "", &avro.SchemaCache{})
	if err != nil {
		t.Fatal(err)
	}
	return id, s
}

// framed encodes v with the real Avro library in the registry's wire
// format: a 0 byte, the schema id, the Avro binary.
func framed(t *testing.T, id int, s avro.Schema, v any) []byte {
	t.Helper()
	b, err := avro.Marshal(s, v)
	if err != nil {
		t.Fatalf("avro: %v", err)
	}
	return append(header(id), b...)
}

func header(id int) []byte {
	return binary.BigEndian.AppendUint32([]byte{0}, uint32(id))
}

const ordersV1 = `{"type":"record","name":"Order","namespace":"shop","fields":[
 {"name":"id","type":"long"},
 {"name":"customer","type":"string"},
 {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
 {"name":"day","type":{"type":"int","logicalType":"date"}},
 {"name":"at","type":{"type":"long","logicalType":"timestamp-micros"}},
 {"name":"ref","type":{"type":"string","logicalType":"uuid"}},
 {"name":"status","type":{"type":"enum","name":"Status","symbols":["NEW","PAID"]}},
 {"name":"ship","type":{"type":"record","name":"Ship","fields":[{"name":"city","type":"string"}]}},
 {"name":"seq","type":"long"}]}`

// ordersV2 adds a nullable field: the second version of the subject.
var ordersV2 = strings.Replace(ordersV1, `{"name":"seq","type":"long"}]}`, `{"name":"seq","type":"long"},
 {"name":"note","type":["null","string"],"default":null}]}`, 1)

func order(id int64, customer string, cents int64, seq int64, note ...string) map[string]any {
	m := map[string]any{
		"id": id, "customer": customer, "amount": big.NewRat(cents, 100),
		"day": time.Date(2026, 3, int(id), 0, 0, 0, 0, time.UTC), "at": time.Date(2026, 3, 1, 12, 0, 0, int(seq)*1000, time.UTC),
		"ref": "0f8fad5b-d9cb-469f-a165-70867728950e", "status": "PAID", "ship": map[string]any{"city": "Oslo"}, "seq": seq,
	}
	if len(note) > 0 {
		m["note"] = note[0]
	}
	return m
}

// TestAvroFlows loads Avro messages of a schema registry into a table typed
// by its messages (the writer schemas type its columns, and a new version
// of the schema adds one), and into SCD1 and SCD2 targets; a message whose
// schema id the registry lacks is a dead letter and the flows go on.
func TestAvroFlows(t *testing.T) {
	broker := startBroker(t)
	reg := startRegistry(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		topic := "avro_orders_" + dname
		// Registered only later: an id per subtest, which share the registry.
		late := 9000 + slices.Index([]string{"clickhouse", "cluster", "local", "sharded"}, dname)
		v1, s1 := registerAvro(t, reg, topic+"-value", ordersV1)
		v2, s2 := registerAvro(t, reg, topic+"-value", ordersV2)
		if v1 == v2 {
			t.Fatalf("both versions have schema id %d", v1)
		}
		source := `
        topic: ` + topic + `
        format: avro
        schema_registry: {url: "` + reg.URL() + `"}`
		declared := source + `
        columns:
          - {name: id, type: int64}
          - {name: customer, type: string}
          - {name: amount, type: "decimal(10,2)"}
          - {name: day, type: date}
          - {name: note, type: string, nullable: true}
          - {name: seq, type: int64}`
		s := newStepper(t, broker.Addr(), dest(t), `tables:
  - name: events
  - name: latest
  - name: history
flows:
  - name: events
    target: events
    kind: append
    source:
      kafka:`+source+`
  - name: latest
    target: latest
    kind: auto_cdc
    keys: [id]
    sequence_by: seq
    source:
      kafka:`+declared+`
  - name: history
    target: history
    kind: auto_cdc
    stored_as_scd_type: 2
    keys: [id]
    sequence_by: seq
    source:
      kafka:`+declared+`
`)
		s.produceKeyed(topic,
			nil, framed(t, v1, s1, order(1, "ann", 1250, 1)),
			nil, framed(t, v1, s1, order(2, "bob", 99, 2)),
			nil, framed(t, late, s1, order(4, "dee", 700, 5)), // no schema of that id yet
		)
		s.update()
		if got, want := columnsOf(t, s, "events"), []string{"id int64 nullable", "customer string nullable", "amount decimal(10,2) nullable", "day date nullable",
			"at timestamp nullable", "ref string nullable", "status string nullable", "ship__city string nullable", "seq int64 nullable"}; !hasPrefixColumns(got, want) {
			t.Errorf("events columns %q, want %q first", got, want)
		}
		// The new version of the schema adds its field, mid-stream.
		s.produceKeyed(topic,
			nil, framed(t, v2, s2, order(1, "ann", 1300, 3, "gift")),
			nil, framed(t, v2, s2, order(3, "cy", 5, 4)),
		)
		s.update()
		if got := columnsOf(t, s, "events"); !slices.Contains(got, "note string nullable") {
			t.Errorf("events columns %q lack note, the field version 2 adds", got)
		}
		if got, want := s.rows("events", dropMeta("events", s)...), []string{
			"1,ann,12.50,2026-03-01,2026-03-01T12:00:00.000001Z,0f8fad5b-d9cb-469f-a165-70867728950e,PAID,Oslo,1,∞",
			"1,ann,13.00,2026-03-01,2026-03-01T12:00:00.000003Z,0f8fad5b-d9cb-469f-a165-70867728950e,PAID,Oslo,3,gift",
			"2,bob,0.99,2026-03-02,2026-03-01T12:00:00.000002Z,0f8fad5b-d9cb-469f-a165-70867728950e,PAID,Oslo,2,∞",
			"3,cy,0.05,2026-03-03,2026-03-01T12:00:00.000004Z,0f8fad5b-d9cb-469f-a165-70867728950e,PAID,Oslo,4,∞",
		}; !slices.Equal(got, want) {
			t.Errorf("events\n got %q\nwant %q", got, want)
		}
		if got, want := s.rows("latest"), []string{"1,ann,13.00,2026-03-01,gift,3", "2,bob,0.99,2026-03-02,∞,2", "3,cy,0.05,2026-03-03,∞,4"}; !slices.Equal(got, want) {
			t.Errorf("latest\n got %q\nwant %q", got, want)
		}
		if got, want := s.rows("history"), []string{"1,ann,12.50,2026-03-01,∞,1,1,3", "1,ann,13.00,2026-03-01,gift,3,3,∞",
			"2,bob,0.99,2026-03-02,∞,2,2,∞", "3,cy,0.05,2026-03-03,∞,4,4,∞"}; !slices.Equal(got, want) {
			t.Errorf("history\n got %q\nwant %q", got, want)
		}
		for _, f := range []string{"events", "latest", "history"} {
			dls := s.deadLetters(f)
			if len(dls) != 1 || !strings.HasPrefix(dls[0], "unknown_schema 0/2 ") || !strings.Contains(dls[0], fmt.Sprintf("schema id %d", late)) {
				t.Errorf("flow %s: dead letters %q, want the message of schema id %d as unknown_schema at 0/2", f, dls, late)
			}
		}

		// Once the registry has the schema, a replay loads the message, at
		// its position, once.
		reg.Seed(topic+"-late-value", 1, late, sr.Schema{Schema: ordersV1, Type: sr.TypeAvro})
		for want := 3; want >= 0; want -= 3 {
			sink, err := destination.Open(t.Context(), s.p, nil)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := flows.ReplayDeadLetters(t.Context(), s.p, sink, flows.Options{}, flows.DeadLetterFilter{Reason: "unknown_schema"})
			sink.Close()
			if err != nil || rep.Replayed != want {
				t.Fatalf("replay: %+v, %v; want %d replayed", rep, err, want)
			}
		}
		if got := s.rows("latest"); len(got) != 4 || got[3] != "4,dee,7.00,2026-03-04,∞,5" {
			t.Errorf("latest after the replay: %q", got)
		}
		if got := s.rows("events", dropMeta("events", s)...); len(got) != 5 {
			t.Errorf("events after the replay: %q", got)
		}
	})
}

// hasPrefixColumns reports whether got starts with want.
func hasPrefixColumns(got, want []string) bool {
	return len(got) >= len(want) && slices.Equal(got[:len(want)], want)
}

// dropMeta lists the _sluice_ columns of a table, to leave out of rows.
func dropMeta(table string, s *stepper) []string {
	var out []string
	for _, c := range columnsOf(s.t, s, table) {
		if name, _, _ := strings.Cut(c, " "); strings.HasPrefix(name, "_sluice_") {
			out = append(out, name)
		}
	}
	return append(out, "_sluice_load_id", "_sluice_id")
}

// deadLetters lists a flow's dead letters as "reason position error",
// sorted.
func (s *stepper) deadLetters(flow string) []string {
	s.t.Helper()
	ctx := context.Background()
	sink, err := destination.Open(ctx, s.p, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	defer sink.Close()
	b, err := sink.Scan(ctx, "_sluice_dead_letters")
	if err != nil {
		s.t.Fatal(err)
	}
	var out []string
	for i := range b.Len() {
		if b.Column("flow").Value(i) != flow {
			continue
		}
		out = append(out, strings.Join([]string{b.Column("reason").Value(i).(string), b.Column("position").Value(i).(string), b.Column("error").Value(i).(string)}, " "))
	}
	slices.Sort(out)
	return out
}

const dbzValue = `{"type":"record","name":"Envelope","namespace":"pg.public.customers","fields":[
 {"name":"before","type":["null",{"type":"record","name":"Value","fields":[
   {"name":"id","type":"long"},
   {"name":"name","type":["null","string"],"default":null},
   {"name":"born","type":["null",{"type":"int","connect.version":1,"connect.name":"io.debezium.time.Date"}],"default":null},
   {"name":"balance","type":["null",{"type":"bytes","scale":2,"precision":12,"connect.name":"org.apache.kafka.connect.data.Decimal","logicalType":"decimal"}],"default":null},
   {"name":"seen","type":["null",{"type":"long","connect.version":1,"connect.name":"io.debezium.time.MicroTimestamp"}],"default":null}]}],"default":null},
 {"name":"after","type":["null","Value"],"default":null},
 {"name":"source","type":{"type":"record","name":"Source","namespace":"io.debezium.connector.postgresql","fields":[
   {"name":"lsn","type":["null","long"],"default":null}]}},
 {"name":"op","type":"string"},
 {"name":"ts_ms","type":["null","long"],"default":null}]}`

const dbzKey = `{"type":"record","name":"Key","namespace":"pg.public.customers","fields":[{"name":"id","type":"long"}]}`

// TestDebeziumAvro reads Debezium change events written by the Avro
// converter: Avro keys and envelopes, Debezium's time and decimal types,
// and a tombstone whose Avro key names the key it deletes.
func TestDebeziumAvro(t *testing.T) {
	broker := startBroker(t)
	reg := startRegistry(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		topic := "pg_customers_" + dname
		vid, vs := registerAvro(t, reg, topic+"-value", dbzValue)
		kid, ks := registerAvro(t, reg, topic+"-key", dbzKey)
		row := func(id int64, name string, cents int64) map[string]any {
			return map[string]any{"id": id, "name": name, "born": int(id) * 365, "balance": big.NewRat(cents, 100), "seen": int64(1_700_000_000_000_001) + id}
		}
		change := func(op string, id int64, name string, lsn int64) []byte {
			env := map[string]any{"before": nil, "after": map[string]any{"pg.public.customers.Value": row(id, name, id*1000+7)}, "source": map[string]any{"lsn": lsn}, "op": op, "ts_ms": int64(5)}
			return framed(t, vid, vs, env)
		}
		key := func(id int64) []byte { return framed(t, kid, ks, map[string]any{"id": id}) }
		body := `tables:
  - name: customers
  - name: customers_history
flows:
`
		for _, f := range []struct{ name, target, extra string }{{"mirror", "customers", ""}, {"versions", "customers_history", "    stored_as_scd_type: 2\n"}} {
			body += `  - name: ` + f.name + `
    target: ` + f.target + `
    kind: auto_cdc
    keys: [id]
    sequence_by: _source_lsn
` + f.extra + `    source:
      kafka:
        topic: ` + topic + `
        format: debezium
        schema_registry: {url: "` + reg.URL() + `"}
        columns:
          - {name: id, type: int64}
          - {name: name, type: string, nullable: true}
          - {name: born, type: date, nullable: true}
          - {name: balance, type: "decimal(12,2)", nullable: true}
          - {name: seen, type: timestamp, nullable: true}
          - {name: _source_lsn, type: int64}
          - {name: _kafka_key, type: string}
`
		}
		s := newStepper(t, broker.Addr(), dest(t), body)
		s.produceKeyed(topic, key(1), change("c", 1, "a", 10), key(2), change("c", 2, "b", 20), key(1), change("u", 1, "a2", 30))
		s.update()
		// Compaction left only key 2's tombstone.
		s.produceKeyed(topic, key(2), nil)
		s.update()
		if got, want := s.rows("customers"), []string{`1,a2,1971-01-01,10.07,2023-11-14T22:13:20.000002Z,30,{"id":1}`}; !slices.Equal(got, want) {
			t.Errorf("customers\n got %q\nwant %q", got, want)
		}
		if got, want := s.rows("customers_history"), []string{
			`1,a,1971-01-01,10.07,2023-11-14T22:13:20.000002Z,10,{"id":1},10,30`,
			`1,a2,1971-01-01,10.07,2023-11-14T22:13:20.000002Z,30,{"id":1},30,∞`,
			`2,b,1972-01-01,20.07,2023-11-14T22:13:20.000003Z,20,{"id":2},20,20`,
		}; !slices.Equal(got, want) {
			t.Errorf("customers_history\n got %q\nwant %q", got, want)
		}
		for _, f := range []string{"mirror", "versions"} {
			if dls := s.deadLetters(f); len(dls) != 0 {
				t.Errorf("flow %s: dead letters %q", f, dls)
			}
		}
	})
}

// TestRegistryDown retries a registry that does not answer, then fails
// with an error that names it and the remedy; nothing is loaded.
func TestRegistryDown(t *testing.T) {
	broker := startBroker(t)
	reg := startRegistry(t)
	id, s1 := registerAvro(t, reg, "down-value", ordersV1)
	url := reg.URL()
	reg.Close()
	s := newStepper(t, broker.Addr(), "  local:\n    path: "+t.TempDir(), `tables:
  - name: events
flows:
  - name: events
    target: events
    kind: append
    source:
      kafka:
        topic: registry_down
        format: avro
        schema_registry: {url: "`+url+`"}
`)
	s.produceKeyed("registry_down", nil, framed(t, id, s1, order(1, "ann", 1, 1)))
	start := time.Now()
	err := s.tryUpdateWith(flows.Options{RetryFor: time.Second})
	if err == nil {
		t.Fatal("update succeeded with the registry down")
	}
	if msg := err.Error(); !strings.Contains(msg, "schema registry") || !strings.Contains(msg, url) || !strings.Contains(msg, "still failing after 1s") || !strings.Contains(msg, "schema_registry.url") {
		t.Errorf("error %q does not name the registry, the retries and the remedy", msg)
	}
	if d := time.Since(start); d < time.Second {
		t.Errorf("failed after %s: not retried for --retry-for", d)
	}
	if n := s.status("events").Rows; n != 0 {
		t.Errorf("%d rows loaded", n)
	}
}
