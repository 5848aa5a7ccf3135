package flows

import (
	"context"
	"errors"
	"log/slog"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/sinks"
)

// OpenCheckpoints opens the pipeline's checkpoint store, which its
// destination keeps (sinks.CheckpointKeeper): _sluice_state in ClickHouse,
// <path>/_sluice/checkpoint.db locally. log (nil discards) gets the store's
// lock takeovers.
func OpenCheckpoints(ctx context.Context, sink sinks.Sink, log *slog.Logger) (checkpoint.Store, error) {
	k, ok := sink.(sinks.CheckpointKeeper)
	if !ok {
		return nil, errors.New("the destination keeps no checkpoint store")
	}
	return k.OpenCheckpoints(ctx, log)
}

// retryingStore retries the operations of the checkpoint store that fail
// with an error its classifier calls retryable, as loads are retried
// (runner.retry): a short outage of the destination fails neither. Retrying
// is safe: reads and Delete are idempotent, and a Put whose first attempt
// landed is refused as stale by its compare-and-set, which the typed
// updates of package checkpoint answer by reading again.
type retryingStore struct {
	checkpoint.Store
	r *runner
	c sinks.Classifier // nil when the store classifies nothing
}

func newRetryingStore(s checkpoint.Store, r *runner) retryingStore {
	c, _ := s.(sinks.Classifier)
	return retryingStore{Store: s, r: r, c: c}
}

func (s retryingStore) Get(ctx context.Context, key checkpoint.Key) (e checkpoint.Entry, err error) {
	err = s.r.retryWith(ctx, "checkpoint "+key.String(), s.c, func(ctx context.Context) error {
		e, err = s.Store.Get(ctx, key)
		return err
	})
	return e, err
}

func (s retryingStore) Put(ctx context.Context, key checkpoint.Key, e checkpoint.Entry) error {
	return s.r.retryWith(ctx, "checkpoint "+key.String(), s.c, func(ctx context.Context) error {
		return s.Store.Put(ctx, key, e)
	})
}

func (s retryingStore) Delete(ctx context.Context, prefix checkpoint.Key) error {
	return s.r.retryWith(ctx, "checkpoint "+prefix.String(), s.c, func(ctx context.Context) error {
		return s.Store.Delete(ctx, prefix)
	})
}

func (s retryingStore) List(ctx context.Context, prefix checkpoint.Key) (out []checkpoint.KeyEntry, err error) {
	err = s.r.retryWith(ctx, "checkpoint "+prefix.String(), s.c, func(ctx context.Context) error {
		out, err = s.Store.List(ctx, prefix)
		return err
	})
	return out, err
}
