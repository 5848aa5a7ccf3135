package clickhouse

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
)

// Recover rolls committed loads forward, removes the uncommitted loads,
// markers and locks of processes that stopped.
// Loads of live processes sharing the database are left alone, except that
// a committed load is published by whoever gets to it first (fenced, so
// never twice).
func (s *Sink) Recover(ctx context.Context) error {
	if err := s.ensureSystem(ctx); err != nil {
		return err
	}
	s.mntMu.Lock()
	defer s.mntMu.Unlock()
	s.mu.Lock()
	s.lastMnt = time.Now()
	s.mu.Unlock()
	if err := s.maintain(ctx, true); err != nil {
		return err
	}
	return s.rollResets(ctx)
}

// maybeMaintain runs the periodic maintenance at most every maintainEvery,
// unless one (such as the background cleanup) is running; it logs what
// fails rather than failing the load that triggered it.
func (s *Sink) maybeMaintain(ctx context.Context) {
	if !s.mntMu.TryLock() {
		return
	}
	defer s.mntMu.Unlock()
	s.mu.Lock()
	due := time.Since(s.lastMnt) >= maintainEvery
	if due {
		s.lastMnt = time.Now()
	}
	s.mu.Unlock()
	if !due {
		return
	}
	if err := s.maintain(ctx, false); err != nil {
		s.log.Warn("maintenance failed; retried later", "err", err)
	}
}

// loadObjects are the protocol objects of one load found in the database.
type loadObjects struct {
	enc       string
	id        string
	marker    bool
	markerAge time.Duration
	stages    map[string]time.Duration // staging table name -> age
	plists    map[string]time.Duration // partition list table name -> age (replace.go)
}

// busyLoads returns the loads this process has in flight or pending: its
// own to publish or drop, which maintenance leaves alone.
func (s *Sink) busyLoads() map[string]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	busy := make(map[string]bool, len(s.inflight)+len(s.pending))
	for enc := range s.inflight {
		busy[enc] = true
	}
	for enc := range s.pending {
		busy[enc] = true
	}
	return busy
}

// groupObjects sorts the protocol objects found in the database (name to
// age) by load, and lists the locks.
func groupObjects(ages map[string]time.Duration) (map[string]*loadObjects, []string) {
	loads := map[string]*loadObjects{}
	get := func(enc string) *loadObjects {
		lo := loads[enc]
		if lo == nil {
			lo = &loadObjects{enc: enc, stages: map[string]time.Duration{}, plists: map[string]time.Duration{}}
			loads[enc] = lo
		}
		return lo
	}
	var locks []string
	for name, age := range ages {
		if _, enc, _, ok := parseStage(name); ok {
			get(enc).stages[name] = age
		} else if enc, _, ok := parsePlist(name); ok {
			get(enc).plists[name] = age
		} else if enc, ok := parseMarker(name); ok {
			lo := get(enc)
			lo.marker, lo.markerAge = true, age
		} else if strings.HasPrefix(name, lockPrefix) && len(name) > len(lockPrefix) {
			locks = append(locks, name)
		}
	}
	return loads, locks
}

