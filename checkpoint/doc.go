// Package checkpoint is the checkpoint store: what a replay cannot hurt and
// the ledger does not hold. It records once-flow completion (with the flow
// definition's fingerprint and the files it planned at its first start,
// which a restart after a crash reads instead of what arrived since), the
// snapshot versions a snapshot flow applied (a version not newer than the
// last applied one is skipped), where incremental cursors stand, and the
// first Kafka offset each flow consumed per partition (for the full-refresh
// retention guard: unless given --allow-data-loss, a refresh refuses when
// the partition's log no longer starts at or before it). It defines the
// Store interface, the typed values over it, and Memory, a Store for tests.
//
// Implementations live in the destination, the state of record:
// checkpoint/clickhouse keeps the table _sluice_state, checkpoint/local a
// bbolt file in the local destination's _sluice folder. checkpoint/storetest
// is the conformance suite both pass.
//
// # What it does not hold
//
// Positions whose replay would duplicate rows (Kafka offsets, a backfill's
// file and row group) are in each load's ledger row, written in the same
// commit as the rows (docs/operations.md, "The delivery guarantee"). The
// checkpoint is written after the load it follows, so a crash in between
// leaves it behind the ledger, never ahead: the restarted flow seeks to the
// ledger's positions, derives the same checkpoint again and writes it. Every typed update here is
// idempotent for that reason (BeginOnce keeps the first start's plan,
// CompleteOnce and AddSnapshotVersion do nothing the second time,
// RecordFirstOffset keeps the first offset).
//
// # Revisions
//
// Every entry has a revision: 0 means never written, and each Put or Delete
// of a key stores the next one, so revisions never repeat, even across a
// Delete (implementations keep a tombstone). A Put names the revision it
// read and is refused with ErrStale when another write came in between; Get
// returns the revision also with ErrNotFound, so a deleted key is created
// again from its deletion's revision, and a write based on a read from
// before a full refresh is refused. UpdateJSON is the read-modify-write
// loop over that. Put is durable when it returns; an error other than
// ErrStale or ErrNotFound leaves the outcome of a write unknown, and the
// caller reads again.
//
// # Keys
//
// A Key is (Pipeline, Kind, Flow, Name); its stored form is the four parts
// escaped and joined by "/" (Key.String), readable in the destination.
// Delete and List take a Key as a pattern: its empty parts match anything,
// so Key{Pipeline: p, Flow: f} selects every kind of state of flow f (a
// refresh of that flow) and Key{Pipeline: p} the whole pipeline (a full
// refresh). Whether a refresh keeps the first offsets is the caller's
// choice: delete the other kinds one by one to keep them.
//
// It must not import sinks, sources or the flow runner: callers hand it
// keys and values, and it knows nothing of loads or the ledger.
package checkpoint
