package flows_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/flows"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse"
	"github.com/sluicehq/sluice/sinks/local"
)

// errAfterCommit is what a load's Commit returns, once its commit point is
// passed, when failCommits makes it fail: the destination classifies it
// as retryable, as it does a publication that failed.
var errAfterCommit = errors.New("injected: publishing failed after the commit point")

// failCommits counts down the commits that fail after their commit point.
type failCommits struct{ left atomic.Int32 }

func (f *failCommits) commit(ctx context.Context, ld sinks.Load, c sinks.Commit) error {
	err := ld.Commit(ctx, c)
	if err == nil && f.left.Add(-1) >= 0 {
		return errAfterCommit
	}
	return err
}

type failingLoad struct {
	sinks.Load
	f *failCommits
}

func (l failingLoad) Commit(ctx context.Context, c sinks.Commit) error {
	return l.f.commit(ctx, l.Load, c)
}

type failingCDCLoad struct {
	sinks.CDCLoad
	f *failCommits
}

func (l failingCDCLoad) Commit(ctx context.Context, c sinks.Commit) error {
	return l.f.commit(ctx, l.CDCLoad, c)
}

func wrapLoad(ld sinks.Load, f *failCommits) sinks.Load {
	if cl, ok := ld.(sinks.CDCLoad); ok {
		return failingCDCLoad{cl, f}
	}
	return failingLoad{ld, f}
}

type failingLocal struct {
	*local.Sink
	f *failCommits
}

func (s failingLocal) Begin(ctx context.Context, meta sinks.LoadMeta) (sinks.Load, error) {
	ld, err := s.Sink.Begin(ctx, meta)
	if err != nil {
		return nil, err
	}
	return wrapLoad(ld, s.f), nil
}

func (s failingLocal) Retryable(err error) bool {
	return errors.Is(err, errAfterCommit) || s.Sink.Retryable(err)
}

type failingClickHouse struct {
	*clickhouse.Sink
	f *failCommits
}

func (s failingClickHouse) Begin(ctx context.Context, meta sinks.LoadMeta) (sinks.Load, error) {
	ld, err := s.Sink.Begin(ctx, meta)
	if err != nil {
		return nil, err
	}
	return wrapLoad(ld, s.f), nil
}

func (s failingClickHouse) Retryable(err error) bool {
	return errors.Is(err, errAfterCommit) || s.Sink.Retryable(err)
}

// failAfterCommit makes a stepper's sink fail every commit, after its
// commit point, n times.
func failAfterCommit(t *testing.T, s *stepper, n int32) *failCommits {
	f := &failCommits{}
	f.left.Store(n)
	s.wrap = func(opened sinks.Sink) sinks.Sink {
		switch sink := opened.(type) {
		case *local.Sink:
			return failingLocal{sink, f}
		case *clickhouse.Sink:
			return failingClickHouse{sink, f}
		}
		t.Fatalf("unexpected sink %T", opened)
		return nil
	}
	return f
}

