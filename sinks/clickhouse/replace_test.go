package clickhouse

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
	"github.com/sluicehq/sluice/sinks/sinktest"
)

func TestReplaceConformance(t *testing.T) {
	addr := serverAddr(t)
	probe := openSink(t, addr, "default")
	sinktest.RunReplace(t, func(t *testing.T) func() sinks.Sink {
		db := newDatabase(t, addr)
		return func() sinks.Sink { return dial(t, addr, db) }
	}, suiteOptions(probe)...)
}

// ptable returns a table of id, the partition columns, then v, partitioned
// by the partition columns.
func ptable(name string, parts ...batch.Column) sinks.Table {
	cols := append([]batch.Column{{Name: "id", Type: batch.Int64}}, parts...)
	cols = append(cols, batch.Column{Name: "v", Type: batch.String})
	by := make([]string, len(parts))
	for i, c := range parts {
		by[i] = c.Name
	}
	return sinks.Table{Name: name, Schema: batch.Schema{Columns: cols}, OrderBy: []string{"id"}, PartitionBy: by}
}

// prow is a row of a ptable: its id, its partition values (batch.DateValue,
// string or int64) and v.
type prow struct {
	id   int64
	part []any
	v    string
}

func appendValue(vec *batch.Vector, x any) {
	switch x := x.(type) {
	case batch.DateValue:
		vec.AppendInt(int64(x))
	case int64:
		vec.AppendInt(x)
	case string:
		vec.AppendString(x)
	default:
		panic(fmt.Sprintf("partition value %T", x))
	}
}

func prowBatch(table sinks.Table, rows ...prow) *batch.Batch {
	b := batch.New(table.Schema, len(rows))
	for _, r := range rows {
		b.Vectors[0].AppendInt(r.id)
		for k, x := range r.part {
			appendValue(b.Vectors[1+k], x)
		}
		b.Vectors[len(b.Vectors)-1].AppendString(r.v)
	}
	return b
}

// partList returns the list of partitions ReplacePartitions takes.
func partList(table sinks.Table, parts ...[]any) *batch.Batch {
	var s batch.Schema
	for _, name := range table.PartitionBy {
		s.Columns = append(s.Columns, table.Schema.Columns[table.Schema.Index(name)])
	}
	b := batch.New(s, len(parts))
	for _, p := range parts {
		for k, x := range p {
			appendValue(b.Vectors[k], x)
		}
	}
	return b
}

// tableRows returns a table's rows as "id:v" by partition id (from _part).
func tableRows(t *testing.T, s *Sink, table string) map[string][]string {
	t.Helper()
	rows, err := s.conn.Query(context.Background(), "SELECT _part, id, v FROM "+s.table(table)+" ORDER BY id")
	if err != nil {
		t.Fatalf("read %s: %v", table, err)
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var part, v string
		var id int64
		if err := rows.Scan(&part, &id, &v); err != nil {
			t.Fatal(err)
		}
		pid := partitionOfPart(part)
		out[pid] = append(out[pid], fmt.Sprintf("%d:%s", id, v))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// replaceLoad runs one load of table: ReplacePartitions with parts (none
// when nil), then a write of rows, then a commit as a files flow. It
// returns the load for inspection.
func replaceLoad(ctx context.Context, s *Sink, id string, table sinks.Table, parts *batch.Batch, rows ...prow) (*load, error) {
	ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: id, Pipeline: "p", Flow: "files", Targets: []string{table.Name}, Generation: 1})
	if err != nil {
		return nil, err
	}
	l := ld.(*load)
	if parts != nil {
		if err := l.ReplacePartitions(ctx, table.Name, parts); err != nil {
			ld.Abort(ctx)
			return l, err
		}
	}
	if len(rows) > 0 {
		if err := ld.Write(ctx, table.Name, prowBatch(table, rows...)); err != nil {
			ld.Abort(ctx)
			return l, err
		}
	}
	return l, ld.Commit(ctx, sinks.Commit{From: batch.Positions{{File: "in/" + id}}, To: batch.Positions{{File: "in/" + id, Done: true}}, Rows: int64(len(rows))})
}

