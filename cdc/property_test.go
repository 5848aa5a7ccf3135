package cdc

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/flows/batch"
)

// Property tests: whatever the arrival order, the split into batches, the
// redeliveries and the restarts, the table equals what applying the events
// one at a time in (seq, position) order gives. The oracle below is that
// definition written out plainly, independent of the engine.

var propSource = batch.Schema{Columns: []batch.Column{
	{Name: "id", Type: batch.Int64},
	{Name: "name", Type: batch.String, Nullable: true},
	{Name: "city", Type: batch.String, Nullable: true},
	{Name: "op", Type: batch.String, Nullable: true},
	{Name: "seq", Type: batch.Int64, Nullable: true},
}}

type pev struct {
	key  int
	seq  int
	op   string // "U", "D" or "T"
	name *string
	city *string
	flow string // "f" or "g": two flows write the target
	off  int64  // position in the flow's topic partition; unique
}

func (e pev) pos() Position { return Position{Flow: e.flow, Topic: "t-" + e.flow, Offset: e.off} }

// before orders events by position.
func (e pev) before(o pev) bool { return e.pos().Compare(o.pos()) < 0 }

func (e pev) row() []any {
	var name, city, op any
	if e.name != nil {
		name = *e.name
	}
	if e.city != nil {
		city = *e.city
	}
	if e.op != "U" {
		op = e.op
	}
	var key any = e.key
	if e.op == "T" {
		key = 0
	}
	return []any{key, name, city, op, e.seq}
}

// variant is a flow configuration drawn for a property run.
type variant struct {
	scd2       bool
	ignoreNull int // 0 none, 1 all, 2 column_list [name], 3 except_column_list [name]
	track      int // SCD2: 0 all, 1 [name], 2 except [name]
	truncates  bool
}

func (v variant) config(flow string) Config {
	c := Config{
		Pipeline: "p", Flow: flow, Target: "t", Source: propSource, Kafka: true,
		Keys: []string{"id"}, SequenceBy: []string{"seq"},
		ApplyAsDeletes: `op == "D"`, ExceptColumnList: []string{"op", "seq"},
	}
	if v.truncates {
		c.ApplyAsTruncates = `op == "T"`
	}
	if v.scd2 {
		c.SCDType = 2
		switch v.track {
		case 1:
			c.TrackHistoryColumnList = []string{"name"}
		case 2:
			c.TrackHistoryExceptColumnList = []string{"name"}
		}
	}
	switch v.ignoreNull {
	case 1:
		c.IgnoreNullUpdates = true
	case 2:
		c.IgnoreNullUpdatesColumnList = []string{"name"}
	case 3:
		c.IgnoreNullUpdatesExceptColumnList = []string{"name"}
	}
	return c
}

// eligible tells whether column c (0 name, 1 city) keeps its value on a null.
func (v variant) eligible(c int) bool {
	switch v.ignoreNull {
	case 1:
		return true
	case 2:
		return c == 0
	case 3:
		return c == 1
	}
	return false
}

func (v variant) tracked(c int) bool {
	switch v.track {
	case 1:
		return c == 0
	case 2:
		return c == 1
	}
	return true
}

func strp(s string) *string { return &s }

func fmtv(p *string) string {
	if p == nil {
		return "null"
	}
	return *p
}

func eqp(a, b *string) bool { return (a == nil && b == nil) || (a != nil && b != nil && *a == *b) }

