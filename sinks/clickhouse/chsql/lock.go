package chsql

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Field is one column of a lock view's row, which names the holder. The
// value is written into the statement, so it may hold ASCII letters, digits
// and underscores only (an encoded id, a hex token), and may be empty.
type Field struct{ Name, Value string }

// lockStmt is how every lock view is created; WaitQueries knows it.
func lockStmt(db, name string) string { return "CREATE VIEW " + Table(db, name) + " AS SELECT " }

// Lock creates the view name of db whose one row is holder. It fails with
// CodeTableAlreadyExists while the view exists, so at most one caller holds
// it until it is dropped. The error is the server's, unwrapped, for the
// caller to name the lock.
func Lock(ctx context.Context, c Conn, db, name string, holder ...Field) error {
	if len(holder) == 0 {
		return fmt.Errorf("lock %s: no holder", name)
	}
	var b strings.Builder
	b.WriteString(lockStmt(db, name))
	for i, f := range holder {
		if !ValidIdent(f.Name) || !plain(f.Value) {
			return fmt.Errorf("lock %s: holder %s = %q: use letters, digits and underscores", name, f.Name, f.Value)
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("'" + f.Value + "' AS " + Quote(f.Name))
	}
	return c.Exec(ctx, b.String())
}

// plain reports whether s holds ASCII letters, digits and underscores only.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_') {
			return false
		}
	}
	return true
}

// Holder reads the columns cols of the lock view name's row; found is false
// when the view is gone or being dropped (also when that shows only while
// the row is read).
func Holder(ctx context.Context, c Conn, db, name string, cols ...string) (vals []string, found bool, err error) {
	quoted := make([]string, len(cols))
	for i, col := range cols {
		quoted[i] = Quote(col)
	}
	rows, err := c.Query(ctx, "SELECT "+strings.Join(quoted, ", ")+" FROM "+Table(db, name))
	if Gone(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read %s: %w", name, err)
	}
	defer rows.Close()
	vals = make([]string, len(cols))
	dst := make([]any, len(cols))
	for i := range vals {
		dst[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(dst...); err != nil {
			return nil, false, fmt.Errorf("read %s: %w", name, err)
		}
		found = true
	}
	if err := rows.Err(); err != nil {
		if Gone(err) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("read %s: %w", name, err)
	}
	if !found {
		return nil, false, nil
	}
	return vals, true, nil
}

// Fence drops the view or table name of db and waits until no running
// query names it (WaitQueries), so that whatever its holder was doing with
// it has either finished or will fail. suffix is DropSuffix's.
func Fence(ctx context.Context, c Conn, db, name, suffix string) error {
	if err := c.Exec(ctx, Drop(db, name, suffix)); err != nil {
		return fmt.Errorf("drop %s: %w", name, err)
	}
	return WaitQueries(ctx, c, db, name)
}

const (
	// waitPoll is how often WaitQueries looks: a fence stands between a
	// writer and its next step, and one look is a cheap read of
	// system.processes.
	waitPoll = 20 * time.Millisecond
	// waitLimit bounds WaitQueries; a query running longer is the server's
	// trouble, and the caller retries.
	waitLimit = 2 * time.Minute
)

// WaitQueries waits until no running query mentions name, other than its
// own looks and a CREATE VIEW of the lock name itself (lockStmt). Dropping
// or renaming a table waits for the queries using it in an Ordinary
// database (ClickHouse 18.16), not in an Atomic one; this makes both behave
// alike, and covers a query whose client is gone.
//
// A CREATE VIEW of the same name does not use the old object: it either
// fails, as the view still exists, or creates the lock anew after the drop,
// which waiting cannot prevent. Counting it would let contenders that try
// the lock every few milliseconds keep a fence waiting until its limit; any
// other statement naming name (an INSERT ... SELECT from the lock, a read,
// a CREATE VIEW that selects from it) is waited for. After waitLimit it
// returns a TransientError.
func WaitQueries(ctx context.Context, c Conn, db, name string) error {
	deadline := time.Now().Add(waitLimit)
	for {
		n, err := countQueries(ctx, c, db, name)
		if err != nil {
			if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
				// The read's deadline is the context's: it may fire a
				// moment before the context's own timer does.
				<-ctx.Done()
			}
			if ctx.Err() != nil {
				// The driver turns the context's deadline into the
				// connection's: its read times out first, as an I/O error.
				return fmt.Errorf("wait for queries on %s: %w (%v)", name, ctx.Err(), err)
			}
			return err
		}
		if n == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return Transient("%d queries still use %s", n, name)
		}
		if err := Sleep(ctx, waitPoll); err != nil {
			return err
		}
	}
}

func countQueries(ctx context.Context, c Conn, db, name string) (uint64, error) {
	rows, err := c.Query(ctx, "SELECT count() FROM system.processes WHERE position(query, ?) > 0 AND position(query, 'system.processes') = 0 AND position(query, ?) = 0",
		name, lockStmt(db, name))
	if err != nil {
		return 0, fmt.Errorf("wait for queries on %s: %w", name, err)
	}
	defer rows.Close()
	var n uint64
	for rows.Next() {
		if err := rows.Scan(&n); err != nil {
			return 0, fmt.Errorf("wait for queries on %s: %w", name, err)
		}
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("wait for queries on %s: %w", name, err)
	}
	return n, nil
}
