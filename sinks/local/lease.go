package local

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/gofrs/flock"

	"github.com/sluicehq/sluice/sinks"
)

// lease is a CDC target's lease held by this Sink.
type lease struct {
	fl     *flock.Flock
	holder string
}

// leaseInfo is written beside a held lease, for the error another writer
// gets.
type leaseInfo struct {
	Holder string    `json:"holder"`
	PID    int       `json:"pid"`
	Host   string    `json:"host"`
	Since  time.Time `json:"since"`
}

var _ sinks.Leaser = (*Sink)(nil)

// AcquireLease takes the lease of a CDC target for holder: an exclusive
// flock on _sluice/leases/<table>, held until ReleaseLease, Close or the
// death of the process, so ttl plays no part. Renewing (the same holder
// again) succeeds at once. sinks.ErrLeaseHeld when another holder has it,
// in this Sink, another Sink of this process, or another process.
func (s *Sink) AcquireLease(ctx context.Context, table, holder string, ttl time.Duration) error {
	if s.closed.Load() {
		return errClosed
	}
	if !tableName.MatchString(table) {
		return fmt.Errorf("local: lease %q: not a valid table name", table)
	}
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	if l, ok := s.leases[table]; ok {
		if l.holder == holder {
			return nil
		}
		return fmt.Errorf("local: lease of %s: %w (holder %s)", table, sinks.ErrLeaseHeld, l.holder)
	}
	if err := s.disk.MkdirAll(s.lay.leases(), 0o755); err != nil {
		return fmt.Errorf("local: lease of %s: %w", table, err)
	}
	fl := flock.New(s.lay.leaseFile(table))
	ok, err := fl.TryLock()
	if err != nil {
		fl.Close()
		return fmt.Errorf("local: lease of %s: %w", table, err)
	}
	if !ok {
		fl.Close()
		return fmt.Errorf("local: lease of %s: %w (%s)", table, sinks.ErrLeaseHeld, s.leaseHolder(table))
	}
	host, _ := os.Hostname()
	info, _ := json.Marshal(leaseInfo{Holder: holder, PID: os.Getpid(), Host: host, Since: time.Now().UTC()})
	if err := s.disk.WriteFile(s.lay.leaseFile(table)+".json", info, 0o644); err != nil {
		s.log.Warn("lease holder not recorded", "table", table, "err", err)
	}
	s.leases[table] = &lease{fl: fl, holder: holder}
	s.log.Info("lease acquired", "table", table, "holder", holder)
	return nil
}

// leaseHolder describes who holds a lease, as recorded beside it.
func (s *Sink) leaseHolder(table string) string {
	data, err := s.disk.ReadFile(s.lay.leaseFile(table) + ".json")
	var info leaseInfo
	if err != nil || json.Unmarshal(data, &info) != nil {
		return "holder unknown"
	}
	return fmt.Sprintf("holder %s, pid %d on %s, since %s", info.Holder, info.PID, info.Host, info.Since.Format(time.RFC3339))
}

// ReleaseLease gives up the lease of table if holder has it in this Sink.
func (s *Sink) ReleaseLease(ctx context.Context, table, holder string) error {
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	l, ok := s.leases[table]
	if !ok || l.holder != holder {
		return nil
	}
	delete(s.leases, table)
	err := l.fl.Unlock()
	l.fl.Close()
	if err != nil {
		return fmt.Errorf("local: release lease of %s: %w", table, err)
	}
	s.log.Info("lease released", "table", table, "holder", holder)
	return nil
}

// releaseLeases lets go of every lease, as Close or a dying process does.
func (s *Sink) releaseLeases() {
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	for table, l := range s.leases {
		if err := l.fl.Unlock(); err != nil {
			s.log.Warn("lease not released", "table", table, "err", err)
		}
		l.fl.Close()
	}
	clear(s.leases)
}

// checkLease refuses a load that changes a CDC target whose lease another
// Sink or process holds. A target nobody leases may be written (tests,
// tools); the lease is what keeps runners to one writer. Runs under the
// destination lock.
func (s *Sink) checkLease(table string) error {
	s.leaseMu.Lock()
	_, mine := s.leases[table]
	s.leaseMu.Unlock()
	if mine {
		return nil
	}
	path := s.lay.leaseFile(table)
	if _, err := s.disk.Stat(path); err != nil {
		return nil // never leased
	}
	fl := flock.New(path)
	defer fl.Close()
	ok, err := fl.TryLock()
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: %s (%s)", sinks.ErrLeaseHeld, table, s.leaseHolder(table))
	}
	return fl.Unlock()
}
