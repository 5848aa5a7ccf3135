package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/checkpoint"
)

// Factory makes a fresh, empty destination for one subtest and returns a
// function that opens a Store on it. Each call of open must return a new
// Store on the same destination; it fails t itself on error.
type Factory func(t *testing.T) (open func() checkpoint.Store)

// Run runs the conformance suite.
func Run(t *testing.T, newDestination Factory) {
	tests := []struct {
		name string
		run  func(t *testing.T, h *harness)
	}{
		{"missing_key", testMissing},
		{"values_round_trip", testRoundTrip},
		{"durable_on_return", testDurable},
		{"stale_write_refused", testStale},
		{"two_writers_one_wins", testTwoWriters},
		{"concurrent_updates_not_lost", testConcurrentUpdates},
		{"delete_by_prefix", testDelete},
		{"list_by_prefix", testList},
		{"crash_before_checkpoint_replays_harmlessly", testCrashBeforeCheckpoint},
		{"crash_after_checkpoint_replays_harmlessly", testCrashAfterCheckpoint},
		{"invalid_requests_refused", testInvalid},
		{"typed_state", testTypedState},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(t, &harness{t: t, newDestination: newDestination})
		})
	}
}

// harness opens Stores on fresh destinations and closes them when the
// subtest ends.
type harness struct {
	t              *testing.T
	newDestination Factory
}

// destination makes a fresh destination; its open returns Stores closed at
// the end of the subtest (or earlier by the caller).
func (h *harness) destination() func() checkpoint.Store {
	open := h.newDestination(h.t)
	return func() checkpoint.Store {
		s := open()
		var once sync.Once
		h.t.Cleanup(func() { once.Do(func() { s.Close() }) })
		return &closeOnce{Store: s, once: &once}
	}
}

// closeOnce lets a test close a Store early without the cleanup closing it
// again.
type closeOnce struct {
	checkpoint.Store
	once *sync.Once
}

func (c *closeOnce) Close() error {
	var err error
	c.once.Do(func() { err = c.Store.Close() })
	return err
}

const pipeline = "storetest"

func ctxOf(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func mustPut(t *testing.T, s checkpoint.Store, k checkpoint.Key, value string, rev uint64) {
	t.Helper()
	if err := s.Put(ctxOf(t), k, checkpoint.Entry{Value: []byte(value), Revision: rev}); err != nil {
		t.Fatalf("Put %s at revision %d: %v", k, rev, err)
	}
}

// mustGet reads a key that has a value.
func mustGet(t *testing.T, s checkpoint.Store, k checkpoint.Key) checkpoint.Entry {
	t.Helper()
	e, err := s.Get(ctxOf(t), k)
	if err != nil {
		t.Fatalf("Get %s: %v", k, err)
	}
	return e
}

// wantEntry checks the value and revision of a key.
func wantEntry(t *testing.T, s checkpoint.Store, k checkpoint.Key, value string, rev uint64) {
	t.Helper()
	e := mustGet(t, s, k)
	if string(e.Value) != value || e.Revision != rev {
		t.Fatalf("Get %s = %q at revision %d, want %q at revision %d", k, clip(e.Value), e.Revision, clip([]byte(value)), rev)
	}
}

// wantAbsent checks that a key has no value and the revision a Put must
// give.
func wantAbsent(t *testing.T, s checkpoint.Store, k checkpoint.Key, rev uint64) {
	t.Helper()
	e, err := s.Get(ctxOf(t), k)
	if !errors.Is(err, checkpoint.ErrNotFound) {
		t.Fatalf("Get %s: err %v, want ErrNotFound", k, err)
	}
	if e.Revision != rev || len(e.Value) != 0 {
		t.Fatalf("Get %s (absent) = %q at revision %d, want no value at revision %d", k, clip(e.Value), e.Revision, rev)
	}
}

func clip(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + fmt.Sprintf("...(%d bytes)", len(b))
	}
	return string(b)
}

func listKeys(t *testing.T, s checkpoint.Store, prefix checkpoint.Key) []checkpoint.Key {
	t.Helper()
	entries, err := s.List(ctxOf(t), prefix)
	if err != nil {
		t.Fatalf("List %s: %v", prefix, err)
	}
	keys := make([]checkpoint.Key, len(entries))
	for i, e := range entries {
		keys[i] = e.Key
	}
	return keys
}

