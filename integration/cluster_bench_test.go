package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/flows/sample"
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
