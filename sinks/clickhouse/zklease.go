package clickhouse

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
)

// Leases of CDC targets on a cluster live in ZooKeeper, under the sink's
// root:
//
//	leases/<target>        holder, generation and expiry (the holder's clock, ms)
//	leases/<target>/fence  changed at every takeover, never by a renewal
//
// A takeover sets both nodes in one multi from the versions it read; every
// commit of a CDC target checks the fence's version it took the lease at,
// so that once a takeover returned, the previous holder commits nothing
// more, however long it was paused. The new holder then waits until the
// server its loads go through holds every committed load of the target
// (catchUp) before it reads state or writes: the previous holder may have
// published through another replica.

type zkLease struct {
	Holder     string `json:"holder"`
	Generation uint64 `json:"generation"`
	ExpiresMS  int64  `json:"expires_ms"`
}

func (c *coord) leasePath(table string) string { return c.root + "/leases/" + encodeID(table) }

// acquireZK takes or renews a lease on a cluster (AcquireLease).
func (s *Sink) acquireZK(ctx context.Context, table, holder string, ttl time.Duration) error {
	s.mu.Lock()
	mine, held := s.leases[table]
	s.mu.Unlock()
	if held && mine.holder != holder && !mine.lost {
		return fmt.Errorf("clickhouse: lease of %s is held by %s in this process: %w", table, mine.holder, sinks.ErrLeaseHeld)
	}
	h, took, err := s.zk.takeLease(table, holder, ttl, mine, held && mine.holder == holder && !mine.lost)
	if err != nil {
		if errors.Is(err, sinks.ErrLeaseLost) {
			s.mu.Lock()
			if cur, ok := s.leases[table]; ok && cur.generation == mine.generation {
				cur.lost = true
				s.leases[table] = cur
			}
			s.mu.Unlock()
		}
		return err
	}
	s.mu.Lock()
	if cur, ok := s.leases[table]; ok && !took {
		h.server = cur.server // as of now: a failure may have dropped it meanwhile
	}
	s.leases[table] = h
	s.mu.Unlock()
	if took {
		s.log.Info("lease taken", "table", table, "holder", holder, "ttl", ttl, "generation", h.generation)
	}
	if h.server != "" {
		return nil
	}
	// Taken over, or its server stopped answering: find a server that holds
	// every committed load of the target before anything reads or writes it.
	ss, err := s.srv.current(ctx)
	if err != nil {
		return err
	}
	if err := ss.catchUp(ctx, table); err != nil {
		s.srv.failed(ss.server, err)
		return err
	}
	s.mu.Lock()
	if cur, ok := s.leases[table]; ok && cur.generation == h.generation && cur.holder == holder {
		cur.server = ss.server
		s.leases[table] = cur
	}
	s.mu.Unlock()
	s.log.Info("lease's loads go through server", "table", table, "server", ss.server)
	return nil
}

// takeLease is the ZooKeeper part of acquireZK: renew is set when the
// caller holds the lease as mine.
func (c *coord) takeLease(table, holder string, ttl time.Duration, mine heldLease, renew bool) (heldLease, bool, error) {
	lp := c.leasePath(table)
	fp := lp + "/fence"
	for range 10 {
		n, err := c.get(lp)
		if err != nil {
			return heldLease{}, false, err
		}
		var cur zkLease
		if n.found {
			if err := json.Unmarshal(n.data, &cur); err != nil {
				return heldLease{}, false, fmt.Errorf("clickhouse: zookeeper lease of %s: %w", table, err)
			}
		}
		now := time.Now()
		next := zkLease{Holder: holder, Generation: cur.Generation + 1, ExpiresMS: now.Add(ttl).UnixMilli()}
		if renew {
			if !n.found || cur.Generation != mine.generation || cur.Holder != holder {
				return heldLease{}, false, fmt.Errorf("clickhouse: lease of %s (generation %d) was taken over: %w", table, mine.generation, sinks.ErrLeaseLost)
			}
			next.Generation = cur.Generation
			data, _ := json.Marshal(next)
			if _, err := c.conn.Set(lp, data, n.version); errors.Is(err, zk.ErrBadVersion) {
				continue
			} else if err != nil {
				return heldLease{}, false, zkErr("renew lease", err)
			}
			mine.renewals++
			return mine, false, nil
		}
		if n.found && cur.Holder != "" && cur.Holder != holder && cur.ExpiresMS > now.UnixMilli() {
			left := time.Duration(cur.ExpiresMS-now.UnixMilli()) * time.Millisecond
			return heldLease{}, false, fmt.Errorf("clickhouse: lease of %s is held by %s for %s more: %w", table, cur.Holder, left.Round(time.Millisecond), sinks.ErrLeaseHeld)
		}
		data, _ := json.Marshal(next)
		if !n.found {
			if err := c.ensure(c.root + "/leases"); err != nil {
				return heldLease{}, false, zkErr("create leases folder", err)
			}
			if _, err := c.conn.Create(lp, data, 0, zk.WorldACL(zk.PermAll)); errors.Is(err, zk.ErrNodeExists) {
				continue
			} else if err != nil {
				return heldLease{}, false, zkErr("create lease", err)
			}
			if err := c.ensure(fp); err != nil {
				return heldLease{}, false, zkErr("create lease fence", err)
			}
			// The lease node's creation is the takeover; the fence moves on
			// from whatever version it has, below.
			if n, err = c.get(lp); err != nil {
				return heldLease{}, false, err
			}
		}
		f, err := c.get(fp)
		if err != nil {
			return heldLease{}, false, err
		}
		if !f.found {
			if err := c.ensure(fp); err != nil {
				return heldLease{}, false, zkErr("create lease fence", err)
			}
			continue
		}
		gen := fmt.Appendf(nil, "%d", next.Generation)
		out, err := c.multi([]zkOp{
			{&zk.SetDataRequest{Path: lp, Data: data, Version: n.version}, multiStale},
			{&zk.SetDataRequest{Path: fp, Data: gen, Version: f.version}, multiStale},
		})
		if out == multiStale {
			continue // another process moved first: look again
		}
		if err != nil {
			return heldLease{}, false, err
		}
		return heldLease{holder: holder, generation: next.Generation, fencePath: fp, fenceVersion: f.version + 1}, true, nil
	}
	return heldLease{}, false, chsql.Transient("clickhouse: lease of %s: contended; retry", table)
}