func testMissing(t *testing.T, h *harness) {
	s := h.destination()()
	k := checkpoint.OnceKey(pipeline, "never")
	wantAbsent(t, s, k, 0)
	if keys := listKeys(t, s, checkpoint.Key{Pipeline: pipeline}); len(keys) != 0 {
		t.Fatalf("List of an empty destination = %v, want none", keys)
	}
	if err := s.Delete(ctxOf(t), checkpoint.Key{Pipeline: pipeline}); err != nil {
		t.Fatalf("Delete of nothing: %v", err)
	}
	wantAbsent(t, s, k, 0)
}

func testRoundTrip(t *testing.T, h *harness) {
	s := h.destination()()
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	large := bytes.Repeat([]byte(`{"file":"s3://bucket/history/2024/part-000123.parquet"},`), 12000) // ~650 KiB
	tests := []struct {
		name  string
		key   checkpoint.Key
		value []byte
	}{
		{"json", checkpoint.OnceKey(pipeline, "orders_backfill"), []byte(`{"complete":true,"files":["a.parquet"]}`)},
		{"every_byte", checkpoint.Key{Pipeline: pipeline, Kind: "raw", Flow: "bytes"}, all},
		{"large", checkpoint.Key{Pipeline: pipeline, Kind: "raw", Flow: "large"}, large},
		{"name_with_slash", checkpoint.FirstOffsetKey(pipeline, "live", "orders.v1", 7), []byte(`{"offset":42}`)},
		{"odd_parts", checkpoint.Key{Pipeline: pipeline, Kind: "k%2F", Flow: "f/g\x00", Name: "ünï\x01 'q\"\\"}, []byte("x")},
		{"unicode_value", checkpoint.Key{Pipeline: pipeline, Kind: "raw", Flow: "unicode"}, []byte("zürich ✓ 東京")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := time.Now()
			if err := s.Put(ctxOf(t), tc.key, checkpoint.Entry{Value: tc.value}); err != nil {
				t.Fatalf("Put: %v", err)
			}
			after := time.Now()
			e := mustGet(t, s, tc.key)
			if !bytes.Equal(e.Value, tc.value) || e.Revision != 1 {
				t.Fatalf("Get = %q at revision %d, want %q at revision 1", clip(e.Value), e.Revision, clip(tc.value))
			}
			if e.UpdatedAt.Before(before.Truncate(time.Second).Add(-time.Second)) || e.UpdatedAt.After(after.Add(time.Second)) {
				t.Fatalf("UpdatedAt %v, want between %v and %v", e.UpdatedAt, before, after)
			}
			next := append(slices.Clone(tc.value), '!')
			if err := s.Put(ctxOf(t), tc.key, checkpoint.Entry{Value: next, Revision: 1}); err != nil {
				t.Fatalf("second Put: %v", err)
			}
			e = mustGet(t, s, tc.key)
			if !bytes.Equal(e.Value, next) || e.Revision != 2 {
				t.Fatalf("Get after second Put = %q at revision %d, want %q at revision 2", clip(e.Value), e.Revision, clip(next))
			}
			keys := listKeys(t, s, tc.key)
			if !slices.Contains(keys, tc.key) {
				t.Fatalf("List %s = %v, want it to hold the key", tc.key, keys)
			}
		})
	}
}

func testDurable(t *testing.T, h *harness) {
	open := h.destination()
	a := open()
	peer := open()
	keys := []checkpoint.Key{
		checkpoint.OnceKey(pipeline, "f1"),
		checkpoint.CursorKey(pipeline, "f1"),
		checkpoint.FirstOffsetKey(pipeline, "f1", "t", 0),
	}
	for i, k := range keys {
		mustPut(t, a, k, fmt.Sprintf("v%d", i), 0)
		// Another Store on the destination reads it at once.
		wantEntry(t, peer, k, fmt.Sprintf("v%d", i), 1)
	}
	mustPut(t, a, keys[0], "v0-2", 1)
	if err := a.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := peer.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	b := open()
	wantEntry(t, b, keys[0], "v0-2", 2)
	wantEntry(t, b, keys[1], "v1", 1)
	wantEntry(t, b, keys[2], "v2", 1)
	mustPut(t, b, keys[1], "v1-2", 1)
	if err := b.Delete(ctxOf(t), keys[2]); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	c := open()
	wantEntry(t, c, keys[1], "v1-2", 2)
	wantAbsent(t, c, keys[2], 2)
}

