package flows_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/flows"
	"github.com/sluicehq/sluice/sinks/destination"
)

// Snapshot flows end to end, alone and sharing an SCD type 1 target with a
// CDC flow: snapshots written as real Parquet, CDC events through the
// broker, one update per step.

type scoreRow struct {
	ID    int64  `parquet:"id"`
	Name  string `parquet:"name"`
	Score int64  `parquet:"score"`
}

// snapshotAt writes snapshot version v (ready unless notReady).
func snapshotAt[T any](t *testing.T, dir, v string, rows []T) {
	t.Helper()
	writeParquet(t, filepath.Join(dir, "snaps", v, "part-0.parquet"), rows)
	if err := os.WriteFile(filepath.Join(dir, "snaps", v, "_SUCCESS"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func snapshotFlow(scd int, extraCols, extra string) string {
	return fmt.Sprintf(`tables:
  - name: t
flows:
  - name: s
    target: t
    kind: auto_cdc_from_snapshot
    source:
      snapshots:
        path: "snaps/{version}/*.parquet"
        format: parquet
        columns:
          - {name: id, type: int64}
          - {name: name, type: string}%s
    keys: [id]
    stored_as_scd_type: %d
%s`, extraCols, scd, extra)
}

const cdcOnT = `
  - name: c
    target: t
    kind: auto_cdc
    source:
      kafka:
        topic: %s
        format: json
        columns:
          - {name: id, type: int64}
          - {name: name, type: string, nullable: true}
          - {name: op, type: string, nullable: true}
          - {name: seq, type: int64}
    keys: [id]
    sequence_by: seq
    apply_as_deletes: 'op == "D"'
    except_column_list: [op, seq]
`

func TestSnapshotsEndToEnd(t *testing.T) {
	dests := destinations(t)
	broker := startBroker(t)
	for _, dname := range slices.Sorted(maps.Keys(dests)) {
		dest := dests[dname]
		t.Run(dname+"/scd1-next-version-replaces-rows", func(t *testing.T) {
			t.Parallel()
			s := newStepper(t, broker.Addr(), dest(t), snapshotFlow(1, "", ""))
			snapshotAt(t, s.dir, "0", []rawRow{{1, "Oaxaca"}, {2, "Monterrey"}, {3, "Tijuana"}})
			snapshotAt(t, s.dir, "1", []rawRow{{2, "Carmel"}, {3, "Los Angeles"}, {4, "Death Valley"}, {6, "Kings Canyon"}})
			s.update()
			want := []string{"2,Carmel", "3,Los Angeles", "4,Death Valley", "6,Kings Canyon"}
			if got := s.rows("t"); !slices.Equal(got, want) {
				t.Fatalf("got %q, want %q", got, want)
			}
		})
		t.Run(dname+"/scd2-changed-key-opens-version", func(t *testing.T) {
			t.Parallel()
			s := newStepper(t, broker.Addr(), dest(t), snapshotFlow(2, "", ""))
			snapshotAt(t, s.dir, "1", []rawRow{{1, "a"}, {2, "b"}})
			s.update()
			snapshotAt(t, s.dir, "2", []rawRow{{1, "a"}, {2, "c"}})
			s.update()
			want := []string{"1,a,1,∞", "2,b,1,2", "2,c,2,∞"}
			if got := s.rows("t"); !slices.Equal(got, want) {
				t.Fatalf("got %q, want %q", got, want)
			}
		})
		t.Run(dname+"/duplicate-key-then-older-version", func(t *testing.T) {
			t.Parallel()
			s := newStepper(t, broker.Addr(), dest(t), snapshotFlow(1, "", ""))
			snapshotAt(t, s.dir, "4", []rawRow{{1, "a"}})
			s.update()
			// A snapshot with a key twice: an error, nothing of it applied.
			snapshotAt(t, s.dir, "5", []rawRow{{1, "x"}, {1, "y"}, {2, "z"}})
			err := s.tryUpdateWith(flows.Options{})
			if !errors.Is(err, flows.ErrDuplicateKey) {
				t.Fatalf("duplicate key: update: %v, want ErrDuplicateKey", err)
			}
			if got, want := s.rows("t"), []string{"1,a"}; !slices.Equal(got, want) {
				t.Fatalf("duplicate key: %q, want %q", got, want)
			}
			if err := os.RemoveAll(filepath.Join(s.dir, "snaps", "5")); err != nil {
				t.Fatal(err)
			}
			// A version older than the last applied one is skipped.
			snapshotAt(t, s.dir, "3", []rawRow{{9, "old"}})
			s.update()
			if got, want := s.rows("t"), []string{"1,a"}; !slices.Equal(got, want) {
				t.Fatalf("older version: %q, want %q", got, want)
			}
		})
		t.Run(dname+"/scd2-track-history-column-list", func(t *testing.T) {
			t.Parallel()
			s := newStepper(t, broker.Addr(), dest(t), snapshotFlow(2, "\n          - {name: score, type: int64}", "    track_history_column_list: [name]\n"))
			snapshotAt(t, s.dir, "1", []scoreRow{{1, "alice", 100}})
			s.update()
			snapshotAt(t, s.dir, "2", []scoreRow{{1, "alice", 200}})
			s.update()
			snapshotAt(t, s.dir, "3", []scoreRow{{1, "bob", 200}})
			s.update()
			want := []string{"1,alice,200,1,3", "1,bob,200,3,∞"}
			if got := s.rows("t"); !slices.Equal(got, want) {
				t.Fatalf("got %q, want %q", got, want)
			}
		})
		t.Run(dname+"/once-snapshot-then-newer-cdc", func(t *testing.T) {
			t.Parallel()
			topic := "d01_" + dname
			s := newStepper(t, broker.Addr(), dest(t), snapshotFlow(1, "", "    once: true\n")+fmt.Sprintf(cdcOnT, topic))
			snapshotAt(t, s.dir, "100", []rawRow{{1, "a"}, {2, "b"}, {3, "c"}})
			s.produce(topic)
			s.update()
			s.produce(topic, `{"id":1,"name":"a2","op":"U","seq":150}`, `{"id":2,"op":"D","seq":160}`, `{"id":4,"name":"d","op":"U","seq":170}`)
			s.update()
			want := []string{"1,a2", "3,c", "4,d"}
			if got := s.rows("t"); !slices.Equal(got, want) {
				t.Fatalf("got %q, want %q", got, want)
			}
			// A full refresh with both sources retained gives the same.
			s.updateWith(flows.Options{FullRefresh: true})
			if got := s.rows("t"); !slices.Equal(got, want) {
				t.Fatalf("full refresh: got %q, want %q", got, want)
			}
		})
		t.Run(dname+"/older-cdc-loses-to-snapshot", func(t *testing.T) {
			t.Parallel()
			topic := "d02_" + dname
			s := newStepper(t, broker.Addr(), dest(t), snapshotFlow(1, "", "")+fmt.Sprintf(cdcOnT, topic))
			snapshotAt(t, s.dir, "100", []rawRow{{1, "a"}})
			s.produce(topic)
			s.update()
			s.produce(topic, `{"id":1,"name":"old","op":"U","seq":50}`)
			s.update()
			if got, want := s.rows("t"), []string{"1,a"}; !slices.Equal(got, want) {
				t.Fatalf("got %q, want %q", got, want)
			}
		})
		t.Run(dname+"/newer-cdc-beats-snapshot-in-one-run", func(t *testing.T) {
			t.Parallel()
			topic := "d05_" + dname
			s := newStepper(t, broker.Addr(), dest(t), snapshotFlow(1, "", "")+fmt.Sprintf(cdcOnT, topic))
			s.produce(topic, `{"id":1,"name":"new","op":"U","seq":150}`)
			snapshotAt(t, s.dir, "100", []rawRow{{1, "old"}})
			s.update()
			if got, want := s.rows("t"), []string{"1,new"}; !slices.Equal(got, want) {
				t.Fatalf("got %q, want %q", got, want)
			}
		})
	}
}

// TestSnapshotClosesKeysSeenLater checks docs/cdc.md#snapshots-on-scd-type-2
// on an SCD type 2 target, in update and run modes: a snapshot at 100 holds keys 1
// and 2; a change of key 3 at 80, arriving after it, opens a version the
// snapshot closes at 100. Key 4's last version had ended before the
// snapshot; a late change of it at 90 ends at 100 too.
func TestSnapshotClosesKeysSeenLater(t *testing.T) {
	broker := startBroker(t)
	for _, mode := range []string{"update", "run"} {
		t.Run(mode, func(t *testing.T) { sn1Case(t, broker.Addr(), mode) })
	}
}

// sn1Case runs TestSnapshotClosesKeysSeenLater in one mode, update or run.
func sn1Case(t *testing.T, broker, mode string) {
	want := []string{"1,a,100,∞", "2,b,100,∞", "3,c,80,100", "4,d,10,50", "4,e,90,100"}
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		topic := "sn1_" + mode + "_" + dname
		s := newStepper(t, broker, dest(t), snapshotFlow(2, "", "")+fmt.Sprintf(cdcOnT, topic)+"    stored_as_scd_type: 2\n")
		s.produce(topic, `{"id":4,"name":"d","op":"U","seq":10}`, `{"id":4,"op":"D","seq":50}`)
		s.update()
		snapshotAt(t, s.dir, "100", []rawRow{{1, "a"}, {2, "b"}})
		late := []string{`{"id":3,"name":"c","op":"U","seq":80}`, `{"id":4,"name":"e","op":"U","seq":90}`}
		if mode == "update" {
			s.update()
			s.produce(topic, late...)
			s.update()
			if got := s.rows("t"); !slices.Equal(got, want) {
				t.Fatalf("got %q, want %q", got, want)
			}
			return
		}
		s.runUntil(func() bool {
			if got := s.rows("t"); len(got) < 3 || got[0] != want[0] {
				return false // the snapshot is not applied yet
			}
			s.produce(topic, late...)
			return true
		}, func() bool { return slices.Equal(s.rows("t"), want) })
		if got := s.rows("t"); !slices.Equal(got, want) {
			t.Fatalf("got %q, want %q", got, want)
		}
	})
}

// runUntil runs the pipeline in run mode while each step in turn is
// polled until it reports true, then stops the run.
func (s *stepper) runUntil(steps ...func() bool) {
	s.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sink, err := destination.Open(ctx, s.p, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	defer sink.Close()
	done := make(chan error, 1)
	go func() {
		done <- flows.Execute(ctx, s.p, sink, flows.Options{Mode: flows.ModeRun, PollFiles: 50 * time.Millisecond,
			HeartbeatEvery: 200 * time.Millisecond, HeartbeatTTL: time.Second})
	}()
	deadline := time.Now().Add(30 * time.Second)
	for i, step := range steps {
		for !step() {
			select {
			case err := <-done:
				s.t.Fatalf("run ended at step %d: %v", i+1, err)
			default:
			}
			if time.Now().After(deadline) {
				cancel()
				<-done
				s.t.Fatalf("step %d not reached in run mode", i+1)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		s.t.Fatalf("run: %v", err)
	}
}