// TestReplacePartitionNames replaces partitions of tables partitioned by
// one or two columns of each kind, with values that need escaping in SQL
// text. The ids sluice lists are the server's own ids of the values' rows:
// 18.16 names a Date partition YYYYMMDD, an Int64 one by its number, a
// tuple of integers and dates by the parts joined with '-', and anything
// holding a string by a 128-bit hash.
func TestReplacePartitionNames(t *testing.T) {
	var (
		d1 = batch.DateFromTime(time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC))
		d2 = batch.DateFromTime(time.Date(2024, 5, 2, 0, 0, 0, 0, time.UTC))
		d3 = batch.DateFromTime(time.Date(2024, 5, 3, 0, 0, 0, 0, time.UTC))
		d4 = batch.DateFromTime(time.Date(2024, 12, 31, 0, 0, 0, 0, time.UTC))
	)
	dayCol := batch.Column{Name: "day", Type: batch.Date}
	nameCol := batch.Column{Name: "name", Type: batch.String}
	numCol := batch.Column{Name: "num", Type: batch.Int64}
	hash := func(id string) bool {
		return len(id) == 32 && strings.Trim(id, "0123456789abcdef") == ""
	}
	tests := []struct {
		name       string
		table      sinks.Table
		a, b, c, d []any // partitions: a replaced, b emptied, c appended to, d new
		idA, idB   string
	}{
		{"date", ptable("by_day", dayCol), []any{d1}, []any{d2}, []any{d3}, []any{d4}, "20240501", "20240502"},
		{"string with quotes", ptable("by_name", nameCol),
			[]any{`it's`}, []any{`a\'b\\c"d` + "\n'"}, []any{"it"}, []any{"ü ' `x`"}, "", ""},
		{"empty string", ptable("by_name_empty", nameCol), []any{""}, []any{"'"}, []any{`\`}, []any{"''"}, "", ""},
		{"int64", ptable("by_num", numCol), []any{int64(-5)}, []any{int64(10)}, []any{int64(1)}, []any{int64(1) << 62}, "-5", "10"},
		{"date and string", ptable("by_day_name", dayCol, nameCol),
			[]any{d1, `it's`}, []any{d1, "x"}, []any{d2, `it's`}, []any{d4, `\'`}, "", ""},
		{"date and int64", ptable("by_day_num", dayCol, numCol),
			[]any{d1, int64(-5)}, []any{d1, int64(7)}, []any{d2, int64(-5)}, []any{d4, int64(0)}, "20240501--5", "20240501-7"},
	}
	addr := serverAddr(t)
	db := newDatabase(t, addr)
	ctx := context.Background()
	s := openSink(t, addr, db, func(o *Options) { o.Pipeline = "p" })
	tables := make([]sinks.Table, len(tests))
	for i, tc := range tests {
		tables[i] = tc.table
	}
	if err := s.Ensure(ctx, tables); err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tb := tc.table
			base := []prow{{1, tc.a, "old"}, {2, tc.a, "old"}, {3, tc.b, "old"}, {4, tc.c, "old"}}
			if _, err := replaceLoad(ctx, s, tb.Name+"-base", tb, nil, base...); err != nil {
				t.Fatalf("base load: %v", err)
			}
			before := tableRows(t, s, tb.Name)
			idOf := func(rows map[string][]string, row string) string {
				for pid, rs := range rows {
					if slices.Contains(rs, row) {
						return pid
					}
				}
				t.Fatalf("no row %s in %v", row, rows)
				return ""
			}
			idA, idB, idC := idOf(before, "1:old"), idOf(before, "3:old"), idOf(before, "4:old")
			if len(before) != 3 {
				t.Fatalf("base rows in %d partitions, want 3: %v", len(before), before)
			}
			for _, c := range []struct{ got, want string }{{idA, tc.idA}, {idB, tc.idB}} {
				if c.want == "" && !hash(c.got) || c.want != "" && c.got != c.want {
					t.Fatalf("partition id %q, want %q (a 32-digit hash when empty)", c.got, c.want)
				}
			}
			l, err := replaceLoad(ctx, s, tb.Name+"-new", tb, partList(tb, tc.a, tc.b, tc.d, tc.a),
				prow{10, tc.a, "new"}, prow{11, tc.d, "new"}, prow{12, tc.c, "new"})
			if err != nil {
				t.Fatalf("replacing load: %v", err)
			}
			after := tableRows(t, s, tb.Name)
			idD := idOf(after, "11:new")
			if want := slices.Sorted(slices.Values([]string{idA, idB, idD})); !slices.Equal(l.replace[tb.Name], want) {
				t.Fatalf("listed ids %v, want %v", l.replace[tb.Name], want)
			}
			want := map[string][]string{idA: {"10:new"}, idC: {"4:old", "12:new"}, idD: {"11:new"}}
			if !maps.EqualFunc(after, want, slices.Equal) {
				t.Fatalf("rows by partition %v, want %v", after, want)
			}
			if left := protocolLeftovers(t, s); len(left) > 0 {
				t.Fatalf("objects left: %v", left)
			}
		})
	}
}

