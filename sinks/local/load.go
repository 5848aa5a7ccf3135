package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
	"strings"
	"time"

	"github.com/gofrs/flock"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
)

// load is a load being staged. It is not safe for concurrent use; loads of
// one Sink run in parallel.
type load struct {
	s       *Sink
	meta    sinks.LoadMeta
	publish time.Duration // how long publishing took after the commit point
	dir     string        // its staging folder
	lk      *flock.Flock  // held while the load lives, so Recover leaves it alone
	tables  map[string]*tableFiles
	order   []string // tables in the order first written
	// cdc holds the changes staged for CDC targets (Upsert, Remove,
	// TruncateBelow, PutState), cdcOrder their tables in order.
	cdc      map[string]*cdcStage
	cdcOrder []string
	// replace holds, per append target, the partition folders the load
	// replaces (ReplacePartitions).
	replace map[string]map[string]bool
	err     error // a failed Write leaves a file half written: the load can only be aborted
	done    bool
	// leaseGens are the generations of the leases its Sink held when it
	// began: its commit is refused once one of them moved on.
	leaseGens map[string]int64
}

// tableFiles are a load's staged files of one table: one, or one per
// partition folder.
type tableFiles struct {
	def   tableDef
	part  *partitioner // nil when the table is not partitioned
	files map[string]*partFile
	order []string // partition folders in the order first written
}

type partFile struct {
	fw   *fileWriter
	n    int
	rows int64
}

// Begin starts a load: a staging folder _sluice/staging/<load id>/ holding
// a lock file that marks the load alive. The folder is made in _sluice/tmp
// and renamed into place with its lock held, so that Recover never sees it
// unlocked.
func (s *Sink) Begin(ctx context.Context, meta sinks.LoadMeta) (sinks.Load, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	if meta.LoadID == "" {
		return nil, errors.New("local: begin: load has no id")
	}
	if meta.Pipeline == "" {
		meta.Pipeline = s.opts.Pipeline
	}
	s.led.mu.Lock()
	_, dup := s.led.ids[meta.LoadID]
	s.led.mu.Unlock()
	if dup {
		return nil, fmt.Errorf("local: begin: load %s is already committed", meta.LoadID)
	}
	tmp := filepath.Join(s.lay.tmp(), fsName(meta.LoadID))
	if err := s.disk.Mkdir(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("local: begin %s: %w", meta.LoadID, err)
	}
	lk := flock.New(filepath.Join(tmp, ".lock"))
	if ok, err := lk.TryLock(); err != nil || !ok {
		s.disk.RemoveAll(tmp)
		return nil, fmt.Errorf("local: begin %s: lock: %v", meta.LoadID, err)
	}
	dir := s.lay.stagingDir(meta.LoadID)
	if err := s.disk.Rename(tmp, dir); err != nil {
		lk.Unlock()
		s.disk.RemoveAll(tmp)
		return nil, fmt.Errorf("local: begin %s: %w", meta.LoadID, err)
	}
	l := &load{s: s, meta: meta, dir: dir, lk: lk, tables: map[string]*tableFiles{}, leaseGens: s.leaseGenerations()}
	s.loadsMu.Lock()
	s.loads[l] = struct{}{}
	s.loadsMu.Unlock()
	return l, nil
}

// Write stages rows for a table in the load's Parquet file of that table
// (of each partition, for a partitioned table).
func (l *load) Write(ctx context.Context, table string, b *batch.Batch) error {
	if err := l.usable(); err != nil {
		return err
	}
	if table == batch.LoadsTable {
		return fmt.Errorf("local: write %s: the ledger is written by Commit", table)
	}
	tf, err := l.tableFiles(table, b.Schema)
	if err != nil {
		return fmt.Errorf("local: write %s: %w", table, err)
	}
	if err := b.Check(); err != nil {
		return fmt.Errorf("local: write %s: %w", table, err)
	}
	if err := checkValues(b); err != nil {
		return fmt.Errorf("local: write %s: %w", table, err)
	}
	if b.Len() == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	dirs, rows := []string{""}, [][]int(nil)
	if tf.part != nil {
		if dirs, rows, err = tf.part.split(b); err != nil {
			return fmt.Errorf("local: write %s: %w", table, err)
		}
	}
	for i, dir := range dirs {
		part := b
		if rows != nil && len(dirs) > 1 {
			part = take(b, rows[i])
		}
		if err := l.writePart(table, tf, dir, part); err != nil {
			l.err = fmt.Errorf("local: write %s: %w", table, err)
			return l.err
		}
	}
	return nil
}