// faultPipeline is a pipeline with a flow of each kind of slot and of
// checkpoint: a once append flow of a Parquet file in chunks of two rows, a
// Kafka append flow, a once auto_cdc flow of a file in chunks, a snapshot
// flow and an incremental flow of JSON lines. check verifies every target.
func faultPipeline(t *testing.T, addr, dest, topic string) (*stepper, func(when string)) {
	t.Helper()
	s := newStepper(t, addr, dest, fmt.Sprintf(`tables:
  - name: raw
    columns:
      - {name: id, type: int64}
      - {name: name, type: string}
  - name: live
    columns:
      - {name: id, type: int64}
      - {name: name, type: string}
  - name: cur
  - name: ev
    columns:
      - {name: id, type: int64}
      - {name: seq, type: int64}
  - name: snap
    columns:
      - {name: id, type: int64}
      - {name: name, type: string}
flows:
  - name: bf
    target: raw
    kind: append
    once: true
    source: {files: {path: "in/*.parquet"}}
    batch: {rows: 2}
  - name: k
    target: live
    kind: append
    source: {kafka: {topic: %s, format: json}}
  - name: hist
    target: cur
    kind: auto_cdc
    once: true
    source:
      files:
        path: "cdc/*.parquet"
        columns:
          - {name: order_id, type: int64}
          - {name: status, type: string}
          - {name: seq, type: int64}
    keys: [order_id]
    sequence_by: seq
    stored_as_scd_type: 1
    batch: {rows: 2}
  - name: sn
    target: snap
    kind: auto_cdc_from_snapshot
    source: {files: {path: "snap/*.parquet"}}
    snapshot_version: "1"
    keys: [id]
    stored_as_scd_type: 1
  - name: inc
    target: ev
    kind: append
    source:
      files:
        path: "ev/*.jsonl"
        columns:
          - {name: id, type: int64}
          - {name: seq, type: int64}
    incremental: {cursor: seq}
`, topic))
	var raw []string
	for i := range 5 {
		raw = append(raw, fmt.Sprintf("%d,n%d", i, i))
	}
	writeParquet(t, filepath.Join(s.dir, "in", "a.parquet"), []rawRow{{0, "n0"}, {1, "n1"}, {2, "n2"}, {3, "n3"}, {4, "n4"}})
	writeParquet(t, filepath.Join(s.dir, "cdc", "a.parquet"), []orderRow{{1, "new", 1}, {2, "new", 1}, {1, "paid", 2}, {3, "new", 1}, {2, "paid", 3}})
	writeParquet(t, filepath.Join(s.dir, "snap", "a.parquet"), []rawRow{{7, "x"}, {8, "y"}})
	if err := os.MkdirAll(filepath.Join(s.dir, "ev"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.dir, "ev", "a.jsonl"), []byte("{\"id\": 1, \"seq\": 5}\n{\"id\": 2, \"seq\": 6}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.produce(topic, `{"id": 10, "name": "a"}`, `{"id": 11, "name": "b"}`)
	check := func(when string) {
		t.Helper()
		for _, c := range []struct {
			table string
			drop  []string
			want  []string
		}{
			{"raw", []string{"_sluice_load_id"}, raw},
			{"live", []string{"_sluice_load_id"}, []string{"10,a", "11,b"}},
			{"cur", nil, []string{"1,paid,2", "2,paid,3", "3,new,1"}},
			{"snap", nil, []string{"7,x", "8,y"}},
			{"ev", []string{"_sluice_load_id"}, []string{"1,5", "2,6"}},
		} {
			if got := s.rows(c.table, c.drop...); !slices.Equal(got, c.want) {
				t.Errorf("%s: %s holds %q, want %q", when, c.table, got, c.want)
			}
		}
	}
	return s, check
}

// TestCommittedLoadRetried: a load whose commit failed after its commit
// point is retried by the runner under a new load id, refused as stale,
// and counted as committed, for every kind of slot: a Kafka partition, the
// chunks of files (an append flow and an auto_cdc flow), a snapshot
// version and an incremental run's files. Every row is in its target once,
// and nothing is retried for ever.
func TestCommittedLoadRetried(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		s, check := faultPipeline(t, broker.Addr(), dest(t), "retried_"+dname)
		// Commits fail after their commit point, a few times over.
		f := failAfterCommit(t, s, 8)
		s.update()
		if left := f.left.Load(); left > 0 {
			t.Fatalf("%d injected failures left: the flows made fewer commits than the test meant to fail", left)
		}
		check("after the update")
		// A second update finds everything done.
		s.wrap = nil
		s.update()
		check("after a second update")
	})
}

// errFlaky is what flakyStore fails with: retryable, as a short outage of
// the destination is.
var errFlaky = errors.New("injected: the checkpoint store is briefly unreachable")

// flakyStore fails every other operation of a checkpoint store: a read
// before it is made, a write after it landed (its outcome then unknown to
// the caller).
type flakyStore struct {
	checkpoint.Store
	n      atomic.Int64
	failed atomic.Int64
}

func (s *flakyStore) fail() bool {
	if s.n.Add(1)%2 == 0 {
		s.failed.Add(1)
		return true
	}
	return false
}

func (s *flakyStore) Retryable(err error) bool { return errors.Is(err, errFlaky) }

