package clickhouse

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
)

// _sluice_heads keeps, per slot of a flow, where its committed loads left it
// and the counts of those loads since the flow's last reset: a
// ReplacingMergeTree whose version is the commit time in microseconds of
// the load it records. A commit writes the rows of its slots after its
// ledger row landed and before it lets go of the slots' locks, so the next
// commit of a slot finds its row. The rows are hints: a head is the row's
// position advanced by the rows of _sluice_loads committed after it (the
// slot's rows and the multi-slot ones, found through the ledger's ORDER BY
// in a few granules), so a row a crash kept from being written costs a
// longer read, never a wrong head. The counts of a load go to its first
// slot in Slot order. See docs/clickhouse.md, "Heads and totals".
const headsTable = "_sluice_heads"

// headsChunk bounds the slots one query of heads names.
const headsChunk = 200

// slotHead is a slot's head and the counts of the loads that reached it.
type slotHead struct {
	pos              batch.Position
	loads, rows, dls int64
	at               int64 // commit time (µs) of the load that put it there
	hint             bool  // from _sluice_heads
	hintAt           int64 // the hint's commit time (µs)
}

// flowHeads are the heads of a flow's slots, by slot.
type flowHeads map[string]*slotHead

func (h flowHeads) heads() sinks.Heads {
	out := make(sinks.Heads, len(h))
	for sl, sh := range h {
		out[sl] = sh.pos
	}
	return out
}

// latest returns the greatest commit time among the heads.
func (h flowHeads) latest() int64 {
	var at int64
	for _, sh := range h {
		at = max(at, sh.at)
	}
	return at
}

// Heads implements sinks.Sink: the hints of _sluice_heads for the slots
// (of every slot with a hint when slots is nil) advanced by the ledger's
// rows committed after them.
func (s *Sink) Heads(ctx context.Context, pipeline, flow string, slots []string) (sinks.Heads, error) {
	if slots != nil && len(slots) == 0 {
		return sinks.Heads{}, nil // no slot asked about: no IN ()
	}
	if err := s.ensureSystem(ctx); err != nil {
		return nil, err
	}
	rt, err := s.resetTimes(ctx)
	if err != nil {
		return nil, err
	}
	h, err := s.foldHeads(ctx, pipeline, flow, slots, rt.last(pipeline, flow))
	if err != nil {
		return nil, err
	}
	return h.heads(), nil
}

