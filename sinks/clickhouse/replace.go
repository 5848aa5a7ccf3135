package clickhouse

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
)

// Replacing partitions (write: replace_partitions). A load that replaces
// partitions of an append target stages its rows as any load does. Each
// ReplacePartitions call turns the listed partition values into the ids
// ClickHouse gives those partitions: it inserts them (the partition columns
// only) into a short-lived list table created AS the target,
// _sluice_plist_<enc>__<table>, reads the ids from system.parts and drops
// it, so the ids are the server's own for exactly the values rows with
// those values get, and no value is ever written into SQL text. The ids go
// into the ledger row's replaced column, so the list is committed with the
// load; publication then runs, per listed id,
//
//	ALTER TABLE target REPLACE PARTITION ID '<id>' FROM staging
//
// (atomic per partition; from a staging table without rows in it, the
// partition ends up empty) and attaches the other staged partitions as an
// append load does. Recovery reads the list back from the ledger and
// finishes a half-done publication from the same staging table: a listed
// partition that already holds rows of the load was replaced (REPLACE swaps
// the whole partition at once), the others are replaced again.

// plistPrefix names a load's list table for one target:
// _sluice_plist_<enc>__<table>. It lives for the few statements of one
// ReplacePartitions call; recovery drops those a stopped process left.
const plistPrefix = "_sluice_plist_"

// replacedColumn is the column of _sluice_loads listing, as JSON, the
// partition ids a load replaces by table; empty for other loads.
const replacedColumn = "replaced"

// maxListInsert bounds the rows of one insert into a list table, so that
// no insert touches more partitions than ClickHouse's default
// max_partitions_per_insert_block (100).
const maxListInsert = 100

var _ sinks.PartitionLoad = (*load)(nil)

func plistName(enc, table string) string { return plistPrefix + enc + "__" + table }

// parsePlist splits a list table's name; ok is false for other names.
func parsePlist(name string) (enc, table string, ok bool) {
	rest, found := strings.CutPrefix(name, plistPrefix)
	if !found {
		return "", "", false
	}
	enc, table, found = strings.Cut(rest, "__")
	return enc, table, found && enc != "" && chsql.ValidIdent(table)
}

// ReplacePartitions makes the load replace, in table, the partitions listed
// in parts (one row per partition: the table's partition_by columns in
// order). See sinks.PartitionLoad. A load whose ReplacePartitions failed
// cannot commit: committing it would append rows that were meant to
// replace.
func (l *load) ReplacePartitions(ctx context.Context, table string, parts *batch.Batch) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != stateOpen {
		return fmt.Errorf("clickhouse: replace partitions of %s: load %s is %s", table, l.meta.LoadID, l.stateName())
	}
	var err error
	if l.s.sharded() {
		err = l.s.errReplaceShards(table)
	} else {
		err = l.replacePartitions(ctx, table, parts)
	}
	if err != nil && l.replaceErr == nil {
		l.replaceErr = err
	}
	return err
}

func (l *load) replacePartitions(ctx context.Context, table string, parts *batch.Batch) error {
	s := l.s
	if strings.HasPrefix(table, sluicePrefix) {
		return fmt.Errorf("clickhouse: replace partitions of %s: sluice writes that table itself", table)
	}
	info, err := s.info(ctx, table)
	if errors.Is(err, sinks.ErrUnknownTable) {
		if _, cerr := s.cdcInfo(ctx, table); cerr == nil {
			return fmt.Errorf("clickhouse: replace partitions of %s: it is a CDC target; only append targets have partitions replaced", table)
		}
	}
	if err != nil {
		return fmt.Errorf("clickhouse: replace partitions of %s: %w", table, err)
	}
	cols, err := partitionColumns(info)
	if err != nil {
		return err
	}
	if err := matchParts(info, cols, parts); err != nil {
		return err
	}
	// The staging table exists from now on even when the load writes no
	// row into table: publication and recovery replace from it.
	if _, err := l.ensureStage(ctx, table); err != nil {
		return err
	}
	if parts.Len() == 0 {
		return nil
	}
	ids, err := l.partitionIDs(ctx, table, cols, parts)
	if err != nil {
		return err
	}
	if l.replace == nil {
		l.replace = map[string][]string{}
	}
	all := append(l.replace[table], ids...)
	slices.Sort(all)
	l.replace[table] = slices.Compact(all)
	s.log.Debug("partitions listed for replacement", "load", l.meta.LoadID, "table", table, "partitions", len(ids))
	return nil
}

