// Package flows runs a pipeline: it turns the spec (package flows/spec) into
// running flows, wires each flow's source to the destination, and drives
// the delivery protocol (decode, stage, commit by ledger row, then
// acknowledge the source). It owns the triggered (update) and continuous
// (run) modes, the heartbeat that keeps them from overlapping, the leases
// that keep each CDC target to one writer, and the retry policy around the
// destination and the checkpoint store.
//
// It works on interfaces only: a sinks.Sink (opened by package
// sinks/destination), the checkpoint.Store the destination keeps, and the
// sources of packages consumer and backfill. It knows nothing of the
// command line: cmd/sluice parses flags and hands it a spec, a sink and
// Options. Sources and sinks never import it.
//
// # Files
//
//	runner.go        Execute and Options; the update/run gate, the heartbeat,
//	                 retry with the destination's classifier, the tables of a spec
//	lease.go         leases: holding and renewing one, running a CDC target's
//	                 flows under its lease and competing again when it is lost
//	load.go          the one load path of every flow kind: prepared batches,
//	                 Begin/Write/Commit/Abort with retries, and a stale commit
//	                 after a commit point counted as committed (commitLoad)
//	checkpoints.go   the checkpoint store the destination keeps, retried like loads
//	kafka.go         Kafka sources: a flow's consumer (a group member, or
//	                 under a CDC target's lease every partition) and its batches
//	append.go        append flows: rows and dead letters of a batch or a chunk
//	files.go         files sources: once-flows and new files, chunked loads (fileLoader)
//	incremental.go   incremental files flows: windows, cursors, replace_partitions
//	cdcflow.go       auto_cdc flows: a target's cache and the engine per batch
//	cdcorder.go      the order a CDC target's batches load in, and applying
//	                 again after a load that did not commit
//	cdcjoin.go       joining a CDC flow's ready batches into one load
//	replay.go        replay_valid_to: a once-flow's history handed to live CDC
//	snapshot.go      auto_cdc_from_snapshot flows: versions, in order
//	snapshot_bucket.go, snapshot_spill.go
//	                 a snapshot applied in one load, spilled to disk by key hash
//	expire.go        forgetting expired key state, and compaction of CDC targets
//	refresh.go       full and per-flow refresh
//	status.go        what `sluice status` reports
//	wait.go          `sluice wait`: until the flows committed what their sources held
//	verify.go        `sluice verify`: a target per day against its source read again
//	deadletters.go   `sluice dead-letters`: pending dead letters, and their replay
//	wireformat.go    Avro and Protobuf messages of a schema registry (package wire)
//	infer.go         tables typed by their data: inferred columns and their evolution
//	contract.go      what a CDC target was first written under (keys, SCD type,
//	                 sequence type), and the refusal of a start under other ones
//	rules.go         where filters, expectations and computed columns of a flow
//	version.go       _sluice_version: the pipeline's schema history
//	tls.go, loadid.go, spilldir.go
//	                 Kafka security settings, load ids, spill folders
package flows
