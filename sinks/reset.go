package sinks

import "context"

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
