package clickhouse

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/sinks"
)

// TestBackgroundCleanup: a writer stops after committing a load and before
// publishing it; another process that loads nothing publishes it with its
// background cleanup, once the writer's heartbeat expired or, for a writer
// without a heartbeat, once the grace period passed, and leaves it alone
// before.
func TestBackgroundCleanup(t *testing.T) {
	tests := []struct {
		name      string
		heartbeat bool          // the writer has a heartbeat, which then expires
		grace     time.Duration // of the idle process
	}{
		{"writer's heartbeat expired", true, time.Hour},
		{"writer without heartbeat, grace period passed", false, 2 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			addr := serverAddr(t)
			db := newDatabase(t, addr)
			// The writer runs no background cleanup: it is about to stop.
			s1 := openSink(t, addr, db, func(o *Options) { o.Pipeline = "p"; o.CleanupEvery = -1 })
			if err := s1.Ensure(ctx, []sinks.Table{eventsTable}); err != nil {
				t.Fatal(err)
			}
			idle := openSink(t, addr, db, func(o *Options) {
				o.Pipeline = "p"
				o.CleanupEvery = 100 * time.Millisecond
				o.Grace = tc.grace
			})
			if err := idle.Recover(ctx); err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			if tc.heartbeat {
				if err := s1.Beat(ctx, sinks.Heartbeat{Pipeline: "p", ID: "proc-1", Kind: "run", BeatAt: now, Expires: now.Add(time.Hour)}); err != nil {
					t.Fatal(err)
				}
			}
			if err := commitEvents(ctx, s1, "first", 0, 30); err != nil {
				t.Fatal(err)
			}
			ft := &fault{match: []string{"ATTACH PARTITION"}}
			withFaults(s1).add(ft)
			// Taken before the commit: the failed publication after it may
			// take a while on a busy machine, and the grace period counts
			// from the commit.
			committed := time.Now()
			err := commitEvents(ctx, s1, "second", 30, 60)
			if !ft.fired || err == nil || !s1.Retryable(err) {
				t.Fatalf("commit with publication failing: %v (fired %v), want a retryable error", err, ft.fired)
			}
			// s1 is abandoned here, as by kill -9, its load committed and
			// not published.
			if tc.heartbeat {
				// Its writer lives: the load is left to it.
				time.Sleep(500 * time.Millisecond)
				if got := eventIDs(t, idle); !slices.Equal(got, seq(0, 30)) {
					t.Fatalf("events while the writer lives: %v, want 0..29 only", got)
				}
				// The heartbeat expires.
				now := time.Now()
				if err := s1.Beat(ctx, sinks.Heartbeat{Pipeline: "p", ID: "proc-1", Kind: "run", BeatAt: now, Expires: now.Add(-time.Second)}); err != nil {
					t.Fatal(err)
				}
			}
			deadline := time.Now().Add(15 * time.Second)
			for !slices.Equal(eventIDs(t, idle), seq(0, 60)) {
				if time.Now().After(deadline) {
					t.Fatalf("events after 15 s: %v, want 0..59 once each", eventIDs(t, idle))
				}
				time.Sleep(50 * time.Millisecond)
			}
			// committed_at has whole seconds on 18.16: a second early at most.
			if !tc.heartbeat && time.Since(committed) < tc.grace-time.Second {
				t.Fatalf("load published %v after its commit, before the grace period of %v", time.Since(committed), tc.grace)
			}
			deadline = time.Now().Add(5 * time.Second)
			for left := leftovers(t, idle); len(left) > 0; left = leftovers(t, idle) {
				if time.Now().After(deadline) {
					t.Fatalf("objects left: %v", left)
				}
				time.Sleep(50 * time.Millisecond)
			}
			// The idle process loaded nothing itself.
			idle.mu.Lock()
			n := len(idle.inflight) + len(idle.pending)
			idle.mu.Unlock()
			if n != 0 {
				t.Fatalf("the idle process has %d loads", n)
			}
		})
	}
}

// TestCloseStopsCleanup: Close stops the background cleanup and waits
// for it.
func TestCloseStopsCleanup(t *testing.T) {
	addr := serverAddr(t)
	s := dial(t, addr, newDatabase(t, addr), func(o *Options) { o.CleanupEvery = time.Millisecond })
	s.mu.Lock()
	done := s.cleanupDone
	s.mu.Unlock()
	if done == nil {
		t.Fatal("Open started no background cleanup")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	default:
		t.Fatal("the background cleanup still runs after Close")
	}
}

// TestAbortAfterLostCreate: the answer to the CREATE of a staging table is
// lost (as when the server dies during it) although the table may exist;
// Abort drops it, and a Write retried in the same load uses it.
func TestAbortAfterLostCreate(t *testing.T) {
	tests := []struct {
		name  string
		after bool // the CREATE ran before its answer was lost
		retry bool // write again and commit instead of aborting
	}{
		{"created, answer lost, abort", true, false},
		{"not created, abort", false, false},
		{"created, answer lost, write again", true, true},
		{"not created, write again", false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			_, _, open := setup(t)
			s := open()
			ft := &fault{match: []string{"CREATE TABLE", stagePrefix}, after: tc.after}
			withFaults(s).add(ft)
			ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: "l1", Pipeline: "p", Flow: "f", Targets: []string{"events"}})
			if err != nil {
				t.Fatal(err)
			}
			err = ld.Write(ctx, "events", events(0, 10))
			if !ft.fired || err == nil || !s.Retryable(err) {
				t.Fatalf("write with the CREATE's answer lost: %v (fired %v), want a retryable error", err, ft.fired)
			}
			stages := 0
			for _, name := range leftovers(t, s) {
				if strings.HasPrefix(name, stagePrefix) {
					stages++
				}
			}
			if want := map[bool]int{true: 1, false: 0}[tc.after]; stages != want {
				t.Fatalf("%d staging tables after the lost answer, want %d", stages, want)
			}
			if tc.retry {
				if err := ld.Write(ctx, "events", events(0, 10)); err != nil {
					t.Fatalf("write again: %v", err)
				}
				if err := ld.Commit(ctx, sinks.Commit{From: kafkaPos(-1), To: kafkaPos(10), Rows: 10}); err != nil {
					t.Fatalf("commit: %v", err)
				}
				if got := eventIDs(t, s); !slices.Equal(got, seq(0, 10)) {
					t.Fatalf("events %v, want 0..9 once each", got)
				}
			} else if err := ld.Abort(ctx); err != nil {
				t.Fatalf("Abort: %v", err)
			}
			if left := leftovers(t, s); len(left) > 0 {
				t.Fatalf("objects left: %v", left)
			}
		})
	}
}
