package cdc

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// mkBatch builds a batch of schema s from rows of Go values: nil is null,
// int (int64, timestamp µs, date days), string, float64, bool, []byte,
// time.Time for timestamps.
func mkBatch(s batch.Schema, rows [][]any) *batch.Batch {
	b := batch.New(s, len(rows))
	for _, r := range rows {
		for c, v := range r {
			vec := b.Vectors[c]
			if v == nil {
				vec.AppendNull()
				continue
			}
			switch x := v.(type) {
			case int:
				vec.AppendInt(int64(x))
			case int64:
				vec.AppendInt(x)
			case time.Time:
				vec.AppendInt(x.UnixMicro())
			case string:
				if s.Columns[c].Type.Kind == batch.KindDecimal {
					d, err := batch.ParseDecimal(x, s.Columns[c].Type.Precision, s.Columns[c].Type.Scale)
					if err != nil {
						panic(err)
					}
					vec.AppendDecimal(d)
				} else {
					vec.AppendString(x)
				}
			case float64:
				vec.AppendFloat(x)
			case bool:
				vec.AppendBool(x)
			case []byte:
				vec.AppendBytes(x)
			default:
				panic(fmt.Sprintf("mkBatch: %T", v))
			}
		}
	}
	return b
}

// target is a fake destination table: it applies Outputs the way a sink
// must, and checks that what an Output removes is what the table holds.
type target struct {
	scd2  bool
	rows  map[string]tRow // by identity
	table TableState
}

type tRow struct {
	key, seq string
	vals     []any
}

func newTarget(scd2 bool) *target { return &target{scd2: scd2, rows: map[string]tRow{}} }

func (t *target) identity(key, seq string) string {
	if t.scd2 {
		return key + "\xff\xff" + seq
	}
	return key
}

func (t *target) apply(out *Output) error {
	if out.Table != nil {
		if b := out.Table.Newest(); b != nil && (t.table.Newest() == nil || b.Seq != t.table.Newest().Seq) {
			for id, r := range t.rows {
				if r.seq < b.Seq {
					delete(t.rows, id)
				}
			}
		}
		t.table = *out.Table
	}
	for _, rs := range []*Rows{&out.Deletes, &out.Upserts} {
		if err := rs.Batch.Check(); err != nil {
			return err
		}
		if len(rs.Keys) != rs.Batch.Len() || len(rs.Seqs) != rs.Batch.Len() {
			return fmt.Errorf("rows: %d keys, %d seqs for %d rows", len(rs.Keys), len(rs.Seqs), rs.Batch.Len())
		}
	}
	for i, k := range out.Deletes.Keys {
		id := t.identity(k, out.Deletes.Seqs[i])
		have, ok := t.rows[id]
		want := out.Deletes.Batch.Row(i)
		if !ok {
			if b := t.table.Newest(); b != nil && out.Deletes.Seqs[i] < b.Seq {
				continue // the barrier removed it already
			}
			return fmt.Errorf("delete of a missing row %v", want)
		}
		if fmt.Sprint(have.vals) != fmt.Sprint(want) {
			return fmt.Errorf("delete of row %v, the table holds %v", want, have.vals)
		}
		delete(t.rows, id)
	}
	for i, k := range out.Upserts.Keys {
		t.rows[t.identity(k, out.Upserts.Seqs[i])] = tRow{key: k, seq: out.Upserts.Seqs[i], vals: out.Upserts.Batch.Row(i)}
	}
	return nil
}

// content returns the rows sorted by identity, rendered for comparison.
func (t *target) content() []string {
	ids := make([]string, 0, len(t.rows))
	for id := range t.rows {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = render(t.rows[id].vals, t.scd2)
	}
	return out
}

// render prints a row: NULL as null, and an SCD type 2 __END_AT NULL as ∞.
func render(vals []any, scd2 bool) string {
	parts := make([]string, len(vals))
	for i, v := range vals {
		switch x := v.(type) {
		case nil:
			parts[i] = "null"
			if scd2 && i == len(vals)-1 {
				parts[i] = "∞"
			}
		case time.Time:
			parts[i] = x.Format(time.RFC3339Nano)
		default:
			parts[i] = fmt.Sprint(x)
		}
	}
	return "(" + strings.Join(parts, ",") + ")"
}

