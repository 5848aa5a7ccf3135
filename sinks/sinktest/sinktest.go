package sinktest

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
)

// Pipeline is the pipeline of every load and heartbeat the suite writes; a
// Factory whose sink filters by pipeline must use it.
const Pipeline = "sinktest"

// Factory makes a fresh, empty destination for one subtest and returns a
// function that opens a Sink on it. Each call of open must return a new
// Sink on the same destination (a restart); it fails t itself on error.
type Factory func(t *testing.T) (open func() sinks.Sink)

// Option relaxes what the suite expects of a destination.
type Option func(*config)

type config struct {
	tsPrecision      time.Duration
	minTime, maxTime time.Time
	// nullablePartitions, for RunReplace: see NullablePartitions.
	nullablePartitions bool
	// crashReset, for RunReset: see CrashReset.
	crashReset func(t *testing.T, s sinks.Sink, tables, flows []string)
	// publishFault: see PublishFault.
	publishFault func(t *testing.T, s sinks.Sink)
	// appendOnly: see AppendOnly.
	appendOnly bool
}

// AppendOnly says the destination holds append targets only (a ClickHouse
// cluster of several shards refuses CDC targets): the reset suite resets
// append targets alone, and its case of a CDC target is not among its
// cases.
func AppendOnly() Option { return func(c *config) { c.appendOnly = true } }

// PublishFault gives the suite a way to make publishing fail: arm makes the
// next Commit of s fail after its commit point, as when a file system or a
// server fails while the committed load is being published. The load is
// then committed; Commit returns an error that the sink classifies as
// retryable, and s stays usable (its next commit, or Recover, publishes the
// load). Run's publish cases need it.
func PublishFault(arm func(t *testing.T, s sinks.Sink)) Option {
	return func(c *config) { c.publishFault = arm }
}

// TimestampPrecision says that the destination keeps timestamps to d (for
// example time.Second); values are compared truncated to it. Default one
// microsecond: exact.
func TimestampPrecision(d time.Duration) Option { return func(c *config) { c.tsPrecision = d } }

// NullablePartitions says that the destination allows nullable partition_by
// columns (ClickHouse does not); RunReplace then replaces a NULL partition
// too.
func NullablePartitions() Option { return func(c *config) { c.nullablePartitions = true } }

// TimeRange says that the destination stores timestamps and dates only from
// min to max (ClickHouse 18.16's DateTime: 1970 to 2106); the suite's values
// stay within. Default: none (values before 1970 and far in the future must
// round-trip).
func TimeRange(min, max time.Time) Option {
	return func(c *config) { c.minTime, c.maxTime = min, max }
}

// clamp moves t into the destination's time range.
func (c config) clamp(t time.Time) time.Time {
	if !c.minTime.IsZero() && t.Before(c.minTime) {
		return c.minTime
	}
	if !c.maxTime.IsZero() && t.After(c.maxTime) {
		return c.maxTime
	}
	return t
}

// newConfig applies opts to the defaults.
func newConfig(opts []Option) config {
	c := config{tsPrecision: time.Microsecond}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// suiteCase is one named case of a suite.
type suiteCase struct {
	name string
	run  func(t *testing.T, h *harness)
}

// runCases runs each case as a subtest against a fresh destination.
func runCases(t *testing.T, newDestination Factory, cases []suiteCase) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := &harness{t: t, open: newDestination(t)}
			t.Cleanup(h.closeAll)
			tc.run(t, h)
		})
	}
}

// Run runs the conformance suite.
func Run(t *testing.T, newDestination Factory, opts ...Option) {
	c := newConfig(opts)
	tests := []suiteCase{
		{"commit_publishes_once", testCommitOnce},
		{"several_writes_per_table", testSeveralWrites},
		{"abort_leaves_nothing", testAbort},
		{"uncommitted_load_leaves_nothing", testUncommitted},
		{"stale_commit_refused", testStale},
		{"replayed_load_refused", testReplay},
		{"stale_file_commit_refused", testStaleFile},
		{"heads_and_totals_agree_with_the_ledger", testHeadsAndTotals},
		{"publish_failed_then_retried_kafka", func(t *testing.T, h *harness) { testPublishRetried(t, h, c, false) }},
		{"publish_failed_then_retried_file", func(t *testing.T, h *harness) { testPublishRetried(t, h, c, true) }},
		{"positions_round_trip", testPositions},
		{"loads_table", testLoadsTable},
		{"dead_letters_in_same_load", testDeadLetters},
		{"types_round_trip", func(t *testing.T, h *harness) { testTypes(t, h, c) }},
		{"arrays_round_trip", func(t *testing.T, h *harness) { testArrays(t, h, c) }},
		{"ensure_adds_nullable_column", testEnsureAdd},
		{"ensure_rejects_changes", testEnsureReject},
		{"unknown_table", testUnknownTable},
		{"concurrent_loads", testConcurrent},
		{"heartbeats_expire", testHeartbeats},
	}
	runCases(t, newDestination, tests)
}

// harness opens sinks on one destination and closes them at the end.
type harness struct {
	t     *testing.T
	open  func() sinks.Sink
	mu    sync.Mutex
	sinks []sinks.Sink
	seq   int
}

func (h *harness) sink() sinks.Sink {
	s := h.open()
	h.mu.Lock()
	h.sinks = append(h.sinks, s)
	h.mu.Unlock()
	return s
}

func (h *harness) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.sinks {
		if err := s.Close(); err != nil {
			h.t.Errorf("close: %v", err)
		}
	}
}

func (h *harness) loadID() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	return fmt.Sprintf("load-%s-%04d", time.Now().UTC().Format("150405.000000"), h.seq)
}

var ordersSchema = batch.Schema{Columns: []batch.Column{
	{Name: "id", Type: batch.Int64},
	{Name: "name", Type: batch.String},
	{Name: "amount", Type: batch.Decimal(12, 2), Nullable: true},
}}

var ordersTable = sinks.Table{Name: "orders", Schema: ordersSchema}

// orders returns rows with ids from..to-1.
func orders(from, to int) *batch.Batch {
	b := batch.New(ordersSchema, to-from)
	for i := from; i < to; i++ {
		b.Vectors[0].AppendInt(int64(i))
		b.Vectors[1].AppendString(fmt.Sprintf("order-%d", i))
		if i%3 == 0 {
			b.Vectors[2].AppendNull()
		} else {
			b.Vectors[2].AppendDecimal(batch.Dec128FromInt64(int64(i) * 101))
		}
	}
	return b
}

func ensure(t *testing.T, s sinks.Sink, tables ...sinks.Table) {
	t.Helper()
	if err := s.Ensure(context.Background(), tables); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
}

func kafka(topic string, partition int32, offset int64) batch.Position {
	return batch.Position{Topic: topic, Partition: partition, Offset: offset}
}

