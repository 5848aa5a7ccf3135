package spec

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
)

// Flow kinds.
const (
	KindAppend              = "append"
	KindAutoCDC             = "auto_cdc"
	KindAutoCDCFromSnapshot = "auto_cdc_from_snapshot"
)

// Source formats.
const (
	FormatJSON     = "json"     // kafka: one JSON object per message
	FormatDebezium = "debezium" // kafka: the Debezium envelope; auto_cdc only
	FormatAvro     = "avro"     // kafka: one Avro record per message, schema registry wire format
	FormatProtobuf = "protobuf" // kafka: one Protobuf message per message, schema registry wire format
	FormatParquet  = "parquet"  // files, snapshots
	FormatJSONL    = "jsonl"    // files, snapshots: one JSON object per line
)

// Values of Flow.OnError.
const (
	OnErrorDeadLetter = "dead_letter"
	OnErrorFail       = "fail"
)

// Values of Flow.Start.
const (
	StartEarliest = "earliest"
	StartLatest   = "latest"
)

// Values of Flow.Write.
const (
	WriteAppend            = "append"
	WriteReplacePartitions = "replace_partitions"
)

// Values of Incremental.LastValueFunc.
const (
	LastValueMax = "max"
	LastValueMin = "min"
)

// Names of the SCD type 2 interval columns.
const (
	StartAtColumn = "__START_AT"
	EndAtColumn   = "__END_AT"
)

// FieldFilePath is the metadata field naming the file a record of a files or
// snapshots source came from.
const FieldFilePath = "_file_path"

// VersionPlaceholder is the path segment of a snapshots source that names
// the snapshot version.
const VersionPlaceholder = "{version}"

// Defaults applied to a valid spec.
const (
	DefaultTimezone           = "UTC"
	DefaultTombstoneRetention = 48 * time.Hour
	DefaultSCDType            = 1
)

// Pipeline is a parsed and validated spec. After Parse or Load every default
// is filled in.
type Pipeline struct {
	Pipeline    string      `yaml:"pipeline"`    // required; [a-z][a-z0-9_]*
	Timezone    string      `yaml:"timezone"`    // IANA zone name; default "UTC"
	Naming      string      `yaml:"naming"`      // names from the data: snake_case (default) or direct
	Metrics     *Metrics    `yaml:"metrics"`     // nil: no metrics endpoint
	Kafka       *Kafka      `yaml:"kafka"`       // required when a flow reads Kafka
	Destination Destination `yaml:"destination"` // required: exactly one of local or clickhouse
	Tables      []Table     `yaml:"tables"`
	Flows       []Flow      `yaml:"flows"`

	// File is the path the spec was read from ("" when parsed from memory),
	// Dir the folder relative paths in it are resolved against (see Path).
	File string `yaml:"-"`
	Dir  string `yaml:"-"`
	// Location is Timezone loaded.
	Location *time.Location `yaml:"-"`

	pos positions // where each key was written
}

// Metrics configures the Prometheus endpoint.
type Metrics struct {
	Listen string `yaml:"listen"` // required: host:port, e.g. ":9090"
}

// Kafka is the connection to the Kafka cluster every kafka source reads.
type Kafka struct {
	Brokers        []string      `yaml:"brokers,scalar"`  // required; host:port each
	Group          string        `yaml:"group"`           // consumer group prefix; default "sluice-<pipeline>"
	SessionTimeout time.Duration `yaml:"session_timeout"` // zero: the consumer's default (10s)
	TLS            *TLS          `yaml:"tls"`             // nil: plaintext
	SASL           *SASL         `yaml:"sasl"`            // nil: no authentication
}

// TLS configures a TLS connection. An empty tls: {} enables TLS with the
// system's root certificates.
type TLS struct {
	CAFile             string `yaml:"ca_file"`              // PEM roots; default the system's
	CertFile           string `yaml:"cert_file"`            // PEM client certificate; with key_file
	KeyFile            string `yaml:"key_file"`             // PEM client key; with cert_file
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"` // default false
}

