package local

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/local/fsys"
	"github.com/sluicehq/sluice/sinks/sinktest"
)

func conformanceFactory(t *testing.T) func() sinks.Sink {
	dir := t.TempDir()
	return func() sinks.Sink {
		s, err := Open(context.Background(), Options{Path: dir, Pipeline: sinktest.Pipeline, CompactInterval: -1,
			FS: fsys.NewFaulty(fsys.OS{}, nil)})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return s
	}
}

// failPublish arms a Sink of the suite to fail its next publication, as a
// failing disk would: the first swap of a table's symlink after the ledger's
// fsync (the commit point) fails with EIO, once.
var failPublish = sinktest.PublishFault(func(t *testing.T, s sinks.Sink) {
	ls := s.(*Sink)
	var committed, failed atomic.Bool
	faulty(t, ls).Set(func(op fsys.Op, path string) error {
		switch {
		case op == fsys.OpSync && path == ls.lay.ledger():
			committed.Store(true)
		case op == fsys.OpRename && committed.Load() && filepath.Dir(path) == filepath.Clean(ls.lay.root) &&
			failed.CompareAndSwap(false, true):
			return syscall.EIO
		}
		return nil
	})
})

func TestConformance(t *testing.T) {
	sinktest.Run(t, conformanceFactory, failPublish)
}

// TestConformanceWithLimits runs the suite's variant for destinations that
// store less (whole seconds, 1970 to 2106), as the ClickHouse sink will.
func TestConformanceWithLimits(t *testing.T) {
	sinktest.Run(t, conformanceFactory, failPublish,
		sinktest.TimestampPrecision(time.Second),
		sinktest.TimeRange(time.Unix(0, 0).UTC(), time.Date(2105, 12, 31, 0, 0, 0, 0, time.UTC)))
}

func TestCDCConformance(t *testing.T) {
	sinktest.RunCDC(t, conformanceFactory)
}

func TestReplaceConformance(t *testing.T) {
	sinktest.RunReplace(t, conformanceFactory, sinktest.NullablePartitions())
}
