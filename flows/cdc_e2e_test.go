package flows_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/consumer"
	"github.com/sluicehq/sluice/flows"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/spec"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/destination"
)

// Acceptance cases of the change rules (docs/cdc.md), SCD type 1 and 2, end
// to end: events are produced to a Kafka-protocol broker, each batch is one
// `update` (flows.Execute in update mode), and the target is read back from
// the destination.

// Events: U(id, name, seq), D(id, seq), T(seq). A nil pointer is JSON null.
func U(id int64, name string, seq int64) string {
	return fmt.Sprintf(`{"id":%d,"name":%q,"op":"U","seq":%d}`, id, name, seq)
}
func Un(id int64, seq int64) string {
	return fmt.Sprintf(`{"id":%d,"name":null,"op":"U","seq":%d}`, id, seq)
}
func D(id int64, seq int64) string { return fmt.Sprintf(`{"id":%d,"op":"D","seq":%d}`, id, seq) }
func T(seq int64) string           { return fmt.Sprintf(`{"id":null,"op":"T","seq":%d}`, seq) }

// Message on a named topic, for cases with several flows.
type msg struct {
	topic string
	value string
}

const f1Columns = `
          - {name: id, type: int64%s}
          - {name: name, type: string, nullable: true}
          - {name: op, type: string, nullable: true}
          - {name: seq, type: int64, nullable: true}`

// flowYAML is one auto_cdc flow writing t, keyed by id and sequenced by seq,
// with op "D" a delete; columns and extra complete it.
func flowYAML(name, topic, columns, extra string) string {
	return fmt.Sprintf(`
  - name: %s
    target: t
    kind: auto_cdc
    source:
      kafka:
        topic: %s
        format: json
        columns:%s
    keys: [id]
    sequence_by: seq
    apply_as_deletes: 'op == "D"'
%s`, name, topic, columns, extra)
}

var (
	f1  = flowYAML("f", "events", fmt.Sprintf(f1Columns, ""), "    except_column_list: [op, seq]\n    stored_as_scd_type: 1\n")
	f1T = flowYAML("f", "events", fmt.Sprintf(f1Columns, ", nullable: true"), "    except_column_list: [op, seq]\n    apply_as_truncates: 'op == \"T\"'\n    stored_as_scd_type: 1\n")
	f2  = flowYAML("f", "events", fmt.Sprintf(f1Columns, ""), "    except_column_list: [op, seq]\n    stored_as_scd_type: 2\n")
)

type cdcCase struct {
	name        string
	flows       string     // the flows: YAML list items
	batches     [][]string // each batch is one update; messages to topic "events"
	multi       [][]msg    // instead of batches: messages with topics
	want        []string   // rows as comma-separated values in show order; ∞ for NULL
	deadLetters []string   // reasons expected in _sluice_dead_letters, any order
}

