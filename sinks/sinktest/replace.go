package sinktest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
)

// RunReplace runs the conformance suite of sinks.PartitionLoad (write:
// replace_partitions): listed partitions wholly replaced, others untouched
// or appended to, for date, string and int64 partition columns and two of
// them; the same replacement twice gives the same table; an aborted or
// unfinished replacement changes nothing; loads of tables that cannot be
// replaced so, or with a wrong list of partitions, are refused. It reads
// tables with Scan only. A crash after the commit point is left to each
// sink's own tests: the suite has no hook to stop a commit there. opts are
// Run's; the suite's values fit every destination's limits.
func RunReplace(t *testing.T, newDestination Factory, opts ...Option) {
	c := newConfig(opts)
	tests := []suiteCase{
		{"replace_one_partition_of_several", testReplaceOne},
		{"rows_move_between_listed_partitions", testReplaceMove},
		{"listed_partition_without_rows_ends_empty", testReplaceEmpty},
		{"unlisted_partitions_are_appended", testReplaceUnlisted},
		{"lists_of_several_calls_add_up", testReplaceCalls},
		{"string_partitions_escaped_null_and_empty", testReplaceStrings},
		{"int64_partitions", testReplaceInts},
		{"two_partition_columns", testReplaceTwoColumns},
		{"same_replacement_twice_same_table", testReplaceTwice},
		{"aborted_replacement_changes_nothing", testReplaceAbort},
		{"unfinished_replacement_changes_nothing", testReplaceUnfinished},
		{"refusals", testReplaceRefused},
	}
	if c.nullablePartitions {
		tests = append(tests, suiteCase{"null_partition", testReplaceNull})
	}
	runCases(t, newDestination, tests)
}

// Partition columns of the suite's tables.
var (
	dayCol     = batch.Column{Name: "day", Type: batch.Date}
	regionCol  = batch.Column{Name: "region", Type: batch.String}
	nregionCol = batch.Column{Name: "region", Type: batch.String, Nullable: true}
	shardCol   = batch.Column{Name: "shard", Type: batch.Int64}
)

// partitioned returns a table of columns id, the partition columns, gen
// (the generation that wrote the row), partitioned by those columns.
func partitioned(name string, parts ...batch.Column) sinks.Table {
	cols := []batch.Column{{Name: "id", Type: batch.Int64}}
	cols = append(cols, parts...)
	cols = append(cols, batch.Column{Name: "gen", Type: batch.Int64})
	by := make([]string, len(parts))
	for i, p := range parts {
		by[i] = p.Name
	}
	return sinks.Table{Name: name, Schema: batch.Schema{Columns: cols}, PartitionBy: by}
}

var (
	byDay        = partitioned("events_by_day", dayCol)
	byRegion     = partitioned("events_by_region", regionCol)
	byShard      = partitioned("events_by_shard", shardCol)
	byDayRegion  = partitioned("events_by_day_region", dayCol, regionCol)
	byNRegion    = partitioned("events_by_nregion", nregionCol)
	day1, day2   = batch.DateFromTime(time.Date(2024, 2, 28, 0, 0, 0, 0, time.UTC)), batch.DateFromTime(time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC))
	day3, day4   = batch.DateFromTime(time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)), batch.DateFromTime(time.Date(2024, 3, 2, 0, 0, 0, 0, time.UTC))
	escapedValue = "a/b=c%d:e"
)

// prow is one row of a partitioned table: its id, its partition values
// (batch.DateValue, string, int64, or nil for NULL) and its generation.
type prow struct {
	id   int64
	part []any
	gen  int64
}

// prows returns rows with ids from..to-1, all in one partition.
func prows(from, to int, gen int64, part ...any) []prow {
	out := make([]prow, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, prow{id: int64(i), part: part, gen: gen})
	}
	return out
}

func appendAny(v *batch.Vector, x any) {
	switch x := x.(type) {
	case nil:
		v.AppendNull()
	case batch.DateValue:
		v.AppendInt(int64(x))
	case int64:
		v.AppendInt(x)
	case int:
		v.AppendInt(int64(x))
	case string:
		v.AppendString(x)
	default:
		panic(fmt.Sprintf("sinktest: partition value %T", x))
	}
}

