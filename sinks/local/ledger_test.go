package local

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/local/fsys"
)

// ledgerState is what a ledger says: every load (the archived ones
// included), each flow's heads and its totals.
func ledgerState(t *testing.T, s *Sink) string {
	t.Helper()
	ctx := context.Background()
	led, err := s.Ledger(ctx)
	if err != nil {
		t.Fatalf("Ledger: %v", err)
	}
	var b strings.Builder
	for _, ld := range led.Loads {
		fmt.Fprintf(&b, "%s %s %s %d %d\n", ld.LoadID, ld.Flow, ld.Positions.Encode(), ld.Rows, ld.DeadLetters)
	}
	for _, flow := range []string{"f", "g"} {
		h, err := s.Heads(ctx, "p", flow, nil)
		if err != nil {
			t.Fatalf("Heads: %v", err)
		}
		if fmt.Sprint(h) != fmt.Sprint(sinks.LedgerHeads(led, flow)) {
			t.Errorf("Heads of %s = %v, the ledger's %v", flow, h, sinks.LedgerHeads(led, flow))
		}
		fmt.Fprintf(&b, "heads %s %v\n", flow, h)
	}
	tot, err := s.Totals(ctx, "p")
	if err != nil {
		t.Fatalf("Totals: %v", err)
	}
	for _, flow := range []string{"f", "g"} {
		x := tot[flow]
		fmt.Fprintf(&b, "totals %s %d %d %d\n", flow, x.Loads, x.Rows, x.DeadLetters)
	}
	return b.String()
}

// commitLedgerLoads commits n loads alternating between flow f (Kafka
// partition 0) and flow g (file a.parquet), continuing from load i0.
func commitLedgerLoads(t *testing.T, s *Sink, i0, n int) {
	t.Helper()
	ctx := context.Background()
	for i := i0; i < i0+n; i++ {
		flow, from, to := "f", batch.Position{Topic: "orders", Offset: int64(i/2) - 1}, batch.Position{Topic: "orders", Offset: int64(i/2) + 1}
		if i/2 == 0 {
			from.Offset = -1
		} else {
			from.Offset = int64(i / 2)
		}
		if i%2 == 1 {
			flow, from, to = "g", batch.Position{File: "a.parquet", RowGroup: int64(i / 2)}, batch.Position{File: "a.parquet", RowGroup: int64(i/2) + 1}
		}
		ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: nextLoadID(), Pipeline: "p", Flow: flow, Targets: []string{"orders"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := ld.Write(ctx, "orders", ordersBatch(i, 1)); err != nil {
			t.Fatal(err)
		}
		if err := ld.Commit(ctx, sinks.Commit{From: batch.Positions{from}, To: batch.Positions{to}, Rows: 1, DeadLetters: int64(i % 3)}); err != nil {
			t.Fatalf("load %d: %v", i, err)
		}
	}
}

func ledgerLines(t *testing.T, dir string) int {
	t.Helper()
	data, err := os.ReadFile(dir + "/_sluice/ledger.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(data), "\n")
}

// TestLedgerCompaction: once the ledger holds compactAt lines a commit
// folds them into its base and an archive segment. The ledger then reads
// the same (every load, the heads, the totals), in this Sink, in one that
// was open meanwhile and in a new one, and it stays short; the chain
// continues across compactions, stale loads are still refused, and a reset
// before a compaction still forgets its flow's loads.
func TestLedgerCompaction(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openTest(t, testOpts(dir))
	s.compactAt = 5
	other := openTest(t, testOpts(dir)) // another process, reading only
	if err := s.Ensure(ctx, []sinks.Table{ordersTable}); err != nil {
		t.Fatal(err)
	}
	commitLedgerLoads(t, s, 0, 13)
	if n := ledgerLines(t, dir); n >= 5 {
		t.Fatalf("ledger.jsonl holds %d lines after 13 loads, want fewer than 5", n)
	}
	want := ledgerState(t, s)
	if strings.Count(want, "\n") != 13+4 {
		t.Fatalf("ledger state:\n%s\nwant 13 loads", want)
	}
	if got := ledgerState(t, other); got != want {
		t.Errorf("a Sink open meanwhile reads\n%s\nwant\n%s", got, want)
	}
	if got := ledgerState(t, openTest(t, testOpts(dir))); got != want {
		t.Errorf("a new Sink reads\n%s\nwant\n%s", got, want)
	}
	// A load from a folded position is stale; the chain goes on.
	ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: nextLoadID(), Pipeline: "p", Flow: "f", Targets: []string{"orders"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ld.Commit(ctx, sinks.Commit{From: batch.Positions{{Topic: "orders", Offset: 3}}, To: batch.Positions{{Topic: "orders", Offset: 4}}}); err == nil {
		t.Fatal("a load from a folded position committed")
	}
	commitLedgerLoads(t, other, 13, 4)
	if b, err := s.Scan(ctx, "orders"); err != nil || b.Len() != 17 {
		t.Errorf("orders holds %v rows after 17 loads (%v)", b.Len(), err)
	}
	if err := s.Reset(ctx, []string{"orders"}, []string{"g"}); err != nil {
		t.Fatal(err)
	}
	commitLedgerLoads(t, s, 17, 0)
	got := ledgerState(t, openTest(t, testOpts(dir)))
	if strings.Contains(got, " g [") || !strings.Contains(got, "totals g 0 0 0") || !strings.Contains(got, "heads g map[]") {
		t.Errorf("after a reset of g:\n%s\nwant no load, head or total of g", got)
	}
}

// TestLedgerCompactionCrash fails each file operation of a compaction in
// turn, as a crash: a new Sink then reads the ledger as it was, and the
// next commits compact it.
func TestLedgerCompactionCrash(t *testing.T) {
	ctx := context.Background()
	for i := range 12 {
		t.Run(fmt.Sprintf("operation %d", i), func(t *testing.T) {
			dir := t.TempDir()
			s := openTest(t, testOpts(dir))
			s.compactAt = 4
			if err := s.Ensure(ctx, []sinks.Table{ordersTable}); err != nil {
				t.Fatal(err)
			}
			commitLedgerLoads(t, s, 0, 3)
			want := ""
			// The 4th load compacts: fail its compaction's i-th operation
			// (after the ledger's fsync and the publication) and every later
			// one.
			seen, armed, dead := 0, false, false
			faulty(t, s).Set(func(op fsys.Op, path string) error {
				if dead {
					return errCrash
				}
				if strings.HasSuffix(path, "ledger.jsonl") && op == fsys.OpSync {
					armed = true
				}
				if !armed || !strings.Contains(path, "ledger") && !strings.Contains(path, "/loads") {
					return nil
				}
				if seen++; seen > i+1 {
					dead = true
					return errCrash
				}
				return nil
			})
			commitLedgerLoads(t, s, 3, 1)
			s.kill()
			r := openTest(t, testOpts(dir))
			if err := r.Recover(ctx); err != nil {
				t.Fatalf("Recover: %v", err)
			}
			want = ledgerState(t, r)
			if strings.Count(want, "\n") != 4+4 {
				t.Fatalf("after the crash the ledger reads\n%s\nwant 4 loads", want)
			}
			r.compactAt = 4
			commitLedgerLoads(t, r, 4, 6)
			got := ledgerState(t, openTest(t, testOpts(dir)))
			if strings.Count(got, "\n") != 10+4 || !strings.HasPrefix(got, want[:strings.Index(want, "heads")]) {
				t.Errorf("after 6 more loads:\n%s\nwant the 4 before and 6 more", got)
			}
		})
	}
}