// foldHeads works out the heads of a flow's slots (all with a hint when nil)
// as of its loads committed at or after reset.
func (s *Sink) foldHeads(ctx context.Context, pipeline, flow string, slots []string, reset time.Time) (flowHeads, error) {
	resetUS := int64(0)
	if !reset.IsZero() {
		resetUS = reset.UnixMicro()
	}
	if s.zk != nil {
		h, _, err := s.zkHeads(pipeline, flow, slots, resetUS)
		return h, err
	}
	out := flowHeads{}
	if err := s.readHints(ctx, pipeline, flow, slots, resetUS, out); err != nil {
		return nil, err
	}
	want := slots
	if want == nil {
		want = make([]string, 0, len(out))
		for sl := range out {
			want = append(want, sl)
		}
		slices.Sort(want)
	}
	for len(want) > 0 {
		chunk := want[:min(len(want), headsChunk)]
		want = want[len(chunk):]
		if err := s.foldTail(ctx, pipeline, flow, chunk, resetUS, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// readHints reads the rows of _sluice_heads of the slots (all when nil)
// written at or after the flow's reset.
func (s *Sink) readHints(ctx context.Context, pipeline, flow string, slots []string, resetUS int64, out flowHeads) error {
	for first := true; first || len(slots) > 0; first = false {
		q := "SELECT slot, argMax(position, version), argMax(loads, version), argMax(rows, version), argMax(dead_letters, version), max(version) FROM " +
			s.table(headsTable) + " WHERE pipeline = ? AND flow = ?"
		args := []any{pipeline, flow}
		if slots != nil {
			chunk := slots[:min(len(slots), headsChunk)]
			slots = slots[len(chunk):]
			q += " AND slot IN (" + chsql.Placeholders(len(chunk)) + ")"
			for _, sl := range chunk {
				args = append(args, sl)
			}
		}
		q += " GROUP BY slot"
		rows, err := s.conn.Query(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("clickhouse: read heads of flow %s: %w", flow, err)
		}
		for rows.Next() {
			var sl, text string
			var sh slotHead
			var version uint64
			if err := rows.Scan(&sl, &text, &sh.loads, &sh.rows, &sh.dls, &version); err != nil {
				rows.Close()
				return fmt.Errorf("clickhouse: read heads of flow %s: %w", flow, err)
			}
			if int64(version) < resetUS || sl == "" {
				continue // before the flow's reset
			}
			ps, err := batch.DecodePositions(text)
			if err != nil || len(ps) != 1 {
				rows.Close()
				return fmt.Errorf("clickhouse: head of %s of flow %s: %q: %v", sl, flow, text, err)
			}
			sh.pos, sh.at, sh.hint, sh.hintAt = ps[0], int64(version), true, int64(version)
			out[sl] = &sh
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("clickhouse: read heads of flow %s: %w", flow, err)
		}
		if slots == nil {
			return nil
		}
	}
	return nil
}

// tailRow is a ledger row a head is advanced by.
type tailRow struct {
	at         int64
	loadID     string
	positions  batch.Positions
	rows, dls  int64
	firstSlot  string
	slotColumn string
}

// foldTail advances the heads of the slots by the ledger rows committed
// after their hint (after the reset for a slot without one): the rows of
// each slot, and the multi-slot rows ("*").
func (s *Sink) foldTail(ctx context.Context, pipeline, flow string, slots []string, resetUS int64, out flowHeads) error {
	since := func(sl string) int64 {
		if sh, ok := out[sl]; ok && sh.hint {
			return sh.hintAt
		}
		return resetUS
	}
	var conds []string
	args := []any{pipeline, flow}
	star := int64(-1)
	for _, sl := range slots {
		from := since(sl)
		if star < 0 || from < star {
			star = from
		}
		conds = append(conds, "(slot = ? AND committed_at >= toDateTime(?))")
		args = append(args, sl, from/1_000_000)
	}
	conds = append(conds, "(slot = '*' AND committed_at >= toDateTime(?))")
	args = append(args, max(star, 0)/1_000_000)
	q := "SELECT positions, rows, dead_letters, committed_at, committed_us, load_id, slot FROM " + s.table(batch.LoadsTable) +
		" WHERE pipeline = ? AND flow = ? AND (" + strings.Join(conds, " OR ") + ")"
	rows, err := s.conn.Query(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("clickhouse: read ledger of flow %s: %w", flow, err)
	}
	var tail []tailRow
	for rows.Next() {
		var r tailRow
		var text string
		var at time.Time
		var us uint32
		if err := rows.Scan(&text, &r.rows, &r.dls, &at, &us, &r.loadID, &r.slotColumn); err != nil {
			rows.Close()
			return fmt.Errorf("clickhouse: read ledger of flow %s: %w", flow, err)
		}
		r.at = withMicros(at, us).UnixMicro()
		if r.at < resetUS {
			continue
		}
		if r.positions, err = batch.DecodePositions(text); err != nil {
			rows.Close()
			return fmt.Errorf("clickhouse: ledger of flow %s: %w", flow, err)
		}
		r.firstSlot = firstSlot(r.positions)
		tail = append(tail, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("clickhouse: read ledger of flow %s: %w", flow, err)
	}
	slices.SortFunc(tail, func(a, b tailRow) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.loadID, b.loadID)) })
	wanted := make(map[string]bool, len(slots))
	for _, sl := range slots {
		wanted[sl] = true
	}
	for _, r := range tail {
		for _, p := range r.positions {
			sl := sinks.Slot(p)
			if !wanted[sl] {
				continue
			}
			sh := out[sl]
			if sh == nil {
				sh = &slotHead{pos: p}
				out[sl] = sh
			}
			if sh.hint && r.at <= sh.hintAt {
				continue // the hint holds it
			}
			if sinks.Ahead(p, sh.pos) || sh.at == 0 {
				sh.pos = p
			}
			sh.at = max(sh.at, r.at)
			if sl == r.firstSlot {
				sh.loads++
				sh.rows += r.rows
				sh.dls += r.dls
			}
		}
	}
	return nil
}

// firstSlot is the slot of a load's positions that its counts go to.
func firstSlot(ps batch.Positions) string {
	first := ""
	for i, p := range ps {
		if sl := sinks.Slot(p); i == 0 || sl < first {
			first = sl
		}
	}
	return first
}

// writeHeads writes the heads a committed load leaves its slots at: its To
// positions, with the counts of the heads it continued (prev, read under
// the slots' locks) and its own on its first slot. A failure is logged:
// the next reader folds the ledger row instead.
func (s *Sink) writeHeads(ctx context.Context, l *load, c sinks.Commit, at time.Time, prev flowHeads) {
	if len(c.To) == 0 {
		return
	}
	missing := []string{}
	for _, p := range c.To {
		if _, ok := prev[sinks.Slot(p)]; !ok {
			missing = append(missing, sinks.Slot(p))
		}
	}
	if len(missing) > 0 && len(c.From) == 0 {
		// A load that names no From holds no lock: read what it continues.
		rt, err := s.resetTimes(ctx)
		if err == nil {
			var more flowHeads
			if more, err = s.foldHeads(ctx, l.meta.Pipeline, l.meta.Flow, missing, rt.last(l.meta.Pipeline, l.meta.Flow)); err == nil {
				if prev == nil {
					prev = flowHeads{}
				}
				for sl, sh := range more {
					prev[sl] = sh
				}
			}
		}
		if err != nil {
			s.log.Warn("heads not written; readers fold the ledger instead", "load", l.meta.LoadID, "err", err)
			return
		}
	}
	if err := s.insertHeads(ctx, l.meta.Pipeline, l.meta.Flow, advanceHeads(prev, c, at), l.meta.LoadID); err != nil {
		s.log.Warn("heads not written; readers fold the ledger instead", "load", l.meta.LoadID, "err", err)
	}
}

// advanceHeads returns the heads a load committed at at leaves its To
// slots at: its positions, with the counts of the heads it continued and
// its own on its first slot.
func advanceHeads(prev flowHeads, c sinks.Commit, at time.Time) flowHeads {
	first := firstSlot(c.To)
	next := flowHeads{}
	for _, p := range c.To {
		sl := sinks.Slot(p)
		var sh slotHead
		if old := prev[sl]; old != nil {
			sh = *old
		}
		sh.pos, sh.at = p, at.UnixMicro()
		sh.hint, sh.hintAt = false, 0
		if sl == first {
			sh.loads++
			sh.rows += c.Rows
			sh.dls += c.DeadLetters
		}
		next[sl] = &sh
	}
	return next
}

// Totals implements sinks.Sink from the flows' heads: the counts each slot's
// latest head holds, summed per flow. A head a crash kept from being
// written is missing from them until the slot's next commit.
func (s *Sink) Totals(ctx context.Context, pipeline string) (map[string]sinks.FlowTotals, error) {
	if err := s.ensureSystem(ctx); err != nil {
		return nil, err
	}
	rt, err := s.resetTimes(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := s.conn.Query(ctx, "SELECT flow, slot, argMax(loads, version), argMax(rows, version), argMax(dead_letters, version), max(version) FROM "+
		s.table(headsTable)+" WHERE pipeline = ? GROUP BY flow, slot", pipeline)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: read totals: %w", err)
	}
	defer rows.Close()
	out := map[string]sinks.FlowTotals{}
	for rows.Next() {
		var flow, slot string
		var loads, nrows, dls int64
		var version uint64
		if err := rows.Scan(&flow, &slot, &loads, &nrows, &dls, &version); err != nil {
			return nil, fmt.Errorf("clickhouse: read totals: %w", err)
		}
		at := time.UnixMicro(int64(version)).UTC()
		if rt.forgotten(pipeline, flow, at) {
			continue
		}
		t := out[flow]
		t.Loads += loads
		t.Rows += nrows
		t.DeadLetters += dls
		if at.After(t.LastAt) {
			t.LastAt = at
		}
		out[flow] = t
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("clickhouse: read totals: %w", err)
	}
	for flow, t := range out {
		if t.Loads == 0 {
			delete(out, flow)
		}
	}
	return out, nil
}

// insertHeads writes heads as rows of _sluice_heads, each versioned by the
// commit time it records.
func (s *Sink) insertHeads(ctx context.Context, pipeline, flow string, h flowHeads, loadID string) error {
	slots := slices.Sorted(maps.Keys(h))
	for len(slots) > 0 {
		chunk := slots[:min(len(slots), 500)]
		slots = slots[len(chunk):]
		// INSERT ... SELECT, as every insert of the protocol: VALUES with
		// bound arguments waits for a data block from 18.16.
		var sels []string
		var args []any
		for _, sl := range chunk {
			sh := h[sl]
			sels = append(sels, "SELECT ?, ?, ?, ?, toInt64(?), toInt64(?), toInt64(?), toUInt64(?), ?")
			args = append(args, pipeline, flow, sl, batch.Positions{sh.pos}.Encode(), sh.loads, sh.rows, sh.dls, uint64(sh.at), loadID)
		}
		if err := s.exec(ctx, "write heads of "+flow, "INSERT INTO "+s.table(headsTable)+
			" (pipeline, flow, slot, position, loads, rows, dead_letters, version, load_id) "+strings.Join(sels, " UNION ALL "), args...); err != nil {
			return err
		}
	}
	return nil
}

// refreshHeads writes the heads of a committed load's slots as the ledger
// has them now: recovery does so for a load whose writer stopped before it
// wrote them.
func (s *Sink) refreshHeads(ctx context.Context, loadID string) error {
	rows, err := s.conn.Query(ctx, "SELECT pipeline, flow, positions FROM "+s.table(batch.LoadsTable)+" WHERE load_id = ?", loadID)
	if err != nil {
		return fmt.Errorf("clickhouse: read ledger: %w", err)
	}
	var pipeline, flow, text string
	found := false
	for rows.Next() {
		if err := rows.Scan(&pipeline, &flow, &text); err != nil {
			rows.Close()
			return fmt.Errorf("clickhouse: read ledger: %w", err)
		}
		found = true
	}
	rows.Close()
	if err := rows.Err(); err != nil || !found {
		return err
	}
	ps, err := batch.DecodePositions(text)
	if err != nil || len(ps) == 0 {
		return err
	}
	slots := make([]string, len(ps))
	for i, p := range ps {
		slots[i] = sinks.Slot(p)
	}
	rt, err := s.resetTimes(ctx)
	if err != nil {
		return err
	}
	h, err := s.foldHeads(ctx, pipeline, flow, slots, rt.last(pipeline, flow))
	if err != nil {
		return err
	}
	for sl, sh := range h {
		if sh.hint && sh.at == sh.hintAt {
			delete(h, sl) // its hint is up to date
		}
	}
	return s.insertHeads(ctx, pipeline, flow, h, loadID)
}

// backfillHeads writes the heads of every flow that has loads from the
// whole ledger: once, when _sluice_heads is created on a destination whose
// ledger has rows.
func (s *Sink) backfillHeads(ctx context.Context) error {
	rows, err := s.conn.Query(ctx, "SELECT DISTINCT pipeline, flow FROM "+s.table(batch.LoadsTable))
	if err != nil {
		return fmt.Errorf("clickhouse: backfill heads: %w", err)
	}
	type pf struct{ pipeline, flow string }
	var flows []pf
	for rows.Next() {
		var f pf
		if err := rows.Scan(&f.pipeline, &f.flow); err != nil {
			rows.Close()
			return fmt.Errorf("clickhouse: backfill heads: %w", err)
		}
		flows = append(flows, f)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("clickhouse: backfill heads: %w", err)
	}
	rt, err := s.resetTimes(ctx)
	if err != nil {
		return err
	}
	for _, f := range flows {
		slotRows, err := s.conn.Query(ctx, "SELECT DISTINCT positions FROM "+s.table(batch.LoadsTable)+" WHERE pipeline = ? AND flow = ?", f.pipeline, f.flow)
		if err != nil {
			return fmt.Errorf("clickhouse: backfill heads: %w", err)
		}
		seen := map[string]bool{}
		for slotRows.Next() {
			var text string
			if err := slotRows.Scan(&text); err != nil {
				slotRows.Close()
				return fmt.Errorf("clickhouse: backfill heads: %w", err)
			}
			ps, err := batch.DecodePositions(text)
			if err != nil {
				slotRows.Close()
				return fmt.Errorf("clickhouse: backfill heads: %w", err)
			}
			for _, p := range ps {
				seen[sinks.Slot(p)] = true
			}
		}
		slotRows.Close()
		if len(seen) == 0 {
			continue
		}
		slots := make([]string, 0, len(seen))
		for sl := range seen {
			slots = append(slots, sl)
		}
		slices.Sort(slots)
		h, err := s.foldHeads(ctx, f.pipeline, f.flow, slots, rt.last(f.pipeline, f.flow))
		if err != nil {
			return err
		}
		if err := s.insertHeads(ctx, f.pipeline, f.flow, h, ""); err != nil {
			return err
		}
	}
	s.log.Info("heads of the ledger's flows written", "flows", len(flows))
	return nil
}
