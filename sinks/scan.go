package sinks

import (
	"bytes"
	"cmp"
	"context"
	"strings"

	"github.com/sluicehq/sluice/flows/batch"
)

// KeyScanner streams some columns of a table's logical content a piece at a
// time, where Scan returns the whole table in one batch: the runner reads
// the keys of a large CDC target with it (an SCD type 2 snapshot deletes the
// current keys its snapshot lacks) without holding the target in memory.
// Sinks may implement it; the runner falls back to Scan otherwise.
type KeyScanner interface {
	// ScanKeys calls fn with successive batches holding columns cols (in
	// that order, typed as the table declares them) of the table's rows
	// that pass where (every row for the zero KeyFilter), in no particular
	// order. fn may keep the batches. A read sees one committed state of
	// the table. ErrUnknownTable when the table is missing; fn's error ends
	// the scan and is returned as is.
	ScanKeys(ctx context.Context, table string, cols []string, where KeyFilter, fn func(*batch.Batch) error) error
}

// KeyFilter selects the rows of a key scan: those whose column Column is
// null, or, when After is set, greater than After's value. An SCD type 2
// snapshot at version V needs, of its target, the versions open at V or
// after it: __END_AT null or after V (docs/cdc.md, snapshots). The zero
// value selects every row.
//
// A destination evaluates the filter where it reads, so as not to read the
// rows that fail it; one that cannot evaluate it for a column's type (or
// value) may hand those rows over too, and callers check Pass.
type KeyFilter struct {
	Column string
	// After, when not nil, holds one value (not null) of Column's type.
	After *batch.Vector
}

// Pass reports whether row i of v, a vector of the filter's column, passes.
func (f KeyFilter) Pass(v *batch.Vector, i int) bool {
	if f.Column == "" || v.IsNull(i) {
		return true
	}
	return f.After != nil && CompareAt(v, i, f.After, 0) > 0
}

// CompareAt compares row i of a with row j of b, two non-null values of one
// scalar kind: -1, 0 or +1. Decimals compare their unscaled values (one
// scale).
func CompareAt(a *batch.Vector, i int, b *batch.Vector, j int) int {
	switch a.Type.Kind {
	case batch.KindInt64, batch.KindTimestamp, batch.KindDate:
		return cmp.Compare(a.Ints[i], b.Ints[j])
	case batch.KindFloat64:
		return cmp.Compare(a.Floats[i], b.Floats[j])
	case batch.KindBool:
		x, y := a.Bools[i], b.Bools[j]
		switch {
		case x == y:
			return 0
		case y:
			return -1
		}
		return 1
	case batch.KindDecimal:
		return a.Decs[i].Cmp(b.Decs[j])
	case batch.KindString:
		return strings.Compare(a.Strs[i], b.Strs[j])
	case batch.KindBytes:
		return bytes.Compare(a.Bytes[i], b.Bytes[j])
	}
	return 0
}

// RowScanner streams a table's logical content a piece at a time, where
// Scan returns it in one batch: `sluice show` reads a large table with it
// and stops once it has the rows it prints (docs/operations.md). Sinks may
// implement it; callers fall back to Scan otherwise.
type RowScanner interface {
	// ScanRows calls fn with an empty batch of Scan's columns before it
	// reads any row (a caller checks what it needs of them), then with
	// successive batches of the table's rows in the order the destination
	// stores them (a local table's files and row groups in order). fn must
	// not keep a batch past its return. fn's error ends the scan, which
	// stops reading, and is returned as is. ErrUnknownTable when the table
	// is missing.
	ScanRows(ctx context.Context, table string, opts RowScan, fn func(*batch.Batch) error) error
}

// RowScan narrows a ScanRows. Both fields are hints: a destination may hand
// over more rows than they select, and the caller filters and counts.
type RowScan struct {
	// Where is an expression of the flows' rules dialect over the table's
	// columns (docs/schema.md): the destination may leave out rows it can
	// tell fail it.
	Where string
	// Limit, when positive, is how many rows passing Where the caller wants
	// at most: the destination may stop after handing over that many.
	Limit int
}

// RowCounter tells how many rows a table holds when the destination knows
// without reading them (`sluice show` lists the tables with it). ok is
// false when it does not; ErrUnknownTable when the table is missing.
type RowCounter interface {
	CountRows(ctx context.Context, table string) (rows int64, ok bool, err error)
}
