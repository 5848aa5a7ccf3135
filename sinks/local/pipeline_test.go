package local

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
)

// TestPipelinesShareADestination checks that loads of two pipelines in one
// folder keep apart: each Sink's ledger lists its pipeline's loads, and
// positions (hence stale checks) are per pipeline.
func TestPipelinesShareADestination(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	pOpts, qOpts := testOpts(dir), testOpts(dir)
	qOpts.Pipeline = "q"
	p, q := openTest(t, pOpts), openTest(t, qOpts)
	if err := p.Ensure(ctx, []sinks.Table{ordersTable}); err != nil {
		t.Fatal(err)
	}
	commit := func(s *Sink, pipeline string, from int64) error {
		ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: nextLoadID(), Pipeline: pipeline, Flow: "f"})
		if err != nil {
			return err
		}
		if err := ld.Write(ctx, "orders", ordersBatch(int(from+1)*1000, 3)); err != nil {
			return err
		}
		return ld.Commit(ctx, sinks.Commit{
			From: batch.Positions{{Topic: "t", Offset: from}},
			To:   batch.Positions{{Topic: "t", Offset: from + 10}},
			Rows: 3,
		})
	}
	if err := commit(p, "p", -1); err != nil {
		t.Fatal(err)
	}
	// Same flow, topic and partition in another pipeline: not stale.
	if err := commit(q, "", -1); err != nil {
		t.Fatalf("first load of pipeline q: %v", err)
	}
	if err := commit(q, "q", -1); !errors.Is(err, sinks.ErrStale) {
		t.Fatalf("replay in pipeline q: %v, want ErrStale", err)
	}
	for _, tc := range []struct {
		s    *Sink
		want string
	}{{p, "p"}, {q, "q"}} {
		err := tc.s.Recover(ctx)
		var led *batch.Ledger
		if err == nil {
			led, err = tc.s.Ledger(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(led.Loads) != 1 || led.Loads[0].Pipeline != tc.want {
			t.Fatalf("ledger of %s: %+v", tc.want, led.Loads)
		}
	}
	loads, err := p.Scan(ctx, batch.LoadsTable)
	if err != nil {
		t.Fatal(err)
	}
	if loads.Len() != 2 {
		t.Fatalf("_sluice_loads has %d rows, want both pipelines' 2", loads.Len())
	}
	if b, err := p.Scan(ctx, "orders"); err != nil || b.Len() != 6 {
		t.Fatalf("orders: %v rows, %v; want both pipelines' 6", b.Len(), err)
	}
}
