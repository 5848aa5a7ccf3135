package flows_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/flows"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse"
	"github.com/sluicehq/sluice/sinks/local"
)

// keyReads counts the GetState calls that ask for key states (not only
// the table's own state, key "").
type keyReads struct{ n atomic.Int64 }

func (r *keyReads) count(keys []string) {
	if slices.ContainsFunc(keys, func(k string) bool { return k != "" }) {
		r.n.Add(1)
	}
}

// The destinations with their key state reads counted; every other
// method, and so every optional interface, is the sink's own.
type (
	countedLocal struct {
		*local.Sink
		*keyReads
	}
	countedClickHouse struct {
		*clickhouse.Sink
		*keyReads
	}
)

func (s countedLocal) GetState(ctx context.Context, table string, keys []string) (map[string][]byte, error) {
	s.count(keys)
	return s.Sink.GetState(ctx, table, keys)
}

func (s countedClickHouse) GetState(ctx context.Context, table string, keys []string) (map[string][]byte, error) {
	s.count(keys)
	return s.Sink.GetState(ctx, table, keys)
}

// TestNewTargetReadsNoState checks that the loads of a new SCD type 2
// target read no key state back: the cache finds no state in the
// destination once, and holds every state its loads commit. The target is
// then right although its keys come back batch after batch, out of order.
// A target with states is read as before; a full refresh makes it new
// again.
func TestNewTargetReadsNoState(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		topic := "probe_" + dname
		s := newStepper(t, broker.Addr(), dest(t), "tables:\n  - name: t\nflows:"+flowYAML("f", topic, fmt.Sprintf(f1Columns, ""),
			"    except_column_list: [op, seq]\n    stored_as_scd_type: 2\n    batch: {rows: 10}\n"))
		reads := &keyReads{}
		s.wrap = func(opened sinks.Sink) sinks.Sink {
			switch sink := opened.(type) {
			case *local.Sink:
				return countedLocal{sink, reads}
			case *clickhouse.Sink:
				return countedClickHouse{sink, reads}
			}
			t.Fatalf("unexpected sink %T", opened)
			return nil
		}
		const keys = 20
		// produce sends the versions from..to of every key, shuffled: with
		// batches of 10, most keys come back in later batches.
		produce := func(from, to int64) {
			var values []string
			for id := int64(1); id <= keys; id++ {
				for seq := from; seq <= to; seq++ {
					values = append(values, U(id, fmt.Sprint("n", seq), seq))
				}
			}
			rand.Shuffle(len(values), func(i, j int) { values[i], values[j] = values[j], values[i] })
			s.produce(topic, values...)
		}
		// update runs one update and returns how many reads of key states
		// it made; the target must then hold versions 1..last of every key.
		update := func(opts flows.Options, last int64) int64 {
			t.Helper()
			reads.n.Store(0)
			s.updateWith(opts)
			var want []string
			for id := int64(1); id <= keys; id++ {
				for seq := int64(1); seq <= last; seq++ {
					end := "∞"
					if seq < last {
						end = fmt.Sprint(seq + 1)
					}
					want = append(want, fmt.Sprintf("%d,n%d,%d,%s", id, seq, seq, end))
				}
			}
			if rows := s.rows("t"); !slices.Equal(rows, want) {
				t.Errorf("target rows\n got %q\nwant %q", rows, want)
			}
			return reads.n.Load()
		}

		produce(1, 3)
		if n := update(flows.Options{}, 3); n != 0 {
			t.Errorf("a new target: %d reads of key states, want none", n)
		}
		produce(4, 5)
		if n := update(flows.Options{}, 5); n == 0 {
			t.Error("a target with states: no read of key states")
		}
		if n := update(flows.Options{FullRefresh: true}, 5); n != 0 {
			t.Errorf("a full refresh: %d reads of key states, want none", n)
		}
	})
}
