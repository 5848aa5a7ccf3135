package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
)

// TestRetryableClassifier: what the sink refuses on top of chsql.Retryable
// (whose table is chsql/errors_test.go), and that it defers to it.
func TestRetryableClassifier(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{fmt.Errorf("commit: %w", sinks.ErrStale), false},
		{&RangeError{Table: "t", Column: "d"}, false},
		{chsql.Transient("publish: %w", sinks.ErrStale), false},
		{fmt.Errorf("write: %w", &RangeError{}), false},
		{chsql.Transient("lock held by a live writer"), true},
		{&clickhouse.Exception{Code: chsql.CodeTooManyParts}, true},
		{&clickhouse.Exception{Code: chsql.CodeUnknownTable}, false},
		{errors.New("batch has columns a, b"), false},
	} {
		if got := retryable(tc.err); got != tc.want {
			t.Errorf("retryable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestTimeoutsRetryable: a query that outlives the read timeout or the
// server's max_execution_time fails with a retryable error.
func TestTimeoutsRetryable(t *testing.T) {
	addr := serverAddr(t)
	tests := []struct {
		name string
		mod  func(*Options)
	}{
		{"read timeout", func(o *Options) { o.ReadTimeout = 300 * time.Millisecond }},
		{"max_execution_time", func(o *Options) { o.Settings = map[string]any{"max_execution_time": "1"} }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := openSink(t, addr, "default", tc.mod)
			start := time.Now()
			err := s.conn.Exec(context.Background(),
				"SELECT sleepEachRow(0.25) FROM system.numbers LIMIT 12 SETTINGS max_block_size = 1 FORMAT Null")
			if err == nil {
				t.Fatalf("a 3 s query finished in %v despite the limit", time.Since(start))
			}
			if !s.Retryable(err) {
				t.Fatalf("%v is not retryable", err)
			}
		})
	}
}

// TestRangeErrors: values the columns cannot store are refused, naming the
// column and the value, and are not retryable.
func TestRangeErrors(t *testing.T) {
	addr := serverAddr(t)
	db := newDatabase(t, addr)
	s := openSink(t, addr, db)
	ctx := context.Background()
	table := sinks.Table{Name: "r", Schema: batch.Schema{Columns: []batch.Column{
		{Name: "d", Type: batch.Date, Nullable: true}, {Name: "ts", Type: batch.Timestamp, Nullable: true}}}}
	if err := s.Ensure(ctx, []sinks.Table{table}); err != nil {
		t.Fatal(err)
	}
	early, late := time.Date(1960, 1, 2, 0, 0, 0, 0, time.UTC), time.Date(2300, 1, 2, 0, 0, 0, 0, time.UTC)
	if s.feat.date32 {
		early = time.Date(1800, 1, 2, 0, 0, 0, 0, time.UTC)
	}
	type rangeCase struct {
		name  string
		col   int
		value time.Time
		text  string
	}
	tests := []rangeCase{
		{"date too early", 0, early, early.Format(time.DateOnly)},
		{"date too late", 0, late, late.Format(time.DateOnly)},
	}
	if s.feat.dateTime64 {
		// Without DateTime64 a timestamp is an Int64 of microseconds: any
		// int64 fits.
		tests = append(tests, rangeCase{"timestamp too early", 1, early, early.Format(time.RFC3339)},
			rangeCase{"timestamp too late", 1, late, late.Format(time.RFC3339)})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := batch.New(table.Schema, 2)
			b.Vectors[0].AppendNull()
			b.Vectors[1].AppendNull()
			if tc.col == 0 {
				b.Vectors[0].AppendInt(int64(batch.DateFromTime(tc.value)))
				b.Vectors[1].AppendNull()
			} else {
				b.Vectors[0].AppendNull()
				b.Vectors[1].AppendInt(tc.value.UnixMicro())
			}
			ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: "range-" + fmt.Sprint(time.Now().UnixNano()), Pipeline: "p", Flow: "f"})
			if err != nil {
				t.Fatal(err)
			}
			defer ld.Abort(ctx)
			err = ld.Write(ctx, "r", b)
			var re *RangeError
			if !errors.As(err, &re) {
				t.Fatalf("Write: %v, want a RangeError", err)
			}
			if re.Row != 1 || re.Column != table.Schema.Columns[tc.col].Name || re.Value != tc.text {
				t.Fatalf("RangeError %+v, want row 1 of %s with %s", re, table.Schema.Columns[tc.col].Name, tc.text)
			}
			if s.Retryable(err) {
				t.Fatalf("%v is retryable", err)
			}
		})
	}
}

