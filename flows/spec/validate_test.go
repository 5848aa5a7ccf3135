package spec

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// The cases below mark each expected problem in the YAML itself, with a
// comment on the line the problem must be reported at:
//
//	topic: "x y"   #! flows[0].source.kafka.topic: not a topic name
//
// "#! PATH: TEXT" expects a problem at that line whose path is PATH and whose
// message contains TEXT; a line may hold several markers. The problems found
// must be exactly the ones marked.

const header = `pipeline: shop
kafka: {brokers: ["127.0.0.1:9092"]}
destination: {local: {path: ./data}}
`

// cdcFlow is an SCD type 1 auto_cdc flow (keys [id], sequence seq, op "D"
// a delete) writing table t, as the flows list.
const cdcFlow = `flows:
  - name: f
    target: t
    kind: auto_cdc
    source:
      kafka:
        topic: s1
        columns:
          - {name: id, type: int64}
          - {name: name, type: string, nullable: true}
          - {name: op, type: string, nullable: true}
          - {name: seq, type: int64, nullable: true}
    keys: [id]
    sequence_by: seq
    apply_as_deletes: 'op == "D"'
    except_column_list: [op, seq]
`

// appendFlow is an append flow from Kafka writing table t.
const appendFlow = `flows:
  - name: f
    target: t
    kind: append
    source:
      kafka:
        topic: orders
        columns:
          - {name: id, type: int64}
          - {name: amount, type: "decimal(10,2)", nullable: true}
`

const tableT = "tables:\n  - name: t\n"

type mark struct {
	line int
	path string
	text string
}

func marks(src string) []mark {
	var out []mark
	for i, line := range strings.Split(src, "\n") {
		parts := strings.Split(line, "#!")
		for _, m := range parts[1:] {
			path, text, ok := strings.Cut(strings.TrimSpace(m), ": ")
			if !ok {
				path, text = strings.TrimSuffix(strings.TrimSpace(m), ":"), ""
			}
			out = append(out, mark{line: i + 1, path: path, text: strings.TrimSpace(text)})
		}
	}
	return out
}

// checkMarks parses src and compares its problems with the marks in it.
func checkMarks(t *testing.T, src string, env map[string]string) {
	t.Helper()
	want := marks(src)
	_, err := Parse([]byte(src), "sluice.yaml", mapLookup(env))
	var got Problems
	if err != nil && !errors.As(err, &got) {
		t.Fatalf("Parse returned %T %v, want Problems", err, err)
	}
	used := make([]bool, len(got))
	var missing []string
	for _, m := range want {
		found := false
		for i, p := range got {
			if !used[i] && p.Line == m.line && p.Path == m.path && strings.Contains(p.Msg, m.text) {
				used[i], found = true, true
				break
			}
		}
		if !found {
			missing = append(missing, fmt.Sprintf("line %d: %s: %s", m.line, m.path, m.text))
		}
	}
	var extra []string
	for i, p := range got {
		if !used[i] {
			extra = append(extra, p.String())
		}
	}
	if len(missing) > 0 || len(extra) > 0 {
		t.Errorf("problems differ\nmissing:\n  %s\nunexpected:\n  %s\nspec:\n%s", strings.Join(missing, "\n  "), strings.Join(extra, "\n  "), numbered(src))
	}
	if !slices.IsSortedFunc(got, func(a, b Problem) int { return a.Line - b.Line }) {
		t.Errorf("problems not sorted by line:\n%v", got)
	}
}

func numbered(src string) string {
	var b strings.Builder
	for i, l := range strings.Split(src, "\n") {
		fmt.Fprintf(&b, "%3d %s\n", i+1, l)
	}
	return b.String()
}

func mapLookup(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}
}

