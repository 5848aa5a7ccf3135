package flows_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/flows"
	"github.com/sluicehq/sluice/sinks"
)

// newExpireStepper is a stepper of one SCD type 1 flow of topic whose
// tombstone_retention is 1s, after an update of keys 1 and 2, key 1 then
// deleted: the target holds key 2, the state a tombstone of key 1 too.
func newExpireStepper(t *testing.T, broker, dest, topic string) *stepper {
	s := newStepper(t, broker, dest, "tables:\n  - name: t\nflows:"+
		flowYAML("f", topic, fmt.Sprintf(f1Columns, ""), "    except_column_list: [op, seq]\n    stored_as_scd_type: 1\n    tombstone_retention: 1s\n"))
	s.produce(topic, U(1, "a", 1), U(2, "b", 1), D(1, 2))
	s.update()
	return s
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
		sink, err := flows.OpenSink(ctx, s.p, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer sink.Close()
		lister := sink.(sinks.StateLister)
		stateKeys := func() int {
			keys, err := lister.StateKeys(ctx, "t", "", 100)
			if err != nil {
				t.Fatal(err)
			}
			return len(keys)
		}
		if n := stateKeys(); n != 2 {
			t.Fatalf("%d keys hold state after the update, want 2 (a live key and a tombstone)", n)
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
		stateKeys := func() int {
			ctx := context.Background()
			sink, err := flows.OpenSink(ctx, s.p, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer sink.Close()
			keys, err := sink.(sinks.StateLister).StateKeys(ctx, "t", "", 100)
			if err != nil {
				t.Fatal(err)
			}
			return len(keys)
		}
		time.Sleep(1100 * time.Millisecond) // past the retention
		s.update()
		if n := stateKeys(); n != 2 {
			t.Fatalf("%d keys hold state after a plain update, want 2 (a live key and a tombstone)", n)
		}
		s.updateWith(flows.Options{Expire: true})
		if n := stateKeys(); n != 1 {
			t.Fatalf("%d keys hold state after update --expire, want 1: the tombstone was not forgotten", n)
		}
		s.checkLateChangeApplies(topic)
	})
}