// commit writes one load of the given batches (table -> batch) and commits it.
func (h *harness) commit(s sinks.Sink, flow string, writes map[string]*batch.Batch, c sinks.Commit) (string, error) {
	h.t.Helper()
	id := h.loadID()
	ctx := context.Background()
	var targets []string
	for table := range writes {
		if table != batch.DeadLettersTable {
			targets = append(targets, table)
		}
	}
	slices.Sort(targets)
	ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: id, Pipeline: Pipeline, Flow: flow, Targets: targets, Generation: 3})
	if err != nil {
		h.t.Fatalf("Begin: %v", err)
	}
	tables := make([]string, 0, len(writes))
	for table := range writes {
		tables = append(tables, table)
	}
	slices.Sort(tables)
	for _, table := range tables {
		if err := ld.Write(ctx, table, writes[table]); err != nil {
			h.t.Fatalf("Write %s: %v", table, err)
		}
	}
	return id, ld.Commit(ctx, c)
}

func scan(t *testing.T, s sinks.Sink, table string) *batch.Batch {
	t.Helper()
	b, err := s.Scan(context.Background(), table)
	if err != nil {
		t.Fatalf("Scan %s: %v", table, err)
	}
	return b
}

// ids returns the sorted values of an int64 column and checks that the last
// column is _sluice_load_id.
func ids(t *testing.T, b *batch.Batch, col string) []int64 {
	t.Helper()
	if n := len(b.Schema.Columns); n == 0 || b.Schema.Columns[n-1].Name != batch.LoadIDColumn {
		t.Fatalf("scan columns %v: want %s last", b.Schema.Names(), batch.LoadIDColumn)
	}
	v := b.Column(col)
	if v == nil {
		t.Fatalf("scan has no column %s: %v", col, b.Schema.Names())
	}
	out := slices.Clone(v.Ints)
	slices.Sort(out)
	return out
}

func seq(from, to int) []int64 {
	out := make([]int64, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, int64(i))
	}
	return out
}

func ledger(t *testing.T, s sinks.Sink) *batch.Ledger {
	t.Helper()
	l, err := s.Ledger(context.Background())
	if err != nil {
		t.Fatalf("Ledger: %v", err)
	}
	return l
}

// recoverLedger runs Recover and returns the ledger after it.
func recoverLedger(t *testing.T, s sinks.Sink) *batch.Ledger {
	t.Helper()
	if err := s.Recover(context.Background()); err != nil {
		t.Fatalf("Recover: %v", err)
	}
	return ledger(t, s)
}

func testCommitOnce(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, ordersTable)
	recoverLedger(t, s)
	id, err := h.commit(s, "f", map[string]*batch.Batch{"orders": orders(0, 50)},
		sinks.Commit{From: batch.Positions{kafka("t", 0, -1)}, To: batch.Positions{kafka("t", 0, 50)}, Rows: 50})
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	check := func(s sinks.Sink, when string) {
		b := scan(t, s, "orders")
		if got := ids(t, b, "id"); !slices.Equal(got, seq(0, 50)) {
			t.Fatalf("%s: ids %v, want 0..49 once each", when, got)
		}
		for i, l := range b.Column(batch.LoadIDColumn).Strs {
			if l != id {
				t.Fatalf("%s: row %d has load id %q, want %q", when, i, l, id)
			}
		}
		for i := range b.Len() {
			row := b.Row(i)
			id := row[0].(int64)
			if want := fmt.Sprintf("order-%d", id); row[1] != want {
				t.Fatalf("%s: row %d name %v, want %s", when, id, row[1], want)
			}
			if id%3 == 0 && row[2] != nil {
				t.Fatalf("%s: row %d amount %v, want NULL", when, id, row[2])
			}
		}
	}
	check(s, "after commit")
	recoverLedger(t, s)
	check(s, "after Recover")
	s2 := h.sink()
	recoverLedger(t, s2)
	check(s2, "after reopening")
}

func testSeveralWrites(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, ordersTable)
	ctx := context.Background()
	ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: h.loadID(), Pipeline: Pipeline, Flow: "f", Targets: []string{"orders"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range [][2]int{{0, 10}, {10, 10}, {10, 35}, {35, 36}} {
		if err := ld.Write(ctx, "orders", orders(r[0], r[1])); err != nil {
			t.Fatalf("Write %v: %v", r, err)
		}
	}
	if err := ld.Commit(ctx, sinks.Commit{To: batch.Positions{kafka("t", 0, 36)}, Rows: 36}); err != nil {
		t.Fatal(err)
	}
	if got := ids(t, scan(t, s, "orders"), "id"); !slices.Equal(got, seq(0, 36)) {
		t.Fatalf("ids %v, want 0..35", got)
	}
	if err := ld.Write(ctx, "orders", orders(40, 41)); err == nil {
		t.Fatal("Write after Commit succeeded")
	}
}

func testAbort(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, ordersTable)
	ctx := context.Background()
	ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: h.loadID(), Pipeline: Pipeline, Flow: "f", Targets: []string{"orders"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ld.Write(ctx, "orders", orders(0, 10)); err != nil {
		t.Fatal(err)
	}
	if err := ld.Abort(ctx); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	if err := ld.Commit(ctx, sinks.Commit{To: batch.Positions{kafka("t", 0, 10)}}); err == nil {
		t.Fatal("Commit after Abort succeeded")
	}
	if n := scan(t, s, "orders").Len(); n != 0 {
		t.Fatalf("orders has %d rows after an aborted load", n)
	}
	if n := len(ledger(t, s).Loads); n != 0 {
		t.Fatalf("ledger has %d loads after an aborted load", n)
	}
	// The partition has no position: a load starting from none commits.
	if _, err := h.commit(s, "f", map[string]*batch.Batch{"orders": orders(0, 5)},
		sinks.Commit{From: batch.Positions{kafka("t", 0, -1)}, To: batch.Positions{kafka("t", 0, 5)}}); err != nil {
		t.Fatalf("commit after abort: %v", err)
	}
	if got := ids(t, scan(t, s, "orders"), "id"); !slices.Equal(got, seq(0, 5)) {
		t.Fatalf("ids %v, want 0..4", got)
	}
}

func testUncommitted(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, ordersTable)
	ctx := context.Background()
	ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: h.loadID(), Pipeline: Pipeline, Flow: "f", Targets: []string{"orders"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ld.Write(ctx, "orders", orders(0, 10)); err != nil {
		t.Fatal(err)
	}
	// The writer goes away without Commit or Abort; a new process recovers.
	s2 := h.sink()
	if l := recoverLedger(t, s2); len(l.Loads) != 0 {
		t.Fatalf("Recover returned %d loads, want none", len(l.Loads))
	}
	if n := scan(t, s2, "orders").Len(); n != 0 {
		t.Fatalf("orders has %d rows after an uncommitted load", n)
	}
	if _, err := h.commit(s2, "f", map[string]*batch.Batch{"orders": orders(100, 103)},
		sinks.Commit{From: batch.Positions{kafka("t", 0, -1)}, To: batch.Positions{kafka("t", 0, 3)}}); err != nil {
		t.Fatalf("commit after recovery: %v", err)
	}
	if got := ids(t, scan(t, s2, "orders"), "id"); !slices.Equal(got, seq(100, 103)) {
		t.Fatalf("ids %v, want 100..102", got)
	}
}

