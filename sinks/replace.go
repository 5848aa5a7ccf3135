package sinks

import (
	"context"

	"github.com/sluicehq/sluice/flows/batch"
)

// PartitionLoad is a load that can replace whole partitions of an append
// target (a flow with write: replace_partitions). A sink whose append targets
// may have partition_by returns loads implementing it from Begin.
type PartitionLoad interface {
	Load
	// ReplacePartitions makes the load replace partitions of table: when it
	// commits, the rows of every partition listed in parts (one row per
	// partition: the table's partition_by columns, in order, typed as the
	// table declares them) are replaced by the rows this load writes into
	// that partition; a listed partition the load writes no row into ends up
	// empty. Rows written into partitions not listed are appended as usual.
	// It may be called several times before Commit; the lists add up.
	//
	// A reader sees each listed partition wholly old or wholly new, never
	// both nor a mix; after a crash past the commit point, Recover finishes
	// the swap. Committing the same replacement twice gives the same table.
	ReplacePartitions(ctx context.Context, table string, parts *batch.Batch) error
}
