package clickhouse

import (
	"context"
	"time"
)

// The background cleanup runs the periodic maintenance every
// Options.CleanupEvery, whether or not the process loads anything, so that
// a committed load whose writer stopped before publishing it appears in its
// target without waiting for the next load or start. It is the same
// maintenance as Begin's: it publishes committed loads once their writer's
// heartbeat expired or ended, or once they are older than the grace period,
// and removes the uncommitted loads and locks of stopped processes; every
// step is fenced, so several processes may run it at the same time.

// startCleanup starts the background cleanup; every <= 0 starts none.
func (s *Sink) startCleanup(every time.Duration) {
	if every <= 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.mu.Lock()
	s.stopCleanup, s.cleanupDone = cancel, done
	s.mu.Unlock()
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			s.cleanup(ctx)
		}
	}()
}

// endCleanup stops the background cleanup and waits for it to return. A
// maintenance it was running is cancelled; what it left undone is safe to
// leave (the next maintenance, of any process, finishes it).
func (s *Sink) endCleanup() {
	s.mu.Lock()
	stop, done := s.stopCleanup, s.cleanupDone
	s.stopCleanup, s.cleanupDone = nil, nil
	s.mu.Unlock()
	if stop == nil {
		return
	}
	stop()
	<-done
}

// cleanup runs one background maintenance, unless another one is running
// or sluice's tables are not set up yet in this process (a sink opened only
// to read creates nothing in the background). It logs what fails.
func (s *Sink) cleanup(ctx context.Context) {
	if !s.mntMu.TryLock() {
		return
	}
	defer s.mntMu.Unlock()
	s.mu.Lock()
	ready := s.systemReady
	if ready {
		s.lastMnt = time.Now()
	}
	s.mu.Unlock()
	if !ready {
		return
	}
	if err := s.maintain(ctx, false); err != nil && ctx.Err() == nil {
		s.log.Warn("background cleanup failed; retried later", "err", err)
	}
}

// graceTime returns the grace period (Options.Grace).
func (s *Sink) graceTime() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.grace
}

// setGrace changes the grace period; tests set it below zero, so that
// every object without a live owner counts as abandoned at once.
func (s *Sink) setGrace(d time.Duration) {
	s.mu.Lock()
	s.grace = d
	s.mu.Unlock()
}
