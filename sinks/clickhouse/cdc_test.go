package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
)

var (
	custSchema = batch.Schema{Columns: []batch.Column{
		{Name: "id", Type: batch.Int64},
		{Name: "name", Type: batch.String, Nullable: true},
	}}
	custTable = sinks.Table{Name: "cust", Schema: custSchema, Kind: sinks.KindSCD1, Keys: []string{"id"}}

	histSchema = batch.Schema{Columns: []batch.Column{
		{Name: "id", Type: batch.Int64},
		{Name: "name", Type: batch.String, Nullable: true},
		{Name: "__START_AT", Type: batch.Int64},
		{Name: "__END_AT", Type: batch.Int64, Nullable: true},
	}}
	histTable = sinks.Table{Name: "hist", Schema: histSchema, Kind: sinks.KindSCD2, Keys: []string{"id"}}
)

func ckey(id int64) string  { return fmt.Sprintf("k\x00\xff%08d", id) }
func cseq(seq int64) string { return fmt.Sprintf("s\x00%08d", seq) }

// custRows returns SCD type 1 rows (id, name, seq); name "" is NULL.
func custRows(rs ...struct {
	id   int64
	name string
	seq  int64
}) (*batch.Batch, []string, []string) {
	b := batch.New(custSchema, len(rs))
	var keys, seqs []string
	for _, r := range rs {
		b.Vectors[0].AppendInt(r.id)
		if r.name == "" {
			b.Vectors[1].AppendNull()
		} else {
			b.Vectors[1].AppendString(r.name)
		}
		keys = append(keys, ckey(r.id))
		seqs = append(seqs, cseq(r.seq))
	}
	return b, keys, seqs
}

type crow = struct {
	id   int64
	name string
	seq  int64
}

// cdcOp is one call on a load.
type cdcOp func(ctx context.Context, ld sinks.CDCLoad) error

func up(rs ...crow) cdcOp { return upIn(custTable.Name, rs...) }

// upIn upserts rows of custSchema into a table.
func upIn(table string, rs ...crow) cdcOp {
	return func(ctx context.Context, ld sinks.CDCLoad) error {
		b, k, s := custRows(rs...)
		return ld.Upsert(ctx, table, b, k, s)
	}
}

func rm(rs ...crow) cdcOp { return rmIn(custTable.Name, rs...) }

// rmIn removes rows of custSchema from a table.
func rmIn(table string, rs ...crow) cdcOp {
	return func(ctx context.Context, ld sinks.CDCLoad) error {
		b, k, s := custRows(rs...)
		return ld.Remove(ctx, table, b, k, s)
	}
}

func states(entries ...sinks.StateEntry) cdcOp { return statesIn(custTable.Name, entries...) }

func statesIn(table string, entries ...sinks.StateEntry) cdcOp {
	return func(ctx context.Context, ld sinks.CDCLoad) error {
		return ld.PutState(ctx, table, entries)
	}
}

// cdcLoad applies ops in one load of custTable and commits it: load n of
// topic "c" continues from offset n (none for the first, n = 0) to n+1.
func cdcLoad(ctx context.Context, s *Sink, id string, n int64, ops ...cdcOp) error {
	return cdcLoadTo(ctx, s, custTable.Name, id, n, ops...)
}

// cdcLoadTo is cdcLoad into another target.
func cdcLoadTo(ctx context.Context, s *Sink, table, id string, n int64, ops ...cdcOp) error {
	ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: id, Pipeline: "p", Flow: "f", Targets: []string{table}})
	if err != nil {
		return err
	}
	cl := ld.(sinks.CDCLoad)
	for _, op := range ops {
		if err := op(ctx, cl); err != nil {
			ld.Abort(ctx)
			return err
		}
	}
	from := n
	if n == 0 {
		from = -1
	}
	return ld.Commit(ctx, sinks.Commit{From: batch.Positions{{Topic: "c", Offset: from}}, To: batch.Positions{{Topic: "c", Offset: n + 1}}})
}

