package clickhouse

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
)

// CDC targets. A CDC target (SCD type 1 or 2) is two objects:
//
//   - its physical table _sluice_phys_<target>: the target's columns, then
//     _sluice_key (the engine's encoded key), _sluice_seq (the encoded
//     sequence: of the change the row shows for SCD type 1, its __START_AT
//     for SCD type 2), _sluice_deleted, _sluice_version and _sluice_load_id,
//     a ReplacingMergeTree(_sluice_version) (with _sluice_deleted as its
//     is_deleted column where the server has it) whose sorting key ends with
//     the row's identity: _sluice_key for SCD type 1, (_sluice_key,
//     _sluice_seq) for SCD type 2;
//   - a view under the target's own name, SELECT <columns> FROM phys FINAL
//     WHERE _sluice_deleted = 0: the logical content (on several shards
//     FROM the Distributed table over each shard's physical table, see
//     cdcshards.go).
//
// A load writes each identity it changes as a new row version; a removal is
// a marker row (_sluice_deleted = 1) with the row's values. Versions are
// base<<20 | phase<<16 | call: the base grows with every load of a target
// (see allocBase), the phase orders a load's parts (truncate markers, then
// removal markers, then upserts, then states) whatever order its calls came
// in, and the call number lets a later call of one phase win over an earlier
// one. The rows go into the load's staging table of the physical table and
// are published with the rest of the load, so no merge ever sees a version
// that is not committed. Hidden state lives in _sluice_cdc_state (see
// cdcstate.go), the lease in _sluice_leases (lease.go).

const (
	physPrefix      = "_sluice_phys_"
	cdcStateTable   = "_sluice_cdc_state"
	leasesTable     = "_sluice_leases"
	leaseLockPrefix = "_sluice_leaselock_"

	keyColumn     = "_sluice_key"
	seqColumn     = "_sluice_seq"
	deletedColumn = "_sluice_deleted"
	versionColumn = "_sluice_version"
	// keysComment prefixes the comment of _sluice_key, which lists the
	// target's key columns.
	keysComment = "sluice:keys="

	versionShift = 20 // a version is base<<versionShift | phase<<phaseShift | call
	phaseShift   = 16
	maxCalls     = 1 << phaseShift
)

// The phases of a load's writes to a CDC target, in the order they apply.
const (
	phaseTruncate = iota
	phaseRemove
	phaseUpsert
	phaseState
	phases
)

func physName(table string) string { return physPrefix + table }

// cdcTable is a CDC target as the sink reads it back.
type cdcTable struct {
	name string
	phys string
	kind sinks.TableKind
	keys []string
	// info describes the physical table under the target's name: its
	// columns are the target's.
	info *tableInfo
}

// replacing renders the ReplacingMergeTree engine of a table of versioned
// rows, with the is_deleted column where the server has it.
func (s *Sink) replacing(cl chsql.Cluster, version, deleted string) string {
	if s.feat.isDeleted {
		return cl.Engine("ReplacingMergeTree", version, deleted)
	}
	return cl.Engine("ReplacingMergeTree", version)
}

// validateCDC checks a CDC target's spec beyond what every table needs.
func validateCDC(t sinks.Table) error {
	if err := validateTable(t); err != nil {
		return err
	}
	if t.Kind != sinks.KindSCD1 && t.Kind != sinks.KindSCD2 {
		return fmt.Errorf("clickhouse: table %s: unknown kind %d", t.Name, t.Kind)
	}
	if len(physPrefix)+len(t.Name) > chsql.MaxIdent {
		return fmt.Errorf("clickhouse: table name %s: a CDC target's name has at most %d characters", t.Name, chsql.MaxIdent-len(physPrefix))
	}
	if len(t.Keys) == 0 {
		return fmt.Errorf("clickhouse: table %s: a CDC target needs key columns", t.Name)
	}
	cols := map[string]bool{}
	for _, c := range t.Schema.Columns {
		cols[c.Name] = true
	}
	keys := map[string]bool{}
	for _, k := range t.Keys {
		if !cols[k] {
			return fmt.Errorf("clickhouse: table %s: key %s is not a column of the table", t.Name, k)
		}
		if keys[k] {
			return fmt.Errorf("clickhouse: table %s: key %s is named twice", t.Name, k)
		}
		keys[k] = true
	}
	for _, c := range t.OrderBy {
		if !keys[c] {
			return fmt.Errorf("clickhouse: table %s: order_by names %s, which is not a key: a CDC target is ordered by key columns only, so that every version of a row keeps its place", t.Name, c)
		}
	}
	for _, c := range t.PartitionBy {
		if !keys[c] {
			return fmt.Errorf("clickhouse: table %s: partition_by names %s, which is not a key: a CDC target is partitioned by key columns only, since ClickHouse replaces a row's versions within one partition", t.Name, c)
		}
	}
	return nil
}

