package clickhouse

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
)

// resetsTable records full refreshes: a row of kind "reset" per reset (its
// commit point), and a row of kind "applied" with the same reset_id once its
// tables are emptied.
const resetsTable = "_sluice_resets"

const (
	resetKind   = "reset"
	appliedKind = "applied"
)

// errResetStopped is what Reset returns when a test stops it as a crash
// would (see Sink.resetStop).
var errResetStopped = errors.New("clickhouse: reset stopped by a test")

// resetRow is one reset: the flows whose earlier loads the ledger forgets
// (of pipeline; of every pipeline when empty) and the tables it empties.
type resetRow struct {
	id       string
	pipeline string
	flows    []string
	tables   []string
	at       time.Time // loads of the flows committed before it are forgotten
	applied  bool
}

type flowKey struct{ pipeline, flow string }

// resetTimes maps a flow to the time of its last reset.
type resetTimes map[flowKey]time.Time

// forgotten reports whether a load of the flow committed at at precedes a
// reset of the flow.
func (rt resetTimes) forgotten(pipeline, flow string, at time.Time) bool {
	for _, k := range []flowKey{{pipeline, flow}, {"", flow}} {
		if r, ok := rt[k]; ok && at.Before(r) {
			return true
		}
	}
	return false
}

// last returns the time of the flow's last reset, zero when none.
func (rt resetTimes) last(pipeline, flow string) time.Time {
	a, b := rt[flowKey{pipeline, flow}], rt[flowKey{"", flow}]
	if b.After(a) {
		return b
	}
	return a
}

var _ sinks.Resetter = (*Sink)(nil)

// Reset empties tables and makes the ledger forget the loads of flows
// committed before it (of Options.Pipeline; of every pipeline when it is
// empty). It first runs the maintenance as Recover does (every committed
// load left behind is published, so none can be published after the
// tables are emptied), then inserts the reset's row into _sluice_resets
// (the commit point; its time is after every load of the flows), then
// empties each table (TRUNCATE TABLE of an append target, of
// _sluice_dead_letters when named, or of a CDC target's physical table and
// its partition of _sluice_cdc_state dropped) and inserts an "applied" row.
// A reset stopped in between is completed by Recover. Ledger and the chain
// check ignore the flows' loads committed before the reset; loads committed
// after it count as usual. _sluice_loads keeps every row (its history).
// Tables keep their schema; a missing table is skipped.
func (s *Sink) Reset(ctx context.Context, tables, flows []string) error {
	for _, t := range tables {
		if !chsql.ValidIdent(t) || (strings.HasPrefix(t, sluicePrefix) && !batch.IsFlowRowTable(t)) {
			return fmt.Errorf("clickhouse: reset: %q is not a table that can be emptied", t)
		}
	}
	if err := s.ensureSystem(ctx); err != nil {
		return err
	}
	s.mntMu.Lock()
	defer s.mntMu.Unlock()
	s.mu.Lock()
	s.lastMnt = time.Now()
	s.mu.Unlock()
	maintain := s.maintain
	if s.srv != nil {
		// Every server: a committed load left on one that is down would be
		// published into the emptied tables when it is back.
		maintain = func(ctx context.Context, force bool) error {
			return s.srv.each(ctx, true, func(ss *Sink) error {
				ss.mntMu.Lock()
				defer ss.mntMu.Unlock()
				return ss.maintain(ctx, force)
			})
		}
	}
	if err := maintain(ctx, true); err != nil {
		return fmt.Errorf("clickhouse: reset: %w", err)
	}
	at, err := s.resetAt(ctx, flows)
	if err != nil {
		return err
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return fmt.Errorf("clickhouse: reset: %w", err)
	}
	r := resetRow{id: "reset-" + hex.EncodeToString(id[:]), pipeline: s.opts.Pipeline,
		flows: slices.Clone(flows), tables: slices.Clone(tables), at: at}
	if err := s.insertReset(ctx, r, resetKind); err != nil {
		return err
	}
	if s.resetStop != nil && s.resetStop("reset-committed") {
		return errResetStopped
	}
	if err := s.applyReset(ctx, r, r.tables); err != nil {
		return fmt.Errorf("clickhouse: reset is committed; emptying the tables failed (Recover completes it): %w", err)
	}
	if err := s.dropDeadLetters(ctx, r); err != nil {
		return fmt.Errorf("clickhouse: reset is committed; removing the dead letters of its flows failed (Recover completes it): %w", err)
	}
	if err := s.insertReset(ctx, r, appliedKind); err != nil {
		return fmt.Errorf("clickhouse: reset is committed and applied; %w", err)
	}
	s.log.Info("reset", "tables", tables, "flows", flows)
	return nil
}