// protocolLeftovers lists the protocol objects still in the database,
// partition list tables included.
func protocolLeftovers(t *testing.T, s *Sink) []string {
	t.Helper()
	out := leftovers(t, s)
	ages, err := s.objectAges(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for name := range ages {
		if strings.HasPrefix(name, plistPrefix) {
			out = append(out, name)
		}
	}
	return out
}

var (
	kday1 = batch.DateFromTime(time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC))
	kday2 = batch.DateFromTime(time.Date(2024, 5, 2, 0, 0, 0, 0, time.UTC))
	kday3 = batch.DateFromTime(time.Date(2024, 5, 3, 0, 0, 0, 0, time.UTC))
	kday4 = batch.DateFromTime(time.Date(2024, 5, 4, 0, 0, 0, 0, time.UTC))
	kday5 = batch.DateFromTime(time.Date(2024, 5, 5, 0, 0, 0, 0, time.UTC))
	// daysTable is the table of the recovery and kill tests.
	daysTable = ptable("days", batch.Column{Name: "day", Type: batch.Date})
)

// The recovery and kill tests start from oldRows and replace days 1, 2 and
// 4 with newRows (day 2 without rows; day 5, unlisted, is appended to).
var (
	oldRows = []prow{{1, []any{kday1}, "old"}, {2, []any{kday1}, "old"}, {3, []any{kday2}, "old"}, {4, []any{kday3}, "old"}}
	newRows = []prow{{10, []any{kday1}, "new"}, {11, []any{kday1}, "new"}, {12, []any{kday4}, "new"}, {13, []any{kday5}, "new"}}
	// Rows by day before and after the replacement.
	oldDays = map[batch.DateValue][]string{kday1: {"1:old", "2:old"}, kday2: {"3:old"}, kday3: {"4:old"}}
	newDays = map[batch.DateValue][]string{kday1: {"10:new", "11:new"}, kday3: {"4:old"}, kday4: {"12:new"}, kday5: {"13:new"}}
)

func replaceDays(ctx context.Context, s *Sink, id string) error {
	_, err := replaceLoad(ctx, s, id, daysTable, partList(daysTable, []any{kday1}, []any{kday2}, []any{kday4}), newRows...)
	return err
}

// dayRows returns the rows of daysTable by day, read through Scan.
func dayRows(t *testing.T, s *Sink) map[batch.DateValue][]string {
	t.Helper()
	b, err := s.Scan(context.Background(), daysTable.Name)
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	out := map[batch.DateValue][]string{}
	ids, days, vs := b.Column("id"), b.Column("day"), b.Column("v")
	for i := range b.Len() {
		d := batch.DateValue(days.Ints[i])
		out[d] = append(out[d], fmt.Sprintf("%d:%s", ids.Ints[i], vs.Strs[i]))
	}
	for _, rs := range out {
		slices.Sort(rs)
	}
	return out
}

// checkEachDay fails unless every day holds exactly its old or its new rows.
func checkEachDay(t *testing.T, got map[batch.DateValue][]string, when string) {
	t.Helper()
	for _, d := range []batch.DateValue{kday1, kday2, kday3, kday4, kday5} {
		if !slices.Equal(got[d], oldDays[d]) && !slices.Equal(got[d], newDays[d]) {
			t.Fatalf("%s: day %v holds %v, neither the old %v nor the new %v", when, d, got[d], oldDays[d], newDays[d])
		}
	}
}

func setupDays(t *testing.T) (open func() *Sink) {
	t.Helper()
	addr := serverAddr(t)
	db := newDatabase(t, addr)
	open = func() *Sink {
		s := openSink(t, addr, db, func(o *Options) { o.Pipeline = "p" })
		s.setGrace(-time.Second) // everything without a live owner counts as abandoned
		return s
	}
	s := open()
	ctx := context.Background()
	if err := s.Ensure(ctx, []sinks.Table{daysTable}); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if _, err := replaceLoad(ctx, s, "base", daysTable, nil, oldRows...); err != nil {
		t.Fatalf("base load: %v", err)
	}
	return open
}