// cdcSorting returns the sorting key columns of a CDC target's physical
// table: order_by (key columns), else the keys that are not nullable, then
// the identity.
func cdcSorting(t sinks.Table) []string {
	var out []string
	if len(t.OrderBy) > 0 {
		out = append(out, t.OrderBy...)
	} else {
		nullable := map[string]bool{}
		for _, c := range t.Schema.Columns {
			nullable[c.Name] = c.Nullable
		}
		for _, k := range t.Keys {
			if !nullable[k] {
				out = append(out, k)
			}
		}
	}
	out = append(out, keyColumn)
	if t.Kind == sinks.KindSCD2 {
		out = append(out, seqColumn)
	}
	return out
}

func (s *Sink) createPhysSQL(t sinks.Table) string {
	cm := s.newComments()
	var b strings.Builder
	b.WriteString("CREATE TABLE IF NOT EXISTS " + s.table(physName(t.Name)) + s.opts.cluster().OnCluster() + " (\n")
	for _, c := range t.Schema.Columns {
		b.WriteString("\t" + columnDef(c, s.feat, false, cm) + ",\n")
	}
	b.WriteString("\t" + cm.def(keyColumn, "String", keysComment+strings.Join(t.Keys, ",")) + ",\n")
	b.WriteString("\t" + chsql.Quote(seqColumn) + " String,\n")
	b.WriteString("\t" + chsql.Quote(deletedColumn) + " UInt8,\n")
	b.WriteString("\t" + chsql.Quote(versionColumn) + " UInt64,\n")
	b.WriteString("\t" + chsql.Quote(batch.LoadIDColumn) + " String" + cm.column() + "\n")
	b.WriteString(") ENGINE = " + s.replacing(s.opts.cluster(), chsql.Quote(versionColumn), chsql.Quote(deletedColumn)))
	if len(t.PartitionBy) > 0 {
		b.WriteString(" PARTITION BY " + keyExpr(t.PartitionBy))
	}
	b.WriteString(" ORDER BY " + keyExpr(cdcSorting(t)))
	return b.String()
}

func (s *Sink) createViewSQL(name string, cols []column) string {
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = chsql.Quote(c.Name)
	}
	return "CREATE VIEW IF NOT EXISTS " + s.table(name) + s.opts.cluster().OnCluster() + " AS SELECT " + strings.Join(names, ", ") +
		" FROM " + s.table(s.cdcRead(name)) + " FINAL WHERE " + chsql.Quote(deletedColumn) + " = 0"
}