func cases() []cdcCase {
	b := func(ms ...string) []string { return ms }
	return []cdcCase{
		{name: "scd1/newest-per-key", flows: f1, batches: [][]string{b(U(1, "a", 1), U(2, "x", 1), U(1, "b", 2))}, want: []string{"1,b", "2,x"}},
		{name: "scd1/unsorted-batch", flows: f1, batches: [][]string{b(U(1, "b", 2), U(1, "a", 1))}, want: []string{"1,b"}},
		{name: "scd1/older-event-in-later-batch", flows: f1, batches: [][]string{b(U(1, "b", 2)), b(U(1, "a", 1))}, want: []string{"1,b"}},
		{name: "scd1/newer-delete-removes-row", flows: f1, batches: [][]string{b(U(1, "a", 1)), b(D(1, 2))}, want: nil},
		{name: "scd1/older-delete-ignored", flows: f1, batches: [][]string{b(U(1, "a", 5)), b(D(1, 3))}, want: []string{"1,a"}},
		{name: "scd1/tombstone-discards-older-upsert", flows: f1, batches: [][]string{b(U(1, "a", 1)), b(D(1, 5)), b(U(1, "c", 6)), b(U(1, "old", 4))}, want: []string{"1,c"}},
		{name: "scd1/deletes-and-reinsert-in-one-batch", flows: f1, batches: [][]string{b(U(1, "a", 1), D(1, 2), D(2, 2), U(2, "b", 3))}, want: []string{"2,b"}},
		{name: "scd1/batch-delivered-twice", flows: f1, batches: [][]string{b(U(1, "a", 1), U(1, "b", 2)), b(U(1, "a", 1), U(1, "b", 2))}, want: []string{"1,b"}},
		{name: "scd1/upsert-beats-delete-at-same-seq/upsert-then-delete", flows: f1, batches: [][]string{b(U(1, "a", 5)), b(D(1, 5))}, want: []string{"1,a"}},
		{name: "scd1/upsert-beats-delete-at-same-seq/delete-then-upsert", flows: f1, batches: [][]string{b(D(1, 5)), b(U(1, "a", 5))}, want: []string{"1,a"}},
		{name: "scd1/tie-greater-offset-wins/one-batch", flows: f1, batches: [][]string{b(U(1, "a", 5), U(1, "b", 5))}, want: []string{"1,b"}},
		{name: "scd1/tie-greater-offset-wins/two-batches", flows: f1, batches: [][]string{b(U(1, "a", 5)), b(U(1, "b", 5))}, want: []string{"1,b"}},
		{name: "scd1/null-sequence-dead-letter", flows: f1, batches: [][]string{b(U(1, "a", 1)), b(`{"id":2,"name":"b","op":"U","seq":null}`, U(1, "c", 2))},
			want: []string{"1,c"}, deadLetters: []string{"null_sequence"}},
		{name: "scd1/databricks-example", flows: databricksFlow, batches: [][]string{b(
			`{"userId":124,"name":"Raul","city":"Oaxaca","operation":"INSERT","sequenceNum":1}`,
			`{"userId":123,"name":"Isabel","city":"Monterrey","operation":"INSERT","sequenceNum":1}`,
			`{"userId":125,"name":"Mercedes","city":"Tijuana","operation":"INSERT","sequenceNum":2}`,
			`{"userId":126,"name":"Lily","city":"Cancun","operation":"INSERT","sequenceNum":2}`,
			`{"userId":123,"name":null,"city":null,"operation":"DELETE","sequenceNum":6}`,
			`{"userId":125,"name":"Mercedes","city":"Guadalajara","operation":"UPDATE","sequenceNum":6}`,
			`{"userId":125,"name":"Mercedes","city":"Mexicali","operation":"UPDATE","sequenceNum":5}`,
			`{"userId":123,"name":"Isabel","city":"Chihuahua","operation":"UPDATE","sequenceNum":5}`,
			`{"userId":null,"name":null,"city":null,"operation":"TRUNCATE","sequenceNum":3}`,
		)}, want: []string{"125,Mercedes,Guadalajara"}},
		{name: "scd1/truncate-across-batches", flows: f1T, batches: [][]string{b(U(1, "a", 1), U(2, "b", 5)), b(T(3)), b(U(1, "late", 2))}, want: []string{"2,b"}},
		{name: "scd1/ignore-null-updates", flows: cityFlow("    ignore_null_updates: true\n"), batches: [][]string{
			b(`{"id":1,"name":"a","city":"x","op":"U","seq":1}`, `{"id":2,"name":null,"city":"z","op":"U","seq":1}`),
			b(`{"id":1,"name":null,"city":"y","op":"U","seq":2}`)}, want: []string{"1,a,y", "2,∞,z"}},
		{name: "scd1/ignore-null-updates-column-list", flows: cityFlow("    ignore_null_updates_column_list: [name]\n"), batches: [][]string{
			b(`{"id":1,"name":"a","city":"x","op":"U","seq":1}`),
			b(`{"id":1,"name":null,"city":null,"op":"U","seq":2}`)}, want: []string{"1,a,∞"}},
		{name: "scd1/column-list", flows: columnListFlow, batches: [][]string{b(
			`{"id":1,"name":"a","city":"x","op":"U","seq":2}`, `{"id":1,"name":"b","city":"y","op":"U","seq":1}`)}, want: []string{"1,a"}},
		{name: "scd1/two-flows-on-one-target", flows: flowYAML("f_main", "s1", fmt.Sprintf(f1Columns, ""), "    except_column_list: [op, seq]\n") +
			flowYAML("f_fix", "s2", fmt.Sprintf(f1Columns, ""), "    except_column_list: [op, seq]\n"),
			multi: [][]msg{{{"s1", U(1, "a", 5)}, {"s1", U(2, "b", 5)}, {"s2", U(1, "fix", 3)}, {"s2", D(2, 6)}}}, want: []string{"1,a"}},

		{name: "scd2/two-versions", flows: f2, batches: [][]string{b(U(1, "a", 1), U(1, "b", 2))}, want: []string{"1,a,1,2", "1,b,2,∞"}},
		{name: "scd2/delete-closes-version", flows: f2, batches: [][]string{b(U(1, "a", 10)), b(D(1, 20))}, want: []string{"1,a,10,20"}},
		{name: "scd2/delete-and-reinsert", flows: f2, batches: [][]string{b(U(1, "a", 10), U(1, "b", 20), D(1, 30), U(1, "c", 40))},
			want: []string{"1,a,10,20", "1,b,20,30", "1,c,40,∞"}},
		{name: "scd2/late-upsert-before-history", flows: f2, batches: [][]string{b(U(1, "a", 10)), b(U(1, "b", 5))}, want: []string{"1,b,5,10", "1,a,10,∞"}},
		{name: "scd2/late-upsert-splits", flows: f2, batches: [][]string{b(U(1, "a", 10)), b(U(1, "c", 30)), b(U(1, "b", 20))},
			want: []string{"1,a,10,20", "1,b,20,30", "1,c,30,∞"}},
		{name: "scd2/equal-values-coalesce", flows: f2, batches: [][]string{b(U(1, "a", 10)), b(U(1, "a", 20)), b(U(1, "b", 30))}, want: []string{"1,a,10,30", "1,b,30,∞"}},
		{name: "scd2/equal-values-coalesce/after-second-batch", flows: f2, batches: [][]string{b(U(1, "a", 10)), b(U(1, "a", 20))}, want: []string{"1,a,10,∞"}},
		{name: "scd2/track-history-column-list", flows: trackHistoryFlow, batches: [][]string{
			b(`{"id":1,"name":"alice","score":100,"op":"U","seq":10}`, `{"id":1,"name":"alice","score":200,"op":"U","seq":20}`),
			b(`{"id":1,"name":"alice","score":300,"op":"U","seq":30}`),
			b(`{"id":1,"name":"bob","score":300,"op":"U","seq":40}`)}, want: []string{"1,alice,300,10,40", "1,bob,300,40,∞"}},
		{name: "scd2/track-history-column-list/after-second-batch", flows: trackHistoryFlow, batches: [][]string{
			b(`{"id":1,"name":"alice","score":100,"op":"U","seq":10}`, `{"id":1,"name":"alice","score":200,"op":"U","seq":20}`),
			b(`{"id":1,"name":"alice","score":300,"op":"U","seq":30}`)}, want: []string{"1,alice,300,10,∞"}},
		{name: "scd2/late-upsert-absorbed", flows: f2, batches: [][]string{b(U(1, "a", 10), U(1, "b", 30)), b(U(1, "a", 20))}, want: []string{"1,a,10,30", "1,b,30,∞"}},
		{name: "scd2/duplicates-collapse", flows: f2, batches: [][]string{b(U(1, "a", 10), U(1, "a", 10)), b(U(1, "a", 10))}, want: []string{"1,a,10,∞"}},
		{name: "scd2/delete-of-unknown-key", flows: f2, batches: [][]string{b(D(7, 5))}, want: nil},
		{name: "scd2/several-keys", flows: f2, batches: [][]string{b(U(1, "a", 10), U(2, "p", 10)), b(U(1, "b", 20), D(2, 20), U(3, "z", 20))},
			want: []string{"1,a,10,20", "1,b,20,∞", "2,p,10,20", "3,z,20,∞"}},
		{name: "scd2/timestamp-sequence", flows: timestampSeqFlow, batches: [][]string{b(
			`{"id":1,"name":"a","op":"U","seq":"2024-01-01T00:00:00Z"}`, `{"id":1,"name":"b","op":"U","seq":"2024-02-01T00:00:00Z"}`)},
			want: []string{"1,a,2024-01-01T00:00:00Z,2024-02-01T00:00:00Z", "1,b,2024-02-01T00:00:00Z,∞"}},
	}
}

