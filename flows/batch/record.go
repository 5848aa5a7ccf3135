package batch

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/zeebo/xxh3"
)

// Record is one raw message of a source before decoding. For Kafka every
// field is set; a line of a file has Topic set to the file's name,
// Partition to LinePartition and Offset to its line number (from 1).
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Timestamp time.Time
	Key       []byte // nil for a null key
	Value     []byte // nil for a tombstone
	// Raw is the message's own bytes when Value is their decoding (a
	// message of a schema registry's wire format, as JSON text); nil when
	// Value is the message.
	Raw []byte
}

// Payload returns the message's bytes as read, for a dead letter.
func (r *Record) Payload() []byte {
	if r.Raw != nil {
		return r.Raw
	}
	return r.Value
}

// LinePartition is the Partition of a Record that is a line of a file.
const LinePartition = -1

// Position returns the record's position as dead letters print it:
// "partition/offset", or the line number of a line of a file.
func (r *Record) Position() string {
	if r.Partition == LinePartition {
		return strconv.FormatInt(r.Offset, 10)
	}
	return strconv.FormatInt(int64(r.Partition), 10) + "/" + strconv.FormatInt(r.Offset, 10)
}

// Names of the Kafka metadata fields a source may declare as columns, and
// the types they decode as. _kafka_key may also be declared string.
const (
	FieldKafkaTopic     = "_kafka_topic"
	FieldKafkaPartition = "_kafka_partition"
	FieldKafkaOffset    = "_kafka_offset"
	FieldKafkaTimestamp = "_kafka_timestamp"
	FieldKafkaKey       = "_kafka_key"
)

// KafkaFields maps each Kafka metadata field to its natural type.
var KafkaFields = map[string]Type{
	FieldKafkaTopic:     String,
	FieldKafkaPartition: Int64,
	FieldKafkaOffset:    Int64,
	FieldKafkaTimestamp: Timestamp,
	FieldKafkaKey:       Bytes,
}

// DeadLetter is a record that could not be applied, with the reason.
type DeadLetter struct {
	Pipeline string
	Flow     string
	Target   string
	Source   string // topic or file
	Position string // "partition/offset", or the row number in the file
	Reason   string // short code: undecodable, missing_field, type_mismatch, ...
	Error    string // a sentence naming the field
	Payload  []byte // the raw message, or the row as JSON
	At       time.Time
}

// Dead-letter reason codes.
const (
	ReasonUndecodable  = "undecodable"
	ReasonMissingField = "missing_field"
	ReasonTypeMismatch = "type_mismatch"
	ReasonNullKey      = "null_key"
	ReasonNullSequence = "null_sequence"
	ReasonBadCursor    = "bad_cursor"
	ReasonInvalidUTF8  = "invalid_utf8"
	// ReasonSchemaContract: a field that is no column, or a value that does
	// not fit its inferred column, under schema_contract freeze.
	ReasonSchemaContract = "schema_contract"
)

// Names of sluice's own tables and metadata columns.
const (
	DeadLettersTable  = "_sluice_dead_letters"
	ExpectationsTable = "_sluice_expectations"
	LoadsTable        = "_sluice_loads"
	LoadIDColumn      = "_sluice_load_id"
)

// The columns that link the rows of a child table to their parents
// (docs/schema.md#child-tables). Unlike sluice's other metadata columns
// they are data columns of their tables, as their schemas list them.
const (
	IDColumn       = "_sluice_id"        // a row's id, of a table with child tables and of every child row
	ParentIDColumn = "_sluice_parent_id" // a child row: its parent row's _sluice_id
	ListIdxColumn  = "_sluice_list_idx"  // a child row: its position in its parent's list, from 0
	RootIDColumn   = "_sluice_root_id"   // a child row: the _sluice_id of the top row of its record
)

// AppendLinkID appends to dst the id of a row whose key is key (its
// source position, or its parent's id, table and list index, the parts
// joined by zero bytes): a 128-bit XXH3 hash, a stable and specified one,
// in URL-safe base64, 22 characters.
func AppendLinkID(dst, key []byte) []byte {
	sum := xxh3.Hash128(key).Bytes()
	// base64.RawURLEncoding of the 16 bytes, unrolled: a child row costs
	// one id, and the generic encoder took most of the time of one.
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	var text [22]byte
	for i := range 5 {
		v := uint(sum[3*i])<<16 | uint(sum[3*i+1])<<8 | uint(sum[3*i+2])
		text[4*i] = alphabet[v>>18&0x3f]
		text[4*i+1] = alphabet[v>>12&0x3f]
		text[4*i+2] = alphabet[v>>6&0x3f]
		text[4*i+3] = alphabet[v&0x3f]
	}
	text[20] = alphabet[sum[15]>>2]
	text[21] = alphabet[sum[15]<<4&0x3f]
	return append(dst, text[:]...)
}