// ensureCDC creates a CDC target's physical table and view when missing,
// adds the nullable columns the spec added (and recreates the view over
// them), and refuses every other difference.
func (s *Sink) ensureCDC(ctx context.Context, t sinks.Table) error {
	if err := validateCDC(t); err != nil {
		return err
	}
	if s.sharded() {
		if len(sluicePrefix+"dnew_dphys_")+len(t.Name) > chsql.MaxIdent {
			return fmt.Errorf("clickhouse: table name %s: a CDC target's name on a cluster of several shards has at most %d characters", t.Name, chsql.MaxIdent-len(sluicePrefix+"dnew_dphys_"))
		}
	}
	phys := physName(t.Name)
	s.forget(t.Name)
	s.forget(phys)
	front, err := s.describeFront(ctx, t.Name)
	if err != nil {
		return err
	}
	if front != nil && front.engine != "View" {
		return fmt.Errorf("clickhouse: table %s does not match the spec:\n  - it is a %s table, while a CDC target is a view over %s: a target cannot change between append and CDC in place; give the target another name, or drop the table", t.Name, front.engine, phys)
	}
	info, err := s.describe(ctx, phys)
	if err != nil {
		return err
	}
	if info == nil {
		if front != nil {
			return fmt.Errorf("clickhouse: table %s does not match the spec:\n  - a view %s exists without its physical table %s: drop the view (DROP TABLE %s) so that sluice creates the target afresh", t.Name, t.Name, phys, t.Name)
		}
		if err := s.ddl(ctx, "create table "+phys, s.createPhysSQL(t)); err != nil {
			return err
		}
		s.log.Info("table created", "table", t.Name, "physical", phys, "kind", kindName(t.Kind), "keys", t.Keys)
		if info, err = s.describe(ctx, phys); err != nil {
			return err
		}
		if info == nil {
			return fmt.Errorf("clickhouse: table %s: missing right after CREATE TABLE", phys)
		}
		if s.zk != nil {
			if err := s.checkShards(ctx, t.Name, true); err != nil {
				return err
			}
		}
	} else if s.zk != nil {
		if err := s.checkShards(ctx, t.Name, false); err != nil {
			return err
		}
	}
	add, err := reconcileCDC(t, info, s.opts.Cluster != "")
	if err != nil {
		return err
	}
	if len(add) > 0 {
		if err := s.addColumns(ctx, phys, info, add, t.Schema); err != nil {
			return err
		}
		if info, err = s.describe(ctx, phys); err != nil {
			return err
		}
	}
	if s.sharded() {
		if err := s.ensureDistributed(ctx, cdcDist(t.Name)); err != nil {
			return err
		}
		if err := s.ensureShardState(ctx, t.Name); err != nil {
			return err
		}
	}
	if err := s.ensureView(ctx, t.Name, info, front); err != nil {
		return err
	}
	s.forget(t.Name)
	return nil
}

// ensureView creates the view of a CDC target, or recreates it when its
// columns are not the physical table's.
func (s *Sink) ensureView(ctx context.Context, name string, phys, front *tableInfo) error {
	if front != nil {
		same := len(front.columns) == len(phys.columns)
		for i := 0; same && i < len(front.columns); i++ {
			same = front.columns[i].Name == phys.columns[i].Name
		}
		if same {
			return nil
		}
		// 18.16 has no CREATE OR REPLACE VIEW: the name is missing for the
		// moment between the two statements.
		if err := s.ddl(ctx, "drop view "+name, s.dropTargetStmt(name)); err != nil {
			return err
		}
		s.log.Info("view recreated over new columns", "table", name)
	}
	return s.ddl(ctx, "create view "+name, s.createViewSQL(name, phys.columns))
}

