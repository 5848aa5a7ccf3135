package flows_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/flows"
	"github.com/sluicehq/sluice/sinks"
	chsink "github.com/sluicehq/sluice/sinks/clickhouse"
	"github.com/sluicehq/sluice/sinks/destination"
)

// newExpireStepper is a stepper of one SCD type 1 flow of topic whose
// tombstone_retention is 1s, after an update of keys 1 and 2 and one of
// key 1's delete: the target holds key 2, the state a tombstone of key 1
// too (and ClickHouse a removal marker of key 1).
func newExpireStepper(t *testing.T, broker, dest, topic string) *stepper {
	s := newStepper(t, broker, dest, "tables:\n  - name: t\nflows:"+
		flowYAML("f", topic, fmt.Sprintf(f1Columns, ""), "    except_column_list: [op, seq]\n    stored_as_scd_type: 1\n    tombstone_retention: 1s\n"))
	s.produce(topic, U(1, "a", 1), U(2, "b", 1))
	s.update()
	s.produce(topic, D(1, 2))
	s.update()
	return s
}

// markersOf returns how many removal markers and removed key states
// ClickHouse keeps for target t; ok is false in another destination.
func markersOf(t *testing.T, sink sinks.Sink) (rows, states uint64, ok bool) {
	t.Helper()
	ch, ok := sink.(*chsink.Sink)
	if !ok {
		return 0, 0, false
	}
	conn, db := ch.Conn()
	count := func(q string) uint64 {
		rs, err := conn.Query(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		var n uint64
		for rs.Next() {
			if err := rs.Scan(&n); err != nil {
				t.Fatal(err)
			}
		}
		return n
	}
	return count("SELECT count() FROM " + db + "._sluice_phys_t WHERE _sluice_deleted = 1"),
		count("SELECT count() FROM " + db + "._sluice_cdc_state WHERE target = 't' AND deleted = 1"), true
}

// checkLateChangeApplies checks that key 1, its tombstone forgotten, takes
// a change older than its delete.
func (s *stepper) checkLateChangeApplies(topic string) {
	s.t.Helper()
	s.produce(topic, U(1, "late", 1))
	s.update()
	want := []string{"1,late", "2,b"}
	if got := s.rows("t"); !slices.Equal(got, want) {
		s.t.Fatalf("after a late change: %q, want %q", got, want)
	}
}

// TestRunForgetsExpiredState: `run` forgets a tombstone once
// tombstone_retention has passed, for a key that gets no more events; an
// older change of that key arriving later applies again.
func TestRunForgetsExpiredState(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		topic := "expire_" + dname
		s := newExpireStepper(t, broker.Addr(), dest(t), topic)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		sink, err := destination.Open(ctx, s.p, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer sink.Close()
		lister := sink.(sinks.StateLister)
		// -1 for a retryable failure, such as on a cluster the moment the
		// run's lease has no server caught up yet.
		stateKeys := func() int {
			keys, err := lister.StateKeys(ctx, "t", "", 100)
			if c, ok := sink.(sinks.Classifier); ok && err != nil && c.Retryable(err) {
				return -1
			}
			if err != nil {
				t.Fatal(err)
			}
			return len(keys)
		}
		if n := stateKeys(); n != 2 {
			t.Fatalf("%d keys hold state after the update, want 2 (a live key and a tombstone)", n)
		}
		if rows, _, ok := markersOf(t, sink); ok && rows != 1 {
			t.Fatalf("%d removal markers after the update, want key 1's", rows)
		}

		done := make(chan error, 1)
		go func() {
			done <- flows.Execute(ctx, s.p, sink, flows.Options{Mode: flows.ModeRun, ExpireEvery: 100 * time.Millisecond,
				HeartbeatEvery: 200 * time.Millisecond, HeartbeatTTL: time.Second})
		}()
		deadline := time.Now().Add(30 * time.Second)
		for stateKeys() != 1 {
			if time.Now().After(deadline) {
				cancel()
				t.Fatalf("%d keys hold state after the retention, want 1: the tombstone was not forgotten", stateKeys())
			}
			time.Sleep(50 * time.Millisecond)
		}
		// In ClickHouse the marker of key 1 is a third of the target's
		// rows: the target is compacted after the expiry.
		for {
			rows, states, ok := markersOf(t, sink)
			if !ok || rows == 0 && states == 0 {
				break
			}
			if time.Now().After(deadline) {
				cancel()
				t.Fatalf("%d removal markers and %d removed states left: the target was not compacted", rows, states)
			}
			time.Sleep(50 * time.Millisecond)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("run: %v", err)
		}

		s.checkLateChangeApplies(topic)
	})
}

// TestUpdateExpireForgetsExpiredState: `update --expire` forgets, after its
// flows, a tombstone whose tombstone_retention has passed; a plain update
// keeps it.
func TestUpdateExpireForgetsExpiredState(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		topic := "update_expire_" + dname
		s := newExpireStepper(t, broker.Addr(), dest(t), topic)
		var markers, removed uint64
		var inCH bool
		stateKeys := func() int {
			ctx := context.Background()
			sink, err := destination.Open(ctx, s.p, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer sink.Close()
			keys, err := sink.(sinks.StateLister).StateKeys(ctx, "t", "", 100)
			if err != nil {
				t.Fatal(err)
			}
			markers, removed, inCH = markersOf(t, sink)
			return len(keys)
		}
		time.Sleep(1100 * time.Millisecond) // past the retention
		s.update()
		if n := stateKeys(); n != 2 {
			t.Fatalf("%d keys hold state after a plain update, want 2 (a live key and a tombstone)", n)
		}
		if inCH && markers != 1 {
			t.Fatalf("%d removal markers after a plain update, want key 1's", markers)
		}
		s.updateWith(flows.Options{Expire: true})
		if n := stateKeys(); n != 1 {
			t.Fatalf("%d keys hold state after update --expire, want 1: the tombstone was not forgotten", n)
		}
		// In ClickHouse, key 1's marker is a third of the target's rows:
		// update --expire compacts it away, and key 1's removed state.
		if markers != 0 || removed != 0 {
			t.Fatalf("%d removal markers and %d removed states after update --expire, want none", markers, removed)
		}
		s.checkLateChangeApplies(topic)
	})
}