// IsLinkColumn reports whether name is one of the link columns.
func IsLinkColumn(name string) bool {
	switch name {
	case IDColumn, ParentIDColumn, ListIdxColumn, RootIDColumn:
		return true
	}
	return false
}

// FlowRowTables are sluice's own tables that loads write rows of their
// flow into, with pipeline and flow columns: a reset of a flow removes its
// rows, which its replay writes again.
var FlowRowTables = []string{DeadLettersTable, ExpectationsTable, ReplayedTable}

// IsFlowRowTable reports whether name is one of FlowRowTables.
func IsFlowRowTable(name string) bool {
	return name == DeadLettersTable || name == ExpectationsTable || name == ReplayedTable
}

// ReplayedTable marks the dead letters a replay took up
// (docs/operations.md, "Replaying dead letters"): a row per dead letter,
// written in the load that applied it again (outcome replayed) or wrote it
// anew with its new reason (outcome failed). A dead letter with a mark is
// no longer pending.
const ReplayedTable = "_sluice_dead_letters_replayed"

// Outcomes of a replayed dead letter.
const (
	OutcomeReplayed = "replayed"
	OutcomeFailed   = "failed"
)

// ReplayedSchema is the schema of ReplayedTable: the dead letter's flow,
// source, position and the load that wrote it (dead_letter_load_id)
// identify it; the mark's own _sluice_load_id is the replay's load.
var ReplayedSchema = Schema{Columns: []Column{
	{Name: "pipeline", Type: String},
	{Name: "flow", Type: String},
	{Name: "target", Type: String},
	{Name: "source", Type: String},
	{Name: "position", Type: String},
	{Name: "dead_letter_load_id", Type: String},
	{Name: "outcome", Type: String},
	{Name: "at", Type: Timestamp},
}}

// VersionTable is the schema history (docs/schema.md#schema-history): a
// row per change of the pipeline's schema, written by the load that made
// it. A reset leaves it alone: history is not replayed.
const VersionTable = "_sluice_version"

// OwnTables are sluice's own tables that loads write rows into.
var OwnTables = []string{DeadLettersTable, ExpectationsTable, VersionTable, ReplayedTable}

// IsOwnTable reports whether name is one of OwnTables.
func IsOwnTable(name string) bool { return IsFlowRowTable(name) || name == VersionTable }

// VersionSchema is the schema of _sluice_version: version increases by one
// per change, version_hash identifies the schema (the SHA-256 of its JSON),
// flow names the flow whose load wrote the row.
var VersionSchema = Schema{Columns: []Column{
	{Name: "pipeline", Type: String},
	{Name: "version", Type: Int64},
	{Name: "version_hash", Type: String},
	{Name: "schema", Type: String},
	{Name: "flow", Type: String},
	{Name: "inserted_at", Type: Timestamp},
}}

// ExpectationsSchema is the schema of _sluice_expectations: per load, how
// many records each expectation of a flow counted (action warn or drop),
// and how many its where filter left out (action filtered, expectation
// empty).
var ExpectationsSchema = Schema{Columns: []Column{
	{Name: "pipeline", Type: String},
	{Name: "flow", Type: String},
	{Name: "target", Type: String},
	{Name: "expectation", Type: String},
	{Name: "action", Type: String},
	{Name: "rows", Type: Int64},
	{Name: "at", Type: Timestamp},
}}

// OwnSchema returns the schema of one of OwnTables.
func OwnSchema(table string) Schema {
	switch table {
	case ExpectationsTable:
		return ExpectationsSchema
	case VersionTable:
		return VersionSchema
	case ReplayedTable:
		return ReplayedSchema
	}
	return DeadLetterSchema
}