// rowsOf returns the rows as a batch of table.
func rowsOf(table sinks.Table, rs ...[]prow) *batch.Batch {
	b := batch.New(table.Schema, 0)
	n := len(table.Schema.Columns)
	for _, group := range rs {
		for _, r := range group {
			b.Vectors[0].AppendInt(r.id)
			for k, x := range r.part {
				appendAny(b.Vectors[1+k], x)
			}
			b.Vectors[n-1].AppendInt(r.gen)
		}
	}
	return b
}

// partsOf returns the list of partitions ReplacePartitions takes: one row
// per partition, the table's partition_by columns as declared.
func partsOf(table sinks.Table, parts ...[]any) *batch.Batch {
	var s batch.Schema
	for _, name := range table.PartitionBy {
		s.Columns = append(s.Columns, table.Schema.Columns[table.Schema.Index(name)])
	}
	b := batch.New(s, len(parts))
	for _, p := range parts {
		for k, x := range p {
			appendAny(b.Vectors[k], x)
		}
	}
	return b
}

// part is one partition's values, for partsOf.
func part(values ...any) []any { return values }

// replaceOp is one call on a load: a write or a replacement.
type replaceOp func(ctx context.Context, ld sinks.PartitionLoad) error

func replaceParts(table sinks.Table, parts ...[]any) replaceOp {
	return func(ctx context.Context, ld sinks.PartitionLoad) error {
		return ld.ReplacePartitions(ctx, table.Name, partsOf(table, parts...))
	}
}

func writePart(table sinks.Table, rs ...[]prow) replaceOp {
	return func(ctx context.Context, ld sinks.PartitionLoad) error {
		return ld.Write(ctx, table.Name, rowsOf(table, rs...))
	}
}

// beginReplace begins a load of the tables and checks that it is a
// PartitionLoad.
func (h *harness) beginReplace(s sinks.Sink, tables ...sinks.Table) (sinks.PartitionLoad, string) {
	h.t.Helper()
	id := h.loadID()
	names := make([]string, len(tables))
	for i, t := range tables {
		names[i] = t.Name
	}
	ld, err := s.Begin(context.Background(), sinks.LoadMeta{LoadID: id, Pipeline: Pipeline, Flow: "files", Targets: names, Generation: 1})
	if err != nil {
		h.t.Fatalf("Begin: %v", err)
	}
	pl, ok := ld.(sinks.PartitionLoad)
	if !ok {
		ld.Abort(context.Background())
		h.t.Fatalf("Begin returned %T, which does not implement sinks.PartitionLoad", ld)
	}
	return pl, id
}

// replaceCommit is the commit of a replacing load: a files flow's position.
func replaceCommit(id string, rows int) sinks.Commit {
	return sinks.Commit{To: batch.Positions{{File: "in/" + id + ".parquet", Done: true}}, Rows: int64(rows)}
}

// stage begins a load of table and runs ops on it, failing the test on an
// error.
func (h *harness) stage(s sinks.Sink, table sinks.Table, ops ...replaceOp) (sinks.PartitionLoad, string) {
	h.t.Helper()
	ld, id := h.beginReplace(s, table)
	for i, op := range ops {
		if err := op(context.Background(), ld); err != nil {
			ld.Abort(context.Background())
			h.t.Fatalf("load %s, call %d: %v", id, i, err)
		}
	}
	return ld, id
}

// mustReplace runs ops in one load of table and commits it.
func (h *harness) mustReplace(s sinks.Sink, table sinks.Table, ops ...replaceOp) string {
	h.t.Helper()
	ld, id := h.stage(s, table, ops...)
	if err := ld.Commit(context.Background(), replaceCommit(id, 0)); err != nil {
		h.t.Fatalf("Commit of load %s: %v", id, err)
	}
	return id
}

// loaded are rows a load wrote, for the expected content of a table.
type loaded struct {
	load string
	rows []prow
}

// rowLines renders rows of a table as sorted lines of its declared columns,
// then _sluice_load_id when withLoad.
func rowLines(table sinks.Table, b *batch.Batch, withLoad bool) []string {
	names := table.Schema.Names()
	if withLoad {
		names = append(names, batch.LoadIDColumn)
	}
	sel := b.Select(names...)
	lines := make([]string, b.Len())
	for i := range b.Len() {
		var sb strings.Builder
		for c, v := range sel.Vectors {
			if c > 0 {
				sb.WriteByte('|')
			}
			if x := v.Value(i); x == nil {
				sb.WriteString("NULL")
			} else {
				fmt.Fprintf(&sb, "%q", fmt.Sprint(x))
			}
		}
		lines[i] = sb.String()
	}
	slices.Sort(lines)
	return lines
}

