// Package local is the checkpoint store of a local destination: a bbolt
// (go.etcd.io/bbolt) file, <destination>/_sluice/checkpoint.db, beside the
// local sink's ledger, so that the destination stays the state of record.
//
// One bucket maps each key's stored form (checkpoint.Key.String) to a record:
// revision, update time, a tombstone flag and the value. A Put reads the
// stored revision and writes the next one in one bbolt transaction, which
// bbolt fsyncs before it returns; a Delete writes tombstones that keep the
// revision count. When the file is created, its folder (and any folder made
// for it) is fsynced too.
//
// bbolt takes an exclusive flock on the file for as long as it is open, so
// the Store opens it for each operation and closes it right after: several
// processes (a running `sluice run`, a `sluice status`) share one
// destination, each waiting at most Options.LockTimeout for the others.
// Within a process, every Store on the same file queues on one mutex
// instead of polling the lock.
//
// The folders it makes and syncs go through Options.FS (sinks/local/fsys,
// the file-system seam it shares with the local sink, so that tests can
// fail those operations); bbolt opens the file itself.
//
// It must not know the local sink's layout beyond the _sluice folder name,
// nor import any sink or source (sinks/local/fsys is neither).
package local
