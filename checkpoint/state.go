package checkpoint

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
)

// OnceState is a once-flow's checkpoint (KindOnce).
type OnceState struct {
	// Complete: the flow finished; later runs skip it.
	Complete bool `json:"complete"`
	// Fingerprint identifies the flow's definition at its first start.
	Fingerprint string `json:"fingerprint"`
	// Files are the files the flow planned at its first start; a restart
	// after a crash reads these, not what arrived since.
	Files []string `json:"files,omitempty"`
	// StartedAt is the first start; zero when never started.
	StartedAt time.Time `json:"started_at"`
	// CompletedAt is set with Complete.
	CompletedAt time.Time `json:"completed_at,omitzero"`
}

// SnapshotState is a snapshot flow's checkpoint (KindSnapshot).
type SnapshotState struct {
	// Applied are the applied versions as text, in ascending order of the
	// flow's version type.
	Applied []string `json:"applied"`
	// Last is the last applied version, "" when none.
	Last string `json:"last"`
}

// Has reports whether version v was applied.
func (s SnapshotState) Has(v string) bool { return slices.Contains(s.Applied, v) }

// Add records version v as applied and last; it does nothing when v was
// applied already. The caller applies versions in ascending order.
func (s *SnapshotState) Add(v string) {
	if s.Has(v) {
		return
	}
	s.Applied = append(s.Applied, v)
	s.Last = v
}

// CursorState is an incremental cursor's checkpoint (KindCursor).
type CursorState struct {
	// LastValue is the cursor's value, as text, that the flow has read up
	// to.
	LastValue string `json:"last_value"`
	// Type is the cursor column's type, so that a changed type is detected.
	Type string `json:"type"`
	// Runs counts the flow's completed runs. The loads of a run record
	// their progress in ledger positions named after it, so a run that
	// stopped midway resumes where it stopped, and the next run reads again.
	Runs int64 `json:"runs,omitempty"`
}

// FirstOffset is the first offset a flow ever consumed from one partition
// (KindFirstOffsets). The full-refresh retention guard compares it with the
// partition's log start.
type FirstOffset struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// CutOverState is a live CDC flow's cut-over report (KindCutOver): its
// changes that came older than their key's last change replayed by a
// once-flow, so they missed the per-key cut-over from the replay to live
// CDC and landed in history (SCD type 2) or were ignored (SCD type 1).
type CutOverState struct {
	// Changes counts them (a change delivered again after a crash may count
	// twice).
	Changes int64 `json:"changes"`
	// Keys are the first MaxCutOverKeys keys, each once, as text.
	Keys []CutOverEntry `json:"keys,omitempty"`
	Last time.Time      `json:"last"`
}

// CutOverEntry is one key of a cut-over report.
type CutOverEntry struct {
	Key        string `json:"key"`         // the key columns' values
	Seq        string `json:"seq"`         // the live change's sequence
	ReplayFlow string `json:"replay_flow"` // the once-flow that replayed a newer change
}

// MaxCutOverKeys bounds the keys a cut-over report lists.
const MaxCutOverKeys = 100

// AddCutOvers adds changes to a flow's cut-over report.
func AddCutOvers(ctx context.Context, s Store, pipeline, flow string, keys []CutOverEntry, now time.Time) (CutOverState, error) {
	st, _, err := UpdateJSON(ctx, s, CutOverKey(pipeline, flow), func(st *CutOverState, _ bool) (bool, error) {
		st.Changes += int64(len(keys))
		st.Last = now
		for _, k := range keys {
			if len(st.Keys) >= MaxCutOverKeys {
				break
			}
			if !slices.ContainsFunc(st.Keys, func(x CutOverEntry) bool { return x.Key == k.Key }) {
				st.Keys = append(st.Keys, k)
			}
		}
		return true, nil
	})
	return st, err
}

// GetCutOvers returns a flow's cut-over report; the zero state when none.
func GetCutOvers(ctx context.Context, s Store, pipeline, flow string) (CutOverState, error) {
	st, _, err := getOr[CutOverState](ctx, s, CutOverKey(pipeline, flow))
	return st, err
}

// CutOverKey names a flow's cut-over report.
func CutOverKey(pipeline, flow string) Key {
	return Key{Pipeline: pipeline, Kind: KindCutOver, Flow: flow}
}

// OnceKey, SnapshotKey and CursorKey name a flow's entry of that kind.
func OnceKey(pipeline, flow string) Key {
	return Key{Pipeline: pipeline, Kind: KindOnce, Flow: flow}
}

