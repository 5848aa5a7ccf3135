package sinks

import "context"

// CDCCompactor is a sink whose CDC targets keep rows that their logical
// content no longer shows, such as a marker row for every removed row and
// removed key state in ClickHouse, until a compaction drops them.
type CDCCompactor interface {
	// CompactCDC compacts table when such rows make up a tenth or more of
	// what it stores, and returns how many it dropped (0: it did not
	// compact). Loads of the table may run meanwhile.
	CompactCDC(ctx context.Context, table string) (int64, error)
}
