package clickhouse

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/sluicehq/sluice/sinks"
)

// ClickHouse error codes the sink looks at.
const (
	codeUnknownTable         = 60
	codeTableIsDropped       = 218
	codeTableAlreadyExists   = 57
	codeTimeoutExceeded      = 159
	codeTooSlow              = 160
	codeTooManyQueries       = 202
	codeNoFreeConnection     = 203
	codeSocketTimeout        = 209
	codeNetworkError         = 210
	codeNoZooKeeper          = 225
	codeAborted              = 236
	codeMemoryLimit          = 241
	codeTableIsReadOnly      = 242
	codeNotEnoughSpace       = 243
	codeTooManyParts         = 252
	codeAllConnectionsTried  = 279
	codeUnknownInsertStatus  = 319
	codeCannotAssignOptimize = 388 // an OPTIMIZE that cannot merge now, or has nothing to merge
	codeQueryWasCancelled    = 394
	codeCannotSchedule       = 439
	codeDeadlockAvoided      = 473
	codeKeeperException      = 999
	codePocoException        = 1000
)

// retryableCodes are server errors that a later attempt of the same work
// can get past: overload, timeouts, a server shutting down or a lost
// coordinator.
var retryableCodes = map[int32]bool{
	codeTimeoutExceeded: true, codeTooSlow: true, codeTooManyQueries: true, codeNoFreeConnection: true,
	codeSocketTimeout: true, codeNetworkError: true, codeNoZooKeeper: true, codeAborted: true,
	codeMemoryLimit: true, codeTableIsReadOnly: true, codeNotEnoughSpace: true, codeTooManyParts: true,
	codeAllConnectionsTried: true, codeUnknownInsertStatus: true, codeQueryWasCancelled: true,
	codeCannotSchedule: true, codeDeadlockAvoided: true, codeKeeperException: true, codePocoException: true,
}

// transientError is a failure of the delivery protocol itself that a later
// attempt gets past: a slot lock held by a live writer, a load fenced off by
// recovery, a committed load not yet published.
type transientError struct{ msg string }

func (e *transientError) Error() string { return e.msg }

func transient(format string, args ...any) error {
	return &transientError{msg: fmt.Sprintf(format, args...)}
}

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

func retryable(err error) bool {
	if err == nil || errors.Is(err, sinks.ErrStale) || errors.Is(err, context.Canceled) {
		return false
	}
	var re *RangeError
	if errors.As(err, &re) {
		return false
	}
	var te *transientError
	if errors.As(err, &te) {
		return true
	}
	var ex *clickhouse.Exception
	if errors.As(err, &ex) {
		return retryableCodes[ex.Code]
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	for _, target := range []error{io.EOF, io.ErrUnexpectedEOF, syscall.ECONNREFUSED, syscall.ECONNRESET,
		syscall.EPIPE, syscall.ECONNABORTED, driver.ErrBadConn, clickhouse.ErrAcquireConnTimeout,
		clickhouse.ErrConnectionClosed} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// gone reports whether err says a table does not exist or is being
// dropped.
func gone(err error) bool { return isCode(err, codeUnknownTable) || isCode(err, codeTableIsDropped) }

// isCode reports whether err is a server exception with the code.
func isCode(err error, code int32) bool {
	var ex *clickhouse.Exception
	return errors.As(err, &ex) && ex.Code == code
}
