package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
)

var _ sinks.CDCLoad = (*load)(nil)

// cdcStage is what a load stages for one CDC target.
type cdcStage struct {
	def    tableDef
	ext    batch.Schema // the table's columns, then _sluice_key and _sluice_seq
	up     *fileWriter  // upserts, with their identities
	upRows int64
	// upBatch is what the load's only Upsert staged (the caller's rows and
	// identities, as the staged file holds them); nil after a second one.
	// Preparing the load takes it instead of reading the staged file back:
	// the caller holds these rows until its load ends anyway, and a load of
	// many upserts (a snapshot's) is not kept in memory.
	upBatch  *batch.Batch
	rm       *pairsWriter // removed identities
	rmRows   int64
	st       *pairsWriter // states
	stRows   int64
	trunc    string
	hasTrunc bool
}

// cdcStage returns the load's staging of a CDC target, checking that table
// is one.
func (l *load) cdcStage(table string) (*cdcStage, error) {
	if st := l.cdc[table]; st != nil {
		return st, nil
	}
	if !tableName.MatchString(table) {
		return nil, fmt.Errorf("%w (Ensure creates tables)", sinks.ErrUnknownTable)
	}
	def, err := l.s.table(table)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w (Ensure creates tables)", sinks.ErrUnknownTable)
	}
	if err != nil {
		return nil, err
	}
	if !def.cdc() {
		return nil, errors.New("not a CDC target (append targets take Write)")
	}
	st := &cdcStage{def: def, ext: upsertSchema(def.Schema)}
	if l.cdc == nil {
		l.cdc = map[string]*cdcStage{}
	}
	l.cdc[table] = st
	l.cdcOrder = append(l.cdcOrder, table)
	return st, nil
}

// checkRows checks a batch of a CDC target's rows and its identities; of
// removed rows (values), only the count.
func (l *load) checkRows(st *cdcStage, table string, rows *batch.Batch, keys, seqs []string, values bool) error {
	if len(keys) != len(seqs) {
		return fmt.Errorf("%d keys for %d sequences", len(keys), len(seqs))
	}
	if rows == nil {
		return nil
	}
	if rows.Len() != len(keys) {
		return fmt.Errorf("%d rows for %d keys", rows.Len(), len(keys))
	}
	if !values {
		return nil
	}
	if !rows.Schema.Equal(st.def.Schema) {
		def, err := l.s.readTable(table) // another process may have added columns
		if err != nil {
			return err
		}
		if !rows.Schema.Equal(def.Schema) {
			return fmt.Errorf("batch columns %v differ from the table's %v", describe(rows.Schema), describe(def.Schema))
		}
		st.def, st.ext = def, upsertSchema(def.Schema)
	}
	if err := rows.Check(); err != nil {
		return err
	}
	return checkValues(rows)
}

// Upsert stages rows that replace the rows of the same identity (the key
// for SCD type 1, the key and sequence for SCD type 2), in
// staging/<load>/<table>.cdc.up.parquet beside their identities.
func (l *load) Upsert(ctx context.Context, table string, rows *batch.Batch, keys, seqs []string) error {
	if err := l.usable(); err != nil {
		return err
	}
	if rows == nil {
		return fmt.Errorf("local: upsert into %s: no rows", table)
	}
	st, err := l.cdcStage(table)
	if err == nil {
		err = l.checkRows(st, table, rows, keys, seqs, true)
	}
	if err != nil {
		return fmt.Errorf("local: upsert into %s: %w", table, err)
	}
	if len(keys) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if st.up == nil {
		if st.up, err = createPlainFile(l.s.disk, l.s.lay.stagedUpserts(l.meta.LoadID, table), st.ext, loadCodec); err != nil {
			l.err = fmt.Errorf("local: upsert into %s: %w", table, err)
			return l.err
		}
	}
	n := len(rows.Vectors)
	ext := &batch.Batch{Schema: st.ext, Vectors: make([]*batch.Vector, n+2)}
	copy(ext.Vectors, rows.Vectors)
	ext.Vectors[n] = &batch.Vector{Type: batch.String, Strs: keys}
	ext.Vectors[n+1] = &batch.Vector{Type: batch.String, Strs: seqs}
	if !ext.Schema.Equal(st.up.schema) {
		// Columns were added since the load's first upsert: the staged file
		// keeps its columns, which publishing reads as the table's.
		l.err = fmt.Errorf("local: upsert into %s: the table's columns changed during the load", table)
		return l.err
	}
	err = st.up.write(ext)
	if err == nil {
		err = st.up.endWrite()
	}
	if err != nil {
		l.err = fmt.Errorf("local: upsert into %s: %w", table, err)
		return l.err
	}
	st.upBatch = nil
	if st.upRows == 0 {
		st.upBatch = ext
	}
	st.upRows += int64(len(keys))
	return nil
}