// SASL holds SASL credentials.
type SASL struct {
	Mechanism string `yaml:"mechanism"` // PLAIN (default), SCRAM-SHA-256 or SCRAM-SHA-512
	User      string `yaml:"user"`      // required
	Password  string `yaml:"password"`  // required
}

// SASL mechanisms.
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
)

// Destination is where tables and state are written: exactly one field is set.
type Destination struct {
	Local      *Local      `yaml:"local"`
	ClickHouse *ClickHouse `yaml:"clickhouse"`
}

// Local is the embedded destination: Parquet tables and state on local disk.
type Local struct {
	Path string `yaml:"path"` // required; relative to the spec's folder
}

// ClickHouse is the production destination.
type ClickHouse struct {
	Addr        []string          `yaml:"addr,scalar"`  // required; host:port of the native protocol, each
	Database    string            `yaml:"database"`     // default "default"
	Username    string            `yaml:"username"`     // default "default"
	Password    string            `yaml:"password"`     // default empty
	TLS         *TLS              `yaml:"tls"`          // nil: plaintext
	DialTimeout time.Duration     `yaml:"dial_timeout"` // zero: the driver's default (30s)
	ReadTimeout time.Duration     `yaml:"read_timeout"` // zero: the driver's default (5m)
	Settings    map[string]string `yaml:"settings"`     // server settings sent with every query
	Compression string            `yaml:"compression"`  // lz4, zstd or none; empty: none to a loopback address, else lz4

	// Cluster names a cluster of the servers' remote_servers: every table
	// is created ON CLUSTER, replicated (docs/clickhouse.md, "Cluster
	// targets"). Empty: one server.
	Cluster       string   `yaml:"cluster"`
	ZooKeeper     []string `yaml:"zookeeper,scalar"` // required with cluster: host:port of its ZooKeeper ensemble, each
	ZooKeeperPath string   `yaml:"zookeeper_path"`   // with cluster; default /clickhouse/tables/{shard}/{database}/{table}
	ReplicaName   string   `yaml:"replica_name"`     // with cluster; default {replica}
}

// Defaults of a ClickHouse cluster's replicated tables: the macros every
// server of a cluster defines (shard, replica) and those ClickHouse fills
// in itself (database, table).
const (
	DefaultZooKeeperPath = "/clickhouse/tables/{shard}/{database}/{table}"
	DefaultReplicaName   = "{replica}"
)

// Table is a target table.
type Table struct {
	Name        string   `yaml:"name"`             // required; an identifier, not starting with _sluice_
	Columns     []Column `yaml:"columns"`          // optional: derived from the flows when left out
	OrderBy     []string `yaml:"order_by"`         // optional; columns of the table
	PartitionBy []string `yaml:"partition_by"`     // optional; columns of the table
	StateCache  int64    `yaml:"state_cache,size"` // CDC targets: bytes of key states cached in memory; zero: the runner's default (256 MiB)

	// Schema is the resolved schema: the declared columns, or those derived
	// from the flows whose columns the spec tells (Parquet sources without
	// declared columns take no part); plus __START_AT and __END_AT on an SCD
	// type 2 target. It has no columns when it depends on what only the data
	// tells (no flow's columns are known, or an SCD type 2 interval typed by
	// snapshot versions read from folder names); the runner resolves it then.
	// With a list sequence_by, __START_AT and __END_AT are string columns
	// holding a JSON array of the sequence values.
	Schema batch.Schema `yaml:"-"`
	// CDC is true when the table's flows are CDC flows (auto_cdc,
	// auto_cdc_from_snapshot), and then Keys and SCDType are their keys and
	// SCD type (1 or 2). A table no flow writes is an append table.
	CDC     bool     `yaml:"-"`
	Keys    []string `yaml:"-"`
	SCDType int      `yaml:"-"`

	Line int `yaml:"-"` // where the table is declared
}

// Column is a declared column.
type Column struct {
	Name     string     `yaml:"name"`                   // required
	Type     batch.Type `yaml:"type"`                   // required: string, int64, float64, bool, timestamp, date, decimal(P,S), bytes
	Nullable bool       `yaml:"nullable"`               // default false
	Unit     string     `yaml:"unit" json:",omitempty"` // timestamp columns: what an integer counts since the epoch: s, ms (default), us, ns
	Path     string     `yaml:"path" json:",omitempty"` // JSON sources: the nested field it takes, a.b.c
	Line     int        `yaml:"-"`
}

