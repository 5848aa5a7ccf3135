package flows

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/sinks"
)

// expirePage is how many keys one expiry load re-examines.
const expirePage = 10_000

// expireEvery is how often `run` re-examines a CDC target's keys: a quarter
// of the longest tombstone_retention of its flows, within [1m, 6h], unless
// Options.ExpireEvery is set.
func (r *runner) expireEvery(h *cdcHandler) time.Duration {
	if r.opts.ExpireEvery > 0 {
		return r.opts.ExpireEvery
	}
	return min(max(h.flow.TombstoneRetention/4, time.Minute), 6*time.Hour)
}

// expireLoop forgets, in run mode, what a CDC target's key states remember
// longer than tombstone_retention for keys that get no more events (a key
// that gets an event forgets it then): tombstones of deleted keys, and the
// members of coalesced SCD type 2 versions. Forgetting changes no row.
// After each pass the target is compacted where its destination keeps
// removal markers (compactTarget). It returns when ctx is done.
func (r *runner) expireLoop(ctx context.Context, t *cdcTarget) {
	lister, ok := r.sink.(sinks.StateLister)
	h := t.expiry
	if !ok || h == nil {
		return
	}
	every := r.expireEvery(h)
	for sleep(ctx, every) == nil {
		n, err := r.expireTarget(ctx, t, h, lister)
		switch {
		case err != nil && ctx.Err() == nil:
			r.log.Warn("state expiry stopped; it runs again later", "table", t.name, "err", err)
		case n > 0:
			r.log.Info("expired state forgotten", "table", t.name, "keys", n)
		}
		if err == nil {
			if err := r.compactTarget(ctx, t.name); err != nil && ctx.Err() == nil {
				r.log.Warn("compaction stopped; it runs again later", "table", t.name, "err", err)
			}
		}
	}
}

// expireOnce is `update --expire` for one target: one pass of expiry over
// its key states, after its flows ended, and its compaction, as run's loop
// makes periodically.
func (r *runner) expireOnce(ctx context.Context, t *cdcTarget) error {
	lister, ok := r.sink.(sinks.StateLister)
	if !ok {
		return errors.New("--expire: the destination cannot list key states")
	}
	h := t.expiry
	if h == nil {
		return nil
	}
	n, err := r.expireTarget(ctx, t, h, lister)
	if err != nil {
		return fmt.Errorf("expiry of %s: %w", t.name, err)
	}
	r.log.Info("expired state forgotten", "table", t.name, "keys", n)
	if err := r.compactTarget(ctx, t.name); err != nil {
		return fmt.Errorf("compaction of %s: %w", t.name, err)
	}
	return nil
}

// compactTarget compacts a CDC target, after its expiry, in a destination
// that keeps rows its logical content no longer shows (ClickHouse's removal
// markers and removed key states) when they pass a tenth of what it
// stores.
func (r *runner) compactTarget(ctx context.Context, name string) error {
	c, ok := r.sink.(sinks.CDCCompactor)
	if !ok {
		return nil
	}
	n, err := c.CompactCDC(ctx, name)
	if n > 0 {
		r.log.Info("target compacted", "table", name, "markers_dropped", n)
	}
	return err
}

// expireTarget runs the engine's expiry over every key of the target's
// state, a page at a time, each page that changes a state one load. It
// returns the number of keys whose state changed.
func (r *runner) expireTarget(ctx context.Context, t *cdcTarget, h *cdcHandler, lister sinks.StateLister) (int, error) {
	changed := 0
	after := ""
	for {
		keys, err := lister.StateKeys(ctx, t.name, after, expirePage)
		if err != nil || len(keys) == 0 {
			return changed, err
		}
		after = keys[len(keys)-1]
		n, err := r.expirePage(ctx, t, h, keys)
		changed += n
		if err != nil {
			return changed, err
		}
	}
}

func (r *runner) expirePage(ctx context.Context, t *cdcTarget, h *cdcHandler, keys []string) (int, error) {
	changed := 0
	err := t.exclusive(ctx, func() error {
		eng, err := h.current()
		if err != nil || eng == nil {
			return err // no engine yet: no key has a state
		}
		out, err := eng.Expire(ctx, keys, time.Now())
		if err != nil {
			t.cache.Reset()
			return err
		}
		if len(out.States) == 0 && out.Table == nil {
			return nil
		}
		p := &prepared{write: func(ctx context.Context, ld sinks.Load) error { return writeOutput(ctx, ld, t.name, out) }}
		if err := r.commitLoad(ctx, h.flow, 0, p, sinks.Commit{}); err != nil {
			t.cache.Reset()
			return err
		}
		t.cache.Commit(out)
		changed = len(out.States)
		return nil
	})
	return changed, err
}