func testStale(t *testing.T, h *harness) {
	tests := []struct {
		name    string
		writes  int    // Puts before the stale one
		deleted bool   // then a Delete
		put     uint64 // the revision the stale Put names
	}{
		{"create_over_existing", 1, false, 0},
		{"behind", 2, false, 1},
		{"ahead", 1, false, 5},
		{"never_written", 0, false, 3},
		{"recreate_after_delete_from_zero", 1, true, 0},
		{"write_after_delete_from_read_before", 1, true, 1},
	}
	s := h.destination()()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := checkpoint.Key{Pipeline: pipeline, Kind: "stale", Flow: tc.name}
			var rev uint64
			for i := range tc.writes {
				mustPut(t, s, k, fmt.Sprintf("w%d", i), rev)
				rev++
			}
			if tc.deleted {
				if err := s.Delete(ctxOf(t), k); err != nil {
					t.Fatalf("Delete: %v", err)
				}
				rev++
			}
			err := s.Put(ctxOf(t), k, checkpoint.Entry{Value: []byte("stale"), Revision: tc.put})
			if !errors.Is(err, checkpoint.ErrStale) {
				t.Fatalf("Put at revision %d over revision %d: err %v, want ErrStale", tc.put, rev, err)
			}
			if tc.writes == 0 || tc.deleted {
				wantAbsent(t, s, k, rev)
			} else {
				wantEntry(t, s, k, fmt.Sprintf("w%d", tc.writes-1), rev)
			}
			// The stored revision still works.
			mustPut(t, s, k, "fresh", rev)
			wantEntry(t, s, k, "fresh", rev+1)
		})
	}
}

func testTwoWriters(t *testing.T, h *harness) {
	open := h.destination()
	a, b := open(), open()
	k := checkpoint.SnapshotKey(pipeline, "contended")
	for round := range 4 {
		ea, errA := a.Get(ctxOf(t), k)
		eb, errB := b.Get(ctxOf(t), k)
		if round == 0 && (!errors.Is(errA, checkpoint.ErrNotFound) || !errors.Is(errB, checkpoint.ErrNotFound)) {
			t.Fatalf("round 0: Get: %v, %v; want ErrNotFound", errA, errB)
		}
		if round > 0 && (errA != nil || errB != nil) {
			t.Fatalf("round %d: Get: %v, %v", round, errA, errB)
		}
		if ea.Revision != eb.Revision {
			t.Fatalf("round %d: the two Stores read revisions %d and %d", round, ea.Revision, eb.Revision)
		}
		rev := ea.Revision
		va, vb := fmt.Sprintf("a%d", round), fmt.Sprintf("b%d", round)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); errA = a.Put(ctxOf(t), k, checkpoint.Entry{Value: []byte(va), Revision: rev}) }()
		go func() { defer wg.Done(); errB = b.Put(ctxOf(t), k, checkpoint.Entry{Value: []byte(vb), Revision: rev}) }()
		wg.Wait()
		var winner string
		switch {
		case errA == nil && errors.Is(errB, checkpoint.ErrStale):
			winner = va
		case errB == nil && errors.Is(errA, checkpoint.ErrStale):
			winner = vb
		default:
			t.Fatalf("round %d: Puts at the same revision returned %v and %v; want one nil and one ErrStale", round, errA, errB)
		}
		wantEntry(t, a, k, winner, rev+1)
		wantEntry(t, b, k, winner, rev+1)
	}
}

type counter struct {
	N      int      `json:"n"`
	Writer []string `json:"writers"`
}

