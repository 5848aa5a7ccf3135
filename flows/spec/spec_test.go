package spec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/flows/batch"
)

func mustParse(t *testing.T, src string, env map[string]string) *Pipeline {
	t.Helper()
	p, err := Parse([]byte(src), "sluice.yaml", mapLookup(env))
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, numbered(src))
	}
	return p
}

func TestDesignExample(t *testing.T) {
	data, err := os.ReadFile("testdata/design.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(data, "design.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Pipeline != "shop" || p.Group() != "sluice-shop" || p.Destination.Local.Path != "./sluice-data" {
		t.Errorf("pipeline %q group %q local %+v", p.Pipeline, p.Group(), p.Destination.Local)
	}
	cdc, snap := p.Flow("customers_cdc"), p.Flow("customers_snapshot_2025")
	if cdc == nil || snap == nil {
		t.Fatal("flows missing")
	}
	if got := p.FlowGroup(cdc); got != "sluice-shop.customers_cdc" {
		t.Errorf("FlowGroup = %q", got)
	}
	if cdc.Line != 10 || snap.Line != 27 || p.Table("customers").Line != 8 {
		t.Errorf("lines: cdc %d snap %d table %d", cdc.Line, snap.Line, p.Table("customers").Line)
	}
	if !cmp.Equal(cdc.SequenceBy, []string{"updated_at"}) || cdc.ApplyAsDeletes != `op == "DELETE"` {
		t.Errorf("cdc flow %+v", cdc)
	}
	if snap.SnapshotVersionType != batch.Timestamp || !snap.Once || snap.Source.Files.Format != FormatParquet {
		t.Errorf("snapshot flow %+v", snap)
	}
	want := batch.Schema{Columns: []batch.Column{
		{Name: "customer_id", Type: batch.Int64},
		{Name: "name", Type: batch.String, Nullable: true},
		{Name: "updated_at", Type: batch.Timestamp},
	}}
	tbl := p.Table("customers")
	if diff := cmp.Diff(want, tbl.Schema); diff != "" {
		t.Errorf("customers schema (-want +got):\n%s", diff)
	}
	if !tbl.CDC || tbl.SCDType != 1 || !cmp.Equal(tbl.Keys, []string{"customer_id"}) {
		t.Errorf("customers: CDC %v SCD %d keys %v", tbl.CDC, tbl.SCDType, tbl.Keys)
	}
	if len(snap.SourceSchema().Columns) != 0 {
		t.Errorf("a Parquet source without columns has schema %v", snap.SourceSchema())
	}
	if p.Validate() != nil {
		t.Errorf("Validate after Parse: %v", p.Validate())
	}
}

func TestDefaults(t *testing.T) {
	p := mustParse(t, header+tableT+cdcFlow+`  - name: b
    target: t
    kind: auto_cdc
    source: {files: {path: "h/*.jsonl", columns: [{name: id, type: int64}, {name: seq, type: int64}]}}
    keys: [id]
    sequence_by: seq
    incremental: {cursor: seq}
`, nil)
	if p.Timezone != "UTC" || p.Location != time.UTC {
		t.Errorf("timezone %q location %v", p.Timezone, p.Location)
	}
	f := p.Flow("f")
	checks := []struct {
		name      string
		got, want any
	}{
		{"on_error", f.OnError, OnErrorDeadLetter},
		{"start", f.Start, StartEarliest},
		{"format", f.Source.Kafka.Format, FormatJSON},
		{"scd type", f.StoredAsSCDType, 1},
		{"tombstone_retention", f.TombstoneRetention, 48 * time.Hour},
		{"write", f.Write, WriteAppend},
		{"batch", f.Batch, BatchLimits{}},
		{"files format", p.Flow("b").Source.Files.Format, FormatJSONL},
		{"last_value_func", p.Flow("b").Incremental.LastValueFunc, LastValueMax},
		{"group", p.Group(), "sluice-shop"},
	}
	for _, c := range checks {
		if !cmp.Equal(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

// TestClusterDefaults: with cluster set, the ZooKeeper path and replica
// name default to the macros; without, they stay empty.
func TestClusterDefaults(t *testing.T) {
	const dest = "pipeline: shop\nkafka: {brokers: [\"127.0.0.1:9092\"]}\ndestination: {clickhouse: {addr: [a:9000]%s}}\n"
	tests := []struct {
		name, keys    string
		path, replica string
		cluster       string
		zookeeper     []string
	}{
		{"one server", "", "", "", "", nil},
		{"cluster", ", cluster: replicated, zookeeper: [zk:2181]", DefaultZooKeeperPath, DefaultReplicaName, "replicated", []string{"zk:2181"}},
		{"overridden", ", cluster: c, zookeeper: zk:2181, zookeeper_path: \"/z/{table}\", replica_name: r", "/z/{table}", "r", "c", []string{"zk:2181"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := mustParse(t, fmt.Sprintf(dest, tc.keys)+tableT+appendFlow, nil)
			ch := p.Destination.ClickHouse
			if ch.Cluster != tc.cluster || !cmp.Equal(ch.ZooKeeper, tc.zookeeper) || ch.ZooKeeperPath != tc.path || ch.ReplicaName != tc.replica {
				t.Fatalf("cluster %q zookeeper %v path %q replica %q; want %q %v %q %q", ch.Cluster, ch.ZooKeeper, ch.ZooKeeperPath, ch.ReplicaName,
					tc.cluster, tc.zookeeper, tc.path, tc.replica)
			}
		})
	}
}

func TestResolvedValues(t *testing.T) {
	src := `pipeline: shop
timezone: Europe/Berlin
metrics: {listen: "127.0.0.1:9090"}
kafka:
  brokers: kafka-1:9092
  group: shop-consumers
  session_timeout: 6s
  sasl: {user: u, password: p}
destination:
  clickhouse: {addr: [ch:9000], database: shop, password: "${PW}", read_timeout: 2m, settings: {max_threads: 4}}
tables:
  - name: t
    partition_by: [day]
    order_by: [id]
  - name: u
  - name: u2
  - name: u3
flows:
  - name: f
    target: t
    kind: append
    source: {kafka: {topic: t1, columns: [{name: id, type: int64}, {name: day, type: date}, {name: v, type: "decimal(12, 3)"}]}}
    batch: {rows: 100_000, bytes: 32MiB, wait: 250ms}
  - name: g
    target: t
    kind: append
    source: {kafka: {topic: t0, columns: [{name: id, type: int64}, {name: w, type: string}]}}
  - name: c
    target: u
    kind: auto_cdc
    source: {kafka: {topic: t2, columns: [{name: id, type: int64, nullable: true}, {name: s, type: int64}]}}
    keys: [id]
    sequence_by: s
    tombstone_retention: 7d
    stored_as_scd_type: 2
  - name: c2
    target: u2
    kind: auto_cdc
    source: {kafka: {topic: t3, columns: [{name: id, type: int64}, {name: s, type: date}, {name: n, type: int64}]}}
    keys: [id]
    sequence_by: [s, n]
    stored_as_scd_type: 2
  - name: s
    target: u3
    kind: auto_cdc_from_snapshot
    source: {snapshots: {path: "snap/{version}/*.jsonl", columns: [{name: id, type: int64}]}}
    snapshot_version_type: int64
    keys: [id]
    stored_as_scd_type: 2
`
	p := mustParse(t, src, map[string]string{"PW": "s3cret"})
	if p.Location.String() != "Europe/Berlin" || p.Metrics.Listen != "127.0.0.1:9090" {
		t.Errorf("location %v metrics %+v", p.Location, p.Metrics)
	}
	k := p.Kafka
	if !cmp.Equal(k.Brokers, []string{"kafka-1:9092"}) || k.SessionTimeout != 6*time.Second || k.SASL.Mechanism != SASLPlain || p.Group() != "shop-consumers" {
		t.Errorf("kafka %+v sasl %+v", k, k.SASL)
	}
	ch := p.Destination.ClickHouse
	wantCH := &ClickHouse{Addr: []string{"ch:9000"}, Database: "shop", Username: "default", Password: "s3cret", ReadTimeout: 2 * time.Minute, Settings: map[string]string{"max_threads": "4"}}
	if diff := cmp.Diff(wantCH, ch); diff != "" {
		t.Errorf("clickhouse (-want +got):\n%s", diff)
	}
	if got := p.Flow("f").Batch; got != (BatchLimits{Rows: 100000, Bytes: 32 << 20, Wait: 250 * time.Millisecond}) {
		t.Errorf("batch %+v", got)
	}
	if got := p.Flow("c").TombstoneRetention; got != 7*24*time.Hour {
		t.Errorf("tombstone_retention %v", got)
	}
	schemas := []struct {
		table string
		want  []batch.Column
	}{
		{"t", []batch.Column{ // union of f and g: columns one flow lacks become nullable
			{Name: "id", Type: batch.Int64},
			{Name: "day", Type: batch.Date, Nullable: true},
			{Name: "v", Type: batch.Decimal(12, 3), Nullable: true},
			{Name: "w", Type: batch.String, Nullable: true},
		}},
		{"u", []batch.Column{ // keys are never null in the target; intervals typed like the sequence
			{Name: "id", Type: batch.Int64},
			{Name: "s", Type: batch.Int64},
			{Name: StartAtColumn, Type: batch.Int64, Nullable: true},
			{Name: EndAtColumn, Type: batch.Int64, Nullable: true},
		}},
		{"u2", []batch.Column{ // a list sequence: intervals as JSON text
			{Name: "id", Type: batch.Int64},
			{Name: "s", Type: batch.Date},
			{Name: "n", Type: batch.Int64},
			{Name: StartAtColumn, Type: batch.String, Nullable: true},
			{Name: EndAtColumn, Type: batch.String, Nullable: true},
		}},
		{"u3", []batch.Column{ // snapshot versions type the intervals
			{Name: "id", Type: batch.Int64},
			{Name: StartAtColumn, Type: batch.Int64, Nullable: true},
			{Name: EndAtColumn, Type: batch.Int64, Nullable: true},
		}},
	}
	for _, s := range schemas {
		if diff := cmp.Diff(batch.Schema{Columns: s.want}, p.Table(s.table).Schema); diff != "" {
			t.Errorf("table %s schema (-want +got):\n%s", s.table, diff)
		}
	}
	if tbl := p.Table("t"); tbl.CDC || tbl.SCDType != 0 || !cmp.Equal(tbl.PartitionBy, []string{"day"}) {
		t.Errorf("table t: %+v", tbl)
	}
	if got := p.FlowsOf("t"); len(got) != 2 || got[0].Name != "f" || got[1].Name != "g" {
		t.Errorf("FlowsOf(t) = %v", got)
	}
	if p.Table("nope") != nil || p.Flow("nope") != nil {
		t.Error("unknown names found")
	}
}

func TestSourceSchemaFallback(t *testing.T) {
	cases := []struct {
		name string
		src  string
		flow string
		want []string
	}{
		{"kafka without columns decodes the target's", header + `tables:
  - name: t
    columns: [{name: id, type: int64}, {name: __START_AT, type: int64, nullable: true}, {name: __END_AT, type: int64, nullable: true}]
flows:
  - name: f
    target: t
    kind: auto_cdc
    source: {kafka: {topic: a}}
    keys: [id]
    sequence_by: id
    stored_as_scd_type: 2
`, "f", []string{"id"}},
		{"declared columns win", header + `tables:
  - name: t
    columns: [{name: id, type: int64}, {name: x, type: string, nullable: true}]
flows:
  - name: f
    target: t
    kind: append
    source: {kafka: {topic: a, columns: [{name: id, type: int64}]}}
`, "f", []string{"id"}},
		{"jsonl files decode the target's", header + `tables:
  - name: t
    columns: [{name: id, type: int64}, {name: x, type: string, nullable: true}]
flows:
  - name: f
    target: t
    kind: append
    source: {files: {path: "a/*.jsonl"}}
`, "f", []string{"id", "x"}},
		{"parquet files carry their own", header + `tables:
  - name: t
    columns: [{name: id, type: int64}]
flows:
  - name: f
    target: t
    kind: append
    source: {files: {path: "a/*.parquet"}}
`, "f", []string{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := mustParse(t, tc.src, nil)
			got := p.Flow(tc.flow).SourceSchema().Names()
			if !cmp.Equal(got, tc.want) {
				t.Errorf("SourceSchema = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestAnchorsAndMerge(t *testing.T) {
	p := mustParse(t, header+`tables:
  - name: t
    columns: &cols
      - {name: id, type: int64}
      - {name: v, type: string, nullable: true}
flows:
  - &base
    name: f
    target: t
    kind: append
    source: {kafka: {topic: a, columns: *cols}}
    batch: {rows: 10}
  - <<: *base
    name: g
    source: {kafka: {topic: b, columns: *cols}}
`, nil)
	g := p.Flow("g")
	if g == nil || g.Target != "t" || g.Kind != KindAppend || g.Batch.Rows != 10 || g.Source.Kafka.Topic != "b" || len(g.Source.Kafka.Columns) != 2 {
		t.Errorf("merged flow %+v", g)
	}
}

func TestEnv(t *testing.T) {
	cases := []struct {
		name string
		src  string // with marks for the expected problems
		env  map[string]string
		want string // the clickhouse password when valid
	}{
		{"set", "password: \"${PW}\"", map[string]string{"PW": "x"}, "x"},
		{"plain scalar", "password: ${PW}", map[string]string{"PW": "x y"}, "x y"},
		{"several and text around", "password: 'a-${A}-${B}-$HOME-$'", map[string]string{"A": "1", "B": "2"}, "a-1-2-$HOME-$"},
		{"escaped", "password: \"$${PW} and $${\"", nil, "${PW} and ${"},
		{"empty value", "password: \"${PW}\"", map[string]string{"PW": ""}, ""},
		{"not recursive", "password: \"${PW}\"", map[string]string{"PW": "${X}"}, "${X}"},
		{"not in comments", "password: p # ${UNSET}", nil, "p"},
		{"block scalar", "password: |-\n      ${PW}", map[string]string{"PW": "x"}, "x"},
		{"unset", "password: \"${NOPE}\" #! destination.clickhouse.password: environment variable NOPE is not set", nil, ""},
		{"two unset on one line", "password: \"${A}${B}\" #! destination.clickhouse.password: variable A is not set #! destination.clickhouse.password: variable B is not set", nil, ""},
		{"bad name", "password: \"${1X}\" #! destination.clickhouse.password: invalid variable name", nil, ""},
		{"unterminated", "password: \"${PW\" #! destination.clickhouse.password: unterminated", nil, ""},
		{"unset under an unknown key", "pasword: \"${NOPE}\" #! destination.clickhouse.pasword: did you mean #! : NOPE is not set", nil, ""},
		{"not in keys", "${PW}: x #! destination.clickhouse.${PW}: unknown key", map[string]string{"PW": "password"}, ""},
		{"int field", "dial_timeout: ${T}", map[string]string{"T": "3s"}, ""},
		{"default when unset", "password: \"${PW:-dflt}\"", nil, "dflt"},
		{"default when empty", "password: \"${PW:-dflt}\"", map[string]string{"PW": ""}, "dflt"},
		{"default not used", "password: \"${PW:-dflt}\"", map[string]string{"PW": "x"}, "x"},
		{"empty default", "password: \"a${PW:-}b\"", nil, "ab"},
		{"required set", "password: \"${PW:?set the password}\"", map[string]string{"PW": "x"}, "x"},
		{"required unset", "password: \"${PW:?set PW to the ClickHouse password}\" #! destination.clickhouse.password: environment variable PW: set PW to the ClickHouse password", nil, ""},
		{"required empty", "password: \"${PW:?}\" #! destination.clickhouse.password: environment variable PW: not set", map[string]string{"PW": ""}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := "pipeline: shop\ndestination:\n  clickhouse:\n    addr: [a:1]\n    " + tc.src + "\n"
			if len(marks(src)) > 0 {
				checkMarks(t, src, tc.env)
				return
			}
			p := mustParse(t, src, tc.env)
			if tc.name == "int field" {
				if p.Destination.ClickHouse.DialTimeout != 3*time.Second {
					t.Errorf("dial_timeout %v", p.Destination.ClickHouse.DialTimeout)
				}
				return
			}
			if got := p.Destination.ClickHouse.Password; got != tc.want {
				t.Errorf("password %q, want %q", got, tc.want)
			}
		})
	}
}

// TestEnvLines checks that unset variables are reported at their own lines,
// all of them, and not in comments.
func TestEnvLines(t *testing.T) {
	src := `pipeline: shop
# ${IN_A_COMMENT}
kafka: {brokers: ["${BROKER}"]} #! kafka.brokers[0]: BROKER is not set
destination:
  clickhouse:
    addr: [a:1]
    username: ${USER_X} #! destination.clickhouse.username: USER_X is not set
    password: "${PASS}" # ${ALSO_A_COMMENT}
`
	checkMarks(t, src, map[string]string{"PASS": "p"})
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	src := header + tableT + appendFlow + "    source_note: x\n"
	src = strings.Replace(src, "path: ./data", `path: "${SLUICE_TEST_DATA}"`, 1)
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SLUICE_TEST_DATA", "data")
	_, err := Load(path)
	var ps Problems
	if !errors.As(err, &ps) || len(ps) != 1 || ps[0].File != path || ps[0].Line != 16 {
		t.Fatalf("Load invalid: %v", err)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(src, "    source_note: x\n", "", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if p.Destination.Local.Path != "data" || p.Dir != dir || p.File != path {
		t.Errorf("local %+v dir %q file %q", p.Destination.Local, p.Dir, p.File)
	}
	if got := p.Path(p.Destination.Local.Path); got != filepath.Join(dir, "data") {
		t.Errorf("Path = %q", got)
	}
	if got := p.Path("/abs"); got != "/abs" {
		t.Errorf("Path(/abs) = %q", got)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil || errors.As(err, &ps) {
		t.Errorf("Load of a missing file: %v", err)
	}
}

// TestValidateBuilt checks Validate on a pipeline built in code: defaults
// are not mistaken for keys written, and rules still apply.
func TestValidateBuilt(t *testing.T) {
	p := &Pipeline{
		Pipeline:    "shop",
		Destination: Destination{Local: &Local{Path: "d"}},
		Tables:      []Table{{Name: "t"}},
		Flows: []Flow{{
			Name: "f", Target: "t", Kind: KindAppend,
			Source: Source{Files: &FilesSource{Path: "a.parquet"}},
		}},
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if p.Flows[0].Start != StartEarliest || p.Flows[0].Source.Files.Format != FormatParquet {
		t.Errorf("defaults not applied: %+v", p.Flows[0])
	}
	if err := p.Validate(); err != nil {
		t.Fatalf("second Validate: %v", err)
	}
	p.Flows[0].Keys = []string{"id"}
	err := p.Validate()
	var ps Problems
	if !errors.As(err, &ps) || len(ps) != 1 || ps[0].Path != "flows[0].keys" {
		t.Errorf("Validate with keys on an append flow: %v", err)
	}
}

func TestParseHelpers(t *testing.T) {
	durations := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"48h", 48 * time.Hour, true},
		{"2d", 48 * time.Hour, true},
		{"1h30m", 90 * time.Minute, true},
		{"d", 0, false},
		{"2w", 0, false},
		{"999999999d", 0, false},
	}
	for _, d := range durations {
		got, err := parseDuration(d.in)
		if (err == nil) != d.ok || got != d.want {
			t.Errorf("parseDuration(%q) = %v, %v", d.in, got, err)
		}
	}
	sizes := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"1024", 1024, true},
		{"32MiB", 32 << 20, true},
		{"1 GB", 1e9, true},
		{"4kib", 4096, true},
		{"1_000", 1000, true},
		{"1.5MiB", 0, false},
		{"MiB", 0, false},
		{"99999999999GiB", 0, false},
	}
	for _, s := range sizes {
		got, err := parseSize(s.in)
		if (err == nil) != s.ok || got != s.want {
			t.Errorf("parseSize(%q) = %v, %v", s.in, got, err)
		}
	}
}

func TestExprEnv(t *testing.T) {
	p := mustParse(t, header+tableT+cdcFlow, nil)
	env := ExprEnv(p.Flow("f"))
	want := map[string]any{
		"id": int64(0), "name": "", "op": "", "seq": int64(0),
		"_kafka_topic": "", "_kafka_partition": int64(0), "_kafka_offset": int64(0),
		"_kafka_timestamp": time.Time{}, "_kafka_key": []byte(nil),
	}
	if diff := cmp.Diff(want, env); diff != "" {
		t.Errorf("ExprEnv (-want +got):\n%s", diff)
	}
}

// TestEveryStructOfTheSpecIsKnownUpFront checks that decoding never adds
// to the shared table of struct fields (which would race under concurrent
// Parse): every struct type of the spec is in it from init.
func TestEveryStructOfTheSpecIsKnownUpFront(t *testing.T) {
	for _, typ := range []reflect.Type{reflect.TypeFor[ComputedColumn](), reflect.TypeFor[Expectation](), reflect.TypeFor[Column](), reflect.TypeFor[Incremental]()} {
		if _, ok := structInfos[typ]; !ok {
			t.Errorf("%v is not in the field tables built at init", typ)
		}
	}
}

// TestDevDataset checks that a dev run gets a dataset and consumer groups
// of its own.
func TestDevDataset(t *testing.T) {
	at := time.Date(2026, 12, 2, 7, 15, 0, 0, time.UTC)
	p := &Pipeline{Pipeline: "shop", Kafka: &Kafka{}, Destination: Destination{ClickHouse: &ClickHouse{Database: "prod"}}}
	f := &Flow{Name: "orders"}
	if got := p.DevDataset(at); got != "prod_20261202071500" || p.Destination.ClickHouse.Database != got {
		t.Fatalf("dataset %q (database %q), want prod_20261202071500", got, p.Destination.ClickHouse.Database)
	}
	if g := p.FlowGroup(f); g != "sluice-shop-dev-20261202071500.orders" {
		t.Fatalf("group %q, want sluice-shop-dev-20261202071500.orders", g)
	}
	l := &Pipeline{Pipeline: "shop", Destination: Destination{Local: &Local{Path: "./data/"}}}
	if got := l.DevDataset(at); got != "data_20261202071500" {
		t.Fatalf("local dataset %q, want data_20261202071500", got)
	}
}
