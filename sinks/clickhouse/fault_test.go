package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
)

// faultConn wraps a connection and fails statements that contain a string,
// before running them or after (an answer lost on the way back).
type faultConn struct {
	conn
	mu     sync.Mutex
	faults []*fault
}

type fault struct {
	match []string // the statement contains them all
	skip  int      // matching statements let through first
	after bool     // run the statement, then fail
	do    func()   // runs instead of failing when set
	fired bool
}

var errInjected = fmt.Errorf("injected fault: %w", syscall.ECONNRESET)

func (f *faultConn) add(ft *fault) { f.mu.Lock(); f.faults = append(f.faults, ft); f.mu.Unlock() }

func (f *faultConn) take(q string) *fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ft := range f.faults {
		if ft.fired || !containsAll(q, ft.match) {
			continue
		}
		if ft.skip > 0 {
			ft.skip--
			continue
		}
		ft.fired = true
		return ft
	}
	return nil
}

func containsAll(q string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(q, sub) {
			return false
		}
	}
	return true
}

func (f *faultConn) Exec(ctx context.Context, q string, args ...any) error {
	ft := f.take(q)
	if ft == nil {
		return f.conn.Exec(ctx, q, args...)
	}
	if ft.after {
		if err := f.conn.Exec(ctx, q, args...); err != nil {
			return err
		}
	}
	if ft.do != nil {
		ft.do()
		return f.conn.Exec(ctx, q, args...)
	}
	return fmt.Errorf("%w", errInjected)
}

// withFaults puts a faultConn in front of s's connection.
func withFaults(s *Sink) *faultConn {
	f := &faultConn{conn: s.conn}
	s.conn = f
	return f
}

// eventsTable is partitioned by day, so one load spans several partitions.
var eventsTable = sinks.Table{
	Name: "events",
	Schema: batch.Schema{Columns: []batch.Column{
		{Name: "id", Type: batch.Int64},
		{Name: "day", Type: batch.Date},
		{Name: "v", Type: batch.String, Nullable: true},
	}},
	OrderBy:     []string{"id"},
	PartitionBy: []string{"day"},
}

// events returns rows from..to-1 spread over three days.
func events(from, to int) *batch.Batch {
	b := batch.New(eventsTable.Schema, to-from)
	base := int64(batch.DateFromTime(time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)))
	for i := from; i < to; i++ {
		b.Vectors[0].AppendInt(int64(i))
		b.Vectors[1].AppendInt(base + int64(i%3))
		b.Vectors[2].AppendString(fmt.Sprintf("e%d", i))
	}
	return b
}

func kafkaPos(offset int64) batch.Positions {
	return batch.Positions{{Topic: "t", Partition: 0, Offset: offset}}
}

// commitEvents writes rows from..to-1 and a dead letter in one load from
// offset from-1 (or none when from is 0) to to.
func commitEvents(ctx context.Context, s *Sink, id string, from, to int) error {
	ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: id, Pipeline: "p", Flow: "f", Targets: []string{"events"}, Generation: 1})
	if err != nil {
		return err
	}
	if err := ld.Write(ctx, "events", events(from, to)); err != nil {
		return err
	}
	dl := batch.DeadLetterBatch([]batch.DeadLetter{{Pipeline: "p", Flow: "f", Target: "events", Source: "t",
		Position: fmt.Sprintf("0/%d", to), Reason: batch.ReasonUndecodable, Error: "bad", At: time.Unix(1700000000, 0)}})
	if err := ld.Write(ctx, batch.DeadLettersTable, dl); err != nil {
		return err
	}
	start := int64(from)
	if from == 0 {
		start = -1
	}
	return ld.Commit(ctx, sinks.Commit{From: kafkaPos(start), To: kafkaPos(int64(to)), Rows: int64(to - from), DeadLetters: 1})
}

// eventIDs returns the ids in events, sorted.
func eventIDs(t *testing.T, s *Sink) []int64 {
	t.Helper()
	b, err := s.Scan(context.Background(), "events")
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	ids := slices.Clone(b.Column("id").Ints)
	slices.Sort(ids)
	return ids
}

func seq(from, to int) []int64 {
	out := []int64{}
	for i := from; i < to; i++ {
		out = append(out, int64(i))
	}
	return out
}