func TestValidateValid(t *testing.T) {
	cases := []struct {
		name string
		src  string
	}{
		{"cdc flow", header + tableT + cdcFlow},
		{"clickhouse cluster", `pipeline: shop
kafka: {brokers: ["127.0.0.1:9092"]}
destination:
  clickhouse:
    addr: [ch1:9000, ch2:9000]
    cluster: replicated
    zookeeper: zk:2181
    zookeeper_path: /clickhouse/tables/{shard}/shop/{table}
    replica_name: "{replica}-a"
` + tableT + appendFlow},
		{"empty values are not written", header + tableT + cdcFlow + "    column_list:\n    stored_as_scd_type:\n    write:\n"},
		{"append flow", header + tableT + appendFlow},
		{"sequence list", header + tableT + strings.Replace(cdcFlow, "sequence_by: seq", "sequence_by: [seq, name]", 1)},
		{"scd2 with track history", header + tableT + cdcFlow + "    stored_as_scd_type: 2\n    track_history_column_list: [name]\n"},
		{"scd1 truncates", header + tableT + cdcFlow + "    apply_as_truncates: 'op == \"T\"'\n"},
		{"ignore null list", header + tableT + cdcFlow + "    ignore_null_updates_column_list: [name]\n"},
		{"metadata in expression", header + tableT + strings.Replace(cdcFlow, `'op == "D"'`, `'_kafka_partition == 0 && _kafka_topic != "" && _kafka_offset > 5 && _kafka_timestamp < now()'`, 1)},
		{"key declared as string", header + tableT + appendFlow + "          - {name: _kafka_key, type: string, nullable: true}\n          - {name: _kafka_offset, type: int64}\n"},
		{"nullable expression field compares with nil", header + tableT + strings.Replace(cdcFlow, `'op == "D"'`, `'op == nil || op in ["D", "X"]'`, 1)},
		{"snapshot flow shares table", header + tableT + cdcFlow + `  - name: snap
    target: t
    kind: auto_cdc_from_snapshot
    once: true
    source: {files: {path: snap/a.parquet}}
    snapshot_version: 100
    keys: [ID]
`},
		{"snapshots folder", header + tableT + `flows:
  - name: snap
    target: t
    kind: auto_cdc_from_snapshot
    source: {snapshots: {path: "snapshots/{version}/*.parquet", format: parquet}}
    snapshot_version_type: date
    keys: [id]
    stored_as_scd_type: 2
`},
		{"two cdc flows share a table", header + tableT + cdcFlow + `  - name: g
    target: t
    kind: auto_cdc
    once: true
    source: {files: {path: "history/**/*.jsonl", columns: [{name: id, type: int64}, {name: name, type: string, nullable: true}, {name: seq, type: int64}]}}
    keys: [id]
    sequence_by: seq
    except_column_list: [seq]
`},
		{"incremental with lag and replace_partitions", header + `tables:
  - {name: t, partition_by: [day]}
flows:
  - name: backfill
    target: t
    kind: append
    write: replace_partitions
    source: {files: {path: "data/day=*/*.parquet", columns: [{name: day, type: date}, {name: v, type: int64}]}}
    incremental: {cursor: day, initial_value: "2024-01-01", lag: 3d}
`},
		{"replay_valid_to", header + tableT + `flows:
  - name: legacy
    target: t
    kind: auto_cdc
    once: true
    source: {files: {path: legacy.parquet, columns: [{name: id, type: int64}, {name: v, type: string}, {name: valid_from, type: timestamp}, {name: valid_to, type: timestamp, nullable: true}]}}
    keys: [id]
    sequence_by: valid_from
    replay_valid_to: valid_to
    except_column_list: [valid_from, valid_to]
    stored_as_scd_type: 2
`},
		{"parquet source without columns skips column rules", header + tableT + `flows:
  - name: hist
    target: t
    kind: auto_cdc
    source: {files: {path: hist/*.parquet}}
    keys: [anything]
    sequence_by: whatever
    apply_as_deletes: 'op == "D"'
`},
		{"declared cdc target agrees", header + `tables:
  - name: t
    columns:
      - {name: id, type: int64}
      - {name: name, type: string, nullable: true}
    order_by: [id]
    state_cache: 64MiB
` + cdcFlow},
		{"kafka source decodes the target's columns", header + `tables:
  - name: t
    columns:
      - {name: id, type: int64}
      - {name: v, type: string, nullable: true}
flows:
  - name: f
    target: t
    kind: append
    source: {kafka: {topic: x}}
`},
		{"all top-level keys", `pipeline: shop_2
timezone: Europe/Berlin
metrics: {listen: ":9090"}
kafka:
  brokers: [a:9092, "b:9092"]
  group: g
  session_timeout: 6s
  tls: {ca_file: ca.pem, cert_file: c.pem, key_file: k.pem, insecure_skip_verify: true}
  sasl: {mechanism: scram-sha-512, user: u, password: p}
destination:
  clickhouse:
    addr: [127.0.0.1:9000]
    database: shop
    username: default
    password: secret
    tls: {}
    dial_timeout: 5s
    read_timeout: 1m
    settings: {max_insert_threads: 4, insert_quorum: "2"}
    compression: zstd
` + tableT + appendFlow + `    on_error: fail
    start: latest
    batch: {rows: 1000, bytes: 32MiB, wait: 500ms}
    write: append
`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if len(marks(tc.src)) > 0 {
				t.Fatal("a valid case has marks")
			}
			checkMarks(t, tc.src, nil)
		})
	}
}

