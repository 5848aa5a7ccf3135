package flows_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/consumer"
	"github.com/sluicehq/sluice/flows"
	"github.com/sluicehq/sluice/flows/spec"
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
		ctx := context.Background()
		topic := "probe_" + dname
		flow := flowYAML("f", topic, fmt.Sprintf(f1Columns, ""),
			"    except_column_list: [op, seq]\n    stored_as_scd_type: 2\n    batch: {rows: 10}\n")
		doc := fmt.Sprintf("pipeline: probe\nkafka:\n  brokers: [%s]\n  session_timeout: 2s\ndestination:\n%s\ntables:\n  - name: t\nflows:%s",
			broker.Addr(), dest(t), flow)
		path := filepath.Join(t.TempDir(), "sluice.yaml")
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		p, err := spec.Load(path)
		if err != nil {
			t.Fatalf("spec: %v\n%s", err, doc)
		}
		if err := consumer.CreateTopic(ctx, []string{broker.Addr()}, topic, 1); err != nil {
			t.Fatal(err)
		}
		const keys = 20
		// produce sends the versions from..to of every key, shuffled: with
		// batches of 10, most keys come back in later batches.
		produce := func(from, to int64) {
			t.Helper()
			var ms []consumer.Message
			for id := int64(1); id <= keys; id++ {
				for seq := from; seq <= to; seq++ {
					ms = append(ms, consumer.Message{Value: []byte(U(id, fmt.Sprint("n", seq), seq))})
				}
			}
			rand.Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] })
			if err := consumer.Produce(ctx, []string{broker.Addr()}, topic, ms); err != nil {
				t.Fatal(err)
			}
		}
		// update runs one update and returns how many reads of key states
		// it made; the target must then hold versions 1..last of every key.
		update := func(opts flows.Options, last int64) int64 {
			t.Helper()
			opened, err := flows.OpenSink(ctx, p, nil)
			if err != nil {
				t.Fatal(err)
			}
			reads := &keyReads{}
			var sink sinks.Sink
			switch s := opened.(type) {
			case *local.Sink:
				sink = countedLocal{s, reads}
			case *clickhouse.Sink:
				sink = countedClickHouse{s, reads}
			default:
				t.Fatalf("unexpected sink %T", opened)
			}
			opts.Mode, opts.HeartbeatEvery, opts.HeartbeatTTL = flows.ModeUpdate, 200*time.Millisecond, time.Second
			err = flows.Execute(ctx, p, sink, opts)
			if err == nil {
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
				got, serr := sink.Scan(ctx, "t")
				if serr != nil {
					t.Fatal(serr)
				}
				if rows := rowStrings(got); !slices.Equal(rows, want) {
					t.Errorf("target rows\n got %q\nwant %q", rows, want)
				}
			}
			opened.Close()
			if err != nil {
				t.Fatalf("update: %v", err)
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
