package cdc

import (
	"slices"
	"sort"
)

// SCD type 1.
//
// The rows are defined by applying a key's events one at a time in (seq,
// position) order: an upsert inserts, or updates the row (an eligible
// column keeps its value on a null); a delete removes the row when it is
// strictly newer than the row; a truncate at T removes every row older
// than T. The engine computes the same result from the stored events in
// any arrival order with this equivalent form:
//
//   - A delete cuts at its sequence s when it comes first among the events
//     at s (no upsert at s has a lesser position): at that point it removes
//     whatever row there is. A delete that an upsert at the same s precedes
//     never removes anything. The truncate barrier is a delete at T of every
//     key.
//   - The row is made of the upserts after the last cut (the suffix): it
//     exists when the suffix holds an upsert, its sequence is the newest
//     upsert's, and each column holds the value of the newest upsert of the
//     suffix that set it (a null that ignore-null ignores sets nothing), or
//     null when none did.
//
// So an upsert can only matter while it is the newest upsert, the newest
// to set some column, or the first upsert at a sequence that also has a
// delete; the state keeps those and the deletes, and nothing else. Without
// ignore-null the state shrinks to the row's upsert or the tombstone. (A
// delete arriving later at the sequence of an upsert dropped this way is
// the one inexact case; see the package documentation.)

// cut1 returns the index where the suffix starts and the creation time of
// the delete (or truncate) that cut there (0 when nothing cuts).
func (a *applyCtx) cut1(evs []event, bs []Barrier) (start int, seen int64) {
	has, cutSeq := false, ""
	for j := range evs {
		if evs[j].del && (j == 0 || evs[j].seq != evs[j-1].seq) {
			start, cutSeq, seen, has = j, evs[j].seq, evs[j].seen, true
		}
	}
	for i := len(bs) - 1; i >= 0; i-- {
		b := &bs[i]
		if has && b.Seq <= cutSeq {
			break
		}
		idx := sort.Search(len(evs), func(j int) bool { return evs[j].seq >= b.Seq })
		if idx == len(evs) || evs[idx].seq != b.Seq || b.Pos.Compare(evs[idx].pos) < 0 {
			return idx, b.Seen.UnixMicro()
		}
	}
	return start, seen
}

type row1 struct {
	vals []value
	seq  string
}

// fold1 returns the row a key's events leave.
func (a *applyCtx) fold1(evs []event, b []Barrier) (row1, bool) {
	start, _ := a.cut1(evs, b)
	last := -1
	for j := len(evs) - 1; j >= start; j-- {
		if !evs[j].del {
			last = j
			break
		}
	}
	if last < 0 {
		return row1{}, false
	}
	ncols := len(a.p.names)
	vals := a.take(ncols)
	for c := range vals {
		vals[c] = value{k: vAbsent}
	}
	need := ncols
	for j := last; j >= start && need > 0; j-- {
		if evs[j].del {
			continue
		}
		for c, v := range a.valsOf(&evs[j]) {
			if vals[c].k == vAbsent && v.k != vAbsent {
				vals[c] = v
				need--
			}
		}
	}
	for c := range vals {
		if vals[c].k == vAbsent {
			if a.p.required[c] {
				// No change gave the value yet (an absent one, as
				// Debezium's TOAST placeholder): the row is not known.
				return row1{}, false
			}
			vals[c] = null
		}
	}
	return row1{vals: vals, seq: evs[last].seq}, true
}

// expire1 forgets the deletes of a stored state older than the retention,
// and with them the upserts they cut off, before new events are merged.
func (a *applyCtx) expire1(evs []event, bs []Barrier) []event {
	nexp := 0
	for j := range evs {
		if evs[j].del && a.expired(&evs[j]) {
			nexp++
		}
	}
	if nexp == 0 {
		return evs
	}
	start, _ := a.cut1(evs, bs)
	out := a.expBuf[:0]
	for j := range evs {
		ev := evs[j]
		if (ev.del && a.expired(&ev)) || (!ev.del && j < start) {
			continue
		}
		out = append(out, ev)
	}
	a.expBuf = out
	a.out.Stats.Expired += nexp
	return out
}