func TestValidateProblems(t *testing.T) {
	cases := []struct {
		name string
		src  string
	}{
		// Top level.
		{"pipeline missing", `kafka: {brokers: ["127.0.0.1:9092"]} #! pipeline: required
destination: {local: {path: ./data}}
`},
		{"pipeline name", "pipeline: Shop-1 #! pipeline: not a pipeline name\ndestination: {local: {path: d}}\n"},
		{"unknown top-level key", header + "tabels: [] #! tabels: did you mean \"tables\"\n"},
		{"unknown nested key", header + tableT + strings.Replace(appendFlow, "topic: orders", "topic: orders\n        tpoic: x #! flows[0].source.kafka.tpoic: did you mean \"topic\"", 1)},
		{"unknown key lists known keys", header + "metrics: {listen: \":1\", zzzzzzz: 1} #! metrics.zzzzzzz: known keys: listen\n"},
		{"timezone", header + "timezone: Mars/Olympus #! timezone: unknown time zone\n"},
		{"metrics listen", header + "metrics: {listen: nowhere} #! metrics.listen: not host:port\n"},
		{"metrics listen required", header + "metrics: {} #! metrics.listen: required\n"},

		// Kafka and destination.
		{"kafka section missing", "pipeline: shop\ndestination: {local: {path: d}}\n" + tableT + strings.Replace(appendFlow, "      kafka:\n", "      kafka: #! flows[0].source.kafka: top-level kafka section\n", 1)},
		{"brokers missing", "pipeline: shop\nkafka: {group: g} #! kafka.brokers: required\ndestination: {local: {path: d}}\n"},
		{"broker address", "pipeline: shop\nkafka: {brokers: [nohost]} #! kafka.brokers[0]: not host:port\ndestination: {local: {path: d}}\n"},
		{"kafka tls and sasl", `pipeline: shop
kafka:
  brokers: [a:1]
  session_timeout: 0s #! kafka.session_timeout: must be positive
  tls: {cert_file: c.pem} #! kafka.tls.key_file: required with cert_file
  sasl: {mechanism: GSSAPI} #! kafka.sasl.mechanism: unknown SASL mechanism #! kafka.sasl.user: required #! kafka.sasl.password: required
destination: {local: {path: d}}
`},
		{"computed column from a decimal", header + `tables:
  - name: t
flows:
  - name: f
    target: t
    kind: append
    source:
      kafka:
        topic: t
        columns:
          - {name: amount, type: "decimal(10,2)"}
    computed_columns:
      - {name: cents, type: int64, expr: "amount * 100"} #! flows[0].computed_columns[0].expr: reads the decimal column amount, which an expression sees as a float64
`},
		{"array columns", header + `tables:
  - name: t
    columns:
      - {name: a, type: array(int64), nullable: true} #! tables[0].columns[0].nullable: column a is array(int64), and an array is never null (ClickHouse has no nullable arrays): remove nullable; a missing or null list is then a dead letter, and an empty list an empty array
      - {name: b, type: array(array(int64))} #! tables[0].columns[1].type: unknown type "array(array(int64))": the elements of an array are a scalar type (a list of lists loads into a child table, docs/schema.md#child-tables)
      - {name: c, type: array(timestamp), unit: s}
    order_by: [c] #! tables[0].order_by[0]: column c is array(timestamp): order_by takes scalar columns
  - name: u
  - name: w
flows:
  - name: f
    target: u
    kind: auto_cdc
    source:
      kafka:
        topic: t
        columns:
          - {name: id, type: array(int64)}
          - {name: seq, type: int64}
          - {name: prices, type: "array(decimal(10,2))"}
    keys: [id] #! flows[0].keys[0]: key column id is array(int64): a key is made of scalar columns
    sequence_by: seq
    computed_columns:
      - {name: total, type: float64, expr: "sum(prices)"} #! flows[0].computed_columns[0].expr: reads the decimal column prices, which an expression sees as a float64: its result would not be exact; compute it from other columns, or store the decimal column as it is
  - name: g
    target: w
    kind: auto_cdc
    source:
      kafka:
        topic: t
        format: debezium
        columns:
          - {name: id, type: int64}
          - {name: days, type: array(date)} #! flows[1].source.kafka.columns[1].type: a Debezium envelope's array(date) elements are encoded by the logical type of its schema, which sluice reads for single values only: declare the column array(string) or array(int64), as the envelope holds them
          - {name: tags, type: array(string)}
    keys: [id]
    sequence_by: id
`},
		{"column unit", header + `tables:
  - name: t
    columns:
      - {name: a, type: timestamp, unit: days} #! tables[0].columns[0].unit: unknown unit "days": s, ms, us or ns
      - {name: b, type: int64, unit: s} #! tables[0].columns[1].unit: a unit applies to timestamp columns; b is int64
`},
		{"column name clickhouse cannot hold", `pipeline: shop
kafka: {brokers: ["127.0.0.1:9092"]}
destination: {clickhouse: {addr: [a:9000]}}
tables:
  - name: t
    columns:
      - {name: User Name, type: string} #! tables[0].columns[0].name: ClickHouse cannot hold the column name "User Name": use letters, digits and underscores, not starting with a digit, for example user_name
      - {name: 2nd, type: string} #! tables[0].columns[1].name: for example _2nd
`},
		{"destination missing", "pipeline: shop #! destination: set one of local or clickhouse\n"},
		{"destination both", `pipeline: shop
destination:
  local: {path: d}
  clickhouse: {addr: [a:9000]} #! destination.clickhouse: only one
`},
		{"clickhouse keys", `pipeline: shop
destination:
  clickhouse:
    addr: [] #! destination.clickhouse.addr: required
    dial_timeout: -1s #! destination.clickhouse.dial_timeout: must be positive
    read_timeout: soon #! destination.clickhouse.read_timeout: not a duration
    settings: {"bad name": 1} #! destination.clickhouse.settings.bad name: not a setting name
    compression: gzip #! destination.clickhouse.compression: "gzip": use lz4, zstd or none
    tls: {key_file: k.pem} #! destination.clickhouse.tls.cert_file: required with key_file
`},
		{"zookeeper without cluster", `pipeline: shop
destination:
  clickhouse:
    addr: [a:9000]
    zookeeper: [zk:2181] #! destination.clickhouse.zookeeper: applies with cluster only: set cluster to the cluster of the servers
    zookeeper_path: /t/{table} #! destination.clickhouse.zookeeper_path: applies with cluster only
    replica_name: r1 #! destination.clickhouse.replica_name: applies with cluster only
`},
		{"cluster without zookeeper", `pipeline: shop
destination:
  clickhouse:
    addr: [a:9000]
    cluster: replicated #! destination.clickhouse.cluster: requires zookeeper: the host:port list
`},
		{"cluster keys", `pipeline: shop
destination:
  clickhouse:
    addr: [a:9000]
    cluster: "my cluster" #! destination.clickhouse.cluster: "my cluster" is not a cluster name
    zookeeper: [zk:2181, zk2] #! destination.clickhouse.zookeeper[1]: "zk2" is not host:port
    zookeeper_path: /clickhouse/{shard}/{database} #! destination.clickhouse.zookeeper_path: names no {table}
    replica_name: "it's" #! destination.clickhouse.replica_name: no quotes
`},
		{"local path", "pipeline: shop\ndestination: {local: {}} #! destination.local.path: required\n"},

		// Tables and columns.
		{"table names", header + `tables:
  - name: t
  - name: t #! tables[1].name: already declared at line 5
  - name: 9t #! tables[2].name: not a table name
  - name: _sluice_x #! tables[3].name: reserved
  - {} #! tables[4].name: required
` + strings.Replace(appendFlow, "target: t", "target: t", 1)},
		{"columns", header + `tables:
  - name: t
    columns:
      - {name: a, type: int65} #! tables[0].columns[0].type: unknown type "int65"
      - {name: a, type: string} #! tables[0].columns[1].name: declared twice
      - {name: b} #! tables[0].columns[2].type: required
      - {name: c, type: } #! tables[0].columns[3].type: required
      - {type: int64} #! tables[0].columns[4].name: required
      - {name: _sluice_x, type: int64} #! tables[0].columns[5].name: reserved
      - {name: d, type: "decimal(50,2)"} #! tables[0].columns[6].type: precision 50 out of range
`},
		{"table without flows or columns", header + "tables:\n  - name: t #! tables[0].columns: no flow writes table t\n"},
		{"state_cache", header + `tables:
  - name: t
    state_cache: 0 #! tables[0].state_cache: must be positive
  - name: a
    state_cache: 1GB #! tables[1].state_cache: applies to CDC targets only
  - name: b
    state_cache: lots #! tables[2].state_cache: not a size
` + cdcFlow + strings.Replace(strings.Replace(strings.TrimPrefix(appendFlow, "flows:\n"), "target: t", "target: a", 1), "name: f", "name: g", 1) +
			strings.Replace(strings.Replace(strings.TrimPrefix(appendFlow, "flows:\n"), "target: t", "target: b", 1), "name: f", "name: h", 1)},
		{"order_by unknown column", header + `tables:
  - name: t
    order_by: [id, nope] #! tables[0].order_by[1]: unknown column "nope"
    partition_by: [amount, amount] #! tables[0].partition_by[1]: listed twice
` + appendFlow},

		// Flows: names, targets, kinds, sources.
		{"flow names and targets", header + tableT + strings.Replace(appendFlow, "  - name: f\n    target: t\n", "  - name: f-1 #! flows[0].name: not a flow name\n    target: nope #! flows[0].target: unknown table \"nope\"\n", 1) +
			strings.Replace(strings.TrimPrefix(appendFlow, "flows:\n"), "target: t", "target: #! flows[1].target: required", 1) +
			strings.Replace(strings.TrimPrefix(appendFlow, "flows:\n"), "name: f\n", "name: f #! flows[2].name: already declared at line 16\n", 1)},
		{"kind missing and unknown", header + tableT + strings.Replace(appendFlow, "    kind: append\n", "    kind: #! flows[0].kind: required\n", 1) +
			strings.Replace(strings.Replace(strings.TrimPrefix(appendFlow, "flows:\n"), "kind: append", "kind: merge #! flows[1].kind: unknown flow kind", 1), "name: f", "name: g", 1)},
		{"kind missing line", header + tableT + "flows:\n  - name: f #! flows[0].kind: required #! flows[0].source: required\n    target: t\n"},
		{"two sources", header + tableT + `flows:
  - name: f
    target: t
    kind: append
    source: #! flows[0].source: only one
      kafka: {topic: a}
      files: {path: a.parquet}
`},
		{"snapshots source on append", header + tableT + `flows:
  - name: f
    target: t
    kind: append
    source: {snapshots: {path: "s/{version}/*.parquet"}} #! flows[0].source.snapshots: for auto_cdc_from_snapshot flows
`},
		{"kafka source on snapshot flow", header + tableT + `flows:
  - name: f
    target: t
    kind: auto_cdc_from_snapshot
    source: {kafka: {topic: a, columns: [{name: id, type: int64}]}} #! flows[0].source.kafka: not kafka
    keys: [id]
`},
		{"kafka topic and formats", header + tableT + `flows:
  - name: f
    target: t
    kind: append
    source: {kafka: {topic: "a b", format: debezium, columns: [{name: id, type: int64}]}} #! flows[0].source.kafka.topic: not a topic name #! flows[0].source.kafka.format: debezium is for auto_cdc
  - name: g
    target: t
    kind: append
    source: {kafka: {format: xml, columns: [{name: id, type: int64}]}} #! flows[1].source.kafka.topic: required #! flows[1].source.kafka.format: unknown kafka format
`},
		{"schema registry", header + tableT + `flows:
  - name: f
    target: t
    kind: append
    source: {kafka: {topic: a, format: avro}} #! flows[0].source.kafka.schema_registry: required for format avro
  - name: g
    target: t
    kind: append
    source: {kafka: {topic: a, format: json, schema_registry: {url: "http://r:8081"}}} #! flows[1].source.kafka.schema_registry: format json reads no schemas
  - name: h
    target: t
    kind: append
    source:
      kafka:
        topic: a
        format: protobuf
        schema_registry:
          url: "ftp://r" #! flows[2].source.kafka.schema_registry.url: is not an http:// or https:// URL
          username: u #! flows[2].source.kafka.schema_registry.username: needs a password
  - name: i
    target: t
    kind: append
    source:
      kafka:
        topic: a
        format: avro
        schema_registry:
          url: "http://r:8081"
          tls: {} #! flows[3].source.kafka.schema_registry.tls: applies to an https:// url
  - name: j
    target: t
    kind: append
    source: {kafka: {topic: a, format: avro, schema_registry: {url: "https://r:8081", username: u, password: p, tls: {ca_file: /etc/ssl/certs/ca-certificates.crt}}}}
`},
		{"tombstones", header + tableT + `  - name: u
  - name: w
  - name: x
flows:
  - name: f
    target: t
    kind: append
    source: {kafka: {topic: a, tombstones: skip, columns: [{name: id, type: int64}]}} #! flows[0].source.kafka.tombstones: applies to auto_cdc flows
  - name: g
    target: u
    kind: auto_cdc
    source:
      kafka:
        topic: a
        tombstones: forget #! flows[1].source.kafka.tombstones: unknown "forget": delete, skip or dead_letter
        columns: [{name: id, type: int64}, {name: id2, type: int64}, {name: seq, type: int64}]
    keys: [id, id2]
    sequence_by: seq
  - name: h
    target: x
    kind: auto_cdc
    source:
      kafka:
        topic: a
        tombstones: delete
        key_format: string #! flows[2].source.kafka.key_format: string names one key column, and flow h has 2 keys: use json
        columns: [{name: id, type: int64}, {name: seq, type: int64}]
    keys: [id, k] #! flows[2].keys[1]: key k is a computed column, which a tombstone's message key cannot give: set tombstones: dead_letter or skip
    sequence_by: seq
    computed_columns:
      - {name: k, type: int64, expr: "id * 2"}
  - name: i
    target: w
    kind: auto_cdc
    source:
      kafka:
        topic: a
        key_format: json #! flows[3].source.kafka.key_format: applies when tombstones: delete
        columns: [{name: id, type: int64}, {name: seq, type: int64}]
    keys: [id]
    sequence_by: seq
  - name: j
    target: w
    kind: auto_cdc
    source:
      kafka:
        topic: a
        format: debezium
        key_format: string #! flows[4].source.kafka.key_format: a Debezium message key is a JSON object
        columns: [{name: id, type: int64}, {name: seq, type: int64}]
    keys: [id]
    sequence_by: seq
  - name: k
    target: x
    kind: auto_cdc
    source:
      kafka:
        topic: a
        format: debezium
        columns: [{name: id, type: int64}, {name: seq, type: int64}]
    keys: [id, k]
    sequence_by: seq
    computed_columns:
      - {name: k, type: int64, expr: "id * 2"}
`},
		{"file formats", header + tableT + `flows:
  - name: f
    target: t
    kind: append
    source: {files: {path: "a/*.csv"}} #! flows[0].source.files.format: required: parquet or jsonl
  - name: g
    target: t
    kind: append
    source: {files: {path: "a/*.x", format: csv}} #! flows[1].source.files.format: unknown file format
  - name: h
    target: t
    kind: append
    source: {files: {path: "a/[*.parquet"}} #! flows[2].source.files.path: not a valid glob
  - name: i
    target: t
    kind: append
    source: {files: {}} #! flows[3].source.files.path: required
`},
		{"jsonl sources", header + tableT + `  - name: u
flows:
  - name: f
    target: t
    kind: append
    source: {files: {path: "a/*.jsonl"}} # an append flow of JSONL lines infers its columns
    schema_contract: {columns: freeze}
  - name: g
    target: t
    kind: append
    source: {kafka: {topic: x}} # an append flow of JSON messages infers its columns
  - name: h
    target: t
    kind: append
    source: {files: {path: "b/*.jsonl"}} #! flows[2].source.files.columns: declare the columns
    incremental: {cursor: at, type: int64}
  - name: i
    target: u
    kind: auto_cdc
    source: {files: {path: "c/*.jsonl"}} #! flows[3].source.files.columns: declare the columns
    keys: [id]
    sequence_by: at
`},
		{"schema contracts", header + tableT + `  - name: d
    columns:
      - {name: id, type: int64}
flows:
  - name: f
    target: t
    kind: append
    source: {kafka: {topic: x}}
    schema_contract: {columns: freeze, data_type: evolve}
  - name: g
    target: d
    kind: append
    source: {kafka: {topic: x}}
    schema_contract: {columns: evolve, data_type: discard_row} #! flows[1].schema_contract.columns: evolve applies to a table typed by its messages
  - name: h
    target: t
    kind: append
    source: {files: {path: "a/*.parquet"}}
    schema_contract: {columns: freeze} #! flows[2].schema_contract: applies to kafka sources of format json
  - name: i
    target: d
    kind: append
    source: {kafka: {topic: x}}
    schema_contract: {data_type: sometimes} #! flows[3].schema_contract.data_type: unknown value "sometimes"
`},
		{"paths", header + tableT + `flows:
  - name: f
    target: t
    kind: append
    source:
      kafka:
        topic: x
        columns:
          - {name: zip, type: string, path: customer.address.zip}
          - {name: bad, type: string, path: "a..b"} #! flows[0].source.kafka.columns[1].path: "a..b" has an empty segment
  - name: g
    target: t
    kind: append
    source:
      files:
        path: "a/*.parquet"
        columns:
          - {name: zip, type: string, path: customer.zip} #! flows[1].source.files.columns[0].path: a path names a nested field of JSON
`},
		{"max nesting", header + tableT + `  - name: d
    columns:
      - {name: id, type: int64}
flows:
  - name: f
    target: t
    kind: append
    source: {kafka: {topic: x}}
    max_nesting: 0
  - name: g
    target: d
    kind: append
    source: {kafka: {topic: x}}
    max_nesting: 2 #! flows[1].max_nesting: applies to a table typed by its JSON messages
  - name: h
    target: t
    kind: append
    source: {kafka: {topic: x}}
    max_nesting: -1 #! flows[2].max_nesting: must be 0 or more
  - name: i
    target: t
    kind: append
    source: {kafka: {topic: x}}
    max_nesting: deep #! flows[3].max_nesting: want
`},
		{"metadata field types", header + tableT + appendFlow + `          - {name: _kafka_offset, type: string} #! flows[0].source.kafka.columns[2].type: metadata field _kafka_offset is int64
          - {name: _kafka_key, type: int64} #! flows[0].source.kafka.columns[3].type: bytes or string
          - {name: _kafka_timestamp, type: timestamp}
`},

		{"metadata field types on the target", header + `tables:
  - name: t
    columns:
      - {name: id, type: int64}
      - {name: _kafka_partition, type: string} #! tables[0].columns[1].type: metadata field _kafka_partition is int64
  - name: u
flows:
  - name: f
    target: t
    kind: append
    source: {kafka: {topic: a}}
  - name: g
    target: u
    kind: append
    source: {files: {path: "a/*.parquet", columns: [{name: id, type: int64}, {name: _file_path, type: bytes}]}} #! flows[1].source.files.columns[1].type: metadata field _file_path is string
`},

		// Flow keys every kind takes.
		{"common flow keys", header + tableT + appendFlow + `    on_error: ignore #! flows[0].on_error: dead_letter or fail
    start: middle #! flows[0].start: earliest or latest
    batch:
      rows: 0 #! flows[0].batch.rows: must be positive
      bytes: 12XB #! flows[0].batch.bytes: not a size
      wait: -1s #! flows[0].batch.wait: must be positive
    once: maybe #! flows[0].once: want true or false
`},
		{"start on a files source", header + tableT + `flows:
  - name: f
    target: t
    kind: append
    source: {files: {path: a.parquet}}
    start: latest #! flows[0].start: kafka sources only
`},
		{"tombstone retention", header + tableT + cdcFlow + "    tombstone_retention: 2weeks #! flows[0].tombstone_retention: not a duration\n"},
		{"tombstone retention negative", header + tableT + cdcFlow + "    tombstone_retention: -3d #! flows[0].tombstone_retention: must be positive\n"},

		// Keys that only some kinds take.
		{"cdc keys on an append flow", header + tableT + appendFlow + `    keys: [id] #! flows[0].keys: applies to auto_cdc and auto_cdc_from_snapshot flows only
    sequence_by: id #! flows[0].sequence_by: applies to auto_cdc flows only
    tombstone_retention: 1d #! flows[0].tombstone_retention: only
    ignore_null_updates: false #! flows[0].ignore_null_updates: only
    snapshot_version: 1 #! flows[0].snapshot_version: applies to auto_cdc_from_snapshot flows only
`},
		{"write on a cdc flow", header + tableT + cdcFlow + "    write: append #! flows[0].write: applies to append flows only\n"},
		{"write value", header + tableT + appendFlow + "    write: upsert #! flows[0].write: append or replace_partitions\n"},
		{"snapshot keys on a snapshot flow", header + tableT + `flows:
  - name: s
    target: t
    kind: auto_cdc_from_snapshot
    source: {snapshots: {path: "s/{version}/*.parquet"}}
    keys: [id]
    sequence_by: v #! flows[0].sequence_by: auto_cdc flows only
    apply_as_deletes: "true" #! flows[0].apply_as_deletes: auto_cdc flows only
    ignore_null_updates: true #! flows[0].ignore_null_updates: auto_cdc flows only
    replay_valid_to: v #! flows[0].replay_valid_to: auto_cdc flows only
    incremental: {cursor: v} #! flows[0].incremental: applies to append and auto_cdc flows only
`},

		// CDC parameters.
		{"keys and sequence required", header + tableT + `flows:
  - name: f #! flows[0].keys: required #! flows[0].sequence_by: required
    target: t
    kind: auto_cdc
    source: {kafka: {topic: a, columns: [{name: id, type: int64}]}}
`},
		{"keys and sequence unknown", header + tableT + strings.Replace(strings.Replace(cdcFlow, "keys: [id]", "keys: [id, nope] #! flows[0].keys[1]: unknown column \"nope\"", 1), "sequence_by: seq", "sequence_by: sq #! flows[0].sequence_by: unknown column \"sq\"", 1)},
		{"sequence list unknown and repeated", header + tableT + strings.Replace(cdcFlow, "sequence_by: seq", "sequence_by: [seq, seq, zz] #! flows[0].sequence_by[1]: listed twice #! flows[0].sequence_by[2]: unknown column", 1)},
		{"sequence type", header + tableT + strings.Replace(strings.Replace(cdcFlow, "{name: seq, type: int64, nullable: true}", "{name: seq, type: float64}", 1), "sequence_by: seq", "sequence_by: seq #! flows[0].sequence_by: sequence column seq is float64", 1)},
		{"keys a list", header + tableT + strings.Replace(cdcFlow, "keys: [id]", "keys: id #! flows[0].keys: want a list", 1)},
		{"scd type", header + tableT + cdcFlow + "    stored_as_scd_type: 3 #! flows[0].stored_as_scd_type: want 1 or 2\n"},
		{"column lists exclude each other", header + tableT + cdcFlow + "    column_list: [id, name, zz] #! flows[0].column_list[2]: unknown column \"zz\" #! flows[0].column_list: exclude each other\n"},
		{"keys must remain", header + tableT + strings.Replace(cdcFlow, "except_column_list: [op, seq]", "except_column_list: [op, id] #! flows[0].except_column_list[1]: key column \"id\" must remain", 1)},
		{"keys must remain in column_list", header + tableT + strings.Replace(cdcFlow, "except_column_list: [op, seq]", "column_list: [name] #! flows[0].column_list: key column \"id\" must remain", 1)},
		{"truncates on scd2", header + tableT + cdcFlow + "    stored_as_scd_type: 2\n    apply_as_truncates: 'op == \"T\"' #! flows[0].apply_as_truncates: SCD type 1 only\n"},
		{"track history on scd1", header + tableT + cdcFlow + "    track_history_column_list: [name] #! flows[0].track_history_column_list: stored_as_scd_type: 2 only\n"},
		{"track history lists exclude each other", header + tableT + cdcFlow + `    stored_as_scd_type: 2
    track_history_column_list: [name]
    track_history_except_column_list: [op] #! flows[0].track_history_except_column_list: exclude each other #! flows[0].track_history_except_column_list[0]: unknown column "op"
`},
		{"ignore null forms exclude each other", header + tableT + cdcFlow + `    ignore_null_updates: true
    ignore_null_updates_column_list: [name, id] #! flows[0].ignore_null_updates_column_list[1]: key column "id" never ignores nulls #! flows[0].ignore_null_updates_column_list: exclude each other
`},
		{"ignore null lists exclude each other", header + tableT + cdcFlow + `    ignore_null_updates_column_list: [name]
    ignore_null_updates_except_column_list: [nope] #! flows[0].ignore_null_updates_except_column_list[0]: unknown column "nope" #! flows[0].ignore_null_updates_except_column_list: exclude each other
`},
		{"expression syntax", header + tableT + strings.Replace(cdcFlow, `apply_as_deletes: 'op == "D"'`, `apply_as_deletes: 'op ==' #! flows[0].apply_as_deletes: expression "op =="`, 1)},
		{"expression unknown name", header + tableT + strings.Replace(cdcFlow, `apply_as_deletes: 'op == "D"'`, `apply_as_deletes: 'kind == "D"' #! flows[0].apply_as_deletes: unknown name kind`, 1)},
		{"expression not bool", header + tableT + strings.Replace(cdcFlow, `apply_as_deletes: 'op == "D"'`, `apply_as_deletes: 'op' #! flows[0].apply_as_deletes: expected bool`, 1)},
		{"expression types", header + tableT + cdcFlow + `    apply_as_truncates: 'seq == "x"' #! flows[0].apply_as_truncates: mismatched types`},
		{"expression syntax without columns", header + tableT + `flows:
  - name: hist
    target: t
    kind: auto_cdc
    source: {files: {path: hist/*.parquet}}
    keys: [id]
    sequence_by: seq
    apply_as_deletes: 'op ==' #! flows[0].apply_as_deletes: expression
`},
		{"replay_valid_to", header + tableT + cdcFlow + `    replay_valid_to: name #! flows[0].replay_valid_to: column name is string but the sequence is int64 #! flows[0].replay_valid_to: needs a files source
  - name: g
    target: t
    kind: auto_cdc
    source: {kafka: {topic: b, columns: [{name: id, type: int64}, {name: seq, type: int64}]}}
    keys: [id]
    sequence_by: seq
    replay_valid_to: until #! flows[1].replay_valid_to: unknown column "until" #! flows[1].replay_valid_to: needs a files source
`},

		// Snapshot flows.
		{"snapshot version required", header + tableT + `flows:
  - name: s #! flows[0].snapshot_version: required with a files source
    target: t
    kind: auto_cdc_from_snapshot
    source: {files: {path: a.parquet}}
    keys: [id]
`},
		{"snapshot version with a snapshots source", header + tableT + `flows:
  - name: s
    target: t
    kind: auto_cdc_from_snapshot
    source: {snapshots: {path: "s/v{version}/*.parquet"}} #! flows[0].source.snapshots.path: exactly one whole path segment
    snapshot_version: 3 #! flows[0].snapshot_version: reads the version from the path
    snapshot_version_type: bool #! flows[0].snapshot_version_type: not bool
    keys: [id]
`},
		{"snapshot version type", header + tableT + `flows:
  - name: s
    target: t
    kind: auto_cdc_from_snapshot
    source: {files: {path: a.parquet}}
    snapshot_version: yesterday #! flows[0].snapshot_version: "yesterday" is not a date value
    snapshot_version_type: date
    keys: [id]
`},
		{"snapshot keys", header + tableT + `flows:
  - name: s #! flows[0].keys: required
    target: t
    kind: auto_cdc_from_snapshot
    source: {snapshots: {path: "s/{version}/*.jsonl", columns: [{name: id, type: int64}, {name: v, type: string}]}}
    column_list: [v, zz] #! flows[0].column_list[1]: unknown column "zz"
`},

		// Incremental.
		{"incremental", header + tableT + `flows:
  - name: f
    target: t
    kind: append
    source: {files: {path: "a/*.parquet", columns: [{name: day, type: date}, {name: ok, type: bool}]}}
    incremental:
      cursor: day
      initial_value: "2024-13-01" #! flows[0].incremental.initial_value: not a date value
      last_value_func: min
      lag: 3d #! flows[0].incremental.lag: needs write: replace_partitions
  - name: g
    target: t
    kind: append
    source: {files: {path: "a/*.parquet", columns: [{name: day, type: date}, {name: ok, type: bool}]}}
    incremental: {cursor: dya, last_value_func: last} #! flows[1].incremental.cursor: unknown column "dya" #! flows[1].incremental.last_value_func: max or min
  - name: h
    target: t
    kind: append
    source: {files: {path: "a/*.parquet", columns: [{name: day, type: date}, {name: ok, type: bool}]}}
    incremental: {cursor: ok} #! flows[2].incremental.type: not bool
  - name: i
    target: t
    kind: append
    write: replace_partitions #! flows[3].write: needs partition_by
    source: {files: {path: "a/*.parquet"}}
    incremental: {lag: soon} #! flows[3].incremental.cursor: required #! flows[3].incremental.lag: want a duration
`},
		{"incremental on kafka", header + tableT + appendFlow + "    incremental: {cursor: id} #! flows[0].incremental: files sources only\n"},
		{"incremental lag by type", header + `tables:
  - {name: t, partition_by: [n]}
flows:
  - name: f
    target: t
    kind: append
    write: replace_partitions
    source: {files: {path: "a/*.parquet", columns: [{name: at, type: timestamp}, {name: n, type: int64}, {name: s, type: string}]}}
    incremental: {cursor: at, lag: 5m3} #! flows[0].incremental.lag: for a timestamp cursor
  - name: g
    target: t
    kind: append
    write: replace_partitions
    source: {files: {path: "a/*.parquet", columns: [{name: at, type: timestamp}, {name: n, type: int64}, {name: s, type: string}]}}
    incremental: {cursor: n, type: string, lag: 1h} #! flows[1].incremental.type: cursor column n is int64, not string #! flows[1].incremental.lag: not string
`},

		// Several flows on one table.
		{"append and cdc share a table", header + tableT + cdcFlow + `  - name: raw
    target: t #! flows[1].target: append flow raw and auto_cdc flow f may not write the same table t
    kind: append
    source: {kafka: {topic: raw, columns: [{name: id, type: int64}]}}
`},
		{"keys differ", header + tableT + cdcFlow + `  - name: g
    target: t
    kind: auto_cdc
    source: {kafka: {topic: b, columns: [{name: id, type: int64}, {name: id2, type: int64}, {name: seq, type: int64}]}}
    keys: [id, id2] #! flows[1].keys: differ from flow f's keys [id]
    sequence_by: seq
`},
		{"sequence types differ", header + tableT + cdcFlow + `  - name: g
    target: t
    kind: auto_cdc
    source: {kafka: {topic: b, columns: [{name: id, type: int64}, {name: at, type: timestamp}]}}
    keys: [id]
    sequence_by: at #! flows[1].sequence_by: sequence type timestamp differs from flow f's int64
`},
		{"scd types differ", header + tableT + cdcFlow + `  - name: g
    target: t
    kind: auto_cdc
    source: {kafka: {topic: b, columns: [{name: id, type: int64}, {name: seq, type: int64}]}}
    keys: [id]
    sequence_by: seq
    stored_as_scd_type: 2 #! flows[1].stored_as_scd_type: SCD type 1, this flow as type 2
`},
		{"one snapshot flow per table", header + tableT + `flows:
  - name: s1
    target: t
    kind: auto_cdc_from_snapshot
    source: {snapshots: {path: "a/{version}/*.parquet"}}
    keys: [id]
  - name: s2
    target: t
    kind: auto_cdc_from_snapshot #! flows[1].kind: already has a snapshot flow, s1
    source: {snapshots: {path: "b/{version}/*.parquet"}}
    keys: [id]
`},
		{"snapshot with cdc", header + tableT + cdcFlow + `    ignore_null_updates: true #! flows[0].ignore_null_updates: no ignore-null on a flow that shares table t with snapshot flow s
  - name: s
    target: t
    kind: auto_cdc_from_snapshot
    source: {files: {path: s.parquet}}
    snapshot_version: "2025-01-01T00:00:00Z" #! flows[1].snapshot_version: snapshot version type timestamp differs from the sequence type int64 of flow f
    keys: [customer_id] #! flows[1].keys: differ from flow f's keys [id]
`},
		{"declared version type with list sequence", header + tableT + strings.Replace(cdcFlow, "sequence_by: seq", "sequence_by: [seq, id]", 1) + `  - name: s
    target: t
    kind: auto_cdc_from_snapshot
    source: {snapshots: {path: "a/{version}/*.parquet"}}
    snapshot_version_type: int64 #! flows[1].snapshot_version_type: differs from the sequence type (int64, int64)
    keys: [id]
`},

		// Target columns.
		{"append flow does not fit declared table", header + `tables:
  - name: t
    columns: #! tables[0].columns: table t does not declare column extra (string) of flow f
      - {name: id, type: string} #! tables[0].columns[0]: column id is string here but int64 in flow f
      - {name: amount, type: "decimal(10,2)"} #! tables[0].columns[1]: nullable in flow f
      - {name: must, type: int64} #! tables[0].columns[2]: flow f has no column must
      - {name: may, type: int64, nullable: true}
` + appendFlow + "          - {name: extra, type: string}\n"},
		{"append flows disagree on a type", header + tableT + appendFlow + `  - name: g
    target: t
    kind: append
    source:
      kafka:
        topic: more
        columns:
          - {name: amount, type: float64} #! flows[1].source.kafka.columns[0]: column amount is float64 here but decimal(10,2) in flow f
`},
		{"cdc table declared disagrees", header + `tables:
  - name: t
    columns:
      - {name: id, type: int64}
      - {name: name, type: bytes, nullable: true} #! tables[0].columns[1]: column name is bytes here but string in flow f
      - {name: __START_AT, type: int64, nullable: true} #! tables[0].columns[2]: belongs to SCD type 2 tables
` + cdcFlow},
		{"scd2 interval columns declared", header + `tables:
  - name: t
    columns:
      - {name: id, type: int64}
      - {name: name, type: string, nullable: true}
      - {name: __START_AT, type: timestamp, nullable: true} #! tables[0].columns[2]: column __START_AT is timestamp here but the sequence is int64
      - {name: __END_AT, type: int64} #! tables[0].columns[3]: must be nullable
` + cdcFlow + "    stored_as_scd_type: 2\n"},

		// Shapes and YAML.
		{"wrong shapes", header + `tables: {name: t} #! tables: want a list, got a mapping
flows:
  - name: f
    target: t
    kind: append
    source: kafka #! flows[0].source: want a mapping, got a scalar
    batch: {rows: many} #! flows[0].batch.rows: want an integer
`},
		{"syntax error", header + "tables: [a, b #! : not found\n"},
		{"duplicate key", header + "pipeline: again #! : already defined\n"},
		{"two documents", header + "---\npipeline: other #! : single YAML document\n"},
		{"unknown alias", header + "tables: *nope #! tables: unknown alias *nope\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if len(marks(tc.src)) == 0 {
				t.Fatal("no problem marked")
			}
			checkMarks(t, tc.src, nil)
		})
	}
}