func testConcurrentUpdates(t *testing.T, h *harness) {
	const stores, perStore, updates = 2, 2, 6
	open := h.destination()
	k := checkpoint.Key{Pipeline: pipeline, Kind: "counter", Flow: "shared"}
	var (
		mu        sync.Mutex
		succeeded []string
		errs      []error
		wg        sync.WaitGroup
	)
	for si := range stores {
		s := open()
		for g := range perStore {
			wg.Add(1)
			go func() {
				defer wg.Done()
				own := checkpoint.Key{Pipeline: pipeline, Kind: "counter", Flow: fmt.Sprintf("own_%d_%d", si, g)}
				var ownRev uint64
				for u := range updates {
					id := fmt.Sprintf("s%d.g%d.u%d", si, g, u)
					_, _, err := checkpoint.UpdateJSON(ctxOf(t), s, k, func(c *counter, _ bool) (bool, error) {
						c.N++
						c.Writer = append(c.Writer, id)
						return true, nil
					})
					mu.Lock()
					if err != nil {
						errs = append(errs, fmt.Errorf("%s: %w", id, err))
					} else {
						succeeded = append(succeeded, id)
					}
					mu.Unlock()
					// A writer of its own key never meets another.
					if err := s.Put(ctxOf(t), own, checkpoint.Entry{Value: []byte(id), Revision: ownRev}); err != nil {
						mu.Lock()
						errs = append(errs, fmt.Errorf("%s: own key: %w", id, err))
						mu.Unlock()
					} else {
						ownRev++
					}
				}
			}()
		}
	}
	wg.Wait()
	for _, err := range errs {
		t.Errorf("update: %v", err)
	}
	check := open()
	c, e, err := checkpoint.GetJSON[counter](ctxOf(t), check, k)
	if err != nil {
		t.Fatalf("GetJSON: %v", err)
	}
	if c.N != len(succeeded) || e.Revision != uint64(len(succeeded)) {
		t.Fatalf("counter %d at revision %d after %d successful updates: an update was lost", c.N, e.Revision, len(succeeded))
	}
	got, want := slices.Sorted(slices.Values(c.Writer)), slices.Sorted(slices.Values(succeeded))
	if !slices.Equal(got, want) {
		t.Fatalf("writers recorded %v, want %v", got, want)
	}
	if len(succeeded) != stores*perStore*updates {
		t.Fatalf("%d of %d updates succeeded", len(succeeded), stores*perStore*updates)
	}
	for si := range stores {
		for g := range perStore {
			own := checkpoint.Key{Pipeline: pipeline, Kind: "counter", Flow: fmt.Sprintf("own_%d_%d", si, g)}
			wantEntry(t, check, own, fmt.Sprintf("s%d.g%d.u%d", si, g, updates-1), updates)
		}
	}
}

// population is the set of keys the prefix tests start from.
func population() []checkpoint.Key {
	return []checkpoint.Key{
		{Pipeline: "p1", Kind: checkpoint.KindOnce, Flow: "f1"},
		{Pipeline: "p1", Kind: checkpoint.KindOnce, Flow: "f1x"},
		{Pipeline: "p1", Kind: checkpoint.KindOnce, Flow: "f2"},
		{Pipeline: "p1", Kind: checkpoint.KindCursor, Flow: "f1"},
		{Pipeline: "p1", Kind: checkpoint.KindFirstOffsets, Flow: "f1", Name: "t/0"},
		{Pipeline: "p1", Kind: checkpoint.KindFirstOffsets, Flow: "f1", Name: "t/1"},
		{Pipeline: "p1", Kind: checkpoint.KindFirstOffsets, Flow: "f2", Name: "t/0"},
		{Pipeline: "p1x", Kind: checkpoint.KindOnce, Flow: "f1"},
		{Pipeline: "p2", Kind: checkpoint.KindOnce, Flow: "f1"},
	}
}

func populate(t *testing.T, s checkpoint.Store) {
	t.Helper()
	for _, k := range population() {
		mustPut(t, s, k, k.String(), 0)
	}
}

