package clickhouse

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
)

// A key's write lock is a view (chsql.Lock), _sluice_statelock_<hash of
// the key>, whose one row names the writer holding it (a random token per
// acquisition).
// CREATE VIEW fails when the view exists, so at most one writer holds it;
// the write is an INSERT ... SELECT from the view filtered by the token, so
// it lands only while the view names the writer. A view older than the
// grace period is left by a stopped process: it is dropped, after which
// every query still naming it is waited for (fenced), and taken.

const lockPrefix = "_sluice_statelock_"

// lock is a held write lock.
type lock struct {
	name, token string
	at          time.Time // when this process asked for it, by its clock
	lost        bool      // found taken over: not to be dropped
	unsettled   bool      // an insert under it may still be running on the server
}

// cleanupTimeout bounds releasing a lock after the caller's context ended.
const cleanupTimeout = 30 * time.Second

// fresh reports whether no other writer can yet have taken the lock over:
// its age by the server's clock (whole seconds) is at most the time since
// this process asked for it, well below the grace period.
func (l *lock) fresh(grace time.Duration) bool { return time.Since(l.at) < grace/2 }

func lockName(k string) string {
	h := sha256.Sum256([]byte(k))
	return lockPrefix + hex.EncodeToString(h[:12])
}

// locked runs do while holding the write lock of key k.
func (s *Store) locked(ctx context.Context, k string, do func(l *lock) error) error {
	l, err := s.acquire(ctx, k)
	if err != nil {
		return err
	}
	err = do(l)
	// Release even when ctx has ended: a lock left behind holds the key up
	// for the grace period.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if rerr := s.release(rctx, l); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

func (s *Store) acquire(ctx context.Context, k string) (*lock, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	l := &lock{name: lockName(k), token: hex.EncodeToString(b[:])}
	deadline := time.Now().Add(s.lockWait)
	backoff := 2 * time.Millisecond
	var ageErr error
	for {
		l.at = time.Now()
		err := chsql.Lock(ctx, s.conn, s.db, l.name, chsql.Field{Name: "holder", Value: l.token})
		if err == nil {
			return l, nil
		}
		if !chsql.IsCode(err, chsql.CodeTableAlreadyExists) {
			// The create may have landed although its answer was lost.
			if held, herr := s.holds(ctx, l); herr == nil && held {
				return l, nil
			}
			return nil, fmt.Errorf("lock: %w", err)
		}
		// Reading system.tables fails now and then while the view is being
		// dropped (unknown table, or its metadata file not found): the
		// lock is being released, so wait as for a live one.
		age, found, err := s.lockAge(ctx, l.name)
		if err != nil {
			ageErr = err
		}
		if err == nil && found && age > s.grace {
			s.log.Info("checkpoint write lock of a stopped process removed", "key", k, "lock", l.name, "age", age)
			if err := s.fence(ctx, l.name); err != nil {
				return nil, fmt.Errorf("lock: %w", err)
			}
			continue
		}
		if time.Now().After(deadline) {
			// Transient: the writer holding it finishes or stops, and then
			// the lock is taken again or over (Store.Retryable).
			if ageErr != nil {
				return nil, chsql.Transient("lock: another writer of the key has held it for more than %v (last error: %w)", s.lockWait, ageErr)
			}
			return nil, chsql.Transient("lock: another writer of the key has held it for more than %v", s.lockWait)
		}
		if err := chsql.Sleep(ctx, backoff/2+mrand.N(backoff)); err != nil {
			return nil, err
		}
		backoff = min(2*backoff, 50*time.Millisecond)
	}
}

// release drops the lock unless it was found taken over. A lock held longer
// than half the grace period is checked first, so that a writer that
// stalled does not drop the lock of the writer that took it over.
func (s *Store) release(ctx context.Context, l *lock) error {
	if l.lost {
		return nil
	}
	if !l.fresh(s.grace) {
		held, err := s.holds(ctx, l)
		if err != nil || !held {
			return err
		}
	}
	if l.unsettled {
		// Another writer must not read before that insert ended.
		if err := s.fence(ctx, l.name); err != nil {
			return fmt.Errorf("unlock: %w", err)
		}
		return nil
	}
	if err := s.conn.Exec(ctx, chsql.Drop(s.db, l.name, s.dropSync)); err != nil {
		return fmt.Errorf("unlock: %w", err)
	}
	return nil
}

// holds reports whether the lock view exists and names l's token.
func (s *Store) holds(ctx context.Context, l *lock) (bool, error) {
	vals, found, err := chsql.Holder(ctx, s.conn, s.db, l.name, "holder")
	if err != nil {
		return false, err
	}
	return found && vals[0] == l.token, nil
}

// lockAge returns how old a lock view is by the server's clock
// (chsql.Ages: a view whose metadata time reads as zero is taken as just
// made).
func (s *Store) lockAge(ctx context.Context, name string) (time.Duration, bool, error) {
	ages, err := chsql.Ages(ctx, s.conn, s.db, lockPrefix, name)
	if err != nil {
		return 0, false, fmt.Errorf("lock age: %w", err)
	}
	age, found := ages[name]
	return age, found, nil
}

// fence drops a lock view and waits until no running query names it
// (chsql.Fence), so that whatever its holder was doing with it has
// finished or will fail.
func (s *Store) fence(ctx context.Context, name string) error {
	return chsql.Fence(ctx, s.conn, s.db, name, s.dropSync)
}
