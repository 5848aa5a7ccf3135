package clickhouse

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chtest"
	"github.com/sluicehq/sluice/sinks/sinktest"
)

func serverAddr(t testing.TB) string { t.Helper(); return chtest.ServerAddr(t) }

func newDatabase(t testing.TB, addr string) string { t.Helper(); return chtest.NewDatabase(t, addr) }

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

// dial opens a sink on db; the caller closes it. It compresses with LZ4,
// as to a remote server, although the test server is on this machine:
// the packages above test the default for a loopback address.
func dial(t testing.TB, addr, db string, mod ...func(*Options)) *Sink {
	t.Helper()
	opts := Options{Addr: []string{addr}, Database: db, Pipeline: sinktest.Pipeline, Logger: testLogger(t),
		DialTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, Compression: CompressionLZ4}
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
	}, append(suiteOptions(probe), sinktest.PublishFault(func(t *testing.T, s sinks.Sink) {
		s.(*Sink).failPublish.Store(true)
	}))...)
}

func TestCDCConformance(t *testing.T) {
	addr := serverAddr(t)
	probe := openSink(t, addr, "default")
	sinktest.RunCDC(t, func(t *testing.T) func() sinks.Sink {
		db := newDatabase(t, addr)
		return func() sinks.Sink { return dial(t, addr, db) }
	}, suiteOptions(probe)...)
}
