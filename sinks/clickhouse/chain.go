package clickhouse

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
)

// The chain rule. Every Kafka partition (or file) a flow reads is a chain
// slot; a load that names a slot in Commit.From continues the chain only
// when its From is where the committed loads of the flow left that slot
// (no committed load: From must say "no position"). A load is committed only
// while it holds the commit lock of each of its slots: a view whose name
// derives from the slot and which names the load. The ledger row is
// inserted by INSERT ... SELECT reading the load's marker and every lock,
// so it lands only while all of them still exist and name the load; dropping
// a lock or a marker waits for such an insert to finish. Creating a view is
// atomic, so two writers never both hold a slot, and the one that holds it
// checks the chain after every earlier holder's row became visible. Hence
// every row in _sluice_loads continues its chains, and no two loads of a flow
// ever continue a slot from the same position: there are no losing rows to
// ignore.

// lockHolder is what a slot lock says about the load holding it.
type lockHolder struct {
	enc, owner string // encoded load id and owner heartbeat id
	age        time.Duration
}

// acquire takes the commit lock of one slot for load l. A lock left by a
// committed load, an abandoned one or one of this process's own unresolved
// loads is fenced and taken; a lock of a live writer's load in progress is a
// transient error.
func (s *Sink) acquire(ctx context.Context, l *load, slot string) error {
	name := lockName(l.meta.Pipeline, l.meta.Flow, slot)
	owner := encodeID(s.currentOwner())
	for range 4 {
		err := chsql.Lock(ctx, s.conn, s.opts.Database, name, chsql.Field{Name: "load_id", Value: l.enc}, chsql.Field{Name: "owner", Value: owner})
		if err == nil {
			l.locks = append(l.locks, name)
			return nil
		}
		if !chsql.IsCode(err, chsql.CodeTableAlreadyExists) {
			return fmt.Errorf("clickhouse: lock %s of flow %s: %w", slot, l.meta.Flow, err)
		}
		h, ok, err := s.holder(ctx, name, true)
		if err != nil {
			return err
		}
		if !ok {
			continue // released meanwhile
		}
		if h.enc == l.enc { // our own create whose answer was lost
			l.locks = append(l.locks, name)
			return nil
		}
		s.mu.Lock()
		_, busy := s.inflight[h.enc]
		_, mine := s.pending[h.enc]
		s.mu.Unlock()
		if busy {
			return chsql.Transient("clickhouse: lock %s of flow %s: load %s of this process is committing it", slot, l.meta.Flow, h.enc)
		}
		take := mine
		if !take {
			raw, derr := decodeID(h.enc)
			committed := false
			if derr == nil {
				at, err := s.committedAt(ctx, []string{raw})
				if err != nil {
					return err
				}
				_, committed = at[raw]
			}
			if committed {
				take = true
			} else {
				alive, err := s.aliveOwners(ctx)
				if err != nil {
					return err
				}
				take = s.abandoned(h.owner, h.age, alive)
			}
		}
		if !take {
			return chsql.Transient("clickhouse: lock %s of flow %s: load %s of a live process is committing it; retry later", slot, l.meta.Flow, h.enc)
		}
		s.log.Info("lock of a finished or abandoned load removed", "lock", name, "slot", slot, "load", h.enc, "age", h.age)
		if err := s.fence(ctx, name); err != nil {
			return err
		}
	}
	return chsql.Transient("clickhouse: lock %s of flow %s: contended; retry later", slot, l.meta.Flow)
}

// holder reads a lock view; ok is false when it is gone. withAge also
// reads how old it is.
func (s *Sink) holder(ctx context.Context, name string, withAge bool) (lockHolder, bool, error) {
	var h lockHolder
	vals, found, err := chsql.Holder(ctx, s.conn, s.opts.Database, name, "load_id", "owner")
	if err != nil {
		return h, false, fmt.Errorf("clickhouse: lock: %w", err)
	}
	if !found {
		return h, false, nil
	}
	h.enc, h.owner = vals[0], vals[1]
	if !withAge {
		return h, true, nil
	}
	ages, err := s.objectAges(ctx, name)
	if err != nil {
		return h, false, err
	}
	age, ok := ages[name]
	if !ok {
		return h, false, nil
	}
	h.age = age
	return h, true, nil
}

// abandoned reports whether an object of the protocol (lock, marker, staging
// table) whose owner is the encoded heartbeat id owner and whose age is age
// is left behind by a process that stopped: its heartbeat is gone, or it
// has no owner and is older than the grace period. Objects of this process
// reach here only when no load of it is in flight with them.
func (s *Sink) abandoned(ownerEnc string, age time.Duration, alive map[string]bool) bool {
	owner, err := decodeID(ownerEnc)
	if err != nil || owner == "" {
		return age > s.graceTime()
	}
	if owner == s.currentOwner() {
		return true
	}
	return !alive[owner]
}

