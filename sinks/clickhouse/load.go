package clickhouse

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ClickHouse/ch-go/proto"
	chcolumn "github.com/ClickHouse/clickhouse-go/v2/lib/column"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
)

type loadState uint8

const (
	stateOpen loadState = iota
	stateCommitted
	stateAborted
	stateHandedOver // in s.pending: resolvePending finishes it
)

// unresolved says what is left to do for one of this process's own loads
// in s.pending.
type unresolved uint8

const (
	// unknownCommit: the ledger insert failed without saying whether it
	// landed. Fence the marker and locks, then look.
	unknownCommit unresolved = iota + 1
	// unpublished: committed; staging tables remain to publish.
	unpublished
	// undiscarded: not committed; its objects remain to drop.
	undiscarded
)

// load is one load: a marker view, a staging table per table written, and
// while committing the slot locks it holds.
type load struct {
	s    *Sink
	meta sinks.LoadMeta
	enc  string
	// publish is how long publishing took after the commit point.
	publish time.Duration

	mu     sync.Mutex
	state  loadState
	stages map[string]string   // table -> staging table (recorded before its CREATE)
	unsure map[string]bool     // tables whose staging table's CREATE has not succeeded
	locks  []string            // lock views held while committing
	todo   unresolved          // while in s.pending
	cdc    map[string]*loadCDC // CDC target -> what the load wrote to it
	// leases are the leases its sink held when it began: its commit of a
	// CDC target among them lands only while the lease's fence names the
	// same generation (lease.go).
	leases map[string]heldLease

	// On a cluster (zkcommit.go): the version of the load's node as this
	// process created it (0: a node is created at version 0), the owner it
	// names, and the ledger row once the commit's multi was sent.
	zkVersion int32
	zkOwner   string
	zkRow     *ledgerRow

	// Partitions to replace (replace.go).
	replace    map[string][]string // table -> sorted partition ids listed by ReplacePartitions
	plists     map[string]bool     // list tables that may exist (recorded before their CREATE)
	replaceErr error               // the first failure of ReplacePartitions: the load cannot commit
}

// Begin starts a load: it creates the load's marker view, which the commit
// will read and which recovery drops to fence an abandoned load off.
func (s *Sink) Begin(ctx context.Context, meta sinks.LoadMeta) (sinks.Load, error) {
	if meta.LoadID == "" || len(meta.LoadID) > maxLoadID {
		return nil, fmt.Errorf("clickhouse: load id %q: want 1 to %d bytes", meta.LoadID, maxLoadID)
	}
	if s.srv != nil {
		return s.srv.begin(ctx, meta)
	}
	if err := s.ensureSystem(ctx); err != nil {
		return nil, err
	}
	s.maybeMaintain(ctx)
	l := &load{s: s, meta: meta, enc: encodeID(meta.LoadID), stages: map[string]string{}, unsure: map[string]bool{}, cdc: map[string]*loadCDC{}}
	if s.parent != nil {
		l.leases = s.parent.heldLeases()
	}
	s.mu.Lock()
	if len(s.leases) > 0 {
		l.leases = maps.Clone(s.leases)
	}
	_, dup := s.inflight[l.enc]
	_, dup2 := s.pending[l.enc]
	if !dup && !dup2 {
		s.inflight[l.enc] = l
	}
	s.mu.Unlock()
	if dup || dup2 {
		return nil, fmt.Errorf("clickhouse: load id %s is already in use", meta.LoadID)
	}
	l.zkOwner = s.currentOwner()
	owner := encodeID(l.zkOwner)
	if s.zk != nil {
		// The node first: a marker without one is of a load that can never
		// commit, which recovery removes at once.
		found, err := s.zk.createLoad(l.enc, zkLoad{State: zkOpen, Owner: l.zkOwner, Server: s.server, Pipeline: meta.Pipeline, Flow: meta.Flow, Targets: meta.Targets})
		if err != nil || found {
			s.done(l)
			if found {
				return nil, fmt.Errorf("clickhouse: load id %s was used before", meta.LoadID)
			}
			return nil, fmt.Errorf("clickhouse: begin load %s: %w", meta.LoadID, err)
		}
	}
	err := chsql.Lock(ctx, s.conn, s.opts.Database, markerName(l.enc), chsql.Field{Name: "owner", Value: owner})
	if err != nil {
		s.done(l)
		if s.zk != nil {
			if derr := s.zk.dropLoad(l.enc); derr != nil {
				s.log.Warn("load node not removed; recovery removes it", "load", meta.LoadID, "err", derr)
			}
		}
		if chsql.IsCode(err, chsql.CodeTableAlreadyExists) {
			return nil, fmt.Errorf("clickhouse: load id %s was used before", meta.LoadID)
		}
		return nil, fmt.Errorf("clickhouse: begin load %s: %w", meta.LoadID, err)
	}
	s.log.Debug("load begun", "load", meta.LoadID, "flow", meta.Flow)
	return l, nil
}