// Batch returns the column as the batch vocabulary spells it.
func (c Column) Batch() batch.Column {
	return batch.Column{Name: c.Name, Type: c.Type, Nullable: c.Nullable}
}

// ComputedColumn is a column a flow adds to each record from an expression
// over the record's columns (and the computed columns before it).
type ComputedColumn struct {
	Name     string     `yaml:"name"`     // required
	Type     batch.Type `yaml:"type"`     // required
	Expr     string     `yaml:"expr"`     // required; its value converts to Type exactly or the record is a dead letter
	Nullable bool       `yaml:"nullable"` // whether the expression may give nil
	Line     int        `yaml:"-"`
}

// Expectation is a data contract on each record of a flow.
type Expectation struct {
	Name        string `yaml:"name"`         // required; unique in the flow
	Expr        string `yaml:"expr"`         // required; boolean; false is a violation, null is not
	OnViolation string `yaml:"on_violation"` // warn (default: count it), drop (dead letter), fail (stop the flow)
	Line        int    `yaml:"-"`
}

// How names from the data become column names (Pipeline.Naming).
const (
	NamingSnakeCase = "snake_case"
	NamingDirect    = "direct"
)

// Expectation actions.
const (
	ViolationWarn = "warn"
	ViolationDrop = "drop"
	ViolationFail = "fail"
)

// Schema contract modes (Flow.SchemaContract), dlt's names.
const (
	ContractEvolve       = "evolve"        // add the column (columns) or a variant column (data_type)
	ContractFreeze       = "freeze"        // the record is a dead letter
	ContractDiscardRow   = "discard_row"   // the record is left out, and counted
	ContractDiscardValue = "discard_value" // the value is left out (NULL)
)

// SchemaContract governs what an append flow of JSON messages does with a
// field that is no column of its table (Columns) and with a value that
// does not fit its column's type (DataType); docs/schema.md#schema-contracts.
type SchemaContract struct {
	Columns  string `yaml:"columns" json:",omitempty"`
	DataType string `yaml:"data_type" json:",omitempty"`
	Line     int    `yaml:"-" json:"-"`
}

// DefaultMaxNesting is the max_nesting of a flow that sets none.
const DefaultMaxNesting = 4

// Nesting returns the flow's max_nesting.
func (f *Flow) Nesting() int {
	if f.MaxNesting != nil {
		return *f.MaxNesting
	}
	return DefaultMaxNesting
}

// Contract returns the flow's schema contract with its defaults: evolve
// for a flow whose columns its messages tell, else columns: discard_value
// (undeclared fields are ignored) and data_type: freeze (a value that does
// not fit its declared column is a dead letter).
func (f *Flow) Contract(p *Pipeline) SchemaContract {
	c := SchemaContract{Columns: ContractDiscardValue, DataType: ContractFreeze}
	if f.TypedByMessages(p) {
		c = SchemaContract{Columns: ContractEvolve, DataType: ContractEvolve}
	}
	if f.SchemaContract != nil {
		if f.SchemaContract.Columns != "" {
			c.Columns = f.SchemaContract.Columns
		}
		if f.SchemaContract.DataType != "" {
			c.DataType = f.SchemaContract.DataType
		}
	}
	return c
}

