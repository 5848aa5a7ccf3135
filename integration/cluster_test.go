package integration

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/sluicehq/sluice/sinks/clickhouse/chtest"
)

// clusterSpec writes the two-runs pipeline into database db of the
// replicated test cluster, its addresses starting with replica first.
func clusterSpec(t testing.TB, c *chtest.Cluster, db, brokers string, first int) string {
	t.Helper()
	dest := fmt.Sprintf("{clickhouse: {addr: [%s, %s], database: %s, cluster: %s, zookeeper: [%s]}}",
		c.Addrs[first], c.Addrs[1-first], db, c.Name, c.ZooKeeper)
	return writeSpecText(t, fmt.Sprintf(twoRunsSpec, "clusterruns", brokers, dest))
}

// replicaDests reads database db on each replica of the cluster.
func replicaDests(t testing.TB, c *chtest.Cluster, db string) []*clickHouseDest {
	t.Helper()
	var out []*clickHouseDest
	for _, addr := range c.Addrs {
		d := &clickHouseDest{addr: addr, db: db, conn: openClickHouse(t, addr)}
		t.Cleanup(func() { d.conn.Close() })
		out = append(out, d)
	}
	return out
}

// TestClusterTwoRunsKilled runs two `sluice run` processes of one pipeline
// (an SCD type 1 flow and an append flow of one topic) on the replicated
// cluster, each talking to another replica first, while change events keep
// arriving, and kills one of them with SIGKILL at random moments, ten
// times, starting it again each time. Then `update` finishes the topic.
// On every replica the append target holds each message once and the CDC
// target each key's latest change.
func TestClusterTwoRunsKilled(t *testing.T) {
	c := chtest.SharedCluster(t)
	db := chtest.NewClusterDatabase(t, c)
	b := startBroker(t, map[string]int32{changesTopic: 4})
	specs := []string{clusterSpec(t, c, db, b.Addr(), 0), clusterSpec(t, c, db, b.Addr(), 1)}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	const n, keys = 6_000, 1_000
	cs := changes(seed, n, keys)
	msgs := changeMessages(seed, cs, 4)

	// The events arrive all along: 240 a second for about 25 s.
	produced := trickle(t, b.Addr(), msgs)

	procs := killRuns(t, specs, seed, 10, "replica", produced)
	mustSluice(t, append([]string{"update", "-f", specs[1]}, fastArgs...)...)

	want := currentRows(cs)
	for i, d := range replicaDests(t, c, db) {
		waitFor(t, time.Minute, fmt.Sprintf("replica %d caught up", i+1), func() bool {
			rows, distinct := rawCounts(t, d, specs[0])
			return rows >= n && distinct == n && slices.Equal(targetRows(t, d, specs[0], "t", targetColumns(1)), want)
		})
		if rows, distinct := rawCounts(t, d, specs[0]); rows != n || distinct != n {
			t.Errorf("replica %d: append target: %d rows, %d distinct messages, want %d once each", i+1, rows, distinct, n)
		}
		if got := targetRows(t, d, specs[0], "t", targetColumns(1)); !slices.Equal(got, want) {
			t.Errorf("replica %d: CDC target: %d rows, want %d; first differences:\n%s", i+1, len(got), len(want), diffRows(got, want, 10))
		}
	}
	var cdcBy []string
	for _, p := range procs {
		if strings.Contains(p.out.String(), `msg="lease taken"`) {
			cdcBy = append(cdcBy, p.name)
		}
	}
	t.Logf("last processes that took the CDC lease: %v", cdcBy)
}

