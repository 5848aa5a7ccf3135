package chsql

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// ClickHouse error codes the two packages look at.
const (
	CodeTableAlreadyExists   = 57
	CodeUnknownTable         = 60
	CodeIncompatibleColumns  = 122 // an ATTACH or REPLACE PARTITION between tables of other columns
	CodeTimeoutExceeded      = 159
	CodeTooSlow              = 160
	CodeTooManyQueries       = 202
	CodeNoFreeConnection     = 203
	CodeSocketTimeout        = 209
	CodeNetworkError         = 210
	CodeTableIsDropped       = 218
	CodeNoZooKeeper          = 225
	CodeAborted              = 236
	CodeMemoryLimit          = 241
	CodeTableIsReadOnly      = 242
	CodeNotEnoughSpace       = 243
	CodeTooManyParts         = 252
	CodeAllConnectionsTried  = 279
	CodeUnknownInsertStatus  = 319
	CodeUnfinished           = 341 // an ALTER of a replicated table that some replicas apply later
	CodeCannotAssignOptimize = 388 // an OPTIMIZE that cannot merge now, or has nothing to merge
	CodeQueryWasCancelled    = 394
	CodeCannotSchedule       = 439
	CodeDeadlockAvoided      = 473
	CodeKeeperException      = 999
	CodePocoException        = 1000
)

// retryableCodes are server errors that a later attempt of the same work
// can get past: overload, timeouts, a server shutting down or a lost
// coordinator.
var retryableCodes = map[int32]bool{
	CodeTimeoutExceeded: true, CodeTooSlow: true, CodeTooManyQueries: true, CodeNoFreeConnection: true,
	CodeSocketTimeout: true, CodeNetworkError: true, CodeNoZooKeeper: true, CodeAborted: true,
	CodeMemoryLimit: true, CodeTableIsReadOnly: true, CodeNotEnoughSpace: true, CodeTooManyParts: true,
	CodeAllConnectionsTried: true, CodeUnknownInsertStatus: true, CodeQueryWasCancelled: true,
	CodeCannotSchedule: true, CodeDeadlockAvoided: true, CodeKeeperException: true, CodePocoException: true,
}

// IsCode reports whether err is a server exception with the code.
func IsCode(err error, code int32) bool {
	var ex *clickhouse.Exception
	return errors.As(err, &ex) && ex.Code == code
}

// Gone reports whether err says a table does not exist or is being
// dropped.
func Gone(err error) bool { return IsCode(err, CodeUnknownTable) || IsCode(err, CodeTableIsDropped) }

// TransientError is a failure that a later attempt of the same work gets
// past although the server answered: a lock held by a live writer, queries
// that outlast a fence's wait.
type TransientError struct{ err error }

func (e *TransientError) Error() string { return e.err.Error() }

func (e *TransientError) Unwrap() error { return e.err }

// Transient returns a TransientError formatted as by fmt.Errorf, so that %w
// keeps the cause.
func Transient(format string, args ...any) error {
	return &TransientError{err: fmt.Errorf(format, args...)}
}

// Retryable reports whether err is worth retrying later: the server is down,
// overloaded or shutting down, a query timed out, the connection broke, or
// err is a TransientError. A cancellation by the caller and every other
// refusal are not. Each package adds what it alone knows on top
// (sinks/clickhouse/errors.go, checkpoint/clickhouse/store.go).
func Retryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var te *TransientError
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
