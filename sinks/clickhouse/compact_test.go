package clickhouse

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/sinks"
)

// TestCDCCompactDropsMarkers checks that a compaction drops removal
// markers and removed states once a tenth of what a target stores, and
// that it keeps those of a load committed while it runs: without the
// version bound, the marker of key 4, removed by a load between the merge
// and the deletion, would go and key 4's older row would show again.
func TestCDCCompactDropsMarkers(t *testing.T) {
	for _, tc := range []struct {
		name        string
		partitioned bool
	}{{"one partition", false}, {"a partition per key", true}} {
		t.Run(tc.name, func(t *testing.T) {
			addr := serverAddr(t)
			db := newDatabase(t, addr)
			s := openSink(t, addr, db, func(o *Options) { o.Pipeline = "p" })
			s.setGrace(-time.Second)
			ctx := context.Background()
			tab := sinks.Table{Name: "comp", Schema: custSchema, Kind: sinks.KindSCD1, Keys: []string{"id"}}
			if tc.partitioned {
				tab.PartitionBy = []string{"id"}
			}
			if err := s.Ensure(ctx, []sinks.Table{tab}); err != nil {
				t.Fatalf("Ensure: %v", err)
			}
			n := int64(0)
			load := func(ops ...cdcOp) {
				t.Helper()
				if err := cdcLoadTo(ctx, s, tab.Name, fmt.Sprintf("l%d", n), n, ops...); err != nil {
					t.Fatalf("load %d: %v", n, err)
				}
				n++
			}
			state := func(id int64, v string) sinks.StateEntry {
				e := sinks.StateEntry{Key: ckey(id)}
				if v != "" {
					e.Value = []byte(v)
				}
				return e
			}
			phys := s.table(physName(tab.Name))
			count := func(q string, args ...any) string {
				t.Helper()
				return queryStrings(t, s, "SELECT toString(count()) FROM "+q, args...)[0]
			}
			expect := func(what string, content []string, markers, removedStates string) {
				t.Helper()
				got := queryStrings(t, s, "SELECT concat(toString(id), '|', ifNull(name, 'NULL')) FROM "+s.table(tab.Name)+" ORDER BY id")
				if !slices.Equal(got, content) {
					t.Fatalf("%s: the target holds %v, want %v", what, got, content)
				}
				if got := count(phys + " WHERE _sluice_deleted = 1"); got != markers {
					t.Fatalf("%s: %s removal markers, want %s", what, got, markers)
				}
				if got := count(s.table(cdcStateTable)+" WHERE target = ? AND deleted = 1", tab.Name); got != removedStates {
					t.Fatalf("%s: %s removed states, want %s", what, got, removedStates)
				}
			}

			load(upIn(tab.Name, crow{1, "a", 1}, crow{2, "b", 1}, crow{3, "c", 1}, crow{4, "d", 1}),
				statesIn(tab.Name, state(1, "s1"), state(2, "s2"), state(3, "s3"), state(4, "s4")))
			load(rmIn(tab.Name, crow{2, "b", 1}, crow{3, "c", 1}), statesIn(tab.Name, state(2, ""), state(3, "")))
			expect("before", []string{"1|a", "4|d"}, "2", "2")

			// A load between the merge of the physical table and the
			// deletion of its markers removes key 4 and adds key 5. The
			// state is compacted after it: key 4's removed state goes too.
			s.afterMerge = func() {
				s.afterMerge = nil
				load(rmIn(tab.Name, crow{4, "d", 1}), upIn(tab.Name, crow{5, "e", 2}), statesIn(tab.Name, state(4, ""), state(5, "s5")))
			}
			dropped, err := s.CompactCDC(ctx, tab.Name)
			if err != nil || dropped != 5 {
				t.Fatalf("CompactCDC: %d rows dropped, %v; want 5 (2 markers, 3 removed states)", dropped, err)
			}
			expect("after a compaction with a load during it", []string{"1|a", "5|e"}, "1", "0")
			if got, err := s.GetState(ctx, tab.Name, []string{ckey(1), ckey(2), ckey(3), ckey(4), ckey(5)}); err != nil || len(got) != 2 ||
				string(got[ckey(1)]) != "s1" || string(got[ckey(5)]) != "s5" {
				t.Fatalf("GetState after compaction: %q, %v", got, err)
			}

			// Key 4's marker is still a tenth of the rows: compacted again,
			// only the live rows are left.
			if dropped, err := s.CompactCDC(ctx, tab.Name); err != nil || dropped != 1 {
				t.Fatalf("second CompactCDC: %d rows dropped, %v; want 1", dropped, err)
			}
			expect("after the second compaction", []string{"1|a", "5|e"}, "0", "0")
			if got := count(phys); got != "2" {
				t.Fatalf("the physical table holds %s rows, want the 2 live ones", got)
			}

			// Below a tenth, nothing is done; Compact drops it anyway.
			var many []crow
			for id := int64(10); id < 40; id++ {
				many = append(many, crow{id, "m", 3})
			}
			load(upIn(tab.Name, many...))
			load(rmIn(tab.Name, crow{10, "m", 3}), upIn(tab.Name, crow{2, "b again", 4}))
			if dropped, err := s.CompactCDC(ctx, tab.Name); err != nil || dropped != 0 {
				t.Fatalf("CompactCDC with 1 marker in 34 rows: %d rows dropped, %v; want none", dropped, err)
			}
			if got := count(phys + " WHERE _sluice_deleted = 1"); got != "1" {
				t.Fatalf("%s markers after a compaction below the share, want 1", got)
			}
			if err := s.Compact(ctx, tab.Name); err != nil {
				t.Fatalf("Compact: %v", err)
			}
			if got := count(phys + " WHERE _sluice_deleted = 1"); got != "0" {
				t.Fatalf("%s markers after Compact, want 0", got)
			}
			content := queryStrings(t, s, "SELECT concat(toString(id), '|', ifNull(name, 'NULL')) FROM "+s.table(tab.Name)+" ORDER BY id")
			if len(content) != 32 || content[0] != "1|a" || content[1] != "2|b again" || content[2] != "5|e" || slices.Contains(content, "10|m") {
				t.Fatalf("after Compact the target holds %v", content)
			}
		})
	}
}

