package cdc

import "slices"

// SCD type 2.
//
// A key's events are reduced to one per sequence (a delete beats an
// upsert; among upserts the greater position wins, so a replaced upsert
// leaves no trace), then walked in sequence order:
//
//   - an upsert resolves its ignored nulls from the version active before
//     it (none after a delete: an insert stores nulls as null); if a
//     version is active and the tracked columns are equal, it joins that
//     version (the version shows the newest member's values), otherwise it
//     closes the active version at its sequence and opens a new one;
//   - a delete closes the active version at its sequence; with none active
//     it is a tombstone that closes whatever a late, older upsert opens.
//
// Late events are therefore placed at their sequence: a late upsert
// becomes the earliest version, splits the version it falls in, or joins a
// run of equal values; a late delete shortens the closed version it falls
// in; an early delete ends the version an older upsert arriving later
// opens. The state keeps the reduced events: every member of a version,
// because a late event inside a coalesced run shows, for the earlier part,
// the values of the member just before it. Members that are neither the
// first nor the last of their version are forgotten once older than the
// retention (their ignored nulls folded into the next member first), and so
// are tombstones that close nothing: an event later than that is placed as
// if they never existed.

// version is one SCD type 2 row.
type version struct {
	first, last int    // its first and last member
	end         string // the sequence that closed it; "" while current
	vals        []value
}

// fold2 walks a key's events and appends its versions to dst. When
// dangling is not nil, dangling[j] is set for a delete that closed nothing.
func (a *applyCtx) fold2(evs []event, dst []version, dangling []bool) []version {
	dst, _ = a.fold2From(evs, 0, dst, dangling, walk2{cur: -1})
	return dst
}

// walk2 is where fold2 stands after some events.
type walk2 struct {
	prev []value // the active version's values; nil when none
	cur  int     // the active version's index in dst; -1 when none
}

// fold2From is fold2 resumed at evs[from], where w stands after
// evs[:from] (folded into dst).
func (a *applyCtx) fold2From(evs []event, from int, dst []version, dangling []bool, w walk2) ([]version, walk2) {
	prev, cur := w.prev, w.cur
	tracked := a.p.tracked
	for j := from; j < len(evs); j++ {
		ev := &evs[j]
		if ev.del {
			if cur >= 0 {
				dst[cur].end = ev.seq
				cur = -1
			} else if dangling != nil {
				dangling[j] = true
			}
			prev = nil
			continue
		}
		raw := a.valsOf(ev)
		res := a.take(len(raw))
		for c, v := range raw {
			if v.k == vAbsent && prev != nil {
				v = prev[c]
			}
			// An absent value without a version before it stays absent:
			// NULL in the row, or no row in a column that is not nullable
			// (unknown).
			res[c] = v
		}
		same := cur >= 0
		for c := 0; same && c < len(res); c++ {
			same = !tracked[c] || res[c] == prev[c]
		}
		if same {
			dst[cur].last = j
			dst[cur].vals = res
		} else {
			if cur >= 0 {
				dst[cur].end = ev.seq
			}
			dst = append(dst, version{first: j, last: j, vals: res})
			cur = len(dst) - 1
		}
		prev = res
	}
	return dst, walk2{prev: prev, cur: cur}
}

// unknown reports whether a version holds no value in a column that is
// not nullable: an absent value with no version before it (fold2From).
func (a *applyCtx) unknown(v version) bool {
	for c, x := range v.vals {
		if x.k == vAbsent && a.p.required[c] {
			return true
		}
	}
	return false
}

// compact2 returns the events of m to keep: all of them (see expire2).
func (a *applyCtx) compact2(m []event) []event {
	for j := 0; j+1 < len(m); j++ {
		if !m[j].del && m[j].row >= 0 && m[j+1].del && m[j+1].seen < a.now {
			a.out.Stats.Suppressed++
			a.gap(m[j+1].seen)
		}
	}
	return m
}

