package local

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
)

func TestScanKeys(t *testing.T) {
	ctx := context.Background()
	opts := testOpts(t.TempDir())
	opts.BucketRows = 16 // many bucket files
	s := openTest(t, opts)
	if err := s.Ensure(ctx, []sinks.Table{custTable}); err != nil {
		t.Fatal(err)
	}
	var rows []cust
	var all, nullRegion []int64
	for id := int64(1); id <= 300; id++ {
		r := cust{id: id, name: "n", seq: 1}
		if id%3 != 0 {
			r.region = "eu"
		} else {
			nullRegion = append(nullRegion, id)
		}
		rows = append(rows, r)
		all = append(all, id)
	}
	if err := commitCDC(ctx, s, "cust", cdcChange{up: rows}); err != nil {
		t.Fatal(err)
	}
	// A second load removes some rows: the scan sees the current version.
	if err := commitCDC(ctx, s, "cust", cdcChange{rm: rows[:30]}); err != nil {
		t.Fatal(err)
	}
	all = all[30:]
	nullRegion = slices.DeleteFunc(nullRegion, func(id int64) bool { return id <= 30 })
	if n := len(manifestOf(t, s, "cust").Files); n < 2 {
		t.Fatalf("the table has %d files, want several", n)
	}

	tests := []struct {
		name      string
		cols      []string
		whereNull string
		want      []int64
	}{
		{name: "every row", cols: []string{"id"}, want: all},
		{name: "rows whose region is null", cols: []string{"id"}, whereNull: "region", want: nullRegion},
		{name: "two columns, filtered on one of them", cols: []string{"id", "region"}, whereNull: "region", want: nullRegion},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []int64
			err := s.ScanKeys(ctx, "cust", tc.cols, tc.whereNull, func(b *batch.Batch) error {
				if !slices.Equal(b.Schema.Names(), tc.cols) {
					t.Fatalf("batch columns %q, want %q", b.Schema.Names(), tc.cols)
				}
				got = append(got, b.Vectors[0].Ints...)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got ids %v, want %v", got, tc.want)
			}
		})
	}

	t.Run("errors", func(t *testing.T) {
		stop := errors.New("stop")
		if err := s.ScanKeys(ctx, "cust", []string{"id"}, "", func(*batch.Batch) error { return stop }); err != stop {
			t.Fatalf("fn's error: got %v, want it as is", err)
		}
		if err := s.ScanKeys(ctx, "missing", []string{"id"}, "", func(*batch.Batch) error { return nil }); !errors.Is(err, sinks.ErrUnknownTable) {
			t.Fatalf("missing table: %v, want ErrUnknownTable", err)
		}
		if err := s.ScanKeys(ctx, "cust", []string{"nope"}, "", func(*batch.Batch) error { return nil }); err == nil {
			t.Fatal("an unknown column scanned without error")
		}
	})
}