// Flow reads one source and writes one target table.
type Flow struct {
	Name   string `yaml:"name"`   // required; an identifier, not starting with _sluice_, unique
	Target string `yaml:"target"` // required; a table of tables
	Kind   string `yaml:"kind"`   // required: append, auto_cdc or auto_cdc_from_snapshot
	Once   bool   `yaml:"once"`   // run a single time, then never again (until a full refresh)
	Source Source `yaml:"source"` // required: exactly one of kafka, files, snapshots

	OnError string      `yaml:"on_error"` // dead_letter (default) or fail
	Start   string      `yaml:"start"`    // kafka: earliest (default) or latest, for a partition with no position yet
	Batch   BatchLimits `yaml:"batch"`

	// Rules over each decoded record, in this order (append and auto_cdc
	// flows; docs/schema.md): computed columns, a filter, expectations.
	ComputedColumns []ComputedColumn `yaml:"computed_columns" json:",omitempty"` // appended to the record's columns
	Where           string           `yaml:"where" json:",omitempty"`            // keep the records for which it is true
	Expectations    []Expectation    `yaml:"expectations" json:",omitempty"`     // data contracts on each record
	SchemaContract  *SchemaContract  `yaml:"schema_contract" json:",omitempty"`  // append flows of JSON messages: new fields, ill-typed values
	// MaxNesting is how many levels of nested objects a table typed by its
	// messages flattens into columns; nil: DefaultMaxNesting.
	MaxNesting *int `yaml:"max_nesting" json:",omitempty"`

	// Append flows.
	Write       string       `yaml:"write"`       // append (default) or replace_partitions
	Incremental *Incremental `yaml:"incremental"` // files sources: read a window by a cursor column

	// CDC flows (auto_cdc; those marked * also auto_cdc_from_snapshot).
	Keys                              []string      `yaml:"keys"`                                   // * required
	SequenceBy                        []string      `yaml:"sequence_by,scalar"`                     // required: a column, or a list compared left to right
	ApplyAsDeletes                    string        `yaml:"apply_as_deletes"`                       // expression: true means delete
	ApplyAsTruncates                  string        `yaml:"apply_as_truncates"`                     // expression: true means truncate; SCD type 1 only
	ColumnList                        []string      `yaml:"column_list"`                            // * the source columns kept
	ExceptColumnList                  []string      `yaml:"except_column_list"`                     // * the source columns dropped
	StoredAsSCDType                   int           `yaml:"stored_as_scd_type"`                     // * 1 (default) or 2
	TrackHistoryColumnList            []string      `yaml:"track_history_column_list"`              // * SCD type 2 only
	TrackHistoryExceptColumnList      []string      `yaml:"track_history_except_column_list"`       // * SCD type 2 only
	IgnoreNullUpdates                 bool          `yaml:"ignore_null_updates"`                    // default false
	IgnoreNullUpdatesColumnList       []string      `yaml:"ignore_null_updates_column_list"`        //
	IgnoreNullUpdatesExceptColumnList []string      `yaml:"ignore_null_updates_except_column_list"` //
	TombstoneRetention                time.Duration `yaml:"tombstone_retention"`                    // * default 48h
	ReplayValidTo                     string        `yaml:"replay_valid_to"`                        // a column: emit a delete at its value

	// auto_cdc_from_snapshot flows.
	SnapshotVersion     string     `yaml:"snapshot_version"`      // files sources: the version of the snapshot (required)
	SnapshotVersionType batch.Type `yaml:"snapshot_version_type"` // int64, date, timestamp, string or decimal(P,S); default inferred

	Line int `yaml:"-"` // where the flow is declared

	// fallback is the target's declared columns, which a source without
	// declared columns decodes (see SourceSchema).
	fallback batch.Schema
	// data is the schema its files carry, for a flow whose columns only
	// its data tells (see ResolveFromData).
	data batch.Schema
}

// BatchLimits bound a batch; zero means the consumer's default.
type BatchLimits struct {
	Rows  int           `yaml:"rows"`       // records per batch; default 100000
	Bytes int64         `yaml:"bytes,size"` // bytes per batch: an integer or 32MiB, 1GB, ...; default 32MiB
	Wait  time.Duration `yaml:"wait"`       // how long a partial batch waits for more; default 1s
}

// Incremental reads a files source by a cursor column: each run loads the
// rows whose cursor lies past the last value seen (minus lag).
type Incremental struct {
	Cursor        string     `yaml:"cursor"`          // required: a source column
	Type          batch.Type `yaml:"type"`            // the cursor's type; default the column's declared type
	InitialValue  string     `yaml:"initial_value"`   // rows before it are never loaded
	EndValue      string     `yaml:"end_value"`       // rows from it on are never loaded
	LastValueFunc string     `yaml:"last_value_func"` // max (default) or min
	Lag           string     `yaml:"lag"`             // with max: re-read this far behind the last value
}

