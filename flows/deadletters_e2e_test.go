package flows_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/flows"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/destination"
)

// Dead letters replayed with a fixed spec, end to end in each destination
// (docs/operations.md, "Replaying dead letters").

// replay runs one replay of the stepper's spec.
func (s *stepper) replay(filter flows.DeadLetterFilter) *flows.ReplayReport {
	s.t.Helper()
	ctx := context.Background()
	sink, err := destination.Open(ctx, s.p, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	defer sink.Close()
	rep, err := flows.ReplayDeadLetters(ctx, s.p, sink, flows.Options{HeartbeatEvery: 200 * time.Millisecond, HeartbeatTTL: time.Second}, filter)
	if err != nil {
		s.t.Fatalf("replay: %v", err)
	}
	return rep
}

// pending returns the pending dead letters as "flow source position reason".
func (s *stepper) pending() []string {
	s.t.Helper()
	ctx := context.Background()
	sink, err := destination.Open(ctx, s.p, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	defer sink.Close()
	dls, err := flows.PendingDeadLetters(ctx, s.p, sink, flows.DeadLetterFilter{})
	if err != nil {
		s.t.Fatal(err)
	}
	var out []string
	for _, d := range dls {
		out = append(out, fmt.Sprintf("%s %s %s %s", d.Flow, strings.TrimPrefix(d.Source, s.prefix), d.Position, d.Reason))
	}
	slices.Sort(out)
	return out
}

// pendingNow returns the pending dead letters once they are want, or what
// they are after a bounded wait: on a test cluster the reader's server
// may not have fetched the last load's dead letters yet.
func (s *stepper) pendingNow(want []string) []string {
	s.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := s.pending()
		if slices.Equal(got, want) || time.Now().After(deadline) {
			return got
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// heads returns a flow's heads, rendered.
func (s *stepper) headsOf(flow string) string {
	s.t.Helper()
	ctx := context.Background()
	sink, err := destination.Open(ctx, s.p, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	defer sink.Close()
	h, err := sink.Heads(ctx, s.p.Pipeline, flow, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(h)) {
		out = append(out, fmt.Sprintf("%s=%d/%d", k, h[k].Offset, h[k].RowGroup))
	}
	return strings.Join(out, ",")
}

const dlAppendSpec = `tables:
  - name: orders
    columns:
      - {name: id, type: int64}
      - {name: qty, type: int64}
      - {name: _kafka_offset, type: int64}
%s
flows:
  - name: orders_live
    target: orders
    kind: append
    source: {kafka: {topic: %s, format: json}}
%s
`

func TestDeadLettersReplayAppend(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		d := dest(t)
		topic := "dlr_" + dname
		s := newStepper(t, broker.Addr(), d, fmt.Sprintf(dlAppendSpec, "", topic,
			`    expectations:
      - {name: small, expr: "qty < 100", on_violation: drop}`))
		s.prefix = "dlr_"
		s.produce(topic, `{"id":1,"qty":5}`, `{"id":2,"qty":500}`, `{"id":3,"qty":"seven"}`, `{"id":4,"qty":5001}`)
		s.update()
		if got, want := s.rows("orders", "_sluice_load_id"), []string{"1,5,0"}; !slices.Equal(got, want) {
			t.Fatalf("after the update: %v, want %v", got, want)
		}
		wantPending := []string{"orders_live " + dname + " 0/1 expectation", "orders_live " + dname + " 0/2 type_mismatch", "orders_live " + dname + " 0/3 expectation"}
		if got := s.pendingNow(wantPending); !slices.Equal(got, wantPending) {
			t.Fatalf("pending: %v, want %v", got, wantPending)
		}
		headsBefore := s.headsOf("orders_live")

		// The fix: a looser expectation, and a computed column that id 4
		// (qty 5001) fails with another reason.
		fixed := newStepper(t, broker.Addr(), d, fmt.Sprintf(dlAppendSpec, "      - {name: chk, type: int64, nullable: true}", topic,
			`    computed_columns:
      - {name: chk, type: int64, nullable: true, expr: "qty == 5001 ? 1.5 : qty"}
    expectations:
      - {name: small, expr: "qty < 1000", on_violation: drop}`))
		fixed.prefix = "dlr_"
		rep := fixed.replay(flows.DeadLetterFilter{})
		if rep.Replayed != 1 || rep.Failing["type_mismatch"] != 1 || rep.Failing["expression_error"] != 1 || len(rep.Failing) != 2 {
			t.Fatalf("replay: %+v", rep)
		}
		want := []string{"1,5,0,∞", "2,500,1,500"}
		if got := fixed.rows("orders", "_sluice_load_id"); !slices.Equal(got, want) {
			t.Fatalf("after the replay: %v, want %v", got, want)
		}
		wantPending = []string{"orders_live " + dname + " 0/2 type_mismatch", "orders_live " + dname + " 0/3 expression_error"}
		if got := fixed.pendingNow(wantPending); !slices.Equal(got, wantPending) {
			t.Fatalf("pending after the replay: %v, want %v", got, wantPending)
		}
		if got := fixed.headsOf("orders_live"); got != headsBefore {
			t.Fatalf("the replay moved the flow's heads: %s, were %s", got, headsBefore)
		}

		// Again: nothing more loads; the two still fail.
		rep = fixed.replay(flows.DeadLetterFilter{})
		if rep.Replayed != 0 || rep.Failing["type_mismatch"] != 1 || rep.Failing["expression_error"] != 1 {
			t.Fatalf("second replay: %+v", rep)
		}
		if got := fixed.rows("orders", "_sluice_load_id"); !slices.Equal(got, want) {
			t.Fatalf("after the second replay: %v, want %v", got, want)
		}
		if got := fixed.pendingNow(wantPending); !slices.Equal(got, wantPending) {
			t.Fatalf("pending after the second replay: %v, want %v", got, wantPending)
		}
		// A filter that selects none of them tries none.
		if rep := fixed.replay(flows.DeadLetterFilter{Reason: "null_key"}); rep.Replayed != 0 || len(rep.Failing) != 0 || len(rep.Flows) != 0 {
			t.Fatalf("replay of no dead letter: %+v", rep)
		}

		// The flow goes on where it was: nothing read twice.
		fixed.produce(topic, `{"id":5,"qty":7}`)
		fixed.update()
		want = append(want, "5,7,4,7")
		if got := fixed.rows("orders", "_sluice_load_id"); !slices.Equal(got, want) {
			t.Fatalf("after the next update: %v, want %v", got, want)
		}

		// A full refresh replays the topic under the fixed spec: the marks
		// go with the flow's dead letters, and each bad record is pending
		// once, as the refresh wrote it.
		fixed.updateWith(flows.Options{FullRefresh: true})
		want[0] = "1,5,0,5" // the fixed spec's computed column, now computed for id 1 too
		if got := fixed.rows("orders", "_sluice_load_id"); !slices.Equal(got, want) {
			t.Fatalf("after the full refresh: %v, want %v", got, want)
		}
		if got := fixed.pendingNow(wantPending); !slices.Equal(got, wantPending) {
			t.Fatalf("pending after the full refresh: %v, want %v", got, wantPending)
		}
	})
}

const dlCDCSpec = `tables:
  - name: customers
flows:
  - name: customers_cdc
    target: customers
    kind: auto_cdc
    source:
      kafka:
        topic: %s
        format: json
        columns:
          - {name: id, type: int64}
          - {name: name, type: string}
          - {name: seq, type: int64}
          - {name: _kafka_offset, type: int64}
    keys: [id]
    sequence_by: seq
    stored_as_scd_type: %d
%s
`

func TestDeadLettersReplayCDCOlderThanLive(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		for _, scd := range []int{1, 2} {
			t.Run(fmt.Sprintf("scd%d", scd), func(t *testing.T) {
				d := dest(t)
				topic := fmt.Sprintf("dlc%d_%s", scd, dname)
				s := newStepper(t, broker.Addr(), d, fmt.Sprintf(dlCDCSpec, topic, scd,
					`    expectations:
      - {name: named, expr: 'name != "late"', on_violation: drop}`))
				s.produce(topic, `{"id":1,"name":"late","seq":5}`, `{"id":1,"name":"live","seq":10}`, `{"id":2,"name":"late","seq":3}`)
				s.update()
				fixed := newStepper(t, broker.Addr(), d, fmt.Sprintf(dlCDCSpec, topic, scd, ""))
				rep := fixed.replay(flows.DeadLetterFilter{Flow: "customers_cdc"})
				if rep.Replayed != 2 || len(rep.Failing) != 0 {
					t.Fatalf("replay: %+v", rep)
				}
				want := []string{"1,live,10,1", "2,late,3,2"}
				if scd == 2 {
					// The replayed change lands in history, before the live one.
					want = []string{"1,late,5,0,5,10", "1,live,10,1,10,∞", "2,late,3,2,3,∞"}
				}
				if got := fixed.rows("customers"); !slices.Equal(got, want) {
					t.Fatalf("after the replay: %v, want %v", got, want)
				}
				if got := fixed.pending(); len(got) != 0 {
					t.Fatalf("pending after the replay: %v", got)
				}
				if rep := fixed.replay(flows.DeadLetterFilter{}); rep.Replayed != 0 || len(rep.Failing) != 0 {
					t.Fatalf("second replay: %+v", rep)
				}
				if got := fixed.rows("customers"); !slices.Equal(got, want) {
					t.Fatalf("after the second replay: %v, want %v", got, want)
				}

				// While another process holds the target's lease (a run), a
				// replay of its flows is refused, naming the remedy.
				fixed.produce(topic, `{"id":3,"name":"x","seq":1,"bad":1}`, `{"id":"three","name":"x","seq":1}`)
				fixed.update()
				ctx := context.Background()
				sink, err := destination.Open(ctx, fixed.p, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer sink.Close()
				if err := sink.(sinks.Leaser).AcquireLease(ctx, "customers", "another-run", time.Minute); err != nil {
					t.Fatal(err)
				}
				other, err := destination.Open(ctx, fixed.p, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer other.Close()
				rep, err = flows.ReplayDeadLetters(ctx, fixed.p, other, flows.Options{LeaseTTL: 300 * time.Millisecond,
					HeartbeatEvery: 200 * time.Millisecond, HeartbeatTTL: time.Second}, flows.DeadLetterFilter{})
				if !errors.Is(err, flows.ErrTargetBusy) || !strings.Contains(err.Error(), "stop the run") || rep.Replayed != 0 {
					t.Fatalf("replay beside a lease holder: %v, %+v; want ErrTargetBusy", err, rep)
				}
				if got := fixed.pending(); len(got) != 1 || !strings.HasSuffix(got[0], " type_mismatch") {
					t.Fatalf("pending beside a lease holder: %v", got)
				}
			})
		}
	})
}
