// Package clickhouse is the ClickHouse destination. It creates the targets
// and sluice's own tables (_sluice_loads, _sluice_dead_letters,
// _sluice_heartbeats, _sluice_state for the checkpoint store, and
// _sluice_cdc_state and _sluice_leases for CDC targets, _sluice_resets for
// full refreshes, _sluice_heads for the heads of the flows' slots), stages
// each load in
// staging tables, commits it by one row in _sluice_loads, publishes it with
// ATTACH PARTITION ... FROM, and recovers what stopped processes left behind
// (at start, and in a background cleanup while the sink is open). A load of
// an append target with partition_by may replace whole partitions
// (sinks.PartitionLoad, replace.go): the partition ids it lists are
// committed in its ledger row, and it is published with REPLACE PARTITION
// ... FROM for them, which recovery finishes like an attach.
//
// A CDC target (SCD type 1 or 2) is a ReplacingMergeTree physical table of
// row versions and removal markers under a view that shows its logical
// content; its loads write versions, markers and hidden state through the
// same staging and publication as append rows (cdc.go). The sink stores the
// CDC engine's state and returns it (GetState), and keeps each CDC target to
// one writer with a lease fenced by a generation every commit checks
// (lease.go); it computes nothing of the change
// semantics itself. It speaks the native protocol through
// github.com/ClickHouse/clickhouse-go/v2 and works on ClickHouse 18.16 and
// later, using DateTime64 and Date32 where the server has them.
// docs/clickhouse.md describes the tables and the protocol.
//
// With Options.Cluster the tables are replicated ON CLUSTER, the commit
// point of every load is one ZooKeeper multi (zk.go, zkcommit.go: the
// load's node and its slots' heads, compare-and-set), CDC leases live in
// ZooKeeper with a fence every commit checks (zklease.go), and each load
// goes through one server's own sink (cluster.go), which runs that
// server's maintenance. On several shards an append target is a table
// per shard under a Distributed table, and a load goes to the shard of its
// first slot (shards.go); a CDC target's physical table is one per shard
// under a Distributed table sharded by key, through which its loads are
// published (cdcshards.go).
//
// It must not import sources or the flow runner: it receives columnar
// batches and positions and knows nothing of Kafka or files beyond what a
// position records. Values of rows and states travel as column data or bound
// by the driver, never spliced into SQL; identifiers are validated and
// quoted. The SQL plumbing it shares with the checkpoint store
// (checkpoint/clickhouse) is sinks/clickhouse/chsql.
package clickhouse
