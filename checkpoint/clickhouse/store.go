package clickhouse

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
)

// Table is the table of checkpoints; the ClickHouse sink creates it with
// the same statement (chsql.StateDDL).
const Table = chsql.StateTable

// Conn is what the Store uses of a connection; clickhouse-go's driver.Conn
// has it.
type Conn = chsql.Conn

// Options configure a Store.
type Options struct {
	// Database holds the table (the destination's database). Required.
	Database string
	// Logger receives lock takeovers at Info. Nil discards.
	Logger *slog.Logger
	// LockWait bounds waiting for another writer of the same key. Default
	// 30 s.
	LockWait time.Duration
	// LockGrace is the age after which a key's write lock counts as left by
	// a stopped process and is taken over (a writer holds it for the
	// milliseconds of one read and one insert). Default 10 s, at least 2 s.
	LockGrace time.Duration
	// Cluster, when its Name is set, creates the database and the table ON
	// CLUSTER, the table replicated (as the sink does, chsql.StateDDL), and
	// inserts with insert_deduplicate = 0: a replicated table would drop a
	// row equal to a recent one as a repeat. The write locks stay views on
	// the server connected to. Zero: one server.
	Cluster chsql.Cluster
}

// Store is a checkpoint.Store in the destination's _sluice_state table. It
// is safe for concurrent use, and any number of processes may share the
// table.
type Store struct {
	conn     Conn
	db       string
	log      *slog.Logger
	lockWait time.Duration
	grace    time.Duration
	dropSync string // chsql.DropSuffix of the database
	cluster  chsql.Cluster
	closed   atomic.Bool
}

var _ checkpoint.Store = (*Store)(nil)

// Open creates the database and the table when missing and returns a Store
// on them. The connection stays the caller's: Close does not close it.
func Open(ctx context.Context, conn Conn, opts Options) (*Store, error) {
	if !chsql.ValidIdent(opts.Database) {
		return nil, fmt.Errorf("checkpoint: clickhouse: database name %q: use letters, digits and underscores", opts.Database)
	}
	if opts.LockWait <= 0 {
		opts.LockWait = 30 * time.Second
	}
	if opts.LockGrace <= 0 {
		opts.LockGrace = 10 * time.Second
	}
	opts.LockGrace = max(opts.LockGrace, 2*time.Second)
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := opts.Cluster.Validate(); err != nil {
		return nil, fmt.Errorf("checkpoint: clickhouse: %w", err)
	}
	s := &Store{conn: conn, db: opts.Database, log: log, lockWait: opts.LockWait, grace: opts.LockGrace, cluster: opts.Cluster}
	if err := s.create(ctx); err != nil {
		return nil, err
	}
	engine, err := chsql.DatabaseEngine(ctx, s.conn, s.db)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: clickhouse: %w", err)
	}
	s.dropSync = chsql.DropSuffix(engine)
	return s, nil
}

// create creates the database and the table when missing. On a cluster
// it looks first: an ON CLUSTER statement waits for every server, and one
// that is down makes it wait until distributed_ddl_task_timeout (180 s).
func (s *Store) create(ctx context.Context) error {
	if s.cluster.Replicated() {
		rows, err := s.conn.Query(ctx, "SELECT name FROM system.tables WHERE database = ? AND name = ?", s.db, Table)
		if err != nil {
			return fmt.Errorf("checkpoint: clickhouse: look for %s: %w", Table, err)
		}
		found := rows.Next()
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("checkpoint: clickhouse: look for %s: %w", Table, err)
		}
		if found {
			return nil
		}
	}
	if err := s.exec(ctx, "create database", "CREATE DATABASE IF NOT EXISTS "+chsql.Quote(s.db)+s.cluster.OnCluster()); err != nil {
		return err
	}
	return s.exec(ctx, "create "+Table, chsql.StateDDL(s.db, s.cluster))
}

// Retryable reports whether err, from the Store, is worth retrying later
// (by reading again, as after any error but ErrStale and ErrNotFound): the
// server or the connection failed in a way chsql.Retryable counts as
// passing, or the key's write lock stood in the way (another writer held
// it for longer than LockWait, or took it over from this writer while it
// stalled). checkpoint.ErrStale, ErrNotFound and ErrClosed, an invalid key
// or entry, and a cancellation by the caller are not. This is the one
// classifier of the Store's errors.
func (s *Store) Retryable(err error) bool {
	for _, final := range []error{checkpoint.ErrStale, checkpoint.ErrNotFound, checkpoint.ErrClosed} {
		if errors.Is(err, final) {
			return false
		}
	}
	return chsql.Retryable(err)
}

