// Package sinks defines what a destination must do for sluice: the Sink and
// Load interfaces of the delivery protocol (stage, commit by one ledger row,
// publish, recover). Implementations live in sub-packages: local/ (Parquet
// tables on disk) and clickhouse/.
//
// A sink never imports a source; it receives columnar batches and positions
// and knows nothing of Kafka or files beyond what a Position records.
package sinks
