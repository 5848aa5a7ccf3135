//go:build !race

package clickhouse

// The long suites on the test cluster run in make test's pass without the
// race detector; the race pass keeps the short cluster tests
// (clusterload_test.go). The conformance suites run in parallel, after the
// package's other tests (those that stop a server or ZooKeeper among
// them): each makes databases of its own, and their time is mostly the
// servers' running ON CLUSTER statements one at a time, on each cluster.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chtest"
	"github.com/sluicehq/sluice/sinks/sinktest"
)

// TestClusterConformance runs the conformance suite of append targets on
// the replicated cluster: the commit point is in ZooKeeper, the loads are
// staged and published on the first replica.
func TestClusterConformance(t *testing.T) {
	t.Parallel() // after the tests that stop servers; each suite its own databases
	c := chtest.SharedCluster(t)
	probe := dialCluster(t, c, "default", 0)
	defer probe.Close()
	sinktest.Run(t, func(t *testing.T) func() sinks.Sink {
		db := chtest.NewClusterDatabase(t, c)
		return func() sinks.Sink { return dialCluster(t, c, db, 0) }
	}, append(suiteOptions(probe), sinktest.PublishFault(func(t *testing.T, s sinks.Sink) {
		s.(*Sink).failPublish.Store(true)
	}))...)
}

// TestShardedConformance runs the conformance suites of append and CDC
// targets, and the reset suite, on the cluster of two shards: an append
// target is a table per shard under a Distributed table, a CDC target's
// physical table one per shard under a Distributed table sharded by key,
// which the suites read through the target.
func TestShardedConformance(t *testing.T) {
	t.Parallel() // after the tests that stop servers; each suite its own databases
	c := chtest.SharedCluster(t)
	probe := dialSharded(t, c, "default", 0)
	defer probe.Close()
	factory := func(t *testing.T) func() sinks.Sink {
		db := chtest.NewClusterDatabase(t, c)
		return func() sinks.Sink { return dialSharded(t, c, db, 0) }
	}
	t.Run("append", func(t *testing.T) {
		sinktest.Run(t, factory, append(suiteOptions(probe), sinktest.PublishFault(func(t *testing.T, s sinks.Sink) {
			s.(*Sink).failPublish.Store(true)
		}))...)
	})
	t.Run("cdc", func(t *testing.T) {
		sinktest.RunCDC(t, factory, suiteOptions(probe)...)
	})
	t.Run("reset", func(t *testing.T) {
		sinktest.RunReset(t, factory, append(suiteOptions(probe), sinktest.CrashReset(stopResetAt("reset-committed")))...)
	})
}

// TestClusterCDCConformance runs the CDC suite on the replicated cluster.
func TestClusterCDCConformance(t *testing.T) {
	t.Parallel() // after the tests that stop servers; each suite its own databases
	c := chtest.SharedCluster(t)
	probe := dialCluster(t, c, "default", 0)
	defer probe.Close()
	sinktest.RunCDC(t, func(t *testing.T) func() sinks.Sink {
		db := chtest.NewClusterDatabase(t, c)
		return func() sinks.Sink { return dialCluster(t, c, db, 0) }
	}, suiteOptions(probe)...)
}

// TestClusterLoadsThroughFaults: two writers, one on each replica, load
// one slot in turns, as two runners sharing it would (each continues the
// head it reads, and reads again when refused), while replica 1 is killed
// -9 and restarted and ZooKeeper is killed and restarted. Afterwards every
// id is on both replicas exactly once.
func TestClusterLoadsThroughFaults(t *testing.T) {
	c := chtest.SharedCluster(t)
	db := chtest.NewClusterDatabase(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	table := sinks.Table{Name: "ev", Schema: batch.Schema{Columns: []batch.Column{{Name: "id", Type: batch.Int64}}}}
	quiet := func(o *Options) { o.Logger = nil; o.DialTimeout, o.ReadTimeout = 2*time.Second, 20*time.Second }
	writers := []*Sink{dialCluster(t, c, db, 0, quiet), dialCluster(t, c, db, 1, quiet)}
	for _, s := range writers {
		defer s.Close()
		if err := s.Ensure(ctx, []sinks.Table{table}); err != nil {
			t.Fatalf("Ensure: %v", err)
		}
	}
	const end, step = 600, 5
	var mu sync.Mutex
	commits := make([]int, len(writers))
	failures := map[string]int{}
	var wg sync.WaitGroup
	for w, s := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ctx.Err() == nil; n++ {
				h, err := s.Heads(ctx, sinktest.Pipeline, "f", []string{"k/t/0"})
				if err != nil {
					mu.Lock()
					failures["heads"]++
					mu.Unlock()
					time.Sleep(100 * time.Millisecond)
					continue
				}
				from := int64(-1)
				if p, ok := h["k/t/0"]; ok {
					from = p.Offset
				}
				if from >= end {
					return
				}
				lo := max(from, 0)
				to := lo + step
				b := batch.New(table.Schema, step)
				for i := lo; i < to; i++ {
					b.Vectors[0].AppendInt(i)
				}
				l, err := s.Begin(ctx, sinks.LoadMeta{LoadID: fmt.Sprintf("w%d-%d", w, n), Pipeline: sinktest.Pipeline, Flow: "f", Targets: []string{"ev"}})
				if err == nil {
					if err = l.Write(ctx, "ev", b); err == nil {
						err = l.Commit(ctx, sinks.Commit{From: batch.Positions{{Topic: "t", Offset: from}}, To: batch.Positions{{Topic: "t", Offset: to}}, Rows: step})
					}
					if err != nil {
						_ = l.Abort(ctx)
					}
				}
				mu.Lock()
				switch {
				case err == nil:
					commits[w]++
				case errors.Is(err, sinks.ErrStale):
					failures["stale"]++
				case s.Retryable(err):
					failures["retryable"]++
				default:
					failures[err.Error()]++
				}
				mu.Unlock()
				if err != nil && !errors.Is(err, sinks.ErrStale) {
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
	}
	progress := func() int64 {
		h, err := writers[1].Heads(ctx, sinktest.Pipeline, "f", []string{"k/t/0"})
		if err != nil {
			return -1
		}
		return h["k/t/0"].Offset
	}
	waitFor := func(off int64) {
		for ctx.Err() == nil && progress() < off {
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitFor(100)
	c.KillReplica(t, 0)
	waitFor(200) // writer 0 fails over to replica 2
	c.StartReplica(t, 0)
	waitFor(300)
	c.KillZooKeeper(t)
	time.Sleep(2 * time.Second)
	c.StartZooKeeper(t)
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("writers did not reach %d in time (head %d): commits %v, failures %v", end, progress(), commits, failures)
	}
	mu.Lock()
	for what, n := range failures {
		if what != "stale" && what != "retryable" && what != "heads" {
			t.Errorf("%d failures that are neither stale nor retryable: %s", n, what)
		}
	}
	t.Logf("commits %v, failures %v", commits, failures)
	mu.Unlock()
	want := make([]int64, 0, end)
	for i := range int64(end) {
		want = append(want, i)
	}
	for i, addr := range c.Addrs {
		waitIDs(t, addr, db, "ev", want, fmt.Sprintf("replica %d", i+1))
	}
}