// oracle1 applies every event one at a time in (seq, position) order.
func oracle1(v variant, evs []pev) []string {
	type row struct {
		vals [2]*string
		seq  int
	}
	sorted := slices.Clone(evs)
	slices.SortFunc(sorted, func(a, b pev) int {
		return cmp.Or(cmp.Compare(a.seq, b.seq), a.pos().Compare(b.pos()))
	})
	rows := map[int]*row{}
	for _, e := range sorted {
		switch e.op {
		case "T":
			for k, r := range rows {
				if r.seq < e.seq {
					delete(rows, k)
				}
			}
		case "D":
			if r := rows[e.key]; r != nil && e.seq > r.seq {
				delete(rows, e.key)
			}
		case "U":
			in := [2]*string{e.name, e.city}
			r := rows[e.key]
			if r == nil {
				rows[e.key] = &row{vals: in, seq: e.seq}
				continue
			}
			for c := range in {
				if in[c] != nil || !v.eligible(c) {
					r.vals[c] = in[c]
				}
			}
			r.seq = e.seq
		}
	}
	out := []string{}
	keys := make([]int, 0, len(rows))
	for k := range rows {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		r := rows[k]
		out = append(out, fmt.Sprintf("(%d,%s,%s)", k, fmtv(r.vals[0]), fmtv(r.vals[1])))
	}
	return out
}