// maintain finishes what stopped processes left: committed loads are
// published (by the periodic runs only once their writer stopped or they
// are older than the grace period, so that live writers publish their
// own), uncommitted loads and locks of stopped processes are fenced and
// dropped. Callers hold s.mntMu.
func (s *Sink) maintain(ctx context.Context, force bool) error {
	if s.srv != nil {
		// What loads left is on their servers; one that is down keeps
		// its loads until it is back (a reset needs them all: maintainAll).
		return s.srv.each(ctx, false, func(ss *Sink) error {
			ss.mntMu.Lock()
			defer ss.mntMu.Unlock()
			return ss.maintain(ctx, force)
		})
	}
	grace := s.graceTime()
	if err := s.resolvePending(ctx); err != nil {
		return err
	}
	ages, err := s.objectAges(ctx)
	if err != nil {
		return err
	}
	busy := s.busyLoads()
	loads, locks := groupObjects(ages)
	var ids []string
	for enc, lo := range loads {
		if busy[enc] {
			delete(loads, enc)
			continue
		}
		id, err := decodeID(enc)
		if err != nil {
			s.log.Warn("object with an unreadable load id left alone", "load", enc, "err", err)
			delete(loads, enc)
			continue
		}
		lo.id = id
		ids = append(ids, id)
	}
	committed, err := s.committedAt(ctx, ids)
	if err != nil {
		return err
	}
	if s.zk != nil {
		byEnc := make(map[string]string, len(loads))
		for enc, lo := range loads {
			byEnc[enc] = lo.id
		}
		if err := s.zkCommitted(ctx, byEnc, committed); err != nil {
			return err
		}
	}
	alive, err := s.aliveOwners(ctx)
	if err != nil {
		return err
	}
	encs := sortedKeys(loads)
	for _, enc := range encs {
		lo := loads[enc]
		at, done := committed[lo.id]
		if done && force {
			if err := s.finishCommitted(ctx, lo); err != nil {
				return err
			}
			continue
		}
		owner := ""
		age := lo.markerAge
		if lo.marker {
			o, ok, err := s.markerOwner(ctx, enc)
			if err != nil {
				return err
			}
			if ok {
				owner = o
			}
		} else {
			age = time.Duration(1<<63 - 1)
			for _, a := range lo.stages {
				age = min(age, a)
			}
			for _, a := range lo.plists {
				age = min(age, a)
			}
		}
		if done {
			// A committed load is its writer's to publish while the writer
			// lives, for the grace period; after it, or once the writer
			// stopped, whoever gets to it first publishes it (fenced).
			if since := time.Since(at); since < grace && !s.abandoned(owner, since, alive) {
				continue
			}
			if err := s.finishCommitted(ctx, lo); err != nil {
				return err
			}
			continue
		}
		if !s.abandoned(owner, age, alive) {
			continue
		}
		// Fence first: once the marker (on a cluster, the load's node) is
		// gone the load cannot commit.
		if s.zk != nil {
			rec, err := s.zk.fenceLoad(enc)
			if err != nil {
				return err
			}
			if rec != nil && rec.Row != nil {
				if err := s.insertLedger(ctx, *rec.Row); err != nil {
					return err
				}
			}
		}
		if err := s.fence(ctx, markerName(enc)); err != nil {
			return err
		}
		again, err := s.committedAt(ctx, []string{lo.id})
		if err != nil {
			return err
		}
		if _, ok := again[lo.id]; ok {
			if err := s.finishCommitted(ctx, lo); err != nil {
				return err
			}
			continue
		}
		for _, name := range sortedKeys(lo.stages) {
			if err := s.exec(ctx, "drop staging table", s.dropStmt(name)); err != nil {
				return err
			}
		}
		for _, name := range sortedKeys(lo.plists) {
			if err := s.exec(ctx, "drop partition list", s.dropStmt(name)); err != nil {
				return err
			}
		}
		s.log.Info("uncommitted load of a stopped process removed", "load", lo.id, "staging_tables", len(lo.stages))
	}
	slices.Sort(locks)
	for _, name := range locks {
		h, ok, err := s.holder(ctx, name, true)
		if err != nil {
			return err
		}
		if !ok || busy[h.enc] {
			continue
		}
		id, derr := decodeID(h.enc)
		take := derr != nil && h.age > grace
		if derr == nil {
			at, err := s.committedAt(ctx, []string{id})
			if err != nil {
				return err
			}
			_, done := at[id]
			take = done || s.abandoned(h.owner, h.age, alive)
		}
		if take {
			if err := s.fence(ctx, name); err != nil {
				return err
			}
			s.log.Info("lock of a finished or stopped load removed", "lock", name, "load", h.enc)
		}
	}
	return nil
}

// finishCommitted publishes a committed load's staging tables, replacing
// the partitions its ledger row lists, and drops its list tables and
// marker.
func (s *Sink) finishCommitted(ctx context.Context, lo *loadObjects) error {
	tables := map[string]bool{}
	for name := range lo.stages {
		if _, _, table, ok := parseStage(name); ok {
			tables[table] = true
		}
	}
	var listed map[string][]string
	if len(tables) > 0 {
		var err error
		if listed, err = s.ledgerReplaced(ctx, lo.id); err != nil {
			return err
		}
	}
	order := sortedKeys(tables)
	sinks.PublishOrder(order)
	for _, table := range order {
		if err := s.rollForward(ctx, lo.enc, lo.id, table, listed[table]); err != nil {
			return err
		}
	}
	for _, name := range sortedKeys(lo.plists) {
		if err := s.exec(ctx, "drop partition list", s.dropStmt(name)); err != nil {
			return err
		}
	}
	// Its writer may have stopped before it wrote the heads.
	if err := s.refreshHeads(ctx, lo.id); err != nil {
		return err
	}
	if err := s.dropZKLoad(lo.enc); err != nil {
		return err
	}
	return s.exec(ctx, "drop marker", s.dropStmt(markerName(lo.enc)))
}

// markerOwner reads the owner a load's marker names; ok is false when the
// marker is gone.
func (s *Sink) markerOwner(ctx context.Context, enc string) (string, bool, error) {
	vals, found, err := chsql.Holder(ctx, s.conn, s.opts.Database, markerName(enc), "owner")
	if err != nil {
		return "", false, fmt.Errorf("clickhouse: marker of load %s: %w", enc, err)
	}
	if !found {
		return "", false, nil
	}
	return vals[0], true, nil
}

// Unpublished implements sinks.Settler: the committed loads whose staging
// tables are still there (publication drops them).
func (s *Sink) Unpublished(ctx context.Context) (int, error) {
	if s.srv != nil {
		return s.srv.unpublished(ctx)
	}
	ages, err := s.objectAges(ctx)
	if err != nil {
		return 0, err
	}
	seen := map[string]bool{}
	var ids []string
	for name := range ages {
		_, enc, _, ok := parseStage(name)
		if !ok || seen[enc] {
			continue
		}
		seen[enc] = true
		if id, err := decodeID(enc); err == nil {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return 0, nil
	}
	committed, err := s.committedAt(ctx, ids)
	if err != nil {
		return 0, err
	}
	return len(committed), nil
}
