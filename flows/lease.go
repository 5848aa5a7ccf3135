package flows

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/sluicehq/sluice/consumer"
	"github.com/sluicehq/sluice/sinks"
)

// Leases keep each CDC target, and the files of each files flow, to one
// writer at a time (docs/operations.md, "Several processes"). A process
// runs a CDC target's flows only while it holds the target's lease: the
// others wait for it and meanwhile run every other flow. The destination
// fences a lease by a generation that every commit checks, so a writer that
// lost its lease (paused past it, cut off) cannot commit afterwards; its
// renewal or its next commit says so, its flows stop at once (their
// consumers' context ends with consumer.ErrRevoked: nothing they hold can
// commit), and it competes for the lease again. The flows of a leased
// target read every partition of their topics themselves
// (consumer.Config.Exclusive), not as members of a consumer group: the
// lease already keeps them to one process, and a new holder reads as soon
// as it took the lease instead of waiting for the old holder's group
// session to expire. The TTL is therefore short: a writer that died or
// stopped renewing is taken over within about a TTL.

// DefaultLeaseTTL is how long a lease outlives its last renewal unless
// Options.LeaseTTL says otherwise; it is renewed every third of it.
const DefaultLeaseTTL = 3 * time.Second

func (r *runner) leaseTTL() time.Duration { return r.opts.LeaseTTL }

// leasePoll is how often a process waiting for a lease looks again.
func (r *runner) leasePoll() time.Duration {
	return min(max(r.opts.LeaseTTL/6, 100*time.Millisecond), time.Second)
}

// leaseKeeper holds one lease and renews it until released or lost.
type leaseKeeper struct {
	r      *runner
	leaser sinks.Leaser
	name   string

	lost     chan struct{} // closed once the lease is found lost
	lostOnce sync.Once
	done     chan struct{} // closed by release
	released sync.Once
	wg       sync.WaitGroup
}

// holdLease takes the lease of name for this process, waiting (and saying
// so once, with waiting) while another process holds it, and keeps it
// renewed until release.
func (r *runner) holdLease(ctx context.Context, leaser sinks.Leaser, name, waiting string) (*leaseKeeper, error) {
	for logged := false; ; {
		err := r.retry(ctx, "lease "+name, func(ctx context.Context) error {
			return leaser.AcquireLease(ctx, name, r.id, r.leaseTTL())
		})
		if err == nil {
			break
		}
		if !errors.Is(err, sinks.ErrLeaseHeld) && !errors.Is(err, sinks.ErrLeaseLost) {
			return nil, err
		}
		if !logged {
			r.log.Info(waiting, "lease", name)
			logged = true
		}
		if err := sleep(ctx, r.leasePoll()); err != nil {
			return nil, err
		}
	}
	k := &leaseKeeper{r: r, leaser: leaser, name: name, lost: make(chan struct{}), done: make(chan struct{})}
	k.wg.Go(k.renew)
	return k, nil
}

// renew renews the lease every third of its TTL. A renewal refused because
// another process holds the lease now marks it lost; other failures are
// tried again at the next tick (the lease stays this process's until
// another takes it over).
func (k *leaseKeeper) renew() {
	t := time.NewTicker(max(k.r.leaseTTL()/3, 10*time.Millisecond))
	defer t.Stop()
	ctx := context.Background()
	for {
		select {
		case <-k.done:
			return
		case <-t.C:
		}
		err := k.leaser.AcquireLease(ctx, k.name, k.r.id, k.r.leaseTTL())
		switch {
		case err == nil:
		case errors.Is(err, sinks.ErrLeaseLost) || errors.Is(err, sinks.ErrLeaseHeld):
			k.r.log.Warn("lease lost to another process", "lease", k.name, "err", err)
			k.markLost()
			return
		default:
			k.r.log.Warn("lease not renewed; retrying", "lease", k.name, "err", err)
		}
	}
}

func (k *leaseKeeper) markLost() { k.lostOnce.Do(func() { close(k.lost) }) }

// isLost reports whether the lease was found lost.
func (k *leaseKeeper) isLost() bool {
	select {
	case <-k.lost:
		return true
	default:
		return false
	}
}

// release stops renewing the lease and gives it up, unless it was lost.
// Calls after the first do nothing.
func (k *leaseKeeper) release(ctx context.Context) {
	k.released.Do(func() {
		close(k.done)
		k.wg.Wait()
		if k.isLost() {
			return
		}
		if err := k.leaser.ReleaseLease(context.WithoutCancel(ctx), k.name, k.r.id); err != nil {
			k.r.log.Warn("lease not released; it expires by itself", "lease", k.name, "err", err)
		}
	})
}

