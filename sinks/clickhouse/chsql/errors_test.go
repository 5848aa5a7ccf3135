package chsql

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2"
)

func TestRetryable(t *testing.T) {
	ex := func(code int32) error {
		return fmt.Errorf("insert: %w", &clickhouse.Exception{Code: code, Message: "x"})
	}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"transient", Transient("lock held by a live writer"), true},
		{"transient wrapping a refusal", Transient("waited: %w", errors.New("bad")), true},
		{"transient after the caller canceled", Transient("waited: %w", context.Canceled), false},
		{"too many parts", ex(CodeTooManyParts), true},
		{"timeout exceeded", ex(CodeTimeoutExceeded), true},
		{"memory limit", ex(CodeMemoryLimit), true},
		{"unknown insert status", ex(CodeUnknownInsertStatus), true},
		{"unknown table", ex(CodeUnknownTable), false},
		{"table exists", ex(CodeTableAlreadyExists), false},
		{"syntax error", ex(62), false},
		{"connection refused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, true},
		{"connection reset", fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{"unexpected EOF", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{"pool exhausted", clickhouse.ErrAcquireConnTimeout, true},
		{"deadline exceeded", fmt.Errorf("x: %w", context.DeadlineExceeded), true},
		{"canceled by the caller", fmt.Errorf("x: %w", context.Canceled), false},
		{"plain error", errors.New("batch has columns a, b"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Retryable(tc.err); got != tc.want {
				t.Fatalf("Retryable(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestTransientKeepsItsCause(t *testing.T) {
	cause := &clickhouse.Exception{Code: CodeUnknownTable}
	err := fmt.Errorf("lock: %w", Transient("read %s: %w", "x", cause))
	if want := "lock: read x: " + cause.Error(); err.Error() != want {
		t.Fatalf("%q, want %q", err, want)
	}
	var te *TransientError
	if !errors.As(err, &te) || !Gone(err) {
		t.Fatalf("%v: want a TransientError wrapping an unknown table", err)
	}
}

func TestIsCode(t *testing.T) {
	err := fmt.Errorf("drop: %w", &clickhouse.Exception{Code: CodeTableIsDropped})
	if !IsCode(err, CodeTableIsDropped) || IsCode(err, CodeUnknownTable) || !Gone(err) {
		t.Fatalf("IsCode/Gone of %v", err)
	}
	if IsCode(errors.New("x"), CodeTableIsDropped) || Gone(nil) {
		t.Fatal("a plain error or nil has a code")
	}
}
