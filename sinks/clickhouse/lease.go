package clickhouse

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
)

// Leases live in _sluice_leases, a ReplacingMergeTree(version) ordered by
// target and read with FINAL: one row per change of a target's lease
// (holder, expiry by the server's clock, version). A lease's generation
// moves on at every takeover; the version is the generation in its high 32
// bits and a renewal count below, so that a takeover's row supersedes every
// renewal of the generation before.
//
// The fence of a lease is a view, _sluice_leasefence_<hash>, naming its
// holder and generation. Every commit of a CDC target by a Sink that took
// its lease is an INSERT ... SELECT that lands only while the fence still
// names that holder and generation; a renewal is written the same way.
// Taking a lease over fences the old view (drops it and waits for every
// query naming it) before creating the new one, so once a takeover returns,
// the old holder commits nothing more, whatever its clock says.
//
// Taking over and releasing run while holding the target's lease lock, a
// view _sluice_leaselock_<hash> that CREATE VIEW makes at most one process
// hold; their row is written by an INSERT ... SELECT from the lock, so that
// a writer whose lock was taken from it as abandoned writes nothing.

const (
	// leaseLockWait bounds waiting for another process's lease lock.
	leaseLockWait = 5 * time.Second
	// leaseLockGrace is the age after which a lease lock counts as left by
	// a process that stopped while holding it (it is held for the
	// milliseconds of a takeover).
	leaseLockGrace = 10 * time.Second
	// leaseFencePrefix names the fence view of a target's lease.
	leaseFencePrefix = "_sluice_leasefence_"
)

// heldLease is a lease this sink took: its holder and generation, the
// renewals written, and whether a renewal found it taken over (its loads
// stay fenced by the generation until the lease is taken again).
type heldLease struct {
	holder     string
	generation uint64
	renewals   uint64
	lost       bool

	// On a cluster (zklease.go): the fence node and its version at the
	// takeover, and the server the target's loads and reads go through
	// ("" until one caught up with the target).
	fencePath    string
	fenceVersion int32
	server       string
}

// fenceValue is what the fence view of a lease says, as one string.
func (h heldLease) fenceValue() string {
	return encodeID(h.holder) + "_" + strconv.FormatUint(h.generation, 10)
}

func leaseLockName(table string) string {
	h := sha256.Sum256([]byte(table))
	return leaseLockPrefix + hex.EncodeToString(h[:12])
}

func leaseFenceName(table string) string {
	h := sha256.Sum256([]byte(table))
	return leaseFencePrefix + hex.EncodeToString(h[:12])
}

// leaseRow is the current lease of a target.
type leaseRow struct {
	holder  string
	left    int64 // seconds until it expires by the server's clock; <= 0: expired
	version uint64
}

func (r leaseRow) generation() uint64 { return r.version >> 32 }

