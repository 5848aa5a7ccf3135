package integration

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// destination is where a test's pipeline writes, and how the test reads it
// back: the local destination through parquet-go (and sluice show for
// sluice's own tables), ClickHouse through SQL with clickhouse-go, never
// through sluice.
type destination interface {
	// name names the destination in subtest names.
	name() string
	// yaml is the value of the spec's destination key, on one line.
	yaml() string
	// ids returns an int64 column of a target, sorted.
	ids(t testing.TB, spec, table, column string) []int64
	// count returns the number of rows of a target and the number of
	// distinct values of one of its columns.
	count(t testing.TB, spec, table, column string) (rows, distinct int64)
	// deadLetters returns the dead letters.
	deadLetters(t testing.TB, spec string) []deadLetter
	// loads returns the committed loads of the ledger.
	loads(t testing.TB, spec string) []load
	// precision is the finest time a timestamp column of the target keeps.
	precision(t testing.TB, spec, table, column string) time.Duration
}

// deadLetter is a row of _sluice_dead_letters.
type deadLetter struct {
	pipeline, flow, target, source, position, reason, err string
	payload                                               bool // not null
}

// load is a row of _sluice_loads.
type load struct {
	id                string
	rows, deadLetters int64
}

func sumRows(ls []load) int64 {
	var n int64
	for _, l := range ls {
		n += l.rows
	}
	return n
}

// destinations are the kinds every append, dead-letter and spec test runs
// against.
var destinations = []string{"local", "clickhouse"}

// forEachDestination runs test once per destination, as parallel subtests.
func forEachDestination(t *testing.T, test func(t *testing.T, d destination)) {
	for _, kind := range destinations {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			test(t, newDestination(t, kind))
		})
	}
}

func newDestination(t testing.TB, kind string) destination {
	switch kind {
	case "local":
		return localDest{}
	case "clickhouse":
		return newClickHouseDest(t, clickHouseAddr(t))
	}
	t.Fatalf("unknown destination %q", kind)
	return nil
}

// localDest is the local Parquet destination in ./data beside the spec.
type localDest struct{}

func (localDest) name() string { return "local" }
func (localDest) yaml() string { return "{local: {path: ./data}}" }

func tableDir(specPath, table string) string {
	return filepath.Join(filepath.Dir(specPath), "data", table)
}

func (localDest) ids(t testing.TB, spec, table, column string) []int64 {
	t.Helper()
	return readIDs(t, tableDir(spec, table), column)
}

func (d localDest) count(t testing.TB, spec, table, column string) (rows, distinct int64) {
	t.Helper()
	ids := d.ids(t, spec, table, column)
	for i := range ids {
		if i == 0 || ids[i] != ids[i-1] {
			distinct++
		}
	}
	return int64(len(ids)), distinct
}

func (localDest) deadLetters(t testing.TB, spec string) []deadLetter {
	t.Helper()
	var out []deadLetter
	for _, d := range jsonl(t, mustSluice(t, "show", "-f", spec, "_sluice_dead_letters", "--format", "jsonl").stdout) {
		s := func(k string) string { v, _ := d[k].(string); return v }
		out = append(out, deadLetter{pipeline: s("pipeline"), flow: s("flow"), target: s("target"), source: s("source"),
			position: s("position"), reason: s("reason"), err: s("error"), payload: d["payload"] != nil})
	}
	return out
}

func (localDest) loads(t testing.TB, spec string) []load {
	t.Helper()
	var out []load
	for _, l := range jsonl(t, mustSluice(t, "show", "-f", spec, "_sluice_loads", "--format", "jsonl").stdout) {
		id, _ := l["load_id"].(string)
		rows, _ := l["rows"].(float64)
		dls, _ := l["dead_letters"].(float64)
		out = append(out, load{id: id, rows: int64(rows), deadLetters: int64(dls)})
	}
	return out
}

// precision: Parquet timestamps keep microseconds.
func (localDest) precision(testing.TB, string, string, string) time.Duration { return time.Microsecond }

func jsonl(t testing.TB, out string) []map[string]any {
	t.Helper()
	var rows []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("jsonl line %q: %v", sc.Text(), err)
		}
		rows = append(rows, m)
	}
	return rows
}

// clickHouseAddr returns the test server's native address from
// SLUICE_CLICKHOUSE_ADDR. Without it the test fails under CI=true and is
// skipped otherwise.
func clickHouseAddr(t testing.TB) string {
	t.Helper()
	if addr := os.Getenv("SLUICE_CLICKHOUSE_ADDR"); addr != "" {
		return addr
	}
	const how = "start a server with `eval \"$(scripts/clickhouse-test-server start DIR)\"` (make test does)"
	if os.Getenv("CI") == "true" {
		t.Fatal("SLUICE_CLICKHOUSE_ADDR is not set: " + how)
	}
	t.Skip("SLUICE_CLICKHOUSE_ADDR is not set, so the ClickHouse tests skip (under CI=true they fail): " + how)
	return ""
}

// clickHouseDest is a database of its own on a ClickHouse server, read with
// clickhouse-go.
type clickHouseDest struct {
	addr, db string
	conn     driver.Conn
}

