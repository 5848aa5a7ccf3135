package flows

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
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
	return min(max(h.cfg.TombstoneRetention/4, time.Minute), 6*time.Hour)
}

// expireLoops forgets, in run mode, what CDC targets' key states remember
// longer than tombstone_retention for keys that get no more events (a key
// that gets an event forgets it then): tombstones of deleted keys, and the
// members of coalesced SCD type 2 versions. Forgetting changes no row.
// After each pass a target is compacted where its destination keeps
// removal markers (compactTarget). It returns once the loops are started;
// wait waits for them to end, after ctx is done.
func (r *runner) expireLoops(ctx context.Context, targets map[string]*cdcTarget, handlers []batchHandler) (wait func()) {
	var wg sync.WaitGroup
	lister, ok := r.sink.(sinks.StateLister)
	if !ok || r.opts.Mode != ModeRun {
		return wg.Wait
	}
	for name, t := range targets {
		h := expiryHandler(name, handlers)
		if h == nil {
			continue
		}
		wg.Go(func() {
			every := r.expireEvery(h)
			for sleep(ctx, every) == nil {
				n, err := r.expireTarget(ctx, t, h, lister)
				switch {
				case err != nil && ctx.Err() == nil:
					r.log.Warn("state expiry stopped; it runs again later", "table", name, "err", err)
				case n > 0:
					r.log.Info("expired state forgotten", "table", name, "keys", n)
				}
				if err == nil {
					if err := r.compactTarget(ctx, name); err != nil && ctx.Err() == nil {
						r.log.Warn("compaction stopped; it runs again later", "table", name, "err", err)
					}
				}
			}
		})
	}
	return wg.Wait
}

// expireOnce is `update --expire`: one pass of expiry over every CDC
// target's key states, after the flows ended, and its compaction, as run's
// loops make periodically.
func (r *runner) expireOnce(ctx context.Context, targets map[string]*cdcTarget, handlers []batchHandler) error {
	lister, ok := r.sink.(sinks.StateLister)
	if !ok {
		return errors.New("--expire: the destination cannot list key states")
	}
	for _, name := range slices.Sorted(maps.Keys(targets)) {
		h := expiryHandler(name, handlers)
		if h == nil {
			continue
		}
		n, err := r.expireTarget(ctx, targets[name], h, lister)
		if err != nil {
			return fmt.Errorf("expiry of %s: %w", name, err)
		}
		r.log.Info("expired state forgotten", "table", name, "keys", n)
		if err := r.compactTarget(ctx, name); err != nil {
			return fmt.Errorf("compaction of %s: %w", name, err)
		}
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

// expiryHandler returns the handler whose flow decides a target's expiry:
// of the flows writing it, the one whose tombstone_retention is longest
// (forgetting later than a flow asks is safe, earlier is not); nil when no
// CDC flow of the run writes it.
func expiryHandler(target string, handlers []batchHandler) *cdcHandler {
	var h *cdcHandler
	for _, bh := range handlers {
		if ch, ok := bh.(*cdcHandler); ok && ch.flow.Target == target && (h == nil || ch.cfg.TombstoneRetention > h.cfg.TombstoneRetention) {
			h = ch
		}
	}
	return h
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
		out, err := h.engine.Expire(ctx, keys, time.Now())
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
