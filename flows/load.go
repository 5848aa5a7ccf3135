package flows

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/spec"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/sinks"
)

// The one load path of every flow kind (docs/operations.md, "Delivery"): a
// prepared batch becomes a load (Begin, Write, Commit, or Abort on any
// failure), retried with a new load id while the destination calls its
// error retryable. The positions of a load say where it takes each of its
// slots (Kafka partitions, files, snapshot versions) from and to; the
// destination commits it only when it continues every slot (the chain rule,
// sinks/chain.go). So a load whose commit failed after its commit point, and
// which is loaded again, is refused as stale: when the flow's heads then
// stand exactly where the load leaves its slots, the batch is in the target
// once and the load counts as committed.

// prepared is a batch ready to load.
type prepared struct {
	write       func(ctx context.Context, ld sinks.Load) error
	rows        int64
	deadLetters int64
	// turn, when set, waits until the batch may load: a CDC batch loads
	// after the batches of its target applied before it ended (and may be
	// applied again, changing the fields above).
	turn func(ctx context.Context) error
	// again, when set, runs before each attempt after the first: the
	// outcome of the attempt before is unknown.
	again func()
	// done, when set, runs once the load ended: committed is true when this
	// load's own commit wrote its ledger row, false when the outcome is
	// unknown, the load was abandoned, or the batch is in the target by an
	// earlier attempt (whose effects a cache must then read back).
	done func(committed bool)
}

// staleError is a load refused because another writer moved one of its
// slots: its rows are not in the target, and loading it again would not
// change that.
type staleError struct {
	slot   batch.Position // a slot the ledger is not where the load took it from
	ledger string         // where the ledger is, described
	err    error          // the destination's sinks.ErrStale
}

func (e *staleError) Error() string {
	return fmt.Sprintf("%s: another writer committed it (the ledger is at %s, the load started at %s): %v",
		slotText(e.slot), e.ledger, sinks.Describe(e.slot), e.err)
}

func (e *staleError) Unwrap() error { return e.err }

func slotText(p batch.Position) string {
	if p.Topic != "" {
		return fmt.Sprintf("partition %s/%d", p.Topic, p.Partition)
	}
	if name, ok := strings.CutPrefix(p.File, snapshotSlotPrefix); ok {
		return "snapshot " + name
	}
	return "file " + p.File
}

// commitLoad loads p as one load of flow f moving its slots by c.From and
// c.To (c's counts are p's, taken after each write) and returns once its
// ledger row is written. It returns a *staleError when another writer moved
// a slot, the last error when retrying gave up, and nil when the batch is
// committed, by this load or, as its heads show, by an earlier attempt.
func (r *runner) commitLoad(ctx context.Context, f *spec.Flow, generation int64, p *prepared, c sinks.Commit) error {
	return r.commitAs(ctx, f, f.Name, generation, p, c, true)
}

