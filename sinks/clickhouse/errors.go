package clickhouse

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
)

// RangeError refuses a value that the column's ClickHouse type cannot store,
// such as a date before 1970 in a Date column of ClickHouse 18.16. It is not
// retryable: the load fails and commits nothing.
type RangeError struct {
	Table  string
	Column string
	Row    int    // row of the batch
	Value  string // the value as text
	Type   string // the column's ClickHouse type
	Range  string // what the type stores
}

func (e *RangeError) Error() string {
	return fmt.Sprintf("clickhouse: table %s column %s row %d: %s does not fit %s, which stores %s",
		e.Table, e.Column, e.Row, e.Value, e.Type, e.Range)
}

// Retryable reports whether err is worth retrying later: the server is down
// or overloaded, a query timed out, or a load met another writer's commit in
// progress. sinks.ErrStale, a value out of range, a schema mismatch or any
// other refusal are not. This is the one classifier of the sink's errors.
func (s *Sink) Retryable(err error) bool { return retryable(err) }

// retryable is chsql.Retryable (whose transient errors include the delivery
// protocol's own: a slot lock held by a live writer, a load fenced off by
// recovery, a committed load not yet published) but for what only the sink
// refuses.
func retryable(err error) bool {
	var re *RangeError
	return !errors.Is(err, sinks.ErrStale) && !errors.As(err, &re) && chsql.Retryable(err)
}
