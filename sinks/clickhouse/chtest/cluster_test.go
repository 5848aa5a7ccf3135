package chtest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// The tests below share one cluster: they run one after the other, and each
// leaves every server and ZooKeeper running.
func TestMain(m *testing.M) {
	code := m.Run()
	StopSharedCluster()
	os.Exit(code)
}

func connect(t *testing.T, addr string) driver.Conn {
	t.Helper()
	c, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, DialTimeout: 5 * time.Second, ReadTimeout: 60 * time.Second})
	if err != nil {
		t.Fatalf("connect %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func mustExec(t *testing.T, c driver.Conn, query string) {
	t.Helper()
	if err := c.Exec(context.Background(), query); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func count(t *testing.T, c driver.Conn, query string) uint64 {
	t.Helper()
	var n uint64
	if err := c.QueryRow(context.Background(), query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// eventually waits until query answers want on c, ignoring errors meanwhile
// (a restarted server refuses connections at first), and returns how long
// that took.
func eventually(t *testing.T, c driver.Conn, query string, want uint64, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var n uint64
	var err error
	for time.Since(start) < within {
		if err = c.QueryRow(context.Background(), query).Scan(&n); err == nil && n == want {
			return time.Since(start)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: %d (err %v) after %v, want %d", query, n, err, within, want)
	return 0
}

// stage creates a plain MergeTree staging table like the delivery protocol
// would, one that never merges its parts (an attach of merged parts would
// not be recognized as a repeat), and fills it with n rows from k = from.
func stage(t *testing.T, c driver.Conn, table string, from, n int) {
	t.Helper()
	mustExec(t, c, "CREATE TABLE "+table+" (k UInt64, v String) ENGINE = MergeTree ORDER BY k "+
		"SETTINGS max_bytes_to_merge_at_max_space_in_pool = 1, max_bytes_to_merge_at_min_space_in_pool = 1")
	mustExec(t, c, fmt.Sprintf("INSERT INTO %s SELECT number + %d, toString(number) FROM numbers(%d)", table, from, n))
}

// TestClusterReplicatedAttach: a database and a ReplicatedMergeTree table
// created ON CLUSTER land on both replicas under the {shard}/{replica}
// macros; a partition attached from a staging table on replica 1 only is
// fetched by replica 2, also when replica 2 was killed during the attach
// and restarted afterwards.
func TestClusterReplicatedAttach(t *testing.T) {
	cl := SharedCluster(t)
	r1, r2 := connect(t, cl.Addrs[0]), connect(t, cl.Addrs[1])
	db := NewClusterDatabase(t, cl)

	mustExec(t, r1, "CREATE DATABASE "+db+" ON CLUSTER "+cl.Name)
	mustExec(t, r1, "CREATE TABLE "+db+".t ON CLUSTER "+cl.Name+" (k UInt64, v String) "+
		"ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}') ORDER BY k")
	for i, c := range []driver.Conn{r1, r2} {
		var path, replica string
		q := "SELECT zookeeper_path, replica_name FROM system.replicas WHERE database = '" + db + "' AND table = 't'"
		if err := c.QueryRow(context.Background(), q).Scan(&path, &replica); err != nil {
			t.Fatalf("replica %d: %s: %v", i+1, q, err)
		}
		if want := "/clickhouse/tables/01/" + db + "/t"; path != want || replica != fmt.Sprintf("r%d", i+1) {
			t.Errorf("replica %d: zookeeper_path %q, replica %q; want %q, r%d", i+1, path, replica, want, i+1)
		}
	}

	stage(t, r1, db+".stage1", 0, 100)
	mustExec(t, r1, "ALTER TABLE "+db+".t ATTACH PARTITION ID 'all' FROM "+db+".stage1")
	if n := count(t, r1, "SELECT count() FROM "+db+".t"); n != 100 {
		t.Fatalf("replica 1 holds %d rows right after its attach, want 100", n)
	}
	took := eventually(t, r2, "SELECT count() FROM "+db+".t", 100, 30*time.Second)
	t.Logf("replica 2 fetched the attached part in %v", took)
	if n := count(t, r2, "SELECT count() FROM system.tables WHERE database = '"+db+"' AND name = 'stage1'"); n != 0 {
		t.Errorf("the staging table exists on replica 2")
	}

	cl.KillReplica(t, 1)
	stage(t, r1, db+".stage2", 100, 50)
	mustExec(t, r1, "ALTER TABLE "+db+".t ATTACH PARTITION ID 'all' FROM "+db+".stage2")
	cl.StartReplica(t, 1)
	// The restarted replica waits for the killed process's ZooKeeper
	// session to expire before it replicates.
	took = eventually(t, r2, "SELECT count() FROM "+db+".t", 150, 90*time.Second)
	t.Logf("replica 2 caught up %v after its restart", took)
	if n := count(t, r2, "SELECT sum(k) FROM "+db+".t"); n != 149*150/2 {
		t.Errorf("replica 2: sum(k) = %d, want %d", n, 149*150/2)
	}
}

// TestClusterDistributed: replicated tables created ON CLUSTER sharded get
// one ZooKeeper path per shard, and a Distributed table over them reads the
// rows of both shards and splits a synchronous insert by its key.
func TestClusterDistributed(t *testing.T) {
	cl := SharedCluster(t)
	s1, s2 := connect(t, cl.ShardAddrs[0]), connect(t, cl.ShardAddrs[1])
	db := NewClusterDatabase(t, cl)

	mustExec(t, s1, "CREATE DATABASE "+db+" ON CLUSTER "+cl.ShardedName)
	mustExec(t, s1, "CREATE TABLE "+db+".ev_local ON CLUSTER "+cl.ShardedName+" (k UInt64, v String) "+
		"ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}') ORDER BY k")
	mustExec(t, s1, "CREATE TABLE "+db+".ev ON CLUSTER "+cl.ShardedName+" (k UInt64, v String) "+
		"ENGINE = Distributed("+cl.ShardedName+", "+db+", ev_local, k)")
	for i, c := range []driver.Conn{s1, s2} {
		var path string
		if err := c.QueryRow(context.Background(), "SELECT zookeeper_path FROM system.replicas WHERE database = '"+db+"'").Scan(&path); err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("/clickhouse/tables/%02d/%s/ev_local", i+1, db); path != want {
			t.Errorf("shard %d: zookeeper_path %q, want %q", i+1, path, want)
		}
	}

	// A load attached on each shard's own server, as the delivery protocol
	// publishes per shard.
	stage(t, s1, db+".stage", 0, 10)
	mustExec(t, s1, "ALTER TABLE "+db+".ev_local ATTACH PARTITION ID 'all' FROM "+db+".stage")
	stage(t, s2, db+".stage", 10, 20)
	mustExec(t, s2, "ALTER TABLE "+db+".ev_local ATTACH PARTITION ID 'all' FROM "+db+".stage")
	for i, c := range []driver.Conn{s1, s2} {
		if n := count(t, c, "SELECT count() FROM "+db+".ev"); n != 30 {
			t.Errorf("through shard %d's Distributed table: %d rows, want 30", i+1, n)
		}
	}

	ctx := clickhouse.Context(context.Background(), clickhouse.WithSettings(clickhouse.Settings{"insert_distributed_sync": 1}))
	if err := s1.Exec(ctx, "INSERT INTO "+db+".ev SELECT number + 100, 'd' FROM numbers(10)"); err != nil {
		t.Fatal(err)
	}
	n1 := count(t, s1, "SELECT count() FROM "+db+".ev_local WHERE v = 'd'")
	n2 := count(t, s2, "SELECT count() FROM "+db+".ev_local WHERE v = 'd'")
	if n1+n2 != 10 || n1 == 0 || n2 == 0 {
		t.Errorf("a synchronous insert of 10 rows through the Distributed table landed %d on shard 1 and %d on shard 2", n1, n2)
	}
}

// TestClusterZooKeeperRestart: with ZooKeeper killed a replicated table
// takes no inserts; once it is started again the table does, and the row
// replicates. (INSERT ... SELECT: clickhouse-go's Exec of INSERT ... VALUES
// waits for an answer 18.16 never sends.)
func TestClusterZooKeeperRestart(t *testing.T) {
	cl := SharedCluster(t)
	r1, r2 := connect(t, cl.Addrs[0]), connect(t, cl.Addrs[1])
	db := NewClusterDatabase(t, cl)
	mustExec(t, r1, "CREATE DATABASE "+db+" ON CLUSTER "+cl.Name)
	mustExec(t, r1, "CREATE TABLE "+db+".t ON CLUSTER "+cl.Name+" (k UInt64) "+
		"ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}') ORDER BY k")

	cl.KillZooKeeper(t)
	if err := r1.Exec(context.Background(), "INSERT INTO "+db+".t SELECT 1"); err == nil {
		t.Fatal("an insert into a replicated table succeeded with ZooKeeper down")
	} else {
		t.Logf("with ZooKeeper down: %v", err)
	}
	cl.StartZooKeeper(t)
	start := time.Now()
	for {
		err := r1.Exec(context.Background(), "INSERT INTO "+db+".t SELECT 2")
		if err == nil {
			break
		}
		if time.Since(start) > 60*time.Second {
			t.Fatalf("60 s after ZooKeeper's restart: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("replica 1 took inserts %v after ZooKeeper's restart", time.Since(start))
	eventually(t, r2, "SELECT count() FROM "+db+".t WHERE k = 2", 1, 60*time.Second)
	// The next test needs replica 2 writable too.
	eventually(t, r2, "SELECT toUInt64(is_readonly) FROM system.replicas WHERE database = '"+db+"'", 0, 60*time.Second)
}