// underLease runs work with a context that ends when the lease is lost.
// lost is true when it was, whatever work returned: the work was fenced
// (its commits refused, or stopped), not failed.
func (k *leaseKeeper) underLease(ctx context.Context, work func(ctx context.Context) error) (lost bool, err error) {
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-k.lost:
			// Its consumers stop at once: what they hold back could not
			// commit anyway.
			cancel(consumer.ErrRevoked)
		case <-wctx.Done():
		}
	}()
	err = work(wctx)
	if errors.Is(err, sinks.ErrLeaseLost) {
		k.markLost()
	}
	return k.isLost(), err
}

// runTarget runs the flows writing a CDC target (run runs flow i) under
// the target's lease: it waits for the lease, runs them, and when the lease
// is lost stops them and competes for it again (run mode), or fails (an
// update, which processes what was there when it started, is run again).
// held, when not nil, is the lease already taken (a refresh takes them
// first).
func (r *runner) runTarget(ctx context.Context, t *cdcTarget, held *leaseKeeper, flows []int, run func(ctx context.Context, i int) error) error {
	leaser, ok := r.sink.(sinks.Leaser)
	if !ok {
		return errors.New("the destination cannot lease CDC targets")
	}
	// A process waiting for the lease is a standby, ready to take over: its
	// flows count as started (readiness), so that a rolling deploy's new
	// process is ready before the old one, which holds the lease, stops.
	for _, i := range flows {
		r.opts.Metrics.FlowStarted(r.p.Flows[i].Name)
	}
	k := held
	for {
		if k == nil {
			var err error
			k, err = r.holdLease(ctx, leaser, t.name, "waiting for another process to release the table")
			if err != nil {
				if r.stopped(ctx, err) {
					return nil
				}
				return fmt.Errorf("table %s: %w", t.name, err)
			}
			r.log.Info("lease taken", "table", t.name)
		}
		lost, err := k.underLease(ctx, func(ctx context.Context) error {
			var wg sync.WaitGroup
			ectx, stopExpiry := context.WithCancel(ctx)
			if r.opts.Mode == ModeRun {
				wg.Go(func() { r.expireLoop(ectx, t) })
			}
			errs := r.runParallel(ctx, flows, run)
			stopExpiry()
			wg.Wait()
			if errs == nil && r.opts.Expire && r.opts.Mode == ModeUpdate {
				return r.expireOnce(ctx, t)
			}
			return errs
		})
		k.release(ctx)
		if !lost {
			return err
		}
		// Whatever this process knew of the target may be stale now.
		t.cache.Reset()
		if r.opts.Mode == ModeUpdate {
			return fmt.Errorf("table %s: another process took its lease over while this update ran; run update again", t.name)
		}
		if ctx.Err() != nil {
			return nil
		}
		r.log.Warn("lease of the table lost: its flows stopped and compete for it again", "table", t.name)
		k = nil
	}
}

// holdAll takes the lease of every CDC target into held, waiting for each.
func (r *runner) holdAll(ctx context.Context, targets map[string]*cdcTarget, held map[string]*leaseKeeper) error {
	leaser, ok := r.sink.(sinks.Leaser)
	if !ok && len(targets) > 0 {
		return errors.New("the destination cannot lease CDC targets")
	}
	for _, name := range slices.Sorted(maps.Keys(targets)) {
		k, err := r.holdLease(ctx, leaser, name, "waiting for another process to release the table")
		if err != nil {
			return fmt.Errorf("table %s: %w", name, err)
		}
		held[name] = k
		r.log.Info("lease taken", "table", name)
	}
	return nil
}

// runParallel runs flows (indices of r.p.Flows) at once and returns their
// errors; in run mode the first error stops the others.
func (r *runner) runParallel(ctx context.Context, flows []int, run func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu   sync.Mutex
		errs *multierror.Error
		wg   sync.WaitGroup
	)
	for _, i := range flows {
		wg.Go(func() {
			if err := run(ctx, i); err != nil {
				mu.Lock()
				errs = multierror.Append(errs, err)
				mu.Unlock()
				if r.opts.Mode == ModeRun {
					cancel()
				}
			}
		})
	}
	wg.Wait()
	return errs.ErrorOrNil()
}