// compact1 returns the events of m that can still matter (see above).
func (a *applyCtx) compact1(m []event, bs []Barrier) []event {
	var b *Barrier // the newest truncate
	if len(bs) > 0 {
		b = &bs[len(bs)-1]
	}
	tombs := a.tombstoneDeletes(m)
	start, cutSeen := a.cut1(m, bs)
	for j := 0; j < start; j++ {
		if !m[j].del && m[j].row >= 0 {
			a.out.Stats.Suppressed++
			a.gap(cutSeen)
		}
	}

	// One delete per sequence: the first, which decides whether it cuts.
	out := m[:0]
	first := -1 // index in out of the first delete at the current sequence
	for j := range m {
		ev := m[j]
		if len(out) > 0 && out[len(out)-1].seq != ev.seq {
			first = -1
		}
		if ev.del {
			if first >= 0 {
				out[first].seen = min(out[first].seen, ev.seen)
				continue
			}
			first = len(out)
		}
		out = append(out, ev)
	}
	m = out

	lastU, lastD := -1, -1
	for j := range m {
		if m[j].del {
			lastD = j
		} else {
			lastU = j
		}
	}
	// Batch events read their values late: a batch with absent values
	// keeps what it may need as a stored state does.
	eligible := a.p.anyElig || a.in.Absent != nil || hasAbsent(m)
	if !eligible {
		// The row is the newest upsert when it is at least as new as every
		// delete, else there is no row and only the newest delete matters.
		eff, has := "", false
		if lastD >= 0 {
			eff, has = m[lastD].seq, true
		}
		if b != nil && (!has || b.Seq > eff) {
			eff, has = b.Seq, true
		}
		switch {
		case lastU >= 0 && (!has || m[lastU].seq >= eff):
			return withDeletes(m[lastU:lastU+1], tombs)
		case lastD >= 0 && (b == nil || m[lastD].seq > b.Seq):
			return withDeletes(m[lastD:lastD+1], tombs)
		}
		return withDeletes(nil, tombs)
	}

	keep := a.mark(len(m))
	set := make([]bool, len(a.p.names))
	need := len(set)
	for j := len(m) - 1; j >= 0; j-- {
		if m[j].del {
			keep[j] = true
			continue
		}
		if j == lastU {
			keep[j] = true
		}
		if need == 0 {
			continue
		}
		for c, v := range a.valsOf(&m[j]) {
			if !set[c] && v.k != vAbsent {
				set[c] = true
				need--
				keep[j] = true
			}
		}
	}
	// The first upsert at a sequence that has a delete or the barrier
	// decides whether that sequence cuts.
	for g0 := 0; g0 < len(m); {
		g1, del := g0, false
		for g1 < len(m) && m[g1].seq == m[g0].seq {
			del = del || m[g1].del
			g1++
		}
		if del || slices.ContainsFunc(bs, func(b Barrier) bool { return b.Seq == m[g0].seq }) {
			for k := g0; k < g1; k++ {
				if !m[k].del {
					keep[k] = true
					break
				}
			}
		}
		g0 = g1
	}
	out = m[:0]
	for j := range m {
		if keep[j] {
			out = append(out, m[j])
		}
	}
	return withDeletes(out, tombs)
}

// tombstoneDeletes returns copies of the newest delete per source
// partition (flow, topic, partition, file) that a tombstone gave. The state
// keeps them until the retention, whether or not they still matter for the
// row: a tombstone delivered again must find its delete, or it would take
// the sequence of a newer change and delete that (docs/cdc.md, Tombstones).
// An older tombstone of the partition is followed by the newest.
func (a *applyCtx) tombstoneDeletes(m []event) []event {
	var out []event
	for j := range m {
		ev := &m[j]
		if !ev.del || !a.fromTombstone(ev.seq) {
			continue
		}
		i := slices.IndexFunc(out, func(x event) bool { return samePartition(x.pos, ev.pos) })
		switch {
		case i < 0:
			out = append(out, *ev)
		case ev.pos.Offset > out[i].pos.Offset:
			out[i] = *ev
		}
	}
	return out
}

// withDeletes returns kept with the deletes of dels it lacks, in (seq,
// position) order.
func withDeletes(kept, dels []event) []event {
	var add []event
	for _, d := range dels {
		if !slices.ContainsFunc(kept, func(x event) bool { return x.del && x.pos == d.pos }) {
			add = append(add, d)
		}
	}
	if len(add) == 0 {
		return kept
	}
	out := slices.Concat(kept, add)
	sortEvents(out)
	return out
}

func hasAbsent(m []event) bool {
	for i := range m {
		if slices.ContainsFunc(m[i].vals, func(v value) bool { return v.k == vAbsent }) {
			return true
		}
	}
	return false
}

// mark returns n cleared flags.
func (a *applyCtx) mark(n int) []bool {
	a.marks = grow(a.marks, n)
	clear(a.marks)
	return a.marks
}

// diff1 records the change of a key's row.
func (a *applyCtx) diff1(key string, oldEv, newEv []event, oldB, newB []Barrier) {
	or, ook := a.fold1(oldEv, oldB)
	nr, nok := a.fold1(newEv, newB)
	switch {
	case nok && ook && or.seq == nr.seq && slices.Equal(or.vals, nr.vals):
	case nok:
		_ = a.appendRow(&a.out.Upserts, key, nr.vals, nr.seq, "", "")
	case ook:
		_ = a.appendRow(&a.out.Deletes, key, or.vals, or.seq, "", "")
	}
}