var (
	databricksFlow = `
  - name: f
    target: t
    kind: auto_cdc
    source:
      kafka:
        topic: events
        format: json
        columns:
          - {name: userId, type: int64, nullable: true}
          - {name: name, type: string, nullable: true}
          - {name: city, type: string, nullable: true}
          - {name: operation, type: string, nullable: true}
          - {name: sequenceNum, type: int64, nullable: true}
    keys: [userId]
    sequence_by: sequenceNum
    apply_as_deletes: 'operation == "DELETE"'
    apply_as_truncates: 'operation == "TRUNCATE"'
    except_column_list: [operation, sequenceNum]
    stored_as_scd_type: 1
`
	cityColumns = `
          - {name: id, type: int64}
          - {name: name, type: string, nullable: true}
          - {name: city, type: string, nullable: true}
          - {name: op, type: string, nullable: true}
          - {name: seq, type: int64, nullable: true}`
	columnListFlow   = flowYAML("f", "events", cityColumns, "    column_list: [id, name]\n")
	trackHistoryFlow = flowYAML("f", "events", `
          - {name: id, type: int64}
          - {name: name, type: string, nullable: true}
          - {name: score, type: int64, nullable: true}
          - {name: op, type: string, nullable: true}
          - {name: seq, type: int64, nullable: true}`, "    except_column_list: [op, seq]\n    stored_as_scd_type: 2\n    track_history_column_list: [name]\n")
	timestampSeqFlow = flowYAML("f", "events", `
          - {name: id, type: int64}
          - {name: name, type: string, nullable: true}
          - {name: op, type: string, nullable: true}
          - {name: seq, type: timestamp, nullable: true}`, "    except_column_list: [op, seq]\n    stored_as_scd_type: 2\n")
)