// tableFiles returns the load's files of a table after checking that a
// batch of schema may be written to it.
func (l *load) tableFiles(table string, schema batch.Schema) (*tableFiles, error) {
	if tf := l.tables[table]; tf != nil {
		if !schema.Equal(tf.def.Schema) {
			return nil, fmt.Errorf("batch columns %v differ from the table's %v", describe(schema), describe(tf.def.Schema))
		}
		return tf, nil
	}
	def, err := l.s.table(table)
	if err == nil && !schema.Equal(def.Schema) {
		def, err = l.s.readTable(table) // another process may have changed it
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w (Ensure creates tables)", sinks.ErrUnknownTable)
	}
	if err != nil {
		return nil, err
	}
	if def.cdc() {
		return nil, errors.New("a CDC target changes through Upsert and Remove, not Write")
	}
	if !schema.Equal(def.Schema) {
		return nil, fmt.Errorf("batch columns %v differ from the table's %v", describe(schema), describe(def.Schema))
	}
	tf := &tableFiles{def: def, files: map[string]*partFile{}}
	if len(def.PartitionBy) > 0 {
		if tf.part, err = newPartitioner(def.Schema, def.PartitionBy); err != nil {
			return nil, err
		}
	}
	l.tables[table] = tf
	l.order = append(l.order, table)
	return tf, nil
}

func (l *load) writePart(table string, tf *tableFiles, dir string, b *batch.Batch) error {
	pf := tf.files[dir]
	if pf == nil {
		n := len(tf.order)
		fw, err := createFile(l.s.disk, l.s.lay.stagedFile(l.meta.LoadID, table, n), tf.def.Schema, l.meta.LoadID, loadCodec)
		if err != nil {
			return err
		}
		pf = &partFile{fw: fw, n: n}
		tf.files[dir] = pf
		tf.order = append(tf.order, dir)
	}
	if err := pf.fw.write(b); err != nil {
		return err
	}
	pf.rows += int64(b.Len())
	return pf.fw.endWrite()
}

func describe(s batch.Schema) []string {
	out := make([]string, len(s.Columns))
	for i, c := range s.Columns {
		out[i] = c.Name + " " + c.Type.String()
		if c.Nullable {
			out[i] += " null"
		}
	}
	return out
}

// checkValues rejects values the files cannot store, before anything is
// written: dates beyond int32 days, decimals beyond their precision.
func checkValues(b *batch.Batch) error {
	for i, c := range b.Schema.Columns {
		if err := checkVector(b.Vectors[i]); err != nil {
			return fmt.Errorf("column %s %w", c.Name, err)
		}
	}
	return nil
}

func checkVector(v *batch.Vector) error {
	switch v.Type.Kind {
	case batch.KindDate:
		for r, x := range v.Ints {
			if x < math.MinInt32 || x > math.MaxInt32 {
				return fmt.Errorf("row %d: date %d days from 1970-01-01 is out of range", r, x)
			}
		}
	case batch.KindDecimal:
		if v.Type.Precision <= 18 {
			for r, x := range v.Decs {
				if !fitsInt64(x) {
					return fmt.Errorf("row %d: %s does not fit %v", r, batch.FormatDecimal(x, v.Type.Scale), v.Type)
				}
			}
		}
	case batch.KindArray:
		if checkVector(v.Elems) == nil {
			return nil
		}
		// Name the row and the element.
		for r := range v.Len() {
			lo, hi := v.Array(r)
			for j := lo; j < hi; j++ {
				if err := checkVector(v.Elems.Take([]int{j})); err != nil {
					return fmt.Errorf("row %d: element %d: %s", r, j-lo, strings.TrimPrefix(err.Error(), "row 0: "))
				}
			}
		}
	}
	return nil
}

func (l *load) usable() error {
	switch {
	case l.done:
		return fmt.Errorf("local: load %s is finished", l.meta.LoadID)
	case l.s.closed.Load():
		return errClosed
	}
	return l.err
}

// stagedFiles returns the number of Parquet files the load's writes staged.
func (l *load) stagedFiles() int {
	n := 0
	for _, tf := range l.tables {
		n += len(tf.order)
	}
	return n
}

// PublishTime implements sinks.Phased.
func (l *load) PublishTime() time.Duration { return l.publish }

