package clickhouse

import (
	"context"
	"fmt"
	"testing"

	"github.com/sluicehq/sluice/sinks"
)

// TestHeadsWithoutHints: the rows of _sluice_heads are hints. With them
// gone (as after a crash between a commit and its heads, or on a ledger
// from before them) Heads folds the ledger and says the same, and the next
// commit continues the chain; a destination whose _sluice_heads is made
// anew gets the heads of its whole ledger, totals included.
func TestHeadsWithoutHints(t *testing.T) {
	ctx := context.Background()
	addr := serverAddr(t)
	db := newDatabase(t, addr)
	pipeline := func(o *Options) { o.Pipeline = "p" }
	s := openSink(t, addr, db, pipeline)
	if err := s.Ensure(ctx, []sinks.Table{eventsTable}); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		if err := commitEvents(ctx, s, fmt.Sprintf("h%d", i), i*10, i*10+10); err != nil {
			t.Fatal(err)
		}
	}
	want := func(s *Sink) string {
		t.Helper()
		led, err := s.Ledger(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(sinks.LedgerHeads(led, "f"))
	}
	heads := func(s *Sink, slots []string) string {
		t.Helper()
		h, err := s.Heads(ctx, "p", "f", slots)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(h)
	}
	totals := func(s *Sink) sinks.FlowTotals {
		t.Helper()
		tot, err := s.Totals(ctx, "p")
		if err != nil {
			t.Fatal(err)
		}
		return tot["f"]
	}
	if got, w := heads(s, nil), want(s); got != w {
		t.Fatalf("Heads %s, want %s", got, w)
	}
	if tot := totals(s); tot.Loads != 6 || tot.Rows != 60 || tot.DeadLetters != 6 {
		t.Fatalf("Totals %+v, want 6 loads of 60 rows and 6 dead letters", tot)
	}
	if err := s.conn.Exec(ctx, "TRUNCATE TABLE "+s.table(headsTable)); err != nil {
		t.Fatal(err)
	}
	if got, w := heads(s, []string{"k/t/0"}), want(s); got != w {
		t.Errorf("Heads without hints %s, want %s", got, w)
	}
	if err := commitEvents(ctx, s, "h6", 60, 70); err != nil {
		t.Fatalf("commit after the hints went: %v", err)
	}
	if tot := totals(s); tot.Loads != 7 || tot.Rows != 70 {
		t.Errorf("Totals after the next commit %+v, want 7 loads of 70 rows", tot)
	}
	if err := s.conn.Exec(ctx, "DROP TABLE "+s.table(headsTable)); err != nil {
		t.Fatal(err)
	}
	s2 := openSink(t, addr, db, pipeline)
	if got, w := heads(s2, nil), want(s2); got != w {
		t.Errorf("Heads of a destination whose heads were made anew: %s, want %s", got, w)
	}
	if tot := totals(s2); tot.Loads != 7 || tot.Rows != 70 || tot.DeadLetters != 7 {
		t.Errorf("Totals of a destination whose heads were made anew: %+v, want 7 loads of 70 rows and 7 dead letters", tot)
	}
}