// oracle2 builds each key's versions: one event per sequence (a delete
// beats an upsert, the greater position wins among upserts), then in
// sequence order an upsert either joins the current version (equal tracked
// values) or closes it and opens one; a delete closes it.
func oracle2(v variant, evs []pev) []string {
	byKey := map[int][]pev{}
	for _, e := range evs {
		byKey[e.key] = append(byKey[e.key], e)
	}
	keys := make([]int, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := []string{}
	for _, k := range keys {
		win := map[int]pev{}
		for _, e := range byKey[k] {
			w, ok := win[e.seq]
			switch {
			case !ok:
				win[e.seq] = e
			case w.op == "D" && e.op == "D":
			case e.op == "D":
				win[e.seq] = e
			case w.op == "D":
			case w.before(e):
				win[e.seq] = e
			}
		}
		seqs := make([]int, 0, len(win))
		for s := range win {
			seqs = append(seqs, s)
		}
		slices.Sort(seqs)
		type version struct {
			start int
			end   *int
			vals  [2]*string
		}
		var vs []version
		var prev *[2]*string
		for _, s := range seqs {
			e := win[s]
			if e.op == "D" {
				if prev != nil {
					vs[len(vs)-1].end = &s
				}
				prev = nil
				continue
			}
			res := [2]*string{e.name, e.city}
			for c := range res {
				if res[c] == nil && v.eligible(c) && prev != nil {
					res[c] = prev[c]
				}
			}
			same := prev != nil
			for c := 0; same && c < len(res); c++ {
				if v.tracked(c) && !eqp(res[c], prev[c]) {
					same = false
				}
			}
			if same {
				vs[len(vs)-1].vals = res
			} else {
				if prev != nil {
					vs[len(vs)-1].end = &s
				}
				vs = append(vs, version{start: s, vals: res})
			}
			prev = &res
		}
		for _, x := range vs {
			end := "∞"
			if x.end != nil {
				end = fmt.Sprint(*x.end)
			}
			out = append(out, fmt.Sprintf("(%d,%s,%s,%d,%s)", k, fmtv(x.vals[0]), fmtv(x.vals[1]), x.start, end))
		}
	}
	return out
}

// drawEvents draws events of up to four keys; with distinct, no two events
// share (key, seq).
func drawEvents(t *rapid.T, v variant, distinct bool) []pev {
	names := []*string{nil, strp("a"), strp("b")}
	gen := rapid.Custom(func(t *rapid.T) pev {
		e := pev{
			key:  rapid.IntRange(1, 4).Draw(t, "key"),
			seq:  rapid.IntRange(1, 16).Draw(t, "seq"),
			op:   "U",
			name: rapid.SampledFrom(names).Draw(t, "name"),
			city: rapid.SampledFrom(names).Draw(t, "city"),
		}
		if rapid.IntRange(0, 3).Draw(t, "del") == 0 {
			e.op, e.name, e.city = "D", nil, nil
		}
		return e
	})
	var evs []pev
	if distinct {
		evs = rapid.SliceOfNDistinct(gen, 1, 24, func(e pev) [2]int { return [2]int{e.key, e.seq} }).Draw(t, "events")
	} else {
		evs = rapid.SliceOfN(gen, 1, 24).Draw(t, "events")
	}
	if !distinct && v.ignoreNull != 0 && !v.scd2 {
		// The same limit for deletes: with ignore-null, no delete at the
		// sequence of an upsert of its key.
		ups := map[[2]int]bool{}
		for _, e := range evs {
			if e.op == "U" {
				ups[[2]int{e.key, e.seq}] = true
			}
		}
		evs = slices.DeleteFunc(evs, func(e pev) bool { return e.op == "D" && ups[[2]int{e.key, e.seq}] })
	}
	if v.truncates {
		// With ignore-null, a truncate at the very sequence of an upsert
		// the state no longer holds is the documented limit of exactness:
		// keep truncates off the upserts' sequences then.
		used := map[int]bool{}
		for _, e := range evs {
			if v.ignoreNull != 0 && e.op == "U" {
				used[e.seq] = true
			}
		}
		seqs := rapid.SliceOfNDistinct(rapid.IntRange(1, 16), 0, 2, rapid.ID[int]).Draw(t, "truncates")
		for _, s := range seqs {
			if !used[s] {
				evs = append(evs, pev{op: "T", seq: s})
			}
		}
	}
	offs := rapid.Permutation(seqInts(len(evs))).Draw(t, "offsets")
	for i := range evs {
		evs[i].off = int64(offs[i])
		evs[i].flow = rapid.SampledFrom([]string{"f", "g"}).Draw(t, "flow")
	}
	return evs
}

func seqInts(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// applyEvents applies events as one batch per flow.
func applyEvents(h *harness, evs []pev) {
	for _, flow := range []string{"f", "g"} {
		var rows [][]any
		var pos []Position
		for _, e := range evs {
			if e.flow == flow {
				rows = append(rows, e.row())
				pos = append(pos, e.pos())
			}
		}
		if len(rows) > 0 {
			h.apply(flow, mkBatch(propSource, rows), pos)
		}
	}
}

// deliver applies evs in a drawn order, split into drawn batches, with
// drawn redeliveries and restarts, and returns the table.
func deliver(t *rapid.T, h *harness, evs []pev) []string {
	order := rapid.Permutation(evs).Draw(t, "order")
	for range rapid.IntRange(0, 4).Draw(t, "redeliveries") {
		e := rapid.SampledFrom(evs).Draw(t, "again")
		at := rapid.IntRange(0, len(order)).Draw(t, "at")
		order = slices.Insert(order, at, e)
	}
	for len(order) > 0 {
		n := rapid.IntRange(1, len(order)).Draw(t, "batch")
		h.now = h.now.Add(rapid.SampledFrom([]time.Duration{0, time.Second, time.Minute}).Draw(t, "pause"))
		applyEvents(h, order[:n])
		order = order[n:]
		if rapid.IntRange(0, 3).Draw(t, "restart") == 0 {
			h.restart()
		}
	}
	return h.target.content()
}

func drawVariant(t *rapid.T, scd2 bool) variant {
	v := variant{scd2: scd2, ignoreNull: rapid.IntRange(0, 3).Draw(t, "ignoreNull")}
	if scd2 {
		v.track = rapid.IntRange(0, 2).Draw(t, "track")
	} else {
		v.truncates = rapid.Bool().Draw(t, "truncates")
	}
	return v
}

func checkProperty(scd2, distinct bool) func(*rapid.T) {
	return func(t *rapid.T) {
		v := drawVariant(t, scd2)
		evs := drawEvents(t, v, distinct)
		want := oracle1(v, evs)
		if scd2 {
			want = oracle2(v, evs)
		}
		h := newHarness(t, v.config("f"), v.config("g"))
		h.cacheBytes = rapid.SampledFrom([]int64{0, 600, 1 << 20}).Draw(t, "cache")
		h.workers = rapid.SampledFrom([]int{1, 3}).Draw(t, "workers")
		h.restart()
		got := deliver(t, h, evs)
		if diff := gocmp.Diff(want, got); diff != "" {
			t.Fatalf("table (-oracle +engine):\n%s", diff)
		}
		if scd2 {
			checkIntervals(t, h)
		}
		// Everything again, in another order, after a restart, changes no
		// row (states may still shed what a truncate made useless); a
		// second replay changes nothing at all.
		h.restart()
		for round := range 2 {
			for _, e := range rapid.Permutation(evs).Draw(t, "replay") {
				out, err := h.engines[e.flow].Apply(t.Context(), Input{Batch: mkBatch(propSource, [][]any{e.row()}), Positions: []Position{e.pos()}, Now: h.now})
				if err != nil {
					t.Fatal(err)
				}
				if out.Upserts.Len()+out.Deletes.Len() != 0 || out.Table != nil || (round == 1 && len(out.States) != 0) {
					t.Fatalf("replay %d of %+v changed %d rows, removed %d, %d states", round, e, out.Upserts.Len(), out.Deletes.Len(), len(out.States))
				}
				h.commit(out)
			}
		}
		if diff := gocmp.Diff(want, h.target.content()); diff != "" {
			t.Fatalf("table after replays (-oracle +engine):\n%s", diff)
		}
	}
}

func TestPropertySCD1(t *testing.T) { rapid.Check(t, checkProperty(false, true)) }
func TestPropertySCD2(t *testing.T) { rapid.Check(t, checkProperty(true, true)) }

// Ties: events of one key may share a sequence (different positions).
func TestPropertySCD1Ties(t *testing.T) { rapid.Check(t, checkProperty(false, false)) }
func TestPropertySCD2Ties(t *testing.T) { rapid.Check(t, checkProperty(true, false)) }

// Snapshots (docs/cdc.md#snapshots-on-scd-type-2): an SCD type 2 snapshot at V is an upsert at V of each
// key it holds and a delete at V of every other key, also of keys first
// seen after it was applied. Up to two snapshots, applied in version order
// at drawn points of the CDC stream, give the table the oracle gives their
// events mixed with the CDC flows'; the snapshot flow "a" orders before
// them, so that their upserts at a snapshot's version win the tie.
func TestPropertySCD2Snapshots(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		v := variant{scd2: true, track: rapid.IntRange(0, 2).Draw(t, "track")}
		evs := drawEvents(t, v, rapid.Bool().Draw(t, "distinct"))
		type snapshot struct {
			v    int
			rows [][]any
		}
		names := []*string{nil, strp("a"), strp("b")}
		var snaps []snapshot
		all := slices.Clone(evs)
		for i, sv := range rapid.SliceOfNDistinct(rapid.IntRange(1, 16), 0, 2, rapid.ID[int]).Draw(t, "versions") {
			snaps = append(snaps, snapshot{v: sv})
			_ = i
		}
		slices.SortFunc(snaps, func(a, b snapshot) int { return cmp.Compare(a.v, b.v) })
		var off int64
		for i := range snaps {
			s := &snaps[i]
			for key := 1; key <= 4; key++ {
				e := pev{key: key, seq: s.v, op: "D", flow: "a", off: off}
				off++
				if rapid.Bool().Draw(t, "held") {
					e.op, e.name, e.city = "U", rapid.SampledFrom(names).Draw(t, "name"), rapid.SampledFrom(names).Draw(t, "city")
					s.rows = append(s.rows, e.row())
				}
				all = append(all, e)
			}
		}
		want := oracle2(v, all)

		snap := v.config("a")
		snap.ApplyAsDeletes, snap.Snapshot = "", true
		h := newHarness(t, snap, v.config("f"), v.config("g"))
		h.cacheBytes = rapid.SampledFrom([]int64{0, 600, 1 << 20}).Draw(t, "cache")
		h.restart()
		order := rapid.Permutation(evs).Draw(t, "order")
		at := make([]int, len(snaps)) // how many CDC events precede each snapshot
		for i := range at {
			at[i] = rapid.IntRange(0, len(order)).Draw(t, "at")
		}
		slices.Sort(at)
		done := 0
		for i, s := range snaps {
			for done < at[i] {
				n := rapid.IntRange(1, at[i]-done).Draw(t, "batch")
				applyEvents(h, order[done:done+n])
				done += n
			}
			h.now = h.now.Add(time.Second)
			h.applySnapshot("a", s.v, s.rows...)
			if rapid.Bool().Draw(t, "restart") {
				h.restart()
			}
		}
		for done < len(order) {
			n := rapid.IntRange(1, len(order)-done).Draw(t, "batch")
			applyEvents(h, order[done:done+n])
			done += n
		}
		if diff := gocmp.Diff(want, h.target.content()); diff != "" {
			t.Fatalf("table (-oracle +engine):\n%s", diff)
		}
		checkIntervals(t, h)
		// The CDC events again change nothing.
		h.restart()
		for _, e := range evs {
			out, err := h.engines[e.flow].Apply(t.Context(), Input{Batch: mkBatch(propSource, [][]any{e.row()}), Positions: []Position{e.pos()}, Now: h.now})
			if err != nil {
				t.Fatal(err)
			}
			if out.Upserts.Len()+out.Deletes.Len() != 0 {
				t.Fatalf("replay of %+v changed %d rows, removed %d", e, out.Upserts.Len(), out.Deletes.Len())
			}
			h.commit(out)
		}
	})
}

