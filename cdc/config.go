package cdc

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
)

// Names of the SCD type 2 interval columns.
const (
	StartAtColumn = "__START_AT"
	EndAtColumn   = "__END_AT"
)

// DefaultTombstoneRetention is how long deletes are remembered when
// Config.TombstoneRetention is zero.
const DefaultTombstoneRetention = 48 * time.Hour

// Config is one auto_cdc flow and its target, as the runner fills it from
// the spec (flows/spec.Flow and the target's spec.Table).
type Config struct {
	Pipeline string
	Flow     string
	Target   string // the target table's name

	// Source is the schema of the batches the flow applies (what its source
	// decodes).
	Source batch.Schema
	// Table is the target's schema as the spec resolved it: the selected
	// columns, plus __START_AT and __END_AT for SCD type 2 (typed like the
	// sequence; a string holding a JSON array for a list sequence). Empty:
	// derived from Source and the column selection. A table column that this
	// flow does not select is null in the rows its events write.
	Table batch.Schema
	// Kafka is true for a Kafka source: expressions then see the _kafka_
	// fields; otherwise they see _file_path.
	Kafka bool
	// Lenient is true for a target typed by its messages: a name the
	// expressions use that is no column yet is null in every record.
	Lenient bool

	Keys             []string // required
	SequenceBy       []string // required: compared left to right
	ApplyAsDeletes   string   // expression over the record: true means delete
	ApplyAsTruncates string   // expression: true means truncate; SCD type 1 only
	ColumnList       []string // the source columns kept; excludes ExceptColumnList
	ExceptColumnList []string // the source columns dropped
	SCDType          int      // 1 (default when 0) or 2

	TrackHistoryColumnList       []string // SCD type 2: the columns whose changes open a version
	TrackHistoryExceptColumnList []string // SCD type 2: every selected non-key column but these

	IgnoreNullUpdates                 bool     // every non-key column keeps its value on a null
	IgnoreNullUpdatesColumnList       []string // these columns do
	IgnoreNullUpdatesExceptColumnList []string // every non-key column but these does

	// TombstoneRetention is how long, in processing time, a delete is
	// remembered (and, for SCD type 2, the members of a coalesced version,
	// see the package documentation); default DefaultTombstoneRetention.
	TombstoneRetention time.Duration
	// ReplayFlows are the once-flows that replay history into the same
	// target (a legacy table migrated as events, see docs/operations.md).
	// An event of this flow older than its key's newest change when that
	// change came from one of them missed the per-key cut-over: it lands in
	// history (SCD type 2) or is ignored (SCD type 1), and Output.CutOvers
	// reports it.
	ReplayFlows []string
	// Snapshot is set for a flow that applies snapshots (the flow's
	// events are a snapshot's rows, at its version). On SCD type 2 its
	// OpSnapshot events are table-wide barriers, and its upserts mark their
	// key present in the snapshot (see TableState.Snapshots).
	Snapshot bool
	// FailOnError is on_error: fail: an event with a null key or sequence,
	// or whose expression cannot be evaluated, makes Apply return an
	// *EventError instead of a dead letter.
	FailOnError bool
	// Logger receives per-batch detail at Debug; nil discards.
	Logger *slog.Logger
}

// plan is a Config resolved against the schemas.
type plan struct {
	table    batch.Schema // the rows' schema
	names    []string     // data column names: the table without __START_AT/__END_AT
	types    []batch.Type // their types
	kinds    []vkind      // the kind of their non-null values
	dataIdx  []int        // table index of each data column
	src      []int        // source index of each data column, or -1
	isKey    []bool
	required []bool // the table column is not nullable
	eligible []bool // ignore-null applies
	tracked  []bool // SCD type 2: a change opens a version
	anyElig  bool

	keySrc   []int
	seqSrc   []int
	seqTypes []batch.Type

	scd2       bool
	startIdx   int // table index of __START_AT, -1 for SCD type 1
	endIdx     int
	listSeqAsJ bool // a list sequence is held as JSON text in the interval columns
}

