package flows_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/flows/spec"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chtest"
	"github.com/sluicehq/sluice/sinks/destination"
)

func TestMain(m *testing.M) {
	code := m.Run()
	chtest.StopSharedCluster()
	os.Exit(code)
}

// withCluster says whether the end-to-end cases of flows (destinations)
// run on the replicated test cluster and the cluster of two shards too:
// in make test (which names a folder for clusters) and under CI=true,
// without the race detector (the race pass runs the other destinations;
// the cluster's protocol has its own race-run tests in sinks/clickhouse).
func withCluster() bool {
	return !raceOn && (os.Getenv("SLUICE_CLICKHOUSE_CLUSTER_ROOT") != "" || os.Getenv("CI") == "true")
}

// clusterDestination is the spec's destination on a new database of the
// replicated test cluster, through both replicas.
func clusterDestination(t *testing.T) string {
	c := chtest.SharedCluster(t)
	db := chtest.NewClusterDatabase(t, c)
	return fmt.Sprintf("  clickhouse: {addr: [%s], database: %s, cluster: %s, zookeeper: [%s]}", strings.Join(c.Addrs, ", "), db, c.Name, c.ZooKeeper)
}

// shardedDestination is the spec's destination on a new database of the
// test cluster of two shards, through both servers.
func shardedDestination(t *testing.T) string {
	c := chtest.SharedCluster(t)
	db := chtest.NewClusterDatabase(t, c)
	return fmt.Sprintf("  clickhouse: {addr: [%s], database: %s, cluster: %s, zookeeper: [%s]}", strings.Join(c.ShardAddrs, ", "), db, c.ShardedName, c.ZooKeeper)
}

var clusterAddrs = regexp.MustCompile(`addr: \[([^\]]*)\](.*cluster: )`)

// eachReplica, for a spec on the test cluster, opens the destination on
// each replica alone and waits (bounded) until ok holds there: a load is
// on the replica it went through at once, on the other once it fetched
// it. Other specs are left alone.
func eachReplica(t *testing.T, doc string, ok func(t *testing.T, sink sinks.Sink) bool) {
	t.Helper()
	for i, p := range serverSpecs(t, []byte(doc), t.TempDir()) {
		sink, err := destination.Open(context.Background(), p, nil)
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for !ok(t, sink) {
			if time.Now().After(deadline) {
				sink.Close()
				t.Fatalf("server %d: the target is not as on the replica loaded through after 30 s", i+1)
			}
			time.Sleep(200 * time.Millisecond)
		}
		sink.Close()
	}
}

// serverSpecs returns, for a spec on a test cluster, the spec on each of
// its servers alone, written to dir; nil for other specs.
func serverSpecs(t *testing.T, doc []byte, dir string) []*spec.Pipeline {
	t.Helper()
	m := clusterAddrs.FindSubmatch(doc)
	if m == nil {
		return nil
	}
	var out []*spec.Pipeline
	for i, addr := range strings.Split(string(m[1]), ", ") {
		one := clusterAddrs.ReplaceAll(doc, []byte("addr: ["+addr+"]$2"))
		path := filepath.Join(dir, fmt.Sprintf("server%d.yaml", i+1))
		if err := os.WriteFile(path, one, 0o644); err != nil {
			t.Fatal(err)
		}
		p, err := spec.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}