func TestSettings(t *testing.T) {
	got := normalizeSettings(map[string]any{"a": "4", "b": "true", "c": int64(7), "d": 2.0, "e": "random", "f": 1.5})
	want := map[string]any{"a": 4, "b": true, "c": 7, "d": 2, "e": "random", "f": 1.5}
	if fmt.Sprint(map[string]any(got)) != fmt.Sprint(want) {
		t.Fatalf("normalizeSettings = %v, want %v", got, want)
	}
	if bad := textSettings(got); fmt.Sprint(bad) != "[e f]" {
		t.Fatalf("textSettings = %v, want [e f]", bad)
	}
	addr := serverAddr(t)
	s, err := Open(context.Background(), Options{Addr: []string{addr}, Settings: map[string]any{"load_balancing": "random"}})
	if err == nil {
		s.Close()
	}
	probe := openSink(t, addr, "default")
	if old := !probe.feat.dateTime64; old && (err == nil || !strings.Contains(err.Error(), "load_balancing")) {
		t.Fatalf("Open with a text setting on %s: %v, want an error naming it", probe.ServerVersion(), err)
	}
}

// TestTimestampsExact checks that a timestamp keeps its microseconds on any
// server: a new table stores them (DateTime64(6), or an Int64 of
// microseconds where DateTime64 is missing), and a DateTime column of an
// older table refuses a fraction of a second instead of cutting it.
func TestTimestampsExact(t *testing.T) {
	addr := serverAddr(t)
	db := newDatabase(t, addr)
	s := openSink(t, addr, db)
	ctx := context.Background()
	at := []time.Time{
		time.Date(2024, 5, 1, 10, 0, 0, 100_000_000, time.UTC),
		time.Date(2024, 5, 1, 10, 0, 0, 600_000_000, time.UTC),
		time.Date(1960, 1, 2, 3, 4, 5, 123_456_000, time.UTC),
	}
	table := sinks.Table{Name: "e", Schema: batch.Schema{Columns: []batch.Column{{Name: "ts", Type: batch.Timestamp}}}}
	if err := s.Ensure(ctx, []sinks.Table{table}); err != nil {
		t.Fatal(err)
	}
	b := batch.New(table.Schema, len(at))
	for _, x := range at {
		b.Vectors[0].AppendInt(x.UnixMicro())
	}
	ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: "exact-1", Pipeline: "p", Flow: "f", Targets: []string{"e"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ld.Write(ctx, "e", b); err != nil {
		t.Fatal(err)
	}
	if err := ld.Commit(ctx, sinks.Commit{From: batch.Positions{{Topic: "x", Offset: -1}}, To: batch.Positions{{Topic: "x", Offset: 3}}, Rows: 3}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Scan(ctx, "e")
	if err != nil {
		t.Fatal(err)
	}
	var have []int64
	for i := range got.Len() {
		have = append(have, got.Vectors[0].Ints[i])
	}
	slices.Sort(have)
	want := []int64{at[2].UnixMicro(), at[0].UnixMicro(), at[1].UnixMicro()}
	if !slices.Equal(have, want) {
		t.Fatalf("timestamps %v, want %v", have, want)
	}

	// A DateTime column, as an older sluice created it on such a server.
	if err := s.exec(ctx, "old table", "CREATE TABLE "+s.table("old")+" (ts DateTime('UTC'), "+chsql.Quote(batch.LoadIDColumn)+" String) ENGINE = MergeTree ORDER BY tuple()"); err != nil {
		t.Fatal(err)
	}
	old := sinks.Table{Name: "old", Schema: table.Schema}
	if err := s.Ensure(ctx, []sinks.Table{old}); err != nil {
		t.Fatal(err)
	}
	b = batch.New(table.Schema, 1)
	b.Vectors[0].AppendInt(at[0].UnixMicro())
	ld, err = s.Begin(ctx, sinks.LoadMeta{LoadID: "old-1", Pipeline: "p", Flow: "f"})
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Abort(ctx)
	var re *RangeError
	if err := ld.Write(ctx, "old", b); !errors.As(err, &re) || !strings.Contains(re.Range, "whole seconds") {
		t.Fatalf("a fraction of a second into a DateTime column: %v, want a RangeError", err)
	}
	// A refresh would create the older table anew, not the new one.
	if why, err := s.Outdated(ctx, old); err != nil || !strings.Contains(why, "ts") {
		t.Fatalf("Outdated(old) = %q, %v; want its DateTime column named", why, err)
	}
	if why, err := s.Outdated(ctx, table); err != nil || why != "" {
		t.Fatalf("Outdated(e) = %q, %v; want nothing", why, err)
	}
}