// SnapshotKey names a snapshot flow's entry.
func SnapshotKey(pipeline, flow string) Key {
	return Key{Pipeline: pipeline, Kind: KindSnapshot, Flow: flow}
}

// CursorKey names a flow's cursor entry.
func CursorKey(pipeline, flow string) Key {
	return Key{Pipeline: pipeline, Kind: KindCursor, Flow: flow}
}

// FirstOffsetKey names a flow's first-offset entry of one partition; its
// Name is "<topic>/<partition>".
func FirstOffsetKey(pipeline, flow, topic string, partition int32) Key {
	return Key{Pipeline: pipeline, Kind: KindFirstOffsets, Flow: flow,
		Name: topic + "/" + strconv.FormatInt(int64(partition), 10)}
}

// GetJSON reads key and decodes its JSON value into a T. When the key has no
// value it returns ErrNotFound (wrapped) and an Entry whose Revision is the
// one a Put must give.
func GetJSON[T any](ctx context.Context, s Store, key Key) (T, Entry, error) {
	var v T
	e, err := s.Get(ctx, key)
	if err != nil {
		return v, e, err
	}
	if err := json.Unmarshal(e.Value, &v); err != nil {
		return v, e, fmt.Errorf("checkpoint: decode %s: %w", key, err)
	}
	return v, e, nil
}

// PutJSON stores v, JSON-encoded, under key if its stored revision is
// revision (see Store.Put).
func PutJSON[T any](ctx context.Context, s Store, key Key, v T, revision uint64) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("checkpoint: encode %s: %w", key, err)
	}
	return s.Put(ctx, key, Entry{Value: b, Revision: revision})
}

// updateAttempts bounds how often UpdateJSON reads again after another
// writer got in between; updateBackoff caps its wait between attempts.
const updateAttempts = 64

var updateBackoff = 100 * time.Millisecond

// UpdateJSON reads key, lets change modify the decoded value (the zero T and
// exists false when the key has no value) and writes it back by
// compare-and-set; when another writer got in between (ErrStale) it reads
// again and calls change again. change returns false to leave the key as it
// is. It returns the value and revision that are stored when it returns.
//
// change must be idempotent with respect to its own result (set a flag, add
// an element if missing), so that applying it again after an unknown outcome
// replays harmlessly.
func UpdateJSON[T any](ctx context.Context, s Store, key Key, change func(v *T, exists bool) (bool, error)) (T, uint64, error) {
	var zero T
	backoff := time.Millisecond
	for range updateAttempts {
		v, e, err := GetJSON[T](ctx, s, key)
		exists := err == nil
		if err != nil && !errors.Is(err, ErrNotFound) {
			return zero, 0, err
		}
		if !exists {
			v = zero
		}
		changed, err := change(&v, exists)
		if err != nil {
			return zero, 0, err
		}
		if !changed {
			return v, e.Revision, nil
		}
		err = PutJSON(ctx, s, key, v, e.Revision)
		if err == nil {
			return v, e.Revision + 1, nil
		}
		if !errors.Is(err, ErrStale) {
			return zero, 0, err
		}
		t := time.NewTimer(backoff/2 + rand.N(backoff))
		select {
		case <-ctx.Done():
			t.Stop()
			return zero, 0, ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, updateBackoff)
	}
	return zero, 0, fmt.Errorf("checkpoint: update %s: still contended after %d attempts: %w", key, updateAttempts, ErrStale)
}

// getOr reads a typed entry; absent is the zero T with the revision a Put
// must give.
func getOr[T any](ctx context.Context, s Store, key Key) (T, uint64, error) {
	v, e, err := GetJSON[T](ctx, s, key)
	if errors.Is(err, ErrNotFound) {
		var zero T
		return zero, e.Revision, nil
	}
	return v, e.Revision, err
}

// GetOnce returns a once-flow's state and revision; a flow never started has
// the zero OnceState (StartedAt zero).
func GetOnce(ctx context.Context, s Store, pipeline, flow string) (OnceState, uint64, error) {
	return getOr[OnceState](ctx, s, OnceKey(pipeline, flow))
}

// PutOnce stores a once-flow's state if its stored revision is revision.
func PutOnce(ctx context.Context, s Store, pipeline, flow string, st OnceState, revision uint64) error {
	return PutJSON(ctx, s, OnceKey(pipeline, flow), st, revision)
}