// done removes a load from the in-flight set.
func (s *Sink) done(l *load) {
	s.mu.Lock()
	delete(s.inflight, l.enc)
	s.mu.Unlock()
}

// setPending hands an own load over to resolvePending.
func (s *Sink) setPending(l *load, todo unresolved) {
	l.todo = todo
	l.state = stateHandedOver
	s.mu.Lock()
	s.pending[l.enc] = l
	delete(s.inflight, l.enc)
	s.mu.Unlock()
}

// Write stages rows into the load's staging table of table, created on the
// first write as a copy of the table's structure (engine, keys, columns).
func (l *load) Write(ctx context.Context, table string, b *batch.Batch) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != stateOpen {
		return fmt.Errorf("clickhouse: write to %s: load %s is %s", table, l.meta.LoadID, l.stateName())
	}
	s := l.s
	if strings.HasPrefix(table, sluicePrefix) && !batch.IsOwnTable(table) {
		return fmt.Errorf("clickhouse: write to %s: sluice writes that table itself", table)
	}
	info, err := s.info(ctx, table)
	if errors.Is(err, sinks.ErrUnknownTable) {
		if _, cerr := s.cdcInfo(ctx, table); cerr == nil {
			return fmt.Errorf("clickhouse: write to %s: it is a CDC target, whose rows are written with Upsert and Remove", table)
		}
	}
	if err != nil {
		return fmt.Errorf("clickhouse: write to %s: %w", table, err)
	}
	cols, err := matchBatch(info, b)
	if err != nil {
		return err
	}
	n := b.Len()
	if n == 0 {
		return nil
	}
	names, vals, err := s.stageValues(table, cols, b)
	if err != nil {
		return err
	}
	if err := l.stage(ctx, table, names, vals, n); err != nil {
		if chsql.Gone(err) {
			// The staging table or the marker went: recovery in another
			// process took this load for abandoned. The target is there, so
			// the batch can be loaded again as a new load.
			if info, derr := s.describe(ctx, table); derr == nil && info != nil {
				return chsql.Transient("clickhouse: write to %s: load %s was removed by recovery as abandoned; retry: %v", table, l.meta.LoadID, err)
			}
		}
		return err
	}
	s.log.Debug("rows staged", "load", l.meta.LoadID, "table", table, "rows", n)
	return nil
}

