package local

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/sinktest"
)

// crashReset resets through s and kills it at point, the nth time.
func crashReset(point string, nth int) func(t *testing.T, s sinks.Sink, tables, flows []string) {
	return func(t *testing.T, s sinks.Sink, tables, flows []string) {
		t.Helper()
		ls := s.(*Sink)
		ls.setCrash(crashAfter(point, nth))
		if err := ls.Reset(context.Background(), tables, flows); !errors.Is(err, errCrash) {
			t.Fatalf("Reset: %v, want the simulated crash at %s", err, point)
		}
	}
}

func TestResetConformance(t *testing.T) {
	sinktest.RunReset(t, conformanceFactory, sinktest.CrashReset(crashReset("reset-committed", 1)))
}

// TestResetCrash kills a reset at each step after its commit point: after
// the ledger line, with an empty version written but not swapped in, after
// the first swap (the CDC target, publishing in name order: its state not
// cleared yet), after the second.
func TestResetCrash(t *testing.T) {
	tests := []struct {
		name  string
		point string
		nth   int
	}{
		{"after the ledger line", "reset-committed", 1},
		{"before the first swap", "reset", 1},
		{"after the first swap", "reset+swapped", 1},
		{"after the second swap", "reset+swapped", 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sinktest.RunReset(t, conformanceFactory, sinktest.CrashReset(crashReset(tc.point, tc.nth)))
		})
	}
}