// tableLines scans a table and renders it, after checking its columns.
func tableLines(t *testing.T, s sinks.Sink, table sinks.Table, withLoad bool) []string {
	t.Helper()
	b := scan(t, s, table.Name)
	if got, want := b.Schema.Names(), append(table.Schema.Names(), batch.LoadIDColumn); !slices.Equal(got, want) {
		t.Fatalf("Scan %s: columns %v, want %v", table.Name, got, want)
	}
	return rowLines(table, b, withLoad)
}

func wantLines(table sinks.Table, ls ...loaded) []string {
	var out []string
	for _, l := range ls {
		for _, line := range rowLines(table, rowsOf(table, l.rows), false) {
			out = append(out, line+"|"+fmt.Sprintf("%q", l.load))
		}
	}
	slices.Sort(out)
	return out
}

// expectRows checks that table holds exactly the rows, each with the load
// that wrote it.
func expectRows(t *testing.T, s sinks.Sink, table sinks.Table, what string, ls ...loaded) {
	t.Helper()
	got, want := tableLines(t, s, table, true), wantLines(table, ls...)
	if !slices.Equal(got, want) {
		t.Fatalf("%s: %s holds\n  %s\nwant\n  %s", what, table.Name, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// expectEverywhere checks the rows through s, through a new Sink, and
// after Recover on it.
func (h *harness) expectEverywhere(s sinks.Sink, table sinks.Table, what string, ls ...loaded) {
	h.t.Helper()
	expectRows(h.t, s, table, what, ls...)
	r := h.sink()
	expectRows(h.t, r, table, what+" (another Sink)", ls...)
	recoverLedger(h.t, r)
	expectRows(h.t, r, table, what+" (after Recover)", ls...)
}

func testReplaceOne(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, byDay)
	r1 := [][]prow{prows(0, 4, 1, day1), prows(4, 8, 1, day2), prows(8, 12, 1, day3)}
	l1 := h.mustReplace(s, byDay, writePart(byDay, r1...))
	r2 := [][]prow{prows(12, 14, 2, day2), prows(14, 16, 2, day3)}
	l2 := h.mustReplace(s, byDay, writePart(byDay, r2...))
	// Day 2 is rebuilt with fewer rows, one of them an id it had before.
	r3 := append(prows(5, 6, 3, day2), prows(20, 22, 3, day2)...)
	l3 := h.mustReplace(s, byDay, replaceParts(byDay, part(day2)), writePart(byDay, r3))
	h.expectEverywhere(s, byDay, "after replacing day 2",
		loaded{l1, r1[0]}, loaded{l1, r1[2]}, loaded{l2, r2[1]}, loaded{l3, r3})
	// A later plain load appends to the replaced partition as usual.
	r4 := prows(30, 32, 4, day2)
	l4 := h.mustReplace(s, byDay, writePart(byDay, r4))
	h.expectEverywhere(s, byDay, "after an append to the replaced partition",
		loaded{l1, r1[0]}, loaded{l1, r1[2]}, loaded{l2, r2[1]}, loaded{l3, r3}, loaded{l4, r4})
}

func testReplaceMove(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, byDay)
	h.mustReplace(s, byDay, writePart(byDay, prows(0, 5, 1, day1), prows(5, 10, 1, day2)))
	keep := prows(10, 12, 1, day3)
	l2 := h.mustReplace(s, byDay, writePart(byDay, keep))
	// The late data moves ids 3 and 4 to day 2 and ids 5 and 6 to day 1.
	moved := append(prows(0, 3, 2, day1), prows(5, 7, 2, day1)...)
	moved2 := append(prows(3, 5, 2, day2), prows(7, 10, 2, day2)...)
	l3 := h.mustReplace(s, byDay, replaceParts(byDay, part(day1), part(day2)), writePart(byDay, moved, moved2))
	h.expectEverywhere(s, byDay, "after moving rows between days 1 and 2",
		loaded{l2, keep}, loaded{l3, moved}, loaded{l3, moved2})
}

func testReplaceEmpty(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, byDay)
	r1 := [][]prow{prows(0, 3, 1, day1), prows(3, 6, 1, day2), prows(6, 9, 1, day3)}
	l1 := h.mustReplace(s, byDay, writePart(byDay, r1...))
	// Days 2 and 4 (which holds nothing yet) are listed; only day 1 gets rows.
	r2 := prows(0, 2, 2, day1)
	l2 := h.mustReplace(s, byDay, replaceParts(byDay, part(day1), part(day2), part(day4)), writePart(byDay, r2))
	h.expectEverywhere(s, byDay, "after replacing days 1, 2 and 4 with rows of day 1 only",
		loaded{l1, r1[2]}, loaded{l2, r2})
	// A load that lists a partition and writes nothing at all empties it.
	h.mustReplace(s, byDay, replaceParts(byDay, part(day3)))
	h.expectEverywhere(s, byDay, "after replacing day 3 with nothing", loaded{l2, r2})
	h.mustReplace(s, byDay, replaceParts(byDay, part(day1), part(day3)))
	h.expectEverywhere(s, byDay, "after replacing every partition with nothing")
}

