package local

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/local/fsys"
)

// The hidden state of a CDC target lives in a bbolt file,
// _sluice/tables/<table>/state.db: bucket "chunks" holds the key states
// (statechunks.go; bucket "keys", one state per key, in files made before
// chunks), bucket "meta" holds the table's own state ("table") and "through", the
// ledger seq of the last load whose states it holds. Publishing a load
// applies its staged states, only when "through" is below the load's seq,
// and its last transaction sets "through": so it is idempotent, and
// Recover (or the next commit, or GetState) applies what a crash left out.
var (
	stateKeys    = []byte("keys")
	stateMeta    = []byte("meta")
	stateThrough = []byte("through")
	stateTable   = []byte("table")
)

// stateMmapSize is the initial mapping of a state file opened to write.
const stateMmapSize = 256 << 20

// stateFillPercent is how full bbolt fills the pages of the key states it
// splits (its default is half): a load rewrites most leaf pages anyway, so
// fuller pages mean fewer pages to allocate, write and free.
const stateFillPercent = 0.9

// stateLockTimeout bounds the wait for a state file's flock (held by a
// publish in another process, or by readers while a publish waits).
const stateLockTimeout = time.Minute

// openState opens a table's state file. A missing file is created (ready
// made in _sluice/tmp and renamed into place, so that a reader never opens
// a file still being initialized) unless readOnly, which returns
// fs.ErrNotExist then.
func (s *Sink) openState(table string, readOnly bool) (*bolt.DB, error) {
	path := s.lay.stateFile(table)
	if !readOnly {
		if err := s.createState(table); err != nil {
			return nil, err
		}
	} else if _, err := s.disk.Stat(path); err != nil {
		return nil, err
	}
	opts := &bolt.Options{Timeout: stateLockTimeout, ReadOnly: readOnly, FreelistType: bolt.FreelistMapType}
	if !readOnly {
		// A publish rewrites most of the file's pages, and the file grows
		// while it does: mapped large from the start (address space only),
		// it is not remapped at each growth.
		opts.InitialMmapSize = stateMmapSize
	}
	db, err := bolt.Open(path, 0o644, opts)
	if err != nil {
		return nil, fmt.Errorf("state of %s: %w", table, err)
	}
	return db, nil
}

