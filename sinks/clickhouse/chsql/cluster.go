package chsql

import (
	"fmt"
	"strings"
)

// Cluster says where the tables of sluice go. The zero value is one server:
// plain MergeTree engines, statements on the server connected to. With Name
// set, every table is created ON CLUSTER Name with the Replicated engine of
// its family, at ZooKeeper path Path as replica Replica (both may hold the
// servers' macros, such as {shard}, {replica}, {database} and {table}).
type Cluster struct {
	Name    string
	Path    string
	Replica string
}

// DefaultZooKeeperPath and DefaultReplica are Cluster.Path and
// Cluster.Replica when left empty: the macros every server of a cluster
// defines (shard, replica) and those ClickHouse fills in itself (database,
// table), so that each table has a path of its own.
const (
	DefaultZooKeeperPath = "/clickhouse/tables/{shard}/{database}/{table}"
	DefaultReplica       = "{replica}"
)

// Own returns the cluster of sluice's own tables (its ledger, heads,
// leases, dead letters, checkpoints): one replicated table across every
// server of every shard, so that each server holds the whole ledger. Its
// path is Path with {shard} written as "all-<Name>" (the cluster's name
// keeps two clusters on one ZooKeeper apart, as their {shard} macros
// would), its replica Replica after "{shard}-" (replica names repeat
// across shards). On one server it is c.
func (c Cluster) Own() Cluster {
	if c.Name == "" {
		return c
	}
	c.Path = strings.ReplaceAll(c.Path, "{shard}", "all-"+c.Name)
	c.Replica = "{shard}-" + c.Replica
	return c
}

// EngineArgs returns the ZooKeeper path and replica of a replicated
// table's engine as system.tables' engine_full shows them (macros as
// written: ReplicatedMergeTree('/clickhouse/tables/{shard}/db/t',
// '{replica}') ...); ok is false for any other engine.
func EngineArgs(engineFull string) (path, replica string, ok bool) {
	if !IsReplicated(engineFull) {
		return "", "", false
	}
	var args []string
	rest := engineFull
	for len(args) < 2 {
		i := strings.IndexByte(rest, '\'')
		if i < 0 {
			return "", "", false
		}
		j := strings.IndexByte(rest[i+1:], '\'')
		if j < 0 {
			return "", "", false
		}
		args = append(args, rest[i+1:i+1+j])
		rest = rest[i+j+2:]
	}
	return args[0], args[1], true
}

// Replicated reports whether the tables go onto a cluster.
func (c Cluster) Replicated() bool { return c.Name != "" }

// OnCluster returns " ON CLUSTER `name`" for a cluster, "" for one server.
func (c Cluster) OnCluster() string {
	if c.Name == "" {
		return ""
	}
	return " ON CLUSTER " + Quote(c.Name)
}

// Engine renders a MergeTree family engine: family with its args
// ("MergeTree", "ReplacingMergeTree(version)"'s "version") on one server,
// the Replicated engine of the family with the ZooKeeper path and replica
// first on a cluster.
func (c Cluster) Engine(family string, args ...string) string {
	if c.Name != "" {
		args = append([]string{"'" + c.Path + "'", "'" + c.Replica + "'"}, args...)
		family = "Replicated" + family
	}
	if len(args) == 0 {
		return family
	}
	return family + "(" + strings.Join(args, ", ") + ")"
}

// Validate checks what Engine and OnCluster splice into statements: a
// cluster name of letters, digits, '_', '-' and '.', and a path and replica
// without quotes, backslashes or control characters; a path naming
// {table}, since two tables on one path would be one replicated table.
func (c Cluster) Validate() error {
	if c.Name == "" {
		return nil
	}
	for i := 0; i < len(c.Name); i++ {
		b := c.Name[i]
		if !((b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9') || b == '_' || b == '-' || b == '.') {
			return fmt.Errorf("cluster name %q: use letters, digits, '_', '-' and '.'", c.Name)
		}
	}
	for _, f := range []struct{ what, v string }{{"zookeeper path", c.Path}, {"replica name", c.Replica}} {
		if f.v == "" {
			return fmt.Errorf("%s: empty", f.what)
		}
		if strings.ContainsAny(f.v, "'\\`") || strings.IndexFunc(f.v, func(r rune) bool { return r < ' ' || r == 0x7f }) >= 0 {
			return fmt.Errorf("%s %q: no quotes, backslashes or control characters", f.what, f.v)
		}
	}
	if !strings.Contains(c.Path, "{table}") {
		return fmt.Errorf("zookeeper path %q: it names no {table}, so that every table would share one replicated table's path", c.Path)
	}
	return nil
}

// IsReplicated reports whether a table engine, as system.tables shows it,
// is a replicated one.
func IsReplicated(engine string) bool { return strings.HasPrefix(engine, "Replicated") }