// Remove stages the removal of rows by identity (rows may be nil; the
// identities are what counts).
func (l *load) Remove(ctx context.Context, table string, rows *batch.Batch, keys, seqs []string) error {
	if err := l.usable(); err != nil {
		return err
	}
	st, err := l.cdcStage(table)
	if err == nil {
		err = l.checkRows(st, table, rows, keys, seqs, false)
	}
	if err != nil {
		return fmt.Errorf("local: remove from %s: %w", table, err)
	}
	if len(keys) == 0 {
		return nil
	}
	if st.rm == nil {
		if st.rm, err = createPairs(l.s.disk, l.s.lay.stagedRemoves(l.meta.LoadID, table)); err != nil {
			l.err = fmt.Errorf("local: remove from %s: %w", table, err)
			return l.err
		}
	}
	for i := range keys {
		st.rm.add(keys[i], seqs[i])
	}
	if st.rm.err != nil {
		l.err = fmt.Errorf("local: remove from %s: %w", table, st.rm.err)
		return l.err
	}
	return nil
}

// TruncateBelow stages the removal of every row whose sequence is below
// seq; of several, the greatest counts.
func (l *load) TruncateBelow(ctx context.Context, table string, seq string) error {
	if err := l.usable(); err != nil {
		return err
	}
	st, err := l.cdcStage(table)
	if err != nil {
		return fmt.Errorf("local: truncate %s: %w", table, err)
	}
	if !st.hasTrunc || seq > st.trunc {
		st.trunc, st.hasTrunc = seq, true
	}
	return nil
}

// PutState stages hidden state: per key (nil removes), and under "" the
// table's own. Of several entries of a key in a load, the last counts.
func (l *load) PutState(ctx context.Context, table string, entries []sinks.StateEntry) error {
	if err := l.usable(); err != nil {
		return err
	}
	st, err := l.cdcStage(table)
	if err != nil {
		return fmt.Errorf("local: put state of %s: %w", table, err)
	}
	if len(entries) == 0 {
		return nil
	}
	if st.st == nil {
		if st.st, err = createPairs(l.s.disk, l.s.lay.stagedStates(l.meta.LoadID, table)); err != nil {
			l.err = fmt.Errorf("local: put state of %s: %w", table, err)
			return l.err
		}
	}
	for _, e := range entries {
		st.st.addValue(e.Key, e.Value)
	}
	if st.st.err != nil {
		l.err = fmt.Errorf("local: put state of %s: %w", table, st.st.err)
		return l.err
	}
	return nil
}

// finishCDC closes the load's staged CDC files, for sy to sync (nil: synced
// now), and returns their ledger entries (before the commit point).
func (l *load) finishCDC(sy *fileSyncer) ([]cdcEntry, error) {
	var out []cdcEntry
	for _, table := range l.cdcOrder {
		st := l.cdc[table]
		ce := cdcEntry{Table: table, Upserts: st.upRows, Prepared: -1}
		if st.hasTrunc {
			ce.Truncate = []byte(st.trunc)
			if ce.Truncate == nil {
				ce.Truncate = []byte{}
			}
		}
		if st.up != nil {
			_, err := st.up.closeTo(sy)
			st.up = nil
			if err != nil {
				return nil, fmt.Errorf("%s: %w", table, err)
			}
		}
		for _, w := range []struct {
			pw **pairsWriter
			n  *int64
		}{{&st.rm, &ce.Removes}, {&st.st, &ce.States}} {
			if *w.pw == nil {
				continue
			}
			n, err := (*w.pw).closeTo(sy)
			*w.pw = nil
			if err != nil {
				return nil, fmt.Errorf("%s: %w", table, err)
			}
			*w.n = n
		}
		if ce.rowChanges() || ce.States > 0 {
			out = append(out, ce)
		}
	}
	return out, nil
}

