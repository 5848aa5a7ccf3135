package clickhouse

import (
	"cmp"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
)

// Options configure a ClickHouse destination.
type Options struct {
	// Addr lists host:port addresses of the server's native protocol
	// (default 127.0.0.1:9000). With several, a connection goes to the first
	// that answers.
	Addr []string
	// Database holds the targets and sluice's own tables; created when
	// missing (default "default").
	Database string
	// Username and Password authenticate (default user "default", no password).
	Username, Password string
	// TLS, when set, connects with TLS (the secure native port, 9440).
	TLS *tls.Config
	// DialTimeout bounds connecting (default 30s).
	DialTimeout time.Duration
	// ReadTimeout bounds waiting for the server's answer to one query
	// (default 5m).
	ReadTimeout time.Duration
	// Settings are server settings sent with every query, such as
	// max_insert_threads or max_memory_usage.
	Settings map[string]any
	// Pipeline, when set, limits Ledger and the scans of _sluice_loads and
	// _sluice_dead_letters to that pipeline's rows, for a database that
	// several pipelines share.
	Pipeline string
	// Logger receives recovery and schema changes at Info, retried
	// failures at Warn and per-load detail at Debug (nil: discard).
	Logger *slog.Logger
	// CleanupEvery is the period of the background cleanup that Open
	// starts and Close stops: it publishes the committed loads and removes
	// the uncommitted loads and locks that stopped processes left behind,
	// whether or not this process is loading anything (default 10s;
	// negative: no background cleanup, only the one Begin runs at most
	// every 30s).
	CleanupEvery time.Duration
	// Grace is how long a committed load is left to its writer to publish
	// before any process publishes it, whether its writer lives or not,
	// and how long a protocol object without a known owner is left alone
	// before it counts as abandoned (default 30s). A committed load whose
	// writer's heartbeat expired or ended is published at once.
	Grace time.Duration
	// Cluster names a cluster of the servers' remote_servers: the database,
	// the targets and sluice's own tables are created ON CLUSTER with the
	// Replicated engine of their family, every insert into them is sent
	// with insert_deduplicate = 0 (but the ledger row's), an existing table
	// must be replicated, and loads commit through ZooKeeper
	// (docs/clickhouse.md, "Cluster targets" and "The protocol on a
	// cluster"). Addr lists the cluster's servers: a load goes through one
	// of them, the next when it does not answer; on a cluster of several
	// shards one of the shard of its first slot ("Shards"). Empty: one server, plain
	// MergeTree tables, and an existing replicated table is refused.
	// Staging tables stay plain, on the server a load goes through.
	Cluster string
	// ZooKeeper lists the host:port addresses of the cluster's ZooKeeper
	// ensemble, for the commit point of loads on a cluster; required with
	// Cluster.
	ZooKeeper []string
	// ZooKeeperPath is the ZooKeeper path of each replicated table, with the
	// servers' macros (default, with Cluster,
	// /clickhouse/tables/{shard}/{database}/{table}). It must name {table}.
	ZooKeeperPath string
	// ReplicaName is each server's replica name of a replicated table, with
	// the servers' macros (default, with Cluster, {replica}).
	ReplicaName string
	// Compression is how blocks travel over the native protocol: "lz4",
	// "zstd" or "none". Empty: none when every address is a loopback one
	// (the server runs on this machine, where compressing costs both ends
	// CPU and saves nothing), lz4 otherwise.
	Compression string
}

// Compression methods of Options.Compression.
const (
	CompressionLZ4  = "lz4"
	CompressionZSTD = "zstd"
	CompressionNone = "none"
)

const (
	defaultAddr        = "127.0.0.1:9000"
	defaultDatabase    = "default"
	defaultDialTimeout = 30 * time.Second
	defaultReadTimeout = 5 * time.Minute

	// defaultGrace is how long an object of the delivery protocol (a
	// marker, a staging table, a lock) whose owner is unknown is left alone
	// before recovery treats it as abandoned; a committed load is left to
	// its own writer to publish for as long by the periodic maintenance.
	defaultGrace = 30 * time.Second
	// maintainEvery is how often Begin runs the periodic maintenance.
	maintainEvery = 30 * time.Second
	// defaultCleanupEvery is the period of the background cleanup.
	defaultCleanupEvery = 10 * time.Second
)

func (o *Options) withDefaults() {
	if len(o.Addr) == 0 {
		o.Addr = []string{defaultAddr}
	}
	if o.Database == "" {
		o.Database = defaultDatabase
	}
	if o.Username == "" {
		o.Username = "default"
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = defaultDialTimeout
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = defaultReadTimeout
	}
	if o.CleanupEvery == 0 {
		o.CleanupEvery = defaultCleanupEvery
	}
	if o.Grace <= 0 {
		o.Grace = defaultGrace
	}
	if o.Cluster != "" {
		o.ZooKeeperPath = cmp.Or(o.ZooKeeperPath, chsql.DefaultZooKeeperPath)
		o.ReplicaName = cmp.Or(o.ReplicaName, chsql.DefaultReplica)
	}
	if o.Compression == "" {
		o.Compression = CompressionLZ4
		if allLoopback(o.Addr) {
			o.Compression = CompressionNone
		}
	}
}

// allLoopback reports whether every address names this machine: a
// loopback IP or "localhost".
func allLoopback(addrs []string) bool {
	for _, a := range addrs {
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			host = a
		}
		if ip := net.ParseIP(host); (ip == nil || !ip.IsLoopback()) && !strings.EqualFold(host, "localhost") {
			return false
		}
	}
	return true
}

// compression returns the driver's setting for Options.Compression.
func compression(method string) (*clickhouse.Compression, error) {
	switch method {
	case CompressionLZ4:
		return &clickhouse.Compression{Method: clickhouse.CompressionLZ4}, nil
	case CompressionZSTD:
		return &clickhouse.Compression{Method: clickhouse.CompressionZSTD}, nil
	case CompressionNone:
		return nil, nil
	}
	return nil, fmt.Errorf("clickhouse: compression %q: use lz4, zstd or none", method)
}

// cluster is where the sink's tables go (chsql.Cluster).
func (o *Options) cluster() chsql.Cluster {
	return chsql.Cluster{Name: o.Cluster, Path: o.ZooKeeperPath, Replica: o.ReplicaName}
}

// validateCluster checks the cluster options (after withDefaults).
func (o *Options) validateCluster() error {
	switch {
	case o.Cluster == "" && len(o.ZooKeeper) > 0:
		return fmt.Errorf("clickhouse: ZooKeeper is set without Cluster: set Cluster to the cluster of the servers, or leave ZooKeeper out")
	case o.Cluster == "" && (o.ZooKeeperPath != "" || o.ReplicaName != ""):
		return fmt.Errorf("clickhouse: ZooKeeperPath and ReplicaName apply to a Cluster only")
	case o.Cluster != "" && len(o.ZooKeeper) == 0:
		return fmt.Errorf("clickhouse: Cluster %s needs ZooKeeper, the addresses of its ZooKeeper ensemble", o.Cluster)
	}
	if err := o.cluster().Validate(); err != nil {
		return fmt.Errorf("clickhouse: %w", err)
	}
	return nil
}