// expire2 forgets, in a stored state, the members older than the retention
// that are neither the first nor the last of their version, and the
// tombstones older than it that close nothing. Neither changes a row.
func (a *applyCtx) expire2(evs []event) []event {
	expired := false
	for j := range evs {
		if a.expired(&evs[j]) {
			expired = true
			break
		}
	}
	if !expired {
		return evs
	}
	m := append(a.expBuf[:0], evs...)
	drop := a.mark(len(m)) // dangling deletes first, from fold2
	vers := a.fold2(m, a.vers[:0], drop)
	a.vers = vers[:0]
	for j := range m {
		if drop[j] {
			// A delete at a remembered snapshot version stays: it would
			// be added again (snapshotDeletes).
			drop[j] = a.expired(&m[j]) && !a.atBarrier(m[j].seq)
			if drop[j] {
				a.out.Stats.Expired++
			}
		}
	}
	for _, v := range vers {
		for j := v.first + 1; j < v.last; j++ {
			if !a.expired(&m[j]) || a.atSnapshot(&m[j]) {
				continue
			}
			drop[j] = true
			// The next member takes over the values this one set where it
			// ignored a null: resolution stays the same.
			next := &m[j+1]
			for c, x := range m[j].vals {
				if x.k == vAbsent || next.vals[c].k != vAbsent {
					continue
				}
				if !a.owned(next) {
					next.vals = append(a.take(len(next.vals))[:0], next.vals...)
					a.own(next)
				}
				next.vals[c] = x
			}
		}
	}
	out := m[:0]
	for j := range m {
		if !drop[j] {
			out = append(out, m[j])
		}
	}
	a.expBuf = out
	return out
}

// owned and own track which events' values compact2 already copied, so that
// stored states are never written to. A copied event is marked by row -2.
func (a *applyCtx) owned(ev *event) bool { return ev.row == -2 }
func (a *applyCtx) own(ev *event)        { ev.row = -2 }

// diff2 records the change of a key's versions. The first same events
// are the same in both lists: they are folded once, and the versions they
// close are the same in both.
func (a *applyCtx) diff2(key string, oldEv, newEv []event, same int) error {
	pre, w := a.fold2From(oldEv[:same], 0, a.vers[:0], nil, walk2{cur: -1})
	a.vers = pre[:0]
	open := pre[len(pre):] // the version the first same events leave open
	if w.cur >= 0 {
		open, w.cur = pre[w.cur:], 0
	}
	ov, _ := a.fold2From(oldEv, same, append(a.oldVers[:0], open...), nil, w)
	nv, _ := a.fold2From(newEv, same, append(a.newVers[:0], open...), nil, w)
	a.oldVers, a.newVers = ov[:0], nv[:0]
	// A version a column of which no change gave yet (an absent value,
	// as Debezium's TOAST placeholder, in a column that is not nullable)
	// is not known: it is no row until a change gives the value.
	ov, nv = slices.DeleteFunc(ov, a.unknown), slices.DeleteFunc(nv, a.unknown)
	i, j := 0, 0
	for i < len(ov) || j < len(nv) {
		var os, ns string
		if i < len(ov) {
			os = oldEv[ov[i].first].seq
		}
		if j < len(nv) {
			ns = newEv[nv[j].first].seq
		}
		switch {
		case j >= len(nv) || (i < len(ov) && os < ns):
			if err := a.appendRow(&a.out.Deletes, key, ov[i].vals, os, os, ov[i].end); err != nil {
				return err
			}
			i++
		case i >= len(ov) || ns < os:
			if err := a.appendRow(&a.out.Upserts, key, nv[j].vals, ns, ns, nv[j].end); err != nil {
				return err
			}
			j++
		default:
			if ov[i].end != nv[j].end || !slices.Equal(ov[i].vals, nv[j].vals) {
				if err := a.appendRow(&a.out.Upserts, key, nv[j].vals, ns, ns, nv[j].end); err != nil {
					return err
				}
			}
			i++
			j++
		}
	}
	return nil
}