// DeadLetterSchema is the schema of _sluice_dead_letters (without the load id
// column, which sinks add like on every table).
var DeadLetterSchema = Schema{Columns: []Column{
	{Name: "pipeline", Type: String},
	{Name: "flow", Type: String},
	{Name: "target", Type: String},
	{Name: "source", Type: String},
	{Name: "position", Type: String},
	{Name: "reason", Type: String},
	{Name: "error", Type: String},
	{Name: "payload", Type: Bytes, Nullable: true},
	{Name: "at", Type: Timestamp},
}}

// DeadLetterBatch converts dead letters into a batch of DeadLetterSchema.
func DeadLetterBatch(dls []DeadLetter) *Batch {
	b := New(DeadLetterSchema, len(dls))
	for _, d := range dls {
		b.Vectors[0].AppendString(d.Pipeline)
		b.Vectors[1].AppendString(d.Flow)
		b.Vectors[2].AppendString(d.Target)
		b.Vectors[3].AppendString(d.Source)
		b.Vectors[4].AppendString(d.Position)
		b.Vectors[5].AppendString(d.Reason)
		b.Vectors[6].AppendString(d.Error)
		if d.Payload == nil {
			b.Vectors[7].AppendNull()
		} else {
			b.Vectors[7].AppendBytes(d.Payload)
		}
		b.Vectors[8].AppendInt(d.At.UTC().UnixMicro())
	}
	return b
}

// Position is where a flow stands in one source partition: the next Kafka
// offset to read, or for files the file and how far it was read.
type Position struct {
	Topic     string `json:"topic,omitempty"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"` // next offset to read
	File      string `json:"file,omitempty"`
	RowGroup  int64  `json:"row_group,omitempty"` // next row group to read in File
	Done      bool   `json:"done,omitempty"`      // File was read to its end
}

// Positions are the positions a load reached, one per source partition or file.
type Positions []Position

// Encode renders the positions as the JSON stored in the ledger, sorted so
// that equal positions give equal text.
func (p Positions) Encode() string {
	s := append(Positions(nil), p...)
	sort.Slice(s, func(i, j int) bool {
		if s[i].Topic != s[j].Topic {
			return s[i].Topic < s[j].Topic
		}
		if s[i].File != s[j].File {
			return s[i].File < s[j].File
		}
		return s[i].Partition < s[j].Partition
	})
	if s == nil {
		s = Positions{}
	}
	out, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("batch: positions do not encode: %v", err))
	}
	return string(out)
}

// DecodePositions parses what Encode wrote.
func DecodePositions(text string) (Positions, error) {
	var p Positions
	if text == "" {
		return nil, nil
	}
	if err := json.Unmarshal([]byte(text), &p); err != nil {
		return nil, fmt.Errorf("positions %q: %w", text, err)
	}
	return p, nil
}

// LoadRecord is one committed load: one row of _sluice_loads.
type LoadRecord struct {
	LoadID      string
	Pipeline    string
	Flow        string
	Targets     []string
	Positions   Positions
	Rows        int64
	DeadLetters int64
	Generation  int64 // consumer group generation of the writer; 0 when none
	CommittedAt time.Time
	SchemaHash  string // the _sluice_version hash it was written under; "" when unknown
}

// LoadsSchema is the schema of _sluice_loads as shown to users. targets is a
// comma-separated list, positions the JSON of Positions.Encode.
var LoadsSchema = Schema{Columns: []Column{
	{Name: "load_id", Type: String},
	{Name: "pipeline", Type: String},
	{Name: "flow", Type: String},
	{Name: "targets", Type: String},
	{Name: "positions", Type: String},
	{Name: "rows", Type: Int64},
	{Name: "dead_letters", Type: Int64},
	{Name: "generation", Type: Int64},
	{Name: "committed_at", Type: Timestamp},
	{Name: "schema_version_hash", Type: String},
}}

// TopicPartition names a Kafka partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// Ledger is the set of committed loads of a pipeline, in commit order.
type Ledger struct {
	Loads []LoadRecord
}

// Generation returns the greatest writer generation among the committed loads
// of flow that reached partition tp, or -1 when there is none.
func (l *Ledger) Generation(flow string, tp TopicPartition) int64 {
	g := int64(-1)
	for _, ld := range l.Loads {
		if ld.Flow != flow {
			continue
		}
		for _, p := range ld.Positions {
			if p.Topic == tp.Topic && p.Partition == tp.Partition && ld.Generation > g {
				g = ld.Generation
			}
		}
	}
	return g
}