// Forgetting (tombstones and coalesced members after the retention) never
// changes a row, and only ever affects events later than the retention:
// delivered in sequence order, with a retention shorter than every pause,
// the table still equals the oracle's, and Expire changes no row.
func TestPropertyForgetting(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		v := drawVariant(t, rapid.Bool().Draw(t, "scd2"))
		evs := drawEvents(t, v, true)
		want := oracle1(v, evs)
		if v.scd2 {
			want = oracle2(v, evs)
		}
		cf, cg := v.config("f"), v.config("g")
		cf.TombstoneRetention, cg.TombstoneRetention = time.Minute, time.Minute
		h := newHarness(t, cf, cg)
		h.cacheBytes = rapid.SampledFrom([]int64{0, 600, 1 << 20}).Draw(t, "cache")
		h.restart()
		order := slices.Clone(evs)
		slices.SortFunc(order, func(a, b pev) int { return cmp.Or(cmp.Compare(a.seq, b.seq), a.pos().Compare(b.pos())) })
		for len(order) > 0 {
			// One flow per batch, so that the events stay in order.
			n := 1
			for n < len(order) && order[n].flow == order[0].flow && rapid.Bool().Draw(t, "more") {
				n++
			}
			h.now = h.now.Add(2 * time.Minute)
			applyEvents(h, order[:n])
			order = order[n:]
			before := h.target.content()
			out, err := h.engines["f"].Expire(t.Context(), h.store.Keys(), h.now)
			if err != nil {
				t.Fatal(err)
			}
			if out.Upserts.Len()+out.Deletes.Len() != 0 {
				t.Fatalf("Expire wrote %d rows, removed %d", out.Upserts.Len(), out.Deletes.Len())
			}
			h.commit(out)
			if diff := gocmp.Diff(before, h.target.content()); diff != "" {
				t.Fatalf("Expire changed the table (-before +after):\n%s", diff)
			}
		}
		if diff := gocmp.Diff(want, h.target.content()); diff != "" {
			t.Fatalf("table (-oracle +engine):\n%s", diff)
		}
	})
}