var sequenceKinds = []batch.Kind{batch.KindInt64, batch.KindTimestamp, batch.KindDate, batch.KindString, batch.KindDecimal}

func (c *Config) resolve() (*plan, error) {
	p := &plan{startIdx: -1, endIdx: -1}
	src := c.Source
	if len(src.Columns) == 0 {
		return nil, fmt.Errorf("no source columns")
	}
	scd := c.SCDType
	if scd == 0 {
		scd = 1
	}
	if scd != 1 && scd != 2 {
		return nil, fmt.Errorf("stored_as_scd_type %d: want 1 or 2", c.SCDType)
	}
	p.scd2 = scd == 2
	if p.scd2 && c.ApplyAsTruncates != "" {
		return nil, fmt.Errorf("apply_as_truncates applies to SCD type 1 only")
	}
	if len(c.Keys) == 0 {
		return nil, fmt.Errorf("no keys")
	}
	if len(c.SequenceBy) == 0 {
		return nil, fmt.Errorf("no sequence_by")
	}
	for _, k := range c.Keys {
		i := src.Index(k)
		if i < 0 {
			return nil, fmt.Errorf("key column %q is not a source column", k)
		}
		p.keySrc = append(p.keySrc, i)
	}
	for _, s := range c.SequenceBy {
		i := src.Index(s)
		if i < 0 {
			return nil, fmt.Errorf("sequence column %q is not a source column", s)
		}
		t := src.Columns[i].Type
		if !slices.Contains(sequenceKinds, t.Kind) {
			return nil, fmt.Errorf("sequence column %s is %s: a sequence is int64, timestamp, date, string or decimal", s, t)
		}
		p.seqSrc = append(p.seqSrc, i)
		p.seqTypes = append(p.seqTypes, t)
	}
	if len(c.ColumnList) > 0 && len(c.ExceptColumnList) > 0 {
		return nil, fmt.Errorf("column_list and except_column_list exclude each other")
	}
	for _, list := range [][]string{c.ColumnList, c.ExceptColumnList} {
		for _, n := range list {
			if src.Index(n) < 0 {
				return nil, fmt.Errorf("column %q is not a source column", n)
			}
		}
	}
	selected := func(name string) bool {
		switch {
		case len(c.ColumnList) > 0:
			return slices.Contains(c.ColumnList, name)
		case len(c.ExceptColumnList) > 0:
			return !slices.Contains(c.ExceptColumnList, name)
		}
		return true
	}
	for _, k := range c.Keys {
		if !selected(k) {
			return nil, fmt.Errorf("key column %q must remain in the selected columns", k)
		}
	}

	table := c.Table
	if len(table.Columns) == 0 {
		for _, col := range src.Columns {
			if !selected(col.Name) {
				continue
			}
			if slices.Contains(c.Keys, col.Name) {
				col.Nullable = false
			}
			table.Columns = append(table.Columns, col)
		}
		if p.scd2 {
			it := p.seqTypes[0]
			if len(p.seqTypes) > 1 {
				it = batch.String
			}
			table.Columns = append(table.Columns,
				batch.Column{Name: StartAtColumn, Type: it, Nullable: true},
				batch.Column{Name: EndAtColumn, Type: it, Nullable: true})
		}
	}
	p.table = table
	for ti, col := range table.Columns {
		if col.Name == StartAtColumn || col.Name == EndAtColumn {
			if !p.scd2 {
				return nil, fmt.Errorf("column %s belongs to SCD type 2 tables", col.Name)
			}
			want := p.seqTypes[0]
			if len(p.seqTypes) > 1 {
				want = batch.String
				p.listSeqAsJ = true
			}
			if col.Type != want {
				return nil, fmt.Errorf("column %s is %s but the sequence is %s", col.Name, col.Type, want)
			}
			if col.Name == StartAtColumn {
				p.startIdx = ti
			} else {
				p.endIdx = ti
			}
			continue
		}
		si := src.Index(col.Name)
		if si >= 0 && !selected(col.Name) {
			si = -1
		}
		if si >= 0 && src.Columns[si].Type != col.Type {
			return nil, fmt.Errorf("column %s is %s in the table but %s in the source", col.Name, col.Type, src.Columns[si].Type)
		}
		if kindOf(col.Type) == vNull {
			return nil, fmt.Errorf("column %s has no type", col.Name)
		}
		p.names = append(p.names, col.Name)
		p.types = append(p.types, col.Type)
		p.kinds = append(p.kinds, kindOf(col.Type))
		p.dataIdx = append(p.dataIdx, ti)
		p.src = append(p.src, si)
		p.isKey = append(p.isKey, slices.Contains(c.Keys, col.Name))
		p.required = append(p.required, !col.Nullable)
	}
	if p.scd2 && (p.startIdx < 0 || p.endIdx < 0) {
		return nil, fmt.Errorf("an SCD type 2 table needs columns %s and %s", StartAtColumn, EndAtColumn)
	}
	for _, s := range src.Columns {
		if selected(s.Name) && !slices.Contains(p.names, s.Name) {
			return nil, fmt.Errorf("selected column %s is not a column of table %s", s.Name, c.Target)
		}
	}
	for _, k := range c.Keys {
		if !slices.Contains(p.names, k) {
			return nil, fmt.Errorf("key column %s is not a column of table %s", k, c.Target)
		}
	}

	// Track history: SCD type 2 only; default every non-key column.
	if !p.scd2 && (len(c.TrackHistoryColumnList) > 0 || len(c.TrackHistoryExceptColumnList) > 0) {
		return nil, fmt.Errorf("track_history lists apply to SCD type 2 only")
	}
	if len(c.TrackHistoryColumnList) > 0 && len(c.TrackHistoryExceptColumnList) > 0 {
		return nil, fmt.Errorf("track_history_column_list and track_history_except_column_list exclude each other")
	}
	if err := p.mask(&p.tracked, true, c.TrackHistoryColumnList, c.TrackHistoryExceptColumnList, "track_history"); err != nil {
		return nil, err
	}

	forms := 0
	if c.IgnoreNullUpdates {
		forms++
	}
	if len(c.IgnoreNullUpdatesColumnList) > 0 {
		forms++
	}
	if len(c.IgnoreNullUpdatesExceptColumnList) > 0 {
		forms++
	}
	if forms > 1 {
		return nil, fmt.Errorf("ignore_null_updates, ignore_null_updates_column_list and ignore_null_updates_except_column_list exclude each other")
	}
	if err := p.mask(&p.eligible, forms > 0, c.IgnoreNullUpdatesColumnList, c.IgnoreNullUpdatesExceptColumnList, "ignore_null_updates"); err != nil {
		return nil, err
	}
	for i, e := range p.eligible {
		if e && p.src[i] < 0 {
			p.eligible[i] = false // never in this flow's records: always null
		}
		p.anyElig = p.anyElig || p.eligible[i]
	}
	return p, nil
}

// mask sets one flag per data column: with list, the listed non-key
// columns; with except, every non-key column not listed; otherwise every
// non-key column when all is true, none when false.
func (p *plan) mask(dst *[]bool, all bool, list, except []string, what string) error {
	for _, n := range slices.Concat(list, except) {
		if !slices.Contains(p.names, n) {
			return fmt.Errorf("%s: column %q is not a selected column (%s)", what, n, strings.Join(p.names, ", "))
		}
	}
	m := make([]bool, len(p.names))
	for i, n := range p.names {
		if p.isKey[i] {
			continue
		}
		switch {
		case len(list) > 0:
			m[i] = slices.Contains(list, n)
		case len(except) > 0:
			m[i] = !slices.Contains(except, n)
		default:
			m[i] = all
		}
	}
	*dst = m
	return nil
}
