package flows

import (
	"context"
	"sync/atomic"

	"github.com/sluicehq/sluice/cdc"
)

// The batches of a CDC target form one sequence: the engine applies them
// one at a time (cdcTarget.mu), each over the key states its predecessors
// left, and their loads commit in that order. A load does not wait for the
// next batch's engine, nor the engine for a load: batch N+1 is applied
// while batch N is written and committed. Until its load ended, a batch's
// output is pending, and the engine reads the states of pending outputs
// over the committed ones of the cache (pendingStore).
//
// When a load does not commit (an error, an abandoned batch, an outcome
// unknown), every output applied after it was built on states that may
// never exist: the target's epoch moves on, and each batch applied in an
// earlier epoch is applied again when its turn comes, over what the
// destination then holds. Work that needs the whole target (a snapshot, a
// state expiry, a truncate's rewrite) takes a turn of its own and runs
// alone (exclusive).

// pendingOutput is the key states of an applied batch whose load has not
// ended.
type pendingOutput struct {
	states map[string]*cdc.KeyState // nil: the key has no state
	table  *cdc.TableState
	done   atomic.Bool // the load committed and the cache holds the states
}

func newPendingOutput(out *cdc.Output) *pendingOutput {
	po := &pendingOutput{states: make(map[string]*cdc.KeyState, len(out.States)), table: out.Table}
	for _, kc := range out.States {
		po.states[kc.Key] = kc.State
	}
	return po
}

// ticket is a batch's turn in its target's sequence of loads.
type ticket struct {
	t     *cdcTarget
	prev  <-chan struct{} // closed when the previous turn ended
	mine  chan struct{}   // closed when this one ended
	epoch uint64          // the target's epoch when the batch was applied
	entry *pendingOutput  // nil: the batch is applied again at its turn
}

// begin prepares an apply: the caller holds t.mu. It drops the pending
// outputs of loads that committed, and all of them when the epoch moved
// on, and returns the epoch the apply belongs to.
func (t *cdcTarget) begin() uint64 {
	if e := t.epoch.Load(); e != t.pendingEpoch {
		t.pending, t.pendingEpoch = nil, e
	}
	n := 0
	for n < len(t.pending) && t.pending[n].done.Load() {
		n++
	}
	if n > 0 {
		t.pending = append(t.pending[:0], t.pending[n:]...)
	}
	return t.pendingEpoch
}

// restart starts a new epoch: the caller holds t.mu at its turn, so every
// earlier load ended, and every output applied so far in the old epoch is
// stale.
func (t *cdcTarget) restart() uint64 {
	t.epoch.Add(1)
	return t.begin()
}

// enqueue gives an applied batch the next turn; the caller holds t.mu. A
// nil out takes a turn without a pending output (the batch applies again
// at its turn).
func (t *cdcTarget) enqueue(epoch uint64, out *cdc.Output) *ticket {
	tk := &ticket{t: t, prev: t.tail, mine: make(chan struct{}), epoch: epoch}
	t.tail = tk.mine
	tk.pend(out)
	return tk
}

// pend records out as the ticket's pending output; the caller holds t.mu.
func (tk *ticket) pend(out *cdc.Output) {
	tk.entry = nil
	if out != nil {
		tk.entry = newPendingOutput(out)
		tk.t.pending = append(tk.t.pending, tk.entry)
	}
}

// wait waits for the turn and reports whether the batch must be applied
// again.
func (tk *ticket) wait(ctx context.Context) (stale bool, err error) {
	if tk.prev != nil {
		select {
		case <-tk.prev:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	return tk.entry == nil || tk.t.epoch.Load() != tk.epoch, nil
}

// end ends the turn. A committed output's states go into the cache. When
// the load did not commit (or its outcome is unknown), the cache forgets
// everything and the epoch moves on, once every earlier turn ended.
func (tk *ticket) end(out *cdc.Output, committed bool) {
	t := tk.t
	if committed {
		t.cache.Commit(out)
		if tk.entry != nil {
			tk.entry.done.Store(true)
		}
	} else {
		tk.waitPrev() // failures are taken in the order of the turns
		t.cache.Reset()
		t.epoch.Add(1)
	}
	tk.close()
}

// waitPrev waits, however long, for the previous turn to end.
func (tk *ticket) waitPrev() {
	if tk.prev != nil {
		<-tk.prev
	}
}

// close ends the turn, never before the previous one ended: the next
// turn starts only when every earlier one ended.
func (tk *ticket) close() {
	tk.waitPrev()
	close(tk.mine)
}

// exclusive runs fn at a turn of its own, holding t.mu: no batch of the
// target is applied or loaded meanwhile, and fn sees the destination's
// committed state through the cache.
func (t *cdcTarget) exclusive(ctx context.Context, fn func() error) error {
	t.mu.Lock()
	tk := t.enqueue(t.begin(), nil)
	t.mu.Unlock()
	defer tk.close()
	if _, err := tk.wait(ctx); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.restart() // batches applied while this one waited did not see what fn writes
	return fn()
}

// pendingStore is the state store of a target's engines: its pending
// outputs over the committed states of its cache. It is read under t.mu.
type pendingStore struct{ t *cdcTarget }

func (s pendingStore) Get(ctx context.Context, keys []string) ([]*cdc.KeyState, error) {
	return layered{base: s.t.cache, top: s.t.pending}.Get(ctx, keys)
}

func (s pendingStore) Table(ctx context.Context) (cdc.TableState, error) {
	return layered{base: s.t.cache, top: s.t.pending}.Table(ctx)
}

// layered is a state store showing outputs not committed yet, the newest
// last, over a base store.
type layered struct {
	base cdc.StateStore
	top  []*pendingOutput
}

func (l layered) Get(ctx context.Context, keys []string) ([]*cdc.KeyState, error) {
	got, err := l.base.Get(ctx, keys) // a slice of its own, as every store returns
	if err != nil || len(l.top) == 0 {
		return got, err
	}
	for at, k := range keys {
		for i := len(l.top) - 1; i >= 0; i-- {
			if st, ok := l.top[i].states[k]; ok {
				got[at] = st // nil: removed
				break
			}
		}
	}
	return got, nil
}

func (l layered) Table(ctx context.Context) (cdc.TableState, error) {
	for i := len(l.top) - 1; i >= 0; i-- {
		if ts := l.top[i].table; ts != nil {
			return *ts, nil
		}
	}
	return l.base.Table(ctx)
}