func cityFlow(extra string) string {
	return flowYAML("f", "events", cityColumns, "    except_column_list: [op, seq]\n"+extra)
}

// destinations the end-to-end cases run against: the local one always,
// ClickHouse when a test server's address is set (and then required under
// CI=true), and the test clusters when withCluster says so.
func destinations(t *testing.T) map[string]func(t *testing.T) string {
	d := map[string]func(t *testing.T) string{
		"local": func(t *testing.T) string { return "  local: {path: " + t.TempDir() + "}" },
	}
	if withCluster() {
		d["cluster"] = clusterDestination
		d["sharded"] = shardedDestination
	}
	addr := os.Getenv("SLUICE_CLICKHOUSE_ADDR")
	if addr == "" && os.Getenv("CI") == "true" {
		t.Fatal("SLUICE_CLICKHOUSE_ADDR is not set: start a server with scripts/clickhouse-test-server (make test does)")
	}
	if addr != "" {
		d["clickhouse"] = func(t *testing.T) string {
			var r [6]byte
			rand.Read(r[:])
			return fmt.Sprintf("  clickhouse: {addr: [%s], database: cdc_%s}", addr, hex.EncodeToString(r[:]))
		}
	}
	return d
}

// shardedCases are the cases that also run on the cluster of two shards:
// those of several keys, removals, a truncate and two flows (the others
// show nothing more there, and each case's ON CLUSTER DDL is slow).
var shardedCases = map[string]bool{
	"scd1/deletes-and-reinsert-in-one-batch": true,
	"scd1/tombstone-discards-older-upsert":   true,
	"scd1/truncate-across-batches":           true,
	"scd1/two-flows-on-one-target":           true,
	"scd2/late-upsert-splits":                true,
	"scd2/several-keys":                      true,
}

func TestCDCAcceptanceEndToEnd(t *testing.T) {
	dests := destinations(t)
	broker := startBroker(t)
	n := 0
	for _, dname := range slices.Sorted(maps.Keys(dests)) {
		dest := dests[dname]
		for _, tc := range cases() {
			if dname == "sharded" && !shardedCases[tc.name] {
				continue
			}
			n++
			prefix := fmt.Sprintf("c%d_", n)
			t.Run(dname+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				runCase(t, broker.Addr(), prefix, dest(t), tc)
			})
		}
	}
}

