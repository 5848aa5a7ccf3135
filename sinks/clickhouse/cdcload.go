package clickhouse

import (
	"context"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
)

// loadCDC is what a load wrote to one CDC target.
type loadCDC struct {
	base  uint64         // the load's version base for the target
	calls [phases]uint32 // calls so far, per phase
}

// Upsert stages rows that replace the rows of their identities: new
// versions in the load's staging table of the target's physical table.
func (l *load) Upsert(ctx context.Context, table string, rows *batch.Batch, keys, seqs []string) error {
	return l.writeCDC(ctx, table, phaseUpsert, rows, keys, seqs)
}

// Remove stages the removal of rows: marker rows (_sluice_deleted = 1) with
// the rows' values, at a version below the load's upserts.
func (l *load) Remove(ctx context.Context, table string, rows *batch.Batch, keys, seqs []string) error {
	return l.writeCDC(ctx, table, phaseRemove, rows, keys, seqs)
}

func (l *load) writeCDC(ctx context.Context, table string, phase int, rows *batch.Batch, keys, seqs []string) error {
	verb := "upsert into"
	if phase == phaseRemove {
		verb = "remove from"
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != stateOpen {
		return fmt.Errorf("clickhouse: %s %s: load %s is %s", verb, table, l.meta.LoadID, l.stateName())
	}
	s := l.s
	ct, err := s.cdcInfo(ctx, table)
	if err != nil {
		return fmt.Errorf("clickhouse: %s %s: %w", verb, table, err)
	}
	if rows == nil {
		return fmt.Errorf("clickhouse: %s %s: no rows", verb, table)
	}
	n := rows.Len()
	if len(keys) != n || len(seqs) != n {
		return fmt.Errorf("clickhouse: %s %s: %d rows but %d keys and %d sequences", verb, table, n, len(keys), len(seqs))
	}
	cols, err := matchBatch(ct.info, rows)
	if err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	version, err := l.cdcVersion(ctx, table, phase)
	if err != nil {
		return err
	}
	names, vals, err := s.columnValues(table, cols, rows)
	if err != nil {
		return err
	}
	deleted := make([]uint8, n)
	if phase == phaseRemove {
		for i := range deleted {
			deleted[i] = 1
		}
	}
	versions := make([]uint64, n)
	for i := range versions {
		versions[i] = version
	}
	names = append(names, keyColumn, seqColumn, deletedColumn, versionColumn)
	vals = append(vals, keys, seqs, deleted, versions)
	if err := l.stage(ctx, ct.phys, names, vals, n); err != nil {
		return l.goneErr(ctx, table, err)
	}
	s.log.Debug("cdc rows staged", "load", l.meta.LoadID, "table", table, "rows", n, "removed", phase == phaseRemove)
	return nil
}

// goneErr turns the failure of a write whose staging table vanished, while
// the target is still there, into a retryable error: recovery in another
// process took the load for abandoned.
func (l *load) goneErr(ctx context.Context, table string, err error) error {
	if !chsql.Gone(err) {
		return err
	}
	l.s.forget(table)
	if _, derr := l.s.cdcInfo(ctx, table); derr == nil {
		return chsql.Transient("clickhouse: write to %s: load %s was removed by recovery as abandoned; retry: %v", table, l.meta.LoadID, err)
	}
	return err
}

// TruncateBelow stages marker rows for every live row of an SCD type 1
// target whose sequence is below seq, read from the published table (the
// committed state) into the load's staging table, at a version below the
// load's removals and upserts.
func (l *load) TruncateBelow(ctx context.Context, table string, seq string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != stateOpen {
		return fmt.Errorf("clickhouse: truncate %s: load %s is %s", table, l.meta.LoadID, l.stateName())
	}
	s := l.s
	ct, err := s.cdcInfo(ctx, table)
	if err != nil {
		return fmt.Errorf("clickhouse: truncate %s: %w", table, err)
	}
	if ct.kind != sinks.KindSCD1 {
		return fmt.Errorf("clickhouse: truncate %s: only SCD type 1 targets are truncated", table)
	}
	if err := s.settle(ctx, table); err != nil {
		return err
	}
	version, err := l.cdcVersion(ctx, table, phaseTruncate)
	if err != nil {
		return err
	}
	stage, err := l.ensureStage(ctx, ct.phys)
	if err != nil {
		return l.goneErr(ctx, table, err)
	}
	cols := make([]string, 0, len(ct.info.columns)+3)
	for _, c := range ct.info.columns {
		cols = append(cols, chsql.Quote(c.Name))
	}
	cols = append(cols, chsql.Quote(keyColumn), chsql.Quote(seqColumn))
	list := strings.Join(cols, ", ")
	q := "INSERT INTO " + s.table(stage) + " (" + list + ", " + chsql.Quote(deletedColumn) + ", " + chsql.Quote(versionColumn) + ", " +
		chsql.Quote(batch.LoadIDColumn) + ") SELECT " + list + ", 1, toUInt64(" + strconv.FormatUint(version, 10) + "), ? FROM " +
		s.table(s.cdcRead(table)) + " FINAL WHERE " + chsql.Quote(deletedColumn) + " = 0 AND " + chsql.Quote(seqColumn) + " < unhex(?)"
	if err := s.conn.Exec(ctx, q, l.meta.LoadID, hex.EncodeToString([]byte(seq))); err != nil {
		return l.goneErr(ctx, table, fmt.Errorf("clickhouse: truncate %s: %w", table, err))
	}
	s.log.Debug("truncate staged", "load", l.meta.LoadID, "table", table)
	return nil
}

// PutState stages hidden state of a CDC target into the load's staging
// table of _sluice_cdc_state. Within one call the last entry of a key wins,
// and a later call wins over an earlier one.
func (l *load) PutState(ctx context.Context, table string, entries []sinks.StateEntry) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != stateOpen {
		return fmt.Errorf("clickhouse: put state of %s: load %s is %s", table, l.meta.LoadID, l.stateName())
	}
	s := l.s
	if _, err := s.cdcInfo(ctx, table); err != nil {
		return fmt.Errorf("clickhouse: put state of %s: %w", table, err)
	}
	if len(entries) == 0 {
		return nil
	}
	entries = lastOfEachKey(entries)
	version, err := l.cdcVersion(ctx, table, phaseState)
	if err != nil {
		return err
	}
	n := len(entries)
	targets := make([]string, n)
	keys := make([]string, n)
	values, valueBytes := make([]string, n), 0
	deleted := make([]uint8, n)
	versions := make([]uint64, n)
	for i, e := range entries {
		targets[i], keys[i], versions[i] = table, e.Key, version
		if e.Value == nil {
			deleted[i] = 1
			continue
		}
		// The column copies the bytes as it appends them: a string over
		// them saves a copy of every state.
		values[i] = unsafe.String(unsafe.SliceData(e.Value), len(e.Value))
		valueBytes += len(e.Value)
	}
	names := []string{"target", "key", "value", "deleted", "version"}
	if err := l.stage(ctx, s.stateLocal(), names, []any{targets, keys, sizedStrings{values, valueBytes}, deleted, versions}, n); err != nil {
		return l.goneErr(ctx, table, err)
	}
	s.log.Debug("cdc states staged", "load", l.meta.LoadID, "table", table, "states", n)
	return nil
}

