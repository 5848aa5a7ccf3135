package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/gofrs/flock"

	"github.com/sluicehq/sluice/sinks"
)

// A lease (of a CDC target, or of a files flow's files) is a record,
// _sluice/leases/<name>.json, read and written under the destination lock:
// its holder, a generation that moves on at every takeover, and an expiry
// by this machine's clock. Commits check the generation under the same
// lock, so a Sink whose lease was taken over commits nothing more of the
// target (sinks.ErrLeaseLost), whether it was dead, paused or merely slow.
//
// A holder is alive while some process holds an flock on
// _sluice/leases/holders/<holder>: a Sink takes it with its first lease of
// the holder and keeps it while it holds any. A lease whose holder is not
// alive is taken over at once (a killed process frees its flocks); one
// whose holder is alive but did not renew it before its expiry (a paused
// process) is taken over once it expired.

// lease is a lease this Sink holds.
type lease struct {
	holder     string
	generation int64
}

// leaseRecord is the record of a lease.
type leaseRecord struct {
	Holder     string    `json:"holder"` // "" when released
	Generation int64     `json:"generation"`
	Expires    time.Time `json:"expires"` // zero: never by time
	PID        int       `json:"pid"`
	Host       string    `json:"host"`
	Since      time.Time `json:"since"` // when its holder took it
}

var _ sinks.Leaser = (*Sink)(nil)

// AcquireLease takes or renews the lease of a CDC target (or any name a
// table could have) for holder until ttl from now; ttl <= 0 means until
// released or the holder dies. sinks.ErrLeaseHeld when another holder has
// it and is alive and within its expiry, or when another holder of this
// Sink has it; sinks.ErrLeaseLost when this Sink held it for holder and
// another holder took it over since.
func (s *Sink) AcquireLease(ctx context.Context, table, holder string, ttl time.Duration) error {
	if s.closed.Load() {
		return errClosed
	}
	if !tableName.MatchString(table) || holder == "" {
		return fmt.Errorf("local: lease %q of %q: want a valid table name and a holder", table, holder)
	}
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	mine, held := s.leases[table]
	if held && mine.holder != holder {
		return fmt.Errorf("local: lease of %s: %w (holder %s)", table, sinks.ErrLeaseHeld, mine.holder)
	}
	unlock, err := s.lock(ctx)
	if err != nil {
		return fmt.Errorf("local: lease of %s: %w", table, err)
	}
	defer unlock()
	rec, err := s.readLease(table)
	if err != nil {
		return err
	}
	now := time.Now()
	if held {
		if rec.Holder != holder || rec.Generation != mine.generation {
			delete(s.leases, table)
			s.dropHolder(holder)
			return fmt.Errorf("local: lease of %s: %w (%s)", table, sinks.ErrLeaseLost, describeLease(rec))
		}
		rec.Expires = expiry(now, ttl)
		return s.writeLease(table, rec)
	}
	if rec.Holder != "" {
		alive, err := s.holderAlive(rec.Holder)
		if err != nil {
			return err
		}
		if alive && (rec.Expires.IsZero() || now.Before(rec.Expires)) {
			return fmt.Errorf("local: lease of %s: %w (%s)", table, sinks.ErrLeaseHeld, describeLease(rec))
		}
	}
	if err := s.keepHolder(holder); err != nil {
		return err
	}
	host, _ := os.Hostname()
	prev := rec
	rec = leaseRecord{Holder: holder, Generation: prev.Generation + 1, Expires: expiry(now, ttl), PID: os.Getpid(), Host: host, Since: now.UTC()}
	if err := s.writeLease(table, rec); err != nil {
		s.dropHolder(holder)
		return err
	}
	s.leases[table] = &lease{holder: holder, generation: rec.Generation}
	if prev.Holder != "" {
		s.log.Info("lease taken over", "table", table, "holder", holder, "from", describeLease(prev), "generation", rec.Generation)
	} else {
		s.log.Info("lease acquired", "table", table, "holder", holder, "generation", rec.Generation)
	}
	return nil
}

func expiry(now time.Time, ttl time.Duration) time.Time {
	if ttl <= 0 {
		return time.Time{}
	}
	return now.Add(ttl).UTC()
}

// describeLease says who holds a lease, for errors and logs.
func describeLease(r leaseRecord) string {
	if r.Holder == "" {
		return "released"
	}
	return fmt.Sprintf("holder %s, pid %d on %s, since %s, generation %d", r.Holder, r.PID, r.Host, r.Since.Format(time.RFC3339), r.Generation)
}

// ReleaseLease gives up the lease of table if holder has it in this Sink.
func (s *Sink) ReleaseLease(ctx context.Context, table, holder string) error {
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	mine, ok := s.leases[table]
	if !ok || mine.holder != holder {
		return nil
	}
	delete(s.leases, table)
	defer s.dropHolder(holder)
	unlock, err := s.lock(ctx)
	if err != nil {
		return fmt.Errorf("local: release lease of %s: %w", table, err)
	}
	defer unlock()
	rec, err := s.readLease(table)
	if err != nil {
		return err
	}
	if rec.Holder != holder || rec.Generation != mine.generation {
		return nil // taken over meanwhile
	}
	rec.Holder, rec.Expires = "", time.Time{}
	if err := s.writeLease(table, rec); err != nil {
		return fmt.Errorf("local: release lease of %s: %w", table, err)
	}
	s.log.Info("lease released", "table", table, "holder", holder)
	return nil
}

