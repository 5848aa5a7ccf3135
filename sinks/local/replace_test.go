package local

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
)

var (
	dayCol    = batch.Column{Name: "day", Type: batch.Date}
	regionCol = batch.Column{Name: "region", Type: batch.String, Nullable: true}
	genSchema = batch.Schema{Columns: []batch.Column{{Name: "id", Type: batch.Int64}, dayCol, {Name: "gen", Type: batch.Int64}}}
	// events and events2 are partitioned by day; gen tags the load that
	// wrote a row.
	eventsTable  = sinks.Table{Name: "events", Schema: genSchema, PartitionBy: []string{"day"}}
	events2Table = sinks.Table{Name: "events2", Schema: genSchema, PartitionBy: []string{"day"}}
	base         = batch.DateFromTime(time.Date(2024, 2, 27, 0, 0, 0, 0, time.UTC))
)

// day returns the nth day of the tests' tables.
func day(n int) batch.DateValue { return base + batch.DateValue(n) }

// genRows returns n rows of day d written by generation gen: ids
// gen*100 + d*10 + i.
func genRows(gen int64, d, n int) *batch.Batch {
	b := batch.New(genSchema, n)
	for i := range n {
		b.Vectors[0].AppendInt(gen*100 + int64(d)*10 + int64(i))
		b.Vectors[1].AppendInt(int64(day(d)))
		b.Vectors[2].AppendInt(gen)
	}
	return b
}

// daysOf returns the partition list of the given days.
func daysOf(days ...int) *batch.Batch {
	b := batch.New(batch.Schema{Columns: []batch.Column{dayCol}}, len(days))
	for _, d := range days {
		b.Vectors[0].AppendInt(int64(day(d)))
	}
	return b
}

// replaceDays begins a load that replaces the given days of tables and
// writes rows to them.
func replaceDays(ctx context.Context, s *Sink, id string, tables []string, days []int, rows ...*batch.Batch) (sinks.Load, error) {
	ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: id, Pipeline: "p", Flow: "r", Targets: tables})
	if err != nil {
		return nil, err
	}
	for _, t := range tables {
		if days != nil {
			if err := ld.(sinks.PartitionLoad).ReplacePartitions(ctx, t, daysOf(days...)); err != nil {
				ld.Abort(ctx)
				return nil, err
			}
		}
		for _, b := range rows {
			if err := ld.Write(ctx, t, b); err != nil {
				ld.Abort(ctx)
				return nil, err
			}
		}
	}
	return ld, nil
}

func commitDays(ctx context.Context, s *Sink, tables []string, days []int, rows ...*batch.Batch) error {
	id := nextLoadID()
	ld, err := replaceDays(ctx, s, id, tables, days, rows...)
	if err != nil {
		return err
	}
	return ld.Commit(ctx, sinks.Commit{To: batch.Positions{{File: id, Done: true}}})
}

// dayGens describes a table by day: per day, its generations and their row
// counts ("2x3 5x1"), checking that each row's id is its generation's.
func dayGens(t *testing.T, s *Sink, table string) map[batch.DateValue]string {
	t.Helper()
	b, err := s.Scan(context.Background(), table)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[batch.DateValue]map[int64]int{}
	for i := range b.Len() {
		d, gen := batch.DateValue(b.Vectors[1].Ints[i]), b.Vectors[2].Ints[i]
		if id := b.Vectors[0].Ints[i]; id/100 != gen {
			t.Fatalf("%s: row %d of generation %d", table, id, gen)
		}
		if counts[d] == nil {
			counts[d] = map[int64]int{}
		}
		counts[d][gen]++
	}
	out := map[batch.DateValue]string{}
	for d, gens := range counts {
		var parts []string
		for g, n := range gens {
			parts = append(parts, fmt.Sprintf("%dx%d", g, n))
		}
		slices.Sort(parts)
		out[d] = strings.Join(parts, " ")
	}
	return out
}

func expectGens(t *testing.T, s *Sink, table, what string, want map[batch.DateValue]string) {
	t.Helper()
	if got := dayGens(t, s, table); !mapsEqual(got, want) {
		t.Fatalf("%s: %s holds %v, want %v", what, table, got, want)
	}
}