// TestSeveralProblems checks that problems in every part of a spec are
// reported together, in line order, one per line of Error().
func TestSeveralProblems(t *testing.T) {
	src := `pipeline: Shop
timezone: Nowhere/Else
kafak: {}
destination:
  local: {}
tables:
  - name: t
    columns:
      - {name: a, type: int65}
flows:
  - name: f
    target: u
    kind: append
    source: {kafka: {topic: "x y"}}
    batch: {rows: 0, bytes: lots}
  - name: g
    target: t
    kind: auto_cdc
    source: {kafka: {topic: ok}}
    keys: [a]
    sequence_by: [a, b]
    stored_as_scd_type: 2
    apply_as_truncates: "true"
`
	_, err := Parse([]byte(src), "s.yaml", nil)
	var ps Problems
	if !errors.As(err, &ps) {
		t.Fatalf("want Problems, got %v", err)
	}
	wantLines := []int{1, 2, 3, 5, 9, 12, 14, 14, 15, 15, 21, 23}
	var lines []int
	for _, p := range ps {
		lines = append(lines, p.Line)
	}
	if !slices.Equal(lines, wantLines) {
		t.Errorf("lines %v, want %v\n%v", lines, wantLines, err)
	}
	text := err.Error()
	if n := strings.Count(text, "\n") + 1; n != len(ps) {
		t.Errorf("Error() has %d lines for %d problems", n, len(ps))
	}
	if !strings.HasPrefix(text, "s.yaml:1:11: pipeline: ") {
		t.Errorf("Error() starts %q", strings.SplitN(text, "\n", 2)[0])
	}
}