// Commit finishes and syncs the staged files, then under the destination
// lock checks the load against the ledger, appends its ledger line (the
// commit point) and publishes it.
func (l *load) Commit(ctx context.Context, c sinks.Commit) error {
	if err := l.usable(); err != nil {
		return err
	}
	s := l.s
	e := entry{
		LoadID:      l.meta.LoadID,
		Pipeline:    l.meta.Pipeline,
		Flow:        l.meta.Flow,
		Targets:     l.meta.Targets,
		From:        c.From,
		To:          c.To,
		Rows:        c.Rows,
		DeadLetters: c.DeadLetters,
		Generation:  l.meta.Generation,
		SchemaHash:  c.SchemaHash,
	}
	if len(l.replace) > 0 {
		e.Replace = l.replaceEntries()
	}
	// The staged files sync in the background while the CDC targets'
	// files are prepared; all of them before the folder, and before the
	// commit point. A load of one file (an append's) syncs it in place:
	// handing it over would only add a switch.
	var sy *fileSyncer
	if staged := l.stagedFiles(); staged > 1 || len(l.cdcOrder) > 0 {
		sy = newFileSyncer()
	}
	for _, t := range l.order {
		tf := l.tables[t]
		for _, dir := range tf.order {
			pf := tf.files[dir]
			size, err := pf.fw.closeTo(sy)
			pf.fw = nil
			if err != nil {
				sy.wait()
				l.discard()
				return fmt.Errorf("local: commit %s: %s: %w", l.meta.LoadID, t, err)
			}
			e.Files = append(e.Files, stagedFile{Table: t, Dir: dir, N: pf.n, Rows: pf.rows, Bytes: size})
		}
	}
	ces, err := l.finishCDC(sy)
	if err == nil {
		e.CDC = ces
		err = l.prepare(ctx, e.CDC)
	}
	if serr := sy.wait(); err == nil {
		err = serr
	}
	if err == nil {
		err = s.disk.SyncDir(l.dir)
	}
	if err == nil {
		err = s.disk.SyncDir(s.lay.staging())
	}
	if err != nil {
		l.discard()
		return fmt.Errorf("local: commit %s: %w", l.meta.LoadID, err)
	}

	unlock, err := s.lock(ctx)
	if err != nil {
		l.discard()
		return fmt.Errorf("local: commit %s: %w", l.meta.LoadID, err)
	}
	defer unlock()
	for _, ce := range e.CDC {
		if err == nil {
			err = s.checkLease(ce.Table, l.leaseGens)
		}
	}
	s.led.mu.Lock()
	if err == nil {
		err = s.led.refresh(true)
	}
	if err == nil {
		if err = s.led.checkStale(l.meta, c.From); err == nil {
			if _, dup := s.led.ids[e.LoadID]; dup {
				err = fmt.Errorf("load %s is already committed", e.LoadID)
			}
		}
	}
	if err == nil {
		e.Seq = s.led.lastSeq() + 1
		e.CommittedAt = time.Now().UTC().Truncate(time.Microsecond)
		err = s.led.append(e)
	}
	s.led.mu.Unlock()
	if err != nil {
		l.discard()
		// Holding the lock anyway: publish what others committed.
		if perr := s.publishPending(ctx, false); perr != nil {
			s.log.Warn("publishing committed loads failed", "err", perr)
		}
		return fmt.Errorf("local: commit %s of %s: %w", l.meta.LoadID, l.meta.Flow, err)
	}
	l.finish()
	// Past the commit point publishing runs to its end: a cancelled context
	// would only leave the load for the next commit or Recover to publish.
	published := time.Now()
	err = s.publishPending(context.WithoutCancel(ctx), !s.syncStates)
	l.publish = time.Since(published)
	if err != nil {
		return fmt.Errorf("local: load %s is committed; publishing failed and is retried by the next commit or Recover: %w",
			l.meta.LoadID, err)
	}
	if err := s.compactLedger(); err != nil {
		s.log.Warn("ledger not compacted; the next commit tries again", "err", err)
	}
	return nil
}

// compactLedger compacts the ledger (ledger.go) once it holds
// compactLedgerAt lines, every one published: the queued states are
// applied first, so that nothing folded is still to do. Under the
// destination lock.
func (s *Sink) compactLedger() error {
	s.led.mu.Lock()
	n, last := len(s.led.entries), s.led.lastSeq()
	s.led.mu.Unlock()
	if n < s.compactAt || s.pubd != last {
		return nil
	}
	if err := s.applyQueued(""); err != nil {
		return err
	}
	s.led.mu.Lock()
	defer s.led.mu.Unlock()
	if s.led.lastSeq() != last {
		return nil
	}
	if err := s.led.compact(); err != nil {
		return err
	}
	s.log.Debug("ledger compacted", "through", last)
	return nil
}

// Abort discards the load.
func (l *load) Abort(ctx context.Context) error {
	if l.done {
		return nil
	}
	return l.discard()
}

// discard removes the load's staging folder and ends it.
func (l *load) discard() error {
	if l.done {
		return nil
	}
	l.closeFiles()
	err := l.s.disk.RemoveAll(l.dir)
	l.finish()
	if err != nil {
		return fmt.Errorf("local: abort %s: %w", l.meta.LoadID, err)
	}
	return nil
}

// finish ends the load without touching its staging folder: after the
// commit point, the folder belongs to publishing.
func (l *load) finish() {
	l.done = true
	l.release()
	l.s.loadsMu.Lock()
	delete(l.s.loads, l)
	l.s.loadsMu.Unlock()
}

// release lets go of the load's lock and open files, as a dying process
// would.
func (l *load) release() {
	l.closeFiles()
	if err := l.lk.Unlock(); err != nil {
		l.s.log.Warn("load lock not released", "load_id", l.meta.LoadID, "err", err)
	}
	l.lk.Close()
}

// closeFiles closes the files still being written, unfinished.
func (l *load) closeFiles() {
	l.closeCDC()
	for _, tf := range l.tables {
		for _, pf := range tf.files {
			if pf.fw != nil {
				pf.fw.discard()
				pf.fw = nil
			}
		}
	}
}