func mapsEqual[K comparable](a, b map[K]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestReplaceLayout(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, testOpts(dir))
	table := sinks.Table{Name: "ev", Schema: batch.Schema{Columns: []batch.Column{{Name: "id", Type: batch.Int64}, dayCol, regionCol}},
		PartitionBy: []string{"day", "region"}}
	if err := s.Ensure(ctx, []sinks.Table{table}); err != nil {
		t.Fatal(err)
	}
	rows := func(id int64, d int, region any) *batch.Batch {
		b := batch.New(table.Schema, 1)
		b.Vectors[0].AppendInt(id)
		b.Vectors[1].AppendInt(int64(day(d)))
		if region == nil {
			b.Vectors[2].AppendNull()
		} else {
			b.Vectors[2].AppendString(region.(string))
		}
		return b
	}
	commit := func(parts *batch.Batch, bs ...*batch.Batch) {
		t.Helper()
		ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: nextLoadID(), Pipeline: "p", Flow: "r", Targets: []string{"ev"}})
		if err != nil {
			t.Fatal(err)
		}
		if parts != nil {
			if err := ld.(sinks.PartitionLoad).ReplacePartitions(ctx, "ev", parts); err != nil {
				t.Fatal(err)
			}
		}
		for _, b := range bs {
			if err := ld.Write(ctx, "ev", b); err != nil {
				t.Fatal(err)
			}
		}
		if err := ld.Commit(ctx, sinks.Commit{}); err != nil {
			t.Fatal(err)
		}
	}
	commit(nil, rows(1, 1, "a/b=c%d"), rows(2, 1, nil), rows(3, 2, "x"), rows(4, 1, "a"))
	escaped := "day=2024-02-28/region=a%2Fb%3Dc%25d"
	exists := func(want bool, folders ...string) {
		t.Helper()
		for _, f := range folders {
			_, err := os.Stat(filepath.Join(dir, "ev", f))
			if got := err == nil; got != want {
				t.Errorf("folder %s exists: %v, want %v", f, got, want)
			}
		}
	}
	exists(true, escaped, "day=2024-02-28/region=__HIVE_DEFAULT_PARTITION__", "day=2024-02-29/region=x", "day=2024-02-28/region=a")

	// Replace (day 1, a/b=c%d) with a new row and empty (day 2, x).
	parts := batch.New(batch.Schema{Columns: []batch.Column{dayCol, regionCol}}, 2)
	parts.Vectors[0].AppendInt(int64(day(1)))
	parts.Vectors[1].AppendString("a/b=c%d")
	parts.Vectors[0].AppendInt(int64(day(2)))
	parts.Vectors[1].AppendString("x")
	commit(parts, rows(5, 1, "a/b=c%d"))
	exists(true, escaped, "day=2024-02-28/region=__HIVE_DEFAULT_PARTITION__", "day=2024-02-28/region=a")
	exists(false, "day=2024-02-29")
	ents, err := os.ReadDir(filepath.Join(dir, "ev", escaped))
	if err != nil || len(ents) != 1 {
		t.Fatalf("%s holds %v (%v), want the one file of the replacing load", escaped, ents, err)
	}
	data, err := os.ReadFile(filepath.Join(dir, stateDir, "ledger.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	want := `"replace":[{"table":"ev","dirs":["day=2024-02-28/region=a%2Fb%3Dc%25d","day=2024-02-29/region=x"]}]`
	if !strings.Contains(string(data), want) {
		t.Fatalf("ledger lacks %s:\n%s", want, data)
	}
}

// TestReplaceCrash kills a replacing load of two tables at each step of
// the commit protocol: after Recover each partition is wholly old (before
// the commit point) or wholly new (after).
func TestReplaceCrash(t *testing.T) {
	tests := []struct {
		name      string
		at        moment
		nth       int
		committed bool
	}{
		{"after staging", afterStaging, 1, false},
		{"in the ledger append", inLedgerAppend, 1, false},
		{"after the ledger append", afterLedgerAppend, 1, true},
		{"before the first swap", beforeSwap, 1, true},
		{"after the first swap", afterSwap, 1, true},
		{"before the second swap", beforeSwap, 2, true},
		{"after the second swap", afterSwap, 2, true},
	}
	old := map[batch.DateValue]string{day(1): "1x3", day(2): "1x3", day(3): "1x3"}
	replaced := map[batch.DateValue]string{day(1): "2x2", day(3): "1x3", day(4): "2x1"}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			s1 := openTest(t, testOpts(dir))
			tables := []string{eventsTable.Name, events2Table.Name}
			if err := s1.Ensure(ctx, []sinks.Table{eventsTable, events2Table}); err != nil {
				t.Fatal(err)
			}
			if err := commitDays(ctx, s1, tables, nil, genRows(1, 1, 3), genRows(1, 2, 3), genRows(1, 3, 3)); err != nil {
				t.Fatal(err)
			}
			// Days 1 and 2 are replaced by rows of days 1 and 4 (unlisted).
			ld, err := replaceDays(ctx, s1, "crashing", tables, []int{1, 2}, genRows(2, 1, 2), genRows(2, 4, 1))
			if err != nil {
				t.Fatal(err)
			}
			cr := crash(t, s1, tc.at, tc.nth)
			expectCrash(t, cr, "Commit", ld.Commit(ctx, sinks.Commit{To: batch.Positions{{File: "crashing", Done: true}}}))
			s1.kill()
			want := old
			if tc.committed {
				want = replaced
			}
			for i := range 2 {
				s2 := openTest(t, testOpts(dir))
				if err := s2.Recover(ctx); err != nil {
					t.Fatalf("Recover %d: %v", i, err)
				}
				for _, table := range tables {
					expectGens(t, s2, table, fmt.Sprintf("after Recover %d", i), want)
					if v := versionDirs(t, dir, table); len(v) != 1 {
						t.Errorf("%s has versions %v after recovery, want only the current one", table, v)
					}
				}
				if left := entries(t, filepath.Join(dir, stateDir, "staging")); len(left) != 0 {
					t.Errorf("staging holds %v after recovery", left)
				}
			}
		})
	}
}

