package local

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/local/fsys"
)

// TestEveryFsyncAndRenameOfACommit fails, one at a time, each fsync and
// each rename of a commit that writes an append target, the dead letters
// and a CDC target, as found by running the commit once through a
// recording file system. Each fails twice: as a crash (that operation and
// every later one fail; a new Sink recovers, and the load is run again as a
// runner would) and as a transient error (only that one fails; the load is
// retried with a new id and the same positions). Either way the retry is
// refused as stale exactly when the failed attempt passed its commit point,
// and once the next load commits every table reads as in a run without a
// failure, with the ledger at the same positions.
func TestEveryFsyncAndRenameOfACommit(t *testing.T) {
	ref := referenceCommit(t)
	if len(ref.ops) < 10 || ref.ledgerSync < 0 {
		t.Fatalf("the reference commit made %d fsyncs and renames (ledger fsync at %d): the recording missed them", len(ref.ops), ref.ledgerSync)
	}
	for _, crashes := range []bool{true, false} {
		kind := "transient"
		if crashes {
			kind = "crash"
		}
		t.Run(kind, func(t *testing.T) {
			for i, o := range ref.ops {
				// A crash at the ledger's fsync leaves the line written (a
				// dead process's writes stay with the kernel): the load is
				// committed. A failed fsync alone is undone by cutting the
				// line off again.
				committed := i > ref.ledgerSync || crashes && i == ref.ledgerSync
				t.Run(fmt.Sprintf("%02d %s %s #%d", i, o.op, o.path, o.nth), func(t *testing.T) {
					t.Parallel() // each on a destination of its own; mostly waiting for fsyncs
					failCommitAt(t, ref, o, crashes, committed)
				})
			}
		})
	}
	t.Logf("%d fsyncs and renames in the commit", len(ref.ops))
}

// everyOp is an operation of the reference commit: the nth operation op on
// path (relative to the destination, random names masked).
type everyOp struct {
	op   fsys.Op
	path string
	nth  int
}

// everyRef is the reference run: the fsyncs and renames of its commit in
// order, the index of the ledger's fsync among them, and the content at
// the end.
type everyRef struct {
	ops        []everyOp
	ledgerSync int
	end        everyContent
}

var randomName = regexp.MustCompile(`-[0-9a-f]{16}(\b|$)`)

// maskedRel returns path relative to root with its random parts masked, as
// it is the same in every run.
func maskedRel(root, path string) string {
	rel, err := filepath.Rel(root, path)
	if err != nil {
		return path
	}
	return randomName.ReplaceAllString(filepath.ToSlash(rel), "-*")
}

func referenceCommit(t *testing.T) everyRef {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	s := everySetup(t, dir)
	var mu sync.Mutex
	var ops []everyOp
	seen := map[[2]string]int{}
	faulty(t, s).Set(func(op fsys.Op, path string) error {
		if op != fsys.OpSync && op != fsys.OpSyncDir && op != fsys.OpRename {
			return nil
		}
		rel := maskedRel(dir, path)
		mu.Lock()
		defer mu.Unlock()
		k := [2]string{string(op), rel}
		seen[k]++
		ops = append(ops, everyOp{op: op, path: rel, nth: seen[k]})
		return nil
	})
	if err := runEveryLoad(ctx, s, 2, "load-2"); err != nil {
		t.Fatal(err)
	}
	faulty(t, s).Set(nil)
	if err := runEveryLoad(ctx, s, 3, "load-3"); err != nil {
		t.Fatal(err)
	}
	ref := everyRef{ops: ops, ledgerSync: -1, end: readEvery(t, s)}
	for i, o := range ops {
		if o.op == fsys.OpSync && o.path == "_sluice/ledger.jsonl" {
			ref.ledgerSync = i
		}
	}
	return ref
}