// row is a key's current row; revision 0: never written; value "": a
// tombstone (Put refuses empty values).
type row struct {
	value    string
	revision uint64
	at       time.Time
}

func (r row) entry() checkpoint.Entry {
	return checkpoint.Entry{Value: []byte(r.value), Revision: r.revision, UpdatedAt: r.at}
}

// Get implements checkpoint.Store.
func (s *Store) Get(ctx context.Context, key checkpoint.Key) (checkpoint.Entry, error) {
	if err := key.Validate(); err != nil {
		return checkpoint.Entry{}, err
	}
	if s.closed.Load() {
		return checkpoint.Entry{}, checkpoint.ErrClosed
	}
	r, err := s.read(ctx, key.String())
	if err != nil {
		return checkpoint.Entry{}, fmt.Errorf("checkpoint: clickhouse: get %s: %w", key, err)
	}
	if r.value == "" {
		return checkpoint.Entry{Revision: r.revision}, fmt.Errorf("checkpoint: clickhouse: get %s: %w", key, checkpoint.ErrNotFound)
	}
	return r.entry(), nil
}

// Put implements checkpoint.Store.
func (s *Store) Put(ctx context.Context, key checkpoint.Key, e checkpoint.Entry) error {
	if err := checkpoint.ValidatePut(key, e); err != nil {
		return err
	}
	if s.closed.Load() {
		return checkpoint.ErrClosed
	}
	k := key.String()
	err := s.locked(ctx, k, func(l *lock) error {
		cur, err := s.read(ctx, k)
		if err != nil {
			return err
		}
		if cur.revision != e.Revision {
			return fmt.Errorf("at revision %d, stored %d: %w", e.Revision, cur.revision, checkpoint.ErrStale)
		}
		return s.write(ctx, l, k, e.Value, e.Revision+1)
	})
	if err != nil {
		return fmt.Errorf("checkpoint: clickhouse: put %s: %w", key, err)
	}
	return nil
}

// Delete implements checkpoint.Store: each selected key gets a tombstone
// row (an empty value) at its next revision, under its write lock.
func (s *Store) Delete(ctx context.Context, prefix checkpoint.Key) error {
	if err := prefix.ValidatePrefix(); err != nil {
		return err
	}
	if s.closed.Load() {
		return checkpoint.ErrClosed
	}
	entries, err := s.scan(ctx, prefix)
	if err != nil {
		return fmt.Errorf("checkpoint: clickhouse: delete %s: %w", prefix, err)
	}
	for _, e := range entries {
		k := e.Key.String()
		err := s.locked(ctx, k, func(l *lock) error {
			cur, err := s.read(ctx, k)
			if err != nil || cur.value == "" {
				return err
			}
			return s.write(ctx, l, k, nil, cur.revision+1)
		})
		if err != nil {
			return fmt.Errorf("checkpoint: clickhouse: delete %s: %s: %w", prefix, e.Key, err)
		}
	}
	return nil
}

// List implements checkpoint.Store.
func (s *Store) List(ctx context.Context, prefix checkpoint.Key) ([]checkpoint.KeyEntry, error) {
	if s.closed.Load() {
		return nil, checkpoint.ErrClosed
	}
	out, err := s.scan(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: clickhouse: list %s: %w", prefix, err)
	}
	return out, nil
}

// Close implements checkpoint.Store. It leaves the connection open.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}