// lastOfEachKey returns entries without the ones a later entry of the same
// key overrides.
func lastOfEachKey(entries []sinks.StateEntry) []sinks.StateEntry {
	if distinctInOrder(entries) {
		return entries
	}
	last := make(map[string]int, len(entries))
	for i, e := range entries {
		last[e.Key] = i
	}
	if len(last) == len(entries) {
		return entries
	}
	out := make([]sinks.StateEntry, 0, len(last))
	for i, e := range entries {
		if last[e.Key] == i {
			out = append(out, e)
		}
	}
	return out
}

// distinctInOrder reports whether entries' keys are in increasing order,
// but for the table's own state (key "") last, as a load's states come:
// then no key repeats.
func distinctInOrder(entries []sinks.StateEntry) bool {
	n := len(entries)
	if n > 1 && entries[n-1].Key == "" && entries[0].Key != "" {
		n--
	}
	for i := 1; i < n; i++ {
		if entries[i].Key <= entries[i-1].Key {
			return false
		}
	}
	return true
}

// cdcVersion returns the version of the load's next call of a phase on a
// CDC target. The caller holds l.mu.
func (l *load) cdcVersion(ctx context.Context, table string, phase int) (uint64, error) {
	lc := l.cdc[table]
	if lc == nil {
		base, err := l.s.allocBase(ctx, table)
		if err != nil {
			return 0, err
		}
		lc = &loadCDC{base: base}
		l.cdc[table] = lc
	}
	call := lc.calls[phase]
	if call >= maxCalls {
		return 0, fmt.Errorf("clickhouse: load %s: more than %d calls of one kind on %s", l.meta.LoadID, maxCalls, table)
	}
	lc.calls[phase]++
	return lc.base<<versionShift | uint64(phase)<<phaseShift | uint64(call), nil
}