func testReplaceUnlisted(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, byDay)
	r1 := [][]prow{prows(0, 3, 1, day1), prows(3, 6, 1, day2)}
	l1 := h.mustReplace(s, byDay, writePart(byDay, r1...))
	// Day 1 is listed; day 2 (holding rows) and day 3 (new) are not.
	r2 := [][]prow{prows(10, 12, 2, day1), prows(12, 14, 2, day2), prows(14, 16, 2, day3)}
	l2 := h.mustReplace(s, byDay, replaceParts(byDay, part(day1)), writePart(byDay, r2...))
	h.expectEverywhere(s, byDay, "after replacing day 1 with rows of days 1 to 3",
		loaded{l1, r1[1]}, loaded{l2, r2[0]}, loaded{l2, r2[1]}, loaded{l2, r2[2]})
}

func testReplaceCalls(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, byDay)
	r1 := [][]prow{prows(0, 3, 1, day1), prows(3, 6, 1, day2), prows(6, 9, 1, day3)}
	l1 := h.mustReplace(s, byDay, writePart(byDay, r1...))
	// Two calls, interleaved with writes, the second listing day 1 again.
	a, b := prows(20, 22, 2, day1), prows(22, 24, 2, day2)
	l2 := h.mustReplace(s, byDay,
		writePart(byDay, a),
		replaceParts(byDay, part(day1)),
		writePart(byDay, b),
		replaceParts(byDay, part(day2), part(day1)))
	h.expectEverywhere(s, byDay, "after replacing days 1 and 2 in two calls",
		loaded{l1, r1[2]}, loaded{l2, a}, loaded{l2, b})
}

func testReplaceStrings(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, byRegion)
	// "a" is a prefix of the escaped value.
	r1 := [][]prow{prows(0, 2, 1, escapedValue), prows(2, 4, 1, "a"), prows(4, 6, 1, "héllo wörld"),
		prows(8, 10, 1, "")}
	l1 := h.mustReplace(s, byRegion, writePart(byRegion, r1...))
	r2 := prows(2, 3, 2, escapedValue)
	l2 := h.mustReplace(s, byRegion, replaceParts(byRegion, part(escapedValue)), writePart(byRegion, r2))
	h.expectEverywhere(s, byRegion, "after replacing "+escapedValue,
		loaded{l1, r1[1]}, loaded{l1, r1[2]}, loaded{l1, r1[3]}, loaded{l2, r2})
	r3 := [][]prow{prows(21, 22, 3, "")}
	l3 := h.mustReplace(s, byRegion, replaceParts(byRegion, part("")), writePart(byRegion, r3...))
	h.expectEverywhere(s, byRegion, "after replacing the empty string",
		loaded{l1, r1[1]}, loaded{l1, r1[2]}, loaded{l2, r2}, loaded{l3, r3[0]})
	r4 := prows(30, 31, 4, "héllo wörld")
	l4 := h.mustReplace(s, byRegion, replaceParts(byRegion, part("héllo wörld"), part("a")), writePart(byRegion, r4))
	h.expectEverywhere(s, byRegion, "after replacing a and héllo wörld",
		loaded{l2, r2}, loaded{l3, r3[0]}, loaded{l4, r4})
}