// selected returns the population keys prefix selects, in List order.
func selected(prefix checkpoint.Key) []checkpoint.Key {
	var out []checkpoint.Key
	for _, k := range population() {
		if prefix.Matches(k) {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, checkpoint.Key.Compare)
	return out
}

var prefixCases = []struct {
	name   string
	prefix checkpoint.Key
	want   int // how many population keys it selects
}{
	{"pipeline", checkpoint.Key{Pipeline: "p1"}, 7},
	{"pipeline_kind", checkpoint.Key{Pipeline: "p1", Kind: checkpoint.KindFirstOffsets}, 3},
	{"pipeline_kind_flow", checkpoint.Key{Pipeline: "p1", Kind: checkpoint.KindFirstOffsets, Flow: "f1"}, 2},
	{"exact", checkpoint.Key{Pipeline: "p1", Kind: checkpoint.KindFirstOffsets, Flow: "f1", Name: "t/1"}, 1},
	{"exact_without_name", checkpoint.Key{Pipeline: "p1", Kind: checkpoint.KindOnce, Flow: "f1"}, 1},
	{"flow_of_every_kind", checkpoint.Key{Pipeline: "p1", Flow: "f1"}, 4},
	{"name_of_every_flow", checkpoint.Key{Pipeline: "p1", Name: "t/0"}, 2},
	{"nothing", checkpoint.Key{Pipeline: "p3"}, 0},
}

func testDelete(t *testing.T, h *harness) {
	for _, tc := range prefixCases {
		t.Run(tc.name, func(t *testing.T) {
			open := h.destination()
			s := open()
			populate(t, s)
			if err := s.Delete(ctxOf(t), tc.prefix); err != nil {
				t.Fatalf("Delete %s: %v", tc.prefix, err)
			}
			gone := selected(tc.prefix)
			if len(gone) != tc.want {
				t.Fatalf("the case selects %d keys, want %d", len(gone), tc.want)
			}
			var kept []checkpoint.Key
			for _, k := range population() {
				if !slices.Contains(gone, k) {
					kept = append(kept, k)
				}
			}
			slices.SortFunc(kept, checkpoint.Key.Compare)
			other := open() // what another Store sees
			if got := listKeys(t, other, checkpoint.Key{}); !slices.Equal(got, kept) {
				t.Fatalf("after Delete %s List = %v, want %v", tc.prefix, got, kept)
			}
			for _, k := range gone {
				wantAbsent(t, other, k, 2)
			}
			for _, k := range kept {
				wantEntry(t, other, k, k.String(), 1)
			}
			// A deleted key is created again from the revision of its deletion.
			for _, k := range gone {
				if err := other.Put(ctxOf(t), k, checkpoint.Entry{Value: []byte("again")}); !errors.Is(err, checkpoint.ErrStale) {
					t.Fatalf("Put %s at revision 0 after Delete: err %v, want ErrStale", k, err)
				}
				mustPut(t, other, k, "again", 2)
				wantEntry(t, s, k, "again", 3)
			}
		})
	}
}

func testList(t *testing.T, h *harness) {
	s := h.destination()()
	populate(t, s)
	k := population()[0]
	mustPut(t, s, k, "second", 1)
	for _, tc := range prefixCases {
		t.Run(tc.name, func(t *testing.T) {
			entries, err := s.List(ctxOf(t), tc.prefix)
			if err != nil {
				t.Fatalf("List: %v", err)
			}
			want := selected(tc.prefix)
			if len(want) != tc.want {
				t.Fatalf("the case selects %d keys, want %d", len(want), tc.want)
			}
			if len(entries) != len(want) {
				t.Fatalf("List %s returned %d entries, want %d (%v)", tc.prefix, len(entries), len(want), want)
			}
			for i, e := range entries {
				value, rev := e.Key.String(), uint64(1)
				if e.Key == k {
					value, rev = "second", 2
				}
				if e.Key != want[i] || string(e.Value) != value || e.Revision != rev || e.UpdatedAt.IsZero() {
					t.Fatalf("List %s entry %d = %v %q rev %d at %v, want %v %q rev %d", tc.prefix, i, e.Key, e.Value, e.Revision, e.UpdatedAt, want[i], value, rev)
				}
			}
		})
	}
	t.Run("everything", func(t *testing.T) {
		if got, want := listKeys(t, s, checkpoint.Key{}), selected(checkpoint.Key{}); !slices.Equal(got, want) {
			t.Fatalf("List of everything = %v, want %v", got, want)
		}
	})
}

// ledger stands for the destination's _sluice_loads: what a once-flow's
// loads committed. The checkpoint is derived from it, so a replay of the
// checkpoint write after a crash writes the same state.
type ledger struct {
	filesDone []string
}

func (l ledger) complete(plan []string) bool {
	for _, f := range plan {
		if !slices.Contains(l.filesDone, f) {
			return false
		}
	}
	return true
}

func testCrashBeforeCheckpoint(t *testing.T, h *harness) {
	open := h.destination()
	ctx := ctxOf(t)
	const flow = "history"
	plan := []string{"a.parquet", "b.parquet"}
	t0 := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)

	// First run: record the start and plan, load every file (the ledger),
	// and crash before the checkpoint write.
	first := open()
	st, err := checkpoint.BeginOnce(ctx, first, pipeline, flow, "fp1", plan, t0)
	if err != nil {
		t.Fatalf("BeginOnce: %v", err)
	}
	if !slices.Equal(st.Files, plan) || st.Complete {
		t.Fatalf("BeginOnce = %+v", st)
	}
	_, readRev, err := checkpoint.GetOnce(ctx, first, pipeline, flow)
	if err != nil {
		t.Fatalf("GetOnce: %v", err)
	}
	var l ledger
	l.filesDone = append(l.filesDone, plan...) // the loads committed
	first.Close()                              // crash: the checkpoint write never happened

	// Replay: a new process starts again, reads the plan of the first
	// start (not the files that arrived since), finds every load in the
	// ledger and writes the checkpoint.
	second := open()
	st, err = checkpoint.BeginOnce(ctx, second, pipeline, flow, "fp1", append(slices.Clone(plan), "c.parquet"), t0.Add(time.Hour))
	if err != nil {
		t.Fatalf("BeginOnce on replay: %v", err)
	}
	if !slices.Equal(st.Files, plan) || !st.StartedAt.Equal(t0) {
		t.Fatalf("replay read plan %v started %v, want the first start's %v at %v", st.Files, st.StartedAt, plan, t0)
	}
	if !l.complete(st.Files) {
		t.Fatal("ledger incomplete")
	}
	done := t0.Add(2 * time.Hour)
	if _, err := checkpoint.CompleteOnce(ctx, second, pipeline, flow, done); err != nil {
		t.Fatalf("CompleteOnce: %v", err)
	}

	// The crashed writer's late write, based on its read, is refused.
	zombie := open()
	late := checkpoint.OnceState{Complete: true, Fingerprint: "fp1", Files: plan, StartedAt: t0, CompletedAt: t0.Add(time.Minute)}
	if err := checkpoint.PutOnce(ctx, zombie, pipeline, flow, late, readRev); !errors.Is(err, checkpoint.ErrStale) {
		t.Fatalf("late write of the crashed writer: err %v, want ErrStale", err)
	}

	// As if once: one start, one completion.
	got, rev, err := checkpoint.GetOnce(ctx, open(), pipeline, flow)
	if err != nil {
		t.Fatalf("GetOnce: %v", err)
	}
	want := checkpoint.OnceState{Complete: true, Fingerprint: "fp1", Files: plan, StartedAt: t0, CompletedAt: done}
	if !onceEqual(got, want) || rev != readRev+1 {
		t.Fatalf("final state %+v at revision %d, want %+v at revision %d", got, rev, want, readRev+1)
	}

	// The raw form: a writer read revision r and computed v, crashed; the
	// replay reads r again, derives the same v and writes it once; a second
	// replay from the old read is refused and finds v stored.
	k := checkpoint.CursorKey(pipeline, flow)
	mustPut(t, second, k, `{"last_value":"10"}`, 0)
	r := mustGet(t, second, k).Revision
	v := `{"last_value":"20"}`
	replay := open()
	if e := mustGet(t, replay, k); e.Revision != r {
		t.Fatalf("replay read revision %d, want %d", e.Revision, r)
	}
	mustPut(t, replay, k, v, r)
	if err := second.Put(ctx, k, checkpoint.Entry{Value: []byte(v), Revision: r}); !errors.Is(err, checkpoint.ErrStale) {
		t.Fatalf("second replay from the old read: err %v, want ErrStale", err)
	}
	wantEntry(t, open(), k, v, r+1)
}