// ensureStage returns the load's staging table of table, creating it on
// first use as a copy of the table's structure (columns, engine, keys; on
// a cluster a plain MergeTree, see stageSQL).
// The name is recorded before the CREATE: a CREATE whose answer is lost
// (the server died meanwhile) may have created the table, and Abort and
// discard drop every recorded name, whether or not it exists.
func (l *load) ensureStage(ctx context.Context, table string) (string, error) {
	if stage := l.stages[table]; stage != "" && !l.unsure[table] {
		return stage, nil
	}
	s := l.s
	stage := stageName(0, l.enc, table)
	if len(stage) > 200 {
		return "", fmt.Errorf("clickhouse: write to %s: load id %s and table name are too long together", table, l.meta.LoadID)
	}
	create, err := s.stageSQL(ctx, stage, table)
	if err != nil {
		return "", err
	}
	tried := l.unsure[table]
	l.stages[table] = stage
	l.unsure[table] = true
	err = s.exec(ctx, "create staging table for "+table, create)
	if err != nil && !(tried && chsql.IsCode(err, chsql.CodeTableAlreadyExists)) {
		return "", err
	}
	// Created now, or by this load's earlier CREATE whose answer was lost
	// (nothing is inserted into a staging table before its creation is
	// known, so it is empty). Its load id column defaults to this load's id,
	// so that inserts need not send it with every row; the default is the
	// staging table's alone (ATTACH and REPLACE PARTITION compare column
	// names and types).
	if err := s.exec(ctx, "create staging table for "+table, "ALTER TABLE "+s.table(stage)+" MODIFY COLUMN "+
		chsql.Quote(batch.LoadIDColumn)+" String DEFAULT "+literal(l.meta.LoadID)); err != nil {
		return "", err
	}
	delete(l.unsure, table)
	return stage, nil
}

// stage inserts n rows, as column values, into the load's staging table of
// table, creating it on the first write. names are the columns of vals;
// _sluice_load_id gets the staging table's default, the load's id.
func (l *load) stage(ctx context.Context, table string, names []string, vals []any, n int) error {
	s := l.s
	stage, err := l.ensureStage(ctx, table)
	if err != nil {
		return err
	}
	quoted := make([]string, 0, len(names))
	for _, name := range names {
		quoted = append(quoted, chsql.Quote(name))
	}
	bt, err := s.conn.PrepareBatch(ctx, "INSERT INTO "+s.table(stage)+" ("+strings.Join(quoted, ", ")+")")
	if err != nil {
		return fmt.Errorf("clickhouse: stage rows of %s: %w", table, err)
	}
	for i, v := range vals {
		switch v := v.(type) {
		case nativeColumn:
			err = decodeColumn(bt, i, v, n)
		case sizedStrings:
			col := bt.Columns()[i]
			if nc, ok := col.(*chcolumn.Nullable); ok {
				presize(nc.Base(), n, v.bytes)
			} else {
				presize(col, n, v.bytes)
			}
			err = bt.Column(i).Append(v.values)
		default:
			err = bt.Column(i).Append(v)
		}
		if err != nil {
			bt.Abort()
			return fmt.Errorf("clickhouse: stage rows of %s: column %s: %w", table, names[i], err)
		}
	}
	if err := bt.Send(); err != nil {
		return fmt.Errorf("clickhouse: stage rows of %s: %w", table, err)
	}
	return nil
}

// stageValues is columnValues with decimals in native format (see
// nativeDecimals).
func (s *Sink) stageValues(table string, cols []column, b *batch.Batch) (names []string, vals []any, err error) {
	names = make([]string, len(cols))
	vals = make([]any, len(cols))
	for i, c := range cols {
		names[i] = c.Name
		if c.storage == storeDecimal && c.Type.Kind != batch.KindArray {
			vals[i], err = nativeDecimals(table, c, b.Vectors[i])
		} else {
			vals[i], err = s.feat.values(table, c, b.Vectors[i])
		}
		if err != nil {
			return nil, nil, err
		}
		if v := b.Vectors[i]; v.Type.Kind == batch.KindString && c.storage == storeString {
			vals[i] = sizedStrings{values: vals[i], bytes: stringBytes(v.Strs)}
		}
	}
	return names, vals, nil
}

// sizedStrings is a String or Nullable(String) column's values ([]string or
// []*string) with their total length, which stage makes room for before
// appending them (see presize).
type sizedStrings struct {
	values any
	bytes  int
}

func stringBytes(vals []string) int {
	n := 0
	for _, v := range vals {
		n += len(v)
	}
	return n
}