func testStale(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, ordersTable)
	ok := func(from, to int64, rows [2]int) {
		t.Helper()
		if _, err := h.commit(s, "f", map[string]*batch.Batch{"orders": orders(rows[0], rows[1])},
			sinks.Commit{From: batch.Positions{kafka("t", 0, from)}, To: batch.Positions{kafka("t", 0, to)}}); err != nil {
			t.Fatalf("commit from %d: %v", from, err)
		}
	}
	ok(-1, 10, [2]int{0, 10})
	tests := []struct {
		name string
		flow string
		from batch.Positions
	}{
		{"no position but the ledger has one", "f", batch.Positions{kafka("t", 0, -1)}},
		{"behind the ledger", "f", batch.Positions{kafka("t", 0, 5)}},
		{"ahead of the ledger", "f", batch.Positions{kafka("t", 0, 11)}},
		{"one stale partition among good ones", "f", batch.Positions{kafka("t", 1, -1), kafka("t", 0, 3)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.commit(s, tc.flow, map[string]*batch.Batch{"orders": orders(1000, 1010)},
				sinks.Commit{From: tc.from, To: batch.Positions{kafka("t", 0, 20)}})
			if !errors.Is(err, sinks.ErrStale) {
				t.Fatalf("commit from %v: %v, want ErrStale", tc.from, err)
			}
		})
	}
	// Another flow has its own positions; the partition is new to it.
	if _, err := h.commit(s, "g", map[string]*batch.Batch{"orders": orders(2000, 2002)},
		sinks.Commit{From: batch.Positions{kafka("t", 0, -1)}, To: batch.Positions{kafka("t", 0, 2)}}); err != nil {
		t.Fatalf("commit of another flow: %v", err)
	}
	ok(10, 15, [2]int{10, 15})
	want := append(seq(0, 15), 2000, 2001)
	if got := ids(t, scan(t, s, "orders"), "id"); !slices.Equal(got, want) {
		t.Fatalf("ids %v, want %v: refused loads must leave nothing", got, want)
	}
	l := ledger(t, s)
	if len(l.Loads) != 3 {
		t.Fatalf("ledger has %d loads, want 3", len(l.Loads))
	}
	if got := sinks.LedgerHeads(l, "f").Kafka(); got[batch.TopicPartition{Topic: "t", Partition: 0}] != 15 {
		t.Fatalf("positions of f %v, want t/0 at 15", got)
	}
}

func testReplay(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, ordersTable)
	c := sinks.Commit{From: batch.Positions{kafka("t", 2, 100)}, To: batch.Positions{kafka("t", 2, 110)}, Rows: 10}
	if _, err := h.commit(s, "f", map[string]*batch.Batch{"orders": orders(0, 10)},
		sinks.Commit{From: batch.Positions{kafka("t", 2, -1)}, To: batch.Positions{kafka("t", 2, 100)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.commit(s, "f", map[string]*batch.Batch{"orders": orders(10, 20)}, c); err != nil {
		t.Fatal(err)
	}
	// The same batch again, as after a restart that re-read it: refused, in
	// this process and in a new one.
	for i, s := range []sinks.Sink{s, h.sink()} {
		if _, err := h.commit(s, "f", map[string]*batch.Batch{"orders": orders(10, 20)}, c); !errors.Is(err, sinks.ErrStale) {
			t.Fatalf("replay %d: %v, want ErrStale", i, err)
		}
	}
	if got := ids(t, scan(t, s, "orders"), "id"); !slices.Equal(got, seq(0, 20)) {
		t.Fatalf("ids %v, want 0..19 once each", got)
	}
}

// testStaleFile: a file is a slot like a Kafka partition. Two loads that
// both continue a file from the same row commit once; so does a load
// reading a file from its start again after a committed chunk, or one
// re-reading a file that was read to its end.
func testStaleFile(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, ordersTable)
	file := func(row int64, done bool) batch.Position {
		return batch.Position{File: "a.parquet", RowGroup: row, Done: done}
	}
	commitFile := func(s sinks.Sink, from, to batch.Position, rows [2]int) error {
		t.Helper()
		_, err := h.commit(s, "f", map[string]*batch.Batch{"orders": orders(rows[0], rows[1])},
			sinks.Commit{From: batch.Positions{from}, To: batch.Positions{to}, Rows: int64(rows[1] - rows[0])})
		return err
	}
	if err := commitFile(s, file(0, false), file(3, false), [2]int{0, 3}); err != nil {
		t.Fatalf("first chunk: %v", err)
	}
	tests := []struct {
		name string
		from batch.Position
	}{
		{"the first chunk again", file(0, false)},
		{"behind the ledger", file(1, false)},
		{"ahead of the ledger", file(5, false)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for i, s := range []sinks.Sink{s, h.sink()} {
				if err := commitFile(s, tc.from, file(6, true), [2]int{1000, 1003}); !errors.Is(err, sinks.ErrStale) {
					t.Fatalf("sink %d: commit from %v: %v, want ErrStale", i, tc.from, err)
				}
			}
		})
	}
	if err := commitFile(s, file(3, false), file(6, true), [2]int{3, 6}); err != nil {
		t.Fatalf("second chunk: %v", err)
	}
	if err := commitFile(s, file(3, false), file(6, true), [2]int{2000, 2003}); !errors.Is(err, sinks.ErrStale) {
		t.Fatalf("second chunk again: %v, want ErrStale", err)
	}
	if err := commitFile(h.sink(), file(6, true), file(6, true), [2]int{3000, 3001}); err != nil {
		t.Fatalf("a load continuing a file read to its end: %v", err)
	}
	// Another file of the flow is a slot of its own.
	if _, err := h.commit(s, "f", map[string]*batch.Batch{"orders": orders(10, 12)}, sinks.Commit{
		From: batch.Positions{{File: "b.parquet"}}, To: batch.Positions{{File: "b.parquet", RowGroup: 2, Done: true}}, Rows: 2,
	}); err != nil {
		t.Fatalf("another file: %v", err)
	}
	want := append(append(seq(0, 6), 10, 11), 3000)
	if got := ids(t, scan(t, s, "orders"), "id"); !slices.Equal(got, want) {
		t.Fatalf("ids %v, want %v: each chunk of a file once", got, want)
	}
	heads := sinks.LedgerHeads(ledger(t, s), "f").Files()
	if heads["a.parquet"] != file(6, true) || !heads["b.parquet"].Done {
		t.Errorf("file heads %v, want a.parquet done at row 6 and b.parquet done", heads)
	}
}