// TestReplaceRecover interrupts the publication of a replacement after its
// commit point; recovery (Recover, or the background cleanup of another
// process) finishes it from the same staging table. Replacing partitions
// that were replaced already gives the same rows.
func TestReplaceRecover(t *testing.T) {
	tests := []struct {
		name  string
		fault *fault
		// finish recovers with a new sink: Recover, or one background cleanup.
		cleanup bool
	}{
		{"nothing replaced", &fault{match: []string{"REPLACE PARTITION"}}, false},
		{"one partition replaced", &fault{match: []string{"REPLACE PARTITION"}, skip: 1}, false},
		{"last replacement landed, answer lost", &fault{match: []string{"REPLACE PARTITION"}, skip: 2, after: true}, false},
		{"replaced, unlisted partition not attached", &fault{match: []string{"ATTACH PARTITION"}}, false},
		{"published, staging table left", &fault{match: []string{"DROP TABLE", stagePrefix}}, false},
		{"one partition replaced, background cleanup", &fault{match: []string{"REPLACE PARTITION"}, skip: 1}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			open := setupDays(t)
			s1 := open()
			withFaults(s1).add(tc.fault)
			err := replaceDays(ctx, s1, "new")
			if !tc.fault.fired {
				t.Fatal("the fault never fired")
			}
			if err == nil || !s1.Retryable(err) {
				t.Fatalf("commit: %v, want a retryable error", err)
			}
			checkEachDay(t, dayRows(t, s1), "after the interrupted publication")
			// s1 is abandoned here, as by kill -9.
			s2 := open()
			if tc.cleanup {
				if err := s2.ensureSystem(ctx); err != nil { // as Begin or Ensure would
					t.Fatal(err)
				}
				s2.cleanup(ctx)
			} else if err := s2.Recover(ctx); err != nil {
				t.Fatalf("Recover: %v", err)
			}
			if got := dayRows(t, s2); !maps.EqualFunc(got, newDays, slices.Equal) {
				t.Fatalf("after recovery: %v, want %v", got, newDays)
			}
			if left := protocolLeftovers(t, s2); len(left) > 0 {
				t.Fatalf("objects left: %v", left)
			}
		})
	}
}

// TestReplacePendingOwnLoad: the publication of a replacement fails and the
// process goes on; its next load finishes the replacement first, from the
// list the load holds.
func TestReplacePendingOwnLoad(t *testing.T) {
	ctx := context.Background()
	open := setupDays(t)
	s := open()
	withFaults(s).add(&fault{match: []string{"REPLACE PARTITION"}, skip: 1})
	if err := replaceDays(ctx, s, "new"); err == nil || !s.Retryable(err) {
		t.Fatalf("commit: %v, want a retryable error", err)
	}
	later := prow{20, []any{kday3}, "later"}
	if _, err := replaceLoad(ctx, s, "later", daysTable, nil, later); err != nil {
		t.Fatalf("next load: %v", err)
	}
	want := maps.Clone(newDays)
	want[kday3] = []string{"20:later", "4:old"}
	if got := dayRows(t, s); !maps.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("rows %v, want %v", got, want)
	}
	if left := protocolLeftovers(t, s); len(left) > 0 {
		t.Fatalf("objects left: %v", left)
	}
}

