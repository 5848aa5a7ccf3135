// Package local is the local destination of sluice: tables as folders of
// Parquet files on disk, a ledger of committed loads, and the commit and
// recovery protocol that makes every table show exactly the committed loads.
//
// It owns everything under the destination folder and nothing else. It must
// not know sources, Kafka or the CDC rules: it stores the columnar batches
// and positions it is given, applies the row changes and hidden state the
// CDC engine computed (by opaque identities), refuses stale loads, and
// publishes atomically.
//
// # On-disk layout
//
//	<path>/
//	  orders -> _sluice/tables/orders/v000000000042    a table: a symlink to its current version
//	  _sluice_dead_letters -> _sluice/tables/_sluice_dead_letters/v000000000007
//	  _sluice/                                       hidden state; never inside a table's folder
//	    lock                                         flock: the destination lock
//	    ledger.jsonl                                 the ledger: one JSON line per committed load or reset, since its base
//	    ledger.base.json                             the base: what the compacted lines add up to (ledger.go)
//	    loads/ledger-<first>-<last>.jsonl            the compacted lines, for lineage
//	    tables/<table>/schema.json                   declared columns, partition_by, kind and keys
//	    tables/<table>/v<N>/                         version N: immutable, hard links to data files
//	    tables/<table>/v<N>.json                     its manifest: files, rows, and "through"
//	    tables/<table>/v<N>.ids/<file>.ids           CDC targets: each file's row identities
//	    tables/<table>/state.db                      CDC targets: key and table states (bbolt)
//	    staging/<load id>/                           a load's files until published, and its .lock
//	    staging/compact-<table>-<random>/            a compaction's inputs and output
//	    leases/<name>.json                           a lease: holder, generation, expiry (lease.go)
//	    leases/holders/<holder>                      flock: a live holder of leases
//	    heartbeats/<pipeline>/<id>.json              live processes of a pipeline
//	    tmp/                                         symlinks and folders being made
//
// A version folder holds part-<seq>-<n>.parquet files (the n-th file of the
// load with ledger seq <seq>) and compact-<version>-<n>.parquet files; a
// table with partition_by holds them in col=value/ folders (Hive style: the
// values escaped as Hive does, NULL and "" as __HIVE_DEFAULT_PARTITION__; the
// partition columns stay in the files too, exact). Readers use the table's
// folder directly: DuckDB read_parquet('<path>/orders/**/*.parquet'), pandas,
// ClickHouse file(). _sluice_loads is not a folder: Scan returns the ledger
// with batch.LoadsSchema, and DuckDB reads read_json(['<path>/_sluice/loads/*.jsonl',
// '<path>/_sluice/ledger.jsonl']).
//
// # Files
//
// One column per table column, in order, then _sluice_load_id (string) for
// an append target; a CDC target's files hold its columns only.
// string: BYTE_ARRAY STRING; int64: INT64; float64: DOUBLE; bool: BOOLEAN;
// timestamp: INT64 TIMESTAMP(MICROS, isAdjustedToUTC); date: INT32 DATE;
// decimal(P,S): DECIMAL(P,S) over INT64 for P <= 18, over
// FIXED_LEN_BYTE_ARRAY(16) (big-endian two's complement) above, without
// min/max statistics (their bytes would compare unsigned); bytes: BYTE_ARRAY.
// The row ids (_sluice_id, _sluice_parent_id, _sluice_root_id) have no
// min/max statistics either: they are hashes, whose bounds prune nothing.
// Nullable columns are OPTIONAL, the others REQUIRED. Columns are written a
// column at a time through parquet-go's ColumnWriters, row groups of up to 1M
// rows. Load files are Snappy-compressed (the fast path), compacted files
// Zstd (smaller; compaction runs in the background). Columns added to a table
// later are missing from older files; Scan reads them as NULL.
//
// # CDC targets
//
// A table Ensure creates with sinks.KindSCD1 or KindSCD2 is a CDC target:
// Begin's loads implement sinks.CDCLoad, and Write to it is refused; Ensure
// refuses to change its kind or keys (a new table name takes the new ones). Its
// folder shows exactly its logical content (one row per key, or per
// version), so Scan returns its declared columns and no _sluice_ column.
// Each row's identity (the engine's encoded key, and its sequence: the
// change it shows, or __START_AT) is kept outside the table's folder, in a
// sidecar per data file listing the identities in row order (pairs.go).
//
// Rows are spread over buckets by a hash of their key (bucketHash; part of
// the format): each bucket has at most one file per partition folder,
// b<bucket>-<version>.parquet. The manifest records the bucket count, and
// per file its bucket and least sequence. A load rewrites only the files
// its changes touch: those of the buckets its keys fall in (when they lose
// or gain rows) and, for a truncate, those whose least sequence is below
// it; every other file is a hard link to the previous version's. The bucket
// count is a power of two, 1 for a new table, multiplied when the buckets
// average more than twice Options.BucketRows rows (then every file is
// rewritten once, to buckets of half to all of BucketRows), up to 4096.
//
// An SCD type 2 target (one with an __END_AT column; scd2.go) splits each
// bucket and folder into one current file, b<bucket>-<version>.parquet,
// holding its rows whose __END_AT is NULL, and history files,
// h<bucket>-<version>.parquet, holding closed versions; the manifest
// records per file its kind ("current" or "history") and greatest
// sequence. A load touching a bucket rewrites its current file and writes
// the versions it closes into one new history file, so that loads do not
// rewrite a growing history. It rewrites a history file only when it
// removes or replaces one of its rows (a late event splitting or absorbing
// a closed version): such an identity's key has no current row in the
// bucket, or one with a greater sequence (a key's current version is its
// latest), and the file's sequence range holds it; only those files'
// sidecars are read. A rewritten history file's remaining rows go to a
// file that replaces it, h<bucket>-<version>-<n>.parquet, so that history
// files keep their age (unless the files rewritten hold three quarters of
// the bucket's history: then they join the load's new history file). When
// a bucket and folder would hold more than 8 history files, the load merges
// all but the 2 newest and the 2 largest others into one file,
// h<bucket>-<version>-<n>.parquet too. When the buckets grow, the 2 newest
// history files each go to a file of their own in every new bucket, the
// others to one.
// A file without a kind (as destinations made before the split have) holds
// both; the first load touching its bucket splits it. SCD type 1 targets
// keep one file per bucket and folder.
//
// A load stages its changes per CDC target: upserts in
// <table>.cdc.up.parquet (the table's columns, then _sluice_key and
// _sluice_seq), removed identities in <table>.cdc.rm, states in
// <table>.cdc.st; the truncate barrier goes in the ledger line. Within a
// load the truncate applies first, then removals, then upserts (the last
// upsert of an identity wins), whatever the call order.
//
// Hidden state lives in state.db (go.etcd.io/bbolt): bucket "chunks" holds the
// key states in chunks of about 32 KiB, each the states of a run of keys in
// key order stored under its first key (a load rewrites the chunks its keys
// fall in; statechunks.go), bucket "meta" the table state ("table") and
// "through", the seq of the last load whose states it holds. A file made
// before chunks holds one state per key in bucket "keys": readers read it,
// and the first load applied moves it into chunks.
//
// # The commit protocol
//
// A load (Begin) creates _sluice/tmp/<load id>/, takes an flock on its
// .lock and renames it to _sluice/staging/<load id>/: a staging folder is
// never visible unlocked while its load lives. Then, step by step:
//
//  1. Write streams each table's rows into staging/<load id>/<table>.<n>.parquet
//     (one file per table, or per partition). Loads stage in parallel.
//  2. Commit finishes the files and fsyncs them, the staging folder and
//     _sluice/staging (files, here and in a plan, are synced up to 16 at
//     once, in the background, and waited for before their folder is:
//     filesync.go). For each CDC target the load changes, it prepares
//     the new bucket files against the table's current version V, outside
//     the lock, in staging/<load id>/<table>.cdc/prep/ (with plan.json: the
//     files dropped and added), and records V in the ledger line.
//  3. It takes the destination lock: a mutex in the process, then an
//     exclusive flock on _sluice/lock across processes.
//  4. It reads the ledger lines other writers appended, cutting a torn last
//     line, and checks the load by the chain rule (sinks/chain.go): each
//     slot of Commit.From, a Kafka partition or a file, must be at the
//     flow's head of that slot (a From that says "no position": the flow
//     has none). Otherwise the load is discarded and Commit returns
//     sinks.ErrStale. A load that
//     changes a CDC target whose lease another Sink or process holds is
//     discarded with sinks.ErrLeaseHeld.
//  5. It appends the load's line (seq, load id, files, positions, counts,
//     the partition folders it replaces, commit time) to
//     _sluice/ledger.jsonl and fsyncs it. This is the commit point: a line
//     cut short by a crash has no newline and is not committed.
//  6. It publishes every committed load its tables lack, in seq order (its
//     own, and any a dead writer left): for each table, a new version folder
//     v<N+1> of hard links (the current version's files, minus those in
//     the partition folders a load replaces, and the loads' staged files),
//     fsynced; its manifest v<N+1>.json, whose "through" is the seq of the
//     last load it holds, fsynced; the tables folder fsynced.
//     A CDC target gets one version per load: from the prepared files when
//     the table is still at the version they were prepared on, else from
//     files built now (under the lock) from the staged changes; with its
//     .ids folder beside it. Then, after the swap, the load's states go to
//     state.db in one transaction that sets "through" to the load's seq,
//     unless "through" is already there. A commit queues them instead: a
//     goroutine of the Sink applies them once the lock is released, while
//     the writer stages its next load, and whoever needs them first (the
//     table's next publish, GetState, Recover, Reset) applies them under
//     the lock (stateasync.go).
//  7. It swaps the table: a new symlink in _sluice/tmp renamed over
//     <path>/<table> (rename(2) is atomic: a reader sees the old version or
//     the new), then fsyncs <path>.
//  8. It removes the loads' staging folders (one whose states are queued
//     once they are applied), and version folders superseded
//     for longer than Options.KeepVersions (a reader that resolved the
//     symlink just before a swap still opens the old files; open files live
//     on through their hard links), and releases the lock.
//
// Because loads are published in seq order under the lock, a table's
// manifest says which loads it holds with one number, whatever compaction
// merged: every load up to "through" that wrote the table. Publishing is
// idempotent: loads at or below "through" are skipped, for rows and for
// states alike.
//
// # Replacing partitions
//
// A load's ReplacePartitions (replace.go; sinks.PartitionLoad, for a flow
// with write: replace_partitions) lists partitions of an append target with
// partition_by: each becomes its col=value/ folder, escaped as the data
// folders are, nested for several columns. The load's ledger line records
// them ("replace": per table, its folders). Publishing applies the loads in
// seq order, each dropping from the version being built every file in its
// folders (load files and compacted ones alike) before adding its own
// files: a listed partition the load writes no row into has no folder
// left; rows of partitions not listed are appended. One swap switches the
// whole table, so a reader sees each partition wholly old or wholly new.
// Because the folders are in the ledger line, Recover after a crash past
// the commit point replaces the same ones; a load at or below "through" is
// skipped as any other, so publishing twice changes nothing. A compaction
// that merged files a replacement dropped meanwhile finds them gone from
// the current manifest and is dropped (see Compaction), so it never brings
// replaced rows back.
//
// GetState reads state.db in one read transaction. When the ledger holds a
// load with states for the table above the file's "through" (its writer
// died after the commit point, or its publishing failed), GetState first
// takes the lock and publishes, so it always returns the state as of the
// last committed load, and that state agrees with the rows. HasKeyStates
// (whether any key has a state) reads the same way. A reader of the
// table's folder and a reader of its state may each see a load a moment
// before the other (they switch one after the other); only the writer reads
// state, after its commit returned.
//
// # Leases
//
// A lease (lease.go) is a record, _sluice/leases/<name>.json, read and
// written under the destination lock: holder, a generation that moves on
// at every takeover, expiry by this machine's clock. A load remembers the
// generations its Sink held when it began, and its commit, under the same
// lock, is refused with sinks.ErrLeaseLost once one of them moved on. A
// holder is alive while some process holds the flock on
// _sluice/leases/holders/<holder>: a lease of a dead holder is taken over at
// once, one of a live holder that stopped renewing it once it expired.
//
// # The ledger's base
//
// A commit that leaves ledger.jsonl with compactLedgerAt lines, all
// published and their states applied, compacts it (ledger.go): the lines go
// to an archive segment under _sluice/loads/, the heads, counts, resets and
// state watermarks they add up to go to ledger.base.json, and ledger.jsonl
// starts anew, each step durable before the next. Opening a destination
// reads the base and the lines after it; a reader that has the old file
// open notices the new one and reads the base again.
//
// A commit that fails after step 5 returns an error saying the load is
// committed: the next commit of any writer, or Recover, publishes it (a
// retried batch is then refused as stale, which is what the runner expects).
//
// # Recovery
//
// Open reads the ledger but repairs nothing. Recover takes the lock, cuts a
// torn ledger line, publishes every committed load missing from its tables,
// removes the staging folders whose flock no one holds (loads whose writer
// died before its commit point; live loads, in this or another process, are
// locked and left alone), removes version folders newer than a table's
// current one (a crash before the swap) and superseded ones, with their
// .ids folders, and returns the ledger. For a CDC target, publishing a load
// a crash left behind applies its rows unless the manifest's "through"
// holds it and its states unless state.db's does, so a crash at any step
// ends with both. Several processes may share a destination; Recover is safe while
// others write.
//
// # Reset
//
// Reset (reset.go) appends a ledger line with a "reset" object (tables,
// flows) as its commit point, then publishes it like a load: an empty
// version of each table with "through" at the reset's seq, and for a CDC
// target its state.db emptied with "through" at that seq. Ledger and the
// stale check forget the flows' loads before the line; _sluice_loads keeps
// them as history.
//
// # Compaction
//
// A background goroutine (every Options.CompactInterval; Close stops it), or
// Compact, merges an append target's small files per folder into one file
// (a CDC target's loads already keep one file per bucket and folder, and
// merge an SCD type 2 target's history files themselves, so compaction
// leaves it alone): the inputs
// are hard-linked into a locked staging folder and merged outside the lock;
// then under the lock the current manifest is read again, and only if every
// input is still in it is a new version published (the current files minus
// the inputs, plus the merged file; same "through"). A commit published
// meanwhile is kept; a compaction that lost a race is dropped. Rows keep their
// _sluice_load_id.
//
// The destination needs a POSIX file system: symlinks, hard links, rename
// and flock, all under one folder.
//
// Every file operation goes through Options.FS (sinks/local/fsys; the real
// file system by default), except the flocks and bbolt's own files. The
// crash tests fail there the operation that marks a step above (a version's
// fsync, a swap's rename, the ledger's write) and every one after it, then
// open a new Sink on the folder, as a process killed at that step would
// leave it.
package local