func TestProblemString(t *testing.T) {
	cases := []struct {
		name string
		p    Problem
		want string
	}{
		{"full", Problem{File: "a.yaml", Line: 3, Column: 7, Path: "flows[0].kind", Msg: "bad"}, "a.yaml:3:7: flows[0].kind: bad"},
		{"no column", Problem{File: "a.yaml", Line: 3, Path: "p", Msg: "bad"}, "a.yaml:3: p: bad"},
		{"no line", Problem{File: "a.yaml", Path: "p", Msg: "bad"}, "a.yaml: p: bad"},
		{"no file", Problem{Line: 2, Column: 1, Msg: "bad"}, "2:1: bad"},
		{"nothing", Problem{Msg: "bad"}, "bad"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.String(); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestProblemColumn checks that a value's problem points at the value.
func TestProblemColumn(t *testing.T) {
	src := header + tableT + strings.Replace(appendFlow, "topic: orders", "topic: \"o p\"", 1)
	_, err := Parse([]byte(src), "s.yaml", nil)
	var ps Problems
	if !errors.As(err, &ps) || len(ps) != 1 {
		t.Fatalf("want one problem, got %v", err)
	}
	if ps[0].Line != 12 || ps[0].Column != 16 {
		t.Errorf("at %d:%d, want 12:16", ps[0].Line, ps[0].Column)
	}
}
