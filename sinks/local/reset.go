package local

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
)

// resetEntry is what a reset line of the ledger records: the tables it
// empties and the flows whose earlier loads it makes the ledger forget.
type resetEntry struct {
	Tables []string `json:"tables"`
	Flows  []string `json:"flows"`
}

// flowKey names a flow of a pipeline; an empty pipeline is a reset of the
// flow in every pipeline (a Sink without Options.Pipeline).
type flowKey struct{ pipeline, flow string }

// addReset records a reset line: its flows lose their positions, and its
// CDC targets' states must be cleared before GetState answers. l.mu held.
func (l *ledger) addReset(e *entry) {
	for _, f := range e.Reset.Flows {
		l.resets[flowKey{e.Pipeline, f}] = e.Seq
		for k := range l.heads {
			if k.flow == f && (e.Pipeline == "" || k.pipeline == e.Pipeline) {
				delete(l.heads, k)
			}
		}
		for k := range l.totals {
			if k.flow == f && (e.Pipeline == "" || k.pipeline == e.Pipeline) {
				delete(l.totals, k)
			}
		}
	}
	for _, t := range e.Reset.Tables {
		l.stateLast[t] = e.Seq
	}
}

// forgotten reports whether a load was committed before a later reset of
// its flow. l.mu held.
func (l *ledger) forgotten(e *entry) bool {
	return l.resets[flowKey{e.Pipeline, e.Flow}] > e.Seq || l.resets[flowKey{"", e.Flow}] > e.Seq
}

var _ sinks.Resetter = (*Sink)(nil)

// Reset empties tables and makes the ledger forget the loads of flows
// committed before it (of Options.Pipeline; of every pipeline when it is
// empty). Under the destination lock it appends a reset line to the ledger
// (the commit point), then publishes it like a load: each table gets a new,
// empty version whose "through" is the reset's seq, and a CDC target's
// state.db loses its key states and table state (its "through" set to the
// reset's seq). A crash after the commit point is rolled forward by the next
// commit, Recover or GetState. Loads of the flows committed after the reset
// count as usual. _sluice_loads keeps every load (its history); Ledger and
// Recover no longer return the forgotten ones. _sluice_dead_letters is
// emptied only when it is among tables. Tables keep their schema and a CDC
// target its kind and keys; a table without a folder is skipped.
func (s *Sink) Reset(ctx context.Context, tables, flows []string) error {
	for _, t := range tables {
		if t == batch.LoadsTable || !tableName.MatchString(t) {
			return fmt.Errorf("local: reset: %q is not a table that can be emptied", t)
		}
	}
	unlock, err := s.lock(ctx)
	if err != nil {
		return fmt.Errorf("local: reset: %w", err)
	}
	defer unlock()
	s.led.mu.Lock()
	err = s.led.refresh(true)
	if err == nil {
		e := entry{
			Seq:         s.led.lastSeq() + 1,
			LoadID:      "reset-" + randomSuffix(),
			Pipeline:    s.opts.Pipeline,
			Targets:     slices.Clone(tables),
			Reset:       &resetEntry{Tables: slices.Clone(tables), Flows: slices.Clone(flows)},
			CommittedAt: time.Now().UTC(),
		}
		err = s.led.append(e)
	}
	s.led.mu.Unlock()
	if err != nil {
		return fmt.Errorf("local: reset: %w", err)
	}
	if err := s.publishPending(context.WithoutCancel(ctx), false); err != nil {
		return fmt.Errorf("local: reset is committed; emptying the tables failed (the next commit or Recover completes it): %w", err)
	}
	s.log.Info("reset", "tables", tables, "flows", flows)
	return nil
}

// lastReset returns the index of the last reset that empties table among
// its pending entries, or -1.
func lastReset(list []*entry, table string) int {
	for i := len(list) - 1; i >= 0; i-- {
		if r := list[i].Reset; r != nil && slices.Contains(r.Tables, table) {
			return i
		}
	}
	return -1
}

