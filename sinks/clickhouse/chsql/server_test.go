package chsql

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/sluicehq/sluice/sinks/clickhouse/chtest"
)

// open connects to the test server and creates a fresh database, dropped
// when the test ends.
func open(t *testing.T) (driver.Conn, string) {
	t.Helper()
	addr := chtest.ServerAddr(t)
	db := chtest.NewDatabase(t, addr)
	c, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, DialTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Exec(context.Background(), "CREATE DATABASE "+Quote(db)); err != nil {
		t.Fatal(err)
	}
	return c, db
}

func TestLockHolderFence(t *testing.T) {
	c, db := open(t)
	ctx := context.Background()
	engine, err := DatabaseEngine(ctx, c, db)
	if err != nil || engine == "" {
		t.Fatalf("DatabaseEngine = %q, %v", engine, err)
	}
	suffix := DropSuffix(engine)
	const name = "_sluice_testlock_1"
	if err := Lock(ctx, c, db, name, Field{"load_id", "a_2d1"}, Field{"owner", "o1"}); err != nil {
		t.Fatalf("Lock: %v", err)
	}
	if err := Lock(ctx, c, db, name, Field{"load_id", "b"}, Field{"owner", "o2"}); !IsCode(err, CodeTableAlreadyExists) {
		t.Fatalf("second Lock: %v, want code %d", err, CodeTableAlreadyExists)
	}
	vals, found, err := Holder(ctx, c, db, name, "load_id", "owner")
	if err != nil || !found || strings.Join(vals, ",") != "a_2d1,o1" {
		t.Fatalf("Holder = %q %v, %v; want the first holder", vals, found, err)
	}
	ages, err := Ages(ctx, c, db, "_sluice_", name, "_sluice_absent")
	if age, ok := ages[name]; err != nil || !ok || len(ages) != 1 || age < 0 || age > time.Minute {
		t.Fatalf("Ages = %v, %v; want %s just made", ages, err, name)
	}
	if ages, err := Ages(ctx, c, db, "_other_"); err != nil || len(ages) != 0 {
		t.Fatalf("Ages of another prefix = %v, %v", ages, err)
	}
	if err := Fence(ctx, c, db, name, suffix); err != nil {
		t.Fatalf("Fence: %v", err)
	}
	if vals, found, err := Holder(ctx, c, db, name, "load_id"); err != nil || found {
		t.Fatalf("Holder after Fence = %q %v, %v; want gone", vals, found, err)
	}
	if ages, err := Ages(ctx, c, db, "_sluice_"); err != nil || len(ages) != 0 {
		t.Fatalf("Ages after Fence = %v, %v", ages, err)
	}
	if err := Fence(ctx, c, db, name, suffix); err != nil {
		t.Fatalf("Fence of a lock already gone: %v", err)
	}
	if err := Lock(ctx, c, db, name, Field{"load_id", "b"}, Field{"owner", "o2"}); err != nil {
		t.Fatalf("Lock after Fence: %v", err)
	}
}

// slowQuery runs a query of about 1.5 s whose text holds text, and returns
// when the server lists it; done is closed when it ended.
func slowQuery(t *testing.T, c driver.Conn, db, text string) (done chan struct{}) {
	t.Helper()
	done = make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Exec(context.Background(), "SELECT sleepEachRow(0.1), '"+text+"' FROM system.numbers LIMIT 15 SETTINGS max_block_size = 1 FORMAT Null")
	}()
	for deadline := time.Now().Add(5 * time.Second); ; {
		n, err := countQueries(context.Background(), c, db, "sleepEachRow(0.1)")
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return done
		}
		if time.Now().After(deadline) {
			t.Fatal("the slow query does not show in system.processes")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestWaitQueries(t *testing.T) {
	c, db := open(t)
	ctx := context.Background()
	const name = "_sluice_testlock_2"
	t.Run("waits_for_a_query_naming_it", func(t *testing.T) {
		done := slowQuery(t, c, db, name)
		if err := WaitQueries(ctx, c, db, name); err != nil {
			t.Fatalf("WaitQueries: %v", err)
		}
		select {
		case <-done:
		case <-time.After(time.Second):
			t.Fatal("WaitQueries returned while the query naming the object still ran")
		}
	})
	t.Run("ends_with_its_context", func(t *testing.T) {
		done := slowQuery(t, c, db, name)
		defer func() { <-done }()
		wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		if err := WaitQueries(wctx, c, db, name); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitQueries: %v, want the context's deadline", err)
		}
	})
	t.Run("ignores_a_create_of_the_lock", func(t *testing.T) {
		// A query whose text is the lock's own CREATE VIEW stands for a
		// contender trying the lock.
		done := slowQuery(t, c, db, lockStmt(db, name))
		defer func() { <-done }()
		start := time.Now()
		if err := WaitQueries(ctx, c, db, name); err != nil {
			t.Fatalf("WaitQueries: %v", err)
		}
		select {
		case <-done:
			t.Fatalf("the query ended before WaitQueries returned (after %v): nothing shown", time.Since(start))
		default:
		}
	})
}