// TestReplacePublishedTogether publishes a plain load and a replacing one
// in one version (the first committed by a writer that died before
// publishing): the replacement applies in commit order.
func TestReplacePublishedTogether(t *testing.T) {
	tests := []struct {
		name         string
		replaceFirst bool
		want         map[batch.DateValue]string
	}{
		// The appended rows of day 1 are replaced with the rest of the day.
		{"append then replace", false, map[batch.DateValue]string{day(1): "3x1", day(2): "1x2"}},
		// The replacement, then rows appended to the replaced day.
		{"replace then append", true, map[batch.DateValue]string{day(1): "2x2 3x1", day(2): "1x2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			s1 := openTest(t, testOpts(dir))
			tables := []string{eventsTable.Name}
			if err := s1.Ensure(ctx, []sinks.Table{eventsTable}); err != nil {
				t.Fatal(err)
			}
			if err := commitDays(ctx, s1, tables, nil, genRows(1, 1, 2), genRows(1, 2, 2)); err != nil {
				t.Fatal(err)
			}
			first, second := []int(nil), []int{1}
			if tc.replaceFirst {
				first, second = second, first
			}
			ld, err := replaceDays(ctx, s1, "dies", tables, first, genRows(2, 1, 2))
			if err != nil {
				t.Fatal(err)
			}
			cr := crash(t, s1, afterLedgerAppend, 1)
			expectCrash(t, cr, "Commit", ld.Commit(ctx, sinks.Commit{}))
			s1.kill()
			s2 := openTest(t, testOpts(dir))
			before, err := s2.current(eventsTable.Name)
			if err != nil {
				t.Fatal(err)
			}
			if err := commitDays(ctx, s2, tables, second, genRows(3, 1, 1)); err != nil {
				t.Fatal(err)
			}
			after, err := s2.current(eventsTable.Name)
			if err != nil {
				t.Fatal(err)
			}
			if after.Version != before.Version+1 || after.Through != 3 {
				t.Errorf("version %d through %d after the commit, want %d through 3: both loads in one version",
					after.Version, after.Through, before.Version+1)
			}
			expectGens(t, s2, eventsTable.Name, "after both loads", tc.want)
			if err := s2.Recover(ctx); err != nil {
				t.Fatal(err)
			}
			expectGens(t, s2, eventsTable.Name, "after Recover", tc.want)
		})
	}
}