// resetAt returns the time of a new reset of flows: now, or just after the
// last load of the flows when a clock is ahead.
func (s *Sink) resetAt(ctx context.Context, flows []string) (time.Time, error) {
	at := time.Now().UTC().Truncate(time.Microsecond)
	if len(flows) == 0 {
		return at, nil
	}
	args := make([]any, 0, len(flows)+1)
	for _, f := range flows {
		args = append(args, f)
	}
	q := "SELECT committed_at, committed_us FROM " + s.table(batch.LoadsTable) +
		" WHERE flow IN (" + chsql.Placeholders(len(flows)) + ")"
	if s.opts.Pipeline != "" {
		q += " AND pipeline = ?"
		args = append(args, s.opts.Pipeline)
	}
	q += " ORDER BY committed_at DESC, committed_us DESC LIMIT 1"
	rows, err := s.conn.Query(ctx, q, args...)
	if err != nil {
		return time.Time{}, fmt.Errorf("clickhouse: reset: read ledger: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var last time.Time
		var us uint32
		if err := rows.Scan(&last, &us); err != nil {
			return time.Time{}, fmt.Errorf("clickhouse: reset: read ledger: %w", err)
		}
		last = withMicros(last, us)
		if !at.After(last) {
			at = last.Add(time.Microsecond)
		}
	}
	if err := rows.Err(); err != nil {
		return time.Time{}, fmt.Errorf("clickhouse: reset: read ledger: %w", err)
	}
	if s.zk != nil && s.opts.Pipeline != "" {
		// On a cluster the heads are ZooKeeper's; a replica may not show the
		// newest ledger rows yet.
		for _, f := range flows {
			heads, _, err := s.zk.heads(s.opts.Pipeline, f, nil)
			if err != nil {
				return time.Time{}, fmt.Errorf("clickhouse: reset: %w", err)
			}
			for _, h := range heads {
				if last := time.UnixMicro(h.At).UTC(); !at.After(last) {
					at = last.Add(time.Microsecond)
				}
			}
		}
	}
	return at, nil
}

// withMicros puts the microseconds kept in a separate column back into a
// time read from a DateTime (whole seconds) or DateTime64 column.
func withMicros(t time.Time, us uint32) time.Time {
	return t.UTC().Truncate(time.Second).Add(time.Duration(us) * time.Microsecond)
}

// timeArg returns the SQL expression and argument of a time in the
// server's timestamp type (DateTime, or DateTime64(6) where available).
func (s *Sink) timeArg(at time.Time) (string, any) {
	if s.feat.dateTime64 {
		return "toDateTime64(?, 6, 'UTC')", at.UTC().Format("2006-01-02 15:04:05.000000")
	}
	return "toDateTime(?, 'UTC')", at.Unix()
}

func (s *Sink) insertReset(ctx context.Context, r resetRow, kind string) error {
	ts, arg := s.timeArg(r.at)
	return s.exec(ctx, "record "+kind+" "+r.id, "INSERT INTO "+s.table(resetsTable)+
		" (reset_id, pipeline, kind, flows, tables, at, at_us) SELECT ?, ?, ?, ?, ?, "+ts+", ?",
		r.id, r.pipeline, kind, strings.Join(r.flows, ","), strings.Join(r.tables, ","), arg, uint32(r.at.Nanosecond()/1000))
}

// applyReset empties tables of a reset.
func (s *Sink) applyReset(ctx context.Context, r resetRow, tables []string) error {
	for _, t := range tables {
		ct, err := s.cdcInfo(ctx, t)
		switch {
		case err == nil:
			// A key's versions and state are on its shard (cdcshards.go).
			if err := s.eachShard(ctx, "reset "+t, func(ss *Sink) error {
				if err := ss.exec(ctx, "reset "+t, "TRUNCATE TABLE "+ss.table(ct.phys)); err != nil && !chsql.Gone(err) {
					return err
				}
				return ss.exec(ctx, "reset the state of "+t, "ALTER TABLE "+ss.table(ss.stateLocal())+" DROP PARTITION ?", t)
			}); err != nil {
				return err
			}
		case errors.Is(err, sinks.ErrUnknownTable):
			if err := s.truncate(ctx, t); err != nil {
				return err
			}
		default:
			return err
		}
	}
	s.log.Debug("reset applied", "reset", r.id, "tables", tables)
	return nil
}

// dropDeadLetters removes the rows of a reset's flows (of its pipeline; of
// every pipeline when it has none) from the flow-row tables (dead letters,
// expectation counts): their loads are forgotten, and replaying them writes
// those rows again, so that each is there once. It runs before any load of
// the flows after the reset commits (see rollResets).
func (s *Sink) dropDeadLetters(ctx context.Context, r resetRow) error {
	for _, own := range batch.FlowRowTables {
		if err := s.dropFlowRows(ctx, r, own); err != nil {
			return err
		}
	}
	return nil
}

func (s *Sink) dropFlowRows(ctx context.Context, r resetRow, table string) error {
	if len(r.flows) == 0 || slices.Contains(r.tables, table) {
		return nil // no flows, or the table was emptied whole
	}
	cond := "flow IN (" + chsql.Placeholders(len(r.flows)) + ")"
	args := make([]any, 0, len(r.flows)+1)
	for _, f := range r.flows {
		args = append(args, f)
	}
	if r.pipeline != "" {
		cond += " AND pipeline = ?"
		args = append(args, r.pipeline)
	}
	n, err := s.queryUint(ctx, "SELECT count() FROM "+s.table(table)+" WHERE "+cond, args...)
	if err != nil || n == 0 {
		return err
	}
	if err := s.waitMutations(ctx, table); err != nil {
		return err
	}
	if err := s.exec(ctx, "remove the rows of "+strings.Join(r.flows, ",")+" from "+table,
		"ALTER TABLE "+s.table(table)+" DELETE WHERE "+cond, args...); err != nil {
		return err
	}
	// On a cluster what counts is that no server holds the rows: 18.16's
	// system.mutations lists a replicated mutation late, and was seen to
	// keep one not done for more than eight minutes.
	if s.opts.Cluster == "" {
		if err := s.waitMutations(ctx, table); err != nil {
			return err
		}
	}
	if err := s.waitRowsGone(ctx, table, cond, args); err != nil {
		return err
	}
	s.log.Info("reset: rows of the flows removed", "reset", r.id, "table", table, "flows", r.flows, "rows", n)
	return nil
}

// readResets returns the resets that concern the sink's pipeline (all when
// Options.Pipeline is empty), in time order.
func (s *Sink) readResets(ctx context.Context) ([]resetRow, error) {
	q := "SELECT reset_id, pipeline, kind, flows, tables, at, at_us FROM " + s.table(resetsTable)
	var args []any
	if s.opts.Pipeline != "" {
		q += " WHERE pipeline IN (?, '')"
		args = append(args, s.opts.Pipeline)
	}
	rows, err := s.conn.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: read resets: %w", err)
	}
	defer rows.Close()
	var out []resetRow
	applied := map[string]bool{}
	for rows.Next() {
		var r resetRow
		var kind, flows, tables string
		var us uint32
		if err := rows.Scan(&r.id, &r.pipeline, &kind, &flows, &tables, &r.at, &us); err != nil {
			return nil, fmt.Errorf("clickhouse: read resets: %w", err)
		}
		if kind == appliedKind {
			applied[r.id] = true
			continue
		}
		r.at = withMicros(r.at, us)
		if flows != "" {
			r.flows = strings.Split(flows, ",")
		}
		if tables != "" {
			r.tables = strings.Split(tables, ",")
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("clickhouse: read resets: %w", err)
	}
	for i := range out {
		out[i].applied = applied[out[i].id]
	}
	slices.SortStableFunc(out, func(a, b resetRow) int { return a.at.Compare(b.at) })
	return out, nil
}

// resetTimes returns, per flow, the time of its last reset.
func (s *Sink) resetTimes(ctx context.Context) (resetTimes, error) {
	rs, err := s.readResets(ctx)
	if err != nil {
		return nil, err
	}
	out := resetTimes{}
	for _, r := range rs {
		for _, f := range r.flows {
			k := flowKey{r.pipeline, f}
			if r.at.After(out[k]) {
				out[k] = r.at
			}
		}
	}
	return out, nil
}

// rollResets completes the resets whose tables were not all emptied (a
// process stopped after the commit point). A table that a load committed
// after the reset wrote was emptied already (loads of a refresh run only
// once the reset returned), so it is left alone. Callers hold s.mntMu.
func (s *Sink) rollResets(ctx context.Context) error {
	rs, err := s.readResets(ctx)
	if err != nil {
		return err
	}
	for _, r := range rs {
		if r.applied {
			continue
		}
		written, err := s.writtenSince(ctx, r.at)
		if err != nil {
			return err
		}
		var todo []string
		for _, t := range r.tables {
			if !written[t] {
				todo = append(todo, t)
			}
		}
		if err := s.applyReset(ctx, r, todo); err != nil {
			return fmt.Errorf("clickhouse: complete reset %s: %w", r.id, err)
		}
		replayed, err := s.flowsLoadedSince(ctx, r)
		if err != nil {
			return err
		}
		if !replayed {
			if err := s.dropDeadLetters(ctx, r); err != nil {
				return fmt.Errorf("clickhouse: complete reset %s: %w", r.id, err)
			}
		}
		if err := s.insertReset(ctx, r, appliedKind); err != nil {
			return err
		}
		s.log.Info("recovery: completed a reset", "reset", r.id, "tables", todo)
	}
	return nil
}

// writtenSince returns the tables that loads committed after at wrote
// (_sluice_dead_letters when any such load exists).
func (s *Sink) writtenSince(ctx context.Context, at time.Time) (map[string]bool, error) {
	ts, arg := s.timeArg(at.Truncate(time.Second))
	rows, err := s.conn.Query(ctx, "SELECT targets, committed_at, committed_us FROM "+s.table(batch.LoadsTable)+
		" WHERE committed_at >= "+ts, arg)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: read ledger: %w", err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var targets string
		var c time.Time
		var us uint32
		if err := rows.Scan(&targets, &c, &us); err != nil {
			return nil, fmt.Errorf("clickhouse: read ledger: %w", err)
		}
		if !withMicros(c, us).After(at) {
			continue
		}
		for _, own := range batch.FlowRowTables {
			out[own] = true
		}
		for _, t := range strings.Split(targets, ",") {
			out[t] = true
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("clickhouse: read ledger: %w", err)
	}
	return out, nil
}

// flowsLoadedSince reports whether a load of a reset's flows committed
// after it: their dead letters since are the replay's, and the ones before
// it are gone already (loads of the flows run only once Reset returned).
func (s *Sink) flowsLoadedSince(ctx context.Context, r resetRow) (bool, error) {
	if len(r.flows) == 0 {
		return false, nil
	}
	ts, arg := s.timeArg(r.at.Truncate(time.Second))
	args := []any{arg}
	for _, f := range r.flows {
		args = append(args, f)
	}
	q := "SELECT committed_at, committed_us FROM " + s.table(batch.LoadsTable) +
		" WHERE committed_at >= " + ts + " AND flow IN (" + chsql.Placeholders(len(r.flows)) + ")"
	if r.pipeline != "" {
		q += " AND pipeline = ?"
		args = append(args, r.pipeline)
	}
	rows, err := s.conn.Query(ctx, q, args...)
	if err != nil {
		return false, fmt.Errorf("clickhouse: read ledger: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var c time.Time
		var us uint32
		if err := rows.Scan(&c, &us); err != nil {
			return false, fmt.Errorf("clickhouse: read ledger: %w", err)
		}
		if withMicros(c, us).After(r.at) {
			return true, nil
		}
	}
	return false, rows.Err()
}

// commitTime returns the time a load commits at: now, or just after the last
// reset of its flow, or just after headUS (the commit time, in µs, of the
// latest head the load continues), when this process's clock is behind the
// resetter's or the last writer's: a load committed after a reset always
// counts, and a slot's loads commit in time order (heads.go).
func (s *Sink) commitTime(ctx context.Context, meta sinks.LoadMeta, headUS int64) (time.Time, error) {
	at := time.Now().UTC().Truncate(time.Microsecond)
	rt, err := s.resetTimes(ctx)
	if err != nil {
		return time.Time{}, err
	}
	if last := rt.last(meta.Pipeline, meta.Flow); !at.After(last) {
		at = last.Add(time.Microsecond)
	}
	if head := time.UnixMicro(headUS).UTC(); headUS > 0 && !at.After(head) {
		at = head.Add(time.Microsecond)
	}
	return at, nil
}

var _ sinks.Dropper = (*Sink)(nil)

// Drop removes a target sluice created (an append table, or a CDC target's
// view and physical table) so that Ensure creates it afresh from the spec.
// It is for a table a Reset just emptied (its key states went with it), and
// refuses a table sluice did not create.
func (s *Sink) Drop(ctx context.Context, table string) error {
	if !chsql.ValidIdent(table) || strings.HasPrefix(table, sluicePrefix) {
		return fmt.Errorf("clickhouse: drop: %q is not a target", table)
	}
	if err := s.ensureSystem(ctx); err != nil {
		return err
	}
	phys := physName(table)
	s.forget(table)
	s.forget(phys)
	front, err := s.describe(ctx, table) // on several shards an append target's shard table
	if err != nil {
		return err
	}
	view, err := s.describeFront(ctx, table)
	if err != nil {
		return err
	}
	back, err := s.describe(ctx, phys)
	if err != nil {
		return err
	}
	var names []string
	switch {
	case front != nil && strings.TrimPrefix(front.engine, "Replicated") == "MergeTree" && front.hasLoadID:
		names = []string{table}
		if s.sharded() {
			names = append(names, s.local(table))
		}
	case back != nil && back.hasLoadID && back.hidden[keyColumn].typ != "" && (view == nil || view.engine == "View"):
		names = []string{table}
		if s.sharded() {
			names = append(names, dphysName(table))
		}
		names = append(names, phys)
	case front == nil && back == nil:
		return nil
	default:
		return fmt.Errorf("clickhouse: drop: table %s was not created by sluice: drop or rename it yourself", table)
	}
	for _, name := range names {
		if err := s.ddl(ctx, "drop "+name, s.dropTargetStmt(name)); err != nil {
			return err
		}
	}
	if back != nil {
		if err := s.dropShardsRecord(table); err != nil {
			return err
		}
	}
	s.forget(table)
	s.forget(phys)
	s.log.Info("table dropped to be created anew", "table", table)
	return nil
}

var _ sinks.Outdater = (*Sink)(nil)

// Outdated reports a target sluice created whose timestamp columns are
// DateTime (an older sluice on a server without DateTime64): they keep
// whole seconds and refuse a fraction, where a table created now keeps
// microseconds.
func (s *Sink) Outdated(ctx context.Context, t sinks.Table) (string, error) {
	if err := s.ensureSystem(ctx); err != nil {
		return "", err
	}
	name := t.Name
	if t.Kind != sinks.KindAppend {
		name = physName(t.Name)
	}
	s.forget(name)
	info, err := s.describe(ctx, name)
	if err != nil || info == nil || !info.hasLoadID {
		return "", err
	}
	var old []string
	for _, c := range info.columns {
		if c.storage == storeDateTime {
			old = append(old, c.Name)
		}
	}
	if len(old) == 0 {
		return "", nil
	}
	return fmt.Sprintf("timestamp columns %s are DateTime, whole seconds", strings.Join(old, ", ")), nil
}

// waitRowsGone waits, on a cluster, until no server still holds rows of
// table matching cond: a replicated table's other replicas perform an
// ALTER ... DELETE from its replication log, after the server that ran
// it, and 18.16 has no setting to wait for them; a reader on another
// server would see the removed rows meanwhile. Every server must answer.
func (s *Sink) waitRowsGone(ctx context.Context, table, cond string, args []any) error {
	root := s
	if s.parent != nil {
		root = s.parent
	}
	if root.srv == nil {
		return nil
	}
	return root.srv.each(ctx, true, func(ss *Sink) error { return ss.waitNoRows(ctx, table, cond, args) })
}

// waitNoRows waits, at most mutationWait, until the server holds no row of
// table matching cond.
func (s *Sink) waitNoRows(ctx context.Context, table, cond string, args []any) error {
	n, err := s.waitZero(ctx, "SELECT count() FROM "+s.table(table)+" WHERE "+cond, args...)
	if n > 0 && err == nil {
		err = fmt.Errorf("clickhouse: %d rows of %s still on server %s after %v (its replica applies the removal later)", n, table, s.server, mutationWait)
	}
	return err
}