// testHeadsAndTotals: Heads and Totals say what the whole ledger says, for
// Kafka partitions and files, of the slots named or of all of them, in this
// sink and in a new one; a reset of a flow forgets its heads and totals.
func testHeadsAndTotals(t *testing.T, h *harness) {
	ctx := context.Background()
	s := h.sink()
	ensure(t, s, ordersTable)
	file := func(name string, row int64, done bool) batch.Position {
		return batch.Position{File: name, RowGroup: row, Done: done}
	}
	loads := []struct {
		flow     string
		from, to batch.Positions
		rows     [2]int
		dls      int64
	}{
		{"f", batch.Positions{kafka("t", 0, -1), kafka("t", 1, -1)}, batch.Positions{kafka("t", 0, 10), kafka("t", 1, 4)}, [2]int{0, 5}, 1},
		{"f", batch.Positions{kafka("t", 0, 10)}, batch.Positions{kafka("t", 0, 25)}, [2]int{5, 8}, 0},
		{"f", batch.Positions{kafka("t", 1, 4)}, batch.Positions{kafka("t", 1, 9)}, [2]int{8, 9}, 2},
		{"g", batch.Positions{file("a", 0, false)}, batch.Positions{file("a", 3, false)}, [2]int{9, 12}, 0},
		{"g", batch.Positions{file("a", 3, false)}, batch.Positions{file("a", 5, true)}, [2]int{12, 14}, 0},
		{"g", batch.Positions{file("b", 0, false)}, batch.Positions{file("b", 1, false)}, [2]int{14, 15}, 1},
	}
	for i, ld := range loads {
		if _, err := h.commit(s, ld.flow, map[string]*batch.Batch{"orders": orders(ld.rows[0], ld.rows[1])},
			sinks.Commit{From: ld.from, To: ld.to, Rows: int64(ld.rows[1] - ld.rows[0]), DeadLetters: ld.dls}); err != nil {
			t.Fatalf("load %d: %v", i, err)
		}
	}
	check := func(what string, s sinks.Sink, flows map[string]sinks.FlowTotals) {
		t.Helper()
		led := ledger(t, s)
		for _, flow := range []string{"f", "g", "none"} {
			want := sinks.LedgerHeads(led, flow)
			got, err := s.Heads(ctx, Pipeline, flow, nil)
			if err != nil {
				t.Fatalf("%s: Heads of %s: %v", what, flow, err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s: Heads of %s = %v, want %v", what, flow, got, want)
			}
			// A flow with no slot to ask about (a files flow with no file).
			if none, err := s.Heads(ctx, Pipeline, flow, []string{}); err != nil || len(none) != 0 {
				t.Errorf("%s: Heads of %s of no slot = %v, %v; want none", what, flow, none, err)
			}
			for slot, p := range want {
				one, err := s.Heads(ctx, Pipeline, flow, []string{slot, "k/absent/0"})
				if err != nil {
					t.Fatalf("%s: Heads of %s %s: %v", what, flow, slot, err)
				}
				if len(one) != 1 || one[slot] != p {
					t.Errorf("%s: Heads of %s %s = %v, want %v", what, flow, slot, one, p)
				}
			}
		}
		tot, err := s.Totals(ctx, Pipeline)
		if err != nil {
			t.Fatalf("%s: Totals: %v", what, err)
		}
		for flow, w := range flows {
			g := tot[flow]
			var last time.Time
			for _, ld := range led.Loads {
				if ld.Flow == flow && ld.CommittedAt.After(last) {
					last = ld.CommittedAt
				}
			}
			if g.Loads != w.Loads || g.Rows != w.Rows || g.DeadLetters != w.DeadLetters || !g.LastAt.Equal(last) {
				t.Errorf("%s: Totals of %s = %+v, want %+v last at %v", what, flow, g, w, last)
			}
		}
		if len(tot) != len(flows) {
			t.Errorf("%s: Totals of %d flows, want %d: %v", what, len(tot), len(flows), tot)
		}
	}
	all := map[string]sinks.FlowTotals{"f": {Loads: 3, Rows: 9, DeadLetters: 3}, "g": {Loads: 3, Rows: 6, DeadLetters: 1}}
	check("after the loads", s, all)
	check("in a new sink", h.sink(), all)
	if r, ok := s.(sinks.Resetter); ok {
		if err := r.Reset(ctx, []string{"orders"}, []string{"g"}); err != nil {
			t.Fatal(err)
		}
		check("after a reset of g", s, map[string]sinks.FlowTotals{"f": all["f"]})
	}
}

// testPublishRetried: a commit whose publishing failed after the commit
// point is committed. Loading the same batch again, as a runner retrying
// the error does (a new load id, the same positions), is refused as stale,
// in this sink and in a new one, whether the slot is a Kafka partition or a
// file; the table ends with every row once, and the next load continues
// from where the failed one reached.
func testPublishRetried(t *testing.T, h *harness, c config, file bool) {
	if c.publishFault == nil {
		t.Fatal("the suite needs a PublishFault option to fail a publication")
	}
	pos := func(n int64) batch.Position {
		if file {
			return batch.Position{File: "a.parquet", RowGroup: n, Done: n >= 30}
		}
		return kafka("t", 0, n)
	}
	start := pos(0)
	if !file {
		start = kafka("t", 0, -1)
	}
	s := h.sink()
	ensure(t, s, ordersTable)
	load := func(s sinks.Sink, from, to batch.Position, rows [2]int) error {
		t.Helper()
		_, err := h.commit(s, "f", map[string]*batch.Batch{"orders": orders(rows[0], rows[1])},
			sinks.Commit{From: batch.Positions{from}, To: batch.Positions{to}, Rows: int64(rows[1] - rows[0])})
		return err
	}
	if err := load(s, start, pos(10), [2]int{0, 10}); err != nil {
		t.Fatalf("first load: %v", err)
	}
	c.publishFault(t, s)
	err := load(s, pos(10), pos(20), [2]int{10, 20})
	if err == nil || errors.Is(err, sinks.ErrStale) {
		t.Fatalf("commit with a failing publication: %v, want a publishing error", err)
	}
	if rc, ok := s.(sinks.Classifier); ok && !rc.Retryable(err) {
		t.Fatalf("publishing error %v is not retryable", err)
	}
	unpublished := func(s sinks.Sink) int {
		t.Helper()
		st, ok := s.(sinks.Settler)
		if !ok {
			t.Fatal("the sink does not tell its unpublished loads (sinks.Settler)")
		}
		n, err := st.Unpublished(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := unpublished(h.sink()); n != 1 {
		t.Errorf("%d unpublished loads after a publication failed past the commit point, want 1", n)
	}
	for i, s := range []sinks.Sink{s, h.sink()} {
		if err := load(s, pos(10), pos(20), [2]int{10, 20}); !errors.Is(err, sinks.ErrStale) {
			t.Fatalf("retry %d of the committed load: %v, want ErrStale", i, err)
		}
	}
	if err := load(s, pos(20), pos(30), [2]int{20, 30}); err != nil {
		t.Fatalf("the load after: %v", err)
	}
	s2 := h.sink()
	recoverLedger(t, s2)
	if n := unpublished(s2); n != 0 {
		t.Errorf("%d unpublished loads after recovery, want 0", n)
	}
	for i, s := range []sinks.Sink{s, s2} {
		if got := ids(t, scan(t, s, "orders"), "id"); !slices.Equal(got, seq(0, 30)) {
			t.Fatalf("sink %d: ids %v, want 0..29 once each", i, got)
		}
	}
	if !sinks.LedgerHeads(ledger(t, s2), "f").Reached(batch.Positions{pos(30)}) {
		t.Errorf("heads %v, want the slot at %v", sinks.LedgerHeads(ledger(t, s2), "f"), pos(30))
	}
}

func sortPositions(p batch.Positions) batch.Positions {
	out := slices.Clone(p)
	slices.SortFunc(out, func(a, b batch.Position) int {
		return cmp.Or(cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.File, b.File), cmp.Compare(a.Partition, b.Partition))
	})
	return out
}

func testPositions(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, ordersTable)
	before := time.Now().Add(-time.Second)
	first := batch.Positions{kafka("orders", 0, 100), kafka("orders", 1, 50), kafka("other", 0, 7)}
	files := batch.Positions{{File: "history/2024.parquet", RowGroup: 3}, {File: "history/2023.parquet", Done: true}}
	id1, err := h.commit(s, "f", map[string]*batch.Batch{"orders": orders(0, 3)}, sinks.Commit{
		From: batch.Positions{kafka("orders", 0, -1), kafka("orders", 1, -1), kafka("other", 0, -1)},
		To:   first, Rows: 3, DeadLetters: 0,
	})
	if err != nil {
		t.Fatal(err)
	}
	id2, err := h.commit(s, "f", map[string]*batch.Batch{"orders": orders(3, 5)}, sinks.Commit{
		From: batch.Positions{kafka("orders", 0, 100)},
		To:   batch.Positions{kafka("orders", 0, 150)}, Rows: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	id3, err := h.commit(s, "backfill", map[string]*batch.Batch{"orders": orders(5, 6)}, sinks.Commit{To: files, Rows: 1})
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now().Add(time.Second)
	want := []batch.LoadRecord{
		{LoadID: id1, Pipeline: Pipeline, Flow: "f", Targets: []string{"orders"}, Positions: first, Rows: 3, Generation: 3},
		{LoadID: id2, Pipeline: Pipeline, Flow: "f", Targets: []string{"orders"}, Positions: batch.Positions{kafka("orders", 0, 150)}, Rows: 2, Generation: 3},
		{LoadID: id3, Pipeline: Pipeline, Flow: "backfill", Targets: []string{"orders"}, Positions: files, Rows: 1, Generation: 3},
	}
	check := func(what string, l *batch.Ledger) {
		t.Helper()
		if len(l.Loads) != len(want) {
			t.Fatalf("%s: %d loads, want %d", what, len(l.Loads), len(want))
		}
		for i, got := range l.Loads {
			w := want[i]
			if got.CommittedAt.Before(before) || got.CommittedAt.After(after) {
				t.Errorf("%s: load %d committed at %v, not between %v and %v", what, i, got.CommittedAt, before, after)
			}
			got.CommittedAt = time.Time{}
			got.Positions, w.Positions = sortPositions(got.Positions), sortPositions(w.Positions)
			if fmt.Sprint(got) != fmt.Sprint(w) {
				t.Errorf("%s: load %d\n got %+v\nwant %+v", what, i, got, w)
			}
		}
		kp := sinks.LedgerHeads(l, "f").Kafka()
		wantKP := map[batch.TopicPartition]int64{{Topic: "orders", Partition: 0}: 150,
			{Topic: "orders", Partition: 1}: 50, {Topic: "other", Partition: 0}: 7}
		if fmt.Sprint(kp) != fmt.Sprint(wantKP) {
			t.Errorf("%s: KafkaPositions %v, want %v", what, kp, wantKP)
		}
		if g := l.Generation("f", batch.TopicPartition{Topic: "orders", Partition: 1}); g != 3 {
			t.Errorf("%s: generation %d, want 3", what, g)
		}
	}
	check("Ledger", ledger(t, s))
	check("Recover", recoverLedger(t, s))
	s2 := h.sink()
	check("Ledger of a new sink", ledger(t, s2))
	check("Recover of a new sink", recoverLedger(t, s2))
}

func testLoadsTable(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, ordersTable)
	id, err := h.commit(s, "f", map[string]*batch.Batch{"orders": orders(0, 4)},
		sinks.Commit{To: batch.Positions{kafka("t", 0, 4)}, Rows: 4, DeadLetters: 1})
	if err != nil {
		t.Fatal(err)
	}
	b := scan(t, s, batch.LoadsTable)
	if !b.Schema.Equal(batch.LoadsSchema) {
		t.Fatalf("_sluice_loads columns %v, want %v", b.Schema.Names(), batch.LoadsSchema.Names())
	}
	if b.Len() != 1 {
		t.Fatalf("_sluice_loads has %d rows, want 1", b.Len())
	}
	row := b.Row(0)
	want := []any{id, Pipeline, "f", "orders", batch.Positions{kafka("t", 0, 4)}.Encode(), int64(4), int64(1), int64(3)}
	for i, w := range want {
		if row[i] != w {
			t.Errorf("_sluice_loads column %s = %v, want %v", b.Schema.Columns[i].Name, row[i], w)
		}
	}
	if at, ok := row[8].(time.Time); !ok || time.Since(at) > time.Minute || time.Since(at) < -time.Minute {
		t.Errorf("committed_at %v, want about now", row[8])
	}
}

func testDeadLetters(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, ordersTable)
	at := time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)
	dls := []batch.DeadLetter{
		{Pipeline: Pipeline, Flow: "f", Target: "orders", Source: "t", Position: "0/7", Reason: batch.ReasonUndecodable,
			Error: "message is not JSON", Payload: []byte("{oops"), At: at},
		{Pipeline: Pipeline, Flow: "f", Target: "orders", Source: "t", Position: "0/9", Reason: batch.ReasonMissingField,
			Error: "field id is missing", Payload: nil, At: at},
	}
	id, err := h.commit(s, "f", map[string]*batch.Batch{"orders": orders(0, 8), batch.DeadLettersTable: batch.DeadLetterBatch(dls)},
		sinks.Commit{To: batch.Positions{kafka("t", 0, 10)}, Rows: 8, DeadLetters: 2})
	if err != nil {
		t.Fatal(err)
	}
	b := scan(t, s, batch.DeadLettersTable)
	wantCols := append(batch.DeadLetterSchema.Names(), batch.LoadIDColumn)
	if !slices.Equal(b.Schema.Names(), wantCols) {
		t.Fatalf("dead letter columns %v, want %v", b.Schema.Names(), wantCols)
	}
	if b.Len() != 2 {
		t.Fatalf("%d dead letters, want 2", b.Len())
	}
	rows := []([]any){b.Row(0), b.Row(1)}
	slices.SortFunc(rows, func(x, y []any) int { return cmp.Compare(x[4].(string), y[4].(string)) })
	for i, d := range dls {
		r := rows[i]
		got := fmt.Sprint(r[:7], r[8], r[9])
		want := fmt.Sprint([]any{d.Pipeline, d.Flow, d.Target, d.Source, d.Position, d.Reason, d.Error}, d.At, id)
		if got != want {
			t.Errorf("dead letter %d: got %s, want %s", i, got, want)
		}
		switch p := r[7].(type) {
		case nil:
			if d.Payload != nil {
				t.Errorf("dead letter %d: payload NULL, want %q", i, d.Payload)
			}
		case []byte:
			if d.Payload == nil || !bytes.Equal(p, d.Payload) {
				t.Errorf("dead letter %d: payload %q, want %q", i, p, d.Payload)
			}
		default:
			t.Errorf("dead letter %d: payload %T", i, p)
		}
	}
	for _, l := range scan(t, s, "orders").Column(batch.LoadIDColumn).Strs {
		if l != id {
			t.Fatalf("orders row has load id %s, want %s (the dead letters' load)", l, id)
		}
	}
	if l := ledger(t, s); len(l.Loads) != 1 || l.Loads[0].DeadLetters != 2 {
		t.Fatalf("ledger %+v, want one load with 2 dead letters", l.Loads)
	}
}

