package local

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/sinktest"
)

// crashReset resets through s, kills it the nth time it reaches moment at
// and abandons it.
func crashReset(at moment, nth int) func(t *testing.T, s sinks.Sink, tables, flows []string) {
	return func(t *testing.T, s sinks.Sink, tables, flows []string) {
		t.Helper()
		ls := s.(*Sink)
		cr := crash(t, ls, at, nth)
		expectCrash(t, cr, "Reset", ls.Reset(context.Background(), tables, flows))
		ls.kill()
	}
}

func TestResetConformance(t *testing.T) {
	sinktest.RunReset(t, conformanceFactory, sinktest.CrashReset(crashReset(afterLedgerAppend, 1)))
}

// TestResetCrash kills a reset at each step after its commit point: after
// the ledger line, with an empty version written but not swapped in, after
// the first swap (the CDC target, publishing in name order: its state not
// cleared yet), after the second.
func TestResetCrash(t *testing.T) {
	tests := []struct {
		name string
		at   moment
		nth  int
	}{
		{"after the ledger line", afterLedgerAppend, 1},
		{"before the first swap", beforeSwap, 1},
		{"after the first swap", afterSwap, 1},
		{"after the second swap", afterSwap, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sinktest.RunReset(t, conformanceFactory, sinktest.CrashReset(crashReset(tc.at, tc.nth)))
		})
	}
}
