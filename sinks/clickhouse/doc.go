// Package clickhouse is the ClickHouse destination. It creates the targets
// and sluice's own tables (_sluice_loads, _sluice_dead_letters,
// _sluice_heartbeats, and _sluice_state for the checkpoint store), stages
// each load in staging tables, commits it by one row in _sluice_loads,
// publishes it with ATTACH PARTITION ... FROM, and recovers what stopped
// processes left behind. It speaks the native protocol through
// github.com/ClickHouse/clickhouse-go/v2 and works on ClickHouse 18.16 and
// later, using DateTime64 and Date32 where the server has them.
// docs/clickhouse.md describes the tables and the protocol.
//
// It must not import sources or the flow runner: it receives columnar
// batches and positions and knows nothing of Kafka or files beyond what a
// position records. Values travel as column data or bound by the driver,
// never spliced into SQL; identifiers are validated and quoted.
package clickhouse