// checkIntervals asserts the shape of an SCD type 2 table's history,
// independently of the oracle: per key, versions have positive width, never
// overlap, and only the last one may be current.
func checkIntervals(t tb, h *harness) {
	sch := h.engines["f"].Schema()
	si, ei := sch.Index(StartAtColumn), sch.Index(EndAtColumn)
	if si < 0 || ei < 0 {
		t.Fatalf("schema %v lacks the interval columns", sch.Names())
	}
	byKey := map[string][]tRow{}
	for _, r := range h.target.rows {
		byKey[r.key] = append(byKey[r.key], r)
	}
	for _, rows := range byKey {
		slices.SortFunc(rows, func(a, b tRow) int { return cmp.Compare(a.vals[si].(int64), b.vals[si].(int64)) })
		for i, r := range rows {
			start := r.vals[si].(int64)
			end, closed := r.vals[ei].(int64)
			if closed && end <= start {
				t.Fatalf("version %v: __END_AT %d not after __START_AT %d", r.vals, end, start)
			}
			if !closed && i != len(rows)-1 {
				t.Fatalf("version %v is current but not the last of its key", r.vals)
			}
			if i > 0 {
				if prevEnd := rows[i-1].vals[ei].(int64); prevEnd > start {
					t.Fatalf("versions %v and %v overlap", rows[i-1].vals, r.vals)
				}
			}
		}
	}
}