// createState makes a table's empty state file when it has none. Runs
// under the destination lock.
func (s *Sink) createState(table string) error {
	path := s.lay.stateFile(table)
	if _, err := s.disk.Stat(path); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	tmp := s.lay.tmpFile("state-" + table + "-" + randomSuffix())
	db, err := bolt.Open(tmp, 0o644, &bolt.Options{Timeout: stateLockTimeout})
	if err != nil {
		return fmt.Errorf("state of %s: %w", table, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucketIfNotExists(stateChunks); err != nil {
			return err
		}
		_, err := tx.CreateBucketIfNotExists(stateMeta)
		return err
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = s.disk.Rename(tmp, path)
	}
	if err != nil {
		s.disk.Remove(tmp)
		return fmt.Errorf("state of %s: %w", table, err)
	}
	return s.disk.SyncDir(s.lay.tableDir(table))
}

func readThrough(tx *bolt.Tx) int64 {
	if m := tx.Bucket(stateMeta); m != nil {
		if v := m.Get(stateThrough); len(v) == 8 {
			return int64(binary.BigEndian.Uint64(v))
		}
	}
	return 0
}

// stateTxChunks bounds the chunks one transaction of applyStates
// rewrites, about 4 MiB: a load that changes states all over a large
// table applies them in several transactions, so that what it holds at
// once (the chunks it decodes and cuts again, and the pages bbolt keeps
// until a commit) does not grow with the table.
var stateTxChunks = 128

// applyStates applies a load's staged states (a pairs file: key, value or
// absent) to db unless it holds them already. Later entries of a key win.
//
// The states go in transactions of at most stateTxChunks chunks; the last
// one also sets the table's own state and "through". A crash in between
// leaves "through" below seq, so the next publish applies the load's states
// again, which gives the same states; meanwhile, each key read holds the
// state of a committed load (this one's or the one before), since states
// are applied only after their commit. between, unless nil, runs after
// each transaction but the last (a test's crash point).
func applyStates(disk fsys.FS, db *bolt.DB, seq int64, staged string, between func() error) (bool, error) {
	var through int64
	if err := db.View(func(tx *bolt.Tx) error { through = readThrough(tx); return nil }); err != nil || through >= seq {
		return false, err
	}
	p, err := readPairs(disk, staged)
	if err != nil {
		return false, err
	}
	ents, table, hasTable := sortedStates(p)
	arena := pieceArenas.Get().(*pieceArena)
	defer pieceArenas.Put(arena)
	applied := false
	for done := false; !done; {
		arena.reset() // the previous transaction has ended
		err := db.Update(func(tx *bolt.Tx) error {
			if readThrough(tx) >= seq {
				done = true
				return nil
			}
			n, err := putSomeStates(tx, ents, arena)
			if err != nil {
				return err
			}
			if ents = ents[n:]; len(ents) > 0 {
				return nil // the next transaction goes on
			}
			applied, done = true, true
			return finishStates(tx, seq, table, hasTable)
		})
		if err == nil && !done && between != nil {
			err = between()
		}
		if err != nil {
			return false, err
		}
	}
	return applied, nil
}

// putSomeStates applies the first of ents (at most stateTxChunks chunks'
// worth, at least one) to tx's chunks and returns how many it applied. A
// state file made before chunks is moved into chunks first, with all of
// ents.
func putSomeStates(tx *bolt.Tx, ents []stateKV, arena *pieceArena) (int, error) {
	old, err := migrateKeys(tx)
	if err != nil {
		return 0, err
	}
	chunks, err := tx.CreateBucketIfNotExists(stateChunks)
	if err != nil {
		return 0, err
	}
	chunks.FillPercent = stateFillPercent
	if old != nil {
		// The chunks are empty: the old states, merged with the load's,
		// make them.
		return len(ents), putPieces(chunks, mergeChunks(old, ents, arena))
	}
	return putStates(chunks, ents, stateTxChunks, arena)
}

// finishStates sets, in a load's last state transaction, the table's own
// state (when the load has one) and "through" to the load's seq.
func finishStates(tx *bolt.Tx, seq int64, table stateKV, hasTable bool) error {
	meta, err := tx.CreateBucketIfNotExists(stateMeta)
	if err != nil {
		return err
	}
	if hasTable {
		// bbolt keeps the slice until the transaction ends and never
		// writes it: it shares the staged pairs' bytes rather than copy
		// them.
		if table.del {
			err = meta.Delete(stateTable)
		} else {
			err = meta.Put(stateTable, strBytes(table.v))
		}
		if err != nil {
			return err
		}
	}
	var through [8]byte
	binary.BigEndian.PutUint64(through[:], uint64(seq))
	return meta.Put(stateThrough, through[:])
}

// migrateKeys returns the states of a state file made before chunks (one
// per key, in bucket "keys"), in key order, and removes the bucket; nil
// when there is none. The strings share the file's memory, valid until the
// transaction ends.
func migrateKeys(tx *bolt.Tx) ([]stateKV, error) {
	kb := tx.Bucket(stateKeys)
	if kb == nil {
		return nil, nil
	}
	old := []stateKV{}
	c := kb.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		old = append(old, stateKV{k: bytesStr(k), v: bytesStr(v)})
	}
	if err := tx.DeleteBucket(stateKeys); err != nil {
		return nil, err
	}
	return old, nil
}

var (
	_ sinks.StateReader    = (*Sink)(nil)
	_ sinks.KeyStateProber = (*Sink)(nil)
)

