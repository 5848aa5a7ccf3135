package chsql

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// Conn is what the two packages use of a connection for their plain
// statements; clickhouse-go's driver.Conn has it.
type Conn interface {
	Exec(ctx context.Context, query string, args ...any) error
	Query(ctx context.Context, query string, args ...any) (driver.Rows, error)
}

// MaxIdent is the longest identifier ValidIdent accepts.
const MaxIdent = 100

// ValidIdent reports whether s can name a database, table or column: ASCII
// letters, digits and underscores, not starting with a digit.
func ValidIdent(s string) bool {
	if s == "" || len(s) > MaxIdent {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// Quote quotes an identifier that ValidIdent accepted, or a name built from
// such parts.
func Quote(s string) string { return "`" + s + "`" }

// Table returns the quoted, database-qualified name of a table or view.
func Table(db, name string) string { return Quote(db) + "." + Quote(name) }

// Placeholders returns n comma-separated ?s, for IN (...).
func Placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// DatabaseEngine reads the engine of database db ("" when it does not
// exist).
func DatabaseEngine(ctx context.Context, c Conn, db string) (string, error) {
	rows, err := c.Query(ctx, "SELECT engine FROM system.databases WHERE name = ?", db)
	if err != nil {
		return "", fmt.Errorf("read database engine: %w", err)
	}
	defer rows.Close()
	var engine string
	for rows.Next() {
		if err := rows.Scan(&engine); err != nil {
			return "", fmt.Errorf("read database engine: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("read database engine: %w", err)
	}
	return engine, nil
}

// DropSuffix is what DROP TABLE takes in a database of the engine so that
// the drop waits for the running queries that use the table: " SYNC" in an
// Atomic or Replicated database; nothing in an Ordinary one (ClickHouse
// 18.16), where a drop waits anyway.
func DropSuffix(engine string) string {
	if engine == "Atomic" || engine == "Replicated" {
		return " SYNC"
	}
	return ""
}

// Drop returns the statement dropping table or view name of db if it
// exists; suffix is DropSuffix's.
func Drop(db, name, suffix string) string {
	return "DROP TABLE IF EXISTS " + Table(db, name) + suffix
}

// Sleep waits for d or until ctx ends, returning ctx's error then.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Ages returns, by name, how old the tables and views of db whose names
// start with prefix are by the server's clock (in whole seconds); only
// those of names when any are given. An object whose metadata time reads
// as zero (listed while its metadata file is being written or removed) is
// taken as just made: only a time seen is old.
func Ages(ctx context.Context, c Conn, db, prefix string, names ...string) (map[string]time.Duration, error) {
	q := "SELECT name, toInt64(toUnixTimestamp(now())), toInt64(toUnixTimestamp(metadata_modification_time)) FROM system.tables WHERE database = ? AND startsWith(name, ?)"
	args := []any{db, prefix}
	if len(names) > 0 {
		q += " AND name IN (" + Placeholders(len(names)) + ")"
		for _, n := range names {
			args = append(args, n)
		}
	}
	rows, err := c.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list objects: %w", err)
	}
	defer rows.Close()
	out := map[string]time.Duration{}
	for rows.Next() {
		var name string
		var now, made int64
		if err := rows.Scan(&name, &now, &made); err != nil {
			return nil, fmt.Errorf("list objects: %w", err)
		}
		var age int64
		if made > 0 {
			age = now - made
		}
		out[name] = time.Duration(age) * time.Second
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list objects: %w", err)
	}
	return out, nil
}

// StateTable is the one table both packages create: the destination with
// its other tables, the checkpoint store when the destination has not yet.
// Both run StateDDL, so that whichever comes first makes the same table;
// checkpoint/clickhouse/doc.go says what its rows hold.
const StateTable = "_sluice_state"

// StateDDL returns the statement creating StateTable in db when missing,
// on one server or replicated over c.
func StateDDL(db string, c Cluster) string {
	return "CREATE TABLE IF NOT EXISTS " + Table(db, StateTable) + c.OnCluster() + ` (
	key String, value String, revision UInt64, updated_at DateTime('UTC')
) ENGINE = ` + c.Engine("ReplacingMergeTree", "revision") + ` ORDER BY key`
}