// fence drops a lock, marker or staging table and waits until no running
// query names it (chsql.Fence).
func (s *Sink) fence(ctx context.Context, name string) error {
	if err := chsql.Fence(ctx, s.conn, s.opts.Database, name, s.dropSuffix()); err != nil {
		return fmt.Errorf("clickhouse: %w", err)
	}
	return nil
}

// waitQueries waits until no running query names name (chsql.WaitQueries).
func (s *Sink) waitQueries(ctx context.Context, name string) error {
	if err := chsql.WaitQueries(ctx, s.conn, s.opts.Database, name); err != nil {
		return fmt.Errorf("clickhouse: %w", err)
	}
	return nil
}

// objectAges returns the age of sluice's tables and views by name (all of
// them when names is empty), by the server's clock (chsql.Ages).
func (s *Sink) objectAges(ctx context.Context, names ...string) (map[string]time.Duration, error) {
	var out map[string]time.Duration
	err := retrySystem(ctx, func() error {
		var err error
		out, err = chsql.Ages(ctx, s.conn, s.opts.Database, sluicePrefix, names...)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("clickhouse: %w", err)
	}
	return out, nil
}

// retrySystem runs a read of ClickHouse's system tables again when it fails
// because a table was dropped while it was read, as concurrent loads do;
// another attempt sees the database without it.
func retrySystem(ctx context.Context, read func() error) error {
	for attempt := 1; ; attempt++ {
		err := read()
		if err == nil || !chsql.Gone(err) || attempt == 10 {
			return err
		}
		if err := chsql.Sleep(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
}

// fromSlots returns the slots of c.From, sorted, and the From position of each.
func fromSlots(from batch.Positions) ([]string, map[string]batch.Position) {
	pos := map[string]batch.Position{}
	for _, p := range from {
		pos[sinks.Slot(p)] = p
	}
	keys := make([]string, 0, len(pos))
	for k := range pos {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys, pos
}

// staleSlots checks the chain of each slot of from and describes the ones
// the load does not continue; it returns the heads it read too, for the
// heads the load then writes and its commit time.
func (s *Sink) staleSlots(ctx context.Context, meta sinks.LoadMeta, from batch.Positions) ([]string, flowHeads, error) {
	slots, _ := fromSlots(from)
	if len(slots) == 0 {
		return nil, nil, nil
	}
	rt, err := s.resetTimes(ctx)
	if err != nil {
		return nil, nil, err
	}
	heads, err := s.foldHeads(ctx, meta.Pipeline, meta.Flow, slots, rt.last(meta.Pipeline, meta.Flow))
	if err != nil {
		return nil, nil, err
	}
	return heads.heads().Stale(from), heads, nil
}

// insertRow writes the load's ledger row, provided its marker and locks
// still exist and name it; rowCount tells whether it landed.
func (s *Sink) insertRow(ctx context.Context, l *load, c sinks.Commit, at time.Time) error {
	ts, tsArg := "toDateTime(?, 'UTC')", any(at.Unix())
	if s.feat.dateTime64 {
		ts, tsArg = "toDateTime64(?, 6, 'UTC')", at.UTC().Format("2006-01-02 15:04:05.000000")
	}
	cols, vals := "", ""
	args := []any{l.meta.LoadID, l.meta.Pipeline, l.meta.Flow, strings.Join(l.meta.Targets, ","), c.To.Encode(),
		c.Rows, c.DeadLetters, l.meta.Generation, tsArg, c.From.Encode(), ledgerSlot(c.To), at.Nanosecond() / 1000}
	if len(l.replace) > 0 {
		// The partitions to replace are committed with the load (replace.go).
		cols, vals = ", "+chsql.Quote(replacedColumn), ", ?"
		args = append(args, encodeReplaced(l.replace))
	}
	cols, vals = cols+", "+chsql.Quote(schemaHashColumn), vals+", ?"
	args = append(args, c.SchemaHash)
	q := "INSERT INTO " + s.table(batch.LoadsTable) +
		" (load_id, pipeline, flow, targets, positions, rows, dead_letters, generation, committed_at, from_positions, slot, committed_us" + cols + ")" +
		" SELECT ?, ?, ?, ?, ?, ?, ?, ?, " + ts + ", ?, ?, ?" + vals + " FROM " + s.table(markerName(l.enc))
	conds := make([]string, 0, len(l.locks)+1)
	for _, name := range l.locks {
		conds = append(conds, "? IN (SELECT load_id FROM "+s.table(name)+")")
		args = append(args, l.enc)
	}
	fences, values := l.fencedLeases()
	for i, name := range fences {
		conds = append(conds, "? IN (SELECT fence FROM "+s.table(name)+")")
		args = append(args, values[i])
	}
	if len(conds) > 0 {
		q += " WHERE " + strings.Join(conds, " AND ")
	}
	if err := s.conn.Exec(ctx, q, args...); err != nil {
		return fmt.Errorf("clickhouse: commit load %s: %w", l.meta.LoadID, err)
	}
	return nil
}

// rowCount counts the ledger rows of a load.
func (s *Sink) rowCount(ctx context.Context, l *load, c sinks.Commit) (uint64, error) {
	rows, err := s.conn.Query(ctx, "SELECT count() FROM "+s.table(batch.LoadsTable)+
		" WHERE pipeline = ? AND flow = ? AND slot = ? AND load_id = ?",
		l.meta.Pipeline, l.meta.Flow, ledgerSlot(c.To), l.meta.LoadID)
	if err != nil {
		return 0, fmt.Errorf("clickhouse: read back load %s: %w", l.meta.LoadID, err)
	}
	defer rows.Close()
	var n uint64
	for rows.Next() {
		if err := rows.Scan(&n); err != nil {
			return 0, fmt.Errorf("clickhouse: read back load %s: %w", l.meta.LoadID, err)
		}
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("clickhouse: read back load %s: %w", l.meta.LoadID, err)
	}
	return n, nil
}

// committedAt returns, for those of the load ids that have a ledger row,
// when they were committed.
func (s *Sink) committedAt(ctx context.Context, ids []string) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), 500)]
		ids = ids[len(chunk):]
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id
		}
		rows, err := s.conn.Query(ctx, "SELECT load_id, committed_at FROM "+s.table(batch.LoadsTable)+
			" WHERE load_id IN ("+chsql.Placeholders(len(chunk))+")", args...)
		if err != nil {
			return nil, fmt.Errorf("clickhouse: read ledger: %w", err)
		}
		for rows.Next() {
			var id string
			var at time.Time
			if err := rows.Scan(&id, &at); err != nil {
				rows.Close()
				return nil, fmt.Errorf("clickhouse: read ledger: %w", err)
			}
			out[id] = at
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("clickhouse: read ledger: %w", err)
		}
	}
	return out, nil
}