// TestReplaceIdempotent commits the same replacement (listing every
// partition it writes) twice, and replays a committed replacement's
// publication from its staging table.
func TestReplaceIdempotent(t *testing.T) {
	ctx := context.Background()
	open := setupDays(t)
	s := open()
	all := partList(daysTable, []any{kday1}, []any{kday2}, []any{kday4}, []any{kday5})
	for _, id := range []string{"once", "twice"} {
		if _, err := replaceLoad(ctx, s, id, daysTable, all, newRows...); err != nil {
			t.Fatal(err)
		}
	}
	first := newDays
	if got := dayRows(t, s); !maps.EqualFunc(got, first, slices.Equal) {
		t.Fatalf("after the same replacement twice: %v, want %v", got, first)
	}
	// A publication replayed from the staging table, past the check that
	// skips partitions holding the load's rows: the same rows again.
	ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: "replayed", Pipeline: "p", Flow: "files", Targets: []string{daysTable.Name}})
	if err != nil {
		t.Fatal(err)
	}
	l := ld.(*load)
	if err := l.ReplacePartitions(ctx, daysTable.Name, all); err != nil {
		t.Fatal(err)
	}
	if err := ld.Write(ctx, daysTable.Name, prowBatch(daysTable, newRows...)); err != nil {
		t.Fatal(err)
	}
	stage := l.stages[daysTable.Name]
	for range 2 {
		for _, pid := range l.replace[daysTable.Name] {
			if err := s.replace(ctx, daysTable.Name, stage, pid); err != nil {
				t.Fatal(err)
			}
		}
		if got := dayRows(t, s); !maps.EqualFunc(got, first, slices.Equal) {
			t.Fatalf("after replacing from the same staging table: %v, want %v", got, first)
		}
	}
	if err := ld.Abort(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestReplaceRefused: replacements that cannot work are refused before
// anything is written, and a load whose replacement failed cannot commit.
func TestReplaceRefused(t *testing.T) {
	ctx := context.Background()
	open := setupDays(t)
	s := open()
	plain := sinks.Table{Name: "plain", Schema: daysTable.Schema}
	if err := s.Ensure(ctx, []sinks.Table{plain, custTable}); err != nil {
		t.Fatal(err)
	}
	dates := partList(daysTable, []any{kday1})
	strs := batch.New(batch.Schema{Columns: []batch.Column{{Name: "day", Type: batch.String}}}, 1)
	strs.Vectors[0].AppendString("2024-05-01")
	nullable := batch.New(batch.Schema{Columns: []batch.Column{{Name: "day", Type: batch.Date, Nullable: true}}}, 1)
	nullable.Vectors[0].AppendInt(int64(kday1))
	tooEarly := partList(daysTable, []any{batch.DateValue(-1)})
	tests := []struct {
		name, table string
		parts       *batch.Batch
		want        string
	}{
		{"no partition_by", "plain", dates, "has no partition_by"},
		{"CDC target", custTable.Name, dates, "CDC target"},
		{"sluice's own table", batch.DeadLettersTable, dates, "sluice writes that table itself"},
		{"unknown table", "nope", dates, "unknown table"},
		{"another type", daysTable.Name, strs, "partition_by is [day date]"},
		{"nullable", daysTable.Name, nullable, "partition_by is [day date]"},
		{"a value the column cannot hold", daysTable.Name, tooEarly, "1969-12-31"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: "refused-" + strings.ReplaceAll(tc.name, " ", "-"), Pipeline: "p", Flow: "files", Targets: []string{tc.table}})
			if err != nil {
				t.Fatal(err)
			}
			err = ld.(sinks.PartitionLoad).ReplacePartitions(ctx, tc.table, tc.parts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ReplacePartitions: %v, want an error saying %q", err, tc.want)
			}
			err = ld.Commit(ctx, sinks.Commit{To: batch.Positions{{File: "x", Done: true}}})
			if err == nil || !strings.Contains(err.Error(), "replacement of partitions failed") {
				t.Fatalf("Commit after a failed replacement: %v, want it refused", err)
			}
		})
	}
	if got := dayRows(t, s); !maps.EqualFunc(got, oldDays, slices.Equal) {
		t.Fatalf("rows %v, want the old ones", got)
	}
	if led, err := s.Ledger(ctx); err != nil || len(led.Loads) != 1 {
		t.Fatalf("ledger %+v (%v), want the base load only", led, err)
	}
	if left := protocolLeftovers(t, s); len(left) > 0 {
		t.Fatalf("objects left: %v", left)
	}
}

