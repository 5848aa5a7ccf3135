package cdc

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TB is a tombstone of key id: the key and nothing else.
func TB(id int) []any { return []any{id, nil, nil, nil} }

// applyTombstones applies rows as one batch of flow, at offsets from off,
// the rows that are TB tombstones.
func (h *harness) applyTombstones(flow string, off int64, rows [][]any) *Output {
	h.t.Helper()
	b := mkBatch(h.cfgs[flow].Source, rows)
	pos := make([]Position, len(rows))
	tombs := make([]bool, len(rows))
	for i, r := range rows {
		pos[i] = Position{Flow: flow, Topic: "topic", Offset: off + int64(i)}
		tombs[i] = r[1] == nil && r[2] == nil && r[3] == nil
	}
	h.now = h.now.Add(time.Minute)
	return h.applyInput(flow, Input{Batch: b, Positions: pos, Tombstones: tombs})
}

func TestTombstones(t *testing.T) {
	for _, tc := range []struct {
		name    string
		scd2    bool
		batches [][][]any // each at the offsets after the previous ones
		want    []string
	}{
		{name: "deletes the key", batches: [][][]any{{U(1, "a", 5), U(2, "x", 1)}, {TB(1)}}, want: []string{"(2,x)"}},
		{name: "in the batch of the change", batches: [][][]any{{U(1, "a", 5), TB(1)}}},
		{name: "wins the tie with a change at the same sequence arriving later",
			batches: [][][]any{{U(1, "a", 5)}, {TB(1)}, {U(1, "b", 5)}}},
		{name: "a newer change wins", batches: [][][]any{{U(1, "a", 5), TB(1), U(1, "b", 6)}}, want: []string{"(1,b)"}},
		{name: "an older change later is suppressed", batches: [][][]any{{U(1, "a", 5)}, {TB(1)}, {U(1, "b", 4)}}},
		{name: "before the key's first change", batches: [][][]any{{TB(1), U(1, "a", 5)}}, want: []string{"(1,a)"}},
		{name: "of a key never seen", batches: [][][]any{{U(2, "x", 1)}, {TB(1)}, {U(1, "a", 1)}}, want: []string{"(1,a)", "(2,x)"}},
		{name: "after a delete", batches: [][][]any{{U(1, "a", 5), D(1, 7)}, {TB(1)}, {U(1, "b", 6)}}},
		{name: "after a newer change of another key", batches: [][][]any{{U(1, "a", 5), U(2, "x", 9), TB(1)}}, want: []string{"(2,x)"}},

		{name: "closes the current version at its newest sequence", scd2: true,
			batches: [][][]any{{U(1, "a", 1), U(1, "b", 5)}, {TB(1)}}, want: []string{"(1,a,1,5)", "(1,b,5,5)"}},
		{name: "closes a coalesced version", scd2: true,
			batches: [][][]any{{U(1, "a", 1), U(1, "a", 5), TB(1)}}, want: []string{"(1,a,1,5)"}},
		{name: "after a delete changes nothing", scd2: true,
			batches: [][][]any{{U(1, "a", 1), D(1, 5)}, {TB(1)}}, want: []string{"(1,a,1,5)"}},
		{name: "re-insert after it", scd2: true,
			batches: [][][]any{{U(1, "a", 1), TB(1), U(1, "b", 3)}}, want: []string{"(1,a,1,1)", "(1,b,3,∞)"}},
		{name: "a change at the same sequence later stays in the closed version", scd2: true,
			batches: [][][]any{{U(1, "a", 1)}, {TB(1)}, {U(1, "b", 1)}}, want: []string{"(1,b,1,1)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := f1("f")
			if tc.scd2 {
				cfg = f2("f")
			}
			h := newHarness(t, cfg)
			var off int64
			for _, b := range tc.batches {
				h.applyTombstones("f", off, b)
				off += int64(len(b))
			}
			want := tc.want
			if want == nil {
				want = []string{}
			}
			if diff := cmp.Diff(want, h.target.content()); diff != "" {
				t.Errorf("table (-want +got):\n%s", diff)
			}
			// Every batch delivered again, after a restart, changes nothing.
			h.restart()
			off = 0
			for i, b := range tc.batches {
				out := h.applyTombstones("f", off, b)
				off += int64(len(b))
				if n := out.Upserts.Len() + out.Deletes.Len() + len(out.States); n != 0 {
					t.Errorf("batch %d again: %d rows, %d removed, %d states", i+1, out.Upserts.Len(), out.Deletes.Len(), len(out.States))
				}
			}
		})
	}
}

func TestTombstoneOfUnknownKeyWritesNothing(t *testing.T) {
	h := newHarness(t, f1("f"))
	out := h.applyTombstones("f", 0, [][]any{TB(1)})
	if len(out.States)+out.Upserts.Len()+out.Deletes.Len() != 0 || len(out.DeadLetters) != 0 {
		t.Fatalf("states %d, rows %d, removed %d, dead letters %v", len(out.States), out.Upserts.Len(), out.Deletes.Len(), out.DeadLetters)
	}
	if out.Stats.Deletes != 1 {
		t.Errorf("deletes counted %d, want 1", out.Stats.Deletes)
	}
}