// partitionColumns returns the columns of an append target's partition
// key, which sluice creates as a column or a tuple of columns.
func partitionColumns(info *tableInfo) ([]column, error) {
	key := normKey(info.partitionKey)
	if key == "" {
		return nil, fmt.Errorf("clickhouse: replace partitions of %s: the table has no partition_by", info.name)
	}
	var cols []column
	for _, name := range strings.Split(key, ",") {
		c, ok := info.column(name)
		if !ok {
			return nil, fmt.Errorf("clickhouse: replace partitions of %s: its partition key (%s) is not a list of its columns", info.name, info.partitionKey)
		}
		cols = append(cols, c)
	}
	return cols, nil
}

// matchParts checks that a list of partitions has exactly the table's
// partition columns, in order, with their types.
func matchParts(info *tableInfo, cols []column, parts *batch.Batch) error {
	if err := parts.Check(); err != nil {
		return fmt.Errorf("clickhouse: replace partitions of %s: %w", info.name, err)
	}
	want := make([]string, len(cols))
	for i, c := range cols {
		want[i] = c.Name + " " + spelled(c.Column)
	}
	got := make([]string, len(parts.Schema.Columns))
	for i, c := range parts.Schema.Columns {
		got[i] = c.Name + " " + spelled(c)
	}
	if !slices.Equal(got, want) {
		return fmt.Errorf("clickhouse: replace partitions of %s: the list of partitions has columns [%s], the table's partition_by is [%s]",
			info.name, strings.Join(got, ", "), strings.Join(want, ", "))
	}
	return nil
}

// partitionIDs returns the ids of the partitions listed in parts, as the
// server computes them: it inserts the values into a list table created
// as the target (the other columns take their defaults) and reads the ids
// of its parts. The list table's name is recorded before its CREATE, so
// that a failure leaves it to dropLoad.
func (l *load) partitionIDs(ctx context.Context, table string, cols []column, parts *batch.Batch) ([]string, error) {
	s := l.s
	name := plistName(l.enc, table)
	if len(name) > 200 {
		return nil, fmt.Errorf("clickhouse: replace partitions of %s: load id %s and table name are too long together", table, l.meta.LoadID)
	}
	if l.plists == nil {
		l.plists = map[string]bool{}
	}
	l.plists[name] = true
	// Left over from an earlier call whose drop failed: start empty.
	if err := s.exec(ctx, "drop partition list of "+table, s.dropStmt(name)); err != nil {
		return nil, err
	}
	create, err := s.stageSQL(ctx, name, table)
	if err != nil {
		return nil, err
	}
	if err := s.exec(ctx, "create partition list of "+table, create); err != nil {
		return nil, err
	}
	quoted := make([]string, len(cols))
	for i, c := range cols {
		quoted[i] = chsql.Quote(c.Name)
	}
	stmt := "INSERT INTO " + s.table(name) + " (" + strings.Join(quoted, ", ") + ")"
	for from := 0; from < parts.Len(); from += maxListInsert {
		chunk := sliceBatch(parts, from, min(from+maxListInsert, parts.Len()))
		_, vals, err := s.columnValues(table, cols, chunk)
		if err != nil {
			return nil, err
		}
		bt, err := s.conn.PrepareBatch(ctx, stmt)
		if err != nil {
			return nil, fmt.Errorf("clickhouse: list partitions to replace in %s: %w", table, err)
		}
		for i, v := range vals {
			if err := bt.Column(i).Append(v); err != nil {
				bt.Abort()
				return nil, fmt.Errorf("clickhouse: list partitions to replace in %s: column %s: %w", table, cols[i].Name, err)
			}
		}
		if err := bt.Send(); err != nil {
			return nil, fmt.Errorf("clickhouse: list partitions to replace in %s: %w", table, err)
		}
	}
	ids, err := s.partitions(ctx, name)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		if !validPartitionID(id) {
			return nil, fmt.Errorf("clickhouse: replace partitions of %s: partition id %q, which sluice cannot name", table, id)
		}
	}
	if err := s.exec(ctx, "drop partition list of "+table, s.dropStmt(name)); err != nil {
		return nil, err
	}
	delete(l.plists, name)
	return ids, nil
}

// sliceBatch returns rows from..to-1 of b (b itself when that is all of it).
func sliceBatch(b *batch.Batch, from, to int) *batch.Batch {
	if from == 0 && to == b.Len() {
		return b
	}
	out := batch.New(b.Schema, to-from)
	for i := from; i < to; i++ {
		out.AppendRow(b, i)
	}
	return out
}

