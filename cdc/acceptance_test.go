package cdc

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/flows/batch"
)

// Acceptance cases of the change rules (docs/cdc.md), for SCD type 1 and
// SCD type 2, each batch applied and committed before the next, with state
// carried only by the store.

var f1Source = batch.Schema{Columns: []batch.Column{
	{Name: "id", Type: batch.Int64},
	{Name: "name", Type: batch.String, Nullable: true},
	{Name: "op", Type: batch.String, Nullable: true},
	{Name: "seq", Type: batch.Int64, Nullable: true},
}}

func f1(flow string) Config {
	return Config{
		Pipeline: "p", Flow: flow, Target: "t", Source: f1Source, Kafka: true,
		Keys: []string{"id"}, SequenceBy: []string{"seq"},
		ApplyAsDeletes: `op == "D"`, ExceptColumnList: []string{"op", "seq"},
	}
}

func f1t(flow string) Config {
	c := f1(flow)
	c.ApplyAsTruncates = `op == "T"`
	return c
}

func f2(flow string) Config {
	c := f1(flow)
	c.SCDType = 2
	return c
}

// Events of the f1 and f2 flows: an upsert, a delete, a truncate.
func U(id int, name any, seq any) []any { return []any{id, name, nil, seq} }
func D(id int, seq int) []any           { return []any{id, nil, "D", seq} }
func T(seq int) []any                   { return []any{nil, nil, "T", seq} }

type step struct {
	flow   string  // default the case's first flow
	rows   [][]any // records, in offset order
	replay int     // > 0: deliver step replay-1 again, with its positions
	want   []string
}

type acceptance struct {
	name   string
	cfgs   []Config
	steps  []step
	want   []string
	wantDL []string // reasons
	cols   []string // the target's columns, when checked
}

func runAcceptance(t *testing.T, tc acceptance) {
	h := newHarness(t, tc.cfgs...)
	offsets := map[string]int64{}
	type delivered struct {
		flow string
		b    *batch.Batch
		pos  []Position
	}
	var done []delivered
	for si, st := range tc.steps {
		var d delivered
		if st.replay > 0 {
			d = done[st.replay-1]
		} else {
			d.flow = st.flow
			if d.flow == "" {
				d.flow = tc.cfgs[0].Flow
			}
			d.b = mkBatch(h.cfgs[d.flow].Source, st.rows)
			for range st.rows {
				d.pos = append(d.pos, Position{Flow: d.flow, Topic: "topic-" + d.flow, Offset: offsets[d.flow]})
				offsets[d.flow]++
			}
		}
		done = append(done, d)
		h.now = h.now.Add(time.Minute)
		h.apply(d.flow, d.b, d.pos)
		if st.want != nil {
			if diff := cmp.Diff(st.want, h.target.content()); diff != "" {
				t.Errorf("after batch %d (-want +got):\n%s", si+1, diff)
			}
		}
	}
	got := h.target.content()
	if tc.want == nil {
		tc.want = []string{}
	}
	if diff := cmp.Diff(tc.want, got); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
	var reasons []string
	for _, dl := range h.dls {
		reasons = append(reasons, dl.Reason)
	}
	if diff := cmp.Diff(tc.wantDL, reasons); diff != "" {
		t.Errorf("dead letters (-want +got):\n%s", diff)
	}
	if tc.cols != nil {
		if got := h.engines[tc.cfgs[0].Flow].Schema().Names(); !slices.Equal(got, tc.cols) {
			t.Errorf("columns %v, want %v", got, tc.cols)
		}
	}
	// Replaying everything, also after a restart, changes nothing.
	h.restart()
	for _, d := range done {
		out, err := h.engines[d.flow].Apply(t.Context(), Input{Batch: d.b, Positions: d.pos, Now: h.now})
		if err != nil {
			t.Fatal(err)
		}
		if out.Upserts.Len()+out.Deletes.Len()+len(out.States) != 0 || out.Table != nil {
			t.Fatalf("replay changed %d rows, %d removed, %d states, table %v", out.Upserts.Len(), out.Deletes.Len(), len(out.States), out.Table)
		}
	}
}

