// Package clickhouse is the checkpoint store of a ClickHouse destination:
// the table _sluice_state in the destination's database, so that the
// destination stays the state of record and every process of a pipeline
// reads the same checkpoints.
//
// The table (created here when the sink has not created it yet, with the
// sink's statement, chsql.StateDDL) is a ReplacingMergeTree(revision)
// ordered by key: key is checkpoint.Key.String(), value the entry's bytes,
// revision its revision and updated_at the writer's clock in whole
// seconds. Every write inserts the key's next revision; reads use FINAL and
// filter on the key only. A Delete inserts a tombstone, a row with an empty
// value (Put refuses empty values), so that revisions keep counting across
// it.
//
// ClickHouse has no transactions, so the compare-and-set of a Put runs under
// the key's write lock, a view that CREATE VIEW makes at most one writer
// hold (lock.go): read the stored revision, compare, insert the next one by
// INSERT ... SELECT from the lock view, so that a writer whose lock was
// taken over as abandoned writes nothing, and drop the view. Values travel
// hex-encoded and bound by the driver, never spliced into SQL; a statement
// longer than the default max_query_size raises the setting for itself.
// Inserts are as durable as the server makes them (see ClickHouse's
// fsync_after_insert).
//
// On a cluster (Options.Cluster) the database and the table are created ON
// CLUSTER, the table a ReplicatedReplacingMergeTree, and every insert is
// sent with insert_deduplicate = 0, since a replicated table drops a block
// equal to a recent one as a repeat. The write locks stay views on the
// server connected to.
//
// It speaks the native protocol through a small interface that
// clickhouse-go's driver.Conn satisfies (chsql.Conn), works on ClickHouse
// 18.16 and later, and must not import the sink or any source: what it
// shares with the sink (the statement of the table, the CREATE VIEW lock
// and its fence, the error classification) is sinks/clickhouse/chsql.
package clickhouse