// leftovers lists the protocol objects (staging tables, markers, locks)
// still in the database.
func leftovers(t *testing.T, s *Sink) []string {
	t.Helper()
	ages, err := s.objectAges(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for name := range ages {
		if strings.HasPrefix(name, stagePrefix) || strings.HasPrefix(name, markerPrefix) || strings.HasPrefix(name, lockPrefix) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func setup(t *testing.T) (addr, db string, open func() *Sink) {
	addr = serverAddr(t)
	db = newDatabase(t, addr)
	open = func() *Sink {
		s := openSink(t, addr, db, func(o *Options) { o.Pipeline = "p" })
		s.setGrace(-time.Second) // everything without a live owner counts as abandoned
		return s
	}
	s := open()
	if err := s.Ensure(context.Background(), []sinks.Table{eventsTable}); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	return addr, db, open
}

// TestCrash abandons a sink at each step of a load, then recovers with a
// new one: exactly the committed rows appear, once, nothing is left behind,
// and the flow goes on from where the ledger stands.
func TestCrash(t *testing.T) {
	tests := []struct {
		name      string
		fault     *fault // nil: abandon after staging, without Commit
		committed bool
	}{
		{"after staging", nil, false},
		{"lock taken, ledger insert never sent", &fault{match: []string{"INSERT INTO", "_sluice_loads"}}, false},
		{"ledger row landed, answer lost", &fault{match: []string{"INSERT INTO", "_sluice_loads"}, after: true}, true},
		{"committed, lock left behind", &fault{match: []string{"DROP TABLE", lockPrefix}}, true},
		{"committed, nothing published", &fault{match: []string{"ATTACH PARTITION"}}, true},
		{"committed, dead letters and one partition published", &fault{match: []string{"ATTACH PARTITION"}, skip: 2}, true},
		{"committed, all but one partition published", &fault{match: []string{"ATTACH PARTITION"}, skip: 3}, true},
		{"published, staging table left behind", &fault{match: []string{"DROP TABLE", "__events"}}, true},
		{"published, marker left behind", &fault{match: []string{"DROP TABLE", markerPrefix + "second"}}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			_, _, open := setup(t)
			s1 := open()
			if err := commitEvents(ctx, s1, "first", 0, 30); err != nil {
				t.Fatalf("first load: %v", err)
			}
			if tc.fault == nil {
				ld, err := s1.Begin(ctx, sinks.LoadMeta{LoadID: "second", Pipeline: "p", Flow: "f", Targets: []string{"events"}})
				if err != nil {
					t.Fatal(err)
				}
				if err := ld.Write(ctx, "events", events(30, 60)); err != nil {
					t.Fatal(err)
				}
			} else {
				withFaults(s1).add(tc.fault)
				err := commitEvents(ctx, s1, "second", 30, 60)
				if !tc.fault.fired {
					t.Fatal("the fault never fired")
				}
				if err != nil && !s1.Retryable(err) {
					t.Fatalf("commit failed with %v, which is not retryable", err)
				}
			}
			// s1 is abandoned here, as by kill -9.
			s2 := open()
			err := s2.Recover(ctx)
			var led *batch.Ledger
			if err == nil {
				led, err = s2.Ledger(ctx)
			}
			if err != nil {
				t.Fatalf("Recover: %v", err)
			}
			want, next := seq(0, 30), int64(30)
			if tc.committed {
				want, next = seq(0, 60), 60
			}
			if got := eventIDs(t, s2); !slices.Equal(got, want) {
				t.Fatalf("events after recovery: %v, want %v", got, want)
			}
			if got := sinks.LedgerHeads(led, "f").Kafka()[batch.TopicPartition{Topic: "t"}]; got != next {
				t.Fatalf("ledger at %d, want %d", got, next)
			}
			dls, err := s2.Scan(ctx, batch.DeadLettersTable)
			if err != nil {
				t.Fatal(err)
			}
			if wantDL := len(led.Loads); dls.Len() != wantDL {
				t.Fatalf("%d dead letters, want %d (one per committed load)", dls.Len(), wantDL)
			}
			if left := leftovers(t, s2); len(left) > 0 {
				t.Fatalf("objects left after recovery: %v", left)
			}
			// The flow goes on from the ledger.
			if err := commitEvents(ctx, s2, "third", int(next), 90); err != nil {
				t.Fatalf("load after recovery: %v", err)
			}
			if got := eventIDs(t, s2); !slices.Equal(got, seq(0, 90)) {
				t.Fatalf("events after the next load: %d rows, want 0..89 once each", len(got))
			}
		})
	}
}

// TestRetryAfterLostAnswer: the ledger insert lands but its answer is lost;
// the same process retries the batch as a new load, which finds the first
// one committed, publishes it and is refused as stale.
func TestRetryAfterLostAnswer(t *testing.T) {
	ctx := context.Background()
	_, _, open := setup(t)
	s := open()
	withFaults(s).add(&fault{match: []string{"INSERT INTO", "_sluice_loads"}, after: true})
	err := commitEvents(ctx, s, "try-1", 0, 20)
	if err == nil || !s.Retryable(err) {
		t.Fatalf("first attempt: %v, want a retryable error", err)
	}
	err = commitEvents(ctx, s, "try-2", 0, 20)
	if !errors.Is(err, sinks.ErrStale) {
		t.Fatalf("second attempt: %v, want ErrStale", err)
	}
	if got := eventIDs(t, s); !slices.Equal(got, seq(0, 20)) {
		t.Fatalf("events %v, want 0..19 once", got)
	}
	led, err := s.Ledger(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(led.Loads) != 1 || led.Loads[0].LoadID != "try-1" {
		t.Fatalf("ledger %+v, want only try-1", led.Loads)
	}
	if left := leftovers(t, s); len(left) > 0 {
		t.Fatalf("objects left: %v", left)
	}
}

// TestLiveOwner: recovery in another process leaves the loads of a process
// whose heartbeat lives alone, and removes those of one whose heartbeat
// expired, however young.
func TestLiveOwner(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		expires time.Duration
		kept    bool
	}{
		{"heartbeat alive", time.Hour, true},
		{"heartbeat expired", -time.Second, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, open := setup(t)
			s1 := open()
			now := time.Now()
			if err := s1.Beat(ctx, sinks.Heartbeat{Pipeline: "p", ID: "proc-1", Kind: "run", BeatAt: now, Expires: now.Add(tc.expires)}); err != nil {
				t.Fatal(err)
			}
			ld, err := s1.Begin(ctx, sinks.LoadMeta{LoadID: "l1", Pipeline: "p", Flow: "f", Targets: []string{"events"}})
			if err != nil {
				t.Fatal(err)
			}
			if err := ld.Write(ctx, "events", events(0, 10)); err != nil {
				t.Fatal(err)
			}
			s2 := open()
			s2.setGrace(time.Hour) // only the heartbeat decides
			if err := s2.Recover(ctx); err != nil {
				t.Fatal(err)
			}
			left := leftovers(t, s2)
			if kept := len(left) > 0; kept != tc.kept {
				t.Fatalf("objects after recovery %v; want kept=%v", left, tc.kept)
			}
			werr := ld.Write(ctx, "events", events(10, 20))
			err = ld.Commit(ctx, sinks.Commit{From: kafkaPos(-1), To: kafkaPos(20), Rows: 20})
			if tc.kept {
				if werr != nil || err != nil {
					t.Fatalf("write and commit of the live load: %v, %v", werr, err)
				}
				if got := eventIDs(t, s2); !slices.Equal(got, seq(0, 20)) {
					t.Fatalf("events %v", got)
				}
				return
			}
			if werr == nil || !s1.Retryable(werr) {
				t.Fatalf("write to a load recovery removed: %v, want a retryable error", werr)
			}
			if err == nil || !s1.Retryable(err) || errors.Is(err, sinks.ErrStale) {
				t.Fatalf("commit of a load recovery removed: %v, want a retryable error", err)
			}
			if got := eventIDs(t, s2); len(got) != 0 {
				t.Fatalf("events %v, want none", got)
			}
		})
	}
}

// TestLockFencesLateWriter: a writer that took a slot's lock and stopped
// blocks the slot while its heartbeat lives; once it is gone another writer
// takes the lock over, and the stopped writer's late insert lands nothing.
func TestLockFencesLateWriter(t *testing.T) {
	ctx := context.Background()
	_, _, open := setup(t)
	s1 := open()
	now := time.Now()
	hb := sinks.Heartbeat{Pipeline: "p", ID: "proc-1", Kind: "run", BeatAt: now, Expires: now.Add(time.Hour)}
	if err := s1.Beat(ctx, hb); err != nil {
		t.Fatal(err)
	}
	ld1, err := s1.Begin(ctx, sinks.LoadMeta{LoadID: "stale", Pipeline: "p", Flow: "f", Targets: []string{"events"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ld1.Write(ctx, "events", events(0, 10)); err != nil {
		t.Fatal(err)
	}
	l1 := ld1.(*load)
	if err := s1.acquire(ctx, l1, sinks.Slot(kafkaPos(-1)[0])); err != nil {
		t.Fatal(err)
	}
	// s1 stops here, holding the lock.

	s2 := open()
	err = commitEvents(ctx, s2, "fresh-1", 0, 20)
	if err == nil || !s2.Retryable(err) || errors.Is(err, sinks.ErrStale) {
		t.Fatalf("commit while a live writer holds the lock: %v, want a retryable error", err)
	}
	if err := s2.EndBeat(ctx, "p", hb.ID); err != nil {
		t.Fatal(err)
	}
	if err := commitEvents(ctx, s2, "fresh-2", 0, 20); err != nil {
		t.Fatalf("commit after the holder stopped: %v", err)
	}
	// The stopped writer wakes up and inserts its ledger row.
	c := sinks.Commit{From: kafkaPos(-1), To: kafkaPos(10), Rows: 10}
	if err := s1.insertRow(ctx, l1, c, time.Now()); err != nil && !chsql.Gone(err) {
		t.Fatalf("late insert: %v", err)
	}
	if n, err := s1.rowCount(ctx, l1, c); err != nil || n != 0 {
		t.Fatalf("late insert landed %d rows (%v), want 0", n, err)
	}
	if got := eventIDs(t, s2); !slices.Equal(got, seq(0, 20)) {
		t.Fatalf("events %v, want 0..19 once", got)
	}
}

// TestRace: writers in separate sinks race to continue one slot from the
// same position, round after round. Each round at most one wins; the others
// are refused, and the target holds the winners' rows once. With no grace
// every writer takes every other's lock over at once, which exercises the
// fences; with a long one writers wait for each other.
func TestRace(t *testing.T) {
	tests := []struct {
		name  string
		grace time.Duration
	}{
		{"locks taken over at once", -time.Second},
		{"locks respected", time.Hour},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			race(t, tc.grace)
		})
	}
}

func race(t *testing.T, grace time.Duration) {
	ctx := context.Background()
	_, _, open := setup(t)
	const writers, rounds, rows = 4, 6, 10
	ss := make([]*Sink, writers)
	for i := range ss {
		ss[i] = open()
		ss[i].setGrace(grace)
	}
	var want []int64
	from, won := 0, 0
	for r := range rounds {
		var wg sync.WaitGroup
		errs := make([]error, writers)
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				base := (r*writers + w) * 1000
				ld, err := ss[w].Begin(ctx, sinks.LoadMeta{LoadID: fmt.Sprintf("r%d-w%d", r, w), Pipeline: "p", Flow: "f", Targets: []string{"events"}})
				if err != nil {
					errs[w] = err
					return
				}
				if err := ld.Write(ctx, "events", events(base, base+rows)); err != nil {
					errs[w] = err
					return
				}
				start := int64(from)
				if from == 0 {
					start = -1
				}
				errs[w] = ld.Commit(ctx, sinks.Commit{From: kafkaPos(start), To: kafkaPos(int64(from + rows))})
			}()
		}
		wg.Wait()
		winners := 0
		for w, err := range errs {
			switch {
			case err == nil:
				winners++
				base := (r*writers + w) * 1000
				want = append(want, seq(base, base+rows)...)
			case errors.Is(err, sinks.ErrStale), ss[w].Retryable(err):
			default:
				t.Fatalf("round %d writer %d: %v", r, w, err)
			}
		}
		if winners > 1 {
			t.Fatalf("round %d: %d writers committed from the same position", r, winners)
		}
		if winners == 1 {
			from += rows
			won++
		}
	}
	t.Logf("%d of %d rounds had a winner", won, rounds)
	if won == 0 {
		t.Fatal("no round had a winner")
	}
	slices.Sort(want)
	if got := eventIDs(t, ss[0]); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	led, err := ss[0].Ledger(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := sinks.LedgerHeads(led, "f").Kafka()[batch.TopicPartition{Topic: "t"}]; got != int64(from) {
		t.Fatalf("ledger at %d, want %d", got, from)
	}
	if err := open().Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(t, ss[0]); len(left) > 0 {
		t.Fatalf("objects left: %v", left)
	}
}

// TestTakeoverDuringPublish: recovery in another process takes a committed
// load's publication over between two partitions of the writer's own
// publication; the writer's next attach finds its staging table gone, and
// every row appears once.
func TestTakeoverDuringPublish(t *testing.T) {
	ctx := context.Background()
	_, _, open := setup(t)
	s1, s2 := open(), open()
	withFaults(s1).add(&fault{match: []string{"ATTACH PARTITION", "__events"}, skip: 1, do: func() {
		if err := s2.Recover(ctx); err != nil {
			t.Errorf("Recover during publication: %v", err)
		}
	}})
	if err := commitEvents(ctx, s1, "taken", 0, 30); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if got := eventIDs(t, s2); !slices.Equal(got, seq(0, 30)) {
		t.Fatalf("events %v, want 0..29 once", got)
	}
	if left := leftovers(t, s2); len(left) > 0 {
		t.Fatalf("objects left: %v", left)
	}
}

// TestCommitVisibleAfterTakeover: recovery in another process takes a
// committed load's publication over and stalls before it attaches; the
// writer's Commit still returns with every row visible, as past its wait it
// finishes what recovery has not published (fenced by the same renames as
// two recoveries).
func TestCommitVisibleAfterTakeover(t *testing.T) {
	ctx := context.Background()
	_, _, open := setup(t)
	s1, s2 := open(), open()
	s1.takeoverWait = 300 * time.Millisecond
	paused, release := make(chan struct{}), make(chan struct{})
	withFaults(s2).add(&fault{match: []string{"ATTACH PARTITION", "__events"}, do: func() {
		close(paused)
		<-release
	}})
	recovered := make(chan error, 1)
	withFaults(s1).add(&fault{match: []string{"ATTACH PARTITION", "__events"}, skip: 1, do: func() {
		go func() { recovered <- s2.Recover(ctx) }()
		<-paused
	}})
	err := commitEvents(ctx, s1, "taken", 0, 30)
	got := eventIDs(t, s1)
	close(release)
	if rerr := <-recovered; rerr != nil && !s2.Retryable(rerr) {
		t.Errorf("stalled recovery: %v", rerr)
	}
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
	if !slices.Equal(got, seq(0, 30)) {
		t.Fatalf("events when Commit returned %v, want 0..29 once", got)
	}
	if got := eventIDs(t, s2); !slices.Equal(got, seq(0, 30)) {
		t.Fatalf("events %v, want 0..29 once", got)
	}
	if err := s2.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(t, s2); len(left) > 0 {
		t.Fatalf("objects left: %v", left)
	}
}

// TestStageAlignedAfterEnsure: a load staged before Ensure added a column
// publishes after it, with NULL in the new column.
func TestStageAlignedAfterEnsure(t *testing.T) {
	ctx := context.Background()
	_, _, open := setup(t)
	s1 := open()
	ld, err := s1.Begin(ctx, sinks.LoadMeta{LoadID: "old-shape", Pipeline: "p", Flow: "f", Targets: []string{"events"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ld.Write(ctx, "events", events(0, 9)); err != nil {
		t.Fatal(err)
	}
	wider := eventsTable
	wider.Schema.Columns = append(slices.Clone(eventsTable.Schema.Columns), batch.Column{Name: "extra", Type: batch.Bytes, Nullable: true})
	s2 := open()
	if err := s2.Ensure(ctx, []sinks.Table{wider}); err != nil {
		t.Fatal(err)
	}
	if err := ld.Commit(ctx, sinks.Commit{To: kafkaPos(9)}); err != nil {
		t.Fatalf("commit after the table gained a column: %v", err)
	}
	b, err := s2.Scan(ctx, "events")
	if err != nil {
		t.Fatal(err)
	}
	if b.Len() != 9 || b.Column("extra") == nil || b.Column("extra").Type != batch.Bytes {
		t.Fatalf("scan: %d rows, columns %v", b.Len(), b.Schema.Names())
	}
	for i := range b.Len() {
		if !b.Column("extra").IsNull(i) {
			t.Fatalf("row %d: extra is %v, want NULL", i, b.Column("extra").Value(i))
		}
	}
}
