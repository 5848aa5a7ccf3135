package sinks

import (
	"context"
	"errors"
)

// ErrTableChanged marks Ensure's refusal of a table sluice created whose
// stored definition (a column's type, its kind, keys, sort or partition
// key) differs from the spec's in a way the destination cannot apply in
// place. Match it with errors.Is. A table sluice did not create is never
// refused with it.
var ErrTableChanged = errors.New("the table's stored definition differs from the spec")

// Dropper removes a table sluice created and everything the destination
// keeps of it beside its rows (versions, key states), so that Ensure
// creates it afresh from the spec. A refresh that empties a changed table
// (ErrTableChanged) drops it after the Reset, holding its lease: empty by
// then, it loses nothing. Sinks implement it.
type Dropper interface {
	Drop(ctx context.Context, table string) error
}

// Outdater tells a table sluice created that Ensure accepts but that holds
// less than a table created now would (a ClickHouse DateTime column, which
// keeps whole seconds, where a new table keeps microseconds): a refresh
// that empties it creates it anew, as for ErrTableChanged.
type Outdater interface {
	Outdated(ctx context.Context, t Table) (why string, err error)
}

// Resetter empties tables for a full refresh. Sinks implement it.
type Resetter interface {
	// Reset empties the tables (every row; for CDC targets also their hidden
	// state: key states, tombstones, the table state) and makes the ledger
	// forget the committed loads of the flows: afterwards Ledger returns none
	// of their loads committed before the reset, so their positions start
	// over. Reset is committed by one ledger entry written first; a crash
	// after it is rolled forward by Recover (or by running Reset again, which
	// is idempotent), so a reader never sees a table emptied while the ledger
	// still holds the old positions, nor old rows once the positions are gone.
	// Tables keep their schema.
	Reset(ctx context.Context, tables, flows []string) error
}
