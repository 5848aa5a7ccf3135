package cdc

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/flows/batch"
)

// feed applies batches of rows of f1's source (id, name, op, seq) with
// consecutive offsets.
type feed struct {
	h    *harness
	flow string
	off  int64
}

func (f *feed) batch(rows ...[]any) *Output {
	f.h.t.Helper()
	pos := make([]Position, len(rows))
	for i := range rows {
		pos[i] = Position{Flow: f.flow, Topic: "t", Offset: f.off}
		f.off++
	}
	return f.h.apply(f.flow, mkBatch(f.h.cfgs[f.flow].Source, rows), pos)
}

func TestDeadLetters(t *testing.T) {
	src := batch.Schema{Columns: []batch.Column{
		{Name: "id", Type: batch.Int64, Nullable: true},
		{Name: "name", Type: batch.String, Nullable: true},
		{Name: "op", Type: batch.String, Nullable: true},
		{Name: "seq", Type: batch.Int64, Nullable: true},
	}}
	c := f1("f")
	c.Source = src
	h := newHarness(t, c)
	f := &feed{h: h, flow: "f"}
	out := f.batch([]any{nil, "a", nil, 1}, []any{1, "b", nil, nil}, []any{nil, "c", nil, nil}, []any{2, "d", nil, 3})
	if diff := cmp.Diff([]string{"(2,d)"}, h.target.content()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
	type dl struct{ Reason, Position, Error, Payload string }
	var got []dl
	for _, d := range out.DeadLetters {
		got = append(got, dl{d.Reason, d.Position, d.Error, string(d.Payload)})
		if d.Pipeline != "p" || d.Flow != "f" || d.Target != "t" || d.Source != "t" || !d.At.Equal(h.now) {
			t.Errorf("dead letter %+v", d)
		}
	}
	want := []dl{
		{batch.ReasonNullKey, "0/0", "key column id is null", `{"id":null,"name":"a","op":null,"seq":1}`},
		{batch.ReasonNullSequence, "0/1", "sequence column seq is null", `{"id":1,"name":"b","op":null,"seq":null}`},
		{batch.ReasonNullKey, "0/2", "key column id is null", `{"id":null,"name":"c","op":null,"seq":null}`},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("dead letters (-want +got):\n%s", diff)
	}
	if out.Stats.DeadLetters != 3 || out.Stats.Upserts != 1 {
		t.Errorf("stats %+v", out.Stats)
	}

	// A raw payload, when given, is what the dead letter carries; a file
	// position prints its row number.
	e := h.engines["f"]
	out, err := e.Apply(t.Context(), Input{
		Batch:     mkBatch(src, [][]any{{nil, "x", nil, 9}}),
		Positions: []Position{{Flow: "f", File: "in/a.jsonl", Offset: 41}},
		Payloads:  [][]byte{[]byte(`{"raw":1}`)},
		Now:       h.now,
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := out.DeadLetters[0]; string(d.Payload) != `{"raw":1}` || d.Source != "in/a.jsonl" || d.Position != "41" {
		t.Errorf("dead letter %+v", d)
	}
}

func TestOnErrorFail(t *testing.T) {
	c := f1("f")
	c.FailOnError = true
	src := c.Source
	src.Columns[0].Nullable = true
	c.Source = src
	e, err := New(c, NewMemStore())
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.Apply(t.Context(), Input{
		Batch:     mkBatch(c.Source, [][]any{{1, "a", nil, 1}, {1, "b", nil, nil}}),
		Positions: []Position{{Flow: "f", Topic: "t", Offset: 7}, {Flow: "f", Topic: "t", Offset: 8}},
		Now:       t0,
	})
	var ee *EventError
	if !errors.As(err, &ee) || ee.Reason != batch.ReasonNullSequence || ee.Position.Offset != 8 {
		t.Fatalf("Apply = %v, want a null_sequence EventError at offset 8", err)
	}
}

func TestSequenceTypes(t *testing.T) {
	day := func(s string) time.Time { d, _ := time.Parse(time.DateOnly, s); return d }
	for _, tc := range []struct {
		name string
		seq  []batch.Column
		rows [][]any // id, name, seq columns...
		want []string
	}{
		{
			name: "string",
			seq:  []batch.Column{{Name: "v", Type: batch.String}},
			rows: [][]any{{1, "a", "b"}, {1, "b", "a\x00z"}, {1, "c", "a"}},
			want: []string{"(1,c,a,a\x00z)", "(1,b,a\x00z,b)", "(1,a,b,∞)"},
		},
		{
			name: "decimal",
			seq:  []batch.Column{{Name: "v", Type: batch.Decimal(20, 2)}},
			rows: [][]any{{1, "a", "-1.50"}, {1, "b", "2.00"}, {1, "c", "-10.00"}},
			want: []string{"(1,c,-10.00,-1.50)", "(1,a,-1.50,2.00)", "(1,b,2.00,∞)"},
		},
		{
			name: "date",
			seq:  []batch.Column{{Name: "v", Type: batch.Date}},
			rows: [][]any{{1, "a", int(batch.DateFromTime(day("2024-03-01")))}, {1, "b", int(batch.DateFromTime(day("1969-12-31")))}},
			want: []string{"(1,b,1969-12-31,2024-03-01)", "(1,a,2024-03-01,∞)"},
		},
		{
			name: "list, held as JSON",
			seq:  []batch.Column{{Name: "v", Type: batch.Int64}, {Name: "w", Type: batch.String}},
			rows: [][]any{{1, "a", 2, "x"}, {1, "b", 2, "y"}, {1, "c", -1, "z"}},
			want: []string{`(1,c,[-1,"z"],[2,"x"])`, `(1,a,[2,"x"],[2,"y"])`, `(1,b,[2,"y"],∞)`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := batch.Schema{Columns: append([]batch.Column{
				{Name: "id", Type: batch.Int64},
				{Name: "name", Type: batch.String},
			}, tc.seq...)}
			var seqBy []string
			for _, c := range tc.seq {
				seqBy = append(seqBy, c.Name)
			}
			c := Config{Pipeline: "p", Flow: "f", Target: "t", Source: src, Keys: []string{"id"}, SequenceBy: seqBy, SCDType: 2, ColumnList: []string{"id", "name"}}
			h := newHarness(t, c)
			for _, r := range tc.rows { // one batch each: late events too
				(&feed{h: h, flow: "f", off: int64(len(h.target.rows))}).batch(r)
			}
			got := h.target.content()
			for i, s := range got {
				got[i] = strings.ReplaceAll(s, "T00:00:00Z", "")
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("table (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSCD2Ties(t *testing.T) {
	for _, tc := range []struct {
		name    string
		batches [][][]any
		want    []string
	}{
		{name: "delete beats an upsert at its sequence", batches: [][][]any{{U(1, "a", 10), U(1, "b", 20), D(1, 20)}},
			want: []string{"(1,a,10,20)"}},
		{name: "a delete arriving later removes the zero-width version", batches: [][][]any{{U(1, "a", 10), U(1, "b", 20)}, {D(1, 20)}},
			want: []string{"(1,a,10,20)"}},
		{name: "an upsert arriving later loses to the delete", batches: [][][]any{{U(1, "a", 10), D(1, 20)}, {U(1, "b", 20)}},
			want: []string{"(1,a,10,20)"}},
		{name: "the greater position wins and leaves no trace", batches: [][][]any{{U(1, "a", 10), U(1, "b", 20), U(1, "a", 20)}},
			want: []string{"(1,a,10,∞)"}},
		{name: "late delete shortens a closed version", batches: [][][]any{{U(1, "a", 10), U(1, "b", 20)}, {D(1, 15)}},
			want: []string{"(1,a,10,15)", "(1,b,20,∞)"}},
		{name: "early delete then an older upsert", batches: [][][]any{{D(1, 20)}, {U(1, "a", 10)}},
			want: []string{"(1,a,10,20)"}},
		{name: "split shows the member before the split", batches: [][][]any{{U(1, "a", 10), U(1, "a", 20), U(1, "a", 30)}, {U(1, "b", 25)}},
			want: []string{"(1,a,10,25)", "(1,b,25,30)", "(1,a,30,∞)"}},
		{name: "late delete inside a run", batches: [][][]any{{U(1, "a", 10), U(1, "a", 30)}, {D(1, 20)}},
			want: []string{"(1,a,10,20)", "(1,a,30,∞)"}},
		{name: "late equal upsert before a run extends it", batches: [][][]any{{U(1, "a", 10)}, {U(1, "a", 5)}},
			want: []string{"(1,a,5,∞)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, f2("f"))
			f := &feed{h: h, flow: "f"}
			for _, b := range tc.batches {
				f.batch(b...)
			}
			if diff := cmp.Diff(tc.want, h.target.content()); diff != "" {
				t.Errorf("table (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSCD2IgnoreNull(t *testing.T) {
	c := f2("f")
	c.Source = batch.Schema{Columns: []batch.Column{
		{Name: "id", Type: batch.Int64},
		{Name: "name", Type: batch.String, Nullable: true},
		{Name: "city", Type: batch.String, Nullable: true},
		{Name: "op", Type: batch.String, Nullable: true},
		{Name: "seq", Type: batch.Int64, Nullable: true},
	}}
	c.IgnoreNullUpdatesColumnList = []string{"city"}
	h := newHarness(t, c)
	f := &feed{h: h, flow: "f"}
	f.batch([]any{1, "a", "x", nil, 10}, []any{1, "b", nil, nil, 30})
	if diff := cmp.Diff([]string{"(1,a,x,10,30)", "(1,b,x,30,∞)"}, h.target.content()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
	// A late upsert opens a version (its city differs) and sets the city
	// the later version carried over.
	f.batch([]any{1, "a", "y", nil, 20})
	if diff := cmp.Diff([]string{"(1,a,x,10,20)", "(1,a,y,20,30)", "(1,b,y,30,∞)"}, h.target.content()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
}

func TestTombstoneRetention(t *testing.T) {
	c := f1("f")
	c.TombstoneRetention = time.Hour
	h := newHarness(t, c)
	f := &feed{h: h, flow: "f"}
	f.batch(U(1, "a", 1))
	f.batch(D(1, 5))
	h.now = h.now.Add(30 * time.Minute)
	out := f.batch(U(1, "old", 4))
	if len(h.target.rows) != 0 || out.Stats.Suppressed != 1 || out.Stats.TombstoneGap != 30*time.Minute {
		t.Fatalf("within retention: rows %v, stats %+v", h.target.content(), out.Stats)
	}
	h.now = h.now.Add(time.Hour)
	out = f.batch(U(1, "older", 3))
	// Past the retention the tombstone is forgotten; an older upsert
	// re-creates the row.
	if diff := cmp.Diff([]string{"(1,older)"}, h.target.content()); diff != "" || out.Stats.Expired != 1 {
		t.Fatalf("after retention (-want +got):\n%s\nstats %+v", diff, out.Stats)
	}
}

func TestExpireForgetsTombstones(t *testing.T) {
	c := f1("f")
	c.TombstoneRetention = time.Hour
	h := newHarness(t, c)
	f := &feed{h: h, flow: "f"}
	f.batch(D(1, 5), U(2, "b", 1))
	if n := len(h.store.Keys()); n != 2 {
		t.Fatalf("%d keys with state, want 2", n)
	}
	h.now = h.now.Add(2 * time.Hour)
	out, err := h.engines["f"].Expire(t.Context(), h.store.Keys(), h.now)
	if err != nil {
		t.Fatal(err)
	}
	if out.Upserts.Len()+out.Deletes.Len() != 0 {
		t.Fatalf("Expire wrote %d rows, removed %d", out.Upserts.Len(), out.Deletes.Len())
	}
	h.commit(out)
	if keys := h.store.Keys(); len(keys) != 1 || out.Stats.Expired != 1 {
		t.Fatalf("after refresh: %d keys with state, stats %+v", len(keys), out.Stats)
	}
	if diff := cmp.Diff([]string{"(2,b)"}, h.target.content()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
}

func TestSCD2MembersForgottenAfterRetention(t *testing.T) {
	c := f2("f")
	c.Source = batch.Schema{Columns: []batch.Column{
		{Name: "id", Type: batch.Int64},
		{Name: "name", Type: batch.String, Nullable: true},
		{Name: "score", Type: batch.Int64, Nullable: true},
		{Name: "op", Type: batch.String, Nullable: true},
		{Name: "seq", Type: batch.Int64, Nullable: true},
	}}
	c.TrackHistoryColumnList = []string{"name"}
	c.TombstoneRetention = time.Hour
	h := newHarness(t, c)
	f := &feed{h: h, flow: "f"}
	for s := 1; s <= 50; s++ {
		f.batch([]any{1, "a", s, nil, s})
		h.now = h.now.Add(10 * time.Minute)
	}
	want := []string{"(1,a,50,1,∞)"}
	if diff := cmp.Diff(want, h.target.content()); diff != "" {
		t.Fatalf("table (-want +got):\n%s", diff)
	}
	st, err := h.store.Get(t.Context(), h.store.Keys())
	if err != nil {
		t.Fatal(err)
	}
	// First and last members, plus the last hour's.
	for _, s := range st {
		if s.Len() > 8 {
			t.Fatalf("state holds %d events, want the members of the last hour and the run's ends", s.Len())
		}
	}
	// A late event inside the forgotten part still splits the version,
	// placed as if the forgotten members (2 to 45) never existed: the
	// earlier part shows member 1, the split ends at member 46.
	f.batch([]any{1, "b", 0, nil, 3})
	want = []string{"(1,a,1,1,3)", "(1,b,0,3,46)", "(1,a,50,46,∞)"}
	if diff := cmp.Diff(want, h.target.content()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
}

func TestTruncateBarrier(t *testing.T) {
	h := newHarness(t, f1t("f"))
	f := &feed{h: h, flow: "f"}
	f.batch(U(1, "a", 1), U(2, "b", 5), U(3, "c", 2))
	out := f.batch(T(3))
	if out.Table == nil || out.Upserts.Len()+out.Deletes.Len() != 0 {
		t.Fatalf("truncate output: table %v, %d upserts, %d deletes", out.Table, out.Upserts.Len(), out.Deletes.Len())
	}
	if diff := cmp.Diff([]string{"(2,b)"}, h.target.content()); diff != "" {
		t.Fatalf("after truncate (-want +got):\n%s", diff)
	}
	// Older events are discarded for every key; newer ones apply.
	f.batch(U(1, "stale", 2), U(4, "stale", 1), U(3, "new", 3))
	if diff := cmp.Diff([]string{"(2,b)", "(3,new)"}, h.target.content()); diff != "" {
		t.Fatalf("after later events (-want +got):\n%s", diff)
	}
	// An older truncate changes nothing; a replayed one neither.
	if out := f.batch(T(2)); out.Upserts.Len()+out.Deletes.Len() != 0 {
		t.Fatalf("older truncate wrote rows")
	}
	h.restart()
	if diff := cmp.Diff([]string{"(2,b)", "(3,new)"}, h.target.content()); diff != "" {
		t.Fatalf("after older truncate (-want +got):\n%s", diff)
	}
}

func TestTruncateWithIgnoreNullRefreshes(t *testing.T) {
	c := f1t("f")
	c.Source = batch.Schema{Columns: []batch.Column{
		{Name: "id", Type: batch.Int64, Nullable: true},
		{Name: "name", Type: batch.String, Nullable: true},
		{Name: "city", Type: batch.String, Nullable: true},
		{Name: "op", Type: batch.String, Nullable: true},
		{Name: "seq", Type: batch.Int64, Nullable: true},
	}}
	c.IgnoreNullUpdates = true
	h := newHarness(t, c)
	f := &feed{h: h, flow: "f"}
	f.batch([]any{1, "a", "x", nil, 1}, []any{1, "b", nil, nil, 5})
	if diff := cmp.Diff([]string{"(1,b,x)"}, h.target.content()); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	// A truncate at 3 arrives late: the row at 5 stays, but it was
	// inserted after the truncate, so the city set at 1 is gone.
	out := f.batch([]any{nil, nil, nil, "T", 3})
	if !out.Refresh {
		t.Fatal("Refresh not set")
	}
	if diff := cmp.Diff([]string{"(1,b,null)"}, h.target.content()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestLateEventsCounted(t *testing.T) {
	h := newHarness(t, f1("f"))
	f := &feed{h: h, flow: "f"}
	f.batch(U(1, "a", 5))
	if out := f.batch(U(1, "b", 3), U(1, "c", 7), U(2, "x", 1)); out.Stats.Late != 1 {
		t.Fatalf("late %d, want 1", out.Stats.Late)
	}
}

func TestCutOversReported(t *testing.T) {
	for _, scd := range []int{1, 2} {
		t.Run(fmt.Sprintf("scd%d", scd), func(t *testing.T) {
			legacy, live := f1("legacy"), f1("live")
			legacy.SCDType, live.SCDType = scd, scd
			live.ReplayFlows = []string{"legacy"}
			h := newHarness(t, legacy, live)
			replay, f := &feed{h: h, flow: "legacy"}, &feed{h: h, flow: "live"}
			if out := replay.batch(U(1, "a", 5), U(2, "x", 5)); len(out.CutOvers) != 0 {
				t.Fatalf("replayed events reported: %+v", out.CutOvers)
			}
			// Key 1's first live change is older than its replayed one: a
			// cut-over; key 2's is newer; key 3 was never replayed.
			out := f.batch(U(3, "z", 1), U(1, "b", 3), U(2, "y", 7))
			if len(out.CutOvers) != 1 || out.CutOvers[0].Row != 1 || out.CutOvers[0].ReplayFlow != "legacy" {
				t.Fatalf("cut-overs %+v, want row 1 from legacy", out.CutOvers)
			}
			// Key 2's newest change is live now: a late live event is only late.
			if out := f.batch(U(2, "w", 6)); len(out.CutOvers) != 0 || out.Stats.Late != 1 {
				t.Fatalf("cut-overs %+v, late %d: want none and 1", out.CutOvers, out.Stats.Late)
			}
		})
	}
}

func TestStateFollowsColumnsByName(t *testing.T) {
	store := NewMemStore()
	old := f1("f")
	e, err := New(old, store)
	if err != nil {
		t.Fatal(err)
	}
	out, err := e.Apply(t.Context(), Input{Batch: mkBatch(f1Source, [][]any{U(1, "a", 1)}), Positions: []Position{{Flow: "f", Topic: "t"}}, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Commit(out); err != nil {
		t.Fatal(err)
	}
	// The table gains a column city before name.
	c := f1("f")
	c.Source = batch.Schema{Columns: []batch.Column{
		{Name: "id", Type: batch.Int64},
		{Name: "city", Type: batch.String, Nullable: true},
		{Name: "name", Type: batch.String, Nullable: true},
		{Name: "op", Type: batch.String, Nullable: true},
		{Name: "seq", Type: batch.Int64, Nullable: true},
	}}
	c.IgnoreNullUpdatesColumnList = []string{"name"}
	e2, err := New(c, store)
	if err != nil {
		t.Fatal(err)
	}
	out, err = e2.Apply(t.Context(), Input{Batch: mkBatch(c.Source, [][]any{{1, "z", nil, nil, 2}}), Positions: []Position{{Flow: "f", Topic: "t", Offset: 1}}, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	if out.Upserts.Len() != 1 || render(out.Upserts.Batch.Row(0), false) != "(1,z,a)" {
		t.Fatalf("upserts %d, row %v", out.Upserts.Len(), out.Upserts.Batch.Row(0))
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"unknown key", func(c *Config) { c.Keys = []string{"nope"} }, "key column"},
		{"float sequence", func(c *Config) {
			c.Source.Columns = append(c.Source.Columns, batch.Column{Name: "f", Type: batch.Float64})
			c.SequenceBy = []string{"f"}
		}, "sequence column f is float64"},
		{"key excluded", func(c *Config) { c.ExceptColumnList = []string{"id"} }, "must remain"},
		{"both column lists", func(c *Config) { c.ColumnList = []string{"id"} }, "exclude each other"},
		{"track history on SCD1", func(c *Config) { c.TrackHistoryColumnList = []string{"name"} }, "SCD type 2"},
		{"two ignore-null forms", func(c *Config) { c.IgnoreNullUpdates = true; c.IgnoreNullUpdatesColumnList = []string{"name"} }, "exclude each other"},
		{"bad expression", func(c *Config) { c.ApplyAsDeletes = `op ==` }, "apply_as_deletes"},
		{"expression over an unknown field", func(c *Config) { c.ApplyAsDeletes = `nope == "D"` }, "apply_as_deletes"},
		{"table interval typed unlike the sequence", func(c *Config) {
			c.SCDType = 2
			c.Table = batch.Schema{Columns: []batch.Column{
				{Name: "id", Type: batch.Int64}, {Name: "name", Type: batch.String, Nullable: true},
				{Name: StartAtColumn, Type: batch.String, Nullable: true}, {Name: EndAtColumn, Type: batch.String, Nullable: true},
			}}
		}, "__START_AT is string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := f1("f")
			c.Source = batch.Schema{Columns: append([]batch.Column(nil), f1Source.Columns...)}
			tc.mod(&c)
			_, err := New(c, NewMemStore())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestDeclaredTableWithExtraColumn(t *testing.T) {
	c := f1("f")
	c.Table = batch.Schema{Columns: []batch.Column{
		{Name: "id", Type: batch.Int64},
		{Name: "name", Type: batch.String, Nullable: true},
		{Name: "note", Type: batch.String, Nullable: true}, // another flow's column
	}}
	h := newHarness(t, c)
	(&feed{h: h, flow: "f"}).batch(U(1, "a", 1))
	if diff := cmp.Diff([]string{"(1,a,null)"}, h.target.content()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	key, err := h.engines["f"].KeyOf(mkBatch(c.Table, [][]any{{1, "x", nil}}), 0)
	if err != nil || key != h.store.Keys()[0] {
		t.Errorf("KeyOf = %x, %v; stored key %x", key, err, h.store.Keys()[0])
	}
}

func TestPositionOrder(t *testing.T) {
	// Each position is less than the next.
	ps := []Position{
		{Flow: "a", Topic: "z", Partition: 9, Offset: 99},
		{Flow: "b", File: "x.parquet", Offset: 5},
		{Flow: "b", Topic: "t", Partition: 0, Offset: 100},
		{Flow: "b", Topic: "t", Partition: 1, Offset: 0},
		{Flow: "b", Topic: "u", Partition: 0, Offset: 0},
	}
	for i := range ps {
		for j := range ps {
			want := 0
			if i < j {
				want = -1
			} else if i > j {
				want = 1
			}
			if got := ps[i].Compare(ps[j]); got != want {
				t.Errorf("%v.Compare(%v) = %d, want %d", ps[i], ps[j], got, want)
			}
		}
	}
}
