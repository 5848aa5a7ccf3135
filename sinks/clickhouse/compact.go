package clickhouse

import (
	"context"
	"fmt"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
)

// Compaction of CDC targets. A ReplacingMergeTree keeps the newest version
// of each identity, marker or not, so a removal marker (and a removed key
// state) stays for good unless it is deleted; and deleting one is safe only
// where no part holds an older version of its identity, which the marker
// hides. A compaction of the physical table, and of the target's partition
// of the state table, therefore:
//
//  1. reads the greatest version v it holds;
//  2. merges it with OPTIMIZE ... FINAL, set to fail rather than do nothing
//     (optimize_throw_if_noop): afterwards every identity with a version up
//     to v has one row, its newest, among the parts that were there;
//  3. deletes the markers up to v (ALTER TABLE ... DELETE, a mutation) and
//     waits until it is done.
//
// Loads may run meanwhile: a target's versions grow with its loads, so a
// load committed after step 1 writes versions above v. Its markers stay,
// and its rows win over the ones they replace whether step 2 merged them
// or not. A crash at any point leaves the table correct: a mutation, once
// created, finishes on its own, and one that has not been created deletes
// nothing.

// compactShare is when CompactCDC compacts: when markers are at least one
// row in compactShare of the physical table, or of the target's state.
const compactShare = 10

// mutationWait bounds how long a compaction waits for its mutation.
const mutationWait = 10 * time.Minute

// compactee is one table a compaction merges: the physical table, or the
// target's partition of the state table.
type compactee struct {
	what      string
	name      string // unquoted
	partition string // " PARTITION '<target>'", or "" for the whole table
	filter    string // "target = ?", or "" for every row
	args      []any  // the filter's
	deleted   string // quoted column names
	version   string
}

// Compact merges a CDC target's physical table, and its partition of the
// state table, into one part per partition (OPTIMIZE ... FINAL), so that
// replaced versions are gone and queries through the view have less to
// merge, and drops their removal markers and removed states. It may take
// long on a large table; loads may run meanwhile.
func (s *Sink) Compact(ctx context.Context, table string) error {
	_, err := s.compact(ctx, table, 0)
	return err
}

// CompactCDC implements sinks.CDCCompactor: it compacts a CDC target as
// Compact does when markers make up a tenth of its physical table, or of
// its state, and returns how many rows it dropped.
func (s *Sink) CompactCDC(ctx context.Context, table string) (int64, error) {
	return s.compact(ctx, table, compactShare)
}

// compact compacts the target's tables, those whose markers are at least
// one row in share (every one when share is 0).
func (s *Sink) compact(ctx context.Context, table string, share uint64) (int64, error) {
	// Committed loads are published first: a marker must not go before
	// the rows it hides are in the table.
	ct, err := s.stateReady(ctx, table, "compact")
	if err != nil {
		return 0, err
	}
	if s.sharded() {
		// A publication repeated after a marker went could bring back the
		// row it hid (cdcshards.go): none may be left to run.
		if err := s.zk.allPublished(table, "compact"); err != nil {
			return 0, err
		}
	}
	var dropped int64
	for _, c := range []compactee{
		{what: table, name: ct.phys, deleted: chsql.Quote(deletedColumn), version: chsql.Quote(versionColumn)},
		{what: "the state of " + table, name: s.stateLocal(), partition: " PARTITION '" + table + "'",
			filter: "target = ?", args: []any{table}, deleted: chsql.Quote("deleted"), version: chsql.Quote("version")},
	} {
		// On several shards each shard's table holds its keys' versions
		// whole: each is compacted on its own, its markers set against
		// its rows.
		if err := s.eachShard(ctx, "compact "+c.what, func(ss *Sink) error {
			n, err := ss.compactOne(ctx, c, share)
			dropped += n
			return err
		}); err != nil {
			return dropped, err
		}
	}
	return dropped, nil
}