// Source is where a flow reads: exactly one field is set.
type Source struct {
	Kafka     *KafkaSource     `yaml:"kafka"`
	Files     *FilesSource     `yaml:"files"`
	Snapshots *SnapshotsSource `yaml:"snapshots"`
}

// KafkaSource reads a topic.
type KafkaSource struct {
	Topic   string   `yaml:"topic"`   // required
	Format  string   `yaml:"format"`  // json (default), debezium, avro or protobuf
	Columns []Column `yaml:"columns"` // default the target table's declared columns
	// SchemaRegistry is where the writer schemas of Avro and Protobuf
	// messages are: required for formats avro and protobuf; with format
	// debezium, messages in the registry's wire format (Avro or Protobuf
	// converters) are read through it, JSON ones as they are.
	SchemaRegistry *SchemaRegistry `yaml:"schema_registry" json:",omitempty"`
	// UnavailableValuePlaceholder (format debezium) is the text Debezium
	// puts in a column whose value it did not capture (PostgreSQL TOAST):
	// such a column keeps its previous value. Default
	// DefaultUnavailablePlaceholder.
	UnavailableValuePlaceholder string `yaml:"unavailable_value_placeholder" json:",omitempty"`
	// Tombstones (auto_cdc flows) is what a message with a null value
	// becomes: TombstonesDelete, TombstonesSkip or TombstonesDeadLetter.
	// Default delete for format debezium, dead_letter for json.
	Tombstones string `yaml:"tombstones" json:",omitempty"`
	// KeyFormat is how a tombstone's message key names the key it deletes:
	// json (default) or string (the text of the flow's one key column).
	KeyFormat string `yaml:"key_format" json:",omitempty"`
}

// SchemaRegistry is a Confluent-compatible Schema Registry.
type SchemaRegistry struct {
	URL      string `yaml:"url"`      // required: http:// or https://
	Username string `yaml:"username"` // with password: HTTP basic authentication
	Password string `yaml:"password"`
	TLS      *TLS   `yaml:"tls"` // https: roots and client certificate; default the system's roots
}

// ReadsJSON reports whether the source's messages reach the decoders as
// JSON objects of the record's fields: format json, and avro and protobuf
// rewritten as JSON (docs/formats.md).
func (k *KafkaSource) ReadsJSON() bool {
	switch k.Format {
	case "", FormatJSON, FormatAvro, FormatProtobuf:
		return true
	}
	return false
}

// What a tombstone (a message with a null value) becomes.
const (
	TombstonesDelete     = "delete"      // the key its message key names is deleted
	TombstonesSkip       = "skip"        // nothing
	TombstonesDeadLetter = "dead_letter" // a dead letter, reason undecodable
)

// TombstoneMode returns what the source's tombstones become in flow f:
// by default delete for Debezium, unless a key of f is a computed column,
// which no message key gives (then skip, as before tombstones deleted).
func (k *KafkaSource) TombstoneMode(f *Flow) string {
	switch {
	case k.Tombstones != "":
		return k.Tombstones
	case k.Format == FormatDebezium && !f.computedKey():
		return TombstonesDelete
	case k.Format == FormatDebezium:
		return TombstonesSkip
	}
	return TombstonesDeadLetter
}

// computedKey reports whether a key of f is one of its computed columns.
func (f *Flow) computedKey() bool { return slices.ContainsFunc(f.Keys, f.computes) }

// computes reports whether name is one of f's computed columns.
func (f *Flow) computes(name string) bool {
	return slices.ContainsFunc(f.ComputedColumns, func(cc ComputedColumn) bool { return cc.Name == name })
}

// KeyFormatOrDefault returns the format of the source's message keys.
func (k *KafkaSource) KeyFormatOrDefault() string {
	if k.KeyFormat != "" {
		return k.KeyFormat
	}
	return "json"
}

// DefaultUnavailablePlaceholder is Debezium's default
// unavailable.value.placeholder.
const DefaultUnavailablePlaceholder = "__debezium_unavailable_value"