// presize makes an empty String column of a batch hold rows values of n
// bytes in all without growing its buffers value by value, as appending
// them does (each doubling copies what it holds). It decodes a stream of
// one value of n bytes as rows values: ch-go's ColStr makes room for the
// positions of all rows first, reading the one value sizes the bytes, the
// stream's end stops it at the second value, and Reset keeps both
// capacities. It only saves work: a column that does not keep the
// capacity grows as it would have.
func presize(col interface {
	Rows() int
	Decode(*proto.Reader, int) error
	Reset()
}, rows, n int) {
	if n <= 0 || col.Rows() != 0 {
		return
	}
	var hdr [binary.MaxVarintLen64]byte
	k := binary.PutUvarint(hdr[:], uint64(n))
	r := io.MultiReader(bytes.NewReader(hdr[:k]), io.LimitReader(zeros{}, int64(n)))
	_ = col.Decode(proto.NewReader(r), max(rows, 1)) // the end of r ends it; Reset empties what it left
	col.Reset()
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// decodeColumn fills the batch's empty column i with n rows in native
// format (clickhouse-go's Decode appends them to it).
func decodeColumn(bt driver.Batch, i int, native nativeColumn, n int) error {
	col := bt.Columns()[i]
	if col.Rows() != 0 {
		return fmt.Errorf("column holds %d rows before its native values", col.Rows())
	}
	if err := col.Decode(proto.NewReader(bytes.NewReader(native)), n); err != nil {
		return err
	}
	if col.Rows() != n {
		return fmt.Errorf("native values decoded into %d rows, want %d", col.Rows(), n)
	}
	return nil
}

// columnValues converts a batch's vectors for the table's columns cols.
func (s *Sink) columnValues(table string, cols []column, b *batch.Batch) (names []string, vals []any, err error) {
	names = make([]string, len(cols))
	vals = make([]any, len(cols))
	for i, c := range cols {
		names[i] = c.Name
		if vals[i], err = s.feat.values(table, c, b.Vectors[i]); err != nil {
			return nil, nil, err
		}
	}
	return names, vals, nil
}

// matchBatch checks that b has exactly the table's declared columns and
// returns the table's column for each of b's.
func matchBatch(info *tableInfo, b *batch.Batch) ([]column, error) {
	if err := b.Check(); err != nil {
		return nil, fmt.Errorf("clickhouse: write to %s: %w", info.name, err)
	}
	if len(b.Schema.Columns) != len(info.columns) {
		return nil, fmt.Errorf("clickhouse: write to %s: the batch has columns %v, the table %v",
			info.name, b.Schema.Names(), info.schema().Names())
	}
	cols := make([]column, len(b.Schema.Columns))
	for i, bc := range b.Schema.Columns {
		c, ok := info.column(bc.Name)
		if !ok {
			return nil, fmt.Errorf("clickhouse: write to %s: the table has no column %s", info.name, bc.Name)
		}
		if c.Type != bc.Type || c.Nullable != bc.Nullable {
			return nil, fmt.Errorf("clickhouse: write to %s: column %s is %s in the batch but %s in the table",
				info.name, bc.Name, spelled(bc), c.describe())
		}
		cols[i] = c
	}
	return cols, nil
}

func (l *load) stateName() string {
	switch l.state {
	case stateCommitted:
		return "committed"
	case stateAborted:
		return "aborted"
	case stateHandedOver:
		return "left to recovery after a failure"
	}
	return "open"
}

// PublishTime implements sinks.Phased.
func (l *load) PublishTime() time.Duration { return l.publish }

// Commit takes the locks of the load's From slots, checks the chain, writes
// the ledger row (the commit point) and publishes the staged partitions.
func (l *load) Commit(ctx context.Context, c sinks.Commit) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != stateOpen {
		return fmt.Errorf("clickhouse: commit load %s: it is %s", l.meta.LoadID, l.stateName())
	}
	err := l.s.commit(ctx, l, c)
	l.s.done(l)
	if err != nil && l.s.parent != nil && l.s.parent.srv != nil {
		l.s.parent.srv.failed(l.s.server, err) // the next loads go elsewhere when this server cannot take them
	}
	return err
}

