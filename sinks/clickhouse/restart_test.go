package clickhouse

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chtest"
)

func startOwnServer(t *testing.T) *chtest.Server {
	serverAddr(t) // the same precondition as every server test
	return chtest.StartServer(t)
}

// TestServerRestart kills the server (kill -9) in the middle of a load and
// between a commit and its publication; the errors are retryable, and once
// the server is back the writer goes on without loss or duplicates.
func TestServerRestart(t *testing.T) {
	srv := startOwnServer(t)
	ctx := context.Background()
	db := "sluice_restart"
	open := func() *Sink {
		s := openSink(t, srv.Addr, db, func(o *Options) {
			o.Pipeline = "p"
			o.DialTimeout = 2 * time.Second
		})
		s.setGrace(-time.Second)
		return s
	}
	s := open()
	if err := s.Ensure(ctx, []sinks.Table{eventsTable}); err != nil {
		t.Fatal(err)
	}
	if err := commitEvents(ctx, s, "one", 0, 30); err != nil {
		t.Fatal(err)
	}

	// Killed in the middle of a load.
	ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: "two", Pipeline: "p", Flow: "f", Targets: []string{"events"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ld.Write(ctx, "events", events(30, 45)); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	err = ld.Write(ctx, "events", events(45, 60))
	if err == nil || !s.Retryable(err) {
		t.Fatalf("write to a killed server: %v, want a retryable error", err)
	}
	if err := ld.Abort(ctx); err == nil {
		t.Fatal("abort against a killed server succeeded")
	}
	srv.Start()
	if err := commitEvents(ctx, s, "two-again", 30, 60); err != nil {
		t.Fatalf("retried load after the restart: %v", err)
	}
	if got := eventIDs(t, s); !slices.Equal(got, seq(0, 60)) {
		t.Fatalf("events %v, want 0..59 once", got)
	}

	// Killed between the commit and the publication.
	withFaults(s).add(&fault{match: []string{"ATTACH PARTITION"}, do: func() { srv.Kill() }})
	err = commitEvents(ctx, s, "three", 60, 90)
	if err == nil || !s.Retryable(err) {
		t.Fatalf("commit whose publication met a killed server: %v, want a retryable error", err)
	}
	srv.Start()
	// The runner retries the batch as a new load: the first one turns out
	// committed, gets published, and the retry is stale.
	err = commitEvents(ctx, s, "three-again", 60, 90)
	if !errors.Is(err, sinks.ErrStale) {
		t.Fatalf("retry of a committed load: %v, want ErrStale", err)
	}
	if got := eventIDs(t, s); !slices.Equal(got, seq(0, 90)) {
		t.Fatalf("events %v, want 0..89 once", got)
	}
	s2 := open()
	err = s2.Recover(ctx)
	var led *batch.Ledger
	if err == nil {
		led, err = s2.Ledger(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, l := range led.Loads {
		ids = append(ids, l.LoadID)
	}
	if want := []string{"one", "two-again", "three"}; !slices.Equal(ids, want) {
		t.Fatalf("ledger %v, want %v", ids, want)
	}
	if left := leftovers(t, s2); len(left) > 0 {
		t.Fatalf("objects left: %v", left)
	}
}