// Placeholder returns the source's unavailable-value placeholder.
func (k *KafkaSource) Placeholder() string {
	if k.UnavailableValuePlaceholder != "" {
		return k.UnavailableValuePlaceholder
	}
	return DefaultUnavailablePlaceholder
}

// FilesSource reads files matching a glob (** matches any folders).
type FilesSource struct {
	Path    string   `yaml:"path"`    // required; relative to the spec's folder
	Format  string   `yaml:"format"`  // parquet or jsonl; default from the path's extension
	Columns []Column `yaml:"columns"` // parquet: optional; jsonl: default the target's declared columns
	// Parallel is how many files are read at once (their chunks are loaded
	// one at a time, in the order they are read); default the number of
	// CPUs.
	Parallel int `yaml:"parallel"`
}

// SnapshotsSource reads one full snapshot per {version} path segment.
type SnapshotsSource struct {
	Path    string   `yaml:"path"`    // required; exactly one whole segment is {version}
	Format  string   `yaml:"format"`  // parquet or jsonl; default from the path's extension
	Columns []Column `yaml:"columns"` // as for files
}

// Format returns the source's format.
func (s *Source) Format() string {
	switch {
	case s.Kafka != nil:
		return s.Kafka.Format
	case s.Files != nil:
		return s.Files.Format
	case s.Snapshots != nil:
		return s.Snapshots.Format
	}
	return ""
}

// Columns returns the source's declared columns.
func (s *Source) Columns() []Column {
	switch {
	case s.Kafka != nil:
		return s.Kafka.Columns
	case s.Files != nil:
		return s.Files.Columns
	case s.Snapshots != nil:
		return s.Snapshots.Columns
	}
	return nil
}

// Name returns the kind of the source: "kafka", "files", "snapshots", or ""
// when none is set.
func (s *Source) Name() string {
	switch {
	case s.Kafka != nil:
		return "kafka"
	case s.Files != nil:
		return "files"
	case s.Snapshots != nil:
		return "snapshots"
	}
	return ""
}

// Load reads the spec file at path, expands ${VAR} from the environment,
// parses and validates it. An invalid spec returns Problems.
func Load(path string) (*Pipeline, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("spec: %w", err)
	}
	p, err := Parse(data, path, os.LookupEnv)
	if err != nil {
		return nil, err
	}
	p.Dir = filepath.Dir(path)
	return p, nil
}

// Parse parses and validates a spec. filename only names the spec in
// problems. lookup resolves ${VAR}; nil means no variable is set. An invalid
// spec returns Problems, every one of them, and no pipeline.
func Parse(data []byte, filename string, lookup func(string) (string, bool)) (*Pipeline, error) {
	if lookup == nil {
		lookup = func(string) (string, bool) { return "", false }
	}
	p := &Pipeline{File: filename}
	var probs Problems
	d := newDecoder(filename, lookup, &probs)
	root, ok := d.parse(data)
	if !ok {
		return nil, probs // the YAML does not parse: nothing to check
	}
	d.decode(root, p)
	p.pos = d.pos
	probs = append(probs, p.check(d.bad)...)
	if len(probs) > 0 {
		probs.sort()
		return nil, probs
	}
	p.applyDefaults()
	return p, nil
}

// Table returns the named table, or nil.
func (p *Pipeline) Table(name string) *Table {
	for i := range p.Tables {
		if p.Tables[i].Name == name {
			return &p.Tables[i]
		}
	}
	return nil
}

// Flow returns the named flow, or nil.
func (p *Pipeline) Flow(name string) *Flow {
	for i := range p.Flows {
		if p.Flows[i].Name == name {
			return &p.Flows[i]
		}
	}
	return nil
}

// FlowsOf returns the flows that write the named table, in spec order.
func (p *Pipeline) FlowsOf(table string) []*Flow {
	var out []*Flow
	for i := range p.Flows {
		if p.Flows[i].Target == table {
			out = append(out, &p.Flows[i])
		}
	}
	return out
}