// BeginOnce records a once-flow's first start with the definition's
// fingerprint and the files it plans, unless it was started before: then it
// returns the state of that start unchanged (a restart resumes the plan of
// the first start; the caller compares the fingerprint). Replaying it is
// harmless.
func BeginOnce(ctx context.Context, s Store, pipeline, flow, fingerprint string, files []string, now time.Time) (OnceState, error) {
	st, _, err := UpdateJSON(ctx, s, OnceKey(pipeline, flow), func(st *OnceState, exists bool) (bool, error) {
		if exists && !st.StartedAt.IsZero() {
			return false, nil
		}
		*st = OnceState{Fingerprint: fingerprint, Files: slices.Clone(files), StartedAt: now.UTC()}
		return true, nil
	})
	return st, err
}

// CompleteOnce marks a once-flow complete. Replaying it is harmless: a flow
// already complete keeps its CompletedAt.
func CompleteOnce(ctx context.Context, s Store, pipeline, flow string, now time.Time) (OnceState, error) {
	st, _, err := UpdateJSON(ctx, s, OnceKey(pipeline, flow), func(st *OnceState, exists bool) (bool, error) {
		if st.Complete {
			return false, nil
		}
		if st.StartedAt.IsZero() {
			st.StartedAt = now.UTC()
		}
		st.Complete, st.CompletedAt = true, now.UTC()
		return true, nil
	})
	return st, err
}

// GetSnapshot returns a snapshot flow's state and revision.
func GetSnapshot(ctx context.Context, s Store, pipeline, flow string) (SnapshotState, uint64, error) {
	return getOr[SnapshotState](ctx, s, SnapshotKey(pipeline, flow))
}

// PutSnapshot stores a snapshot flow's state if its stored revision is
// revision.
func PutSnapshot(ctx context.Context, s Store, pipeline, flow string, st SnapshotState, revision uint64) error {
	return PutJSON(ctx, s, SnapshotKey(pipeline, flow), st, revision)
}

// AddSnapshotVersion records version as applied (SnapshotState.Add).
// Replaying it is harmless.
func AddSnapshotVersion(ctx context.Context, s Store, pipeline, flow, version string) (SnapshotState, error) {
	st, _, err := UpdateJSON(ctx, s, SnapshotKey(pipeline, flow), func(st *SnapshotState, _ bool) (bool, error) {
		if st.Has(version) {
			return false, nil
		}
		st.Add(version)
		return true, nil
	})
	return st, err
}

// GetCursor returns a flow's cursor and revision; the zero CursorState when
// none was stored.
func GetCursor(ctx context.Context, s Store, pipeline, flow string) (CursorState, uint64, error) {
	return getOr[CursorState](ctx, s, CursorKey(pipeline, flow))
}

// PutCursor stores a flow's cursor if its stored revision is revision. A
// retried Put whose earlier attempt landed finds the cursor stored at the
// next revision: that counts as stored, not as another writer's.
func PutCursor(ctx context.Context, s Store, pipeline, flow string, st CursorState, revision uint64) error {
	err := PutJSON(ctx, s, CursorKey(pipeline, flow), st, revision)
	if !errors.Is(err, ErrStale) {
		return err
	}
	got, rev, gerr := GetCursor(ctx, s, pipeline, flow)
	if gerr == nil && rev == revision+1 && got == st {
		return nil
	}
	return err
}

// RecordFirstOffset records offset as the first offset the flow consumed
// from topic/partition unless one is recorded already, and returns the
// recorded one (the first writer wins).
func RecordFirstOffset(ctx context.Context, s Store, pipeline, flow, topic string, partition int32, offset int64) (int64, error) {
	fo, _, err := UpdateJSON(ctx, s, FirstOffsetKey(pipeline, flow, topic, partition), func(fo *FirstOffset, exists bool) (bool, error) {
		if exists {
			return false, nil
		}
		*fo = FirstOffset{Topic: topic, Partition: partition, Offset: offset}
		return true, nil
	})
	return fo.Offset, err
}

// FirstOffsets lists the first offsets of a flow (of every flow of the
// pipeline when flow is ""), ordered by topic and partition.
func FirstOffsets(ctx context.Context, s Store, pipeline, flow string) ([]FirstOffset, error) {
	entries, err := s.List(ctx, Key{Pipeline: pipeline, Kind: KindFirstOffsets, Flow: flow})
	if err != nil {
		return nil, err
	}
	out := make([]FirstOffset, 0, len(entries))
	for _, e := range entries {
		var fo FirstOffset
		if err := json.Unmarshal(e.Value, &fo); err != nil {
			return nil, fmt.Errorf("checkpoint: decode %s: %w", e.Key, err)
		}
		out = append(out, fo)
	}
	slices.SortStableFunc(out, func(a, b FirstOffset) int {
		return cmp.Or(strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return out, nil
}