// reconcileCDC compares a CDC target's spec with its physical table and
// returns the nullable columns to add, or every difference it cannot apply.
func reconcileCDC(t sinks.Table, info *tableInfo, cluster bool) ([]batch.Column, error) {
	var problems []string
	if !strings.HasPrefix(strings.TrimPrefix(info.engine, "Replicated"), "ReplacingMergeTree") {
		problems = append(problems, fmt.Sprintf("its physical table %s has the engine %s, not ReplacingMergeTree: sluice did not create it; drop it, or give the target another name", info.name, info.engine))
	}
	for _, c := range []string{keyColumn, seqColumn, deletedColumn, versionColumn} {
		if _, ok := info.hidden[c]; !ok {
			problems = append(problems, fmt.Sprintf("its physical table %s has no column %s: sluice did not create it; drop it, or give the target another name", info.name, c))
		}
	}
	if !info.hasLoadID {
		problems = append(problems, fmt.Sprintf("its physical table %s has no %s column: sluice did not create it", info.name, batch.LoadIDColumn))
	}
	ours := len(problems) == 0
	if ours {
		problems = append(problems, modeProblem("its physical table "+info.name, info.engine, cluster)...)
		if kind := physKind(info); kind != t.Kind {
			problems = append(problems, fmt.Sprintf("the table is stored as %s but the spec says %s: the SCD type of a target cannot change in place; restore stored_as_scd_type, or write a new table (a full refresh into another name)", kindName(kind), kindName(t.Kind)))
		}
		if keys := physKeys(info); !slices.Equal(keys, t.Keys) {
			problems = append(problems, fmt.Sprintf("the table's keys are %v but the spec says %v: the keys of a target cannot change in place; restore the keys, or write a new table (a full refresh into another name)", keys, t.Keys))
		}
	}
	add, more := reconcileColumns(t, info)
	problems = append(problems, more...)
	if len(t.OrderBy) > 0 && normKey(info.sortingKey) != strings.Join(cdcSorting(t), ",") {
		problems = append(problems, fmt.Sprintf("order_by is %v in the spec but the table is ordered by (%s): ClickHouse cannot change a sorting key in place; restore the spec's order_by, or create a new table", t.OrderBy, info.sortingKey))
	}
	if len(t.PartitionBy) > 0 && normKey(info.partitionKey) != strings.Join(t.PartitionBy, ",") {
		problems = append(problems, fmt.Sprintf("partition_by is %v in the spec but the table is partitioned by (%s): ClickHouse cannot repartition a table in place; restore the spec's partition_by, or create a new table", t.PartitionBy, info.partitionKey))
	}
	if err := mismatch(t.Name, problems, ours); err != nil {
		return nil, err
	}
	return add, nil
}

// physKind tells the SCD type of a physical table from its sorting key.
func physKind(info *tableInfo) sinks.TableKind {
	if slices.Contains(strings.Split(normKey(info.sortingKey), ","), seqColumn) {
		return sinks.KindSCD2
	}
	return sinks.KindSCD1
}

// physKeys reads the key columns a physical table was created with.
func physKeys(info *tableInfo) []string {
	list, ok := strings.CutPrefix(info.hidden[keyColumn].comment, keysComment)
	if !ok || list == "" {
		return nil
	}
	return strings.Split(list, ",")
}

func kindName(k sinks.TableKind) string {
	switch k {
	case sinks.KindSCD1:
		return "SCD type 1"
	case sinks.KindSCD2:
		return "SCD type 2"
	}
	return "an append target"
}

// cdcInfo returns a CDC target's description, cached until Ensure changes
// it; ErrUnknownTable when table is not a CDC target.
func (s *Sink) cdcInfo(ctx context.Context, table string) (*cdcTable, error) {
	if !chsql.ValidIdent(table) || len(physPrefix)+len(table) > chsql.MaxIdent || strings.HasPrefix(table, sluicePrefix) {
		return nil, fmt.Errorf("clickhouse: table %q: %w", table, sinks.ErrUnknownTable)
	}
	s.mu.Lock()
	ct, gen := s.cdc[table], s.forgets
	s.mu.Unlock()
	if ct != nil {
		return ct, nil
	}
	phys := physName(table)
	info, err := s.describe(ctx, phys)
	if err != nil {
		return nil, err
	}
	if info == nil || !info.hasLoadID || info.hidden[keyColumn].typ == "" {
		return nil, fmt.Errorf("clickhouse: table %s is not a CDC target: %w", table, sinks.ErrUnknownTable)
	}
	named := *info
	named.name = table
	ct = &cdcTable{name: table, phys: phys, kind: physKind(info), keys: physKeys(info), info: &named}
	s.mu.Lock()
	if s.forgets == gen {
		s.cdc[table] = ct // else it may predate an Ensure (see info)
	}
	s.mu.Unlock()
	return ct, nil
}

// cachedCDC returns a CDC target's description if the sink has it.
func (s *Sink) cachedCDC(table string) *cdcTable {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cdc[table]
}
