// Package consumer is sluice's Kafka source: it reads one flow's topic as a
// member of a consumer group (github.com/IBM/sarama), or every partition
// of it directly when the caller guarantees it is the only reader
// (Config.Exclusive), and hands each partition's records, in batches, to a
// Handler that loads them.
//
// It owns the consumer group session, where each partition starts, how
// records are batched, when group offsets are committed, how a rebalance
// and a shutdown end in-flight work, and the end of a bounded read (`sluice
// update`). It also has the helpers the demo, tests, benchmarks and `sluice
// status` use: Produce, CreateTopic, ConsumeOnly and Lag. The embedded
// development broker is the sub-package devkafka.
//
// It must not decode records, write to a destination or keep state of its
// own: the Handler decodes and loads, and the destination's ledger is the
// only record of what was loaded.
//
// # Positions
//
// On every assignment (each group session's Setup, before any claim reads)
// Consume asks Handler.Positions for the ledger position of every assigned
// partition and seeks each claim there, backwards or forwards. A partition
// without a ledger position starts at the group's committed offset, or
// without one at Config.Start (earliest or latest). A ledger position that is
// out of the partition's range (retention removed it) also starts at
// Config.Start, with a warning. After each batch that Process accepted, the
// group offset is marked and committed synchronously, for lag tools only:
// it is never trusted over the ledger.
//
// # Batching
//
// Each claimed partition runs in its own goroutine and accumulates records
// until Config.MaxRows records, Config.MaxBytes key+value bytes (a record
// that would cross the limit starts the next batch) or Config.MaxWait since
// the batch's first record, then calls Process synchronously: a
// partition's batches are processed in order, one at a time, and different
// partitions in parallel. MaxWait bounds how long a batch waits for records to arrive: a batch whose
// partition holds a backlog past it (records enough to fill it below the
// high water mark; in a bounded read, any before its end) keeps filling
// past MaxWait as long as records keep coming, so that catching up makes
// full batches (see claimLoop.catchingUp). In a bounded read, a partition
// whose range holds more than MaxRows records takes the remainder over
// MaxRows first, then full batches: the small batch loads while the target
// is smallest, and the small first batches of several partitions can join
// into one load. A Handler that implements Busy
// can hold a batch whose MaxWait passed back: it keeps filling until it is
// full or the Handler is free, as long as the batches held back of all
// partitions stay within four times MaxRows and MaxBytes. RecordBatch.From is the ledger position for the
// first batch of an assignment (-1 when there was none) and the previous
// batch's Next after that, so a Handler can check that a batch continues
// exactly where its ledger stands. Records share sarama's fetch buffers,
// which are never reused, so keys and values are not copied; the Records
// slice is reused for the partition's next batch.
//
// Fetching is tuned for throughput (see the constants in config.go): 4 MiB
// per partition per fetch, a 4096-message buffer per partition so the
// fetcher keeps going while a batch is in Process, and a 100 ms fetch
// long-poll, which also bounds how long a claim takes to close.
//
// # Rebalances
//
// Partitions are assigned with eager range balancing: a rebalance ends the
// whole session, every claim returns, and the next session's Setup seeks all
// claims to the ledger again. (Cooperative balancing keeps claims running
// across generations and starts new ones without a chance to seek them
// first.) When a session ends, the batch already handed to Process finishes
// (the rebalance waits for it, up to Config.RebalanceTimeout, after which the
// coordinator moves on and the generation in the ledger row fences the stale
// load); records accumulated but not yet handed over are dropped, and
// whoever gets the partition reads them again from the ledger position.
// Nothing else blocks a claim, so the rebalance proceeds promptly.
//
// # Reading without a group
//
// An Exclusive Consume (the flows of a CDC target, which only the holder
// of the target's lease runs) joins no group: it starts a sarama partition
// consumer for every partition of the topic at once, seeked as a session's
// Setup seeks its claims, and batches each with the same loop as a claim
// (RecordBatch.Generation is 0). Nothing waits for a rebalance, so a new
// lease holder reads as soon as it took the lease, whatever became of the
// old one's group session. Partitions added to the topic are started once
// a metadata refresh (every 10 s) shows them. A partition whose partition
// consumer gave up, or whose ledger moved on without a batch (Process
// returned ErrMoved), is read again from its ledger position; the others
// go on. The offsets processed are committed to the group as a reader
// without membership commits them (generation -1), for lag tools only.
//
// # Shutdown
//
// A continuous Consume (sluice run) stops when ctx is cancelled: the batch in
// Process completes, then each claim flushes its partial batch through
// Process (nothing to redo on the next start), the group offsets are
// committed and the member leaves the group. A ctx cancelled with the cause
// ErrRevoked (the caller lost its lease) drops the partial batches
// instead: they could not commit. Process gets a context that is
// not cancelled with ctx but DrainTimeout after it, so a destination that
// hangs cannot hold the shutdown forever. The first error from Process or
// Positions also stops Consume, which returns it; partial batches are then
// dropped. A topic that does not exist yet is waited for (logged every 10 s).
//
// # Bounded reads
//
// With Config.Bounded (sluice update), Consume first reads every partition's
// last stable offset with a read_committed ListOffsets: those are the ends.
// A missing topic is an error (ErrUnknownTopic). A partition is done when its
// position reaches its end: at once when the ledger position is at or past
// it or the partition is empty, else when a record at end-1 or beyond is
// read (a partial batch is flushed right then). On a transactional topic the
// offsets just below an end can be transaction markers or aborted records
// that are never delivered; a bounded claim that receives nothing for a
// while asks the broker whether any deliverable record is left below its end
// (see tail.go), and is done when none is. A done partition is paused, and
// Consume returns nil once all are done, after leaving the group. In a
// group it waits for partitions assigned to another member; sluice never
// runs `update` beside `run` of the same pipeline. An Exclusive bounded
// read reads the partitions there were when it started.
package consumer