// releaseLeases lets go of every lease's holder flock, as Close or a dying
// process does; the records stay (a Sink closing gives its leases up with
// ReleaseLease first).
func (s *Sink) releaseLeases() {
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	clear(s.leases)
	s.holdersMu.Lock()
	defer s.holdersMu.Unlock()
	for holder, h := range s.holders {
		if err := h.fl.Unlock(); err != nil {
			s.log.Warn("lease holder lock not released", "holder", holder, "err", err)
		}
		h.fl.Close()
	}
	clear(s.holders)
}

// holderLock is this Sink's flock of a holder, and how many leases it holds
// for it.
type holderLock struct {
	fl     *flock.Flock
	leases int
}

// keepHolder takes (or counts one more lease under) the holder's flock.
func (s *Sink) keepHolder(holder string) error {
	s.holdersMu.Lock()
	defer s.holdersMu.Unlock()
	if h, ok := s.holders[holder]; ok {
		h.leases++
		return nil
	}
	if err := s.disk.MkdirAll(s.lay.leaseHolders(), 0o755); err != nil {
		return fmt.Errorf("local: lease holder %s: %w", holder, err)
	}
	fl := flock.New(s.lay.leaseHolder(holder))
	ok, err := fl.TryLock()
	if err != nil || !ok {
		fl.Close()
		return fmt.Errorf("local: lease holder %s: its lock is held elsewhere (%v)", holder, err)
	}
	s.holders[holder] = &holderLock{fl: fl, leases: 1}
	return nil
}

// dropHolder counts one lease less under the holder's flock and lets it go
// with the last.
func (s *Sink) dropHolder(holder string) {
	s.holdersMu.Lock()
	defer s.holdersMu.Unlock()
	h, ok := s.holders[holder]
	if !ok {
		return
	}
	if h.leases--; h.leases > 0 {
		return
	}
	delete(s.holders, holder)
	if err := h.fl.Unlock(); err != nil {
		s.log.Warn("lease holder lock not released", "holder", holder, "err", err)
	}
	h.fl.Close()
}

// holderAlive reports whether a process holds the holder's flock.
func (s *Sink) holderAlive(holder string) (bool, error) {
	s.holdersMu.Lock()
	_, mine := s.holders[holder]
	s.holdersMu.Unlock()
	if mine {
		return true, nil
	}
	path := s.lay.leaseHolder(holder)
	if _, err := s.disk.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	fl := flock.New(path)
	defer fl.Close()
	ok, err := fl.TryLock()
	if err != nil {
		return false, fmt.Errorf("local: lease holder %s: %w", holder, err)
	}
	if !ok {
		return true, nil
	}
	return false, fl.Unlock()
}

// readLease reads a lease's record; the zero record when it has none.
// Under the destination lock.
func (s *Sink) readLease(table string) (leaseRecord, error) {
	var r leaseRecord
	data, err := s.disk.ReadFile(s.lay.leaseFile(table))
	if errors.Is(err, fs.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return r, fmt.Errorf("local: lease of %s: %w", table, err)
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("local: lease of %s: %s is corrupt: %w", table, s.lay.leaseFile(table), err)
	}
	return r, nil
}

// writeLease replaces a lease's record, durably. Under the destination
// lock.
func (s *Sink) writeLease(table string, r leaseRecord) error {
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("local: lease of %s: %w", table, err)
	}
	if err := s.disk.MkdirAll(s.lay.leases(), 0o755); err != nil {
		return fmt.Errorf("local: lease of %s: %w", table, err)
	}
	tmp := filepath.Join(s.lay.tmp(), "lease-"+table+"-"+randomSuffix())
	f, err := s.disk.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err == nil {
		if _, err = f.Write(data); err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = s.disk.Rename(tmp, s.lay.leaseFile(table))
	}
	if err == nil {
		err = s.disk.SyncDir(s.lay.leases())
	}
	if err != nil {
		s.disk.Remove(tmp)
		return fmt.Errorf("local: lease of %s: %w", table, err)
	}
	return nil
}

// checkLease refuses a load that changes a CDC target whose lease was taken
// over since the load began under it (sinks.ErrLeaseLost), or, for a load
// begun without its lease, whose lease another live holder has
// (sinks.ErrLeaseHeld). A target nobody leases may be written (tests,
// tools); the lease is what keeps runners to one writer. Runs under the
// destination lock.
func (s *Sink) checkLease(table string, begun map[string]int64) error {
	rec, err := s.readLease(table)
	if err != nil {
		return err
	}
	if gen, ok := begun[table]; ok {
		if rec.Generation != gen {
			return fmt.Errorf("%w: %s (%s)", sinks.ErrLeaseLost, table, describeLease(rec))
		}
		return nil
	}
	if rec.Holder == "" {
		return nil
	}
	alive, err := s.holderAlive(rec.Holder)
	if err != nil {
		return err
	}
	if alive && (rec.Expires.IsZero() || time.Now().Before(rec.Expires)) {
		return fmt.Errorf("%w: %s (%s)", sinks.ErrLeaseHeld, table, describeLease(rec))
	}
	return nil
}

// leaseGenerations returns the generation of each lease this Sink holds:
// a load begun now is fenced by them.
func (s *Sink) leaseGenerations() map[string]int64 {
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	if len(s.leases) == 0 {
		return nil
	}
	out := make(map[string]int64, len(s.leases))
	for t, l := range s.leases {
		out[t] = l.generation
	}
	return out
}
