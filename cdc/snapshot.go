package cdc

import "slices"

// Snapshot barriers (SCD type 2). A snapshot at version V is an upsert at
// V of every key it holds and a delete at V of every key it does not,
// including keys first seen after it was applied. The snapshot flow
// deletes the keys the target holds when it applies V; the table state
// remembers V (TableState.Snapshots), and any other key gets its delete
// at V when it is next applied, if it has an upsert at or before V by then
// (before that, the delete would close nothing). The snapshot's upserts
// are marked (event.snap), and the mark survives an upsert at V of another
// flow that wins the tie, so a key the snapshot held is never deleted at
// V. Barriers older than tombstone_retention are forgotten, the newest
// never: an upsert older than a forgotten barrier, arriving later, is no
// longer closed by it (as with tombstones).

// mergeSnapshots adds a batch's snapshot barriers to the table's: one per
// sequence (the least position, the earliest creation), those older than
// the retention dropped but the newest.
func (e *Engine) mergeSnapshots(old, add []Barrier, now int64) []Barrier {
	all := e.mergeBarriers(old, add, now)
	keep := all[:0]
	for i, b := range all {
		if i == len(all)-1 || b.Seen.UnixMicro()+e.retention > now {
			keep = append(keep, b)
		}
	}
	return keep
}

// snapshotDeletes adds to a key's batch events fresh the delete at each
// remembered snapshot version V the key is not in, once the key has an
// upsert at or before V; old are its stored events.
func (a *applyCtx) snapshotDeletes(old, fresh []event) []event {
	if len(a.snaps) == 0 || len(fresh) == 0 {
		return fresh
	}
	added := false
	for _, b := range a.snaps {
		older, held := false, false
		for _, evs := range [2][]event{old, fresh} {
			for i := range evs {
				ev := &evs[i]
				older = older || (!ev.del && ev.seq <= b.Seq)
				held = held || (ev.seq == b.Seq && (ev.del || ev.snap))
			}
		}
		if older && !held {
			fresh = append(fresh[:len(fresh):len(fresh)], event{seq: b.Seq, pos: b.Pos, del: true, seen: b.Seen.UnixMicro(), row: -1})
			added = true
		}
	}
	if added {
		sortEvents(fresh)
	}
	return fresh
}

// atSnapshot reports whether ev is an upsert of a snapshot whose barrier
// is remembered: expiry keeps it, as the mark that the key was in it.
func (a *applyCtx) atSnapshot(ev *event) bool { return ev.snap && a.atBarrier(ev.seq) }

// atBarrier reports whether seq is a remembered snapshot version.
func (a *applyCtx) atBarrier(seq string) bool {
	return slices.ContainsFunc(a.snaps, func(b Barrier) bool { return b.Seq == seq })
}