// commitAs is commitLoad with the ledger flow whose chain the load
// continues named (a dead-letter replay keeps a chain of its own beside
// the flow's, deadletters.go). byHeads says whether heads standing at c.To
// after a stale refusal mean the batch is committed: not when the slot's
// positions do not tell batches apart, and the caller reads again instead.
func (r *runner) commitAs(ctx context.Context, f *spec.Flow, ledgerFlow string, generation int64, p *prepared, c sinks.Commit, byHeads bool) (err error) {
	ownCommit := false
	defer func() {
		if p.done != nil {
			p.done(ownCommit)
		}
	}()
	if p.turn != nil {
		if err := p.turn(ctx); err != nil {
			return err
		}
	}
	attempts := 0
	var t *tally
	ctx = withFlow(ctx, f.Name)
	err = r.retry(ctx, "load", func(ctx context.Context) error {
		if attempts++; attempts > 1 && p.again != nil {
			p.again()
		}
		t = &tally{}
		ctx = context.WithValue(ctx, tallyKey{}, t)
		ld, err := r.sink.Begin(ctx, sinks.LoadMeta{
			LoadID:     newLoadID(),
			Pipeline:   r.p.Pipeline,
			Flow:       ledgerFlow,
			Targets:    []string{f.Target},
			Generation: generation,
			Slots:      loadSlots(c),
		})
		if err != nil {
			return err
		}
		began := time.Now()
		err = p.write(ctx, ld)
		hash, vb, versionDone := r.claimVersion(f)
		if err == nil && vb != nil {
			err = ld.Write(ctx, batch.VersionTable, vb)
		}
		if err == nil {
			t.write = time.Since(began)
			c.Rows, c.DeadLetters, c.SchemaHash = p.rows, p.deadLetters, hash
			began = time.Now()
			err = ld.Commit(ctx, c)
			t.commit = time.Since(began)
			if ph, ok := ld.(sinks.Phased); ok {
				t.publish = ph.PublishTime()
				t.commit -= t.publish
			}
		}
		if versionDone != nil {
			versionDone(err == nil)
		}
		if err != nil {
			if aerr := ld.Abort(context.WithoutCancel(ctx)); aerr != nil {
				r.log.Warn("load not aborted; recovery removes it", "flow", f.Name, "err", aerr)
			}
			outcome := metrics.OutcomeFailed
			if errors.Is(err, sinks.ErrStale) {
				outcome = metrics.OutcomeStale
			}
			r.opts.Metrics.LoadFailed(r.p.Pipeline, f.Name, outcome)
		}
		return err
	})
	counted := func() {
		phases := map[string]time.Duration{metrics.PhaseWrite: t.write, metrics.PhaseCommit: t.commit}
		if t.publish > 0 {
			phases[metrics.PhasePublish] = t.publish
		}
		r.opts.Metrics.Committed(r.p.Pipeline, f.Name, f.Target, p.rows, t.reasons, phases)
		// A committed load: the flow and the destination are well, whatever
		// failed before it.
		r.opts.Metrics.FlowFailing(f.Name, nil)
		r.opts.Metrics.Destination(nil)
		ft := r.tally(ledgerFlow)
		ft.loads.Add(1)
		ft.rows.Add(p.rows)
		ft.deadLetters.Add(p.deadLetters)
	}
	if err == nil {
		ownCommit = true
		counted()
		return nil
	}
	if !errors.Is(err, sinks.ErrStale) || len(c.From) == 0 || !byHeads {
		return err
	}
	heads, herr := r.heads(ctx, ledgerFlow, c.From)
	if herr != nil {
		return herr
	}
	if heads.Reached(c.To) {
		// An earlier attempt, or an earlier run, committed this very batch.
		r.log.Debug("load found committed by an earlier attempt", "flow", f.Name, "to", c.To.Encode(), "attempts", attempts)
		if attempts > 1 {
			counted() // by this call's earlier attempt, of the same batch; not by an earlier run
		}
		return nil
	}
	se := &staleError{slot: c.From[0], ledger: "no position", err: err}
	for _, from := range c.From {
		h, ok := heads[sinks.Slot(from)]
		if !sinks.Continues(from, h, ok) {
			se.slot = from
			if ok {
				se.ledger = sinks.Describe(h)
			}
			break
		}
	}
	return se
}

// tally is what one load attempt wrote, for its metrics.
type tally struct {
	reasons                map[string]int64 // dead letters by reason
	write, commit, publish time.Duration
}

type tallyKey struct{}

// countDeadLetters adds dls to the tally of the load attempt ctx belongs
// to, if any.
func countDeadLetters(ctx context.Context, dls []batch.DeadLetter) {
	t, _ := ctx.Value(tallyKey{}).(*tally)
	if t == nil {
		return
	}
	if t.reasons == nil {
		t.reasons = map[string]int64{}
	}
	for _, d := range dls {
		t.reasons[d.Reason]++
	}
}

// heads reads the heads of the slots of a flow's positions from the
// destination; all its slots when ps is nil.
func (r *runner) heads(ctx context.Context, flow string, ps batch.Positions) (sinks.Heads, error) {
	var slots []string
	if ps != nil {
		slots = make([]string, len(ps))
		for i, p := range ps {
			slots[i] = sinks.Slot(p)
		}
	}
	var h sinks.Heads
	err := r.retry(ctx, "read heads", func(ctx context.Context) error {
		var err error
		h, err = r.sink.Heads(ctx, r.p.Pipeline, flow, slots)
		return err
	})
	return h, err
}

// loadSlots returns the slots a commit continues (those it reaches when it
// names no From), for sinks.LoadMeta.
func loadSlots(c sinks.Commit) []string {
	ps := c.From
	if len(ps) == 0 {
		ps = c.To
	}
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, sinks.Slot(p))
	}
	return out
}