// testReplaceNull runs for destinations with nullable partition columns
// (NullablePartitions): "" and NULL may share a partition there, so they are
// always listed together.
func testReplaceNull(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, byNRegion)
	r1 := [][]prow{prows(0, 2, 1, "a"), prows(6, 8, 1, nil), prows(8, 10, 1, "")}
	l1 := h.mustReplace(s, byNRegion, writePart(byNRegion, r1...))
	r2 := [][]prow{prows(20, 21, 2, nil), prows(21, 22, 2, "")}
	l2 := h.mustReplace(s, byNRegion, replaceParts(byNRegion, part(nil), part("")), writePart(byNRegion, r2...))
	h.expectEverywhere(s, byNRegion, "after replacing NULL and the empty string",
		loaded{l1, r1[0]}, loaded{l2, r2[0]}, loaded{l2, r2[1]})
}

func testReplaceInts(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, byShard)
	// 1 is a prefix of 10 and of 1000.
	r1 := [][]prow{prows(0, 2, 1, int64(1)), prows(2, 4, 1, int64(10)), prows(4, 6, 1, int64(1000)),
		prows(6, 8, 1, int64(-1)), prows(8, 10, 1, int64(0))}
	l1 := h.mustReplace(s, byShard, writePart(byShard, r1...))
	r2 := [][]prow{prows(20, 21, 2, int64(1)), prows(21, 22, 2, int64(-1))}
	l2 := h.mustReplace(s, byShard, replaceParts(byShard, part(int64(1)), part(int64(-1))), writePart(byShard, r2...))
	h.expectEverywhere(s, byShard, "after replacing shards 1 and -1",
		loaded{l1, r1[1]}, loaded{l1, r1[2]}, loaded{l1, r1[4]}, loaded{l2, r2[0]}, loaded{l2, r2[1]})
}

func testReplaceTwoColumns(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, byDayRegion)
	r1 := [][]prow{
		prows(0, 2, 1, day1, "x"), prows(2, 4, 1, day1, "y"), prows(4, 6, 1, day2, "x"),
		prows(6, 8, 1, day1, escapedValue), prows(8, 10, 1, day2, ""),
	}
	l1 := h.mustReplace(s, byDayRegion, writePart(byDayRegion, r1...))
	// (day 1, x) and (day 2, "") are replaced; (day 1, y) and (day 2, x)
	// share one value with them and stay.
	r2 := [][]prow{prows(20, 21, 2, day1, "x"), prows(21, 23, 2, day2, "")}
	l2 := h.mustReplace(s, byDayRegion,
		replaceParts(byDayRegion, part(day1, "x"), part(day2, "")),
		writePart(byDayRegion, r2...))
	h.expectEverywhere(s, byDayRegion, "after replacing (day 1, x) and (day 2, \"\")",
		loaded{l1, r1[1]}, loaded{l1, r1[2]}, loaded{l1, r1[3]}, loaded{l2, r2[0]}, loaded{l2, r2[1]})
	// Listing (day 1, escaped) with no rows empties it; rows of (day 3, y)
	// are appended.
	r3 := prows(30, 31, 3, day3, "y")
	l3 := h.mustReplace(s, byDayRegion, replaceParts(byDayRegion, part(day1, escapedValue)), writePart(byDayRegion, r3))
	h.expectEverywhere(s, byDayRegion, "after emptying (day 1, "+escapedValue+")",
		loaded{l1, r1[1]}, loaded{l1, r1[2]}, loaded{l2, r2[0]}, loaded{l2, r2[1]}, loaded{l3, r3})
}

func testReplaceTwice(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, byDay)
	h.mustReplace(s, byDay, writePart(byDay, prows(0, 4, 1, day1), prows(4, 8, 1, day2), prows(8, 12, 1, day3)))
	rebuilt := [][]prow{prows(0, 5, 2, day1), prows(5, 7, 2, day2)}
	again := func() string {
		return h.mustReplace(s, byDay, replaceParts(byDay, part(day1), part(day2)), writePart(byDay, rebuilt...))
	}
	again()
	first := tableLines(t, s, byDay, false)
	l := again()
	if got := tableLines(t, s, byDay, false); !slices.Equal(got, first) {
		t.Fatalf("the same replacement twice: %s holds\n  %s\nafter the second, want as after the first\n  %s",
			byDay.Name, strings.Join(got, "\n  "), strings.Join(first, "\n  "))
	}
	for _, s := range []sinks.Sink{s, h.sink()} {
		b := scan(t, s, byDay.Name)
		days, loads := b.Column("day"), b.Column(batch.LoadIDColumn)
		for i := range b.Len() {
			if d := batch.DateValue(days.Ints[i]); d != day3 && loads.Strs[i] != l {
				t.Fatalf("a row of %v has load id %s, want the second replacement's %s", d, loads.Strs[i], l)
			}
		}
	}
}