// TestReplaceOldLedger: a destination whose _sluice_loads predates the
// replaced column opens, keeps its ledger and gets the column.
func TestReplaceOldLedger(t *testing.T) {
	ctx := context.Background()
	addr := serverAddr(t)
	db := newDatabase(t, addr)
	raw := openSink(t, addr, "default")
	for _, q := range []string{
		"CREATE DATABASE " + chsql.Quote(db),
		"CREATE TABLE " + chsql.Quote(db) + "." + chsql.Quote(batch.LoadsTable) + ` (
	load_id String, pipeline String, flow String, targets String, positions String,
	rows Int64, dead_letters Int64, generation Int64, committed_at DateTime('UTC'),
	from_positions String, slot String, committed_us UInt32
) ENGINE = MergeTree ORDER BY (pipeline, flow, slot, committed_at, load_id)`,
		"INSERT INTO " + chsql.Quote(db) + "." + chsql.Quote(batch.LoadsTable) +
			" (load_id, pipeline, flow, targets, positions, rows, dead_letters, generation, committed_at, from_positions, slot, committed_us)" +
			` SELECT 'old', 'p', 'f', 'days', '[{"topic":"t","partition":0,"offset":5}]', 5, 0, 1, toDateTime(1700000000, 'UTC'), '[]', 'k/t/0', 0`,
	} {
		if err := raw.conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	s := openSink(t, addr, db, func(o *Options) { o.Pipeline = "p" })
	err := s.Recover(ctx)
	var led *batch.Ledger
	if err == nil {
		led, err = s.Ledger(ctx)
	}
	if err != nil {
		t.Fatalf("Recover on an old ledger: %v", err)
	}
	if len(led.Loads) != 1 || led.Loads[0].LoadID != "old" {
		t.Fatalf("ledger %+v, want the old load", led.Loads)
	}
	if err := s.Ensure(ctx, []sinks.Table{daysTable}); err != nil {
		t.Fatal(err)
	}
	if err := replaceDays(ctx, s, "new"); err != nil {
		t.Fatalf("replacing load on an old ledger: %v", err)
	}
	listed, err := s.ledgerReplaced(ctx, "new")
	if err != nil || len(listed[daysTable.Name]) != 3 {
		t.Fatalf("replaced partitions in the ledger: %v (%v), want 3 of %s", listed, err, daysTable.Name)
	}
	if got := dayRows(t, s); !maps.EqualFunc(got, map[batch.DateValue][]string{kday1: newDays[kday1], kday4: newDays[kday4], kday5: newDays[kday5]}, slices.Equal) {
		t.Fatalf("rows %v", got)
	}
}

// crashConn stops answering at one statement, as a process killed there
// would: the statement is not run (or, with after, run and its answer
// lost), and nothing runs afterwards. observe, when set, runs after every
// statement run before.
type crashConn struct {
	conn
	mu      sync.Mutex
	at      int // the statement (Exec) counted from 1 to crash at; 0: none
	after   bool
	n       int
	dead    bool
	stmts   []string
	observe func(stmt string)
}

func (c *crashConn) Exec(ctx context.Context, q string, args ...any) error {
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return errInjected
	}
	c.n++
	c.stmts = append(c.stmts, q)
	crash := c.n == c.at
	if crash {
		c.dead = true
	}
	c.mu.Unlock()
	if crash && !c.after {
		return errInjected
	}
	err := c.conn.Exec(ctx, q, args...)
	if crash {
		return errInjected
	}
	if err == nil && c.observe != nil {
		c.observe(q)
	}
	return err
}

func (c *crashConn) alive() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return errInjected
	}
	return nil
}

func (c *crashConn) Query(ctx context.Context, q string, args ...any) (driver.Rows, error) {
	if err := c.alive(); err != nil {
		return nil, err
	}
	return c.conn.Query(ctx, q, args...)
}

func (c *crashConn) PrepareBatch(ctx context.Context, q string, opts ...driver.PrepareBatchOption) (driver.Batch, error) {
	if err := c.alive(); err != nil {
		return nil, err
	}
	return c.conn.PrepareBatch(ctx, q, opts...)
}

