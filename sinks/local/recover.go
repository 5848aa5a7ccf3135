package local

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/gofrs/flock"
)

// tmpMaxAge is the age after which Recover removes leftovers in _sluice/tmp
// (folders of loads that died in Begin, temporary symlinks and files).
const tmpMaxAge = time.Hour

// Recover takes the destination lock and makes the tables match the ledger:
// it cuts a torn last ledger line (an append cut by a crash: that load is
// not committed), publishes every committed load its tables do not hold
// yet, removes the staging folders of loads that are not committed and
// whose writer is gone (a live load's folder is locked), removes version
// folders no table points to. Loads of live writers in other processes are left alone, so
// Recover is safe while they run.
func (s *Sink) Recover(ctx context.Context) error {
	unlock, err := s.lock(ctx)
	if err != nil {
		return fmt.Errorf("local: recover: %w", err)
	}
	defer unlock()
	s.led.mu.Lock()
	cut := s.led.cut
	err = s.led.refresh(true)
	torn := s.led.cut > cut
	s.led.mu.Unlock()
	if err != nil {
		return fmt.Errorf("local: recover: %w", err)
	}
	if torn {
		s.log.Info("recovery: cut a torn ledger line (a commit that did not complete)")
	}
	// Check every committed load against its tables again, not only those
	// after what this Sink published: another process may have died.
	s.pubd = 0
	if err := s.publishPending(ctx, false); err != nil {
		return fmt.Errorf("local: recover: %w", err)
	}
	if err := s.removeDeadStaging(); err != nil {
		return fmt.Errorf("local: recover: %w", err)
	}
	tables, err := s.listTables()
	if err != nil {
		return fmt.Errorf("local: recover: %w", err)
	}
	for _, t := range tables {
		m, err := s.current(t)
		if errors.Is(err, errNoTable) {
			continue // Ensure died before the table's first swap
		}
		if err != nil {
			return fmt.Errorf("local: recover %s: %w", t, err)
		}
		if err := s.gcVersions(t, m.Version, true); err != nil {
			return fmt.Errorf("local: recover %s: %w", t, err)
		}
	}
	s.removeOldTmp()
	return nil
}

// removeDeadStaging removes staging folders whose lock no one holds: loads
// (and compactions) whose writer died or was dropped. Committed loads were
// published and their folders removed just before.
func (s *Sink) removeDeadStaging() error {
	ents, err := s.disk.ReadDir(s.lay.staging())
	if err != nil {
		return err
	}
	for _, e := range ents {
		dir := filepath.Join(s.lay.staging(), e.Name())
		lk := flock.New(filepath.Join(dir, ".lock"))
		ok, err := lk.TryLock()
		if err != nil || !ok {
			lk.Close()
			continue // alive, or not ours to judge
		}
		rerr := s.disk.RemoveAll(dir)
		lk.Unlock()
		lk.Close()
		if rerr != nil {
			return rerr
		}
		s.log.Info("recovery: removed an uncommitted load", "staging", e.Name())
	}
	return nil
}

func (s *Sink) removeOldTmp() {
	ents, err := s.disk.ReadDir(s.lay.tmp())
	if err != nil {
		return
	}
	for _, e := range ents {
		info, err := e.Info()
		if err != nil || time.Since(info.ModTime()) < tmpMaxAge {
			continue
		}
		if err := s.disk.RemoveAll(filepath.Join(s.lay.tmp(), e.Name())); err != nil {
			s.log.Warn("temporary file not removed", "name", e.Name(), "err", err)
		}
	}
}

// listTables returns the tables that have a stored schema.
func (s *Sink) listTables() ([]string, error) {
	ents, err := s.disk.ReadDir(s.lay.tables())
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && tableName.MatchString(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}
