package clickhouse

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/go-zookeeper/zk"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
)

// The commit of a load on a cluster (zk.go): the single-server protocol on
// the load's server (marker, staging tables, publication by ATTACH, the
// recovery of what a stopped process left there) with the commit point
// moved to ZooKeeper. The ledger row is inserted on the load's server after
// the commit point, from the record the commit wrote into the load node,
// so that every insert of it (the writer's, recovery's) is the same block
// and the replicated table keeps one.

// ledgerRow is a load's row of _sluice_loads as the commit point records it.
type ledgerRow struct {
	LoadID      string `json:"load_id"`
	Pipeline    string `json:"pipeline"`
	Flow        string `json:"flow"`
	Targets     string `json:"targets"`
	Positions   string `json:"positions"`
	Rows        int64  `json:"rows"`
	DeadLetters int64  `json:"dead_letters"`
	Generation  int64  `json:"generation"`
	AtUS        int64  `json:"at_us"`
	From        string `json:"from_positions"`
	Slot        string `json:"slot"`
	Replaced    string `json:"replaced,omitempty"`
	SchemaHash  string `json:"schema_hash,omitempty"`
}

func (l *load) ledgerRow(c sinks.Commit, at time.Time) ledgerRow {
	return ledgerRow{
		LoadID: l.meta.LoadID, Pipeline: l.meta.Pipeline, Flow: l.meta.Flow, Targets: strings.Join(l.meta.Targets, ","),
		Positions: c.To.Encode(), Rows: c.Rows, DeadLetters: c.DeadLetters, Generation: l.meta.Generation,
		AtUS: at.UnixMicro(), From: c.From.Encode(), Slot: ledgerSlot(c.To), Replaced: encodeReplaced(l.replace),
		SchemaHash: c.SchemaHash,
	}
}

// insertLedger inserts a ledger row unless the server already has it. The
// row's values are the committed record's, so an insert repeated after a
// lost answer, or by recovery in another process at the same time, is the
// same block, which the replicated table deduplicates (insert_deduplicate
// is set for this insert whatever the connection's settings).
func (s *Sink) insertLedger(ctx context.Context, r ledgerRow) error {
	have, err := s.committedAt(ctx, []string{r.LoadID})
	if err != nil {
		return err
	}
	if _, ok := have[r.LoadID]; ok {
		return nil
	}
	at := time.UnixMicro(r.AtUS).UTC()
	ts, tsArg := "toDateTime(?, 'UTC')", any(at.Unix())
	if s.feat.dateTime64 {
		ts, tsArg = "toDateTime64(?, 6, 'UTC')", at.Format("2006-01-02 15:04:05.000000")
	}
	q := "INSERT INTO " + s.table(batch.LoadsTable) +
		" (load_id, pipeline, flow, targets, positions, rows, dead_letters, generation, committed_at, from_positions, slot, committed_us, " +
		chsql.Quote(replacedColumn) + ", " + chsql.Quote(schemaHashColumn) + ")" +
		" SELECT ?, ?, ?, ?, ?, toInt64(?), toInt64(?), toInt64(?), " + ts + ", ?, ?, toUInt32(?), ?, ?"
	dedup := clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"insert_deduplicate": 1}))
	if err := s.conn.Exec(dedup, q, r.LoadID, r.Pipeline, r.Flow, r.Targets, r.Positions, r.Rows, r.DeadLetters, r.Generation,
		tsArg, r.From, r.Slot, at.Nanosecond()/1000, r.Replaced, r.SchemaHash); err != nil {
		return fmt.Errorf("clickhouse: ledger row of load %s: %w", r.LoadID, err)
	}
	return nil
}

// zkHeads reads a flow's heads from ZooKeeper (of every slot with a head
// when slots is nil), leaving out the heads committed before the flow's
// reset at resetUS; versions holds the version of every head node read,
// left out or not, for the commit's compare-and-set.
func (s *Sink) zkHeads(pipeline, flow string, slots []string, resetUS int64) (flowHeads, map[string]int32, error) {
	raw, versions, err := s.zk.heads(pipeline, flow, slots)
	if err != nil {
		return nil, nil, err
	}
	out := flowHeads{}
	for sl, h := range raw {
		if h.At < resetUS {
			continue
		}
		ps, err := batch.DecodePositions(h.Position)
		if err != nil || len(ps) != 1 {
			return nil, nil, fmt.Errorf("clickhouse: zookeeper head of %s in flow %s: position %q", sl, flow, h.Position)
		}
		out[sl] = &slotHead{pos: ps[0], loads: h.Loads, rows: h.Rows, dls: h.DLs, at: h.At}
	}
	return out, versions, nil
}