// TestReplaceKill stops a replacing load at every statement it runs, before
// the statement and after it (its answer lost), as a kill -9 there would,
// then recovers in a new process: every partition is wholly old or wholly
// new, all of them new exactly when the load committed. Readers during an
// uninterrupted run see each partition wholly old or wholly new after every
// statement.
func TestReplaceKill(t *testing.T) {
	ctx := context.Background()
	// An uninterrupted run counts the statements and checks what readers see.
	open := setupDays(t)
	reader := open()
	s := open()
	if err := s.ensureSystem(ctx); err != nil {
		t.Fatal(err)
	}
	cc := &crashConn{conn: s.conn, observe: func(stmt string) {
		checkEachDay(t, dayRows(t, reader), "while publishing, after "+stmt)
	}}
	s.conn = cc
	if err := replaceDays(ctx, s, "new"); err != nil {
		t.Fatal(err)
	}
	if got := dayRows(t, reader); !maps.EqualFunc(got, newDays, slices.Equal) {
		t.Fatalf("after the replacement: %v, want %v", got, newDays)
	}
	stmts := slices.Clone(cc.stmts)
	if len(stmts) < 8 {
		t.Fatalf("the replacement ran %d statements: %q", len(stmts), stmts)
	}
	for i, stmt := range stmts {
		for _, after := range []bool{false, true} {
			name := fmt.Sprintf("%02d %s %s", i+1, map[bool]string{false: "before", true: "after"}[after], summary(stmt))
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				open := setupDays(t)
				s1 := open()
				if err := s1.ensureSystem(ctx); err != nil {
					t.Fatal(err)
				}
				s1.conn = &crashConn{conn: s1.conn, at: i + 1, after: after}
				err := replaceDays(ctx, s1, "new")
				if err == nil {
					t.Fatal("the load succeeded past its crash")
				}
				// s1 is dead here.
				s2 := open()
				err = s2.Recover(ctx)
				var led *batch.Ledger
				if err == nil {
					led, err = s2.Ledger(ctx)
				}
				if err != nil {
					t.Fatalf("Recover: %v", err)
				}
				committed := slices.ContainsFunc(led.Loads, func(r batch.LoadRecord) bool { return r.LoadID == "new" })
				want := oldDays
				if committed {
					want = newDays
				}
				got := dayRows(t, s2)
				checkEachDay(t, got, "after recovery")
				if !maps.EqualFunc(got, want, slices.Equal) {
					t.Fatalf("after recovery (committed %v): %v, want %v", committed, got, want)
				}
				if left := protocolLeftovers(t, s2); len(left) > 0 {
					t.Fatalf("objects left: %v", left)
				}
				// The flow goes on: the replacement is loaded again, listing
				// every partition it writes this time.
				all := partList(daysTable, []any{kday1}, []any{kday2}, []any{kday4}, []any{kday5})
				if _, err := replaceLoad(ctx, s2, "again", daysTable, all, newRows...); err != nil {
					t.Fatalf("replacement after recovery: %v", err)
				}
				if got := dayRows(t, s2); !maps.EqualFunc(got, newDays, slices.Equal) {
					t.Fatalf("after the replacement again: %v, want %v", got, newDays)
				}
			})
		}
	}
}

// summary names a statement by its first words and the kind of object it
// works on.
func summary(stmt string) string {
	words := strings.Fields(stmt)
	out := strings.Join(words[:min(2, len(words))], " ")
	for _, op := range []string{"REPLACE PARTITION", "ATTACH PARTITION"} {
		if strings.Contains(stmt, op) {
			out += " " + op
		}
	}
	for _, p := range []string{plistPrefix, stagePrefix, markerPrefix, lockPrefix, batch.LoadsTable} {
		if strings.Contains(stmt, p) {
			return out + " " + strings.Trim(p, "_")
		}
	}
	return out
}

// TestReplaceManyPartitions lists more partitions than one insert into the
// list table takes (newer servers refuse an insert touching more than 100).
func TestReplaceManyPartitions(t *testing.T) {
	ctx := context.Background()
	addr := serverAddr(t)
	s := openSink(t, addr, newDatabase(t, addr), func(o *Options) { o.Pipeline = "p" })
	tb := ptable("by_num", batch.Column{Name: "num", Type: batch.Int64})
	if err := s.Ensure(ctx, []sinks.Table{tb}); err != nil {
		t.Fatal(err)
	}
	base := []prow{{1, []any{int64(0)}, "old"}, {2, []any{int64(120)}, "old"}, {3, []any{int64(249)}, "old"}, {4, []any{int64(250)}, "old"}}
	if _, err := replaceLoad(ctx, s, "base", tb, nil, base...); err != nil {
		t.Fatal(err)
	}
	var parts [][]any
	for n := range 250 {
		parts = append(parts, []any{int64(249 - n)})
	}
	l, err := replaceLoad(ctx, s, "many", tb, partList(tb, parts...), prow{10, []any{int64(120)}, "new"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(l.replace[tb.Name]); n != 250 {
		t.Fatalf("%d partitions listed, want 250", n)
	}
	want := map[string][]string{"120": {"10:new"}, "250": {"4:old"}}
	if got := tableRows(t, s, tb.Name); !maps.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("rows by partition %v, want %v", got, want)
	}
}
