package chsql

import (
	"strings"
	"testing"
)

func TestClusterEngine(t *testing.T) {
	one := Cluster{}
	c := Cluster{Name: "replicated", Path: DefaultZooKeeperPath, Replica: DefaultReplica}
	tests := []struct {
		c            Cluster
		family       string
		args         []string
		want, onClus string
	}{
		{one, "MergeTree", nil, "MergeTree", ""},
		{one, "ReplacingMergeTree", []string{"v"}, "ReplacingMergeTree(v)", ""},
		{c, "MergeTree", nil, "ReplicatedMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}')", " ON CLUSTER `replicated`"},
		{c, "ReplacingMergeTree", []string{"v", "d"}, "ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}', v, d)", " ON CLUSTER `replicated`"},
	}
	for _, tc := range tests {
		if got := tc.c.Engine(tc.family, tc.args...); got != tc.want {
			t.Errorf("Engine(%s, %v) = %s, want %s", tc.family, tc.args, got, tc.want)
		}
		if got := tc.c.OnCluster(); got != tc.onClus {
			t.Errorf("OnCluster = %q, want %q", got, tc.onClus)
		}
	}
}

func TestClusterValidate(t *testing.T) {
	ok := Cluster{Name: "my-cluster.1", Path: DefaultZooKeeperPath, Replica: DefaultReplica}
	tests := []struct {
		name string
		c    Cluster
		want string // "" valid
	}{
		{"one server", Cluster{}, ""},
		{"defaults", ok, ""},
		{"bad name", Cluster{Name: "a`b", Path: ok.Path, Replica: ok.Replica}, "cluster name"},
		{"quote in path", Cluster{Name: "c", Path: "/t/'{table}", Replica: ok.Replica}, "no quotes"},
		{"path without table", Cluster{Name: "c", Path: "/t/{database}", Replica: ok.Replica}, "names no {table}"},
		{"empty replica", Cluster{Name: "c", Path: ok.Path}, "replica name: empty"},
		{"control character", Cluster{Name: "c", Path: ok.Path, Replica: "r\n"}, "control characters"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate: %v, want %q", err, tc.want)
			}
		})
	}
}

// TestOwn checks the cluster of sluice's own tables: one replicated table
// across the shards (no {shard} in the path), replica names told apart by
// shard, one server's tables as they are.
func TestOwn(t *testing.T) {
	c := Cluster{Name: "c", Path: DefaultZooKeeperPath, Replica: DefaultReplica}
	own := c.Own()
	if want := "ReplicatedMergeTree('/clickhouse/tables/all-c/{database}/{table}', '{shard}-{replica}')"; own.Engine("MergeTree") != want {
		t.Errorf("own engine %s, want %s", own.Engine("MergeTree"), want)
	}
	if err := own.Validate(); err != nil {
		t.Errorf("own cluster: %v", err)
	}
	if own.OnCluster() != c.OnCluster() {
		t.Errorf("own tables ON CLUSTER %q, targets %q", own.OnCluster(), c.OnCluster())
	}
	if one := (Cluster{}).Own(); one != (Cluster{}) {
		t.Errorf("one server's own cluster %+v, want the zero value", one)
	}
}

// TestEngineArgs reads the path and replica back from engine_full.
func TestEngineArgs(t *testing.T) {
	for full, want := range map[string][2]string{
		"ReplicatedMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}') ORDER BY k SETTINGS index_granularity = 8192":                       {"/clickhouse/tables/{shard}/{database}/{table}", "{replica}"},
		"ReplicatedReplacingMergeTree('/clickhouse/tables/all-c/{database}/{table}', '{shard}-{replica}', version) PARTITION BY target ORDER BY (target, key)": {"/clickhouse/tables/all-c/{database}/{table}", "{shard}-{replica}"},
	} {
		path, replica, ok := EngineArgs(full)
		if !ok || path != want[0] || replica != want[1] {
			t.Errorf("EngineArgs(%q) = %q, %q, %v; want %q, %q", full, path, replica, ok, want[0], want[1])
		}
	}
	for _, full := range []string{"MergeTree ORDER BY k", "ReplicatedMergeTree('/only/a/path')", "Distributed(c, db, t)"} {
		if _, _, ok := EngineArgs(full); ok {
			t.Errorf("EngineArgs(%q) found a path and replica", full)
		}
	}
}