// releaseZK gives a lease on a cluster up (ReleaseLease).
func (s *Sink) releaseZK(table, holder string) error {
	s.mu.Lock()
	mine, held := s.leases[table]
	s.mu.Unlock()
	if !held || mine.holder != holder {
		return nil
	}
	if !mine.lost {
		lp := s.zk.leasePath(table)
		for range 10 {
			n, err := s.zk.get(lp)
			if err != nil {
				return err
			}
			var cur zkLease
			if n.found {
				if err := json.Unmarshal(n.data, &cur); err != nil {
					return fmt.Errorf("clickhouse: zookeeper lease of %s: %w", table, err)
				}
			}
			if !n.found || cur.Holder != holder || cur.Generation != mine.generation {
				break // taken over meanwhile
			}
			data, _ := json.Marshal(zkLease{Generation: cur.Generation})
			if _, err := s.zk.conn.Set(lp, data, n.version); errors.Is(err, zk.ErrBadVersion) {
				continue
			} else if err != nil {
				return zkErr("release lease", err)
			}
			s.log.Info("lease released", "table", table, "holder", holder)
			break
		}
	}
	s.mu.Lock()
	if cur, ok := s.leases[table]; ok && cur.holder == holder && cur.generation == mine.generation {
		delete(s.leases, table)
	}
	s.mu.Unlock()
	return nil
}

