package clickhouse

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/sinktest"
)

// serverAddr returns the test server's address from SLUICE_CLICKHOUSE_ADDR.
// Without it the test fails under CI=true and is skipped otherwise.
func serverAddr(t testing.TB) string {
	t.Helper()
	addr := os.Getenv("SLUICE_CLICKHOUSE_ADDR")
	if addr != "" {
		return addr
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("SLUICE_CLICKHOUSE_ADDR is not set: start a server with `eval \"$(scripts/clickhouse-test-server start DIR)\"` (make test does)")
	}
	t.Skip("SLUICE_CLICKHOUSE_ADDR is not set (under CI=true this fails): start a server with scripts/clickhouse-test-server start DIR")
	return ""
}

// newDatabase returns a fresh database name, dropped when the test ends.
func newDatabase(t testing.TB, addr string) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	db := "sluice_test_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		c, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, DialTimeout: 5 * time.Second})
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+quote(db))
	})
	return db
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// openSink opens a sink on db, closed when the test ends.
func openSink(t testing.TB, addr, db string, mod ...func(*Options)) *Sink {
	t.Helper()
	s := dial(t, addr, db, mod...)
	t.Cleanup(func() { s.Close() })
	return s
}

// dial opens a sink on db; the caller closes it.
func dial(t testing.TB, addr, db string, mod ...func(*Options)) *Sink {
	t.Helper()
	opts := Options{Addr: []string{addr}, Database: db, Pipeline: sinktest.Pipeline, Logger: testLogger(t),
		DialTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second}
	for _, m := range mod {
		m(&opts)
	}
	s, err := Open(context.Background(), opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

// suiteOptions say what the server cannot store exactly.
func suiteOptions(s *Sink) []sinktest.Option {
	day := func(d int64) time.Time { return time.Unix(d*secondsPerDay, 0).UTC() }
	if s.feat.dateTime64 && s.feat.date32 {
		lo, hi := s.feat.dayRange(storeDate32)
		return []sinktest.Option{sinktest.TimeRange(day(lo), day(hi))}
	}
	return []sinktest.Option{sinktest.TimestampPrecision(time.Second),
		sinktest.TimeRange(time.Unix(0, 0).UTC(), time.Unix(maxDateTime, 0).UTC().Truncate(24*time.Hour))}
}

func TestConformance(t *testing.T) {
	addr := serverAddr(t)
	probe := openSink(t, addr, "default")
	sinktest.Run(t, func(t *testing.T) func() sinks.Sink {
		db := newDatabase(t, addr)
		return func() sinks.Sink { return dial(t, addr, db) }
	}, suiteOptions(probe)...)
}

func TestCDCConformance(t *testing.T) {
	addr := serverAddr(t)
	probe := openSink(t, addr, "default")
	sinktest.RunCDC(t, func(t *testing.T) func() sinks.Sink {
		db := newDatabase(t, addr)
		return func() sinks.Sink { return dial(t, addr, db) }
	}, suiteOptions(probe)...)
}