func onceEqual(a, b checkpoint.OnceState) bool {
	return a.Complete == b.Complete && a.Fingerprint == b.Fingerprint && slices.Equal(a.Files, b.Files) &&
		a.StartedAt.Equal(b.StartedAt) && a.CompletedAt.Equal(b.CompletedAt)
}

func testCrashAfterCheckpoint(t *testing.T, h *harness) {
	open := h.destination()
	ctx := ctxOf(t)
	t0 := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)

	// The checkpoint write landed but the process died before it learned
	// so: the replay writes again and changes nothing.
	first := open()
	if _, err := checkpoint.BeginOnce(ctx, first, pipeline, "hist", "fp", []string{"x"}, t0); err != nil {
		t.Fatalf("BeginOnce: %v", err)
	}
	if _, err := checkpoint.CompleteOnce(ctx, first, pipeline, "hist", t0.Add(time.Minute)); err != nil {
		t.Fatalf("CompleteOnce: %v", err)
	}
	if _, err := checkpoint.AddSnapshotVersion(ctx, first, pipeline, "snap", "1"); err != nil {
		t.Fatalf("AddSnapshotVersion: %v", err)
	}
	if _, err := checkpoint.AddSnapshotVersion(ctx, first, pipeline, "snap", "3"); err != nil {
		t.Fatalf("AddSnapshotVersion: %v", err)
	}
	first.Close()

	replays := []checkpoint.Store{open(), open()}
	for _, s := range replays {
		if _, err := checkpoint.BeginOnce(ctx, s, pipeline, "hist", "fp", []string{"x", "y"}, t0.Add(time.Hour)); err != nil {
			t.Fatalf("BeginOnce replay: %v", err)
		}
		if _, err := checkpoint.CompleteOnce(ctx, s, pipeline, "hist", t0.Add(2*time.Hour)); err != nil {
			t.Fatalf("CompleteOnce replay: %v", err)
		}
		if _, err := checkpoint.AddSnapshotVersion(ctx, s, pipeline, "snap", "3"); err != nil {
			t.Fatalf("AddSnapshotVersion replay: %v", err)
		}
	}
	st, rev, err := checkpoint.GetOnce(ctx, open(), pipeline, "hist")
	if err != nil {
		t.Fatalf("GetOnce: %v", err)
	}
	want := checkpoint.OnceState{Complete: true, Fingerprint: "fp", Files: []string{"x"}, StartedAt: t0, CompletedAt: t0.Add(time.Minute)}
	if !onceEqual(st, want) || rev != 2 {
		t.Fatalf("once state after replays %+v at revision %d, want %+v at revision 2", st, rev, want)
	}
	snap, rev, err := checkpoint.GetSnapshot(ctx, open(), pipeline, "snap")
	if err != nil {
		t.Fatalf("GetSnapshot: %v", err)
	}
	if !slices.Equal(snap.Applied, []string{"1", "3"}) || snap.Last != "3" || rev != 2 {
		t.Fatalf("snapshot state after replays %+v at revision %d, want [1 3] last 3 at revision 2", snap, rev)
	}
}