// typesSchema has every column type, nullable and not.
var typesSchema = func() batch.Schema {
	var s batch.Schema
	s.Columns = append(s.Columns, batch.Column{Name: "id", Type: batch.Int64})
	for _, c := range []struct {
		name string
		t    batch.Type
	}{
		{"s", batch.String}, {"i", batch.Int64}, {"f", batch.Float64}, {"b", batch.Bool},
		{"ts", batch.Timestamp}, {"d", batch.Date}, {"dec9", batch.Decimal(9, 4)},
		{"dec12", batch.Decimal(12, 2)}, {"dec18", batch.Decimal(18, 0)}, {"dec38", batch.Decimal(38, 2)},
		{"dec38s", batch.Decimal(38, 38)}, {"by", batch.Bytes},
	} {
		s.Columns = append(s.Columns, batch.Column{Name: c.name, Type: c.t},
			batch.Column{Name: c.name + "_n", Type: c.t, Nullable: true})
	}
	return s
}()

func maxDec(p int) batch.Dec128 {
	v := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(p)), nil)
	return batch.Dec128FromBig(v.Sub(v, big.NewInt(1)))
}

func negDec(d batch.Dec128) batch.Dec128 { return batch.Dec128FromBig(new(big.Int).Neg(d.Big())) }