// custContent queries the target's name directly, as a user would.
func custContent(t *testing.T, s *Sink) []string {
	t.Helper()
	rows, err := s.conn.Query(context.Background(), "SELECT id, name FROM "+s.table(custTable.Name)+" ORDER BY id")
	if err != nil {
		t.Fatalf("query %s: %v", custTable.Name, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id int64
		var name *string
		if err := rows.Scan(&id, &name); err != nil {
			t.Fatal(err)
		}
		n := "NULL"
		if name != nil {
			n = *name
		}
		out = append(out, fmt.Sprintf("%d|%s", id, n))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func expectCust(t *testing.T, s *Sink, what string, want ...string) {
	t.Helper()
	if got := custContent(t, s); !slices.Equal(got, want) {
		t.Fatalf("%s: %s holds %v, want %v", what, custTable.Name, got, want)
	}
}

func expectStates(t *testing.T, s *Sink, what string, keys []string, want map[string]string) {
	t.Helper()
	got, err := s.GetState(context.Background(), custTable.Name, keys)
	if err != nil {
		t.Fatalf("%s: GetState: %v", what, err)
	}
	g := map[string]string{}
	for k, v := range got {
		g[k] = string(v)
	}
	if fmt.Sprint(g) != fmt.Sprint(want) {
		t.Fatalf("%s: states %q, want %q", what, g, want)
	}
}

func cdcSetup(t *testing.T) (db string, open func() *Sink) {
	addr := serverAddr(t)
	db = newDatabase(t, addr)
	open = func() *Sink {
		s := openSink(t, addr, db, func(o *Options) { o.Pipeline = "p" })
		s.setGrace(-time.Second)
		return s
	}
	s := open()
	if err := s.Ensure(context.Background(), []sinks.Table{custTable, histTable}); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	s.Close() // with no grace, a live sink takes other sinks' loads for abandoned
	return db, open
}

func queryStrings(t *testing.T, s *Sink, q string, args ...any) []string {
	t.Helper()
	rows, err := s.conn.Query(context.Background(), q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

// TestCDCTables checks the physical tables and views Ensure creates.
func TestCDCTables(t *testing.T) {
	_, open := cdcSetup(t)
	s := open()
	ctx := context.Background()
	tests := []struct {
		table, engine, ordering string
	}{
		{custTable.Name, "View", ""},
		{physName(custTable.Name), "ReplacingMergeTree", "id,_sluice_key"},
		{histTable.Name, "View", ""},
		{physName(histTable.Name), "ReplacingMergeTree", "id,_sluice_key,_sluice_seq"},
		{cdcStateTable, "ReplacingMergeTree", "target,key"},
		{leasesTable, "ReplacingMergeTree", "target"},
	}
	for _, tc := range tests {
		t.Run(tc.table, func(t *testing.T) {
			info, err := s.keysOnly(ctx, tc.table)
			if err != nil || info == nil {
				t.Fatalf("describe: %v, %v", info, err)
			}
			if info.engine != tc.engine || normKey(info.sortingKey) != tc.ordering {
				t.Fatalf("%s ORDER BY %q, want %s ORDER BY %q", info.engine, info.sortingKey, tc.engine, tc.ordering)
			}
		})
	}
	cols := queryStrings(t, s, "SELECT name FROM system.columns WHERE database = ? AND table = ?", s.opts.Database, custTable.Name)
	if want := []string{"id", "name"}; !slices.Equal(cols, want) {
		t.Fatalf("view columns %v, want %v", cols, want)
	}
	// A nullable key stays out of the sorting key; an append table's name
	// cannot become a CDC target.
	nk := sinks.Table{Name: "nk", Kind: sinks.KindSCD1, Keys: []string{"a", "b"}, Schema: batch.Schema{Columns: []batch.Column{
		{Name: "a", Type: batch.String, Nullable: true}, {Name: "b", Type: batch.Int64}}}}
	if err := s.Ensure(ctx, []sinks.Table{nk, {Name: "events", Schema: eventsTable.Schema}}); err != nil {
		t.Fatal(err)
	}
	if info, _ := s.keysOnly(ctx, physName("nk")); info == nil || normKey(info.sortingKey) != "b,_sluice_key" {
		t.Fatalf("sorting key of nk: %+v", info)
	}
	err := s.Ensure(ctx, []sinks.Table{{Name: "events", Schema: eventsTable.Schema, Kind: sinks.KindSCD1, Keys: []string{"id"}}})
	if err == nil || !strings.Contains(err.Error(), "cannot change between append and CDC") {
		t.Fatalf("Ensure of an append table as a CDC target: %v", err)
	}
}

func TestValidateCDC(t *testing.T) {
	cols := batch.Schema{Columns: []batch.Column{{Name: "id", Type: batch.Int64}, {Name: "day", Type: batch.Date}, {Name: "v", Type: batch.String}}}
	ok := sinks.Table{Name: "t", Schema: cols, Kind: sinks.KindSCD1, Keys: []string{"id", "day"}}
	tests := []struct {
		name   string
		modify func(*sinks.Table)
		want   string // "" accepted
	}{
		{"valid", func(*sinks.Table) {}, ""},
		{"order_by keys", func(t *sinks.Table) { t.OrderBy = []string{"day", "id"} }, ""},
		{"partition_by key", func(t *sinks.Table) { t.PartitionBy = []string{"day"} }, ""},
		{"no keys", func(t *sinks.Table) { t.Keys = nil }, "needs key columns"},
		{"unknown key", func(t *sinks.Table) { t.Keys = []string{"x"} }, "not a column"},
		{"key twice", func(t *sinks.Table) { t.Keys = []string{"id", "id"} }, "named twice"},
		{"order_by not a key", func(t *sinks.Table) { t.OrderBy = []string{"v"} }, "not a key"},
		{"partition_by not a key", func(t *sinks.Table) { t.PartitionBy = []string{"v"} }, "not a key"},
		{"long name", func(t *sinks.Table) { t.Name = strings.Repeat("a", chsql.MaxIdent-len(physPrefix)+1) }, "at most"},
		{"append kind", func(t *sinks.Table) { t.Kind = 7 }, "unknown kind"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tab := ok
			tc.modify(&tab)
			err := validateCDC(tab)
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("validateCDC: %v, want %q", err, tc.want)
			}
		})
	}
}

// TestCDCVersionOrder checks that versions order a load's parts by phase
// whatever the call order, later calls of a phase above earlier ones, and
// every version of a later load above the earlier load's.
func TestCDCVersionOrder(t *testing.T) {
	l1 := &load{cdc: map[string]*loadCDC{"t": {base: 1_700_000_000_000}}}
	l2 := &load{cdc: map[string]*loadCDC{"t": {base: 1_700_000_000_001}}}
	v := func(l *load, phase int) uint64 {
		got, err := l.cdcVersion(context.Background(), "t", phase)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	up1, rm1, tr1, up1b, st1 := v(l1, phaseUpsert), v(l1, phaseRemove), v(l1, phaseTruncate), v(l1, phaseUpsert), v(l1, phaseState)
	tr2 := v(l2, phaseTruncate)
	order := []uint64{tr1, rm1, up1, up1b, st1, tr2}
	if !slices.IsSorted(order) || len(slices.Compact(slices.Clone(order))) != len(order) {
		t.Fatalf("versions truncate, remove, upsert, upsert, state, next load's truncate = %v: want strictly increasing", order)
	}
}

func TestLastOfEachKey(t *testing.T) {
	tests := []struct {
		name string
		in   []sinks.StateEntry
		want string
	}{
		{"distinct", []sinks.StateEntry{{Key: "a", Value: []byte("1")}, {Key: "b"}}, "a=1 b="},
		{"repeated", []sinks.StateEntry{{Key: "a", Value: []byte("1")}, {Key: "b"}, {Key: "a", Value: []byte("2")}}, "b= a=2"},
		{"in order, the table's state last", []sinks.StateEntry{{Key: "a"}, {Key: "b", Value: []byte("1")}, {Key: "", Value: []byte("t")}}, "a= b=1 =t"},
		{"the table's state twice", []sinks.StateEntry{{Key: "", Value: []byte("1")}, {Key: "a"}, {Key: "", Value: []byte("2")}}, "a= =2"},
		{"repeated in order", []sinks.StateEntry{{Key: "a", Value: []byte("1")}, {Key: "a", Value: []byte("2")}, {Key: "b"}}, "a=2 b="},
		{"out of order", []sinks.StateEntry{{Key: "b"}, {Key: "a", Value: []byte("1")}}, "b= a=1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var parts []string
			for _, e := range lastOfEachKey(tc.in) {
				parts = append(parts, e.Key+"="+string(e.Value))
			}
			if got := strings.Join(parts, " "); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestCDCViewIsLogicalContent queries the target's name directly: it shows
// one row per live key, while the physical table also holds the replaced
// versions and removal markers; rows of the same load attached twice
// collapse.
func TestCDCViewIsLogicalContent(t *testing.T) {
	_, open := cdcSetup(t)
	s := open()
	ctx := context.Background()
	if err := cdcLoad(ctx, s, "l1", 0, up(crow{1, "a", 1}, crow{2, "b", 1}, crow{3, "c", 1})); err != nil {
		t.Fatal(err)
	}
	if err := cdcLoad(ctx, s, "l2", 1, up(crow{1, "a2", 2}), rm(crow{2, "b", 1}), up(crow{4, "", 2})); err != nil {
		t.Fatal(err)
	}
	want := []string{"1|a2", "3|c", "4|NULL"}
	expectCust(t, s, "through the view", want...)
	markers := queryStrings(t, s, "SELECT toString(count()) FROM "+s.table(physName(custTable.Name))+" WHERE _sluice_deleted = 1")
	if !slices.Equal(markers, []string{"1"}) {
		t.Fatalf("removal markers in the physical table: %v, want 1", markers)
	}
	// The same rows once more, as a publication repeated after a crash
	// would attach them: versions collapse them.
	phys := s.table(physName(custTable.Name))
	if err := s.conn.Exec(ctx, "INSERT INTO "+phys+" SELECT * FROM "+phys); err != nil {
		t.Fatal(err)
	}
	expectCust(t, s, "after attaching every row twice", want...)
	if err := s.Compact(ctx, custTable.Name); err != nil {
		t.Fatalf("Compact: %v", err)
	}
	expectCust(t, s, "after Compact", want...)
	b, err := s.Scan(ctx, custTable.Name)
	if err != nil || b.Len() != 3 || !slices.Equal(b.Schema.Names(), []string{"id", "name"}) {
		t.Fatalf("Scan: %v rows, columns %v, %v", b.Len(), b.Schema.Names(), err)
	}
	// A CDC target takes no plain writes.
	ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: "plain", Pipeline: "p", Flow: "f"})
	if err != nil {
		t.Fatal(err)
	}
	defer ld.Abort(ctx)
	rows, _, _ := custRows(crow{9, "x", 9})
	if err := ld.Write(ctx, custTable.Name, rows); err == nil || !strings.Contains(err.Error(), "CDC target") {
		t.Fatalf("Write to a CDC target: %v", err)
	}
	if err := ld.(sinks.CDCLoad).TruncateBelow(ctx, histTable.Name, cseq(1)); err == nil {
		t.Fatal("TruncateBelow of an SCD type 2 target succeeded")
	}
}

// TestCDCStateManyKeys reads 100k states in one call: the keys travel as
// external data, since as an IN list they would pass 18.16's 256 KiB
// max_query_size.
func TestCDCStateManyKeys(t *testing.T) {
	_, open := cdcSetup(t)
	s := open()
	ctx := context.Background()
	const n = 100_000
	entries := make([]sinks.StateEntry, n)
	keys := make([]string, 0, n+1000)
	inList := 0
	for i := range entries {
		k := ckey(int64(i))
		entries[i] = sinks.StateEntry{Key: k, Value: []byte(fmt.Sprintf("state %d", i))}
		keys = append(keys, k)
		inList += len(fmt.Sprintf("%q, ", k))
	}
	if inList <= 256<<10 {
		t.Fatalf("an IN list of the keys has %d bytes: the test needs more than 256 KiB", inList)
	}
	if err := cdcLoad(ctx, s, "many", 0, states(entries...)); err != nil {
		t.Fatal(err)
	}
	for i := n; i < n+1000; i++ {
		keys = append(keys, ckey(int64(i)))
	}
	start := time.Now()
	got, err := s.GetState(ctx, custTable.Name, keys)
	if err != nil {
		t.Fatalf("GetState of %d keys: %v", len(keys), err)
	}
	t.Logf("GetState of %d keys: %v", len(keys), time.Since(start))
	if len(got) != n {
		t.Fatalf("GetState: %d states, want %d", len(got), n)
	}
	for i := 0; i < n; i += 997 {
		if v := string(got[ckey(int64(i))]); v != fmt.Sprintf("state %d", i) {
			t.Fatalf("key %d: %q", i, v)
		}
	}
}

// TestCDCCrashAfterCommit stops a writer between its commit and the
// publication: the load's rows and states become visible through Recover,
// or through the first read of the target in another process.
func TestCDCCrashAfterCommit(t *testing.T) {
	tests := []struct {
		name string
		skip int  // ATTACH statements let through: 0 none published, 1 the states only
		read bool // the other process reads state without Recover first
	}{
		{"nothing published, Recover", 0, false},
		{"nothing published, first read", 0, true},
		{"states published, rows not, first read", 1, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, open := cdcSetup(t)
			ctx := context.Background()
			s := open()
			if err := cdcLoad(ctx, s, "l1", 0, up(crow{1, "a", 1}, crow{2, "b", 1}), states(sinks.StateEntry{Key: ckey(1), Value: []byte("one")})); err != nil {
				t.Fatal(err)
			}
			withFaults(s).add(&fault{match: []string{"ATTACH PARTITION"}, skip: tc.skip})
			err := cdcLoad(ctx, s, "l2", 1, up(crow{1, "a2", 2}), rm(crow{2, "b", 1}),
				states(sinks.StateEntry{Key: ckey(1), Value: []byte("one@2")}, sinks.StateEntry{Key: ckey(2), Value: []byte("tomb")}))
			if err == nil || !s.Retryable(err) {
				t.Fatalf("commit whose publication failed: %v, want a retryable error", err)
			}
			// The process is gone; another one takes over.
			s2 := open()
			if !tc.read {
				if err := s2.Recover(ctx); err != nil {
					t.Fatal(err)
				}
			}
			keys := []string{ckey(1), ckey(2), ckey(3)}
			expectStates(t, s2, "after the takeover", keys, map[string]string{ckey(1): "one@2", ckey(2): "tomb"})
			expectCust(t, s2, "after the takeover", "1|a2")
			if err := cdcLoad(ctx, s2, "l3", 2, up(crow{3, "c", 3}), states(sinks.StateEntry{Key: ckey(1), Value: nil})); err != nil {
				t.Fatalf("next load: %v", err)
			}
			expectCust(t, s2, "after the next load", "1|a2", "3|c")
			expectStates(t, s2, "after the next load", keys, map[string]string{ckey(2): "tomb"})
			if left := leftovers(t, s2); len(left) > 0 {
				t.Fatalf("objects left: %v", left)
			}
		})
	}
}

// TestCDCLease checks exclusion among racing acquirers, expiry, the refusal
// of a commit after the writer's lease expired, and a lease lock left by a
// stopped process.
func TestCDCLease(t *testing.T) {
	_, open := cdcSetup(t)
	ctx := context.Background()
	const racers = 5
	sinksOf := make([]*Sink, racers)
	for i := range sinksOf {
		sinksOf[i] = open()
	}
	var wg sync.WaitGroup
	errs := make([]error, racers)
	for i := range racers {
		wg.Go(func() {
			errs[i] = sinksOf[i].AcquireLease(ctx, custTable.Name, fmt.Sprintf("racer-%d", i), time.Minute)
		})
	}
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won >= 0:
			t.Fatalf("racers %d and %d both took the lease", won, i)
		case err == nil:
			won = i
		case !errors.Is(err, sinks.ErrLeaseHeld):
			t.Fatalf("racer %d: %v, want ErrLeaseHeld", i, err)
		}
	}
	if won < 0 {
		t.Fatal("no racer took the lease")
	}
	if err := sinksOf[won].ReleaseLease(ctx, custTable.Name, fmt.Sprintf("racer-%d", won)); err != nil {
		t.Fatal(err)
	}

	// A short lease expires and another holder takes it over; the old
	// holder's commit after that is fenced off (ErrLeaseLost, not retried).
	a, b := open(), open()
	if err := a.AcquireLease(ctx, custTable.Name, "a", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := cdcLoad(ctx, a, "a1", 0, up(crow{1, "a", 1})); err != nil {
		t.Fatal(err)
	}
	ld, err := a.Begin(ctx, sinks.LoadMeta{LoadID: "a2", Pipeline: "p", Flow: "f"})
	if err != nil {
		t.Fatal(err)
	}
	if err := up(crow{1, "late", 2})(ctx, ld.(sinks.CDCLoad)); err != nil {
		t.Fatal(err)
	}
	// Renewed for one second only: it expires at once by a's clock (which
	// keeps a margin of a second) and within two by the server's.
	if err := a.AcquireLease(ctx, custTable.Name, "a", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := chsql.Sleep(ctx, 2200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := b.AcquireLease(ctx, custTable.Name, "b", time.Minute); err != nil {
		t.Fatalf("AcquireLease after expiry: %v", err)
	}
	err = ld.Commit(ctx, sinks.Commit{From: batch.Positions{{Topic: "c", Offset: 1}}, To: batch.Positions{{Topic: "c", Offset: 2}}})
	if !errors.Is(err, sinks.ErrLeaseLost) || a.Retryable(err) {
		t.Fatalf("commit after the takeover: %v, want ErrLeaseLost, not retryable", err)
	}
	if err := a.AcquireLease(ctx, custTable.Name, "a", time.Minute); !errors.Is(err, sinks.ErrLeaseLost) {
		t.Fatalf("renewal by the former holder: %v, want ErrLeaseLost", err)
	}
	if err := a.AcquireLease(ctx, custTable.Name, "a", time.Minute); !errors.Is(err, sinks.ErrLeaseHeld) {
		t.Fatalf("AcquireLease by the former holder: %v, want ErrLeaseHeld", err)
	}
	if err := cdcLoad(ctx, b, "b1", 1, up(crow{2, "b", 2})); err != nil {
		t.Fatal(err)
	}
	expectCust(t, b, "after the takeover", "1|a", "2|b")

	// A lease lock left by a process that stopped while holding it.
	if err := b.conn.Exec(ctx, "CREATE VIEW "+b.table(leaseLockName(custTable.Name))+" AS SELECT 'gone' AS holder"); err != nil {
		t.Fatal(err)
	}
	b.leaseGrace = -time.Second
	if err := b.AcquireLease(ctx, custTable.Name, "b", time.Minute); err != nil {
		t.Fatalf("renewal past a stale lease lock: %v", err)
	}
	if err := b.ReleaseLease(ctx, custTable.Name, "b"); err != nil {
		t.Fatal(err)
	}
	if err := a.AcquireLease(ctx, custTable.Name, "a", time.Minute); err != nil {
		t.Fatalf("AcquireLease after release: %v", err)
	}
}

// TestCDCServerRestart kills the server in the middle of a CDC load and
// between a commit and its publication: every failure is retryable, and
// once the server is back the rows and states are those of the committed
// loads.
func TestCDCServerRestart(t *testing.T) {
	srv := startOwnServer(t)
	ctx := context.Background()
	s := openSink(t, srv.Addr, "sluice_cdc_restart", func(o *Options) {
		o.Pipeline = "p"
		o.DialTimeout = 2 * time.Second
	})
	s.setGrace(-time.Second)
	if err := s.Ensure(ctx, []sinks.Table{custTable}); err != nil {
		t.Fatal(err)
	}
	if err := cdcLoad(ctx, s, "one", 0, up(crow{1, "a", 1}), states(sinks.StateEntry{Key: ckey(1), Value: []byte("1")})); err != nil {
		t.Fatal(err)
	}

	ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: "two", Pipeline: "p", Flow: "f"})
	if err != nil {
		t.Fatal(err)
	}
	cl := ld.(sinks.CDCLoad)
	if err := up(crow{2, "b", 2})(ctx, cl); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	for name, op := range map[string]cdcOp{
		"upsert": up(crow{3, "c", 2}),
		"remove": rm(crow{1, "a", 1}),
		"state":  states(sinks.StateEntry{Key: ckey(2), Value: []byte("2")}),
		"truncate": func(ctx context.Context, ld sinks.CDCLoad) error {
			return ld.TruncateBelow(ctx, custTable.Name, cseq(2))
		},
	} {
		if err := op(ctx, cl); err == nil || !s.Retryable(err) {
			t.Fatalf("%s against a killed server: %v, want a retryable error", name, err)
		}
	}
	if _, err := s.GetState(ctx, custTable.Name, []string{ckey(1)}); err == nil || !s.Retryable(err) {
		t.Fatalf("GetState against a killed server: %v, want a retryable error", err)
	}
	ld.Abort(ctx)
	srv.Start()
	if err := cdcLoad(ctx, s, "two-again", 1, up(crow{2, "b", 2}), states(sinks.StateEntry{Key: ckey(2), Value: []byte("2")})); err != nil {
		t.Fatalf("retried load after the restart: %v", err)
	}

	withFaults(s).add(&fault{match: []string{"ATTACH PARTITION"}, do: func() { srv.Kill() }})
	err = cdcLoad(ctx, s, "three", 2, rm(crow{1, "a", 1}), states(sinks.StateEntry{Key: ckey(1), Value: nil}))
	if err == nil || !s.Retryable(err) {
		t.Fatalf("commit whose publication met a killed server: %v, want a retryable error", err)
	}
	srv.Start()
	// The next read resolves the committed load first.
	expectStates(t, s, "after the restart", []string{ckey(1), ckey(2)}, map[string]string{ckey(2): "2"})
	expectCust(t, s, "after the restart", "2|b")
}

// TestCDCDDL checks the physical table and view sluice creates on 18.16 and
// on a server with is_deleted.
func TestCDCDDL(t *testing.T) {
	tests := []struct {
		name        string
		feat        features
		table       sinks.Table
		engine      string
		orderBy     string
		partitionBy string
	}{
		{"scd1 on 18.16", featuresOf(18, 16), custTable, "ENGINE = ReplacingMergeTree(`_sluice_version`)", "ORDER BY (`id`, `_sluice_key`)", ""},
		{"scd2 on 24.8", featuresOf(24, 8), histTable, "ENGINE = ReplacingMergeTree(`_sluice_version`, `_sluice_deleted`)",
			"ORDER BY (`id`, `_sluice_key`, `_sluice_seq`)", ""},
		{"partitioned by a key", featuresOf(18, 16), sinks.Table{Name: "p", Schema: custSchema, Kind: sinks.KindSCD1, Keys: []string{"id"}, PartitionBy: []string{"id"}},
			"ENGINE = ReplacingMergeTree(`_sluice_version`)", "ORDER BY (`id`, `_sluice_key`)", "PARTITION BY `id`"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := &Sink{opts: Options{Database: "db"}, feat: tc.feat}
			sql := s.createPhysSQL(tc.table)
			for _, want := range []string{"`db`.`_sluice_phys_" + tc.table.Name + "`", tc.engine, tc.orderBy, tc.partitionBy,
				"`_sluice_key` String COMMENT 'sluice:keys=id'", "`_sluice_version` UInt64"} {
				if !strings.Contains(sql, want) {
					t.Errorf("%s\nlacks %q", sql, want)
				}
			}
			view := s.createViewSQL(tc.table.Name, []column{{Column: batch.Column{Name: "id"}}, {Column: batch.Column{Name: "name"}}})
			if want := "CREATE VIEW IF NOT EXISTS `db`.`" + tc.table.Name + "` AS SELECT `id`, `name` FROM `db`.`_sluice_phys_" + tc.table.Name +
				"` FINAL WHERE `_sluice_deleted` = 0"; view != want {
				t.Errorf("view\n%s\nwant\n%s", view, want)
			}
		})
	}
}
