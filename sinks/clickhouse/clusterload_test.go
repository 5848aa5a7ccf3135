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

// dialSharded is dialCluster on the cluster of two shards, first server
// first.
func dialSharded(t testing.TB, c *chtest.Cluster, db string, first int, mod ...func(*Options)) *Sink {
	t.Helper()
	addrs := []string{c.ShardAddrs[first], c.ShardAddrs[1-first]}
	return dial(t, addrs[0], db, append([]func(*Options){func(o *Options) {
		o.Addr, o.Cluster, o.ZooKeeper = addrs, c.ShardedName, []string{c.ZooKeeper}
		o.CleanupEvery = time.Second
	}}, mod...)...)
}

// TestClusterShards: on the cluster of two shards each load goes whole to
// the shard of its slot, readers see every row once through the target's
// Distributed table, a column added reaches both shards and the
// Distributed table, a reset empties both shards, and CDC targets and
// replace_partitions are refused naming the remedy.
func TestClusterShards(t *testing.T) {
	c := chtest.SharedCluster(t)
	db := chtest.NewClusterDatabase(t, c)
	ctx := context.Background()
	a := dialSharded(t, c, db, 0)
	defer a.Close()
	b := dialSharded(t, c, db, 1)
	defer b.Close()
	table := sinks.Table{Name: "ev", Schema: batch.Schema{Columns: []batch.Column{{Name: "id", Type: batch.Int64}}}}
	for _, s := range []*Sink{a, b} {
		if err := s.Ensure(ctx, []sinks.Table{table}); err != nil {
			t.Fatalf("Ensure: %v", err)
		}
	}
	const parts, per = 8, 25
	var want []int64
	for p := range int32(parts) {
		s := []*Sink{a, b}[p%2] // both writers place by slot, whichever server they list first
		pos := batch.Positions{{Topic: "t", Partition: p, Offset: per}}
		l, err := s.Begin(ctx, sinks.LoadMeta{LoadID: fmt.Sprintf("p%d", p), Pipeline: sinktest.Pipeline, Flow: "f",
			Targets: []string{"ev"}, Slots: []string{sinks.Slot(pos[0])}})
		if err != nil {
			t.Fatal(err)
		}
		rows := batch.New(table.Schema, per)
		for i := range int64(per) {
			id := int64(p)*1000 + i
			rows.Vectors[0].AppendInt(id)
			want = append(want, id)
		}
		if err := l.Write(ctx, "ev", rows); err != nil {
			t.Fatal(err)
		}
		if err := l.Commit(ctx, sinks.Commit{From: batch.Positions{{Topic: "t", Partition: p, Offset: -1}}, To: pos, Rows: per}); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(want)
	// Each shard holds the loads of the slots its hash picks, whole.
	var held []int64
	for i, addr := range c.ShardAddrs {
		var mine []int64
		for p := range int32(parts) {
			if slotShard(sinks.Slot(batch.Position{Topic: "t", Partition: p}), 2) == uint32(i+1) {
				for k := range int64(per) {
					mine = append(mine, int64(p)*1000+k)
				}
			}
		}
		if len(mine) == 0 || len(mine) == len(want) {
			t.Fatalf("the hash puts %d of %d rows on shard %d: pick other slots", len(mine), len(want), i+1)
		}
		waitIDs(t, addr, db, shardPrefix+"ev", mine, fmt.Sprintf("shard %d's table", i+1))
		held = append(held, mine...)
	}
	slices.Sort(held)
	if !slices.Equal(held, want) {
		t.Fatalf("the shards hold %d rows, want %d", len(held), len(want))
	}
	for i, addr := range c.ShardAddrs {
		waitIDs(t, addr, db, "ev", want, fmt.Sprintf("the distributed table through server %d", i+1))
	}
	got, err := b.Scan(ctx, "ev")
	if err != nil {
		t.Fatal(err)
	}
	if got.Len() != len(want) {
		t.Fatalf("Scan: %d rows, want %d", got.Len(), len(want))
	}

	// A column added: both shards' tables and the Distributed table have it.
	wider := table
	wider.Schema = batch.Schema{Columns: append(slices.Clone(table.Schema.Columns), batch.Column{Name: "note", Type: batch.String, Nullable: true})}
	if err := a.Ensure(ctx, []sinks.Table{wider}); err != nil {
		t.Fatalf("Ensure with a column added: %v", err)
	}
	for i, addr := range c.ShardAddrs {
		for _, name := range []string{shardPrefix + "ev", "ev"} {
			probe := dial(t, addr, db)
			cols, err := probe.conn.Query(ctx, "SELECT note FROM `"+db+"`.`"+name+"` LIMIT 1")
			if err != nil {
				t.Fatalf("server %d, %s: %v", i+1, name, err)
			}
			cols.Close()
			probe.Close()
		}
	}
	if err := b.Ensure(ctx, []sinks.Table{wider}); err != nil {
		t.Fatalf("Ensure on the other server: %v", err)
	}

	// A reset empties both shards.
	if err := a.Reset(ctx, []string{"ev"}, []string{"f"}); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	for i, addr := range c.ShardAddrs {
		waitIDs(t, addr, db, "ev", nil, fmt.Sprintf("server %d after the reset", i+1))
	}

	cdc := sinks.Table{Name: "cur", Kind: sinks.KindSCD1, Keys: []string{"id"}, Schema: table.Schema}
	if err := a.Ensure(ctx, []sinks.Table{cdc}); err == nil || !strings.Contains(err.Error(), "2 shards") || !strings.Contains(err.Error(), "one shard") {
		t.Fatalf("Ensure of a CDC target on 2 shards: %v, want a refusal naming the remedy", err)
	}
	l, err := a.Begin(ctx, sinks.LoadMeta{LoadID: "replace", Pipeline: sinktest.Pipeline, Flow: "g", Targets: []string{"ev"}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Abort(ctx)
	if err := l.(sinks.PartitionLoad).ReplacePartitions(ctx, "ev", batch.New(batch.Schema{}, 0)); err == nil || !strings.Contains(err.Error(), "write: append") {
		t.Fatalf("ReplacePartitions on 2 shards: %v, want a refusal naming the remedy", err)
	}
}