// TestReplaceCompactionRace replaces a partition while a compaction merges
// its files: the compaction, whose inputs are no longer all current, is
// dropped and does not bring the replaced rows back.
func TestReplaceCompactionRace(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := testOpts(dir)
	opts.CompactMinFiles = 2
	s1 := openTest(t, opts)
	s2 := openTest(t, opts)
	tables := []string{eventsTable.Name}
	if err := s1.Ensure(ctx, []sinks.Table{eventsTable}); err != nil {
		t.Fatal(err)
	}
	for gen := int64(1); gen <= 3; gen++ {
		if err := commitDays(ctx, s1, tables, nil, genRows(gen, 1, 2), genRows(gen, 2, 2)); err != nil {
			t.Fatal(err)
		}
	}
	raced := false
	when(t, s1, compactMerged, 1, func() {
		raced = true
		if err := commitDays(ctx, s2, tables, []int{1}, genRows(9, 1, 1)); err != nil {
			t.Errorf("replacing during the compaction: %v", err)
		}
	})
	before, err := s1.current(eventsTable.Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := s1.Compact(ctx, eventsTable.Name); err != nil {
		t.Fatalf("Compact: %v", err)
	}
	if !raced {
		t.Fatal("the compaction did not reach its merge")
	}
	after, err := s1.current(eventsTable.Name)
	if err != nil {
		t.Fatal(err)
	}
	if after.Version != before.Version+1 {
		t.Errorf("version %d after the race, want %d: the replacement's only", after.Version, before.Version+1)
	}
	want := map[batch.DateValue]string{day(1): "9x1", day(2): "1x2 2x2 3x2"}
	expectGens(t, s1, eventsTable.Name, "after the compaction lost the race", want)
	// The next compaction merges day 2 and keeps day 1 replaced.
	if err := s1.Compact(ctx, eventsTable.Name); err != nil {
		t.Fatalf("Compact: %v", err)
	}
	m, err := s1.current(eventsTable.Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Files) != 2 {
		t.Errorf("%d files after compaction, want 2 (one per day)", len(m.Files))
	}
	expectGens(t, s1, eventsTable.Name, "after compaction", want)
}

// TestReplaceRefusedLocally covers what the conformance suite does not: a
// partition value the folders cannot name, and a load that is finished.
func TestReplaceRefusedLocally(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, testOpts(t.TempDir()))
	table := sinks.Table{Name: "ev", Schema: batch.Schema{Columns: []batch.Column{{Name: "id", Type: batch.Int64}, regionCol}},
		PartitionBy: []string{"region"}}
	if err := s.Ensure(ctx, []sinks.Table{table}); err != nil {
		t.Fatal(err)
	}
	ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: nextLoadID(), Pipeline: "p", Flow: "r", Targets: []string{"ev"}})
	if err != nil {
		t.Fatal(err)
	}
	pl := ld.(sinks.PartitionLoad)
	long := batch.New(batch.Schema{Columns: []batch.Column{regionCol}}, 1)
	long.Vectors[0].AppendString(strings.Repeat("x", 300))
	if err := pl.ReplacePartitions(ctx, "ev", long); err == nil {
		t.Error("ReplacePartitions of a value longer than a folder name succeeded")
	}
	if err := ld.Commit(ctx, sinks.Commit{}); err != nil {
		t.Fatal(err)
	}
	ok := batch.New(batch.Schema{Columns: []batch.Column{regionCol}}, 1)
	ok.Vectors[0].AppendString("x")
	if err := pl.ReplacePartitions(ctx, "ev", ok); err == nil {
		t.Error("ReplacePartitions after Commit succeeded")
	}
}

const replaceChildEnv = "SLUICE_LOCAL_REPLACE_CHILD"

// The kill test's loads: generation g replaces the days of killDays in
// mask(g) with n(g, d) rows each (none for some), and appends 1 + g%3 rows
// to day appendDay, which no load replaces.
const (
	killDays  = 4
	appendDay = killDays
)

func killMask(g int64) int           { return 1 + int(g*5)%15 }
func killRows(g int64, d int) int    { return int(g*3+int64(d)*5) % 4 }
func killAppended(g int64) int       { return 1 + int(g%3) }
func killLoadID(g int64) string      { return fmt.Sprintf("R%d-%d-%d", g, os.Getpid(), loadSeq.Add(1)) }
func killListed(g int64, d int) bool { return killMask(g)&(1<<d) != 0 }

// killGen returns the generation of a load of the kill test.
func killGen(loadID string) int64 {
	g, _ := strconv.ParseInt(strings.SplitN(loadID[1:], "-", 2)[0], 10, 64)
	return g
}

