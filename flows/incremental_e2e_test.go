package flows_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/flows"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks/destination"
)

// Incremental files flows (issue: cursor and lag window), end to end in
// both destinations: Parquet files in Hive folders, one update per run.

type saleRow struct {
	ID     int64 `parquet:"id"`
	Amount int64 `parquet:"amount"`
}

type updateRow struct {
	ID        int64     `parquet:"id"`
	Name      string    `parquet:"name"`
	UpdatedAt time.Time `parquet:"updated_at,timestamp(microsecond)"`
}

// writeDay writes the sales of one day: ids day*10+1 .. day*10+n.
func writeDay(t *testing.T, dir string, day, n int, amount int64) {
	var rows []saleRow
	for i := 1; i <= n; i++ {
		rows = append(rows, saleRow{ID: int64(day*10 + i), Amount: amount})
	}
	// Written beside the folder, then renamed into it: a run polling the
	// folder never reads a file half written.
	path := filepath.Join(dir, "sales", fmt.Sprintf("day=2024-03-%02d", day), "part-0.parquet")
	tmp := filepath.Join(dir, fmt.Sprintf(".day-%d.parquet", day))
	writeParquet(t, tmp, rows)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// loadIDs returns, per day, the load ids of its rows.
func (s *stepper) loadIDs(table string) map[string][]string {
	s.t.Helper()
	ctx := context.Background()
	sink, err := destination.Open(ctx, s.p, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	defer sink.Close()
	b, err := sink.Scan(ctx, table)
	if err != nil {
		s.t.Fatal(err)
	}
	days, ids := b.Column("day"), b.Column("_sluice_load_id")
	out := map[string][]string{}
	for i := range b.Len() {
		d := time.Unix(days.Ints[i]*86400, 0).UTC().Format(time.DateOnly)
		if !slices.Contains(out[d], ids.Strs[i]) {
			out[d] = append(out[d], ids.Strs[i])
		}
	}
	return out
}

func (s *stepper) cursor(flow string) checkpoint.CursorState {
	s.t.Helper()
	ctx := context.Background()
	sink, err := destination.Open(ctx, s.p, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	defer sink.Close()
	store, err := flows.OpenCheckpoints(ctx, sink, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	defer store.Close()
	st, _, err := checkpoint.GetCursor(ctx, store, s.p.Pipeline, flow)
	if err != nil {
		s.t.Fatal(err)
	}
	return st
}

// salesSpec is a daily sales table partitioned by day and an incremental
// replace_partitions flow into it: dayExtra follows the day column's type,
// source follows path: in the files source, incremental is the mapping.
func salesSpec(dayExtra, source, incremental string) string {
	return fmt.Sprintf(`tables:
  - name: sales
    columns:
      - {name: id, type: int64}
      - {name: amount, type: int64}
      - {name: day, type: date%s}
    partition_by: [day]
flows:
  - name: daily
    target: sales
    kind: append
    write: replace_partitions
    source: {files: {path: %s}}
    incremental: %s
`, dayExtra, source, incremental)
}

func saleRows(days map[int][]int64) []string {
	var out []string
	for _, d := range slices.Sorted(maps.Keys(days)) {
		for i, amount := range days[d] {
			out = append(out, fmt.Sprintf("%d,%d,2024-03-%02d", d*10+i+1, amount, d))
		}
	}
	slices.SortFunc(out, func(a, b string) int {
		var x, y int
		fmt.Sscan(strings.Split(a, ",")[0], &x)
		fmt.Sscan(strings.Split(b, ",")[0], &y)
		return x - y
	})
	return out
}

func TestIncrementalReplacePartitionsEndToEnd(t *testing.T) {
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		s := newStepper(t, "127.0.0.1:1", dest(t), salesSpec("", `"sales/day=*/*.parquet"`, "{cursor: day, lag: 3}"))
		want := map[int][]int64{}
		for d := 1; d <= 10; d++ {
			writeDay(t, s.dir, d, 3, 1)
			want[d] = []int64{1, 1, 1}
		}
		if dname == "sharded" {
			refusesReplaceOnShards(t, s.tryUpdateWith(flows.Options{}))
			return
		}
		s.update()
		if got := s.rows("sales", "_sluice_load_id"); !slices.Equal(got, saleRows(want)) {
			t.Fatalf("run 1: %q\nwant %q", got, saleRows(want))
		}
		if st := s.cursor("daily"); st.LastValue != "2024-03-10" || st.Runs != 1 {
			t.Fatalf("cursor after run 1: %+v, want last_value 2024-03-10 after 1 run", st)
		}
		before := s.loadIDs("sales")

		// The last three days are restated (one row fewer on the 9th,
		// one more on the 10th) and a new day lands.
		writeDay(t, s.dir, 8, 3, 2)
		writeDay(t, s.dir, 9, 2, 2)
		writeDay(t, s.dir, 10, 4, 2)
		writeDay(t, s.dir, 11, 3, 2)
		want[8], want[9], want[10], want[11] = []int64{2, 2, 2}, []int64{2, 2}, []int64{2, 2, 2, 2}, []int64{2, 2, 2}
		s.update()
		if got := s.rows("sales", "_sluice_load_id"); !slices.Equal(got, saleRows(want)) {
			t.Fatalf("run 2: %q\nwant %q", got, saleRows(want))
		}
		after := s.loadIDs("sales")
		for d := 1; d <= 11; d++ {
			day := fmt.Sprintf("2024-03-%02d", d)
			switch {
			case d <= 6 && !slices.Equal(after[day], before[day]):
				t.Errorf("day %s outside the window was rewritten: load ids %v, before %v", day, after[day], before[day])
			case d >= 7 && len(after[day]) != 1:
				t.Errorf("day %s: load ids %v, want the one load of run 2", day, after[day])
			case d >= 7 && d <= 10 && slices.Equal(after[day], before[day]):
				t.Errorf("day %s inside the window kept its load %v", day, after[day])
			}
		}
		if st := s.cursor("daily"); st.LastValue != "2024-03-11" || st.Runs != 2 {
			t.Fatalf("cursor after run 2: %+v, want last_value 2024-03-11 after 2 runs", st)
		}
		if st := s.status("daily"); st.Cursor != "2024-03-11" || st.Runs != 2 {
			t.Fatalf("status: cursor %q after %d runs, want 2024-03-11 after 2", st.Cursor, st.Runs)
		}

		// Nothing changed: the window [03-08, ...) is rebuilt the same.
		s.update()
		if got := s.rows("sales", "_sluice_load_id"); !slices.Equal(got, saleRows(want)) {
			t.Fatalf("run 3: %q\nwant %q", got, saleRows(want))
		}
		if ids := s.loadIDs("sales"); !slices.Equal(ids["2024-03-07"], after["2024-03-07"]) {
			t.Errorf("day 2024-03-07 left the window but was rewritten: %v, before %v", ids["2024-03-07"], after["2024-03-07"])
		}

		// A full refresh forgets the cursor and loads every day again, once.
		s.updateWith(flows.Options{FullRefresh: true})
		if got := s.rows("sales", "_sluice_load_id"); !slices.Equal(got, saleRows(want)) {
			t.Fatalf("full refresh: %q\nwant %q", got, saleRows(want))
		}
		if st := s.cursor("daily"); st.LastValue != "2024-03-11" || st.Runs != 1 {
			t.Fatalf("cursor after the refresh: %+v, want last_value 2024-03-11 after 1 run", st)
		}
	})
}

func TestIncrementalCDCEndToEnd(t *testing.T) {
	at := func(hhmm string) time.Time {
		ts, err := time.Parse(time.RFC3339, "2024-03-01T"+hhmm+":00Z")
		if err != nil {
			t.Fatal(err)
		}
		return ts
	}
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		s := newStepper(t, "127.0.0.1:1", dest(t), `tables:
  - name: customers
    columns:
      - {name: id, type: int64}
      - {name: name, type: string}
      - {name: updated_at, type: timestamp}
flows:
  - name: changes
    target: customers
    kind: auto_cdc
    keys: [id]
    sequence_by: updated_at
    stored_as_scd_type: 1
    source:
      files:
        path: "changes/**/*.parquet"
        columns:
          - {name: id, type: int64}
          - {name: name, type: string}
          - {name: updated_at, type: timestamp}
    incremental: {cursor: updated_at, lag: 3600}
`)
		writeParquet(t, filepath.Join(s.dir, "changes", "day=2024-03-01", "a.parquet"), []updateRow{
			{1, "a", at("10:00")}, {2, "b", at("10:30")}, {3, "c", at("11:00")},
		})
		s.update()
		want := []string{"1,a,2024-03-01T10:00:00Z", "2,b,2024-03-01T10:30:00Z", "3,c,2024-03-01T11:00:00Z"}
		if got := s.rows("customers"); !slices.Equal(got, want) {
			t.Fatalf("run 1: %q, want %q", got, want)
		}
		// A late restatement within the lag, a new key, and a change
		// older than the window (never read: it lies before it).
		writeParquet(t, filepath.Join(s.dir, "changes", "day=2024-03-01", "b.parquet"), []updateRow{
			{1, "a2", at("10:15")}, {4, "d", at("11:30")}, {3, "c-old", at("09:00")},
		})
		s.update()
		want = []string{"1,a2,2024-03-01T10:15:00Z", "2,b,2024-03-01T10:30:00Z", "3,c,2024-03-01T11:00:00Z", "4,d,2024-03-01T11:30:00Z"}
		if got := s.rows("customers"); !slices.Equal(got, want) {
			t.Fatalf("run 2: %q, want %q", got, want)
		}
		if st := s.cursor("changes"); st.LastValue != "2024-03-01T11:30:00Z" {
			t.Fatalf("cursor after run 2: %+v, want 2024-03-01T11:30:00Z", st)
		}
		s.update()
		if got := s.rows("customers"); !slices.Equal(got, want) {
			t.Fatalf("run 3: %q, want %q", got, want)
		}
	})
}