func testReplaceAbort(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, byDay)
	r1 := [][]prow{prows(0, 3, 1, day1), prows(3, 6, 1, day2)}
	l1 := h.mustReplace(s, byDay, writePart(byDay, r1...))
	ld, _ := h.stage(s, byDay, replaceParts(byDay, part(day1), part(day2)), writePart(byDay, prows(10, 12, 2, day1)))
	if err := ld.Abort(context.Background()); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	if err := ld.Commit(context.Background(), replaceCommit("aborted", 2)); err == nil {
		t.Fatal("Commit after Abort succeeded")
	}
	h.expectEverywhere(s, byDay, "after an aborted replacement", loaded{l1, r1[0]}, loaded{l1, r1[1]})
	if n := len(ledger(t, s).Loads); n != 1 {
		t.Fatalf("ledger has %d loads after an aborted replacement, want 1", n)
	}
}

func testReplaceUnfinished(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, byDay)
	r1 := [][]prow{prows(0, 3, 1, day1), prows(3, 6, 1, day2)}
	l1 := h.mustReplace(s, byDay, writePart(byDay, r1...))
	// The writer goes away without Commit or Abort; a new process recovers.
	h.stage(s, byDay, replaceParts(byDay, part(day1), part(day2)), writePart(byDay, prows(10, 12, 2, day1)))
	r := h.sink()
	if l := recoverLedger(t, r); len(l.Loads) != 1 {
		t.Fatalf("Recover returned %d loads, want 1", len(l.Loads))
	}
	expectRows(t, r, byDay, "after an unfinished replacement", loaded{l1, r1[0]}, loaded{l1, r1[1]})
	// Another replacement of the same partitions commits.
	r2 := prows(20, 21, 3, day2)
	l2 := h.mustReplace(r, byDay, replaceParts(byDay, part(day2)), writePart(byDay, r2))
	h.expectEverywhere(r, byDay, "after a replacement following an unfinished one", loaded{l1, r1[0]}, loaded{l2, r2})
}

func testReplaceRefused(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, byDay, byDayRegion, ordersTable, scd1Table)
	l1 := h.mustReplace(s, byDayRegion, writePart(byDayRegion, prows(0, 2, 1, day1, "x")))
	cols := func(cs ...batch.Column) batch.Schema { return batch.Schema{Columns: cs} }
	tests := []struct {
		name  string
		table string
		parts batch.Schema
	}{
		{"table without partition_by", ordersTable.Name, cols(batch.Column{Name: "id", Type: batch.Int64})},
		{"CDC target", scd1Table.Name, cols(batch.Column{Name: "id", Type: batch.Int64})},
		{"unknown table", "nope", cols(dayCol)},
		{"a partition column missing", byDayRegion.Name, cols(dayCol)},
		{"an extra column", byDay.Name, cols(dayCol, regionCol)},
		{"columns out of order", byDayRegion.Name, cols(regionCol, dayCol)},
		{"another column's name", byDay.Name, cols(batch.Column{Name: "id", Type: batch.Int64})},
		{"another type", byDay.Name, cols(batch.Column{Name: "day", Type: batch.String})},
		{"a timestamp for a date", byDay.Name, cols(batch.Column{Name: "day", Type: batch.Timestamp})},
	}
	ctx := context.Background()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ld, _ := h.beginReplace(s, sinks.Table{Name: tc.table})
			defer ld.Abort(ctx)
			parts := batch.New(tc.parts, 1)
			for _, v := range parts.Vectors {
				switch v.Type.Kind {
				case batch.KindString:
					v.AppendString("x")
				default:
					v.AppendInt(int64(day1))
				}
			}
			if err := ld.ReplacePartitions(ctx, tc.table, parts); err == nil {
				t.Fatalf("ReplacePartitions of %s with partitions %v succeeded", tc.table, describe(tc.parts))
			}
		})
	}
	expectRows(t, s, byDayRegion, "after the refused replacements", loaded{l1, prows(0, 2, 1, day1, "x")})
}