func TestAcceptanceSCD1(t *testing.T) {
	cityCols := batch.Schema{Columns: []batch.Column{
		{Name: "id", Type: batch.Int64},
		{Name: "name", Type: batch.String, Nullable: true},
		{Name: "city", Type: batch.String, Nullable: true},
		{Name: "op", Type: batch.String, Nullable: true},
		{Name: "seq", Type: batch.Int64, Nullable: true},
	}}
	withCity := func(mod func(*Config)) Config {
		c := f1("f")
		c.Source = cityCols
		mod(&c)
		return c
	}
	UC := func(id int, name, city any, seq int) []any { return []any{id, name, city, nil, seq} }
	databricks := Config{
		Pipeline: "p", Flow: "f", Target: "t", Kafka: true,
		Source: batch.Schema{Columns: []batch.Column{
			{Name: "userId", Type: batch.Int64, Nullable: true},
			{Name: "name", Type: batch.String, Nullable: true},
			{Name: "city", Type: batch.String, Nullable: true},
			{Name: "operation", Type: batch.String, Nullable: true},
			{Name: "sequenceNum", Type: batch.Int64, Nullable: true},
		}},
		Keys: []string{"userId"}, SequenceBy: []string{"sequenceNum"},
		ApplyAsDeletes:   `operation == "DELETE"`,
		ApplyAsTruncates: `operation == "TRUNCATE"`,
		ExceptColumnList: []string{"operation", "sequenceNum"},
	}

	for _, tc := range []acceptance{
		{name: "newest per key", cfgs: []Config{f1("f")},
			steps: []step{{rows: [][]any{U(1, "a", 1), U(2, "x", 1), U(1, "b", 2)}}},
			want:  []string{"(1,b)", "(2,x)"}},
		{name: "unsorted batch", cfgs: []Config{f1("f")},
			steps: []step{{rows: [][]any{U(1, "b", 2), U(1, "a", 1)}}},
			want:  []string{"(1,b)"}},
		{name: "older event in a later batch", cfgs: []Config{f1("f")},
			steps: []step{{rows: [][]any{U(1, "b", 2)}}, {rows: [][]any{U(1, "a", 1)}}},
			want:  []string{"(1,b)"}},
		{name: "newer delete removes the row", cfgs: []Config{f1("f")},
			steps: []step{{rows: [][]any{U(1, "a", 1)}}, {rows: [][]any{D(1, 2)}}}},
		{name: "older delete ignored", cfgs: []Config{f1("f")},
			steps: []step{{rows: [][]any{U(1, "a", 5)}}, {rows: [][]any{D(1, 3)}}},
			want:  []string{"(1,a)"}},
		{name: "tombstone discards an older upsert", cfgs: []Config{f1("f")},
			steps: []step{
				{rows: [][]any{U(1, "a", 1)}},
				{rows: [][]any{D(1, 5)}, want: []string{}},
				{rows: [][]any{U(1, "c", 6)}, want: []string{"(1,c)"}},
				{rows: [][]any{U(1, "old", 4)}},
			},
			want: []string{"(1,c)"}},
		{name: "deletes and re-insert in one batch", cfgs: []Config{f1("f")},
			steps: []step{{rows: [][]any{U(1, "a", 1), D(1, 2), D(2, 2), U(2, "b", 3)}}},
			want:  []string{"(2,b)"}},
		{name: "batch delivered twice", cfgs: []Config{f1("f")},
			steps: []step{{rows: [][]any{U(1, "a", 1), U(1, "b", 2)}}, {replay: 1}},
			want:  []string{"(1,b)"}},
		{name: "delete at the row's sequence", cfgs: []Config{f1("f")},
			steps: []step{{rows: [][]any{U(1, "a", 5)}}, {rows: [][]any{D(1, 5)}}},
			want:  []string{"(1,a)"}},
		{name: "upsert at the tombstone's sequence", cfgs: []Config{f1("f")},
			steps: []step{{rows: [][]any{D(1, 5)}, want: []string{}}, {rows: [][]any{U(1, "a", 5)}}},
			want:  []string{"(1,a)"}},
		{name: "tie in one batch", cfgs: []Config{f1("f")},
			steps: []step{{rows: [][]any{U(1, "a", 5), U(1, "b", 5)}}},
			want:  []string{"(1,b)"}},
		{name: "tie across batches and a redelivery", cfgs: []Config{f1("f")},
			steps: []step{
				{rows: [][]any{U(1, "a", 5)}},
				{rows: [][]any{U(1, "b", 5)}, want: []string{"(1,b)"}},
				{replay: 1},
			},
			want: []string{"(1,b)"}},
		{name: "null sequence is a dead letter", cfgs: []Config{f1("f")},
			steps:  []step{{rows: [][]any{U(1, "a", 1)}}, {rows: [][]any{U(2, "b", nil), U(1, "c", 2)}}},
			want:   []string{"(1,c)"},
			wantDL: []string{batch.ReasonNullSequence}},
		{name: "Databricks example with a truncate", cfgs: []Config{databricks},
			steps: []step{{rows: [][]any{
				{124, "Raul", "Oaxaca", "INSERT", 1},
				{123, "Isabel", "Monterrey", "INSERT", 1},
				{125, "Mercedes", "Tijuana", "INSERT", 2},
				{126, "Lily", "Cancun", "INSERT", 2},
				{123, nil, nil, "DELETE", 6},
				{125, "Mercedes", "Guadalajara", "UPDATE", 6},
				{125, "Mercedes", "Mexicali", "UPDATE", 5},
				{123, "Isabel", "Chihuahua", "UPDATE", 5},
				{nil, nil, nil, "TRUNCATE", 3},
			}}},
			want: []string{"(125,Mercedes,Guadalajara)"}},
		{name: "ignore_null_updates", cfgs: []Config{withCity(func(c *Config) { c.IgnoreNullUpdates = true })},
			steps: []step{{rows: [][]any{UC(1, "a", "x", 1), UC(2, nil, "z", 1)}}, {rows: [][]any{UC(1, nil, "y", 2)}}},
			want:  []string{"(1,a,y)", "(2,null,z)"}},
		{name: "ignore_null_updates_column_list", cfgs: []Config{withCity(func(c *Config) { c.IgnoreNullUpdatesColumnList = []string{"name"} })},
			steps: []step{{rows: [][]any{UC(1, "a", "x", 1)}}, {rows: [][]any{UC(1, nil, nil, 2)}}},
			want:  []string{"(1,a,null)"}},
		{name: "column_list", cfgs: []Config{withCity(func(c *Config) { c.ExceptColumnList = nil; c.ColumnList = []string{"id", "name"} })},
			steps: []step{{rows: [][]any{UC(1, "a", "x", 2), UC(1, "b", "y", 1)}}},
			want:  []string{"(1,a)"},
			cols:  []string{"id", "name"}},
		{name: "two flows on one target", cfgs: []Config{f1("f_main"), f1("f_fix")},
			steps: []step{
				{flow: "f_main", rows: [][]any{U(1, "a", 5), U(2, "b", 5)}},
				{flow: "f_fix", rows: [][]any{U(1, "fix", 3), D(2, 6)}},
			},
			want: []string{"(1,a)"}},
		{name: "two flows in the other order", cfgs: []Config{f1("f_main"), f1("f_fix")},
			steps: []step{
				{flow: "f_fix", rows: [][]any{U(1, "fix", 3), D(2, 6)}},
				{flow: "f_main", rows: [][]any{U(1, "a", 5), U(2, "b", 5)}},
			},
			want: []string{"(1,a)"}},
	} {
		t.Run(tc.name, func(t *testing.T) { runAcceptance(t, tc) })
	}
}

