package clickhouse

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/cdc"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
)

// engineStore reads the CDC engine's state back through GetState, as the
// runner does.
type engineStore struct {
	s     *Sink
	table string
}

func (st engineStore) Get(ctx context.Context, keys []string) ([]*cdc.KeyState, error) {
	got, err := st.s.GetState(ctx, st.table, keys)
	if err != nil {
		return nil, err
	}
	out := make([]*cdc.KeyState, len(keys))
	for i, k := range keys {
		v, ok := got[k]
		if !ok {
			continue
		}
		ks := &cdc.KeyState{}
		if err := ks.UnmarshalBinary(v); err != nil {
			return nil, err
		}
		out[i] = ks
	}
	return out, nil
}

func (st engineStore) Table(ctx context.Context) (cdc.TableState, error) {
	var ts cdc.TableState
	got, err := st.s.GetState(ctx, st.table, []string{""})
	if err != nil || got[""] == nil {
		return ts, err
	}
	err = ts.UnmarshalBinary(got[""])
	return ts, err
}

// engineRun applies batches of one flow through the CDC engine and this
// sink, one load per batch, the way the runner does: state comes back from
// the destination only (no cache).
type engineRun struct {
	t      *testing.T
	s      *Sink
	cfg    cdc.Config
	eng    *cdc.Engine
	offset int64
	loads  int
}

func newEngineRun(t *testing.T, s *Sink, cfg cdc.Config) *engineRun {
	t.Helper()
	eng, err := cdc.New(cfg, engineStore{s: s, table: cfg.Target})
	if err != nil {
		t.Fatal(err)
	}
	kind := sinks.KindSCD1
	if cfg.SCDType == 2 {
		kind = sinks.KindSCD2
	}
	if err := s.Ensure(context.Background(), []sinks.Table{{Name: cfg.Target, Schema: eng.Schema(), Kind: kind, Keys: cfg.Keys}}); err != nil {
		t.Fatal(err)
	}
	return &engineRun{t: t, s: s, cfg: cfg, eng: eng}
}