func testInvalid(t *testing.T, h *harness) {
	s := h.destination()()
	ctx := ctxOf(t)
	good := checkpoint.OnceKey(pipeline, "f")
	tests := []struct {
		name string
		do   func() error
	}{
		{"put_empty_value", func() error { return s.Put(ctx, good, checkpoint.Entry{}) }},
		{"put_without_kind", func() error {
			return s.Put(ctx, checkpoint.Key{Pipeline: pipeline, Flow: "f"}, checkpoint.Entry{Value: []byte("x")})
		}},
		{"put_without_pipeline", func() error {
			return s.Put(ctx, checkpoint.Key{Kind: "once", Flow: "f"}, checkpoint.Entry{Value: []byte("x")})
		}},
		{"get_without_kind", func() error { _, err := s.Get(ctx, checkpoint.Key{Pipeline: pipeline}); return err }},
		{"delete_everything", func() error { return s.Delete(ctx, checkpoint.Key{}) }},
		{"delete_without_pipeline", func() error { return s.Delete(ctx, checkpoint.Key{Kind: checkpoint.KindOnce}) }},
	}
	mustPut(t, s, good, "kept", 0)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			if err == nil || errors.Is(err, checkpoint.ErrStale) || errors.Is(err, checkpoint.ErrNotFound) {
				t.Fatalf("err %v, want a refusal", err)
			}
			wantEntry(t, s, good, "kept", 1)
			if keys := listKeys(t, s, checkpoint.Key{}); len(keys) != 1 {
				t.Fatalf("List = %v, want only %v", keys, good)
			}
		})
	}
}

