package clickhouse

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
)

// Leases live in _sluice_leases, a ReplacingMergeTree(version) ordered by
// target and read with FINAL: one row per change of a target's lease
// (holder, expiry by the server's clock, version). Taking, renewing and
// releasing a lease read the current row and write the next one while
// holding the target's lease lock, a view _sluice_leaselock_<hash> that
// CREATE VIEW makes at most one process hold; the row is written by an
// INSERT ... SELECT from the lock, so that a writer whose lock was taken
// from it as abandoned writes nothing.

const (
	// leaseLockWait bounds waiting for another process's lease lock.
	leaseLockWait = 5 * time.Second
	// leaseLockGrace is the age after which a lease lock counts as left by
	// a process that stopped while holding it (it is held for the
	// milliseconds of one read and one insert).
	leaseLockGrace = 10 * time.Second
	// leaseMargin is how much earlier than the server's expiry the holder
	// stops committing: the expiry is in whole seconds of the server's
	// clock.
	leaseMargin = time.Second
)

// heldLease is a lease this sink took: its holder, and until when this
// sink commits loads of the target by its own clock.
type heldLease struct {
	holder string
	until  time.Time
}

func leaseLockName(table string) string {
	h := sha256.Sum256([]byte(table))
	return leaseLockPrefix + hex.EncodeToString(h[:12])
}

// leaseRow is the current lease of a target.
type leaseRow struct {
	holder  string
	left    int64 // seconds until it expires by the server's clock; <= 0: expired
	version uint64
}

// AcquireLease takes or renews the lease of a CDC target for holder until
// ttl (whole seconds, rounded up) from now by the server's clock;
// sinks.ErrLeaseHeld when another holder's lease has not expired. Taking
// the lease over (rather than renewing it) publishes the committed loads of
// the target that the previous holder left unpublished and rereads the
// target's versions, so that the new holder reads the committed state and
// writes above it. Loads of the target that this sink commits after the
// lease expired by its clock are refused.
func (s *Sink) AcquireLease(ctx context.Context, table, holder string, ttl time.Duration) error {
	if holder == "" || ttl <= 0 {
		return fmt.Errorf("clickhouse: lease of %s: want a holder and a positive ttl", table)
	}
	if !chsql.ValidIdent(table) {
		return fmt.Errorf("clickhouse: lease of %q: %w", table, sinks.ErrUnknownTable)
	}
	if err := s.ensureSystem(ctx); err != nil {
		return err
	}
	start := time.Now()
	secs := int64((ttl + time.Second - 1) / time.Second)
	renewal := false
	err := s.withLeaseLock(ctx, table, holder, func(lock string) error {
		cur, found, err := s.readLease(ctx, table)
		if err != nil {
			return err
		}
		if found && cur.holder != "" && cur.holder != holder && cur.left > 0 {
			return fmt.Errorf("clickhouse: lease of %s is held by %s for %d s more: %w", table, cur.holder, cur.left, sinks.ErrLeaseHeld)
		}
		s.mu.Lock()
		mine := s.leases[table].holder == holder
		s.mu.Unlock()
		renewal = found && cur.holder == holder && mine
		return s.writeLease(ctx, table, lock, holder, holder, "now() + "+strconv.FormatInt(secs, 10), cur.version+1)
	})
	if err != nil {
		return err
	}
	if !renewal {
		// The previous holder may have left committed loads unpublished,
		// and its versions are unknown to this sink.
		s.mu.Lock()
		delete(s.settled, table)
		delete(s.floors, table)
		s.mu.Unlock()
		if _, err := s.cdcInfo(ctx, table); err == nil {
			if err := s.settle(ctx, table); err != nil {
				return fmt.Errorf("clickhouse: take over lease of %s: %w", table, err)
			}
		}
		s.log.Info("lease taken", "table", table, "holder", holder, "ttl", ttl)
	}
	s.mu.Lock()
	s.leases[table] = heldLease{holder: holder, until: start.Add(time.Duration(secs)*time.Second - leaseMargin)}
	s.mu.Unlock()
	return nil
}

