package local

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
)

// TestCrash kills a Sink at each step of the commit protocol (its file
// operations fail from there on, and it is abandoned as a dead process: its
// locks released, nothing cleaned up), opens a new one on the folder and
// checks that Recover gives exactly the committed content.
func TestCrash(t *testing.T) {
	tests := []struct {
		name      string
		at        moment
		nth       int  // which time the moment comes (tables publish in name order)
		committed bool // whether the crashed load is committed
	}{
		{"after staging", afterStaging, 1, false},
		{"in the ledger append", inLedgerAppend, 1, false},
		{"after the ledger append", afterLedgerAppend, 1, true},
		{"after the first version folder, before its swap", beforeSwap, 1, true},
		{"after the first swap", afterSwap, 1, true},
		{"after the second version folder, before its swap", beforeSwap, 2, true},
		{"after the second swap", afterSwap, 2, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			s1 := openTest(t, testOpts(dir))
			if err := s1.Ensure(ctx, []sinks.Table{ordersTable}); err != nil {
				t.Fatal(err)
			}
			if _, err := commitOrders(ctx, s1, 0, -1, 0, 100); err != nil {
				t.Fatal(err)
			}

			// The load that crashes writes the target and dead letters.
			cr := crash(t, s1, tc.at, tc.nth)
			ld, err := s1.Begin(ctx, sinks.LoadMeta{LoadID: "crashing", Pipeline: "p", Flow: "f", Targets: []string{"orders"}})
			if err != nil {
				t.Fatal(err)
			}
			if err := ld.Write(ctx, "orders", ordersBatch(100, 50)); err != nil {
				t.Fatal(err)
			}
			dl := batch.DeadLetterBatch([]batch.DeadLetter{{Pipeline: "p", Flow: "f", Target: "orders", Reason: "undecodable", Payload: []byte("x")}})
			if err := ld.Write(ctx, batch.DeadLettersTable, dl); err != nil {
				t.Fatal(err)
			}
			c := sinks.Commit{
				From: batch.Positions{{Topic: "orders", Partition: 0, Offset: 100}},
				To:   batch.Positions{{Topic: "orders", Partition: 0, Offset: 150}},
				Rows: 50, DeadLetters: 1,
			}
			expectCrash(t, cr, "Commit", ld.Commit(ctx, c))
			s1.kill()

			s2 := openTest(t, testOpts(dir))
			err = s2.Recover(ctx)
			var led *batch.Ledger
			if err == nil {
				led, err = s2.Ledger(ctx)
			}
			if err != nil {
				t.Fatalf("Recover: %v", err)
			}
			wantLoads, wantRows, wantDL := 1, 100, 0
			if tc.committed {
				wantLoads, wantRows, wantDL = 2, 150, 1
			}
			if len(led.Loads) != wantLoads {
				t.Fatalf("ledger has %d loads, want %d", len(led.Loads), wantLoads)
			}
			if n := checkConsistent(t, s2, "orders"); n != wantRows {
				t.Fatalf("orders has %d rows, want %d", n, wantRows)
			}
			if b, err := s2.Scan(ctx, batch.DeadLettersTable); err != nil || b.Len() != wantDL {
				t.Fatalf("dead letters: %v rows, %v; want %d", b.Len(), err, wantDL)
			}
			// Nothing is left over: no staging, no stray versions, no torn line.
			if left := entries(t, filepath.Join(dir, stateDir, "staging")); len(left) != 0 {
				t.Errorf("staging holds %v after recovery", left)
			}
			for _, table := range []string{"orders", batch.DeadLettersTable} {
				if v := versionDirs(t, dir, table); len(v) != 1 {
					t.Errorf("%s has versions %v after recovery, want only the current one", table, v)
				}
			}
			data, err := os.ReadFile(filepath.Join(dir, stateDir, "ledger.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			if len(data) == 0 || data[len(data)-1] != '\n' || bytes.Count(data, []byte("\n")) != wantLoads {
				t.Errorf("ledger file is not %d whole lines: %q", wantLoads, data)
			}

			// Recovering again changes nothing; the replayed batch is refused
			// when its load committed, and commits when it did not.
			if err := s2.Recover(ctx); err != nil {
				t.Fatal(err)
			}
			_, err = commitOrders(ctx, s2, 0, 100, 100, 50)
			switch {
			case tc.committed && !errors.Is(err, sinks.ErrStale):
				t.Fatalf("replay of a committed load: %v, want ErrStale", err)
			case !tc.committed && err != nil:
				t.Fatalf("replay of an uncommitted load: %v", err)
			}
			if n := checkConsistent(t, s2, "orders"); n != 150 {
				t.Fatalf("orders has %d rows after the replay, want 150", n)
			}
		})
	}
}