// failCommitAt runs the loads on a new destination, the second failing at
// o, and checks the end.
func failCommitAt(t *testing.T, ref everyRef, o everyOp, crashes, committed bool) {
	ctx := context.Background()
	dir := t.TempDir()
	s1 := everySetup(t, dir)
	var mu sync.Mutex
	seen, fired := 0, false
	faulty(t, s1).Set(func(op fsys.Op, path string) error {
		mu.Lock()
		defer mu.Unlock()
		if fired {
			if crashes {
				return errCrash
			}
			return nil
		}
		if op != o.op || maskedRel(dir, path) != o.path {
			return nil
		}
		if seen++; seen < o.nth {
			return nil
		}
		fired = true
		if crashes {
			return errCrash
		}
		return syscall.EIO
	})
	err := runEveryLoad(ctx, s1, 2, "load-2")
	mu.Lock()
	reached := fired
	mu.Unlock()
	if !reached {
		t.Fatalf("the load did not reach the operation (returned %v)", err)
	}
	if err == nil {
		t.Fatal("the load succeeded with a failed operation")
	}
	s := s1
	if crashes {
		if !errors.Is(err, errCrash) {
			t.Fatalf("load: %v, want the simulated crash", err)
		}
		s1.kill()
		s = openTest(t, everyOpts(dir))
		if err := s.Recover(ctx); err != nil {
			t.Fatalf("Recover: %v", err)
		}
	} else if !s1.Retryable(err) {
		t.Fatalf("load: %v, which is not retryable", err)
	}
	err = runEveryLoad(ctx, s, 2, "load-2-retried")
	switch {
	case committed && !errors.Is(err, sinks.ErrStale):
		t.Fatalf("retry of a load that passed its commit point: %v, want ErrStale", err)
	case !committed && err != nil:
		t.Fatalf("retry of a load that did not commit: %v", err)
	}
	if err := runEveryLoad(ctx, s, 3, "load-3"); err != nil {
		t.Fatal(err)
	}
	ref.end.same(t, "after the last load", readEvery(t, s))
	if !crashes {
		// The retrying process ends; another opens the destination.
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = openTest(t, everyOpts(dir))
		if err := s.Recover(ctx); err != nil {
			t.Fatalf("Recover: %v", err)
		}
		ref.end.same(t, "after reopening", readEvery(t, s))
	}
	if err := s.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	if left := entries(t, filepath.Join(dir, stateDir, "staging")); len(left) != 0 {
		t.Errorf("staging holds %v after recovery", left)
	}
	for _, table := range []string{"orders", batch.DeadLettersTable, custTable.Name} {
		if v := versionDirs(t, dir, table); len(v) != 1 {
			t.Errorf("%s has versions %v after recovery, want only the current one", table, v)
		}
	}
}

func everyOpts(dir string) Options {
	opts := testOpts(dir)
	opts.BucketRows = 2 // the CDC target's loads rewrite some buckets, link others
	return opts
}

// everySetup opens a destination at dir with its tables and the first
// load.
func everySetup(t *testing.T, dir string) *Sink {
	t.Helper()
	s := openTest(t, everyOpts(dir))
	if err := s.Ensure(context.Background(), []sinks.Table{ordersTable, custTable}); err != nil {
		t.Fatal(err)
	}
	if err := runEveryLoad(context.Background(), s, 1, "load-1"); err != nil {
		t.Fatal(err)
	}
	return s
}

// everyChanges are the CDC changes of load n.
var everyChanges = map[int]cdcChange{
	1: {up: []cust{{1, "a", "", 1}, {2, "a", "eu", 1}, {3, "a", "", 1}, {4, "a", "us", 1}},
		states: []sinks.StateEntry{{Key: ck(1), Value: []byte("1@1")}, {Key: ck(3), Value: []byte("3@1")}}},
	2: {up: []cust{{2, "b", "", 2}, {5, "b", "eu", 2}}, rm: []cust{{id: 3, seq: 1}},
		states: []sinks.StateEntry{{Key: ck(2), Value: []byte("2@2")}, {Key: ck(3), Value: nil}, {Key: "", Value: []byte("t@2")}}},
	3: {up: []cust{{6, "c", "", 3}}, states: []sinks.StateEntry{{Key: ck(6), Value: []byte("6@3")}}},
}