// TestShardedTwoRunsKilled runs two `sluice run` processes of the
// two-runs pipeline (an SCD type 1 flow and an append flow of one
// 8-partition topic) on the cluster of two shards, each talking to
// another shard's server first, kills one of them with SIGKILL at random
// moments, six times, and finishes with `update`. Through the Distributed
// table and the CDC target's view, on either server, every message is
// there once and each key's latest change; each shard holds a share of
// the messages and of the keys.
func TestShardedTwoRunsKilled(t *testing.T) {
	c := chtest.SharedCluster(t)
	db := chtest.NewClusterDatabase(t, c)
	const parts = 8
	b := startBroker(t, map[string]int32{changesTopic: parts})
	spec := func(first int) string {
		dest := fmt.Sprintf("{clickhouse: {addr: [%s, %s], database: %s, cluster: %s, zookeeper: [%s]}}",
			c.ShardAddrs[first], c.ShardAddrs[1-first], db, c.ShardedName, c.ZooKeeper)
		return writeSpecText(t, fmt.Sprintf(twoRunsSpec, "shardedruns", b.Addr(), dest))
	}
	specs := []string{spec(0), spec(1)}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	const n, keys = 6_000, 1_000
	cs := changes(seed, n, keys)
	msgs := changeMessages(seed, cs, parts)
	produced := trickle(t, b.Addr(), msgs)

	killRuns(t, specs, seed, 6, "shard", produced)
	mustSluice(t, append([]string{"update", "-f", specs[1]}, fastArgs...)...)

	want := currentRows(cs)
	total := 0
	keyShard := map[string]int{}
	for i, addr := range c.ShardAddrs {
		d := &clickHouseDest{addr: addr, db: db, conn: openClickHouse(t, addr)}
		t.Cleanup(func() { d.conn.Close() })
		if rows, distinct := rawCounts(t, d, specs[0]); rows != n || distinct != n {
			t.Errorf("through server %d: %d rows, %d distinct messages, want %d once each", i+1, rows, distinct, n)
		}
		if got := targetRows(t, d, specs[0], "t", targetColumns(1)); !slices.Equal(got, want) {
			t.Errorf("through server %d: CDC target: %d rows, want %d; first differences:\n%s", i+1, len(got), len(want), diffRows(got, want, 10))
		}
		var mine uint64
		d.query(t, func(rs driver.Rows) error { return rs.Scan(&mine) }, "SELECT count() FROM "+db+"._sluice_shard_raw")
		if mine == 0 || mine == n {
			t.Errorf("shard %d holds %d of the %d rows, want a share", i+1, mine, n)
		}
		total += int(mine)
		mineKeys := 0
		d.query(t, func(rs driver.Rows) error {
			var k string
			if err := rs.Scan(&k); err != nil {
				return err
			}
			if j, ok := keyShard[k]; ok && j != i {
				t.Errorf("key %q has versions on shards %d and %d", k, j+1, i+1)
			}
			keyShard[k] = i
			mineKeys++
			return nil
		}, "SELECT DISTINCT _sluice_key FROM "+db+"._sluice_phys_t")
		if mineKeys == 0 || mineKeys >= keys {
			t.Errorf("shard %d holds versions of %d of the %d keys, want a share", i+1, mineKeys, keys)
		}
	}
	if total != n {
		t.Errorf("the shards hold %d rows, want %d", total, n)
	}
}

// killRuns runs `sluice run` of specs[0] and of specs[1] (the same
// pipeline, each naming another server first: what the first is, for the
// processes' names), waits for loads of both, kills one of them at random
// (by seed) with SIGKILL kills times, starting it again each time, then
// waits for produced and stops both with SIGTERM. It returns the last two
// processes.
func killRuns(t *testing.T, specs []string, seed uint64, kills int, first string, produced func()) []*runProc {
	t.Helper()
	started := 0
	startRun := func(i int) *runProc {
		started++
		cmd, out := start(t, append([]string{"run", "-f", specs[i], "--log-level", "debug"}, fastArgs...)...)
		return &runProc{name: fmt.Sprintf("run %d (%s %d first)", started, first, i+1), cmd: cmd, pid: cmd.Process.Pid, out: out}
	}
	procs := []*runProc{startRun(0), startRun(1)}
	waitFor(t, time.Minute, "loads of both processes", func() bool {
		return procs[0].commits("raw_in", time.Time{}) > 0 && procs[1].commits("raw_in", time.Time{}) > 0
	})
	rng := rand.New(rand.NewPCG(seed, 5))
	for kill := range kills {
		time.Sleep(time.Duration(500+rng.IntN(2000)) * time.Millisecond)
		i := rng.IntN(2)
		procs[i].signal(t, syscall.SIGKILL)
		procs[i].cmd.Wait()
		t.Logf("kill %d: %s", kill+1, procs[i].name)
		procs[i] = startRun(i)
	}
	produced()
	for _, p := range procs {
		p.signal(t, syscall.SIGTERM)
	}
	for _, p := range procs {
		p.cmd.Wait()
	}
	return procs
}