// TestCommitPublishesWhatACrashLeft checks that a commit, not only Recover,
// publishes a committed load whose writer died before publishing it.
func TestCommitPublishesWhatACrashLeft(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s1 := openTest(t, testOpts(dir))
	if err := s1.Ensure(ctx, []sinks.Table{ordersTable}); err != nil {
		t.Fatal(err)
	}
	cr := crash(t, s1, afterLedgerAppend, 1)
	_, err := commitOrders(ctx, s1, 0, -1, 0, 10)
	expectCrash(t, cr, "commit", err)
	s1.kill()
	s2 := openTest(t, testOpts(dir))
	if _, err := commitOrders(ctx, s2, 1, -1, 10, 5); err != nil {
		t.Fatal(err)
	}
	if n := checkConsistent(t, s2, "orders"); n != 15 {
		t.Fatalf("orders has %d rows, want 15", n)
	}
}

func TestTornLedger(t *testing.T) {
	tests := []struct {
		name    string
		tail    string // appended to a ledger of one load
		wantErr bool
	}{
		{"half a line", `{"seq":2,"load_id":"x","pipe`, false},
		{"zeros", "\x00\x00\x00\x00", false},
		{"a garbled whole last line", "{garbage\n", false},
		{"a garbled line before a good one", "{garbage\n{\"seq\":2}\n", true},
		{"a sequence gap", `{"seq":5,"load_id":"y"}` + "\n", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			s1 := openTest(t, testOpts(dir))
			if err := s1.Ensure(ctx, []sinks.Table{ordersTable}); err != nil {
				t.Fatal(err)
			}
			if _, err := commitOrders(ctx, s1, 0, -1, 0, 10); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, stateDir, "ledger.jsonl")
			good, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, append(slices.Clone(good), tc.tail...), 0o644); err != nil {
				t.Fatal(err)
			}
			s2, err := Open(ctx, testOpts(dir))
			if err == nil {
				t.Cleanup(func() { s2.Close() })
				err = s2.Recover(ctx)
			}
			if tc.wantErr {
				if err == nil {
					t.Fatal("a corrupt ledger was accepted")
				}
				return
			}
			if err != nil {
				t.Fatalf("Recover: %v", err)
			}
			if got, _ := os.ReadFile(path); !bytes.Equal(got, good) {
				t.Fatalf("ledger after recovery:\n%q\nwant\n%q", got, good)
			}
			if _, err := commitOrders(ctx, s2, 0, 10, 10, 5); err != nil {
				t.Fatal(err)
			}
			if n := checkConsistent(t, s2, "orders"); n != 15 {
				t.Fatalf("orders has %d rows, want 15", n)
			}
		})
	}
}

// TestCompactionCrash kills a Sink in the middle of a compaction: before
// and after its swap.
func TestCompactionCrash(t *testing.T) {
	tests := []struct {
		name  string
		at    moment
		files int // after recovery
	}{
		{"before the swap", beforeSwap, 5},
		{"after the swap", afterSwap, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			opts := testOpts(dir)
			opts.CompactMinFiles = 3
			s1 := openTest(t, opts)
			if err := s1.Ensure(ctx, []sinks.Table{ordersTable}); err != nil {
				t.Fatal(err)
			}
			from := int64(-1)
			for i := range 5 {
				if _, err := commitOrders(ctx, s1, 0, from, i*10, 10); err != nil {
					t.Fatal(err)
				}
				from = int64(i*10 + 10)
			}
			cr := crash(t, s1, tc.at, 1)
			// Past its swap a compaction has done its work: only removing
			// what it superseded fails, which it logs.
			if err := s1.Compact(ctx, "orders"); !cr.died() || err != nil && !errors.Is(err, errCrash) {
				t.Fatalf("Compact: %v (crashed %v), want the simulated crash", err, cr.died())
			}
			s1.kill()
			s2 := openTest(t, opts)
			if err := s2.Recover(ctx); err != nil {
				t.Fatal(err)
			}
			if n := checkConsistent(t, s2, "orders"); n != 50 {
				t.Fatalf("orders has %d rows, want 50", n)
			}
			m, err := s2.current("orders")
			if err != nil {
				t.Fatal(err)
			}
			if len(m.Files) != tc.files {
				t.Fatalf("%d files after recovery, want %d", len(m.Files), tc.files)
			}
			if left := entries(t, filepath.Join(dir, stateDir, "staging")); len(left) != 0 {
				t.Errorf("staging holds %v after recovery", left)
			}
		})
	}
}