func runCase(t *testing.T, addr, prefix, dest string, tc cdcCase) {
	ctx := context.Background()
	flowsYAML := strings.ReplaceAll(tc.flows, "topic: ", "topic: "+prefix)
	doc := fmt.Sprintf("pipeline: cdc\nkafka:\n  brokers: [%s]\n  session_timeout: 2s\ndestination:\n%s\ntables:\n  - name: t\nflows:%s", addr, dest, flowsYAML)
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := spec.Load(path)
	if err != nil {
		t.Fatalf("spec: %v\n%s", err, doc)
	}
	batches := tc.multi
	if batches == nil {
		for _, b := range tc.batches {
			var ms []msg
			for _, v := range b {
				ms = append(ms, msg{"events", v})
			}
			batches = append(batches, ms)
		}
	}
	topics := map[string]bool{}
	for i := range p.Flows {
		topics[p.Flows[i].Source.Kafka.Topic] = true
	}
	for topic := range topics {
		if err := consumer.CreateTopic(ctx, []string{addr}, topic, 1); err != nil {
			t.Fatal(err)
		}
	}
	for i, b := range batches {
		byTopic := map[string][]consumer.Message{}
		for _, m := range b {
			byTopic[prefix+m.topic] = append(byTopic[prefix+m.topic], consumer.Message{Value: []byte(m.value), Partition: 0})
		}
		for topic, ms := range byTopic {
			if err := consumer.Produce(ctx, []string{addr}, topic, ms); err != nil {
				t.Fatal(err)
			}
		}
		sink, err := destination.Open(ctx, p, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = flows.Execute(ctx, p, sink, flows.Options{Mode: flows.ModeUpdate, HeartbeatEvery: 200 * time.Millisecond, HeartbeatTTL: time.Second})
		sink.Close()
		if err != nil {
			t.Fatalf("batch %d: update: %v", i+1, err)
		}
	}

	sink, err := destination.Open(ctx, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	got, err := sink.Scan(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if rows := rowStrings(got); !slices.Equal(rows, tc.want) {
		t.Fatalf("target rows\n got %q\nwant %q", rows, tc.want)
	}
	eachReplica(t, doc, func(t *testing.T, sink sinks.Sink) bool {
		got, err := sink.Scan(ctx, "t")
		return err == nil && slices.Equal(rowStrings(got), tc.want)
	})
	dls, err := sink.Scan(ctx, batch.DeadLettersTable)
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	if v := dls.Column("reason"); v != nil {
		reasons = append(reasons, v.Strs...)
	}
	slices.Sort(reasons)
	if !slices.Equal(reasons, tc.deadLetters) {
		t.Fatalf("dead letters %q, want %q", reasons, tc.deadLetters)
	}
}

// rowStrings renders a target's logical rows, sorted by key then
// __START_AT (the show order), as comma-separated values with ∞ for NULL.
func rowStrings(b *batch.Batch) []string {
	var out []string
	type row struct {
		vals []any
		text string
	}
	rows := make([]row, b.Len())
	for i := range rows {
		vals := b.Row(i)
		parts := make([]string, len(vals))
		for j, v := range vals {
			switch x := v.(type) {
			case nil:
				parts[j] = "∞"
			case time.Time:
				parts[j] = x.UTC().Format(time.RFC3339Nano)
			default:
				parts[j] = fmt.Sprint(x)
			}
		}
		rows[i] = row{vals: vals, text: strings.Join(parts, ",")}
	}
	// The key is the first column in every case; then __START_AT, then
	// the rest in order.
	order := []int{0}
	if i := b.Schema.Index("__START_AT"); i >= 0 {
		order = append(order, i)
	}
	for j := 1; j < len(b.Schema.Columns); j++ {
		if !slices.Contains(order, j) {
			order = append(order, j)
		}
	}
	slices.SortFunc(rows, func(a, b row) int {
		for _, j := range order {
			if c := compareAny(a.vals[j], b.vals[j]); c != 0 {
				return c
			}
		}
		return 0
	})
	for _, r := range rows {
		out = append(out, r.text)
	}
	return out
}

func compareAny(a, b any) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return 1 // NULL (∞) last: a current version sorts after closed ones
	case b == nil:
		return -1
	}
	switch x := a.(type) {
	case int64:
		y := b.(int64)
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	case time.Time:
		return x.Compare(b.(time.Time))
	}
	return strings.Compare(fmt.Sprint(a), fmt.Sprint(b))
}

// eachDestination runs fn as a parallel subtest per destination, in name
// order; dest gives a fresh destination of that kind (its spec lines).
func eachDestination(t *testing.T, fn func(t *testing.T, dname string, dest func(*testing.T) string)) {
	runDestinations(t, destinations(t), fn)
}

func runDestinations(t *testing.T, dests map[string]func(t *testing.T) string, fn func(t *testing.T, dname string, dest func(*testing.T) string)) {
	for _, dname := range slices.Sorted(maps.Keys(dests)) {
		t.Run(dname, func(t *testing.T) {
			t.Parallel()
			fn(t, dname, dests[dname])
		})
	}
}
