package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/local/fsys"
)

// countingFS counts the bytes read from the files it opens.
type countingFS struct {
	fsys.FS
	read *atomic.Int64
}

func (c countingFS) Open(name string) (fsys.File, error) {
	f, err := c.FS.Open(name)
	if err != nil {
		return nil, err
	}
	return countingFile{File: f, read: c.read}, nil
}

type countingFile struct {
	fsys.File
	read *atomic.Int64
}

func (f countingFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	f.read.Add(int64(n))
	return n, err
}

// TestScanRowsStopsEarly checks that a scan stopped after its first rows
// (sluice show --limit 3) reads the first row group of a large table and
// not the rest, and that a scan to the end hands over what Scan returns.
func TestScanRowsStopsEarly(t *testing.T) {
	defer func(n int) { rowGroupRows = n }(rowGroupRows)
	rowGroupRows = 10_000
	ctx := context.Background()
	var read atomic.Int64
	opts := testOpts(t.TempDir())
	opts.FS = countingFS{FS: fsys.OS{}, read: &read}
	s := openTest(t, opts)
	if err := s.Ensure(ctx, []sinks.Table{ordersTable}); err != nil {
		t.Fatal(err)
	}
	const rows = 200_000
	if _, err := commitOrders(ctx, s, 0, -1, 0, rows); err != nil {
		t.Fatal(err)
	}
	var size int64
	m, err := s.current("orders")
	if err != nil {
		t.Fatal(err)
	}
	for _, fe := range m.Files {
		st, err := os.Stat(filepath.Join(s.lay.versionDir("orders", m.Version), fe.Name))
		if err != nil {
			t.Fatal(err)
		}
		size += st.Size()
	}

	enough := errors.New("enough")
	read.Store(0)
	calls, got := 0, 0
	err = s.ScanRows(ctx, "orders", sinks.RowScan{Limit: 3}, func(b *batch.Batch) error {
		calls++
		got += b.Len()
		if got >= 3 {
			return enough
		}
		return nil
	})
	if !errors.Is(err, enough) {
		t.Fatalf("ScanRows: %v, want fn's error", err)
	}
	if calls != 2 || got != rowGroupRows {
		t.Fatalf("fn called %d times with %d rows, want twice (the columns, then one row group of %d)", calls, got, rowGroupRows)
	}
	// 20 row groups: the first one and the footer are about a twentieth.
	if n := read.Load(); n*5 > size {
		t.Fatalf("read %d bytes of %d to stop after the first row group", n, size)
	}

	all := batch.New(batch.Schema{}, 0)
	if err := s.ScanRows(ctx, "orders", sinks.RowScan{}, func(b *batch.Batch) error {
		if len(all.Vectors) == 0 {
			all = batch.New(b.Schema, rows)
		}
		all.AppendBatch(b)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	whole, err := s.Scan(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if all.Len() != rows || whole.Len() != rows {
		t.Fatalf("ScanRows handed over %d rows, Scan %d, want %d", all.Len(), whole.Len(), rows)
	}
	ids := all.Column("order_id")
	for i := range rows {
		if ids.Ints[i] != whole.Column("order_id").Ints[i] {
			t.Fatalf("row %d: order %d, Scan has %d", i, ids.Ints[i], whole.Column("order_id").Ints[i])
		}
	}
}

func TestScanRowsEmptyAndMissing(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, testOpts(t.TempDir()))
	if err := s.Ensure(ctx, []sinks.Table{ordersTable}); err != nil {
		t.Fatal(err)
	}
	calls := 0
	if err := s.ScanRows(ctx, "orders", sinks.RowScan{}, func(b *batch.Batch) error {
		calls++
		if b.Len() != 0 || b.Schema.Index("order_id") < 0 || b.Schema.Index(batch.LoadIDColumn) < 0 {
			t.Fatalf("empty table: batch of %d rows, columns %v", b.Len(), b.Schema.Names())
		}
		return nil
	}); err != nil || calls != 1 {
		t.Fatalf("ScanRows of an empty table: %v, %d calls; want one, with the columns", err, calls)
	}
	err := s.ScanRows(ctx, "nope", sinks.RowScan{}, func(*batch.Batch) error { return nil })
	if !errors.Is(err, sinks.ErrUnknownTable) {
		t.Fatalf("ScanRows of a missing table: %v, want ErrUnknownTable", err)
	}
}