// ReleaseLease gives the lease of table up if holder has it.
func (s *Sink) ReleaseLease(ctx context.Context, table, holder string) error {
	if !chsql.ValidIdent(table) {
		return fmt.Errorf("clickhouse: lease of %q: %w", table, sinks.ErrUnknownTable)
	}
	if err := s.ensureSystem(ctx); err != nil {
		return err
	}
	released := false
	err := s.withLeaseLock(ctx, table, holder, func(lock string) error {
		cur, found, err := s.readLease(ctx, table)
		if err != nil || !found || cur.holder != holder {
			return err
		}
		released = true
		return s.writeLease(ctx, table, lock, holder, "", "toDateTime(0)", cur.version+1)
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	if s.leases[table].holder == holder {
		delete(s.leases, table)
		delete(s.settled, table)
	}
	s.mu.Unlock()
	if released {
		s.log.Info("lease released", "table", table, "holder", holder)
	}
	return nil
}

// withLeaseLock runs do while holding the lease lock of table. A lock older
// than leaseLockGrace is taken from its stopped holder.
func (s *Sink) withLeaseLock(ctx context.Context, table, holder string, do func(lock string) error) error {
	name := leaseLockName(table)
	owner := encodeID(holder)
	deadline := time.Now().Add(leaseLockWait)
	for {
		err := chsql.Lock(ctx, s.conn, s.opts.Database, name, chsql.Field{Name: "holder", Value: owner})
		if err == nil {
			break
		}
		if !chsql.IsCode(err, chsql.CodeTableAlreadyExists) {
			return fmt.Errorf("clickhouse: lease of %s: lock: %w", table, err)
		}
		ages, err := s.objectAges(ctx, name)
		if err != nil {
			return err
		}
		if age, ok := ages[name]; ok && age > s.leaseGrace {
			s.log.Info("lease lock of a stopped process removed", "table", table, "age", age)
			if err := s.fence(ctx, name); err != nil {
				return err
			}
			continue
		}
		if time.Now().After(deadline) {
			return chsql.Transient("clickhouse: lease of %s: another process is taking or renewing it; retry", table)
		}
		if err := chsql.Sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	err := do(name)
	if derr := s.exec(ctx, "unlock lease of "+table, s.dropStmt(name)); derr != nil && err == nil {
		err = derr
	}
	return err
}

// readLease reads the current lease row of table.
func (s *Sink) readLease(ctx context.Context, table string) (leaseRow, bool, error) {
	var r leaseRow
	rows, err := s.conn.Query(ctx, "SELECT holder, toInt64(toUnixTimestamp(expires)) - toInt64(toUnixTimestamp(now())), version FROM "+
		s.table(leasesTable)+" FINAL WHERE target = ?", table)
	if err != nil {
		return r, false, fmt.Errorf("clickhouse: read lease of %s: %w", table, err)
	}
	defer rows.Close()
	found := false
	for rows.Next() {
		if err := rows.Scan(&r.holder, &r.left, &r.version); err != nil {
			return r, false, fmt.Errorf("clickhouse: read lease of %s: %w", table, err)
		}
		found = true
	}
	if err := rows.Err(); err != nil {
		return r, false, fmt.Errorf("clickhouse: read lease of %s: %w", table, err)
	}
	return r, found, nil
}

// writeLease writes the next lease row of table, provided the lease lock
// still names locker, and checks that it landed.
func (s *Sink) writeLease(ctx context.Context, table, lock, locker, holder, expires string, version uint64) error {
	err := s.conn.Exec(ctx, "INSERT INTO "+s.table(leasesTable)+" (target, holder, expires, version) SELECT ?, ?, "+expires+
		", toUInt64("+strconv.FormatUint(version, 10)+") FROM "+s.table(lock)+" WHERE holder = ?", table, holder, encodeID(locker))
	if chsql.Gone(err) {
		return chsql.Transient("clickhouse: write lease of %s: the lease lock was taken meanwhile; retry: %v", table, err)
	}
	if err != nil {
		return fmt.Errorf("clickhouse: write lease of %s: %w", table, err)
	}
	cur, found, err := s.readLease(ctx, table)
	if err != nil {
		return err
	}
	if !found || cur.version != version || cur.holder != holder {
		return chsql.Transient("clickhouse: write lease of %s: the lease lock was taken meanwhile; retry", table)
	}
	return nil
}