func TestIncrementalAppendEndToEnd(t *testing.T) {
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		s := newStepper(t, "127.0.0.1:1", dest(t), `tables:
  - name: events
    columns:
      - {name: id, type: int64}
      - {name: seq, type: string}
flows:
  - name: events
    target: events
    kind: append
    source:
      files:
        path: "events/*.jsonl"
        columns:
          - {name: id, type: int64}
          - {name: seq, type: string}
    incremental: {cursor: seq, type: int64, initial_value: 2}
`)
		write := func(name string, lines ...string) {
			if err := os.MkdirAll(filepath.Join(s.dir, "events"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(s.dir, "events", name), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		write("a.jsonl", `{"id":1,"seq":"1"}`, `{"id":2,"seq":"2"}`, `{"id":3,"seq":"5"}`, `{"id":4,"seq":"x5"}`)
		s.update()
		want := []string{"2,2", "3,5"}
		if got := s.rows("events", "_sluice_load_id"); !slices.Equal(got, want) {
			t.Fatalf("run 1: %q, want %q", got, want)
		}
		// Rows at the last value were loaded; rows below it never are.
		write("b.jsonl", `{"id":5,"seq":"5"}`, `{"id":6,"seq":"6"}`, `{"id":7,"seq":"3"}`)
		s.update()
		want = []string{"2,2", "3,5", "6,6"}
		if got := s.rows("events", "_sluice_load_id"); !slices.Equal(got, want) {
			t.Fatalf("run 2: %q, want %q", got, want)
		}
		dls := s.rows(batch.DeadLettersTable)
		bad := 0
		for _, d := range dls {
			if strings.Contains(d, batch.ReasonBadCursor) && strings.Contains(d, "x5") {
				bad++
			}
		}
		if bad == 0 {
			t.Fatalf("dead letters %q: want the row with cursor x5 as %s", dls, batch.ReasonBadCursor)
		}
	})
}

// TestIncrementalRunMode: `run` starts a new incremental run when the files
// change, and only then.
func TestIncrementalRunMode(t *testing.T) {
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		s := newStepper(t, "127.0.0.1:1", dest(t), salesSpec("", `"sales/day=*/*.parquet"`, "{cursor: day, lag: 1}"))
		want := map[int][]int64{1: {1, 1}, 2: {1, 1}}
		writeDay(t, s.dir, 1, 2, 1)
		writeDay(t, s.dir, 2, 2, 1)
		ctx, cancel := context.WithCancel(context.Background())
		sink, err := destination.Open(ctx, s.p, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer sink.Close()
		done := make(chan error, 1)
		go func() {
			done <- flows.Execute(ctx, s.p, sink, flows.Options{Mode: flows.ModeRun, PollFiles: 50 * time.Millisecond,
				HeartbeatEvery: 200 * time.Millisecond, HeartbeatTTL: time.Second})
		}()
		waitRows := func(what string, want []string) {
			t.Helper()
			deadline := time.Now().Add(30 * time.Second)
			for {
				var got []string
				if b, err := sink.Scan(ctx, "sales"); err == nil {
					got = rowStrings(b.Select("id", "amount", "day"))
				}
				if slices.Equal(got, want) {
					return
				}
				if time.Now().After(deadline) {
					cancel()
					t.Fatalf("%s: %q, want %q", what, got, want)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		if dname == "sharded" {
			select {
			case err := <-done:
				refusesReplaceOnShards(t, err)
			case <-time.After(30 * time.Second):
				cancel()
				t.Fatal("run on several shards with write: replace_partitions: still running after 30 s, want a refusal")
			}
			return
		}
		waitRows("first run", saleRows(want))
		writeDay(t, s.dir, 2, 3, 2)
		writeDay(t, s.dir, 3, 1, 2)
		want[2], want[3] = []int64{2, 2, 2}, []int64{2}
		waitRows("after new files", saleRows(want))
		// The run stores its cursor after its last load. The two new
		// files may be seen by one run or, when a poll falls between them,
		// by two.
		deadline := time.Now().Add(30 * time.Second)
		st := s.cursor("daily")
		for ; st.LastValue != "2024-03-03"; st = s.cursor("daily") {
			if time.Now().After(deadline) {
				cancel()
				t.Fatalf("cursor %+v, want last_value 2024-03-03", st)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if st.Runs != 2 && st.Runs != 3 {
			t.Errorf("cursor %+v after the first run and the new files, want 2 or 3 runs", st)
		}
		time.Sleep(500 * time.Millisecond) // ten polls without a change
		if got := s.cursor("daily").Runs; got != st.Runs {
			t.Errorf("runs went from %d to %d without a file changing", st.Runs, got)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("run: %v", err)
		}
	})
}

// TestReplacePartitionsNeedsHiveColumns: the partition columns must come
// from the source's Hive folders, else the run stops before writing.
func TestReplacePartitionsNeedsHiveColumns(t *testing.T) {
	for _, tc := range []struct {
		name, path, columns, day, want string
	}{
		{"not a folder", "flat/*.parquet", "", "", "is not a Hive folder"},
		{"not declared", "sales/day=*/*.parquet", "columns: [{name: id, type: int64}, {name: amount, type: int64}]", ", nullable: true", "declare it there"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStepper(t, "127.0.0.1:1", "  local: {path: "+t.TempDir()+"}", salesSpec(tc.day, fmt.Sprintf("%q, %s", tc.path, tc.columns), "{cursor: id}"))
			writeDay(t, s.dir, 1, 2, 1)
			writeParquet(t, filepath.Join(s.dir, "flat", "a.parquet"), []saleRow{{1, 1}})
			err := s.tryUpdateWith(flows.Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("update: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// refusesReplaceOnShards checks that err is the refusal of write:
// replace_partitions on a cluster of several shards (docs/clickhouse.md),
// naming the remedy.
func refusesReplaceOnShards(t *testing.T, err error) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), "replace partitions of sales") || !strings.Contains(err.Error(), "write: append, or a cluster of one shard") {
		t.Fatalf("replace_partitions on several shards: %v, want the refusal naming the table and the remedy", err)
	}
}