func typesRows(c config) *batch.Batch {
	b := batch.New(typesSchema, 8)
	ts := func(t time.Time) int64 { return c.clamp(t).Truncate(c.tsPrecision).UnixMicro() }
	day := func(t time.Time) int64 { return int64(batch.DateFromTime(c.clamp(t))) }
	type row struct {
		s    string
		i    int64
		f    float64
		b    bool
		ts   int64
		d    int64
		decs [5]batch.Dec128 // dec9, dec12, dec18, dec38, dec38s
		by   []byte
	}
	rows := []row{
		{"plain", 42, 1.5, true, ts(time.Date(2024, 2, 29, 13, 14, 15, 123456000, time.UTC)), day(time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC)),
			[5]batch.Dec128{batch.Dec128FromInt64(12345678), batch.Dec128FromInt64(-1999), batch.Dec128FromInt64(7),
				batch.Dec128FromInt64(123456789012345), batch.Dec128FromInt64(1)}, []byte("bytes")},
		{"", math.MinInt64, -math.MaxFloat64, false, ts(time.Date(1969, 12, 31, 23, 59, 59, 999999000, time.UTC)),
			day(time.Date(1969, 12, 31, 0, 0, 0, 0, time.UTC)),
			[5]batch.Dec128{negDec(maxDec(9)), negDec(maxDec(12)), negDec(maxDec(18)), negDec(maxDec(38)), negDec(maxDec(38))}, []byte{}},
		{"héllo ✓ \x00 tab\t", math.MaxInt64, math.MaxFloat64, true, ts(time.Date(2262, 4, 11, 23, 47, 16, 854775000, time.UTC)),
			day(time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)),
			[5]batch.Dec128{maxDec(9), maxDec(12), maxDec(18), maxDec(38), maxDec(38)}, []byte{0, 1, 2, 0xff}},
		{"1900", -1, math.SmallestNonzeroFloat64, false, ts(time.Date(1900, 1, 1, 0, 0, 0, 1000, time.UTC)),
			day(time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)),
			[5]batch.Dec128{batch.Dec128FromInt64(-1), batch.Dec128FromInt64(-1), batch.Dec128FromInt64(-1),
				batch.Dec128FromInt64(-1), batch.Dec128FromInt64(-1)}, []byte("x")},
		{"inf", 0, math.Inf(1), true, ts(time.Unix(0, 0)), day(time.Unix(0, 0)),
			[5]batch.Dec128{{}, {}, {}, {}, {}}, []byte("\x00")},
		{"-inf", 1, math.Inf(-1), true, ts(time.Unix(1, 0)), day(time.Unix(86400, 0)),
			[5]batch.Dec128{batch.Dec128FromInt64(1), batch.Dec128FromInt64(math.MaxInt64 / 10_000_000), batch.Dec128FromInt64(math.MinInt64 / 10),
				batch.Dec128FromBig(new(big.Int).Lsh(big.NewInt(1), 100)), batch.Dec128FromBig(new(big.Int).Lsh(big.NewInt(-1), 120))},
			bytes.Repeat([]byte("long"), 1000)},
		{"nan", 2, math.NaN(), false, ts(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)), day(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)),
			[5]batch.Dec128{{}, {}, {}, {}, {}}, []byte("nan")},
	}
	for r, x := range rows {
		b.Vectors[0].AppendInt(int64(r))
		for pair := range 2 {
			// Column pairs: value, then nullable (NULL on even rows, the
			// value on odd ones).
			null := pair == 1 && r%2 == 0
			add := func(col int, f func(v *batch.Vector)) {
				v := b.Vectors[1+2*col+pair]
				if null {
					v.AppendNull()
				} else {
					f(v)
				}
			}
			add(0, func(v *batch.Vector) { v.AppendString(x.s) })
			add(1, func(v *batch.Vector) { v.AppendInt(x.i) })
			add(2, func(v *batch.Vector) { v.AppendFloat(x.f) })
			add(3, func(v *batch.Vector) { v.AppendBool(x.b) })
			add(4, func(v *batch.Vector) { v.AppendInt(x.ts) })
			add(5, func(v *batch.Vector) { v.AppendInt(x.d) })
			for k := range 5 {
				add(6+k, func(v *batch.Vector) { v.AppendDecimal(x.decs[k]) })
			}
			add(11, func(v *batch.Vector) { v.AppendBytes(x.by) })
		}
	}
	return b
}

// sameValue compares row i of two vectors of one type exactly (floats by
// their bits, any NaN equal to any NaN).
func sameValue(a *batch.Vector, i int, b *batch.Vector, j int) bool {
	if a.IsNull(i) || b.IsNull(j) {
		return a.IsNull(i) == b.IsNull(j)
	}
	switch a.Type.Kind {
	case batch.KindInt64, batch.KindTimestamp, batch.KindDate:
		return a.Ints[i] == b.Ints[j]
	case batch.KindFloat64:
		x, y := a.Floats[i], b.Floats[j]
		return math.Float64bits(x) == math.Float64bits(y) || (math.IsNaN(x) && math.IsNaN(y))
	case batch.KindBool:
		return a.Bools[i] == b.Bools[j]
	case batch.KindString:
		return a.Strs[i] == b.Strs[j]
	case batch.KindBytes:
		return bytes.Equal(a.Bytes[i], b.Bytes[j])
	case batch.KindDecimal:
		return a.Decs[i] == b.Decs[j]
	case batch.KindArray:
		alo, ahi := a.Array(i)
		blo, bhi := b.Array(j)
		if ahi-alo != bhi-blo {
			return false
		}
		for k := range ahi - alo {
			if !sameValue(a.Elems, alo+k, b.Elems, blo+k) {
				return false
			}
		}
		return true
	}
	return false
}