// read returns the current row of a key; the zero row when it has none.
// Only the key is filtered in SQL: a condition on another column could be
// applied before FINAL merges the versions (as PREWHERE) and show a
// replaced row.
func (s *Store) read(ctx context.Context, k string) (row, error) {
	var r row
	rows, err := s.conn.Query(ctx, "SELECT value, revision, toInt64(toUnixTimestamp(updated_at)) FROM "+s.table(Table)+" FINAL WHERE key = ?", k)
	if err != nil {
		return r, fmt.Errorf("read: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var c row
		var at int64
		if err := rows.Scan(&c.value, &c.revision, &at); err != nil {
			return r, fmt.Errorf("read: %w", err)
		}
		if c.revision >= r.revision {
			c.at = time.Unix(at, 0).UTC()
			r = c
		}
	}
	if err := rows.Err(); err != nil {
		return r, fmt.Errorf("read: %w", err)
	}
	return r, nil
}

// scan returns the live entries prefix selects, in key order.
func (s *Store) scan(ctx context.Context, prefix checkpoint.Key) ([]checkpoint.KeyEntry, error) {
	q := "SELECT key, value, revision, toInt64(toUnixTimestamp(updated_at)) FROM " + s.table(Table) + " FINAL"
	var args []any
	if p := prefix.ScanPrefix(); p != "" {
		q += " WHERE startsWith(key, ?)"
		args = append(args, p)
	}
	rows, err := s.conn.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	defer rows.Close()
	latest := map[string]row{}
	for rows.Next() {
		var k string
		var c row
		var at int64
		if err := rows.Scan(&k, &c.value, &c.revision, &at); err != nil {
			return nil, fmt.Errorf("read: %w", err)
		}
		c.at = time.Unix(at, 0).UTC()
		if prev, ok := latest[k]; !ok || c.revision >= prev.revision {
			latest[k] = c
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	var out []checkpoint.KeyEntry
	for k, r := range latest {
		if r.value == "" {
			continue
		}
		key, err := checkpoint.ParseKey(k)
		if err != nil {
			return nil, err
		}
		if prefix.Matches(key) {
			out = append(out, checkpoint.KeyEntry{Key: key, Entry: r.entry()})
		}
	}
	checkpoint.SortEntries(out)
	return out, nil
}

// maxQuery is below ClickHouse's default max_query_size (256 KiB); a longer
// statement raises the setting for itself.
const maxQuery = 200 << 10

// write inserts the key's row at revision rev (a tombstone when value is
// empty) while l is held. The row is selected from the lock view, so it
// lands only while the view still names this writer: a writer whose lock
// was taken over as abandoned writes nothing.
func (s *Store) write(ctx context.Context, l *lock, k string, value []byte, rev uint64) error {
	q := "INSERT INTO " + s.table(Table) + " (key, value, revision, updated_at) SELECT ?, unhex(?), toUInt64(" +
		strconv.FormatUint(rev, 10) + "), toDateTime(" + strconv.FormatInt(time.Now().Unix(), 10) + ", 'UTC') FROM " +
		s.table(l.name) + " WHERE holder = ?"
	settings := ch.Settings{}
	if n := len(q) + len(k) + 2*len(value) + len(l.token); n > maxQuery {
		settings["max_query_size"] = n + 1<<16
	}
	if s.cluster.Replicated() {
		// A replicated table drops an insert equal to a recent one as a
		// repeat and answers success. A key's rows differ by revision, but
		// what lands must not rest on that.
		settings["insert_deduplicate"] = 0
	}
	qctx := ctx
	if len(settings) > 0 {
		qctx = ch.Context(ctx, ch.WithSettings(settings))
	}
	l.unsettled = true
	err := s.conn.Exec(qctx, q, k, hex.EncodeToString(value), l.token)
	if err == nil {
		l.unsettled = false
		if l.fresh(s.grace) {
			// Nobody can have taken the lock yet, so the insert read it and
			// landed.
			return nil
		}
	} else {
		// The outcome is unknown: wait until the insert can no longer land,
		// then look while still holding the lock.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if werr := chsql.WaitQueries(ctx, s.conn, s.db, l.name); werr != nil {
			return fmt.Errorf("insert: %w (and then: %v)", err, werr)
		}
		l.unsettled = false
	}
	held, herr := s.holds(ctx, l)
	if herr != nil {
		return fmt.Errorf("insert: outcome unknown: %w", herr)
	}
	if !held {
		// This writer stalled for longer than the grace period; a later
		// attempt reads again (Retryable).
		l.lost = true
		if err != nil {
			return chsql.Transient("insert: %w; the write lock was taken over meanwhile, so it may or may not have landed", err)
		}
		return chsql.Transient("insert: the write lock was taken over as abandoned meanwhile, so it may or may not have landed")
	}
	if err == nil {
		return nil
	}
	cur, rerr := s.read(ctx, k)
	if rerr == nil && cur.revision == rev {
		return nil // it landed although its answer was an error
	}
	return fmt.Errorf("insert: %w", err)
}

func (s *Store) exec(ctx context.Context, what, query string, args ...any) error {
	if err := s.conn.Exec(ctx, query, args...); err != nil {
		return fmt.Errorf("checkpoint: clickhouse: %s: %w", what, err)
	}
	return nil
}

// table returns the quoted, database-qualified name of a table.
func (s *Store) table(name string) string { return chsql.Table(s.db, name) }
