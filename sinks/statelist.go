package sinks

import "context"

// StateLister pages through the keys that hold hidden state in a CDC
// target, so that state kept longer than tombstone_retention can be
// forgotten for keys that get no more events.
type StateLister interface {
	// StateKeys returns, in order, up to limit keys of table's committed
	// state that sort after after ("" starts at the first). The table's own
	// state (key "") is never listed.
	StateKeys(ctx context.Context, table, after string, limit int) ([]string, error)
}
