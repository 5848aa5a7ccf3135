package local

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/sinks/local/fsys"
)

// FileName is the store's file inside the destination's _sluice folder.
const FileName = "checkpoint.db"

// stateDir is the destination's folder of hidden state (the local sink's
// _sluice).
const stateDir = "_sluice"

// bucket holds every entry, by Key.String().
var bucket = []byte("entries")

// Options tune a Store. The zero value is ready to use.
type Options struct {
	// LockTimeout bounds waiting for another process that holds the file
	// (each holds it for one read or one write). Default 30 s.
	LockTimeout time.Duration
	// FS is the file system the store makes and syncs its folders through;
	// nil means fsys.OS, the real one. bbolt opens checkpoint.db itself
	// (sinks/local/fsys/doc.go).
	FS fsys.FS
}

// Store is a checkpoint.Store in <destination>/_sluice/checkpoint.db. It is
// safe for concurrent use, and several processes may open the same
// destination.
type Store struct {
	path    string
	timeout time.Duration
	mu      *sync.Mutex // shared by every Store of this process on path
	closed  atomic.Bool
}

var _ checkpoint.Store = (*Store)(nil)

// pathLocks holds one mutex per store file, so that the goroutines of this
// process queue in memory rather than poll the file lock.
var pathLocks sync.Map // string -> *sync.Mutex

// Path returns the store file of the destination at dir.
func Path(dir string) string { return filepath.Join(dir, stateDir, FileName) }

// Open opens the store of the local destination at dir, creating the
// folder and the file when missing.
func Open(dir string, opts Options) (*Store, error) {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = 30 * time.Second
	}
	disk := opts.FS
	if disk == nil {
		disk = fsys.OS{}
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: local: open %s: %w", dir, err)
	}
	state := filepath.Join(abs, stateDir)
	created, err := fsys.MkdirAll(disk, state, 0o755)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: local: open %s: %w", dir, err)
	}
	if real, err := filepath.EvalSymlinks(state); err == nil {
		state = real
	}
	path := filepath.Join(state, FileName)
	mu, _ := pathLocks.LoadOrStore(path, &sync.Mutex{})
	s := &Store{path: path, timeout: opts.LockTimeout, mu: mu.(*sync.Mutex)}

	_, statErr := disk.Stat(path)
	fresh := errors.Is(statErr, fs.ErrNotExist)
	err = s.with(context.Background(), true, func(tx *bbolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucket)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("checkpoint: local: open %s: %w", path, err)
	}
	if fresh {
		// The new file's name, and the folders made for it, must be as
		// durable as its content.
		dirs := []string{state}
		for _, d := range created {
			dirs = append(dirs, filepath.Dir(d))
		}
		for _, d := range dirs {
			if err := disk.SyncDir(d); err != nil {
				return nil, fmt.Errorf("checkpoint: local: open %s: sync folder %s: %w", path, d, err)
			}
		}
	}
	return s, nil
}

// with opens the file, runs fn in one transaction (committed and fsynced
// by bbolt when write) and closes the file again, so that other processes
// can use it in between.
func (s *Store) with(ctx context.Context, write bool, fn func(tx *bbolt.Tx) error) error {
	if s.closed.Load() {
		return checkpoint.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	db, err := bbolt.Open(s.path, 0o644, &bbolt.Options{Timeout: s.timeout})
	if errors.Is(err, berrors.ErrTimeout) {
		return fmt.Errorf("%s held by another process for more than %v: %w", s.path, s.timeout, err)
	}
	if err != nil {
		return err
	}
	if write {
		err = db.Update(fn)
	} else {
		err = db.View(fn)
	}
	if cerr := db.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close %s: %w", s.path, cerr)
	}
	return err
}

// errCorrupt marks a record the store cannot read.
var errCorrupt = errors.New("corrupt checkpoint")

// Retryable reports whether an operation that failed with err may succeed
// when tried again: the file held by another process past LockTimeout, or
// a file-system error (a full disk, an I/O error). A stale or refused
// write, a missing entry, a closed store, an invalid key or value, a
// corrupt record or a cancelled context are not. This is the store's one
// classifier.
func (s *Store) Retryable(err error) bool {
	switch {
	case err == nil, errors.Is(err, checkpoint.ErrStale), errors.Is(err, checkpoint.ErrNotFound),
		errors.Is(err, checkpoint.ErrClosed), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, errCorrupt):
		return false
	case errors.Is(err, berrors.ErrTimeout):
		return true
	}
	return fsys.Failed(err)
}

// record is an entry as stored: format byte 1, revision, update time in
// Unix nanoseconds (both big-endian), flags, then the value.
type record struct {
	revision uint64
	at       time.Time
	deleted  bool
	value    []byte
}

const (
	recordFormat  = 1
	recordHeader  = 1 + 8 + 8 + 1
	flagTombstone = 1
)