// TestCDCCompactSCD2 compacts an SCD type 2 target, whose identities are
// versions (key, __START_AT): the markers of removed versions go, the other
// versions of their keys stay. The versions come from the CDC engine.
func TestCDCCompactSCD2(t *testing.T) {
	_, open := cdcSetup(t)
	s := open()
	r := newEngineRun(t, s, f1("hist_compact", 2))
	r.apply(u(1, "a", 10), u(1, "b", 20), u(1, "c", 30), u(2, "x", 10))
	// At sequence 20 key 1 becomes "a" again: its version from 20 joins the
	// one from 10. A delete at key 2's only sequence removes its version.
	r.apply(u(1, "a", 20), d(2, 10))
	want := []string{"1,a,10,30", "1,c,30,∞"}
	if got := r.content(); !slices.Equal(got, want) {
		t.Fatalf("before: %v, want %v", got, want)
	}
	dropped, err := s.CompactCDC(context.Background(), r.cfg.Target)
	if err != nil || dropped != 2 {
		t.Fatalf("CompactCDC: %d rows dropped, %v; want the 2 markers", dropped, err)
	}
	if got := r.content(); !slices.Equal(got, want) {
		t.Fatalf("after: %v, want %v", got, want)
	}
	if got := queryStrings(t, s, "SELECT toString(count()) FROM "+s.table(physName(r.cfg.Target))); !slices.Equal(got, []string{"2"}) {
		t.Fatalf("the physical table holds %v rows, want the 2 versions", got)
	}
}
