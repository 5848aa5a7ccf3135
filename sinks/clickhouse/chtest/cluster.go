package chtest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// Cluster is a ClickHouse cluster started with scripts/clickhouse-test-cluster:
// one ZooKeeper and four servers, declared on every server as two clusters,
// Name (1 shard x 2 replicas: Addrs) and ShardedName (2 shards x 1 replica:
// ShardAddrs). See docs/clickhouse.md#test-cluster.
type Cluster struct {
	Name        string   // "replicated"
	Addrs       []string // its replicas' native addresses, replica i at Addrs[i]
	ShardedName string   // "sharded"
	ShardAddrs  []string // its shards' native addresses, shard i at ShardAddrs[i]
	ZooKeeper   string   // ZooKeeper's client address

	dir    string
	script string
	mu     sync.Mutex
	down   map[string]bool // servers ("1".."4") and "zookeeper" that a test stopped
}

// StartCluster starts a cluster of the test's own, killed and removed when
// the test ends. It takes a few seconds; tests that share one cluster use
// SharedCluster. When the cluster cannot start the test fails under CI=true
// and is skipped otherwise.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	script := findScriptNamed(t, "clickhouse-test-cluster")
	c, err := startCluster(script, filepath.Join(t.TempDir(), "cluster"))
	if c != nil {
		t.Cleanup(c.remove)
	}
	if err != nil {
		noCluster(t, err)
	}
	c.logsOnFailure(t)
	return c
}

var shared struct {
	sync.Mutex
	c   *Cluster
	err error
}

// SharedCluster returns the test binary's cluster, started at the first call
// and stopped by StopSharedCluster, which the package's TestMain calls
// after m.Run. It is made under $SLUICE_CLICKHOUSE_CLUSTER_ROOT when set
// (make test sets it and removes what a crashed test binary left there),
// else under the system's temporary folder. A test that stops a server or
// ZooKeeper gets it started again when it ends; tests sharing the cluster
// must not run in parallel with one that does.
func SharedCluster(t testing.TB) *Cluster {
	t.Helper()
	shared.Lock()
	defer shared.Unlock()
	if shared.c == nil && shared.err == nil {
		shared.c, shared.err = startShared()
	}
	if shared.err != nil {
		noCluster(t, shared.err) // a failed start is not tried again by every test
	}
	shared.c.logsOnFailure(t)
	return shared.c
}

// logsOnFailure logs the tails of the servers' and ZooKeeper's logs when
// the test fails: the cluster's folder goes with the test binary.
func (c *Cluster) logsOnFailure(t testing.TB) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, f := range []string{"ch1/log/server.err.log", "ch1/log/stdout.log", "ch2/log/server.err.log", "ch2/log/stdout.log",
			"ch3/log/server.err.log", "ch3/log/stdout.log", "ch4/log/server.err.log", "ch4/log/stdout.log", "zk/zk.log"} {
			b, err := os.ReadFile(filepath.Join(c.dir, f))
			if err != nil || len(b) == 0 {
				continue
			}
			lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
			if len(lines) > 30 {
				lines = lines[len(lines)-30:]
			}
			t.Logf("--- %s\n%s", f, strings.Join(lines, "\n"))
		}
	})
}

// StopSharedCluster stops the cluster SharedCluster started, if any.
func StopSharedCluster() {
	shared.Lock()
	defer shared.Unlock()
	if shared.c != nil {
		shared.c.remove()
		shared.c = nil
	}
}

func startShared() (*Cluster, error) {
	script, err := scriptPath("clickhouse-test-cluster")
	if err != nil {
		return nil, err
	}
	root := os.Getenv("SLUICE_CLICKHOUSE_CLUSTER_ROOT")
	if root != "" {
		if err := os.MkdirAll(root, 0o755); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp(root, "sluice-cluster-")
	if err != nil {
		return nil, err
	}
	c, err := startCluster(script, dir)
	if err != nil && c != nil {
		c.remove()
		c = nil
	}
	return c, err
}

func noCluster(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("the ClickHouse test cluster did not start: %v", err)
	}
	t.Skipf("the ClickHouse test cluster did not start (under CI=true this fails): %v", err)
}

