// Package integration holds end-to-end tests: the built sluice binary against
// an in-process Kafka-protocol broker (kfake) and real destinations, checked
// by reading the destination directly (Parquet files through parquet-go, not
// through sluice). `make test` runs them; with CI=true a missing server fails
// the run instead of skipping it.
package integration