// TestApplyKeysInParallel: an engine applying a batch's keys with several
// goroutines gives exactly the Output, in the same order, that one
// goroutine gives, over stored states and late events.
func TestApplyKeysInParallel(t *testing.T) {
	for _, scd2 := range []bool{false, true} {
		v := variant{scd2: scd2, ignoreNull: 1}
		rng := rand.New(rand.NewPCG(3, 4))
		names := []string{"a", "b", "c"}
		batches := make([][]pev, 3)
		seqs := rng.Perm(3 * 6000)
		for i, seq := range seqs {
			e := pev{key: rng.IntN(2000), seq: seq, op: "U", flow: "f", off: int64(i)}
			switch rng.IntN(8) {
			case 0:
				e.op = "D"
			case 1:
			default:
				e.name = &names[rng.IntN(len(names))]
				e.city = &names[rng.IntN(len(names))]
			}
			batches[i%3] = append(batches[i%3], e)
		}
		outputs := func(workers int) []*Output {
			h := newHarness(t, v.config("f"))
			h.workers = workers
			h.restart()
			var outs []*Output
			for _, evs := range batches {
				rows := make([][]any, len(evs))
				pos := make([]Position, len(evs))
				for i, e := range evs {
					rows[i], pos[i] = e.row(), e.pos()
				}
				outs = append(outs, h.apply("f", mkBatch(propSource, rows), pos))
			}
			return outs
		}
		one, three := outputs(1), outputs(3)
		for i := range one {
			a, b := one[i], three[i]
			if a.Upserts.Len() == 0 || len(a.States) == 0 {
				t.Fatalf("scd2 %v, batch %d: nothing written", scd2, i)
			}
			if !slices.Equal(a.Upserts.Keys, b.Upserts.Keys) || !slices.Equal(a.Upserts.Seqs, b.Upserts.Seqs) ||
				!slices.Equal(a.Deletes.Keys, b.Deletes.Keys) || !slices.Equal(a.Deletes.Seqs, b.Deletes.Seqs) {
				t.Fatalf("scd2 %v, batch %d: rows differ", scd2, i)
			}
			for r := range a.Upserts.Len() {
				if ra, rb := fmt.Sprint(a.Upserts.Batch.Row(r)), fmt.Sprint(b.Upserts.Batch.Row(r)); ra != rb {
					t.Fatalf("scd2 %v, batch %d, upsert %d: %s, in parallel %s", scd2, i, r, ra, rb)
				}
			}
			if len(a.States) != len(b.States) {
				t.Fatalf("scd2 %v, batch %d: %d states, in parallel %d", scd2, i, len(a.States), len(b.States))
			}
			for k := range a.States {
				ea, _ := a.States[k].State.MarshalBinary()
				eb, _ := b.States[k].State.MarshalBinary()
				if a.States[k].Key != b.States[k].Key || string(ea) != string(eb) {
					t.Fatalf("scd2 %v, batch %d: state %d differs", scd2, i, k)
				}
			}
			if a.Stats != b.Stats {
				t.Fatalf("scd2 %v, batch %d: stats %+v, in parallel %+v", scd2, i, a.Stats, b.Stats)
			}
		}
	}
}