// allocBase gives a load the version base of its writes to a CDC target:
// above every base this sink gave and every version in the target and its
// state, and at least the current Unix time in milliseconds (so that bases
// keep growing across processes whose clocks roughly agree even before
// they read the target). The runner writes a target one load at a time,
// each after the previous committed, so a later load always has a greater
// base.
func (s *Sink) allocBase(ctx context.Context, table string) (uint64, error) {
	floor, err := s.versionFloor(ctx, table)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	base := max(uint64(time.Now().UnixMilli()), s.lastBase+1, floor+1)
	if base >= 1<<(64-versionShift) {
		return 0, fmt.Errorf("clickhouse: versions of %s are exhausted", table)
	}
	s.lastBase = base
	s.floors[table] = base
	return base, nil
}

// versionFloor returns the highest version base of a CDC target, read from
// the destination (after publishing committed loads) the first time and
// after a lease takeover.
func (s *Sink) versionFloor(ctx context.Context, table string) (uint64, error) {
	s.mu.Lock()
	floor, ok := s.floors[table]
	s.mu.Unlock()
	if ok {
		return floor, nil
	}
	if err := s.settle(ctx, table); err != nil {
		return 0, err
	}
	var top uint64
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{"SELECT max(" + chsql.Quote(versionColumn) + ") FROM " + s.table(s.cdcRead(table)), nil},
		{"SELECT max(version) FROM " + s.table(s.stateRead()) + " WHERE target = ?", []any{table}},
	} {
		v, err := s.queryUint(ctx, q.sql, q.args...)
		if err != nil {
			return 0, fmt.Errorf("clickhouse: read versions of %s: %w", table, err)
		}
		top = max(top, v>>versionShift)
	}
	s.mu.Lock()
	floor = max(s.floors[table], top)
	s.floors[table] = floor
	s.mu.Unlock()
	return floor, nil
}

// queryUint runs a query returning one UInt64.
func (s *Sink) queryUint(ctx context.Context, q string, args ...any) (uint64, error) {
	var v uint64
	err := s.queryUints(ctx, q, args, &v)
	return v, err
}

// fencedLeases returns the fences a load's commit must find unchanged: for
// each CDC target it wrote whose lease its sink held when it began, the
// fence view and the value it named.
func (l *load) fencedLeases() (names, values []string) {
	for _, table := range sortedKeys(l.cdc) {
		if h, ok := l.leases[table]; ok {
			names = append(names, leaseFenceName(table))
			values = append(values, h.fenceValue())
		}
	}
	return names, values
}

// fencedOut describes the first lease whose fence no longer names the
// generation the load began under; "" when there is none.
func (s *Sink) fencedOut(ctx context.Context, l *load) (string, error) {
	names, values := l.fencedLeases()
	for i, name := range names {
		vals, ok, err := chsql.Holder(ctx, s.conn, s.opts.Database, name, "fence")
		if err != nil {
			return "", fmt.Errorf("clickhouse: read lease fence: %w", err)
		}
		if !ok || vals[0] != values[i] {
			return fmt.Sprintf("the lease it began under (%s) was taken over", values[i]), nil
		}
	}
	return "", nil
}
