package sinks

import (
	"context"

	"github.com/sluicehq/sluice/flows/batch"
)

// KeyScanner streams some columns of a table's logical content a piece at a
// time, where Scan returns the whole table in one batch: the runner reads
// the keys of a large CDC target with it (an SCD type 2 snapshot deletes the
// current keys its snapshot lacks) without holding the target in memory.
// Sinks may implement it; the runner falls back to Scan otherwise.
type KeyScanner interface {
	// ScanKeys calls fn with successive batches holding columns cols (in
	// that order, typed as the table declares them) of the table's rows,
	// in no particular order; when whereNull is set, only of the rows
	// whose column of that name is null (an SCD type 2 target's current
	// versions: __END_AT). fn may keep the batches. A read sees one
	// committed state of the table. ErrUnknownTable when the table is
	// missing; fn's error ends the scan and is returned as is.
	ScanKeys(ctx context.Context, table string, cols []string, whereNull string, fn func(*batch.Batch) error) error
}