// commit runs the commit protocol. A failure before the commit point
// discards the load; after it, the load is handed to resolvePending.
func (s *Sink) commit(ctx context.Context, l *load, c sinks.Commit) error {
	fail := func(err error) error {
		s.discard(context.WithoutCancel(ctx), l)
		return err
	}
	if l.replaceErr != nil {
		return fail(fmt.Errorf("clickhouse: commit load %s: a replacement of partitions failed earlier: %w", l.meta.LoadID, l.replaceErr))
	}
	if err := s.resolvePending(ctx); err != nil {
		return fail(err)
	}
	if s.zk != nil {
		return s.commitZK(ctx, l, c)
	}
	slots, _ := fromSlots(c.From)
	for _, slot := range slots {
		if err := s.acquire(ctx, l, slot); err != nil {
			return fail(err)
		}
	}
	stale, prev, err := s.staleSlots(ctx, l.meta, c.From)
	if err != nil {
		return fail(err)
	}
	if len(stale) > 0 {
		return fail(fmt.Errorf("clickhouse: commit load %s of flow %s: %s: %w", l.meta.LoadID, l.meta.Flow,
			strings.Join(stale, "; "), sinks.ErrStale))
	}
	at, err := s.commitTime(ctx, l.meta, prev.latest())
	if err != nil {
		return fail(err)
	}
	if err := s.insertRow(ctx, l, c, at); err != nil && !chsql.Gone(err) {
		// The row may or may not have landed: find out later, after fencing.
		s.setPending(l, unknownCommit)
		return err
	}
	n, err := s.rowCount(ctx, l, c)
	if err != nil {
		s.setPending(l, unknownCommit)
		return err
	}
	if n == 0 {
		// A lease's fence moved on (another holder took the target over),
		// or a lock or the marker was removed by recovery, which took this
		// load for abandoned: nothing was committed.
		s.discard(context.WithoutCancel(ctx), l)
		if lost, err := s.fencedOut(ctx, l); err != nil || lost != "" {
			if err == nil {
				err = fmt.Errorf("clickhouse: commit load %s of flow %s: %s: %w", l.meta.LoadID, l.meta.Flow, lost, sinks.ErrLeaseLost)
			}
			return err
		}
		if stale, _, err := s.staleSlots(ctx, l.meta, c.From); err == nil && len(stale) > 0 {
			return fmt.Errorf("clickhouse: commit load %s of flow %s: %s: %w", l.meta.LoadID, l.meta.Flow,
				strings.Join(stale, "; "), sinks.ErrStale)
		}
		return chsql.Transient("clickhouse: commit load %s: recovery fenced it off as abandoned; nothing was committed, retry", l.meta.LoadID)
	}
	l.state = stateCommitted
	// Under the slots' locks still: the next commit of a slot finds them.
	s.writeHeads(ctx, l, c, at, prev)
	if err := s.releaseLocks(ctx, l); err != nil {
		s.log.Warn("locks not released; the next writer of the slot removes them", "load", l.meta.LoadID, "err", err)
	}
	s.log.Debug("load committed", "load", l.meta.LoadID, "flow", l.meta.Flow, "to", c.To.Encode(), "rows", c.Rows)
	published := time.Now()
	err = s.publish(ctx, l)
	l.publish = time.Since(published)
	if err != nil {
		s.setPending(l, unpublished)
		return chsql.Transient("clickhouse: load %s is committed; publishing it failed and is retried: %w", l.meta.LoadID, err)
	}
	return nil
}

// discard drops an uncommitted load's locks, marker and staging tables;
// what it cannot drop is left to resolvePending.
func (s *Sink) discard(ctx context.Context, l *load) {
	if l.state == stateHandedOver {
		return
	}
	l.state = stateAborted
	if err := s.dropLoad(ctx, l); err != nil {
		s.log.Warn("uncommitted load not dropped yet; retried later", "load", l.meta.LoadID, "err", err)
		s.setPending(l, undiscarded)
	}
}

