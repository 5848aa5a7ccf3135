package local

import (
	"context"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// A load's key states are not applied to the state file within its
// Commit: the commit queues them, and a goroutine of the Sink applies them
// once the commit released the lock, while the flow writes and prepares its
// next load. Its ledger line is the commit point either way, and the
// load's staging folder (which holds its staged states) stays until they
// are applied.
//
// Whoever needs a table's states before the goroutine applied them applies
// the queued ones itself, under the lock and in seq order: the next publish
// of the table (before its own rows), and every publish that applies states
// in the commit (Recover, GetState's catching up, Reset). Since a state
// file's "through" only grows, a load queued twice, or applied by another
// process's Recover meanwhile, is applied once. A Sink killed with states
// queued leaves them to recovery, as a crash after the commit point always
// did: GetState sees the file's "through" below the ledger's last load of
// the table and publishes first.

// stateJob is a committed load whose states of a table are still to be
// applied.
type stateJob struct {
	seq    int64
	loadID string
}

// queueStates queues jobs of table and starts the goroutine that applies
// them unless it runs. Runs under the lock.
func (s *Sink) queueStates(table string, jobs []stateJob) {
	s.statesMu.Lock()
	defer s.statesMu.Unlock()
	if s.queued == nil {
		s.queued, s.queuedLoads = map[string][]stateJob{}, map[string]int{}
	}
	s.queued[table] = append(s.queued[table], jobs...)
	for _, j := range jobs {
		s.queuedLoads[j.loadID]++
	}
	if !s.applying && !s.closed.Load() && !s.holdStates {
		s.applying = true
		s.wg.Add(1)
		go s.applyLoop(s.bg)
	}
}

// stagingQueued reports whether a load's staging folder still holds
// states to apply.
func (s *Sink) stagingQueued(loadID string) bool {
	s.statesMu.Lock()
	defer s.statesMu.Unlock()
	return s.queuedLoads[loadID] > 0
}

// applyLoop applies queued states until none is left, taking the lock for
// each round. It stops at an error, leaving the jobs queued for the next
// publish (or GetState) to apply or report.
func (s *Sink) applyLoop(ctx context.Context) {
	defer s.wg.Done()
	for {
		unlock, err := s.lock(ctx)
		if err == nil {
			err = s.applyQueued("")
			unlock()
		}
		s.statesMu.Lock()
		if err != nil || len(s.queued) == 0 {
			s.applying = false
			s.statesMu.Unlock()
			if err != nil && !s.closed.Load() {
				s.log.Warn("applying committed states failed; the next commit or read of the table retries", "err", err)
			}
			return
		}
		s.statesMu.Unlock()
	}
}

// applyQueued applies the queued states of table (of every table when
// table is ""), in seq order, and removes the staging folder of each load
// whose states are then all applied. On an error, the jobs not done stay
// queued. Runs under the lock.
func (s *Sink) applyQueued(table string) error {
	s.statesMu.Lock()
	var tables []string
	for t, jobs := range s.queued {
		if (table == "" || t == table) && len(jobs) > 0 {
			tables = append(tables, t)
		}
	}
	s.statesMu.Unlock()
	slices.Sort(tables)
	for _, t := range tables {
		s.statesMu.Lock()
		jobs := s.queued[t]
		delete(s.queued, t)
		s.statesMu.Unlock()
		done, err := s.applyJobs(t, jobs)
		if err != nil {
			s.statesMu.Lock()
			s.queued[t] = append(slices.Clone(jobs[done:]), s.queued[t]...)
			s.statesMu.Unlock()
			return err
		}
	}
	return nil
}

// applyJobs applies jobs of table in order, each unless the state file
// holds it already, and returns how many are done.
func (s *Sink) applyJobs(table string, jobs []stateJob) (int, error) {
	db, err := s.openState(table, false)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var through int64
	if err := db.View(func(tx *bolt.Tx) error { through = readThrough(tx); return nil }); err != nil {
		return 0, err
	}
	for i, j := range jobs {
		if j.seq > through {
			if _, err := applyStates(s.disk, db, j.seq, s.lay.stagedStates(j.loadID, table), s.betweenStates); err != nil {
				return i, fmt.Errorf("committed load %s (seq %d): states: %w", j.loadID, j.seq, err)
			}
			through = j.seq
		}
		s.jobDone(j)
	}
	return len(jobs), nil
}

// jobDone counts a queued load's job done, and removes its staging folder
// once none is left and every table of the load is published: a publish
// that failed after queuing the load's states left the staged files of its
// other tables for the next publish, which removes the folder then
// (publishPending removes those of loads not queued). Runs under the lock.
func (s *Sink) jobDone(j stateJob) {
	s.statesMu.Lock()
	n, queued := s.queuedLoads[j.loadID]
	if !queued {
		s.statesMu.Unlock()
		return
	}
	if n--; n <= 0 {
		delete(s.queuedLoads, j.loadID)
	} else {
		s.queuedLoads[j.loadID] = n
	}
	s.statesMu.Unlock()
	if n <= 0 && j.seq <= s.pubd {
		dir := s.lay.stagingDir(j.loadID)
		if err := s.disk.RemoveAll(dir); err != nil {
			s.log.Warn("staging folder not removed", "dir", dir, "err", err)
		}
	}
}