// Group returns the consumer group prefix: kafka.group, or "sluice-<pipeline>".
func (p *Pipeline) Group() string {
	if p.Kafka != nil && p.Kafka.Group != "" {
		return p.Kafka.Group
	}
	return "sluice-" + p.Pipeline
}

// FlowGroup returns the consumer group of a flow: <group>.<flow>.
func (p *Pipeline) FlowGroup(f *Flow) string { return p.Group() + "." + f.Name }

// Path resolves a path written in the spec: an absolute path is returned as
// is, a relative one is joined to the spec's folder.
func (p *Pipeline) Path(rel string) string {
	if rel == "" || filepath.IsAbs(rel) || p.Dir == "" {
		return rel
	}
	return filepath.Join(p.Dir, rel)
}

// SourceSchema returns the columns the flow's source decodes: its declared
// columns, or, when it declares none and its records need a schema (kafka and
// jsonl sources), the target table's declared columns (without __START_AT and
// __END_AT). For a Parquet source without declared columns it is the schema
// its files carry once ResolveFromData read it, else empty.
func (f *Flow) SourceSchema() batch.Schema {
	if cols := f.Source.Columns(); len(cols) > 0 {
		return columnsSchema(cols)
	}
	if len(f.fallback.Columns) > 0 {
		return f.fallback
	}
	return f.data
}

// RecordSchema returns the columns of the flow's records once decoded and
// given their computed columns: SourceSchema, then ComputedColumns.
func (f *Flow) RecordSchema() batch.Schema {
	s := f.SourceSchema()
	if len(f.ComputedColumns) == 0 {
		return s
	}
	out := batch.Schema{Columns: slices.Clone(s.Columns)}
	for _, c := range f.ComputedColumns {
		out.Columns = append(out.Columns, batch.Column{Name: c.Name, Type: c.Type, Nullable: c.Nullable})
	}
	return out
}

// DevDataset points the destination at a fresh dataset of its own for a
// development run started at now (update and run --dev): the ClickHouse
// database <database>_<YYYYMMDDhhmmss>, or locally the sibling folder
// <path>_<YYYYMMDDhhmmss>; and the flows at consumer groups of their own,
// <group>-dev-<YYYYMMDDhhmmss>.<flow>, so that a dev run never takes
// partitions from the pipeline's live processes. It returns the dataset's
// name.
func (p *Pipeline) DevDataset(now time.Time) string {
	stamp := now.UTC().Format("20060102150405")
	if p.Kafka != nil {
		p.Kafka.Group = p.Group() + "-dev-" + stamp
	}
	if ch := p.Destination.ClickHouse; ch != nil {
		db := ch.Database
		if db == "" {
			db = "default"
		}
		ch.Database = db + "_" + stamp
		return ch.Database
	}
	if l := p.Destination.Local; l != nil {
		l.Path = filepath.Clean(l.Path) + "_" + stamp
		return l.Path
	}
	return ""
}

// SourceUnits returns the units declared for the timestamp columns the
// source decodes (its own columns, or the target's it decodes instead).
func (f *Flow) SourceUnits(p *Pipeline) map[string]string {
	return f.sourceColumnsBy(p, func(c Column) string { return c.Unit })
}

// SourcePaths returns the paths of the nested fields the columns the
// source decodes take (its own columns, or the target's it decodes
// instead).
func (f *Flow) SourcePaths(p *Pipeline) map[string]string {
	return f.sourceColumnsBy(p, func(c Column) string { return c.Path })
}

// sourceColumnsBy maps the columns the source decodes to what of(c)
// gives, where that is not empty; nil when none.
func (f *Flow) sourceColumnsBy(p *Pipeline, of func(Column) string) map[string]string {
	cols := f.Source.Columns()
	if len(cols) == 0 && len(f.fallback.Columns) > 0 {
		if t := p.Table(f.Target); t != nil {
			cols = t.Columns
		}
	}
	var out map[string]string
	for _, c := range cols {
		if v := of(c); v != "" {
			if out == nil {
				out = map[string]string{}
			}
			out[c.Name] = v
		}
	}
	return out
}