func (s *Sink) dropLoad(ctx context.Context, l *load) error {
	if s.zk != nil {
		rec, err := s.zk.fenceLoad(l.enc)
		if err != nil {
			return err
		}
		if rec != nil {
			return fmt.Errorf("clickhouse: load %s is committed in zookeeper: it is published, not dropped", l.meta.LoadID)
		}
	}
	if err := s.releaseLocks(ctx, l); err != nil {
		return err
	}
	if err := s.fence(ctx, markerName(l.enc)); err != nil {
		return err
	}
	for _, table := range sortedKeys(l.stages) {
		if err := s.exec(ctx, "drop staging table", s.dropStmt(l.stages[table])); err != nil {
			return err
		}
		delete(l.stages, table)
		delete(l.unsure, table)
	}
	return s.dropPlists(ctx, l)
}

// Abort drops the load's marker and staging tables.
func (l *load) Abort(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.state {
	case stateAborted, stateHandedOver:
		return nil
	case stateCommitted:
		return fmt.Errorf("clickhouse: abort load %s: it is committed", l.meta.LoadID)
	}
	l.state = stateAborted
	if err := l.s.dropLoad(ctx, l); err != nil {
		l.s.setPending(l, undiscarded)
		return fmt.Errorf("clickhouse: abort load %s: %w", l.meta.LoadID, err)
	}
	l.s.done(l)
	return nil
}

// resolvePending finishes this process's own loads left unresolved by a
// failure: it fences the ones whose commit is unknown and looks whether
// their row landed, publishes committed ones and drops the others.
func (s *Sink) resolvePending(ctx context.Context) error {
	s.resolveMu.Lock()
	defer s.resolveMu.Unlock()
	s.mu.Lock()
	todo := make([]*load, 0, len(s.pending))
	for _, l := range s.pending {
		todo = append(todo, l)
	}
	s.mu.Unlock()
	slices.SortFunc(todo, func(a, b *load) int { return strings.Compare(a.enc, b.enc) })
	for _, l := range todo {
		if err := s.resolve(ctx, l); err != nil {
			return err
		}
		s.mu.Lock()
		delete(s.pending, l.enc)
		s.mu.Unlock()
	}
	return nil
}

func (s *Sink) resolve(ctx context.Context, l *load) error {
	if l.todo == unknownCommit && s.zk != nil {
		if err := s.settleZK(l); err != nil {
			return err
		}
	}
	if l.todo == unknownCommit {
		// Fence whatever insert may still be running, then look.
		if err := s.fence(ctx, markerName(l.enc)); err != nil {
			return err
		}
		for _, name := range l.locks {
			h, ok, err := s.holder(ctx, name, false)
			if err != nil {
				return err
			}
			if ok && h.enc == l.enc {
				if err := s.fence(ctx, name); err != nil {
					return err
				}
			}
		}
		l.locks = nil
		at, err := s.committedAt(ctx, []string{l.meta.LoadID})
		if err != nil {
			return err
		}
		if _, ok := at[l.meta.LoadID]; ok {
			l.todo = unpublished
			s.log.Info("load found committed after an unknown outcome", "load", l.meta.LoadID)
		} else {
			l.todo = undiscarded
			s.log.Info("load found not committed after an unknown outcome", "load", l.meta.LoadID)
		}
	}
	switch l.todo {
	case unpublished:
		if l.zkRow != nil {
			if err := s.insertLedger(ctx, *l.zkRow); err != nil {
				return err
			}
		}
		for _, table := range sortedKeys(l.stages) {
			if err := s.rollForward(ctx, l.enc, l.meta.LoadID, table, l.replace[table]); err != nil {
				return err
			}
			delete(l.stages, table)
		}
		if err := s.dropPlists(ctx, l); err != nil {
			return err
		}
		if err := s.dropZKLoad(l.enc); err != nil {
			return err
		}
		return s.exec(ctx, "drop marker", s.dropStmt(markerName(l.enc)))
	case undiscarded:
		if s.zk != nil {
			// A commit whose outcome was settled earlier may still have
			// landed (dropLoad refuses a committed node): publish it then.
			rec, err := s.zk.fenceLoad(l.enc)
			if err != nil {
				return err
			}
			if rec != nil {
				l.zkRow, l.todo = rec.Row, unpublished
				return s.resolve(ctx, l)
			}
		}
		return s.dropLoad(ctx, l)
	}
	return nil
}

// literal returns s as a ClickHouse string literal.
func literal(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