// dropPlists drops the list tables a load may have left.
func (s *Sink) dropPlists(ctx context.Context, l *load) error {
	for _, name := range sortedKeys(l.plists) {
		if err := s.exec(ctx, "drop partition list", s.dropStmt(name)); err != nil {
			return err
		}
		delete(l.plists, name)
	}
	return nil
}

// encodeReplaced renders a load's replaced partitions for the ledger:
// {"table": ["id", ...]}, empty when there are none.
func encodeReplaced(m map[string][]string) string {
	if len(m) == 0 {
		return ""
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("clickhouse: encode replaced partitions: %v", err)) // a map of strings always encodes
	}
	return string(b)
}

// decodeReplaced reads the ledger's replaced column back, checking every
// table name and partition id before they are used in statements.
func decodeReplaced(loadID, text string) (map[string][]string, error) {
	if text == "" {
		return nil, nil
	}
	var m map[string][]string
	if err := json.Unmarshal([]byte(text), &m); err != nil {
		return nil, fmt.Errorf("clickhouse: ledger row of load %s: replaced partitions: %w", loadID, err)
	}
	for table, ids := range m {
		if !chsql.ValidIdent(table) {
			return nil, fmt.Errorf("clickhouse: ledger row of load %s: replaced partitions of table %q, which sluice cannot name", loadID, table)
		}
		for _, id := range ids {
			if !validPartitionID(id) {
				return nil, fmt.Errorf("clickhouse: ledger row of load %s: replaced partition id %q, which sluice cannot name", loadID, id)
			}
		}
	}
	return m, nil
}

// ledgerReplaced returns the partitions a committed load replaces, by
// table, from its ledger row.
func (s *Sink) ledgerReplaced(ctx context.Context, loadID string) (map[string][]string, error) {
	rows, err := s.conn.Query(ctx, "SELECT "+chsql.Quote(replacedColumn)+" FROM "+s.table(batch.LoadsTable)+" WHERE load_id = ?", loadID)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: read replaced partitions of load %s: %w", loadID, err)
	}
	defer rows.Close()
	var text string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, fmt.Errorf("clickhouse: read replaced partitions of load %s: %w", loadID, err)
		}
		text = max(text, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("clickhouse: read replaced partitions of load %s: %w", loadID, err)
	}
	return decodeReplaced(loadID, text)
}

// schemaHashColumn is the column of _sluice_loads naming the schema
// version a load was written under (docs/schema.md#schema-history).
const schemaHashColumn = "schema_version_hash"

// ensureLedgerColumn adds a String column to a ledger created before
// sluice wrote it. 18.16 has no ADD COLUMN IF NOT EXISTS: the column is
// looked up first, and a concurrent ADD by another process is recognized
// by looking again.
func (s *Sink) ensureLedgerColumn(ctx context.Context, column string) error {
	has := func() (bool, error) {
		rows, err := s.conn.Query(ctx, "SELECT count() FROM system.columns WHERE database = ? AND table = ? AND name = ?",
			s.opts.Database, batch.LoadsTable, column)
		if err != nil {
			return false, fmt.Errorf("clickhouse: describe %s: %w", batch.LoadsTable, err)
		}
		defer rows.Close()
		var n uint64
		for rows.Next() {
			if err := rows.Scan(&n); err != nil {
				return false, fmt.Errorf("clickhouse: describe %s: %w", batch.LoadsTable, err)
			}
		}
		if err := rows.Err(); err != nil {
			return false, fmt.Errorf("clickhouse: describe %s: %w", batch.LoadsTable, err)
		}
		return n > 0, nil
	}
	ok, err := has()
	if err != nil || ok {
		return err
	}
	err = s.exec(ctx, "add column "+column+" to "+batch.LoadsTable,
		"ALTER TABLE "+s.table(batch.LoadsTable)+" ADD COLUMN "+chsql.Quote(column)+" String")
	if err == nil {
		s.log.Info("column added", "table", batch.LoadsTable, "column", column, "type", "String")
		return nil
	}
	if ok, herr := has(); herr == nil && ok {
		return nil
	}
	return err
}

// replace replaces one partition of a target by the staging table's (an
// empty one when the staging table has no rows in it).
func (s *Sink) replace(ctx context.Context, table, stage, pid string) error {
	return s.movePartition(ctx, "REPLACE", table, stage, pid)
}