// DataTold reports whether only the flow's data tells its columns: a
// Parquet source that declares none, into a target that declares none.
func (f *Flow) DataTold(p *Pipeline) bool {
	if len(f.Source.Columns()) > 0 || needsColumns(&f.Source) && !f.InfersJSON() {
		return false
	}
	t := p.Table(f.Target)
	return t != nil && len(t.Columns) == 0
}

// InfersJSON reports whether the flow is a flow of JSON that declares no
// columns: an append or auto_cdc flow of Kafka messages of format json, or
// an append flow of the lines of JSONL files (not read incrementally: a
// cursor is a declared column).
// When its target declares none either, the decoder infers the columns
// from the messages and adds the new ones
// (docs/schema.md#tables-typed-by-their-json-messages).
func (f *Flow) InfersJSON() bool {
	switch s := &f.Source; {
	case f.Kind != KindAppend && f.Kind != KindAutoCDC:
		return false
	case s.Kafka != nil:
		return len(s.Kafka.Columns) == 0 && s.Kafka.ReadsJSON()
	case f.Kind != KindAppend:
		return false
	case s.Files != nil:
		return len(s.Files.Columns) == 0 && f.Incremental == nil && effectiveFormat(s.Files.Format, s.Files.Path) == FormatJSONL
	}
	return false
}

// TypedByMessages reports whether the flow's columns come from its JSON
// messages: it infers them (InfersJSON) and its target declares none.
func (f *Flow) TypedByMessages(p *Pipeline) bool { return f.InfersJSON() && f.DataTold(p) }

// ResolveFromData types the flows whose columns only their data tells with
// schema(f) (what their files carry now; empty when they have none yet) and
// resolves their tables' schemas again, as if those flows had declared the
// columns: every such table, or only those named. A table none of whose
// flows has data yet keeps an empty schema. Disagreements between flows are
// Problems, as Validate reports them. Tables not resolved again are left
// untouched, so that flows of other tables may read them meanwhile.
func (p *Pipeline) ResolveFromData(schema func(f *Flow) (batch.Schema, error), tables ...string) error {
	redo := map[string]bool{}
	for i := range p.Flows {
		f := &p.Flows[i]
		if !f.DataTold(p) || len(tables) > 0 && !slices.Contains(tables, f.Target) {
			continue
		}
		s, err := schema(f)
		if err != nil {
			return fmt.Errorf("flow %s: %w", f.Name, err)
		}
		f.data, redo[f.Target] = s, true
	}
	c := &checker{p: p}
	for ti := range p.Tables {
		if redo[p.Tables[ti].Name] {
			c.target(ti)
		}
	}
	if len(c.probs) > 0 {
		c.probs.sort()
		return c.probs
	}
	return nil
}

// ChildRoot returns the table typed by its data that name could be a
// child table of (<table>__<field>, docs/schema.md#child-tables), nil
// when none.
func (p *Pipeline) ChildRoot(name string) *Table {
	for i := range p.Flows {
		f := &p.Flows[i]
		if strings.HasPrefix(name, f.Target+"__") && f.HasChildren(p) {
			return p.Table(f.Target)
		}
	}
	return nil
}

// HasChildren reports whether the flow's target may have child tables:
// an append target typed by its data, an auto_cdc target typed by its
// messages or its files, or a snapshot target typed by its files
// (docs/schema.md#child-tables).
func (f *Flow) HasChildren(p *Pipeline) bool {
	cdc := f.Kind == KindAutoCDC && (f.InfersJSON() || f.Source.Files != nil) || f.Kind == KindAutoCDCFromSnapshot
	return (f.Kind == KindAppend || cdc) && f.DataTold(p)
}

// IsCDC reports whether the flow is an auto_cdc or auto_cdc_from_snapshot flow.
func (f *Flow) IsCDC() bool { return f.Kind == KindAutoCDC || f.Kind == KindAutoCDCFromSnapshot }

func columnsSchema(cols []Column) batch.Schema {
	s := batch.Schema{Columns: make([]batch.Column, len(cols))}
	for i, c := range cols {
		s.Columns[i] = c.Batch()
	}
	return s
}
