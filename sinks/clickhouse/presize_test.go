//go:build !race

package clickhouse

// Allocation counts are not stable under the race detector (sync.Pool
// drops what is put into it at random there).

import (
	"strings"
	"testing"

	chcolumn "github.com/ClickHouse/clickhouse-go/v2/lib/column"
)

// TestPresizeAllocations checks the point of presize: values go in without
// the column's buffers growing value by value.
func TestPresizeAllocations(t *testing.T) {
	// A presized column takes as many allocations for 40,000 values as for
	// 10,000.
	allocs := func(count, n int) float64 {
		many := make([]string, count)
		for i := range many {
			many[i] = strings.Repeat("s", 400)
		}
		return testing.AllocsPerRun(3, func() {
			col, err := chcolumn.Type("String").Column("v", nil)
			if err != nil {
				t.Fatal(err)
			}
			presize(col, len(many), n*len(many))
			if _, err := col.Append(many); err != nil {
				t.Fatal(err)
			}
		})
	}
	if small, large := allocs(10_000, 400), allocs(40_000, 400); large > small {
		t.Errorf("a presized column took %.0f allocations for 10,000 values, %.0f for 40,000: its buffers still grow", small, large)
	}
	if with, without := allocs(10_000, 400), allocs(10_000, 0); with > without-10 {
		t.Errorf("appending to a presized column took %.0f allocations, %.0f without: the buffer still grows", with, without)
	}
}