// AcquireLease takes or renews the lease of a CDC target for holder until
// ttl (whole seconds, rounded up) from now by the server's clock.
// sinks.ErrLeaseHeld when another holder's lease has not expired;
// sinks.ErrLeaseLost when this sink held it and another holder took it over
// since (the next call competes afresh). Taking the lease over (rather
// than renewing it) fences the previous holder, publishes the committed
// loads of the target that it left unpublished and rereads the target's
// versions, so that the new holder reads the committed state and writes
// above it.
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
	if s.zk != nil {
		return s.acquireZK(ctx, table, holder, ttl)
	}
	secs := int64((ttl + time.Second - 1) / time.Second)
	s.mu.Lock()
	mine, held := s.leases[table]
	s.mu.Unlock()
	if held && mine.holder != holder && !mine.lost {
		return fmt.Errorf("clickhouse: lease of %s is held by %s in this process: %w", table, mine.holder, sinks.ErrLeaseHeld)
	}
	if held && mine.holder == holder && !mine.lost {
		return s.renewLease(ctx, table, mine, secs)
	}
	var gen uint64
	err := s.withLeaseLock(ctx, table, holder, func(lock string) error {
		cur, found, err := s.readLease(ctx, table)
		if err != nil {
			return err
		}
		if found && cur.holder != "" && cur.holder != holder && cur.left > 0 {
			return fmt.Errorf("clickhouse: lease of %s is held by %s for %d s more: %w", table, cur.holder, cur.left, sinks.ErrLeaseHeld)
		}
		gen = cur.generation()
		fence := leaseFenceName(table)
		if vals, ok, err := chsql.Holder(ctx, s.conn, s.opts.Database, fence, "fence"); err != nil {
			return err
		} else if ok {
			// fenceValue: the generation follows the last underscore.
			if n, err := strconv.ParseUint(vals[0][strings.LastIndexByte(vals[0], '_')+1:], 10, 64); err == nil {
				gen = max(gen, n)
			}
			if err := s.fence(ctx, fence); err != nil {
				return err
			}
		}
		gen++
		h := heldLease{holder: holder, generation: gen}
		if err := chsql.Lock(ctx, s.conn, s.opts.Database, fence, chsql.Field{Name: "fence", Value: h.fenceValue()}); err != nil {
			return fmt.Errorf("clickhouse: lease of %s: fence: %w", table, err)
		}
		return s.writeLease(ctx, table, lock, holder, holder, "now() + "+strconv.FormatInt(secs, 10), gen<<32)
	})
	if err != nil {
		return err
	}
	// The previous holder may have left committed loads unpublished, and
	// its versions are unknown to this sink.
	s.mu.Lock()
	s.leases[table] = heldLease{holder: holder, generation: gen}
	delete(s.settled, table)
	delete(s.floors, table)
	s.mu.Unlock()
	if _, err := s.cdcInfo(ctx, table); err == nil {
		if err := s.settle(ctx, table); err != nil {
			return fmt.Errorf("clickhouse: take over lease of %s: %w", table, err)
		}
	}
	s.log.Info("lease taken", "table", table, "holder", holder, "ttl", ttl, "generation", gen)
	return nil
}

// renewLease writes the next renewal of a lease this sink holds, by an
// INSERT ... SELECT from its fence, and then reads the fence: a fence that
// names another generation means the lease was taken over.
func (s *Sink) renewLease(ctx context.Context, table string, h heldLease, secs int64) error {
	fence := leaseFenceName(table)
	h.renewals++
	err := s.conn.Exec(ctx, "INSERT INTO "+s.table(leasesTable)+" (target, holder, expires, version) SELECT ?, ?, now() + "+
		strconv.FormatInt(secs, 10)+", toUInt64("+strconv.FormatUint(h.generation<<32|h.renewals&0xffffffff, 10)+") FROM "+
		s.table(fence)+" WHERE fence = ?", table, h.holder, h.fenceValue())
	if err != nil && !chsql.Gone(err) {
		return fmt.Errorf("clickhouse: renew lease of %s: %w", table, err)
	}
	vals, ok, rerr := chsql.Holder(ctx, s.conn, s.opts.Database, fence, "fence")
	if rerr != nil {
		return fmt.Errorf("clickhouse: renew lease of %s: %w", table, rerr)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !ok || vals[0] != h.fenceValue() {
		h.lost = true
		s.leases[table] = h
		return fmt.Errorf("clickhouse: lease of %s (generation %d) was taken over: %w", table, h.generation, sinks.ErrLeaseLost)
	}
	if cur, ok := s.leases[table]; ok && cur.generation == h.generation {
		s.leases[table] = h
	}
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
	if s.zk != nil {
		return s.releaseZK(table, holder)
	}
	s.mu.Lock()
	mine, held := s.leases[table]
	s.mu.Unlock()
	if !held || mine.holder != holder {
		return nil
	}
	released := false
	if !mine.lost {
		err := s.withLeaseLock(ctx, table, holder, func(lock string) error {
			fence := leaseFenceName(table)
			vals, ok, err := chsql.Holder(ctx, s.conn, s.opts.Database, fence, "fence")
			if err != nil || !ok || vals[0] != mine.fenceValue() {
				return err // taken over meanwhile
			}
			cur, _, err := s.readLease(ctx, table)
			if err != nil {
				return err
			}
			if err := s.writeLease(ctx, table, lock, holder, "", "toDateTime(0)", max(cur.version, mine.generation<<32|mine.renewals)+1); err != nil {
				return err
			}
			released = true
			return s.exec(ctx, "drop the fence of "+table, s.dropStmt(fence))
		})
		if err != nil {
			return err
		}
	}
	s.mu.Lock()
	if cur, ok := s.leases[table]; ok && cur.holder == holder && cur.generation == mine.generation {
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