// runEveryLoad runs load n (offsets 10(n-1) to 10n of one partition) as
// load id: rows of orders, a dead letter, and changes of the CDC target.
func runEveryLoad(ctx context.Context, s *Sink, n int, id string) error {
	ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: id, Pipeline: "p", Flow: "f", Targets: []string{"orders", custTable.Name}})
	if err != nil {
		return err
	}
	if err := writeEveryLoad(ctx, ld.(sinks.CDCLoad), n); err != nil {
		ld.Abort(ctx)
		return err
	}
	from := int64(10 * (n - 1))
	if n == 1 {
		from = -1
	}
	return ld.Commit(ctx, sinks.Commit{
		From: batch.Positions{{Topic: "orders", Partition: 0, Offset: from}},
		To:   batch.Positions{{Topic: "orders", Partition: 0, Offset: int64(10 * n)}},
		Rows: 3, DeadLetters: 1,
	})
}

func writeEveryLoad(ctx context.Context, ld sinks.CDCLoad, n int) error {
	if err := ld.Write(ctx, "orders", ordersBatch(100*n, 3)); err != nil {
		return err
	}
	dl := batch.DeadLetterBatch([]batch.DeadLetter{{Pipeline: "p", Flow: "f", Target: "orders", Reason: fmt.Sprint("bad ", n),
		Payload: []byte{byte(n)}, At: time.Date(2025, 1, 1, 0, 0, n, 0, time.UTC)}})
	if err := ld.Write(ctx, batch.DeadLettersTable, dl); err != nil {
		return err
	}
	c := everyChanges[n]
	if len(c.rm) > 0 {
		b, k, q := custRows(c.rm)
		if err := ld.Remove(ctx, custTable.Name, b, k, q); err != nil {
			return err
		}
	}
	b, k, q := custRows(c.up)
	if err := ld.Upsert(ctx, custTable.Name, b, k, q); err != nil {
		return err
	}
	return ld.PutState(ctx, custTable.Name, c.states)
}

// everyContent is what the test's tables and ledger hold.
type everyContent struct {
	orders, deadLetters []string // rows without their load id, sorted
	cust                map[int64]string
	states              map[string]string
	positions           map[batch.TopicPartition]int64
}

func readEvery(t *testing.T, s *Sink) everyContent {
	t.Helper()
	ctx := context.Background()
	c := everyContent{orders: rowsOf(t, s, "orders"), deadLetters: rowsOf(t, s, batch.DeadLettersTable),
		cust: custContent(t, s, custTable.Name), states: map[string]string{}}
	keys := []string{""}
	for id := range int64(7) {
		keys = append(keys, ck(id))
	}
	st, err := s.GetState(ctx, custTable.Name, keys)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range st {
		c.states[k] = string(v)
	}
	led, err := s.Ledger(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.positions = sinks.LedgerHeads(led, "f").Kafka()
	return c
}

// rowsOf returns a table's rows, without _sluice_load_id, sorted.
func rowsOf(t *testing.T, s *Sink, table string) []string {
	t.Helper()
	b, err := s.Scan(context.Background(), table)
	if err != nil {
		t.Fatal(err)
	}
	id := b.Schema.Index(batch.LoadIDColumn)
	out := make([]string, b.Len())
	for i := range out {
		row := b.Row(i)
		out[i] = fmt.Sprint(slices.Delete(row, id, id+1))
	}
	slices.Sort(out)
	return out
}

func (want everyContent) same(t *testing.T, what string, got everyContent) {
	t.Helper()
	if !slices.Equal(got.orders, want.orders) {
		t.Errorf("%s: orders holds\n%q\nwant\n%q", what, got.orders, want.orders)
	}
	if !slices.Equal(got.deadLetters, want.deadLetters) {
		t.Errorf("%s: the dead letters are\n%q\nwant\n%q", what, got.deadLetters, want.deadLetters)
	}
	sameContent(t, what+": "+custTable.Name, got.cust, want.cust)
	if !maps.Equal(got.states, want.states) {
		t.Errorf("%s: states %q, want %q", what, got.states, want.states)
	}
	if !maps.Equal(got.positions, want.positions) {
		t.Errorf("%s: ledger positions %v, want %v", what, got.positions, want.positions)
	}
}