func testTypedState(t *testing.T, h *harness) {
	open := h.destination()
	s := open()
	ctx := ctxOf(t)

	if st, rev, err := checkpoint.GetOnce(ctx, s, pipeline, "f"); err != nil || rev != 0 || !st.StartedAt.IsZero() || st.Complete {
		t.Fatalf("GetOnce of a new flow = %+v rev %d err %v", st, rev, err)
	}
	cur := checkpoint.CursorState{LastValue: "2024-05-01T00:00:00Z", Type: "timestamp"}
	if err := checkpoint.PutCursor(ctx, s, pipeline, "f", cur, 0); err != nil {
		t.Fatalf("PutCursor: %v", err)
	}
	if err := checkpoint.PutCursor(ctx, s, pipeline, "f", cur, 0); err != nil {
		t.Fatalf("PutCursor of the same cursor again (a retry whose first attempt landed): %v", err)
	}
	moved := cur
	moved.LastValue = "2024-06-01T00:00:00Z"
	if err := checkpoint.PutCursor(ctx, s, pipeline, "f", moved, 0); !errors.Is(err, checkpoint.ErrStale) {
		t.Fatalf("PutCursor of another cursor at a stale revision: err %v, want ErrStale", err)
	}
	if got, rev, err := checkpoint.GetCursor(ctx, open(), pipeline, "f"); err != nil || got != cur || rev != 1 {
		t.Fatalf("GetCursor = %+v rev %d err %v, want %+v rev 1", got, rev, err, cur)
	}

	snap := checkpoint.SnapshotState{}
	snap.Add("7")
	snap.Add("9")
	snap.Add("7")
	if err := checkpoint.PutSnapshot(ctx, s, pipeline, "snap", snap, 0); err != nil {
		t.Fatalf("PutSnapshot: %v", err)
	}
	if got, rev, err := checkpoint.GetSnapshot(ctx, open(), pipeline, "snap"); err != nil || !slices.Equal(got.Applied, []string{"7", "9"}) || got.Last != "9" || rev != 1 {
		t.Fatalf("GetSnapshot = %+v rev %d err %v", got, rev, err)
	}

	// First offsets: the first writer of a partition wins, whoever writes
	// later.
	records := []struct {
		topic     string
		partition int32
		offset    int64
		want      int64
	}{
		{"orders", 1, 100, 100},
		{"orders", 0, 5, 5},
		{"orders", 1, 90, 100},
		{"audit", 3, 0, 0},
		{"orders", 10, 7, 7},
	}
	for _, r := range records {
		got, err := checkpoint.RecordFirstOffset(ctx, open(), pipeline, "live", r.topic, r.partition, r.offset)
		if err != nil || got != r.want {
			t.Fatalf("RecordFirstOffset(%s/%d, %d) = %d, %v; want %d", r.topic, r.partition, r.offset, got, err, r.want)
		}
	}
	fos, err := checkpoint.FirstOffsets(ctx, s, pipeline, "live")
	if err != nil {
		t.Fatalf("FirstOffsets: %v", err)
	}
	want := []checkpoint.FirstOffset{
		{Topic: "audit", Partition: 3, Offset: 0},
		{Topic: "orders", Partition: 0, Offset: 5},
		{Topic: "orders", Partition: 1, Offset: 100},
		{Topic: "orders", Partition: 10, Offset: 7},
	}
	if !slices.Equal(fos, want) {
		t.Fatalf("FirstOffsets = %v, want %v", fos, want)
	}

	// Full refresh of one flow clears every kind of it.
	if err := s.Delete(ctx, checkpoint.Key{Pipeline: pipeline, Flow: "live"}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if fos, err := checkpoint.FirstOffsets(ctx, s, pipeline, "live"); err != nil || len(fos) != 0 {
		t.Fatalf("FirstOffsets after Delete = %v, %v; want none", fos, err)
	}
	if got, err := checkpoint.RecordFirstOffset(ctx, s, pipeline, "live", "orders", 1, 250); err != nil || got != 250 {
		t.Fatalf("RecordFirstOffset after Delete = %d, %v; want 250", got, err)
	}
	if keys := listKeys(t, s, checkpoint.Key{Pipeline: pipeline, Kind: checkpoint.KindCursor}); len(keys) != 1 || !strings.HasPrefix(keys[0].Flow, "f") {
		t.Fatalf("cursor keys after deleting flow live = %v, want the cursor of f", keys)
	}
}