// harness runs flows against one target: a MemStore (the state of record),
// a Cache in front of it, and the fake target.
type harness struct {
	t       tb
	store   *MemStore
	cache   *Cache
	target  *target
	engines map[string]*Engine
	cfgs    map[string]Config
	dls     []batch.DeadLetter
	now     time.Time
	// cacheBytes bounds the cache restart creates.
	cacheBytes int64
	// workers, when above 1, makes the engines restart creates apply the
	// keys of every batch of two keys or more with that many goroutines.
	workers int
}

// tb is what the harness needs of *testing.T and *rapid.T.
type tb interface {
	Helper()
	Fatalf(format string, args ...any)
}

func newHarness(t tb, cfgs ...Config) *harness {
	h := &harness{t: t, store: NewMemStore(), engines: map[string]*Engine{}, cfgs: map[string]Config{}, now: t0, cacheBytes: 1 << 20}
	scd2 := false
	for _, c := range cfgs {
		h.cfgs[c.Flow] = c
		scd2 = c.SCDType == 2
	}
	h.target = newTarget(scd2)
	h.restart()
	return h
}

// restart drops everything a process holds: engines and cache.
func (h *harness) restart() {
	h.cache = NewCache(h.store, h.cacheBytes)
	for name, c := range h.cfgs {
		e, err := New(c, h.cache)
		if err != nil {
			h.t.Fatalf("New(%s): %v", name, err)
		}
		if h.workers > 1 {
			e.workers, e.parallelKeys = h.workers, 1
		}
		h.engines[name] = e
	}
}

// apply applies a batch of flow and commits it everywhere.
func (h *harness) apply(flow string, b *batch.Batch, pos []Position) *Output {
	h.t.Helper()
	return h.applyInput(flow, Input{Batch: b, Positions: pos})
}

// applyInput applies in (at the harness's time) and commits it everywhere.
func (h *harness) applyInput(flow string, in Input) *Output {
	h.t.Helper()
	in.Now = h.now
	out, err := h.engines[flow].Apply(context.Background(), in)
	if err != nil {
		h.t.Fatalf("Apply: %v", err)
	}
	h.commit(out)
	return out
}

func (h *harness) commit(out *Output) {
	h.t.Helper()
	for _, kc := range out.States {
		if kc.State == nil {
			continue
		}
		// A state that copied the encoding of its stored events is still
		// exactly what encoding its events writes.
		data, err := kc.State.MarshalBinary()
		if err != nil {
			h.t.Fatalf("state of key %x: %v", kc.Key, err)
		}
		d := &KeyState{}
		if err := d.UnmarshalBinary(data); err != nil {
			h.t.Fatalf("state of key %x: %v", kc.Key, err)
		}
		if again, err := d.encode(); err != nil || !bytes.Equal(again, data) {
			h.t.Fatalf("state of key %x: encoded as %x, its events encode as %x (%v)", kc.Key, data, again, err)
		}
	}
	if err := h.target.apply(out); err != nil {
		h.t.Fatalf("target: %v", err)
	}
	if err := h.store.Commit(out); err != nil {
		h.t.Fatalf("store: %v", err)
	}
	h.cache.Commit(out)
	h.dls = append(h.dls, out.DeadLetters...)
	if out.Refresh {
		// What a sink does: refresh the keys whose rows are at or above
		// the new barrier.
		var keys []string
		for _, r := range h.target.rows {
			if r.seq >= out.Table.Newest().Seq {
				keys = append(keys, r.key)
			}
		}
		for _, e := range h.engines {
			more, err := e.Refresh(context.Background(), keys, h.now)
			if err != nil {
				h.t.Fatalf("Refresh: %v", err)
			}
			h.commit(more)
			break
		}
	}
}

// TestMain runs the property tests with 1000 checks each unless
// -rapid.checks (or RAPID_CHECKS) says otherwise: a few seconds in all.
func TestMain(m *testing.M) {
	flag.Parse()
	set := os.Getenv("RAPID_CHECKS") != ""
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rapid.checks" })
	if !set {
		if err := flag.Set("rapid.checks", "1000"); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}