func (s *Sink) compactOne(ctx context.Context, c compactee, share uint64) (int64, error) {
	fail := func(err error) (int64, error) { return 0, fmt.Errorf("clickhouse: compact %s: %w", c.what, err) }
	where, and := "", ""
	if c.filter != "" {
		where, and = " WHERE "+c.filter, c.filter+" AND "
	}
	var markers, rows, top uint64
	if err := s.queryUints(ctx, "SELECT countIf("+c.deleted+" = 1), count(), max("+c.version+") FROM "+s.table(c.name)+where,
		c.args, &markers, &rows, &top); err != nil {
		return fail(err)
	}
	if rows == 0 || (share > 0 && (markers == 0 || markers*share < rows)) {
		return 0, nil
	}
	// A mutation still running (an earlier compaction's, another
	// target's on the state table) is waited for rather than piled on.
	if err := s.waitMutations(ctx, c.name); err != nil {
		return fail(err)
	}
	if err := s.optimizeFinal(ctx, c); err != nil {
		return fail(err)
	}
	if s.afterMerge != nil {
		s.afterMerge()
	}
	cond := and + c.deleted + " = 1 AND " + c.version + " <= ?"
	args := append(append([]any(nil), c.args...), top)
	gone, err := s.queryUint(ctx, "SELECT count() FROM "+s.table(c.name)+" WHERE "+cond, args...)
	if err != nil {
		return fail(err)
	}
	if gone == 0 {
		return 0, nil
	}
	if err := s.conn.Exec(ctx, "ALTER TABLE "+s.table(c.name)+" DELETE WHERE "+cond, args...); err != nil {
		return fail(err)
	}
	// A replicated table's mutation reaches system.mutations once the
	// replica has read it from ZooKeeper, later: on a cluster the rows
	// tell.
	var wait error
	if s.opts.Cluster != "" {
		wait = s.waitNoRows(ctx, c.name, cond, args)
	} else {
		wait = s.waitMutations(ctx, c.name)
	}
	if wait != nil {
		return fail(fmt.Errorf("the deletion of %d markers: %w", gone, wait))
	}
	return int64(gone), nil
}

// waitMutations waits, at most mutationWait, until no mutation of a table
// is left to do.
func (s *Sink) waitMutations(ctx context.Context, name string) error {
	n, err := s.waitZero(ctx, "SELECT count() FROM system.mutations WHERE database = ? AND table = ? AND is_done = 0", s.opts.Database, name)
	if n > 0 && err == nil {
		err = fmt.Errorf("%d mutations of %s still running after %v (they go on in the server)", n, name, mutationWait)
	}
	return err
}

// waitZero runs a count query until it answers 0, at most mutationWait,
// and returns the last count (0 once reached).
func (s *Sink) waitZero(ctx context.Context, q string, args ...any) (uint64, error) {
	wctx, cancel := context.WithTimeout(ctx, mutationWait)
	defer cancel()
	for delay := 20 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		n, err := s.queryUint(wctx, q, args...)
		if err != nil || n == 0 {
			return n, err
		}
		select {
		case <-wctx.Done():
			return n, ctx.Err()
		case <-time.After(delay):
		}
	}
}

// optimizeFinal merges c's parts, or fails. A merge running on the same
// parts makes the server refuse for a while: it is tried again.
func (s *Sink) optimizeFinal(ctx context.Context, c compactee) error {
	ctx = clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"optimize_throw_if_noop": 1}))
	for attempt := 0; ; attempt++ {
		err := s.conn.Exec(ctx, "OPTIMIZE TABLE "+s.table(c.name)+c.partition+" FINAL")
		if err == nil || !chsql.IsCode(err, chsql.CodeCannotAssignOptimize) || attempt == 20 {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// queryUints runs a query returning one row of UInt64 values into dst.
func (s *Sink) queryUints(ctx context.Context, q string, args []any, dst ...*uint64) error {
	rows, err := s.conn.Query(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	vals := make([]any, len(dst))
	for i, d := range dst {
		vals[i] = d
	}
	for rows.Next() {
		if err := rows.Scan(vals...); err != nil {
			return err
		}
	}
	return rows.Err()
}