// prepare builds the new bucket files of each CDC target the load changes,
// against the table's current version, before the commit point and outside
// the destination lock: publishing then only links them, unless another
// load changed the table meanwhile. A table version removed under it is
// no error: publishing builds the files then.
func (l *load) prepare(ctx context.Context, ces []cdcEntry) error {
	for i := range ces {
		ce := &ces[i]
		if !ce.rowChanges() {
			continue
		}
		cur, err := l.s.current(ce.Table)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return err
		}
		def, err := l.s.readTable(ce.Table)
		if err != nil {
			return err
		}
		var staged *batch.Batch
		if st := l.cdc[ce.Table]; st != nil && st.upBatch != nil && st.ext.Equal(upsertSchema(def.Schema)) {
			staged = st.upBatch
		}
		ch, err := l.s.readChanges(l.meta.LoadID, ce.Table, def, ce, staged)
		if err != nil {
			return err
		}
		_, err = l.s.buildPlan(ctx, ce.Table, def, cur, ch, l.s.lay.stagedPlan(l.meta.LoadID, ce.Table, "prep"))
		if errors.Is(err, fs.ErrNotExist) {
			continue // the version was superseded and removed meanwhile
		}
		if err != nil {
			return fmt.Errorf("%s: %w", ce.Table, err)
		}
		ce.Prepared = cur.Version
	}
	if len(ces) > 0 {
		if err := l.s.disk.SyncDir(l.dir); err != nil {
			return err
		}
	}
	return nil
}

// closeCDC closes the staged CDC files unfinished.
func (l *load) closeCDC() {
	for _, st := range l.cdc {
		if st.up != nil {
			st.up.discard()
			st.up = nil
		}
		if st.rm != nil {
			st.rm.discard()
			st.rm = nil
		}
		if st.st != nil {
			st.st.discard()
			st.st = nil
		}
	}
}

// publishCDC publishes committed loads of a CDC target in seq order: for
// each, its rows (a new version from the prepared plan when the table is
// still at the version it was prepared on, else from a plan built now) when
// the table's "through" is below the load, then its states when the state
// file's "through" is (applyJobs); with async, the states are queued
// instead. States queued before are applied first. Runs under the lock.
func (s *Sink) publishCDC(ctx context.Context, table string, loads []*entry, async bool) error {
	if err := s.applyQueued(table); err != nil {
		return err
	}
	var jobs []stateJob
	def, err := s.readTable(table)
	if err != nil {
		return err
	}
	cur, err := s.current(table)
	if err != nil {
		return err
	}
	for _, e := range loads {
		if err := ctx.Err(); err != nil {
			return err
		}
		ce := e.cdcFor(table)
		if ce == nil {
			continue
		}
		if ce.rowChanges() && e.Seq > cur.Through {
			dir := s.lay.stagedPlan(e.LoadID, table, "prep")
			var plan *cdcPlan
			if ce.Prepared == cur.Version {
				if plan, err = readPlan(s.disk, dir); err != nil {
					s.log.Warn("prepared files unreadable; building them again", "table", table, "load_id", e.LoadID, "err", err)
					plan = nil
				}
			}
			if plan == nil {
				if _, err := s.disk.Stat(s.lay.stagingDir(e.LoadID)); err != nil {
					return fmt.Errorf("committed load %s (seq %d): its staging folder is gone: %w", e.LoadID, e.Seq, err)
				}
				ch, err := s.readChanges(e.LoadID, table, def, ce, nil)
				if err != nil {
					return fmt.Errorf("committed load %s (seq %d): %w", e.LoadID, e.Seq, err)
				}
				dir = s.lay.stagedPlan(e.LoadID, table, "pub")
				if plan, err = s.buildPlan(ctx, table, def, cur, ch, dir); err != nil {
					return fmt.Errorf("committed load %s (seq %d): %w", e.LoadID, e.Seq, err)
				}
			}
			if cur, err = s.applyPlan(table, cur, plan, dir, e.Seq); err != nil {
				return err
			}
			s.log.Debug("published", "table", table, "load_id", e.LoadID, "dropped", len(plan.Drop), "added", len(plan.Add),
				"buckets", plan.Buckets, "version", cur.Version)
		}
		if ce.States > 0 {
			jobs = append(jobs, stateJob{seq: e.Seq, loadID: e.LoadID})
		}
	}
	if len(jobs) == 0 {
		return nil
	}
	if async {
		s.queueStates(table, jobs)
		return nil
	}
	_, err = s.applyJobs(table, jobs)
	return err
}
