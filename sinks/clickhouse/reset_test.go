package clickhouse

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/sinktest"
)

// stopResetAt resets through s and stops at point as a crash would, then
// closes s.
func stopResetAt(point string) func(t *testing.T, s sinks.Sink, tables, flows []string) {
	return func(t *testing.T, s sinks.Sink, tables, flows []string) {
		t.Helper()
		cs := s.(*Sink)
		cs.resetStop = func(p string) bool { return p == point }
		if err := cs.Reset(context.Background(), tables, flows); !errors.Is(err, errResetStopped) {
			t.Fatalf("Reset: %v, want it stopped at %s", err, point)
		}
	}
}

func TestResetConformance(t *testing.T) {
	addr := serverAddr(t)
	probe := openSink(t, addr, "default")
	opts := append(suiteOptions(probe), sinktest.CrashReset(stopResetAt("reset-committed")))
	sinktest.RunReset(t, func(t *testing.T) func() sinks.Sink {
		db := newDatabase(t, addr)
		return func() sinks.Sink { return dial(t, addr, db) }
	}, opts...)
}