// arraysSchema has an array column of every scalar type of typesSchema.
var arraysSchema = func() batch.Schema {
	s := batch.Schema{Columns: []batch.Column{{Name: "id", Type: batch.Int64}}}
	for _, c := range typesSchema.Columns[1:] {
		if !c.Nullable {
			s.Columns = append(s.Columns, batch.Column{Name: "a_" + c.Name, Type: batch.ArrayOf(c.Type)})
		}
	}
	return s
}()

// arraysRows are rows of arraysSchema: row r's arrays hold the values of
// rows 0..r-1 of typesRows (row 0's are empty), and a last row holds
// 10,000 elements, more than a page of values.
func arraysRows(c config) *batch.Batch {
	types := typesRows(c)
	b := batch.New(arraysSchema, types.Len()+2)
	for r := range types.Len() + 1 {
		b.Vectors[0].AppendInt(int64(r))
		for k := 1; k < len(arraysSchema.Columns); k++ {
			v, src := b.Vectors[k], types.Vectors[2*k-1]
			for i := range r {
				v.Elems.AppendFrom(src, i)
			}
			v.EndArray()
		}
	}
	b.Vectors[0].AppendInt(int64(types.Len() + 1))
	for k := 1; k < len(arraysSchema.Columns); k++ {
		v, src := b.Vectors[k], types.Vectors[2*k-1]
		for i := range 10_000 {
			v.Elems.AppendFrom(src, i%src.Len())
		}
		v.EndArray()
	}
	return b
}

func testArrays(t *testing.T, h *harness, c config) {
	s := h.sink()
	ensure(t, s, sinks.Table{Name: "arrays", Schema: arraysSchema})
	want := arraysRows(c)
	if _, err := h.commit(s, "f", map[string]*batch.Batch{"arrays": want},
		sinks.Commit{To: batch.Positions{kafka("t", 0, 1)}, Rows: int64(want.Len())}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []sinks.Sink{s, h.sink()} {
		sameTable(t, scan(t, s, "arrays"), want)
	}
}

func testTypes(t *testing.T, h *harness, c config) {
	s := h.sink()
	ensure(t, s, sinks.Table{Name: "types", Schema: typesSchema})
	want := typesRows(c)
	if _, err := h.commit(s, "f", map[string]*batch.Batch{"types": want},
		sinks.Commit{To: batch.Positions{kafka("t", 0, 1)}, Rows: int64(want.Len())}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []sinks.Sink{s, h.sink()} {
		got := scan(t, s, "types")
		wantCols := append(typesSchema.Names(), batch.LoadIDColumn)
		if !slices.Equal(got.Schema.Names(), wantCols) {
			t.Fatalf("columns %v, want %v", got.Schema.Names(), wantCols)
		}
		sameTable(t, got, want)
	}
}

// sameTable checks that a table scanned back holds the columns and rows of
// want, whose first column is the row's number.
func sameTable(t *testing.T, got, want *batch.Batch) {
	t.Helper()
	for i, col := range want.Schema.Columns {
		if got.Schema.Columns[i] != col {
			t.Errorf("column %d is %+v, want %+v", i, got.Schema.Columns[i], col)
		}
	}
	if got.Len() != want.Len() {
		t.Fatalf("%d rows, want %d", got.Len(), want.Len())
	}
	at := map[int64]int{}
	for r, id := range got.Vectors[0].Ints {
		at[id] = r
	}
	for r := range want.Len() {
		g, ok := at[int64(r)]
		if !ok {
			t.Fatalf("row %d missing", r)
		}
		for ci, col := range want.Schema.Columns {
			if !sameValue(want.Vectors[ci], r, got.Vectors[ci], g) {
				t.Errorf("row %d column %s (%v): got %.200v, want %.200v", r, col.Name, col.Type,
					got.Vectors[ci].Value(g), want.Vectors[ci].Value(r))
			}
		}
	}
}

func testEnsureAdd(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, ordersTable)
	if _, err := h.commit(s, "f", map[string]*batch.Batch{"orders": orders(0, 5)},
		sinks.Commit{To: batch.Positions{kafka("t", 0, 5)}}); err != nil {
		t.Fatal(err)
	}
	wider := batch.Schema{Columns: append(slices.Clone(ordersSchema.Columns),
		batch.Column{Name: "note", Type: batch.String, Nullable: true})}
	s2 := h.sink()
	ensure(t, s2, sinks.Table{Name: "orders", Schema: wider})
	ensure(t, s2, sinks.Table{Name: "orders", Schema: wider}) // idempotent
	b := batch.New(wider, 2)
	old := orders(5, 7)
	for r := range 2 {
		for c := range 3 {
			b.Vectors[c].AppendFrom(old.Vectors[c], r)
		}
	}
	b.Vectors[3].AppendString("new")
	b.Vectors[3].AppendNull()
	if _, err := h.commit(s2, "f", map[string]*batch.Batch{"orders": b},
		sinks.Commit{From: batch.Positions{kafka("t", 0, 5)}, To: batch.Positions{kafka("t", 0, 7)}}); err != nil {
		t.Fatal(err)
	}
	got := scan(t, s2, "orders")
	wantCols := append(wider.Names(), batch.LoadIDColumn)
	if !slices.Equal(got.Schema.Names(), wantCols) {
		t.Fatalf("columns %v, want %v", got.Schema.Names(), wantCols)
	}
	if ids := ids(t, got, "id"); !slices.Equal(ids, seq(0, 7)) {
		t.Fatalf("ids %v, want 0..6", ids)
	}
	for r := range got.Len() {
		id, note := got.Vectors[0].Ints[r], got.Vectors[3].Value(r)
		if (id == 5 && note != "new") || (id != 5 && note != nil) {
			t.Errorf("row %d: note %v", id, note)
		}
	}
}

func testEnsureReject(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, ordersTable)
	cols := func(cs ...batch.Column) batch.Schema { return batch.Schema{Columns: cs} }
	id, name, amount := ordersSchema.Columns[0], ordersSchema.Columns[1], ordersSchema.Columns[2]
	tests := []struct {
		name   string
		schema batch.Schema
	}{
		{"type changed", cols(batch.Column{Name: "id", Type: batch.String}, name, amount)},
		{"decimal scale changed", cols(id, name, batch.Column{Name: "amount", Type: batch.Decimal(12, 3), Nullable: true})},
		{"column removed", cols(id, name)},
		{"not nullable column added", cols(id, name, amount, batch.Column{Name: "x", Type: batch.Int64})},
		{"nullability changed", cols(id, batch.Column{Name: "name", Type: batch.String, Nullable: true}, amount)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Ensure(context.Background(), []sinks.Table{{Name: "orders", Schema: tc.schema}})
			if err == nil {
				t.Fatalf("Ensure accepted %v over %v", describe(tc.schema), describe(ordersSchema))
			}
			if !errors.Is(err, sinks.ErrTableChanged) {
				t.Fatalf("Ensure refused %v with %v, not sinks.ErrTableChanged", describe(tc.schema), err)
			}
		})
	}
	// The table is unchanged and still takes its rows.
	if _, err := h.commit(s, "f", map[string]*batch.Batch{"orders": orders(0, 2)},
		sinks.Commit{To: batch.Positions{kafka("t", 0, 2)}}); err != nil {
		t.Fatal(err)
	}
	if got := scan(t, s, "orders").Schema.Names(); !slices.Equal(got, append(ordersSchema.Names(), batch.LoadIDColumn)) {
		t.Fatalf("columns %v after refused changes", got)
	}

	// A reset, then Drop: Ensure creates the table anew with the changed
	// definition, empty, and it takes rows of it.
	ctx := context.Background()
	changed := sinks.Table{Name: "orders", Schema: cols(batch.Column{Name: "id", Type: batch.String}, name, amount)}
	if err := s.(sinks.Resetter).Reset(ctx, []string{"orders"}, []string{"f"}); err != nil {
		t.Fatal(err)
	}
	if err := s.(sinks.Dropper).Drop(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	ensure(t, s, changed)
	if b := scan(t, s, "orders"); b.Len() != 0 || b.Schema.Columns[0].Type != batch.String {
		t.Fatalf("after Drop and Ensure: %d rows, columns %v; want none, id a string", b.Len(), describe(b.Schema))
	}
	b := batch.New(changed.Schema, 1)
	b.Vectors[0].AppendString("x")
	b.Vectors[1].AppendString("n")
	b.Vectors[2].AppendNull()
	if _, err := h.commit(s, "f", map[string]*batch.Batch{"orders": b}, sinks.Commit{To: batch.Positions{kafka("t", 0, 1)}}); err != nil {
		t.Fatal(err)
	}
	// A process opened afterwards (Recover) publishes nothing of the old
	// table into the new one.
	s2 := h.sink()
	if err := s2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if got := scan(t, s2, "orders"); got.Len() != 1 || got.Vectors[0].Strs[0] != "x" {
		t.Fatalf("after a restart: %d rows, want the one row of the new table", got.Len())
	}
}