// TestTombstoneAfterRetention: a tombstone of a key whose only state is a
// delete past tombstone_retention finds the key forgotten (docs/cdc.md,
// Tombstones): it changes nothing and leaves no state, so that a later,
// older change re-creates the row as it would without the tombstone.
func TestTombstoneAfterRetention(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfg   Config
		first [][]any
		later []any
		want  []string
	}{
		{"SCD1", f1("f"), [][]any{U(1, "a", 5), D(1, 7)}, U(1, "b", 6), []string{"(1,b)"}},
		{"SCD2", f2("f"), [][]any{D(1, 7)}, U(1, "b", 6), []string{"(1,b,6,∞)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.TombstoneRetention = time.Hour
			h := newHarness(t, tc.cfg)
			h.applyTombstones("f", 0, tc.first)
			if n := len(h.store.Keys()); n != 1 {
				t.Fatalf("%d keys with state after the delete, want 1", n)
			}
			h.now = h.now.Add(2 * time.Hour)
			off := int64(len(tc.first))
			out := h.applyTombstones("f", off, [][]any{TB(1)})
			if out.Upserts.Len()+out.Deletes.Len() != 0 {
				t.Errorf("the tombstone wrote %d rows, removed %d", out.Upserts.Len(), out.Deletes.Len())
			}
			if keys := h.store.Keys(); len(keys) != 0 {
				t.Errorf("%d keys with state after the tombstone of a forgotten key, want none", len(keys))
			}
			h.applyTombstones("f", off+1, [][]any{tc.later})
			if diff := cmp.Diff(tc.want, h.target.content()); diff != "" {
				t.Errorf("table (-want +got):\n%s", diff)
			}
		})
	}
}

// TestTombstoneRedeliveredAfterNewerChange: a tombstone delivered again
// after another partition's or flow's newer change to its key resolves to
// the sequence it had the first time (docs/cdc.md, Tombstones): it changes
// nothing, and the newer row stays.
func TestTombstoneRedeliveredAfterNewerChange(t *testing.T) {
	p0 := Position{Flow: "f", Topic: "topic"}
	for _, tc := range []struct {
		name  string
		scd2  bool
		ignNl bool
		trunc bool
		newer Position // where the newer change comes from
		also  bool     // a second tombstone, of partition 2, ties with the first
		want  []string
	}{
		{name: "another flow", newer: Position{Flow: "g", Topic: "topic"}, want: []string{"(1,b)"}},
		{name: "another partition", newer: Position{Flow: "f", Topic: "topic", Partition: 1}, want: []string{"(1,b)"}},
		{name: "another partition, ignore-null", ignNl: true, newer: Position{Flow: "f", Topic: "topic", Partition: 1}, want: []string{"(1,b)"}},
		{name: "after a truncate", trunc: true, newer: Position{Flow: "g", Topic: "topic"}, want: []string{"(1,b)"}},
		{name: "two partitions' tombstones tie", also: true, newer: Position{Flow: "g", Topic: "topic"}, want: []string{"(1,b)"}},
		{name: "SCD2", scd2: true, newer: Position{Flow: "g", Topic: "topic"}, want: []string{"(1,a,5,5)", "(1,b,7,∞)"}},
		{name: "ignore-null, two partitions' tombstones tie", ignNl: true, also: true, newer: Position{Flow: "g", Topic: "topic"}, want: []string{"(1,b)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := func(flow string) Config {
				c := f1t(flow)
				if tc.scd2 {
					c = f2(flow)
				}
				c.IgnoreNullUpdates = tc.ignNl
				return c
			}
			h := newHarness(t, cfg("f"), cfg("g"))
			one := func(pos Position, row []any, tomb bool) *Output {
				h.t.Helper()
				h.now = h.now.Add(time.Minute)
				return h.applyInput(pos.Flow, Input{Batch: mkBatch(h.cfgs[pos.Flow].Source, [][]any{row}),
					Positions: []Position{pos}, Tombstones: []bool{tomb}})
			}
			at := func(p Position, off int64) Position { p.Offset = off; return p }
			one(at(p0, 0), U(1, "a", 5), false)
			one(at(p0, 1), TB(1), true)
			tombs := []Position{at(p0, 1)}
			if tc.also {
				p2 := at(p0, 0)
				p2.Partition = 2
				one(p2, TB(1), true)
				tombs = append(tombs, p2)
			}
			if tc.trunc {
				one(at(tc.newer, 0), T(6), false)
			}
			one(at(tc.newer, 1), U(1, "b", 7), false)
			if diff := cmp.Diff(tc.want, h.target.content()); diff != "" {
				t.Fatalf("table (-want +got):\n%s", diff)
			}
			for _, restart := range []bool{false, true} {
				if restart {
					h.restart()
				}
				for _, p := range tombs {
					out := one(p, TB(1), true)
					if out.Upserts.Len()+out.Deletes.Len() != 0 {
						t.Errorf("the tombstone at %v again (restart %v): %d rows, %d removed", p, restart, out.Upserts.Len(), out.Deletes.Len())
					}
				}
				if diff := cmp.Diff(tc.want, h.target.content()); diff != "" {
					t.Errorf("table after the tombstone again (-want +got):\n%s", diff)
				}
			}
		})
	}
}