// apply applies one batch of records (values in the source's column order)
// in one load.
func (r *engineRun) apply(rows ...[]any) {
	r.t.Helper()
	ctx := context.Background()
	b := batch.New(r.cfg.Source, len(rows))
	pos := make([]cdc.Position, len(rows))
	for i, row := range rows {
		for c, v := range row {
			switch x := v.(type) {
			case nil:
				b.Vectors[c].AppendNull()
			case int:
				b.Vectors[c].AppendInt(int64(x))
			case string:
				b.Vectors[c].AppendString(x)
			}
		}
		pos[i] = cdc.Position{Flow: r.cfg.Flow, Topic: "t", Offset: r.offset + int64(i)}
	}
	prev, err := engineStore{s: r.s, table: r.cfg.Target}.Table(ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	out, err := r.eng.Apply(ctx, cdc.Input{Batch: b, Positions: pos, Now: time.Unix(1_700_000_000, 0)})
	if err != nil {
		r.t.Fatalf("Apply: %v", err)
	}
	r.loads++
	ld, err := r.s.Begin(ctx, sinks.LoadMeta{LoadID: fmt.Sprintf("%s-%d", r.cfg.Flow, r.loads), Pipeline: "p", Flow: r.cfg.Flow, Targets: []string{r.cfg.Target}})
	if err != nil {
		r.t.Fatal(err)
	}
	cl := ld.(sinks.CDCLoad)
	table := r.cfg.Target
	must := func(err error) {
		r.t.Helper()
		if err != nil {
			ld.Abort(ctx)
			r.t.Fatal(err)
		}
	}
	if out.Table != nil && out.Table.Newest() != nil && (prev.Newest() == nil || prev.Newest().Seq != out.Table.Newest().Seq) {
		must(cl.TruncateBelow(ctx, table, out.Table.Newest().Seq))
	}
	if out.Deletes.Len() > 0 {
		must(cl.Remove(ctx, table, out.Deletes.Batch, out.Deletes.Keys, out.Deletes.Seqs))
	}
	if out.Upserts.Len() > 0 {
		must(cl.Upsert(ctx, table, out.Upserts.Batch, out.Upserts.Keys, out.Upserts.Seqs))
	}
	var entries []sinks.StateEntry
	for _, kc := range out.States {
		e := sinks.StateEntry{Key: kc.Key}
		if kc.State != nil {
			e.Value, err = kc.State.MarshalBinary()
			must(err)
		}
		entries = append(entries, e)
	}
	if out.Table != nil {
		v, err := out.Table.MarshalBinary()
		must(err)
		entries = append(entries, sinks.StateEntry{Key: "", Value: v})
	}
	must(cl.PutState(ctx, table, entries))
	from := r.offset - 1
	if r.offset == 0 {
		from = -1
	}
	r.offset += int64(len(rows))
	must(ld.Commit(ctx, sinks.Commit{
		From: batch.Positions{{Topic: "t", Offset: from}},
		To:   batch.Positions{{Topic: "t", Offset: r.offset - 1}},
	}))
}

// content renders the target as sorted lines, read through its view.
func (r *engineRun) content() []string {
	r.t.Helper()
	b, err := r.s.Scan(context.Background(), r.cfg.Target)
	if err != nil {
		r.t.Fatal(err)
	}
	lines := make([]string, b.Len())
	for i := range b.Len() {
		var parts []string
		for _, v := range b.Row(i) {
			if v == nil {
				parts = append(parts, "∞")
			} else {
				parts = append(parts, fmt.Sprint(v))
			}
		}
		lines[i] = strings.Join(parts, ",")
	}
	slices.Sort(lines)
	return lines
}

var f1Source = batch.Schema{Columns: []batch.Column{
	{Name: "id", Type: batch.Int64},
	{Name: "name", Type: batch.String, Nullable: true},
	{Name: "op", Type: batch.String, Nullable: true},
	{Name: "seq", Type: batch.Int64, Nullable: true},
}}

// f1 is the acceptance cases' flow (keys [id], sequence seq, op "D" a
// delete, op and seq left out of the target) as SCD type 1 with op "T" a
// truncate, or as SCD type 2.
func f1(target string, scd int) cdc.Config {
	c := cdc.Config{Pipeline: "p", Flow: "f_" + target, Target: target, Source: f1Source, Kafka: true,
		Keys: []string{"id"}, SequenceBy: []string{"seq"}, ApplyAsDeletes: `op == "D"`,
		ExceptColumnList: []string{"op", "seq"}, SCDType: scd}
	if scd == 1 {
		c.ApplyAsTruncates = `op == "T"`
	}
	return c
}

func u(id int, name string, seq int) []any { return []any{id, name, nil, seq} }
func d(id, seq int) []any                  { return []any{id, nil, "D", seq} }
func tr(seq int) []any                     { return []any{0, nil, "T", seq} }

// TestCDCEngineAcceptance runs acceptance cases of the change rules
// (docs/cdc.md) through the CDC engine and this sink, batch by batch, with
// the state read back from ClickHouse only; then it delivers every batch
// again, which changes nothing.
func TestCDCEngineAcceptance(t *testing.T) {
	tests := []struct {
		name    string
		scd     int
		batches [][][]any
		want    []string
	}{
		{"newest per key", 1, [][][]any{{u(1, "a", 1), u(2, "x", 1), u(1, "b", 2)}}, []string{"1,b", "2,x"}},
		{"older event in a later batch", 1, [][][]any{{u(1, "b", 2)}, {u(1, "a", 1)}}, []string{"1,b"}},
		{"tombstone discards an older upsert", 1, [][][]any{{u(1, "a", 1)}, {d(1, 5)}, {u(1, "c", 6)}, {u(1, "old", 4)}}, []string{"1,c"}},
		{"deletes and re-insert in one batch", 1, [][][]any{{u(1, "a", 1), d(1, 2), d(2, 2), u(2, "b", 3)}}, []string{"2,b"}},
		{"truncate", 1, [][][]any{{u(1, "a", 1), u(2, "b", 5), u(3, "c", 2)}, {tr(3), u(4, "d", 2)}, {u(1, "late", 2), u(5, "e", 4)}},
			[]string{"2,b", "5,e"}},
		{"scd2 delete and re-insert", 2, [][][]any{{u(1, "a", 10), u(1, "b", 20), d(1, 30), u(1, "c", 40)}}, []string{"1,a,10,20", "1,b,20,30", "1,c,40,∞"}},
		{"scd2 late upsert before history", 2, [][][]any{{u(1, "a", 10)}, {u(1, "b", 5)}}, []string{"1,a,10,∞", "1,b,5,10"}},
		{"scd2 late upsert splits", 2, [][][]any{{u(1, "a", 10)}, {u(1, "c", 30)}, {u(1, "b", 20)}}, []string{"1,a,10,20", "1,b,20,30", "1,c,30,∞"}},
		{"scd2 several keys", 2, [][][]any{{u(1, "a", 10), u(2, "p", 10)}, {u(1, "b", 20), d(2, 20), u(3, "z", 20)}},
			[]string{"1,a,10,20", "1,b,20,∞", "2,p,10,20", "3,z,20,∞"}},
	}
	_, open := cdcSetup(t)
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The first process ends before the second starts: with no
			// grace, a live sink's maintenance would take the other's loads
			// in flight for abandoned.
			s := open()
			r := newEngineRun(t, s, f1(fmt.Sprintf("acc%d", i), tc.scd))
			for _, b := range tc.batches {
				r.apply(b...)
			}
			if got := r.content(); !slices.Equal(got, tc.want) {
				t.Fatalf("content %v, want %v", got, tc.want)
			}
			s.Close()
			// Every batch again, at later offsets (a source that delivers
			// them twice), in a new sink (a restarted process): nothing
			// changes.
			s2 := open()
			defer s2.Close()
			r2 := newEngineRun(t, s2, r.cfg)
			r2.loads, r2.offset = r.loads, r.offset
			for _, b := range tc.batches {
				r2.apply(b...)
			}
			if got := r2.content(); !slices.Equal(got, tc.want) {
				t.Fatalf("after a replay: content %v, want %v", got, tc.want)
			}
		})
	}
}