// catchUp makes this server's sink ready to write a CDC target whose lease
// its parent just took: the committed loads of the target that its
// previous holders left unpublished are published (those staged here) or
// waited for (staged elsewhere), and this server has fetched every part
// the other replicas published. Until then a retryable error says what it
// waits for.
func (s *Sink) catchUp(ctx context.Context, table string) error {
	s.mu.Lock()
	delete(s.settled, table)
	delete(s.floors, table)
	s.mu.Unlock()
	if _, err := s.cdcInfo(ctx, table); err != nil {
		if errors.Is(err, sinks.ErrUnknownTable) {
			return nil // not created yet: nothing to catch up with
		}
		return err
	}
	if err := s.settle(ctx, table); err != nil {
		return err
	}
	if err := s.zk.allPublished(table, "take over"); err != nil {
		return err
	}
	// A replica copies a new log entry (the last attach) within moments:
	// wait that long before saying it is behind.
	deadline := time.Now().Add(catchUpWait)
	for {
		err := s.replicated(ctx, physName(table), s.stateLocal())
		var te *chsql.TransientError
		if err == nil || !errors.As(err, &te) || time.Now().After(deadline) {
			return err
		}
		if err := chsql.Sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// allPublished returns a retryable error naming the first committed load
// of table that is not published yet (its node is there until it is).
func (c *coord) allPublished(table, what string) error {
	names, _, err := c.conn.Children(c.root + "/loads")
	if err != nil {
		return zkErr("list loads", err)
	}
	slices.Sort(names)
	for _, enc := range names {
		rec, n, err := c.readLoad(enc)
		if err != nil {
			return err
		}
		if n.found && rec.State == zkCommitted && slices.Contains(rec.Targets, table) {
			return chsql.Transient("clickhouse: %s %s: its committed load %s is not published yet (staged on %s); waiting for that server's recovery", what, table, enc, rec.Server)
		}
	}
	return nil
}

// catchUpWait bounds how long catchUp waits for a replica that is behind
// before it returns the retryable error saying so.
const catchUpWait = 5 * time.Second

// replicated returns a retryable error until this server's replicas of
// the tables have copied every entry of their replication log and fetched
// every part it names (merges may be pending: they change no content).
// The log and the replica's pointer into it are read from ZooKeeper by the
// sink's own session, after every commit it saw: system.replicas says
// log_max_index 0 both for an empty log and for one entry.
func (s *Sink) replicated(ctx context.Context, tables ...string) error {
	args := []any{s.opts.Database}
	for _, t := range tables {
		args = append(args, t)
	}
	rows, err := s.conn.Query(ctx, "SELECT table, zookeeper_path, replica_path, is_readonly FROM system.replicas WHERE database = ? AND table IN ("+
		chsql.Placeholders(len(tables))+")", args...)
	if err != nil {
		return fmt.Errorf("clickhouse: read replication of %v: %w", tables, err)
	}
	type replica struct {
		table, zkPath, path string
		readOnly            uint8
	}
	var reps []replica
	for rows.Next() {
		var r replica
		if err := rows.Scan(&r.table, &r.zkPath, &r.path, &r.readOnly); err != nil {
			rows.Close()
			return fmt.Errorf("clickhouse: read replication of %v: %w", tables, err)
		}
		reps = append(reps, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("clickhouse: read replication of %v: %w", tables, err)
	}
	var behind []string
	for _, r := range reps {
		if r.readOnly != 0 {
			behind = append(behind, r.table+" is read-only (no ZooKeeper session)")
			continue
		}
		entries, _, err := s.zk.conn.Children(r.zkPath + "/log")
		if errors.Is(err, zk.ErrNoNode) {
			// The servers' ZooKeeper has a root of its own (a chroot):
			// their paths are not this session's.
			return fmt.Errorf("clickhouse: the replication log of %s is not at %s/log in zookeeper %v: give zookeeper the servers' own ensemble, without a root of its own", r.table, r.zkPath, s.opts.ZooKeeper)
		}
		if err != nil {
			return zkErr("read the replication log of "+r.table, err)
		}
		top := int64(-1)
		for _, e := range entries {
			if n, err := strconv.ParseInt(strings.TrimPrefix(e, "log-"), 10, 64); err == nil {
				top = max(top, n)
			}
		}
		if top < 0 {
			continue
		}
		ptr, err := s.zk.get(r.path + "/log_pointer")
		if err != nil {
			return err
		}
		at, perr := strconv.ParseInt(strings.TrimSpace(string(ptr.data)), 10, 64)
		if !ptr.found || perr != nil || at <= top {
			behind = append(behind, fmt.Sprintf("%s (log copied to %q of %d)", r.table, ptr.data, top+1))
		}
	}
	n, err := s.queryUint(ctx, "SELECT count() FROM system.replication_queue WHERE database = ? AND table IN ("+chsql.Placeholders(len(tables))+
		") AND type NOT IN ('MERGE_PARTS', 'MUTATE_PART')", args...)
	if err != nil {
		return fmt.Errorf("clickhouse: read replication queue of %v: %w", tables, err)
	}
	if n > 0 {
		behind = append(behind, fmt.Sprintf("%d parts to fetch", n))
	}
	if len(behind) > 0 {
		return chsql.Transient("clickhouse: server %s has not replicated everything of %s yet: %s; waiting", s.server, strings.Join(tables, ", "), strings.Join(behind, "; "))
	}
	return nil
}

// heldLeases returns the leases this sink holds.
func (s *Sink) heldLeases() map[string]heldLease {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.leases) == 0 {
		return nil
	}
	return maps.Clone(s.leases)
}

// heldLease returns the lease of a table this sink holds.
func (s *Sink) heldLease(table string) (heldLease, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.leases[table]
	return h, ok && !h.lost
}

// forgetLeaseServer drops the server of a lease that stopped answering: the
// next renewal catches another one up.
func (s *Sink) forgetLeaseServer(table, server string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, ok := s.leases[table]; ok && h.server == server {
		h.server = ""
		s.leases[table] = h
	}
}

// cdcServer returns the sink of the server a held lease's target is read
// and written through on a cluster; nil elsewhere, or when no lease of
// the table is held (reads then go to whichever server answers). While
// the lease has no server caught up (its server stopped answering), its
// state is read nowhere: a retryable error says so.
func (s *Sink) cdcServer(ctx context.Context, table string) (*Sink, error) {
	if s.srv == nil {
		return nil, nil
	}
	h, ok := s.heldLease(table)
	if !ok {
		return nil, nil
	}
	if h.server == "" {
		return nil, chsql.Transient("clickhouse: %s: no server is caught up with the target under its lease yet (the next renewal catches one up); retry", table)
	}
	ss, err := s.srv.get(ctx, h.server)
	if err != nil {
		s.forgetLeaseServer(table, h.server)
		return nil, err
	}
	return ss, nil
}
