package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chtest"
	"github.com/sluicehq/sluice/sinks/sinktest"
)

// dialCluster opens a sink on the replicated test cluster whose loads go
// to replica first (0 or 1) while it answers; the caller closes it.
func dialCluster(t testing.TB, c *chtest.Cluster, db string, first int, mod ...func(*Options)) *Sink {
	t.Helper()
	addrs := []string{c.Addrs[first], c.Addrs[1-first]}
	return dial(t, addrs[0], db, append([]func(*Options){func(o *Options) {
		o.Addr, o.Cluster, o.ZooKeeper = addrs, c.Name, []string{c.ZooKeeper}
		o.CleanupEvery = time.Second
	}}, mod...)...)
}

// TestClusterChainAcrossReplicas: two writers on different replicas
// continue the same slot from the same head; exactly one commits, at once,
// however late the replicas see each other's ledger rows, and the rows are
// on both replicas once.
func TestClusterChainAcrossReplicas(t *testing.T) {
	c := chtest.SharedCluster(t)
	db := chtest.NewClusterDatabase(t, c)
	ctx := context.Background()
	a := dialCluster(t, c, db, 0)
	defer a.Close()
	b := dialCluster(t, c, db, 1)
	defer b.Close()
	table := sinks.Table{Name: "ev", Schema: batch.Schema{Columns: []batch.Column{{Name: "id", Type: batch.Int64}}}}
	for _, s := range []*Sink{a, b} {
		if err := s.Ensure(ctx, []sinks.Table{table}); err != nil {
			t.Fatalf("Ensure: %v", err)
		}
	}
	ids := func(lo, hi int64) *batch.Batch {
		b := batch.New(table.Schema, int(hi-lo))
		for i := lo; i < hi; i++ {
			b.Vectors[0].AppendInt(i)
		}
		return b
	}
	pos := func(off int64) batch.Positions {
		return batch.Positions{{Topic: "t", Partition: 0, Offset: off}}
	}
	const rounds = 8
	var mu sync.Mutex
	won := map[string]int{}
	head := int64(-1)
	for r := range rounds {
		from, to := head, head+10
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, s := range []*Sink{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, err := s.Begin(ctx, sinks.LoadMeta{LoadID: fmt.Sprintf("r%d-%d", r, i), Pipeline: sinktest.Pipeline, Flow: "f", Targets: []string{"ev"}})
				if err == nil {
					lo := max(from, 0)
					if err = l.Write(ctx, "ev", ids(lo, to)); err == nil {
						err = l.Commit(ctx, sinks.Commit{From: pos(from), To: pos(to), Rows: to - lo})
					}
					if err != nil {
						_ = l.Abort(ctx)
					}
				}
				errs[i] = err
			}()
		}
		wg.Wait()
		ok := 0
		for i, err := range errs {
			switch {
			case err == nil:
				ok++
				mu.Lock()
				won[[]string{"a", "b"}[i]]++
				mu.Unlock()
			case errors.Is(err, sinks.ErrStale), a.Retryable(err):
			default:
				t.Fatalf("round %d: writer %d: %v", r, i, err)
			}
		}
		if ok > 1 {
			t.Fatalf("round %d: both writers committed the same slot from %d", r, from)
		}
		if ok == 1 {
			head = to
		}
	}
	if head < 0 {
		t.Fatal("no round committed")
	}
	for _, s := range []*Sink{a, b} {
		h, err := s.Heads(ctx, sinktest.Pipeline, "f", []string{"k/t/0"})
		if err != nil {
			t.Fatal(err)
		}
		if got := h["k/t/0"]; got.Offset != head {
			t.Fatalf("head on %s %v, want %d", s.opts.Addr[0], got, head)
		}
	}
	want := make([]int64, 0, head)
	for i := range head {
		want = append(want, i)
	}
	for i, addr := range c.Addrs {
		waitIDs(t, addr, db, "ev", want, fmt.Sprintf("replica %d", i+1))
	}
	t.Logf("rounds won: %v, head %d", won, head)
}

// waitIDs waits (bounded) until the table on the server at addr holds
// exactly want as its id column, sorted; more rows fail at once.
func waitIDs(t testing.TB, addr, db, table string, want []int64, where string) {
	t.Helper()
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, DialTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		rows, err := conn.Query(context.Background(), "SELECT id FROM `"+db+"`.`"+table+"` ORDER BY id")
		var got []int64
		if err == nil {
			for rows.Next() {
				var v int64
				if err = rows.Scan(&v); err != nil {
					break
				}
				got = append(got, v)
			}
			rows.Close()
		}
		if err == nil && slices.Equal(got, want) {
			return
		}
		if err == nil && len(got) > len(want) {
			t.Fatalf("%s: %d rows, want %d (a load published twice?)", where, len(got), len(want))
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: after 60 s: %d rows (err %v), want %d", where, len(got), err, len(want))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestClusterShardsRefused: a cluster of several shards is refused when
// the sink connects, naming the remedy.
func TestClusterShardsRefused(t *testing.T) {
	c := chtest.SharedCluster(t)
	_, err := Open(context.Background(), Options{Addr: c.ShardAddrs, Database: "default", Cluster: c.ShardedName,
		ZooKeeper: []string{c.ZooKeeper}, DialTimeout: 5 * time.Second, CleanupEvery: -1})
	if err == nil || !strings.Contains(err.Error(), "has 2 shards") || !strings.Contains(err.Error(), "one shard") {
		t.Fatalf("Open on the sharded cluster: %v, want a refusal naming its 2 shards", err)
	}
}