// commitZK is commit on a cluster: the chain is checked against the heads
// in ZooKeeper, and one multi commits the load (see zk.go).
func (s *Sink) commitZK(ctx context.Context, l *load, c sinks.Commit) error {
	fail := func(err error) error {
		s.discard(context.WithoutCancel(ctx), l)
		return err
	}
	pipeline, flow := l.meta.Pipeline, l.meta.Flow
	fromSlots, _ := fromSlots(c.From)
	slots := slices.Clone(fromSlots)
	for _, p := range c.To {
		if sl := sinks.Slot(p); !slices.Contains(slots, sl) {
			slots = append(slots, sl)
		}
	}
	slices.Sort(slots)
	rt, err := s.resetTimes(ctx)
	if err != nil {
		return fail(err)
	}
	reset := rt.last(pipeline, flow)
	resetUS := int64(0)
	if !reset.IsZero() {
		resetUS = reset.UnixMicro()
	}
	prev, versions, err := s.zkHeads(pipeline, flow, slots, resetUS)
	if err != nil {
		return fail(err)
	}
	if stale := prev.heads().Stale(c.From); len(stale) > 0 {
		return fail(fmt.Errorf("clickhouse: commit load %s of flow %s: %s: %w", l.meta.LoadID, flow, strings.Join(stale, "; "), sinks.ErrStale))
	}
	at, err := s.commitTime(ctx, l.meta, prev.latest())
	if err != nil {
		return fail(err)
	}
	row := l.ledgerRow(c, at)
	next := advanceHeads(prev, c, at)
	data, err := json.Marshal(zkLoad{State: zkCommitted, Owner: l.zkOwner, Server: s.server, Pipeline: pipeline, Flow: flow, Targets: l.meta.Targets, Row: &row})
	if err != nil {
		return fail(err)
	}
	ops := []zkOp{{&zk.SetDataRequest{Path: s.zk.loadPath(l.enc), Data: data, Version: l.zkVersion}, multiFenced}}
	for _, sl := range slices.Sorted(maps.Keys(next)) {
		sh := next[sl]
		hd, err := json.Marshal(zkHead{Position: batch.Positions{sh.pos}.Encode(), At: sh.at, Loads: sh.loads, Rows: sh.rows, DLs: sh.dls, Load: l.meta.LoadID})
		if err != nil {
			return fail(err)
		}
		p := s.zk.headPath(pipeline, flow, sl)
		if v, ok := versions[sl]; ok {
			ops = append(ops, zkOp{&zk.SetDataRequest{Path: p, Data: hd, Version: v}, multiStale})
		} else {
			if err := s.zk.ensureParents(p); err != nil {
				return fail(zkErr("create heads folder", err))
			}
			ops = append(ops, zkOp{&zk.CreateRequest{Path: p, Data: hd, Acl: zk.WorldACL(zk.PermAll)}, multiStale})
		}
	}
	for _, sl := range fromSlots {
		if _, moved := next[sl]; moved {
			continue
		}
		if v, ok := versions[sl]; ok {
			ops = append(ops, zkOp{&zk.CheckVersionRequest{Path: s.zk.headPath(pipeline, flow, sl), Version: v}, multiStale})
		}
	}
	for _, table := range sortedKeys(l.cdc) {
		// Without a lease (a library's own writer) nothing fences, as on one
		// server.
		h, ok := l.leases[table]
		if !ok || h.fencePath == "" {
			continue
		}
		// The lease as it is now: its server may have stopped answering,
		// and another caught up, since the load began.
		if s.parent != nil {
			if cur, ok := s.parent.heldLease(table); !ok || cur.generation != h.generation || cur.server != s.server {
				return fail(chsql.Transient("clickhouse: commit load %s: the lease of %s goes through server %q now, not %s; retry", l.meta.LoadID, table, cur.server, s.server))
			}
		}
		ops = append(ops, zkOp{&zk.CheckVersionRequest{Path: h.fencePath, Version: h.fenceVersion}, multiLease})
	}
	if size := multiSize(ops); size > maxMulti {
		return fail(fmt.Errorf("clickhouse: commit load %s of flow %s: its commit record is %d bytes, above the %d that one ZooKeeper request carries: load fewer files or partitions per batch", l.meta.LoadID, flow, size, maxMulti))
	}
	l.zkRow = &row
	outcome, err := s.zk.multi(ops)
	switch outcome {
	case multiDone:
	case multiUnknown:
		// Settled by fencing the load node before its next commit.
		s.setPending(l, unknownCommit)
		return err
	case multiFenced:
		l.zkRow = nil
		s.discard(context.WithoutCancel(ctx), l)
		return chsql.Transient("clickhouse: commit load %s: recovery fenced it off as abandoned; nothing was committed, retry", l.meta.LoadID)
	case multiLease:
		l.zkRow = nil
		s.discard(context.WithoutCancel(ctx), l)
		return fmt.Errorf("clickhouse: commit load %s of flow %s: the lease of a target was taken over: %w", l.meta.LoadID, flow, sinks.ErrLeaseLost)
	default:
		l.zkRow = nil
		s.discard(context.WithoutCancel(ctx), l)
		now, _, rerr := s.zkHeads(pipeline, flow, slots, resetUS)
		if rerr == nil {
			if stale := now.heads().Stale(c.From); len(stale) > 0 {
				return fmt.Errorf("clickhouse: commit load %s of flow %s: %s: %w", l.meta.LoadID, flow, strings.Join(stale, "; "), sinks.ErrStale)
			}
		}
		return chsql.Transient("clickhouse: commit load %s of flow %s: a slot's head moved while committing (%v); retry", l.meta.LoadID, flow, err)
	}
	l.state = stateCommitted
	if err := s.insertLedger(ctx, row); err != nil {
		s.setPending(l, unpublished)
		return chsql.Transient("clickhouse: load %s is committed; writing its ledger row failed and is retried: %w", l.meta.LoadID, err)
	}
	if err := s.insertHeads(ctx, pipeline, flow, next, l.meta.LoadID); err != nil {
		s.log.Warn("heads not written; totals miss the load until its slots' next commit", "load", l.meta.LoadID, "err", err)
	}
	s.log.Debug("load committed", "load", l.meta.LoadID, "flow", flow, "to", c.To.Encode(), "rows", c.Rows, "server", s.server)
	published := time.Now()
	err = s.publish(ctx, l)
	l.publish = time.Since(published)
	if err != nil {
		s.setPending(l, unpublished)
		return chsql.Transient("clickhouse: load %s is committed; publishing it failed and is retried: %w", l.meta.LoadID, err)
	}
	return nil
}