func TestAcceptanceTruncateOnSCD2(t *testing.T) {
	c := f2("f")
	c.ApplyAsTruncates = `op == "T"`
	if _, err := New(c, NewMemStore()); err == nil {
		t.Fatal("New accepted apply_as_truncates on an SCD type 2 flow")
	}
}

func TestAcceptanceSCD2(t *testing.T) {
	scoreCfg := f2("f")
	scoreCfg.Source = batch.Schema{Columns: []batch.Column{
		{Name: "id", Type: batch.Int64},
		{Name: "name", Type: batch.String, Nullable: true},
		{Name: "score", Type: batch.Int64, Nullable: true},
		{Name: "op", Type: batch.String, Nullable: true},
		{Name: "seq", Type: batch.Int64, Nullable: true},
	}}
	scoreCfg.TrackHistoryColumnList = []string{"name"}
	US := func(id int, name string, score, seq int) []any { return []any{id, name, score, nil, seq} }
	tsCfg := f2("f")
	tsCfg.Source = batch.Schema{Columns: []batch.Column{
		{Name: "id", Type: batch.Int64},
		{Name: "name", Type: batch.String, Nullable: true},
		{Name: "op", Type: batch.String, Nullable: true},
		{Name: "seq", Type: batch.Timestamp, Nullable: true},
	}}
	jan, feb := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2024, 2, 1, 0, 0, 0, 0, time.UTC)

	for _, tc := range []acceptance{
		{name: "two versions", cfgs: []Config{f2("f")},
			steps: []step{{rows: [][]any{U(1, "a", 1), U(1, "b", 2)}}},
			want:  []string{"(1,a,1,2)", "(1,b,2,∞)"},
			cols:  []string{"id", "name", StartAtColumn, EndAtColumn}},
		{name: "delete closes the version", cfgs: []Config{f2("f")},
			steps: []step{{rows: [][]any{U(1, "a", 10)}}, {rows: [][]any{D(1, 20)}}},
			want:  []string{"(1,a,10,20)"}},
		{name: "delete and re-insert", cfgs: []Config{f2("f")},
			steps: []step{{rows: [][]any{U(1, "a", 10), U(1, "b", 20), D(1, 30), U(1, "c", 40)}}},
			want:  []string{"(1,a,10,20)", "(1,b,20,30)", "(1,c,40,∞)"}},
		{name: "late upsert before history", cfgs: []Config{f2("f")},
			steps: []step{{rows: [][]any{U(1, "a", 10)}}, {rows: [][]any{U(1, "b", 5)}}},
			want:  []string{"(1,b,5,10)", "(1,a,10,∞)"}},
		{name: "late upsert splits", cfgs: []Config{f2("f")},
			steps: []step{{rows: [][]any{U(1, "a", 10)}}, {rows: [][]any{U(1, "c", 30)}}, {rows: [][]any{U(1, "b", 20)}}},
			want:  []string{"(1,a,10,20)", "(1,b,20,30)", "(1,c,30,∞)"}},
		{name: "equal values coalesce", cfgs: []Config{f2("f")},
			steps: []step{
				{rows: [][]any{U(1, "a", 10)}},
				{rows: [][]any{U(1, "a", 20)}, want: []string{"(1,a,10,∞)"}},
				{rows: [][]any{U(1, "b", 30)}},
			},
			want: []string{"(1,a,10,30)", "(1,b,30,∞)"}},
		{name: "track_history_column_list", cfgs: []Config{scoreCfg},
			steps: []step{
				{rows: [][]any{US(1, "alice", 100, 10), US(1, "alice", 200, 20)}, want: []string{"(1,alice,200,10,∞)"}},
				{rows: [][]any{US(1, "alice", 300, 30)}, want: []string{"(1,alice,300,10,∞)"}},
				{rows: [][]any{US(1, "bob", 300, 40)}},
			},
			want: []string{"(1,alice,300,10,40)", "(1,bob,300,40,∞)"}},
		{name: "late upsert absorbed", cfgs: []Config{f2("f")},
			steps: []step{{rows: [][]any{U(1, "a", 10), U(1, "b", 30)}}, {rows: [][]any{U(1, "a", 20)}}},
			want:  []string{"(1,a,10,30)", "(1,b,30,∞)"}},
		{name: "duplicates collapse", cfgs: []Config{f2("f")},
			steps: []step{{rows: [][]any{U(1, "a", 10), U(1, "a", 10)}}, {rows: [][]any{U(1, "a", 10)}}},
			want:  []string{"(1,a,10,∞)"}},
		{name: "delete of an unknown key", cfgs: []Config{f2("f")},
			steps: []step{{rows: [][]any{D(7, 5)}}}},
		{name: "several keys", cfgs: []Config{f2("f")},
			steps: []step{
				{rows: [][]any{U(1, "a", 10), U(2, "p", 10)}},
				{rows: [][]any{U(1, "b", 20), D(2, 20), U(3, "z", 20)}},
			},
			want: []string{"(1,a,10,20)", "(1,b,20,∞)", "(2,p,10,20)", "(3,z,20,∞)"}},
		{name: "timestamp sequence", cfgs: []Config{tsCfg},
			steps: []step{{rows: [][]any{{1, "a", nil, jan}, {1, "b", nil, feb}}}},
			want: []string{
				"(1,a,2024-01-01T00:00:00Z,2024-02-01T00:00:00Z)",
				"(1,b,2024-02-01T00:00:00Z,∞)",
			}},
	} {
		t.Run(tc.name, func(t *testing.T) { runAcceptance(t, tc) })
	}
}
