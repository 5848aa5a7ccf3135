package cdc

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// snapshotFlow is the configuration of an SCD type 2 snapshot flow "a"
// over the f1 source; its flow name orders before the CDC flows', so that
// their upserts at a snapshot's version win the tie.
func snapshotFlow() Config {
	c := f2("a")
	c.ApplyAsDeletes, c.Snapshot = "", true
	return c
}

// applySnapshot applies a snapshot at version v holding rows (of the
// flow's source: the key first, the sequence last, at v) as a snapshot
// flow does: the barrier, an upsert of each row, and a delete of each key
// the snapshot lacks that has a version current or ending after v.
func (h *harness) applySnapshot(flow string, v int, rows ...[]any) *Output {
	h.t.Helper()
	width := len(h.cfgs[flow].Source.Columns)
	only := func(id any) []any {
		r := make([]any, width)
		r[0], r[width-1] = id, v
		return r
	}
	held := map[int]bool{}
	all := [][]any{only(nil)}
	ops := []Op{OpSnapshot}
	for _, r := range rows {
		held[r[0].(int)] = true
		all = append(all, r)
		ops = append(ops, OpUpsert)
	}
	for _, r := range h.target.rows {
		id := int(r.vals[0].(int64))
		if end := r.vals[len(r.vals)-1]; (end == nil || end.(int64) > int64(v)) && !held[id] {
			held[id] = true
			all = append(all, only(id))
			ops = append(ops, OpDelete)
		}
	}
	pos := make([]Position, len(all))
	for i := range pos {
		pos[i] = Position{Flow: flow, File: "v", Offset: int64(i)}
	}
	h.now = h.now.Add(time.Minute)
	return h.applyInput(flow, Input{Batch: mkBatch(h.cfgs[flow].Source, all), Positions: pos, Ops: ops})
}

func TestSnapshotClosesKeysSeenLater(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before [][]any // CDC events applied before the snapshot, then after it
		after  [][]any
		want   []string
	}{
		// The case of docs/cdc.md: snapshot at 100 with keys 1 and 2,
		// then U(3, 80).
		{name: "first seen later, older", after: [][]any{U(3, "c", 80)},
			want: []string{"(1,a,100,∞)", "(2,b,100,∞)", "(3,c,80,100)"}},
		{name: "first seen later, newer", after: [][]any{U(3, "c", 120)},
			want: []string{"(1,a,100,∞)", "(2,b,100,∞)", "(3,c,120,∞)"}},
		{name: "older and newer", after: [][]any{U(3, "c", 120), U(3, "x", 80)},
			want: []string{"(1,a,100,∞)", "(2,b,100,∞)", "(3,x,80,100)", "(3,c,120,∞)"}},
		{name: "deleted before, late change", before: [][]any{U(4, "d", 10), D(4, 50)}, after: [][]any{U(4, "e", 70)},
			want: []string{"(1,a,100,∞)", "(2,b,100,∞)", "(4,d,10,50)", "(4,e,70,100)"}},
		{name: "held key, older change", after: [][]any{U(1, "z", 90)},
			want: []string{"(1,z,90,100)", "(1,a,100,∞)", "(2,b,100,∞)"}},
		{name: "held key, change at the version wins the tie", after: [][]any{U(1, "z", 100)},
			want: []string{"(1,z,100,∞)", "(2,b,100,∞)"}},
		{name: "change at the version of a key the snapshot lacks", after: [][]any{U(3, "c", 100)},
			want: []string{"(1,a,100,∞)", "(2,b,100,∞)"}},
		{name: "current key absent", before: [][]any{U(5, "q", 10)},
			want: []string{"(1,a,100,∞)", "(2,b,100,∞)", "(5,q,10,100)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, snapshotFlow(), f2("f"))
			var off int64
			apply := func(rows [][]any) {
				if len(rows) == 0 {
					return
				}
				pos := make([]Position, len(rows))
				for i := range pos {
					pos[i] = Position{Flow: "f", Topic: "t", Offset: off}
					off++
				}
				h.now = h.now.Add(time.Minute)
				h.apply("f", mkBatch(f1Source, rows), pos)
			}
			apply(tc.before)
			h.applySnapshot("a", 100, U(1, "a", 100), U(2, "b", 100))
			for _, r := range tc.after { // one batch each, and a restart between
				apply([][]any{r})
				h.restart()
			}
			if diff := cmp.Diff(tc.want, h.target.content()); diff != "" {
				t.Errorf("table (-want +got):\n%s", diff)
			}
			checkIntervals(t, h)
		})
	}
}

// TestSnapshotBarriersExpire checks that the newest barrier stays, that
// older ones are forgotten after the retention, and that the state keeps a
// coalesced member that marks its key in a remembered snapshot.
func TestSnapshotBarriersExpire(t *testing.T) {
	cdc := f2("f")
	cdc.TombstoneRetention = time.Hour
	snap := snapshotFlow()
	snap.TombstoneRetention = time.Hour
	h := newHarness(t, snap, cdc)
	h.apply("f", mkBatch(f1Source, [][]any{U(1, "a", 10)}), []Position{{Flow: "f", Topic: "t", Offset: 0}})
	h.applySnapshot("a", 100, U(1, "a", 100)) // joins key 1's version
	h.now = h.now.Add(2 * time.Hour)
	h.applySnapshot("a", 200, U(1, "a", 200))
	table, err := h.store.Table(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var seqs []string
	for _, b := range table.Snapshots {
		seqs = append(seqs, b.Seq)
	}
	if want := []string{"\x80\x00\x00\x00\x00\x00\x00\xc8"}; !slices.Equal(seqs, want) {
		t.Errorf("barriers %q, want only version 200's", seqs)
	}
	// Past the retention, a late change before version 200 is closed by
	// the snapshot at 200 that held key 1 (its member at 200 is kept).
	h.now = h.now.Add(2 * time.Hour)
	h.apply("f", mkBatch(f1Source, [][]any{U(1, "b", 150)}), []Position{{Flow: "f", Topic: "t", Offset: 1}})
	if diff := cmp.Diff([]string{"(1,a,10,150)", "(1,b,150,200)", "(1,a,200,∞)"}, h.target.content()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
}
