package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/checkpoint/storetest"
	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
	"github.com/sluicehq/sluice/sinks/clickhouse/chtest"
)

func serverAddr(t testing.TB) string { t.Helper(); return chtest.ServerAddr(t) }

func dial(t testing.TB, addr string) driver.Conn {
	t.Helper()
	c, err := ch.Open(&ch.Options{Addr: []string{addr}, DialTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	return c
}

func newDatabase(t testing.TB, addr string) string { t.Helper(); return chtest.NewDatabase(t, addr) }

// connStore is a Store with its own connection, closed with it.
type connStore struct {
	*Store
	conn driver.Conn
}

func (c connStore) Close() error {
	c.Store.Close()
	return c.conn.Close()
}

func openStore(t testing.TB, addr, db string, opts Options) connStore {
	t.Helper()
	c := dial(t, addr)
	opts.Database = db
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	}
	s, err := Open(context.Background(), c, opts)
	if err != nil {
		c.Close()
		t.Fatalf("Open: %v", err)
	}
	return connStore{Store: s, conn: c}
}

func TestConformance(t *testing.T) {
	addr := serverAddr(t)
	storetest.Run(t, func(t *testing.T) func() checkpoint.Store {
		db := newDatabase(t, addr)
		return func() checkpoint.Store { return openStore(t, addr, db, Options{}) }
	})
}

func queryInt(t *testing.T, c driver.Conn, q string, args ...any) int64 {
	t.Helper()
	rows, err := c.Query(context.Background(), q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	var n int64
	for rows.Next() {
		if err := rows.Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

var key = checkpoint.OnceKey("p", "f")

func TestTableAsTheSinkMakesIt(t *testing.T) {
	addr := serverAddr(t)
	db := newDatabase(t, addr)
	s := openStore(t, addr, db, Options{})
	defer s.Close()
	ctx := context.Background()
	if err := s.Put(ctx, key, checkpoint.Entry{Value: []byte(`{"complete":true}`)}); err != nil {
		t.Fatalf("Put: %v", err)
	}
	rows, err := s.conn.Query(ctx, "SELECT engine_full FROM system.tables WHERE database = ? AND name = ?", db, Table)
	if err != nil {
		t.Fatal(err)
	}
	var engine string
	for rows.Next() {
		if err := rows.Scan(&engine); err != nil {
			t.Fatal(err)
		}
	}
	rows.Close()
	if !strings.HasPrefix(engine, "ReplacingMergeTree(revision)") || !strings.Contains(engine, "ORDER BY key") {
		t.Fatalf("engine %q, want ReplacingMergeTree(revision) ORDER BY key", engine)
	}
	// The row is readable as documented: the key's stored form, the value
	// as text, the revision.
	n := queryInt(t, s.conn, "SELECT toInt64(revision) FROM "+chsql.Table(db, Table)+" FINAL WHERE key = 'p/once/f/' AND value = '{\"complete\":true}'")
	if n != 1 {
		t.Fatalf("stored revision %d, want 1", n)
	}
	// No lock view is left behind.
	if n := queryInt(t, s.conn, "SELECT toInt64(count()) FROM system.tables WHERE database = ? AND startsWith(name, ?)", db, lockPrefix); n != 0 {
		t.Fatalf("%d lock views left", n)
	}
}

func TestAbandonedLockTakenOver(t *testing.T) {
	addr := serverAddr(t)
	db := newDatabase(t, addr)
	s := openStore(t, addr, db, Options{LockGrace: 2 * time.Second, LockWait: 10 * time.Second})
	defer s.Close()
	ctx := context.Background()
	// A writer stopped while holding the key's lock.
	if err := s.conn.Exec(ctx, "CREATE VIEW "+s.table(lockName(key.String()))+" AS SELECT 'dead' AS holder"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := s.Put(ctx, key, checkpoint.Entry{Value: []byte("x")}); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if waited := time.Since(start); waited < 2*time.Second {
		t.Fatalf("Put took a lock younger than the grace period (after %v)", waited)
	}
	e, err := s.Get(ctx, key)
	if err != nil || string(e.Value) != "x" || e.Revision != 1 {
		t.Fatalf("Get = %q rev %d, %v", e.Value, e.Revision, err)
	}
}

func TestLiveLockWaitedFor(t *testing.T) {
	addr := serverAddr(t)
	db := newDatabase(t, addr)
	s := openStore(t, addr, db, Options{LockWait: 500 * time.Millisecond})
	defer s.Close()
	ctx := context.Background()
	if err := s.conn.Exec(ctx, "CREATE VIEW "+s.table(lockName(key.String()))+" AS SELECT 'busy' AS holder"); err != nil {
		t.Fatal(err)
	}
	err := s.Put(ctx, key, checkpoint.Entry{Value: []byte("x")})
	if err == nil || errors.Is(err, checkpoint.ErrStale) {
		t.Fatalf("Put while another writer holds the lock: err %v, want a timeout", err)
	}
	if !s.Retryable(err) {
		t.Fatalf("%v is not retryable", err)
	}
	if _, err := s.Get(ctx, key); !errors.Is(err, checkpoint.ErrNotFound) {
		t.Fatalf("Get after the refused Put: %v, want ErrNotFound", err)
	}
	// Another key is not held up.
	other := checkpoint.OnceKey("p", "g")
	if err := s.Put(ctx, other, checkpoint.Entry{Value: []byte("y")}); err != nil {
		t.Fatalf("Put of another key: %v", err)
	}
}

func TestWriteOfATakenOverLockLandsNothing(t *testing.T) {
	addr := serverAddr(t)
	db := newDatabase(t, addr)
	s := openStore(t, addr, db, Options{})
	defer s.Close()
	ctx := context.Background()
	k := key.String()
	tests := []struct {
		name  string
		taken func(t *testing.T, l *lock) // what happened to the lock before the insert
	}{
		{"dropped", func(t *testing.T, l *lock) {
			if err := s.fence(ctx, l.name); err != nil {
				t.Fatal(err)
			}
		}},
		{"taken_by_another", func(t *testing.T, l *lock) {
			if err := s.fence(ctx, l.name); err != nil {
				t.Fatal(err)
			}
			if err := s.conn.Exec(ctx, "CREATE VIEW "+s.table(l.name)+" AS SELECT 'other' AS holder"); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, err := s.acquire(ctx, k)
			if err != nil {
				t.Fatalf("acquire: %v", err)
			}
			tc.taken(t, l)
			l.at = time.Now().Add(-time.Hour) // as if the writer had stalled
			err = s.write(ctx, l, k, []byte("late"), 1)
			if err == nil || errors.Is(err, checkpoint.ErrStale) {
				t.Fatalf("write under a lost lock: err %v, want an outcome-unknown error", err)
			}
			if !s.Retryable(err) {
				t.Fatalf("%v is not retryable", err)
			}
			if !l.lost {
				t.Fatal("lock not marked lost")
			}
			if err := s.release(ctx, l); err != nil {
				t.Fatalf("release: %v", err)
			}
			if _, err := s.Get(ctx, key); !errors.Is(err, checkpoint.ErrNotFound) {
				t.Fatalf("Get: %v, want ErrNotFound: the write landed", err)
			}
			// The other holder's lock is left alone.
			if tc.name == "taken_by_another" {
				held, err := s.holds(ctx, &lock{name: l.name, token: "other"})
				if err != nil || !held {
					t.Fatalf("the other holder's lock: held %v, %v", held, err)
				}
				if err := s.fence(ctx, l.name); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func TestClosed(t *testing.T) {
	addr := serverAddr(t)
	s := openStore(t, addr, newDatabase(t, addr), Options{})
	defer s.conn.Close()
	if err := s.Store.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(context.Background(), key); !errors.Is(err, checkpoint.ErrClosed) || s.Retryable(err) {
		t.Fatalf("Get after Close: %v, want ErrClosed, not retryable", err)
	}
	if err := s.Put(context.Background(), key, checkpoint.Entry{Value: []byte("x")}); !errors.Is(err, checkpoint.ErrClosed) {
		t.Fatalf("Put after Close: %v, want ErrClosed", err)
	}
}

func TestOpenRefusesBadDatabase(t *testing.T) {
	tests := []struct{ name, db string }{
		{"empty", ""},
		{"quote", "a`b"},
		{"leading_digit", "1db"},
		{"dot", "a.b"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Open(context.Background(), nil, Options{Database: tc.db}); err == nil {
				t.Fatalf("Open(%q) accepted", tc.db)
			}
		})
	}
}

// faultConn breaks the answer of the Store's INSERTs.
type faultConn struct {
	Conn
	mode string // "lost_answer": the insert ran; "not_sent": it never reached the server
}

var errReset = errors.New("connection reset by peer")

func (f *faultConn) Exec(ctx context.Context, q string, args ...any) error {
	if !strings.HasPrefix(q, "INSERT") {
		return f.Conn.Exec(ctx, q, args...)
	}
	switch f.mode {
	case "lost_answer":
		if err := f.Conn.Exec(ctx, q, args...); err != nil {
			return err
		}
		return errReset
	case "not_sent":
		return errReset
	}
	return f.Conn.Exec(ctx, q, args...)
}

func TestInsertWithUnknownOutcome(t *testing.T) {
	addr := serverAddr(t)
	tests := []struct {
		name    string
		mode    string
		wantErr bool
		wantRev uint64 // stored afterwards; 0: absent
	}{
		{"answer_lost_after_it_landed", "lost_answer", false, 1},
		{"never_reached_the_server", "not_sent", true, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			db := newDatabase(t, addr)
			healthy := openStore(t, addr, db, Options{})
			defer healthy.Close()
			s, err := Open(context.Background(), &faultConn{Conn: healthy.conn, mode: tc.mode}, Options{Database: db})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			err = s.Put(context.Background(), key, checkpoint.Entry{Value: []byte("x")})
			if (err != nil) != tc.wantErr || errors.Is(err, checkpoint.ErrStale) {
				t.Fatalf("Put: err %v, want error %v (and never ErrStale)", err, tc.wantErr)
			}
			e, err := healthy.Get(context.Background(), key)
			if e.Revision != tc.wantRev || (tc.wantRev == 0) != errors.Is(err, checkpoint.ErrNotFound) {
				t.Fatalf("Get = %q rev %d, %v; want revision %d", e.Value, e.Revision, err, tc.wantRev)
			}
			if n := queryInt(t, healthy.conn, "SELECT toInt64(count()) FROM system.tables WHERE database = ? AND startsWith(name, ?)", db, lockPrefix); n != 0 {
				t.Fatalf("%d lock views left", n)
			}
		})
	}
}

func TestLockReleasedAfterContextEnded(t *testing.T) {
	addr := serverAddr(t)
	db := newDatabase(t, addr)
	s := openStore(t, addr, db, Options{})
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	err := s.locked(ctx, key.String(), func(l *lock) error {
		cancel()
		return ctx.Err()
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("locked: %v, want context.Canceled", err)
	}
	if n := queryInt(t, s.conn, "SELECT toInt64(count()) FROM system.tables WHERE database = ? AND startsWith(name, ?)", db, lockPrefix); n != 0 {
		t.Fatalf("%d lock views left", n)
	}
}

// TestRetryable: the Store's one classifier. The store's own transient
// errors, as its code makes them, are checked by TestLiveLockWaitedFor and
// TestWriteOfATakenOverLockLandsNothing.
func TestRetryable(t *testing.T) {
	ctx := context.Background()
	var s Store // Get and Put refuse invalid input before they use the connection
	_, invalidKey := s.Get(ctx, checkpoint.Key{Pipeline: "p"})
	emptyValue := s.Put(ctx, key, checkpoint.Entry{})
	closed := &Store{}
	closed.closed.Store(true)
	_, closedErr := closed.Get(ctx, key)
	ex := func(code int32) error {
		return fmt.Errorf("checkpoint: clickhouse: get %s: read: %w", key, &ch.Exception{Code: code, Message: "x"})
	}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"stale", fmt.Errorf("checkpoint: clickhouse: put %s: %w", key, checkpoint.ErrStale), false},
		{"not found", fmt.Errorf("checkpoint: clickhouse: get %s: %w", key, checkpoint.ErrNotFound), false},
		{"closed", closedErr, false},
		{"invalid key", invalidKey, false},
		{"empty value", emptyValue, false},
		{"lock held by another writer", fmt.Errorf("checkpoint: clickhouse: put %s: %w", key, chsql.Transient("lock: another writer of the key has held it for more than 30s")), true},
		{"stale although transient on the way", chsql.Transient("put: %w", checkpoint.ErrStale), false},
		{"too many parts", ex(chsql.CodeTooManyParts), true},
		{"timeout exceeded", ex(chsql.CodeTimeoutExceeded), true},
		{"unknown table", ex(chsql.CodeUnknownTable), false},
		{"syntax error", ex(62), false},
		{"connection reset", fmt.Errorf("checkpoint: clickhouse: put %s: insert: %w", key, syscall.ECONNRESET), true},
		{"connection refused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, true},
		{"canceled by the caller", fmt.Errorf("checkpoint: clickhouse: put %s: %w", key, context.Canceled), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name != "nil" && tc.err == nil {
				t.Fatal("no error to classify")
			}
			if got := s.Retryable(tc.err); got != tc.want {
				t.Fatalf("Retryable(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