// startCluster runs the script's start in dir; on an error the returned
// cluster, when not nil, still needs removing.
func startCluster(script, dir string) (*Cluster, error) {
	c := &Cluster{dir: dir, script: script, down: map[string]bool{}}
	out, err := c.exec("start")
	if err != nil {
		return c, err
	}
	env := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "="); ok {
			env[k] = v
		}
	}
	c.Name, c.ShardedName = env["SLUICE_CLICKHOUSE_CLUSTER"], env["SLUICE_CLICKHOUSE_SHARDED"]
	c.Addrs = strings.Split(env["SLUICE_CLICKHOUSE_CLUSTER_ADDRS"], ",")
	c.ShardAddrs = strings.Split(env["SLUICE_CLICKHOUSE_SHARDED_ADDRS"], ",")
	c.ZooKeeper = env["SLUICE_ZOOKEEPER_ADDR"]
	if c.Name == "" || c.ShardedName == "" || len(c.Addrs) != 2 || len(c.ShardAddrs) != 2 || c.ZooKeeper == "" {
		return c, fmt.Errorf("clickhouse-test-cluster start printed %q", out)
	}
	return c, nil
}

// remove kills everything (faster than a clean shutdown, and the data goes
// anyway) and removes the cluster's folder.
func (c *Cluster) remove() {
	_, _ = c.exec("kill")
	_, _ = c.exec("stop")
}

// AllAddrs returns the native addresses of all four servers.
func (c *Cluster) AllAddrs() []string {
	return append(append([]string(nil), c.Addrs...), c.ShardAddrs...)
}

// KillReplica kills replica i (0 or 1) of the replicated cluster with
// SIGKILL, keeping its data. It is started again when the test ends unless
// the test did.
func (c *Cluster) KillReplica(t testing.TB, i int) { t.Helper(); c.kill(t, "replica", server(t, i, 1)) }

// StartReplica starts replica i again on its data and ports and returns
// once it answers; its replicated tables catch up only after the killed
// process's ZooKeeper session expired (docs/clickhouse.md#test-cluster).
func (c *Cluster) StartReplica(t testing.TB, i int) {
	t.Helper()
	c.start(t, "replica", server(t, i, 1))
}

// KillShard kills the server of shard i (0 or 1) of the sharded cluster
// with SIGKILL, keeping its data; as KillReplica.
func (c *Cluster) KillShard(t testing.TB, i int) { t.Helper(); c.kill(t, "replica", server(t, i, 3)) }

// StartShard starts the server of shard i again; as StartReplica.
func (c *Cluster) StartShard(t testing.TB, i int) { t.Helper(); c.start(t, "replica", server(t, i, 3)) }

// KillZooKeeper kills ZooKeeper with SIGKILL, keeping its data. It is
// started again when the test ends unless the test did.
func (c *Cluster) KillZooKeeper(t testing.TB) { t.Helper(); c.kill(t, "zookeeper", "") }

// StartZooKeeper starts ZooKeeper again on its data and port and returns
// once it answers.
func (c *Cluster) StartZooKeeper(t testing.TB) { t.Helper(); c.start(t, "zookeeper", "") }

func server(t testing.TB, i, first int) string {
	t.Helper()
	if i < 0 || i > 1 {
		t.Fatalf("no server %d: the clusters have two each", i)
	}
	return fmt.Sprint(first + i)
}

func (c *Cluster) kill(t testing.TB, what, n string) {
	t.Helper()
	c.run(t, "kill-"+what, n)
	c.mu.Lock()
	defer c.mu.Unlock()
	key := what + n
	if !c.down[key] {
		c.down[key] = true
		t.Cleanup(func() {
			c.mu.Lock()
			down := c.down[key]
			c.mu.Unlock()
			if down {
				c.start(t, what, n)
			}
		})
	}
}

func (c *Cluster) start(t testing.TB, what, n string) {
	t.Helper()
	c.run(t, "start-"+what, n)
	c.mu.Lock()
	c.down[what+n] = false
	c.mu.Unlock()
}

func (c *Cluster) run(t testing.TB, cmd, n string) {
	t.Helper()
	args := []string{cmd}
	if n != "" {
		args = append(args, n)
	}
	if _, err := c.exec(args...); err != nil {
		t.Fatal(err)
	}
}

func (c *Cluster) exec(args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(c.script, append(args[:1:1], append([]string{c.dir}, args[1:]...)...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("clickhouse-test-cluster %s %s: %v\n%s", strings.Join(args, " "), c.dir, err, stderr.String())
	}
	return stdout.String(), nil
}

// NewClusterDatabase returns a fresh database name for the cluster, dropped
// when the test ends on every server that has it. The test creates it (ON
// CLUSTER, or on the servers it wants). The drop is local on each server:
// an ON CLUSTER drop would wait for a server the test left down.
func NewClusterDatabase(t testing.TB, c *Cluster) string {
	t.Helper()
	db := newName(t)
	t.Cleanup(func() {
		for _, addr := range c.AllAddrs() {
			conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, DialTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second})
			if err != nil {
				continue
			}
			_ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS `"+db+"`")
			conn.Close()
		}
	})
	return db
}