// dropFlowRows publishes a reset into an append table it does not empty
// (_sluice_dead_letters): a version without the rows of the reset's flows
// (of its pipeline; of every pipeline when it has none), whose "through" is
// the reset's seq, unless the table is already past it. Files without such
// rows are kept as they are. Runs under the lock.
func (s *Sink) dropFlowRows(table string, e *entry) error {
	cur, err := s.current(table)
	if errors.Is(err, errNoTable) || errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil || cur.Through >= e.Seq {
		return err
	}
	def, err := s.readTable(table)
	if err != nil {
		return err
	}
	drop := func(b *batch.Batch, i int) bool {
		return slices.Contains(e.Reset.Flows, b.Column("flow").Strs[i]) &&
			(e.Pipeline == "" || b.Column("pipeline").Strs[i] == e.Pipeline)
	}
	tmp := filepath.Join(s.lay.tmp(), fmt.Sprintf("reset-%d-%s", e.Seq, randomSuffix()))
	if err := s.disk.Mkdir(tmp, 0o755); err != nil {
		return err
	}
	defer s.disk.RemoveAll(tmp)
	src := s.lay.versionDir(table, cur.Version)
	gone := map[string]bool{}
	var add []fileEntry
	srcs := map[string]string{}
	removed := int64(0)
	for i, f := range cur.Files {
		out := filepath.Join(tmp, fmt.Sprintf("%d.parquet", i))
		kept, n, err := filterFile(s.disk, def, filepath.Join(src, f.Name), out, drop)
		if err != nil {
			return fmt.Errorf("%s: %w", f.Name, err)
		}
		if n == 0 {
			continue // nothing of the flows: the file stays
		}
		gone[f.Name] = true
		removed += n
		if kept.Rows == 0 {
			continue
		}
		kept.Name = path.Join(path.Dir(f.Name), fmt.Sprintf("reset-%012d-%d.parquet", e.Seq, i))
		kept.FirstSeq, kept.LastSeq = f.FirstSeq, f.LastSeq
		add = append(add, kept)
		srcs[kept.Name] = out
	}
	if err := s.disk.SyncDir(tmp); err != nil {
		return err
	}
	if _, err := s.nextVersion(table, cur, gone, add, srcs, e.Seq); err != nil {
		return err
	}
	s.log.Info("reset: rows of the flows removed", "table", table, "flows", e.Reset.Flows, "rows", removed)
	return nil
}

// resetTable publishes a reset of a table: an empty version with "through"
// seq unless the table is already past it, then for a CDC target its state
// cleared unless state.db is past it. Runs under the lock.
func (s *Sink) resetTable(table string, seq int64) error {
	def, err := s.readTable(table)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // no such table: nothing to empty
	}
	if err != nil {
		return err
	}
	cur, err := s.current(table)
	if errors.Is(err, errNoTable) {
		return nil // Ensure died before its first swap: empty
	}
	if err != nil {
		return err
	}
	if cur.Through < seq {
		m := manifest{Version: cur.Version + 1, Through: seq, Created: time.Now().UTC()}
		if def.cdc() {
			m.Buckets = 1
		}
		if err := s.installVersion(table, m, nil); err != nil {
			return err
		}
	}
	if !def.cdc() {
		return nil
	}
	db, err := s.openState(table, false)
	if err != nil {
		return err
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if readThrough(tx) >= seq {
			return nil
		}
		for _, b := range [][]byte{stateKeys, stateChunks} {
			if err := tx.DeleteBucket(b); err != nil && !errors.Is(err, bolt.ErrBucketNotFound) {
				return err
			}
		}
		if _, err := tx.CreateBucket(stateChunks); err != nil {
			return err
		}
		meta, err := tx.CreateBucketIfNotExists(stateMeta)
		if err != nil {
			return err
		}
		if err := meta.Delete(stateTable); err != nil {
			return err
		}
		var through [8]byte
		binary.BigEndian.PutUint64(through[:], uint64(seq))
		return meta.Put(stateThrough, through[:])
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	return nil
}

var _ sinks.Dropper = (*Sink)(nil)

// Drop removes a target so that Ensure creates it afresh from the spec:
// its folder under _sluice/tables (versions, schema, state.db) is renamed
// into _sluice/tmp and then removed, and its link at the destination's root
// is removed. It is for a table a Reset just emptied: the ledger's loads of
// it are forgotten or behind the reset, so none is published again into
// the new table (whose first version is through the ledger's last seq).
func (s *Sink) Drop(ctx context.Context, table string) error {
	if !tableName.MatchString(table) || strings.HasPrefix(table, "_sluice") {
		return fmt.Errorf("local: drop: %q is not a target", table)
	}
	unlock, err := s.lock(ctx)
	if err != nil {
		return fmt.Errorf("local: drop: %w", err)
	}
	defer unlock()
	// The link first: a crash after it leaves the table's folder, which
	// Ensure takes for the table (and a refresh drops again), never a link
	// into a folder that is gone.
	if err := s.disk.Remove(s.lay.link(table)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("local: drop %s: %w", table, err)
	}
	if err := s.disk.SyncDir(s.lay.root); err != nil {
		return fmt.Errorf("local: drop %s: %w", table, err)
	}
	trash := filepath.Join(s.lay.tmp(), "drop-"+table+"-"+randomSuffix())
	if err := s.disk.Rename(s.lay.tableDir(table), trash); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("local: drop %s: %w", table, err)
	}
	if err := s.disk.SyncDir(s.lay.tables()); err != nil {
		return fmt.Errorf("local: drop %s: %w", table, err)
	}
	s.schemaMu.Lock()
	delete(s.schemas, table)
	s.schemaMu.Unlock()
	if err := s.disk.RemoveAll(trash); err != nil {
		s.log.Warn("dropped table's folder not removed (Recover removes it)", "table", table, "err", err)
	}
	s.log.Info("table dropped to be created anew", "table", table)
	return nil
}
