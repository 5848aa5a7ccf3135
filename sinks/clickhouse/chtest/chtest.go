// Package chtest gives tests a ClickHouse test server: its address from
// SLUICE_CLICKHOUSE_ADDR (set by `make test`, which starts one with
// scripts/clickhouse-test-server) and fresh databases dropped afterwards.
// Without the address a test fails under CI=true and is skipped otherwise.
// Tests that need a replicated or sharded cluster start one with
// scripts/clickhouse-test-cluster through StartCluster or SharedCluster.
package chtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
)

// ServerAddr returns the test server's address from SLUICE_CLICKHOUSE_ADDR.
// Without it the test fails under CI=true and is skipped otherwise.
func ServerAddr(t testing.TB) string {
	t.Helper()
	addr := os.Getenv("SLUICE_CLICKHOUSE_ADDR")
	if addr != "" {
		return addr
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("SLUICE_CLICKHOUSE_ADDR is not set: start a server with `eval \"$(scripts/clickhouse-test-server start DIR)\"` (make test does)")
	}
	t.Skip("SLUICE_CLICKHOUSE_ADDR is not set (under CI=true this fails): start a server with scripts/clickhouse-test-server start DIR")
	return ""
}

// NewDatabase returns a fresh database name on the server at addr, dropped
// when the test ends.
func NewDatabase(t testing.TB, addr string) string {
	t.Helper()
	db := newName(t)
	t.Cleanup(func() {
		c, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, DialTimeout: 5 * time.Second})
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS `"+db+"`")
	})
	return db
}

// newName returns a database name no other test uses.
func newName(t testing.TB) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return "sluice_test_" + hex.EncodeToString(b[:])
}
