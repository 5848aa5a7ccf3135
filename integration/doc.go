// Package integration holds end-to-end tests: the built sluice binary against
// an in-process Kafka-protocol broker (kfake) and real destinations, checked
// by reading the destination directly, not through sluice: Parquet files
// through parquet-go, ClickHouse through SQL with clickhouse-go. Every
// append, dead-letter and spec test runs against both destinations; the
// ClickHouse tests need a server (SLUICE_CLICKHOUSE_ADDR, which `make test`
// sets with scripts/clickhouse-test-server), each test in a database of its
// own. Without one they are skipped, and with CI=true they fail. The
// benchmarks (`make bench`) compare sluice with a consume-only reader, a raw
// clickhouse-go insert and ClickHouse's Kafka table engine.
package integration