func describe(s batch.Schema) string {
	out := ""
	for _, c := range s.Columns {
		out += fmt.Sprintf("%s %v %v; ", c.Name, c.Type, c.Nullable)
	}
	return out
}

func testUnknownTable(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, ordersTable)
	if _, err := s.Scan(context.Background(), "nope"); !errors.Is(err, sinks.ErrUnknownTable) {
		t.Fatalf("Scan of a missing table: %v, want ErrUnknownTable", err)
	}
	ctx := context.Background()
	ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: h.loadID(), Pipeline: Pipeline, Flow: "f", Targets: []string{"nope"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Abort(ctx)
	if err := ld.Write(ctx, "nope", orders(0, 1)); err == nil {
		t.Fatal("Write to a table Ensure did not create succeeded")
	}
	if err := ld.Write(ctx, "orders", batch.New(typesSchema, 0)); err == nil {
		t.Fatal("Write of a batch with other columns than the table's succeeded")
	}
	// Empty tables exist and scan empty.
	for _, table := range []string{"orders", batch.DeadLettersTable, batch.LoadsTable} {
		if n := scan(t, s, table).Len(); n != 0 {
			t.Errorf("%s has %d rows, want 0", table, n)
		}
	}
}

func testConcurrent(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, ordersTable)
	const writers, loads, rows = 4, 5, 20
	var wg sync.WaitGroup
	errs := make(chan error, writers*loads)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			from := int64(-1)
			for l := range loads {
				base := (w*loads + l) * rows
				to := int64((l + 1) * rows)
				_, err := h.commit(s, "f", map[string]*batch.Batch{"orders": orders(base, base+rows)},
					sinks.Commit{From: batch.Positions{kafka("t", int32(w), from)}, To: batch.Positions{kafka("t", int32(w), to)}})
				if err != nil {
					errs <- fmt.Errorf("writer %d load %d: %w", w, l, err)
					return
				}
				from = to
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := ids(t, scan(t, s, "orders"), "id"); !slices.Equal(got, seq(0, writers*loads*rows)) {
		t.Fatalf("%d ids, want each of 0..%d once", len(got), writers*loads*rows-1)
	}
	kp := sinks.LedgerHeads(ledger(t, s), "f").Kafka()
	for w := range writers {
		if got := kp[batch.TopicPartition{Topic: "t", Partition: int32(w)}]; got != loads*rows {
			t.Errorf("partition %d at %d, want %d", w, got, loads*rows)
		}
	}
}

func testHeartbeats(t *testing.T, h *harness) {
	s := h.sink()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	run := sinks.Heartbeat{Pipeline: Pipeline, ID: "run-1", Kind: "run", Host: "h1", PID: 11, BeatAt: now, Expires: now.Add(10 * time.Second)}
	upd := sinks.Heartbeat{Pipeline: Pipeline, ID: "update-1", Kind: "update", Host: "h2", PID: 12, BeatAt: now, Expires: now.Add(2 * time.Second)}
	other := sinks.Heartbeat{Pipeline: "other", ID: "run-9", Kind: "run", Host: "h3", PID: 13, BeatAt: now, Expires: now.Add(time.Hour)}
	for _, hb := range []sinks.Heartbeat{run, upd, other} {
		if err := s.Beat(ctx, hb); err != nil {
			t.Fatalf("Beat: %v", err)
		}
	}
	alive := func(s sinks.Sink, at time.Time) string {
		t.Helper()
		hbs, err := s.Heartbeats(ctx, Pipeline, at)
		if err != nil {
			t.Fatalf("Heartbeats: %v", err)
		}
		var ids []string
		for _, hb := range hbs {
			if hb.Pipeline != Pipeline {
				t.Errorf("heartbeat of pipeline %s returned for %s", hb.Pipeline, Pipeline)
			}
			if hb.ID == run.ID && (hb.Kind != run.Kind || hb.Host != run.Host || hb.PID != run.PID) {
				t.Errorf("heartbeat %+v, want %+v", hb, run)
			}
			ids = append(ids, hb.ID)
		}
		slices.Sort(ids)
		return fmt.Sprint(ids)
	}
	tests := []struct {
		name string
		at   time.Time
		want string
	}{
		{"both alive", now.Add(time.Second), "[run-1 update-1]"},
		{"update expired", now.Add(3 * time.Second), "[run-1]"},
		{"all expired", now.Add(11 * time.Second), "[]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := alive(s, tc.at); got != tc.want {
				t.Fatalf("alive at +%v: %s, want %s", tc.at.Sub(now), got, tc.want)
			}
		})
	}
	// Renewing moves the expiry; another process sees it.
	run.BeatAt, run.Expires = now.Add(5*time.Second), now.Add(20*time.Second)
	if err := s.Beat(ctx, run); err != nil {
		t.Fatal(err)
	}
	s2 := h.sink()
	if got := alive(s2, now.Add(15*time.Second)); got != "[run-1]" {
		t.Fatalf("after renewal: %s, want [run-1]", got)
	}
	if err := s2.EndBeat(ctx, Pipeline, run.ID); err != nil {
		t.Fatal(err)
	}
	if got := alive(s, now); got != "[update-1]" {
		t.Fatalf("after EndBeat: %s, want [update-1]", got)
	}
	if err := s.EndBeat(ctx, Pipeline, "never-beat"); err != nil {
		t.Fatalf("EndBeat of a missing heartbeat: %v", err)
	}
	if hbs, err := s.Heartbeats(ctx, "other", now); err != nil || len(hbs) != 1 || hbs[0].ID != other.ID {
		t.Fatalf("heartbeats of other: %v, %v", hbs, err)
	}
}