// settleZK settles a load whose commit's answer was lost: fencing its node
// either keeps the commit from ever landing or finds it landed.
func (s *Sink) settleZK(l *load) error {
	rec, err := s.zk.fenceLoad(l.enc)
	if err != nil {
		return err
	}
	if rec != nil {
		l.zkRow = rec.Row
		l.todo = unpublished
		s.log.Info("load found committed after an unknown outcome", "load", l.meta.LoadID)
		return nil
	}
	l.zkRow = nil
	l.todo = undiscarded
	s.log.Info("load found not committed after an unknown outcome", "load", l.meta.LoadID)
	return nil
}

// zkCommitted finds, among loads with objects on this server and no ledger
// row here, those committed in ZooKeeper, and inserts their rows: recovery
// then rolls them forward as any committed load.
func (s *Sink) zkCommitted(ctx context.Context, ids map[string]string, committed map[string]time.Time) error {
	for enc, id := range ids {
		if _, ok := committed[id]; ok {
			continue
		}
		rec, n, err := s.zk.readLoad(enc)
		if err != nil {
			return err
		}
		if !n.found || rec.State != zkCommitted || rec.Row == nil {
			continue
		}
		if err := s.insertLedger(ctx, *rec.Row); err != nil {
			return err
		}
		committed[id] = time.UnixMicro(rec.Row.AtUS).UTC()
	}
	return nil
}

// dropZKLoad deletes a finished load's node on a cluster: after its
// staging tables are gone and before its marker goes, so that a marker
// without a node always means a load that cannot commit.
func (s *Sink) dropZKLoad(enc string) error {
	if s.zk == nil {
		return nil
	}
	return s.zk.dropLoad(enc)
}
