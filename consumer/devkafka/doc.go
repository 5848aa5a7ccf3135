// Package devkafka runs an embedded Kafka-protocol broker (kfake, from
// franz-go) for local development, the demo and tests: `sluice dev-kafka`.
//
// It owns the broker's lifecycle, its topics and where its log lives (in
// memory, or a data directory that survives a restart). It creates the topics
// it is given and nothing else: topics are not created on first use, so a
// missing topic behaves as it would on a real cluster (an error for
// `sluice update`, waited for by `sluice run`).
//
// It must not be used as a production broker: kfake is a single process with
// no replication, and a short group session timeout floor suited to tests.
package devkafka