// TestKillDuringReplace runs a writer of replacing loads in a child
// process, kills it with SIGKILL at arbitrary moments (mid-load,
// mid-commit, mid-publish, mid-compaction), and checks after each Recover
// that every day holds exactly the rows of the last committed load that
// replaced it, never older rows beside them nor part of them.
func TestKillDuringReplace(t *testing.T) {
	if dir := os.Getenv(replaceChildEnv); dir != "" {
		replaceChild(dir)
		return
	}
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, testOpts(dir))
	if err := s.Ensure(ctx, []sinks.Table{eventsTable}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	var lastLoads, midPublish int
	const rounds = 8
	for round := range rounds {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillDuringReplace$", "-test.count=1")
		cmd.Env = append(os.Environ(), replaceChildEnv+"="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		if !sc.Scan() {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("round %d: the child did not start committing", round)
		}
		go func() {
			for sc.Scan() {
			}
		}()
		time.Sleep(time.Duration(20+rng.IntN(250)) * time.Millisecond)
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		cmd.Wait()
		if unpublished(t, s) {
			midPublish++
		}
		if err := s.Recover(ctx); err != nil {
			t.Fatalf("round %d: Recover: %v", round, err)
		}
		lastLoads = checkReplaced(t, s, round)
		if left := entries(t, filepath.Join(dir, stateDir, "staging")); len(left) != 0 {
			t.Errorf("round %d: staging holds %v after recovery", round, left)
		}
	}
	t.Logf("%d replacing loads committed over %d lives of the writer; %d killed between a commit point and its swap",
		lastLoads, rounds, midPublish)
	if lastLoads < rounds {
		t.Fatalf("%d loads committed over %d lives, want at least one per life", lastLoads, rounds)
	}
}

// unpublished reports whether the ledger holds a load the table lacks.
func unpublished(t *testing.T, s *Sink) bool {
	t.Helper()
	led, err := s.Ledger(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.current(eventsTable.Name)
	if err != nil {
		t.Fatal(err)
	}
	return int(m.Through) < len(led.Loads)
}

// checkReplaced compares the table with what the committed loads make of
// it and returns their number.
func checkReplaced(t *testing.T, s *Sink, round int) int {
	t.Helper()
	led, err := s.Ledger(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	last := make([]int64, killDays) // per day, the generation that replaced it last
	appended := map[int64]int{}
	for _, l := range led.Loads {
		g := killGen(l.LoadID)
		for d := range killDays {
			if killListed(g, d) {
				last[d] = g
			}
		}
		appended[g] = killAppended(g)
	}
	want := map[batch.DateValue]string{}
	for d, g := range last {
		if n := killRows(g, d); g > 0 && n > 0 {
			want[day(d)] = fmt.Sprintf("%dx%d", g, n)
		}
	}
	var parts []string
	for g, n := range appended {
		parts = append(parts, fmt.Sprintf("%dx%d", g, n))
	}
	slices.Sort(parts)
	if len(parts) > 0 {
		want[day(appendDay)] = strings.Join(parts, " ")
	}
	expectGens(t, s, eventsTable.Name, fmt.Sprintf("round %d", round), want)
	return len(led.Loads)
}

// replaceChild commits replacing loads until it is killed, compacting in
// the background meanwhile.
func replaceChild(dir string) {
	ctx := context.Background()
	opts := testOpts(dir)
	opts.CompactMinFiles = 2
	opts.CompactInterval = 2 * time.Millisecond
	s, err := Open(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := s.Recover(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for {
		led, err := s.Ledger(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		g := int64(1)
		if n := len(led.Loads); n > 0 {
			g = killGen(led.Loads[n-1].LoadID) + 1
		}
		var days []int
		rows := []*batch.Batch{genRows(g, appendDay, killAppended(g))}
		for d := range killDays {
			if killListed(g, d) {
				days = append(days, d)
				rows = append(rows, genRows(g, d, killRows(g, d)))
			}
		}
		id := killLoadID(g)
		ld, err := replaceDays(ctx, s, id, []string{eventsTable.Name}, days, rows...)
		if err == nil {
			err = ld.Commit(ctx, sinks.Commit{To: batch.Positions{{File: id, Done: true}}})
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("committed")
	}
}