func (s *flakyStore) Get(ctx context.Context, key checkpoint.Key) (checkpoint.Entry, error) {
	if s.fail() {
		return checkpoint.Entry{}, errFlaky
	}
	return s.Store.Get(ctx, key)
}

func (s *flakyStore) Put(ctx context.Context, key checkpoint.Key, e checkpoint.Entry) error {
	if err := s.Store.Put(ctx, key, e); err != nil || !s.fail() {
		return err
	}
	return errFlaky
}

func (s *flakyStore) List(ctx context.Context, prefix checkpoint.Key) ([]checkpoint.KeyEntry, error) {
	if s.fail() {
		return nil, errFlaky
	}
	return s.Store.List(ctx, prefix)
}

// TestCheckpointsRetried: every other checkpoint operation fails with an
// error the store calls retryable (once-flow start and completion, the
// first Kafka offsets, a snapshot version applied, an incremental cursor);
// the runner retries them as it retries loads, and the update ends with
// every target right and every checkpoint stored once.
func TestCheckpointsRetried(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		s, check := faultPipeline(t, broker.Addr(), dest(t), "flaky_"+dname)
		var fs *flakyStore
		s.updateWith(flows.Options{Checkpoints: func(st checkpoint.Store) checkpoint.Store {
			fs = &flakyStore{Store: st}
			return fs
		}})
		if fs == nil || fs.failed.Load() < 5 {
			t.Fatalf("the store failed %v operations, want several", fs)
		}
		check("after the update")
		for _, name := range []string{"bf", "hist"} {
			if st := s.status(name); st.Once != "complete" {
				t.Errorf("once-flow %s: %q, want complete", name, st.Once)
			}
		}
		if st := s.status("inc"); st.Cursor != "6" || st.Runs != 1 {
			t.Errorf("incremental flow: cursor %q after %d runs, want 6 after 1", st.Cursor, st.Runs)
		}
		if st := s.status("sn"); !slices.Equal(st.Snapshots, []string{"1"}) {
			t.Errorf("snapshot flow applied %q, want [1]", st.Snapshots)
		}
		s.update()
		check("after a second update")
	})
}

// TestRefreshLeavesDeadLettersOnce: after a full refresh and after a
// refresh of one flow, each bad message is in _sluice_dead_letters once,
// and status counts the same number.
func TestRefreshLeavesDeadLettersOnce(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		topic, other := "dlrefresh_"+dname, "dlother_"+dname
		s := newStepper(t, broker.Addr(), dest(t), fmt.Sprintf(`tables:
  - name: live
    columns:
      - {name: id, type: int64}
      - {name: name, type: string}
  - name: more
    columns:
      - {name: id, type: int64}
      - {name: name, type: string}
flows:
  - name: k
    target: live
    kind: append
    source: {kafka: {topic: %s, format: json}}
  - name: m
    target: more
    kind: append
    source: {kafka: {topic: %s, format: json}}
`, topic, other))
		s.produce(topic, `{"id": 1, "name": "a"}`, `not json`, `{"id": "x", "name": "b"}`, `{"id": 2, "name": "c"}`, `{oops`)
		s.produce(other, `{"id": 3, "name": "d"}`, `{`)
		check := func(when string) {
			t.Helper()
			byFlow := map[string]int{}
			for _, row := range s.rows("_sluice_dead_letters") {
				flow := strings.Split(row, ",")[1]
				byFlow[flow]++
			}
			for flow, want := range map[string]int{"k": 3, "m": 1} {
				if byFlow[flow] != want {
					t.Errorf("%s: %d dead letters of flow %s, want %d", when, byFlow[flow], flow, want)
				}
				if st := s.status(flow); st.DeadLetters != int64(want) {
					t.Errorf("%s: status counts %d dead letters of flow %s, want %d", when, st.DeadLetters, flow, want)
				}
			}
		}
		s.update()
		check("after the first update")
		s.updateWith(flows.Options{FullRefresh: true})
		check("after a full refresh")
		s.updateWith(flows.Options{Refresh: []string{"k"}})
		check("after a refresh of flow k")
		s.update()
		check("after another update")
	})
}