// TestPropertyTombstonesRedelivered (SCD type 1): a tombstone's sequence
// depends on what its key held when it arrived, so the first delivery has
// no oracle; but once every event was delivered, each flow's partition in
// offset order, delivering any of them again, in any order and split, after
// restarts or not, changes no row (docs/cdc.md, Tombstones, delivered
// again). Each tombstone follows in its partition a change of its key, so
// that the key has state when it arrives. No truncates: a truncate can
// leave the key without state, and a tombstone that found none and left
// none resolves, delivered again, against the changes applied since.
func TestPropertyTombstonesRedelivered(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		v := drawVariant(t, false)
		v.truncates = false
		evs := drawEvents(t, v, rapid.Bool().Draw(t, "distinct"))
		var changes []int // of evs
		for i, e := range evs {
			if e.op != "T" {
				changes = append(changes, i)
			}
		}
		next := int64(len(evs))
		for range rapid.IntRange(1, 6).Draw(t, "tombstones") {
			e := evs[rapid.SampledFrom(changes).Draw(t, "follows")]
			off := e.off + 1 + rapid.Int64Range(0, next-e.off).Draw(t, "after")
			for i := range evs { // make room: offsets stay unique in the partition
				if evs[i].flow == e.flow && evs[i].off >= off {
					evs[i].off++
				}
			}
			evs = append(evs, pev{key: e.key, op: "TB", flow: e.flow, off: off})
			next++
		}
		byFlow := map[string][]pev{}
		for _, e := range evs {
			byFlow[e.flow] = append(byFlow[e.flow], e)
		}
		for _, f := range byFlow {
			slices.SortFunc(f, func(a, b pev) int { return cmp.Compare(a.off, b.off) })
		}
		h := newHarness(t, v.config("f"), v.config("g"))
		h.cacheBytes = rapid.SampledFrom([]int64{0, 600, 1 << 20}).Draw(t, "cache")
		h.restart()
		apply := func(flow string, evs []pev) *Output {
			rows := make([][]any, len(evs))
			pos := make([]Position, len(evs))
			tombs := make([]bool, len(evs))
			for i, e := range evs {
				rows[i], pos[i], tombs[i] = e.row(), e.pos(), e.op == "TB"
				if tombs[i] {
					rows[i] = []any{e.key, nil, nil, nil, nil}
				}
			}
			h.now = h.now.Add(rapid.SampledFrom([]time.Duration{0, time.Second, time.Minute}).Draw(t, "pause"))
			return h.applyInput(flow, Input{Batch: mkBatch(propSource, rows), Positions: pos, Tombstones: tombs})
		}
		maybeRestart := func() {
			if rapid.IntRange(0, 3).Draw(t, "restart") == 0 {
				h.restart()
			}
		}
		// First delivery: the flows interleaved, each in offset order.
		done := map[string]int{}
		for done["f"] < len(byFlow["f"]) || done["g"] < len(byFlow["g"]) {
			flow := rapid.SampledFrom([]string{"f", "g"}).Draw(t, "flow")
			rest := byFlow[flow][done[flow]:]
			if len(rest) == 0 {
				continue
			}
			n := rapid.IntRange(1, len(rest)).Draw(t, "batch")
			apply(flow, rest[:n])
			done[flow] += n
			maybeRestart()
		}
		want := h.target.content()
		// Again: runs of a partition from any offset, and single events in
		// any order.
		for range rapid.IntRange(1, 8).Draw(t, "redeliveries") {
			flow := rapid.SampledFrom([]string{"f", "g"}).Draw(t, "flow")
			all := byFlow[flow]
			if len(all) == 0 {
				continue
			}
			from := rapid.IntRange(0, len(all)-1).Draw(t, "from")
			n := rapid.IntRange(1, len(all)-from).Draw(t, "n")
			again := all[from : from+n]
			if rapid.Bool().Draw(t, "shuffle") {
				again = rapid.Permutation(again).Draw(t, "order")
			}
			out := apply(flow, again)
			if out.Upserts.Len()+out.Deletes.Len() != 0 || out.Table != nil {
				t.Fatalf("%v again changed %d rows, removed %d: table %v, was %v", again, out.Upserts.Len(), out.Deletes.Len(), h.target.content(), want)
			}
			maybeRestart()
		}
		if diff := gocmp.Diff(want, h.target.content()); diff != "" {
			t.Fatalf("table after redeliveries (-first +again):\n%s", diff)
		}
	})
}