func (r record) encode() []byte {
	b := make([]byte, recordHeader+len(r.value))
	b[0] = recordFormat
	binary.BigEndian.PutUint64(b[1:], r.revision)
	binary.BigEndian.PutUint64(b[9:], uint64(r.at.UnixNano()))
	if r.deleted {
		b[17] = flagTombstone
	}
	copy(b[recordHeader:], r.value)
	return b
}

// decodeRecord decodes a stored record; the value is copied out of bbolt's
// memory. A nil b is a key never written.
func decodeRecord(b []byte) (record, error) {
	if b == nil {
		return record{}, nil
	}
	if len(b) < recordHeader || b[0] != recordFormat {
		return record{}, fmt.Errorf("%w: unreadable record of %d bytes", errCorrupt, len(b))
	}
	return record{
		revision: binary.BigEndian.Uint64(b[1:]),
		at:       time.Unix(0, int64(binary.BigEndian.Uint64(b[9:]))).UTC(),
		deleted:  b[17]&flagTombstone != 0,
		value:    bytes.Clone(b[recordHeader:]),
	}, nil
}

func (r record) entry() checkpoint.Entry {
	return checkpoint.Entry{Value: r.value, Revision: r.revision, UpdatedAt: r.at}
}

// Get implements checkpoint.Store.
func (s *Store) Get(ctx context.Context, key checkpoint.Key) (checkpoint.Entry, error) {
	if err := key.Validate(); err != nil {
		return checkpoint.Entry{}, err
	}
	var r record
	err := s.with(ctx, false, func(tx *bbolt.Tx) error {
		var err error
		r, err = decodeRecord(tx.Bucket(bucket).Get([]byte(key.String())))
		return err
	})
	if err != nil {
		return checkpoint.Entry{}, fmt.Errorf("checkpoint: local: get %s: %w", key, err)
	}
	if r.deleted || r.revision == 0 {
		return checkpoint.Entry{Revision: r.revision}, fmt.Errorf("checkpoint: local: get %s: %w", key, checkpoint.ErrNotFound)
	}
	return r.entry(), nil
}

// Put implements checkpoint.Store.
func (s *Store) Put(ctx context.Context, key checkpoint.Key, e checkpoint.Entry) error {
	if err := checkpoint.ValidatePut(key, e); err != nil {
		return err
	}
	k := []byte(key.String())
	err := s.with(ctx, true, func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucket)
		cur, err := decodeRecord(b.Get(k))
		if err != nil {
			return err
		}
		if cur.revision != e.Revision {
			return fmt.Errorf("at revision %d, stored %d: %w", e.Revision, cur.revision, checkpoint.ErrStale)
		}
		return b.Put(k, record{revision: e.Revision + 1, at: time.Now().UTC(), value: e.Value}.encode())
	})
	if err != nil {
		return fmt.Errorf("checkpoint: local: put %s: %w", key, err)
	}
	return nil
}

// Delete implements checkpoint.Store. Deleted keys keep a tombstone with
// their revision, so that a write based on a read from before the Delete
// is refused.
func (s *Store) Delete(ctx context.Context, prefix checkpoint.Key) error {
	if err := prefix.ValidatePrefix(); err != nil {
		return err
	}
	err := s.with(ctx, true, func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucket)
		var keys [][]byte
		var recs []record
		err := scan(b, prefix, func(k []byte, r record) {
			keys = append(keys, bytes.Clone(k))
			recs = append(recs, r)
		})
		if err != nil {
			return err
		}
		now := time.Now().UTC()
		for i, k := range keys {
			if err := b.Put(k, record{revision: recs[i].revision + 1, at: now, deleted: true}.encode()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("checkpoint: local: delete %s: %w", prefix, err)
	}
	return nil
}

// List implements checkpoint.Store.
func (s *Store) List(ctx context.Context, prefix checkpoint.Key) ([]checkpoint.KeyEntry, error) {
	var out []checkpoint.KeyEntry
	err := s.with(ctx, false, func(tx *bbolt.Tx) error {
		return scan(tx.Bucket(bucket), prefix, func(k []byte, r record) {
			key, _ := checkpoint.ParseKey(string(k)) // scan parsed it
			out = append(out, checkpoint.KeyEntry{Key: key, Entry: r.entry()})
		})
	})
	if err != nil {
		return nil, fmt.Errorf("checkpoint: local: list %s: %w", prefix, err)
	}
	checkpoint.SortEntries(out)
	return out, nil
}

// scan calls fn for every live entry prefix selects.
func scan(b *bbolt.Bucket, prefix checkpoint.Key, fn func(k []byte, r record)) error {
	p := []byte(prefix.ScanPrefix())
	c := b.Cursor()
	for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
		key, err := checkpoint.ParseKey(string(k))
		if err != nil {
			return err
		}
		if !prefix.Matches(key) {
			continue
		}
		r, err := decodeRecord(v)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		if !r.deleted {
			fn(k, r)
		}
	}
	return nil
}

// Close implements checkpoint.Store. The file is open only during each
// operation, so there is nothing to release.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}
