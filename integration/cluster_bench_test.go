package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/flows/sample"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chtest"
)

// BenchmarkAppendCluster measures sluice's append throughput from the
// broker into the replicated test cluster (2 replicas of one shard, the
// commit point in ZooKeeper) against the same pipeline into the single
// test server, in the same run, and reports the ratio. Everything shares
// this machine's cores: the broker, ZooKeeper, the servers and sluice, so
// the cluster's replica fetching each part costs the run too, which a
// machine per replica would not. SLUICE_BENCH_MESSAGES sets the topic's
// size (default 1,000,000). Run it with -benchtime 1x (make bench does).
func BenchmarkAppendCluster(b *testing.B) {
	addr := clickHouseAddr(b)
	c := chtest.SharedCluster(b)
	n := benchMessages()
	broker := startBroker(b, map[string]int32{"orders": benchPartitions})
	msgs, _ := orderMessages(n)
	produceMsgs(b, broker.Addr(), "orders", msgs)
	msgs = nil
	ctx := context.Background()
	const local = "local: {path: %s}"
	for b.Loop() {
		single := newClickHouseDest(b, addr)
		oneTook := sluiceIntoClickHouse(ctx, b, single, broker.Addr())
		checkOrders(b, single, "orders", n)

		db := chtest.NewClusterDatabase(b, c)
		text := fmt.Sprintf(strings.Replace(sample.Spec, local, "clickhouse: {addr: [%s], database: %s, cluster: %s, zookeeper: [%s]}", 1),
			broker.Addr(), strings.Join(c.Addrs, ", "), db, c.Name, c.ZooKeeper)
		clTook, sink := runUpdate(ctx, b, text)
		sink.Close()
		for _, r := range replicaDests(b, c, db) {
			waitFor(b, 2*time.Minute, "replica "+r.addr+" caught up", func() bool {
				rows, _ := r.count(b, "", "orders", "order_id")
				return rows >= int64(n)
			})
			checkOrders(b, r, "orders", n)
		}
		one, cl := float64(n)/oneTook.Seconds(), float64(n)/clTook.Seconds()
		b.ReportMetric(one, "single_msgs/s")
		b.ReportMetric(cl, "cluster_msgs/s")
		b.ReportMetric(cl/one, "ratio_cluster_vs_single")
		fmt.Printf("append into clickhouse, %d messages: one server %.0f msg/s (%s); replicated cluster %.0f msg/s (%s); cluster/single %.2f\n",
			n, one, oneTook.Round(time.Millisecond), cl, clTook.Round(time.Millisecond), cl/one)
	}
}

// BenchmarkAppendShards measures two sluice processes loading one topic
// together into the test cluster of two shards (each load on the shard of
// its partition, every commit through ZooKeeper) against one process
// alone, in the same run, and reports the ratio. The two are two
// destinations and runners in this process, in one consumer group, each
// listing the other shard's server first; like the processes, both
// shards, ZooKeeper and the broker share this machine's cores, where a
// machine per shard and per process would add each one's cores.
// SLUICE_BENCH_MESSAGES sets the topic's size (default 1,000,000). Run it
// with -benchtime 1x (make bench does).
func BenchmarkAppendShards(b *testing.B) {
	c := chtest.SharedCluster(b)
	n := benchMessages()
	broker := startBroker(b, map[string]int32{"orders": benchPartitions})
	msgs, _ := orderMessages(n)
	produceMsgs(b, broker.Addr(), "orders", msgs)
	msgs = nil
	ctx := context.Background()
	spec := func(db string, first int) string {
		const local = "local: {path: %s}"
		return fmt.Sprintf(strings.Replace(sample.Spec, local, "clickhouse: {addr: [%s, %s], database: %s, cluster: %s, zookeeper: [%s]}", 1),
			broker.Addr(), c.ShardAddrs[first], c.ShardAddrs[1-first], db, c.ShardedName, c.ZooKeeper)
	}
	check := func(db string) {
		for _, addr := range c.ShardAddrs {
			d := &clickHouseDest{addr: addr, db: db, conn: openClickHouse(b, addr)}
			checkOrders(b, d, "orders", n)
			d.conn.Close()
		}
	}
	for b.Loop() {
		db := chtest.NewClusterDatabase(b, c)
		oneTook, sink := runUpdate(ctx, b, spec(db, 0))
		sink.Close()
		check(db)

		db = chtest.NewClusterDatabase(b, c)
		var wg sync.WaitGroup
		took := make([]time.Duration, 2)
		errs := make([]error, 2)
		for i := range 2 {
			dir := b.TempDir()
			wg.Go(func() {
				var s sinks.Sink
				if took[i], s, errs[i] = update(ctx, dir, spec(db, i)); s != nil {
					s.Close()
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
		check(db)
		twoTook := max(took[0], took[1])
		one, two := float64(n)/oneTook.Seconds(), float64(n)/twoTook.Seconds()
		b.ReportMetric(one, "one_process_msgs/s")
		b.ReportMetric(two, "two_processes_msgs/s")
		b.ReportMetric(two/one, "ratio_two_vs_one")
		fmt.Printf("append into the cluster of 2 shards, %d messages: one process %.0f msg/s (%s); two processes %.0f msg/s (%s, %s); two/one %.2f\n",
			n, one, oneTook.Round(time.Millisecond), two, took[0].Round(time.Millisecond), took[1].Round(time.Millisecond), two/one)
	}
}
