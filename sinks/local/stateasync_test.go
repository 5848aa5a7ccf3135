package local

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/local/fsys"
)

// TestStatesAppliedAfterCommit commits loads whose states are applied
// after their commits returned: GetState reflects every committed load
// whenever it is asked, the goroutine applies the states and removes the
// staging folders on its own, and a Sink killed with states queued leaves
// them to the next one.
func TestStatesAppliedAfterCommit(t *testing.T) {
	for _, kill := range []bool{false, true} {
		t.Run(fmt.Sprint("killed ", kill), func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			opts := testOpts(dir)
			s := openTest(t, opts)
			if err := s.Ensure(ctx, []sinks.Table{custTable}); err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(7, 0))
			model := map[string]string{}
			var keys []string
			for id := range int64(40) {
				keys = append(keys, ck(id))
			}
			check := func(s *Sink, when string) {
				t.Helper()
				got, err := s.GetState(ctx, custTable.Name, keys)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != len(model) {
					t.Fatalf("%s: %d states, want %d", when, len(got), len(model))
				}
				for k, v := range model {
					if string(got[k]) != v {
						t.Fatalf("%s: state of %q: %q, want %q", when, k, got[k], v)
					}
				}
			}
			for load := range 30 {
				var c cdcChange
				for range 1 + rng.IntN(8) {
					id := rng.Int64N(40)
					c.up = append(c.up, cust{id, fmt.Sprint("n", load), "", int64(load + 1)})
					v := []byte(fmt.Sprint("s", load, "-", id))
					if rng.IntN(5) == 0 {
						v = nil
					}
					c.states = append(c.states, sinks.StateEntry{Key: ck(id), Value: v})
				}
				if err := commitCDC(ctx, s, custTable.Name, c); err != nil {
					t.Fatal(err)
				}
				for _, e := range c.states {
					if e.Value == nil {
						delete(model, e.Key)
					} else {
						model[e.Key] = string(e.Value)
					}
				}
				if rng.IntN(3) == 0 {
					check(s, fmt.Sprint("after load ", load))
				}
			}
			last := s.led.lastSeq()
			if kill {
				s.kill()
				s = openTest(t, opts)
				check(s, "after the kill")
				if err := s.Recover(ctx); err != nil {
					t.Fatal(err)
				}
			} else {
				// Without a read, the goroutine catches up alone.
				deadline := time.Now().Add(10 * time.Second)
				for {
					s.statesMu.Lock()
					idle := len(s.queued) == 0 && len(s.queuedLoads) == 0 && !s.applying
					s.statesMu.Unlock()
					if idle {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("states still queued after 10 s")
					}
					time.Sleep(5 * time.Millisecond)
				}
				if through, err := s.readState(custTable.Name, func(*bolt.Tx) error { return nil }); err != nil || through != last {
					t.Fatalf("state file holds loads through %d (%v), want %d", through, err, last)
				}
				check(s, "at the end")
			}
			if left := entries(t, filepath.Join(dir, stateDir, "staging")); len(left) != 0 {
				t.Fatalf("staging holds %v", left)
			}
		})
	}
}

// TestGetStateWhileALoadCommits checks that GetState answers with the
// states of the loads committed before it was called when another load
// commits while it publishes them (its states queued, not applied yet),
// rather than failing as if a committed load's states could not be
// applied; the next GetState shows the later load too.
func TestGetStateWhileALoadCommits(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, testOpts(t.TempDir()))
	s.holdStates = true // committed states wait for a publish or a GetState
	if err := s.Ensure(ctx, []sinks.Table{custTable}); err != nil {
		t.Fatal(err)
	}
	load := func(v string) cdcChange {
		return cdcChange{up: []cust{{1, v, "", 1}}, states: []sinks.StateEntry{{Key: ck(1), Value: []byte(v)}}}
	}
	if err := commitCDC(ctx, s, custTable.Name, load("one")); err != nil {
		t.Fatal(err)
	}
	// Once GetState published (the last step of a publish lists the
	// staging folders) and released the lock, the next load commits before
	// GetState opens the state file again.
	var published, done atomic.Bool
	faulty(t, s).Set(func(op fsys.Op, path string) error {
		switch {
		case op == fsys.OpReadDir && path == s.lay.staging():
			published.Store(true)
		case op == fsys.OpStat && path == s.lay.stateFile(custTable.Name) && published.Load() && done.CompareAndSwap(false, true):
			if err := commitCDC(ctx, s, custTable.Name, load("two")); err != nil {
				t.Error(err)
			}
		}
		return nil
	})
	got, err := s.GetState(ctx, custTable.Name, []string{ck(1)})
	if err != nil {
		t.Fatalf("GetState while a load commits: %v", err)
	}
	if !done.Load() {
		t.Fatal("the second load did not commit during GetState")
	}
	if string(got[ck(1)]) != "one" {
		t.Fatalf("state %q, want the first load's", got[ck(1)])
	}
	got, err = s.GetState(ctx, custTable.Name, []string{ck(1)})
	if err != nil || string(got[ck(1)]) != "two" {
		t.Fatalf("state %q (%v) after the second load, want its", got[ck(1)], err)
	}
}