// releaseLocks drops the locks l holds that still name it.
func (s *Sink) releaseLocks(ctx context.Context, l *load) error {
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
	return nil
}

// Ledger reads the committed loads in commit order (of Options.Pipeline
// when set) without changing anything.
func (s *Sink) Ledger(ctx context.Context) (*batch.Ledger, error) {
	if err := s.ensureSystem(ctx); err != nil {
		return nil, err
	}
	q := "SELECT load_id, pipeline, flow, targets, positions, rows, dead_letters, generation, committed_at, committed_us, " + chsql.Quote(schemaHashColumn) + " FROM " +
		s.table(batch.LoadsTable)
	var args []any
	if s.opts.Pipeline != "" {
		q += " WHERE pipeline = ?"
		args = append(args, s.opts.Pipeline)
	}
	q += " ORDER BY committed_at, committed_us, load_id"
	resets, err := s.resetTimes(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := s.conn.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: read ledger: %w", err)
	}
	defer rows.Close()
	led := &batch.Ledger{}
	for rows.Next() {
		var r batch.LoadRecord
		var targets, positions string
		var us uint32
		if err := rows.Scan(&r.LoadID, &r.Pipeline, &r.Flow, &targets, &positions, &r.Rows, &r.DeadLetters,
			&r.Generation, &r.CommittedAt, &us, &r.SchemaHash); err != nil {
			return nil, fmt.Errorf("clickhouse: read ledger: %w", err)
		}
		if targets != "" {
			r.Targets = strings.Split(targets, ",")
		}
		if r.Positions, err = batch.DecodePositions(positions); err != nil {
			return nil, fmt.Errorf("clickhouse: ledger load %s: %w", r.LoadID, err)
		}
		r.CommittedAt = r.CommittedAt.UTC().Truncate(time.Second).Add(time.Duration(us) * time.Microsecond)
		if resets.forgotten(r.Pipeline, r.Flow, r.CommittedAt) {
			continue // committed before a reset of its flow
		}
		led.Loads = append(led.Loads, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("clickhouse: read ledger: %w", err)
	}
	return led, nil
}