// GetState returns the committed state of each key of a CDC target that
// has one; the key "" is the table's own state. It reflects every committed
// load: when the ledger holds a load whose states are not applied yet (its
// writer died after the commit point, or its publishing failed), GetState
// takes the destination lock and publishes first.
func (s *Sink) GetState(ctx context.Context, table string, keys []string) (map[string][]byte, error) {
	out := map[string][]byte{} // a table without a state file has none
	err := s.readCommitted(ctx, table, "get state", func(tx *bolt.Tx) error {
		out = make(map[string][]byte, len(keys))
		return statesIn(tx, keys, out)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// HasKeyStates reports whether any key of a CDC target has a state (a
// removed key may count), as of every committed load, as GetState does.
func (s *Sink) HasKeyStates(ctx context.Context, table string) (bool, error) {
	var has bool
	err := s.readCommitted(ctx, table, "probe key states", func(tx *bolt.Tx) error {
		has = false
		for _, name := range [][]byte{stateChunks, stateKeys} {
			if b := tx.Bucket(name); b != nil {
				if k, _ := b.Cursor().First(); k != nil {
					has = true
				}
			}
		}
		return nil
	})
	return has, err
}

// readCommitted runs read in a read transaction of a CDC target's state
// file (not at all when it has none) that holds every load committed
// before the call: when the file's "through" lags the ledger, it publishes
// first, then reads again. A load that commits meanwhile (another
// goroutine's, its states still queued) may show or not, as with any read
// racing a write.
func (s *Sink) readCommitted(ctx context.Context, table, what string, read func(*bolt.Tx) error) error {
	if s.closed.Load() {
		return errClosed
	}
	def, err := s.table(table)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("local: %s of %s: %w", what, table, sinks.ErrUnknownTable)
	}
	if err != nil {
		return fmt.Errorf("local: %s of %s: %w", what, table, err)
	}
	if def.Kind == sinks.KindAppend {
		return fmt.Errorf("local: %s of %s: not a CDC target", what, table)
	}
	s.led.mu.Lock()
	err = s.led.refresh(false)
	last := s.led.stateLast[table]
	s.led.mu.Unlock()
	if err != nil {
		return fmt.Errorf("local: %s of %s: %w", what, table, err)
	}
	for attempt := 0; ; attempt++ {
		through, err := s.readState(table, read)
		if err != nil {
			return fmt.Errorf("local: %s of %s: %w", what, table, err)
		}
		if through >= last {
			return nil
		}
		if attempt > 0 {
			return fmt.Errorf("local: %s of %s: load %d is committed but its states are not applied", what, table, last)
		}
		if err := s.publishThrough(ctx, last); err != nil {
			return fmt.Errorf("local: %s of %s: %w", what, table, err)
		}
	}
}

// publishThrough takes the lock and publishes every committed load up to
// seq (and any after it) that is missing from its tables.
func (s *Sink) publishThrough(ctx context.Context, seq int64) error {
	unlock, err := s.lock(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	s.led.mu.Lock()
	err = s.led.refresh(true)
	s.led.mu.Unlock()
	if err != nil {
		return err
	}
	s.pubd = min(s.pubd, seq-1)
	return s.publishPending(context.WithoutCancel(ctx), false)
}

// readStates reads the states of keys and the seq the state file holds
// loads through, in one read transaction.
// readState runs read in a read transaction of table's state file and
// returns the file's "through"; a table without one reads nothing.
func (s *Sink) readState(table string, read func(*bolt.Tx) error) (int64, error) {
	db, err := s.openState(table, true)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var through int64
	err = db.View(func(tx *bolt.Tx) error {
		through = readThrough(tx)
		return read(tx)
	})
	return through, err
}

// statesIn adds to out the states of keys that have one, read in tx.
func statesIn(tx *bolt.Tx, keys []string, out map[string][]byte) error {
	kb, cb, meta := tx.Bucket(stateKeys), tx.Bucket(stateChunks), tx.Bucket(stateMeta)
	var chunks *chunkReader
	if cb != nil {
		chunks = &chunkReader{c: cb.Cursor()}
	}
	// Sorted keys walk the chunks in order: each is decoded once.
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	for _, k := range sorted {
		var v []byte
		var err error
		switch {
		case k == "" && meta != nil:
			v = meta.Get(stateTable)
		case k != "" && chunks != nil:
			v, err = chunks.get(k)
		case k != "" && kb != nil: // a file made before chunks
			v = kb.Get(strBytes(k))
		}
		if err != nil {
			return err
		}
		if v != nil {
			out[k] = slices.Clone(v)
		}
	}
	return nil
}