// newClickHouseDest returns a fresh database on the server at addr (sluice
// creates it), dropped when the test passes and kept, named in the log, when
// it fails.
func newClickHouseDest(t testing.TB, addr string) *clickHouseDest {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	d := &clickHouseDest{addr: addr, db: "sluice_it_" + hex.EncodeToString(b[:]), conn: openClickHouse(t, addr)}
	t.Cleanup(func() {
		defer d.conn.Close()
		if t.Failed() {
			t.Logf("ClickHouse database %s on %s kept for inspection", d.db, addr)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := d.conn.Exec(ctx, "DROP DATABASE IF EXISTS "+d.db); err != nil {
			t.Logf("drop database %s: %v", d.db, err)
		}
	})
	return d
}

// reconnect replaces the connections, which died with a restarted server.
func (d *clickHouseDest) reconnect(t testing.TB) {
	t.Helper()
	d.conn.Close()
	d.conn = openClickHouse(t, d.addr)
}

// openClickHouse opens a connection pool to the server; the caller closes
// it.
func openClickHouse(t testing.TB, addr string) driver.Conn {
	t.Helper()
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, DialTimeout: 5 * time.Second,
		ReadTimeout: 2 * time.Minute, MaxOpenConns: 4})
	if err != nil {
		t.Fatalf("connect to ClickHouse at %s: %v", addr, err)
	}
	return conn
}

func (d *clickHouseDest) name() string { return "clickhouse" }
func (d *clickHouseDest) yaml() string {
	return fmt.Sprintf("{clickhouse: {addr: [%s], database: %s}}", d.addr, d.db)
}

// exists reports whether the table exists (sluice creates the database and
// tables when it starts).
func (d *clickHouseDest) exists(t testing.TB, table string) bool {
	t.Helper()
	var n uint64
	d.queryRow(t, []any{&n}, "SELECT count() FROM system.tables WHERE database = ? AND name = ?", d.db, table)
	return n > 0
}

func (d *clickHouseDest) queryRow(t testing.TB, dest []any, query string, args ...any) {
	t.Helper()
	found := false
	d.query(t, func(r driver.Rows) error { found = true; return r.Scan(dest...) }, query, args...)
	if !found {
		t.Fatalf("%s: no row", query)
	}
}

// query runs a query and calls scan for each row. A query of system tables
// that meets a table dropped meanwhile (18.16 fails such a read with "table
// doesn't exist") is run again, so such queries must return one row.
func (d *clickHouseDest) query(t testing.TB, scan func(driver.Rows) error, query string, args ...any) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		err := d.tryQuery(scan, query, args...)
		if err == nil {
			return
		}
		var ex *clickhouse.Exception
		if attempt < 10 && strings.Contains(query, "system.") && errors.As(err, &ex) && ex.Code == 60 {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		t.Fatalf("%s: %v", query, err)
	}
}

func (d *clickHouseDest) tryQuery(scan func(driver.Rows) error, query string, args ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rows, err := d.conn.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

func (d *clickHouseDest) ids(t testing.TB, _, table, column string) []int64 {
	t.Helper()
	var out []int64
	d.query(t, func(r driver.Rows) error {
		var id int64
		err := r.Scan(&id)
		out = append(out, id)
		return err
	}, fmt.Sprintf("SELECT %s FROM %s.%s", column, d.db, table))
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func (d *clickHouseDest) count(t testing.TB, _, table, column string) (rows, distinct int64) {
	t.Helper()
	if !d.exists(t, table) {
		return 0, 0
	}
	var n, u uint64
	d.queryRow(t, []any{&n, &u}, fmt.Sprintf("SELECT count(), uniqExact(%s) FROM %s.%s", column, d.db, table))
	return int64(n), int64(u)
}

func (d *clickHouseDest) deadLetters(t testing.TB, _ string) []deadLetter {
	t.Helper()
	var out []deadLetter
	d.query(t, func(r driver.Rows) error {
		var dl deadLetter
		var payload *string
		err := r.Scan(&dl.pipeline, &dl.flow, &dl.target, &dl.source, &dl.position, &dl.reason, &dl.err, &payload)
		dl.payload = payload != nil
		out = append(out, dl)
		return err
	}, "SELECT pipeline, flow, target, source, position, reason, error, payload FROM "+d.db+"._sluice_dead_letters ORDER BY position")
	return out
}

func (d *clickHouseDest) loads(t testing.TB, _ string) []load {
	t.Helper()
	if !d.exists(t, "_sluice_loads") {
		return nil
	}
	var out []load
	d.query(t, func(r driver.Rows) error {
		var l load
		err := r.Scan(&l.id, &l.rows, &l.deadLetters)
		out = append(out, l)
		return err
	}, "SELECT load_id, rows, dead_letters FROM "+d.db+"._sluice_loads ORDER BY committed_at, committed_us, load_id")
	return out
}

// precision reads the column's type: DateTime (a table an older sluice
// created on 18.16) keeps whole seconds; DateTime64(6) and the Int64 of
// microseconds sluice creates on 18.16 keep microseconds.
func (d *clickHouseDest) precision(t testing.TB, _, table, column string) time.Duration {
	t.Helper()
	var typ string
	d.queryRow(t, []any{&typ}, "SELECT type FROM system.columns WHERE database = ? AND table = ? AND name = ?", d.db, table, column)
	if strings.HasPrefix(typ, "DateTime(") || typ == "DateTime" || strings.HasPrefix(typ, "Nullable(DateTime(") || typ == "Nullable(DateTime)" {
		return time.Second
	}
	return time.Microsecond
}

// leftovers returns the objects of the delivery protocol still in the
// database: staging tables, load markers and slot locks.
func (d *clickHouseDest) leftovers(t testing.TB) []string {
	t.Helper()
	var out []string
	d.queryRow(t, []any{&out}, "SELECT groupArray(name) FROM system.tables WHERE database = ? AND (startsWith(name, '_sluice_stage') OR startsWith(name, '_sluice_load_') OR startsWith(name, '_sluice_lock_'))", d.db)
	return out
}
