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

	"github.com/IBM/sarama"
	"github.com/parquet-go/parquet-go"

	"github.com/sluicehq/sluice/consumer"
	"github.com/sluicehq/sluice/consumer/devkafka"
	"github.com/sluicehq/sluice/flows"
	"github.com/sluicehq/sluice/flows/spec"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/destination"
)

// Once-flows end to end, beside live flows on the same target: files
// written as real Parquet, events through the broker, one update per step.

type rawRow struct {
	ID   int64  `parquet:"id"`
	Name string `parquet:"name"`
}

type orderRow struct {
	OrderID int64  `parquet:"order_id"`
	Status  string `parquet:"status"`
	Seq     int64  `parquet:"seq"`
}

func writeParquet[T any](t *testing.T, path string, rows []T) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := parquet.WriteFile(path, rows); err != nil {
		t.Fatal(err)
	}
}

// stepper runs one pipeline spec step by step against a broker.
type stepper struct {
	t    *testing.T
	addr string
	dir  string
	p    *spec.Pipeline
	// wrap, when set, returns the sink an update runs against, given the
	// one it opened.
	wrap func(sinks.Sink) sinks.Sink
	// prefix is cut from the sources of the dead letters pending reports.
	prefix string
}

func newStepper(t *testing.T, addr, dest, body string) *stepper {
	dir := t.TempDir()
	doc := fmt.Sprintf("pipeline: once\nkafka:\n  brokers: [%s]\n  session_timeout: 2s\ndestination:\n%s\n%s", addr, dest, body)
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := spec.Load(path)
	if err != nil {
		t.Fatalf("spec: %v\n%s", err, doc)
	}
	return &stepper{t: t, addr: addr, dir: dir, p: p}
}

func (s *stepper) produce(topic string, values ...string) {
	s.t.Helper()
	ctx := context.Background()
	if err := consumer.CreateTopic(ctx, []string{s.addr}, topic, 1); err != nil {
		s.t.Fatal(err)
	}
	var ms []consumer.Message
	for _, v := range values {
		ms = append(ms, consumer.Message{Value: []byte(v), Partition: 0})
	}
	if err := consumer.Produce(ctx, []string{s.addr}, topic, ms); err != nil {
		s.t.Fatal(err)
	}
}

func (s *stepper) update() {
	s.t.Helper()
	s.updateWith(flows.Options{})
}

func (s *stepper) updateWith(opts flows.Options) {
	s.t.Helper()
	if err := s.tryUpdateWith(opts); err != nil {
		s.t.Fatalf("update: %v", err)
	}
}

// tryUpdateWith runs one update and returns its error.
func (s *stepper) tryUpdateWith(opts flows.Options) error {
	s.t.Helper()
	ctx := context.Background()
	sink, err := destination.Open(ctx, s.p, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	defer sink.Close()
	opts.Mode, opts.HeartbeatEvery, opts.HeartbeatTTL = flows.ModeUpdate, 200*time.Millisecond, time.Second
	if s.wrap != nil {
		return flows.Execute(ctx, s.p, s.wrap(sink), opts)
	}
	return flows.Execute(ctx, s.p, sink, opts)
}

// startBroker starts an in-process broker for the test.
func startBroker(t *testing.T) *devkafka.Broker {
	t.Helper()
	broker, err := devkafka.Start(devkafka.Config{Addr: "127.0.0.1:0", MinSessionTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { broker.Close() })
	return broker
}

// rows reads table's rows as strings, without the columns drop names. On
// a test cluster it reads them on each server alone and waits (bounded)
// until all agree: a load is on the replica it was published on at once,
// on the other once it fetched it.
func (s *stepper) rows(table string, drop ...string) []string {
	s.t.Helper()
	read := func(p *spec.Pipeline) ([]string, error) {
		ctx := context.Background()
		sink, err := destination.Open(ctx, p, nil)
		if err != nil {
			return nil, err
		}
		defer sink.Close()
		b, err := sink.Scan(ctx, table)
		if err != nil {
			return nil, err
		}
		keep := b.Schema.Names()
		keep = slices.DeleteFunc(keep, func(n string) bool { return slices.Contains(drop, n) })
		return rowStrings(b.Select(keep...)), nil
	}
	servers := s.eachServer()
	if servers == nil {
		got, err := read(s.p)
		if err != nil {
			s.t.Fatal(err)
		}
		return got
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var first []string
		var problem error
		for i, p := range servers {
			got, err := read(p)
			switch {
			case err != nil:
				problem = fmt.Errorf("server %d: %w", i+1, err)
			case i == 0:
				first = got
			case !slices.Equal(got, first):
				problem = fmt.Errorf("server 1 has %q, server %d %q", first, i+1, got)
			}
			if problem != nil {
				break
			}
		}
		if problem == nil {
			return first
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("table %s after 30 s: %v", table, problem)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// eachServer returns, for a spec on a test cluster, the spec on each of
// its servers alone; nil for other specs.
func (s *stepper) eachServer() []*spec.Pipeline {
	s.t.Helper()
	doc, err := os.ReadFile(filepath.Join(s.dir, "sluice.yaml"))
	if err != nil {
		s.t.Fatal(err)
	}
	return serverSpecs(s.t, doc, s.dir)
}

func TestOnceFlowsEndToEnd(t *testing.T) {
	dests := destinations(t)
	broker := startBroker(t)
	for _, dname := range slices.Sorted(maps.Keys(dests)) {
		dest := dests[dname]
		t.Run(dname+"/append-once-beside-live", func(t *testing.T) {
			t.Parallel()
			topic := "e01_" + dname
			s := newStepper(t, broker.Addr(), dest(t), fmt.Sprintf(`tables:
  - name: raw
    columns:
      - {name: id, type: int64}
      - {name: name, type: string}
flows:
  - name: inc
    target: raw
    kind: append
    source: {kafka: {topic: %s, format: json}}
  - name: bf
    target: raw
    kind: append
    once: true
    source: {files: {path: "history/*.parquet", format: parquet}}
`, topic))
			writeParquet(t, filepath.Join(s.dir, "history", "r1.parquet"), []rawRow{{1, "r1a"}, {2, "r1b"}})
			writeParquet(t, filepath.Join(s.dir, "history", "r2.parquet"), []rawRow{{3, "r2a"}})
			s.produce(topic, `{"id":10,"name":"live1"}`, `{"id":11,"name":"live2"}`)
			s.update()
			want := []string{"1,r1a", "2,r1b", "3,r2a", "10,live1", "11,live2"}
			if got := s.rows("raw", "_sluice_load_id"); !slices.Equal(got, want) {
				t.Fatalf("run 1: %q, want %q", got, want)
			}
			if st := s.status("bf"); st.Once != "complete" || st.FilesDone != 2 || st.Rows != 3 {
				t.Fatalf("status of bf: %+v, want complete with 2 files and 3 rows", st)
			}
			// r3 arrives after the once-flow completed: never read.
			writeParquet(t, filepath.Join(s.dir, "history", "r3.parquet"), []rawRow{{4, "r3a"}})
			s.produce(topic, `{"id":12,"name":"live3"}`)
			s.update()
			want = []string{"1,r1a", "2,r1b", "3,r2a", "10,live1", "11,live2", "12,live3"}
			if got := s.rows("raw", "_sluice_load_id"); !slices.Equal(got, want) {
				t.Fatalf("run 2: %q, want %q", got, want)
			}
			// A full refresh replays everything once: the once-flow runs
			// again over the files that exist now, the topic from its start.
			s.updateWith(flows.Options{FullRefresh: true})
			want = []string{"1,r1a", "2,r1b", "3,r2a", "4,r3a", "10,live1", "11,live2", "12,live3"}
			if got := s.rows("raw", "_sluice_load_id"); !slices.Equal(got, want) {
				t.Fatalf("full refresh: %q, want %q", got, want)
			}
			s.update()
			if got := s.rows("raw", "_sluice_load_id"); !slices.Equal(got, want) {
				t.Fatalf("update after the refresh: %q, want %q", got, want)
			}
		})
		t.Run(dname+"/files-each-once", func(t *testing.T) {
			t.Parallel()
			s := newStepper(t, broker.Addr(), dest(t), `tables:
  - name: raw
    columns:
      - {name: id, type: int64}
      - {name: name, type: string}
      - {name: day, type: date}
flows:
  - name: files
    target: raw
    kind: append
    source: {files: {path: "in/**/*.parquet"}}
    batch: {rows: 2}
`)
			writeParquet(t, filepath.Join(s.dir, "in", "day=2026-01-01", "a.parquet"), []rawRow{{1, "a"}, {2, "b"}, {3, "c"}})
			s.update()
			writeParquet(t, filepath.Join(s.dir, "in", "day=2026-01-02", "b.parquet"), []rawRow{{4, "d"}})
			s.update()
			s.update()
			want := []string{"1,a,2026-01-01", "2,b,2026-01-01", "3,c,2026-01-01", "4,d,2026-01-02"}
			if got := s.rows("raw", "_sluice_load_id"); !slices.Equal(got, want) {
				t.Fatalf("got %q, want %q", got, want)
			}
		})
		t.Run(dname+"/cdc-once-beside-live", func(t *testing.T) {
			t.Parallel()
			topic := "e02_" + dname
			s := newStepper(t, broker.Addr(), dest(t), fmt.Sprintf(`tables:
  - name: orders
flows:
  - name: backfill
    target: orders
    kind: auto_cdc
    once: true
    source:
      files:
        path: "orders/*.parquet"
        format: parquet
        columns:
          - {name: order_id, type: int64}
          - {name: status, type: string}
          - {name: seq, type: int64}
    keys: [order_id]
    sequence_by: seq
    except_column_list: [seq]
  - name: live
    target: orders
    kind: auto_cdc
    source:
      kafka:
        topic: %s
        format: json
        columns:
          - {name: order_id, type: int64}
          - {name: status, type: string, nullable: true}
          - {name: op, type: string, nullable: true}
          - {name: seq, type: int64}
    keys: [order_id]
    sequence_by: seq
    apply_as_deletes: 'op == "D"'
    except_column_list: [op, seq]
`, topic))
			writeParquet(t, filepath.Join(s.dir, "orders", "o1.parquet"), []orderRow{{1, "open", 100}, {2, "open", 100}, {5, "open", 100}})
			s.produce(topic,
				`{"order_id":1,"status":"shipped","op":"U","seq":150}`,
				`{"order_id":2,"op":"D","seq":160}`,
				`{"order_id":3,"status":"open","op":"U","seq":170}`,
				`{"order_id":1,"status":"stale","op":"U","seq":90}`)
			s.update()
			want := []string{"1,shipped", "3,open", "5,open"}
			if got := s.rows("orders"); !slices.Equal(got, want) {
				t.Fatalf("run 1: %q, want %q", got, want)
			}
			// A file added to the once-flow's path later is never read.
			writeParquet(t, filepath.Join(s.dir, "orders", "o2.parquet"), []orderRow{{4, "open", 200}})
			s.update()
			if got := s.rows("orders"); !slices.Equal(got, want) {
				t.Fatalf("run 2: %q, want %q", got, want)
			}
			// Refreshing the once-flow empties its target and replays both
			// flows writing it: the once-flow now reads both files.
			s.updateWith(flows.Options{Refresh: []string{"backfill"}})
			want = []string{"1,shipped", "3,open", "4,open", "5,open"}
			if got := s.rows("orders"); !slices.Equal(got, want) {
				t.Fatalf("refresh: %q, want %q", got, want)
			}
		})
	}
}

func TestFullRefreshRetentionGuard(t *testing.T) {
	broker := startBroker(t)
	s := newStepper(t, broker.Addr(), "  local: {path: ./data}", `tables:
  - name: raw
    columns:
      - {name: id, type: int64}
      - {name: name, type: string}
flows:
  - name: inc
    target: raw
    kind: append
    source: {kafka: {topic: guarded, format: json}}
`)
	s.produce("guarded", `{"id":1,"name":"a"}`, `{"id":2,"name":"b"}`, `{"id":3,"name":"c"}`)
	s.update()

	// Retention drops the first two records the flow read.
	admin, err := sarama.NewClusterAdmin([]string{broker.Addr()}, kafkaConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.DeleteRecords("guarded", map[int32]int64{0: 2}); err != nil {
		t.Fatal(err)
	}

	if err := s.tryUpdateWith(flows.Options{FullRefresh: true}); !errors.Is(err, flows.ErrDataLoss) {
		t.Fatalf("refresh over a truncated topic: %v, want ErrDataLoss", err)
	}
	want := []string{"1,a", "2,b", "3,c"}
	if got := s.rows("raw", "_sluice_load_id"); !slices.Equal(got, want) {
		t.Fatalf("after the refused refresh: %q, want %q (untouched)", got, want)
	}
	s.updateWith(flows.Options{FullRefresh: true, AllowDataLoss: true})
	if got, want := s.rows("raw", "_sluice_load_id"), []string{"3,c"}; !slices.Equal(got, want) {
		t.Fatalf("after --allow-data-loss: %q, want %q", got, want)
	}
}

func kafkaConfig() *sarama.Config {
	c := sarama.NewConfig()
	c.Version = sarama.V2_8_0_0
	return c
}

// report returns what `sluice status` reports, without Kafka.
func (s *stepper) report() *flows.Report {
	s.t.Helper()
	ctx := context.Background()
	sink, err := destination.Open(ctx, s.p, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	defer sink.Close()
	rep, err := flows.Status(ctx, s.p, sink, false)
	if err != nil {
		s.t.Fatal(err)
	}
	return rep
}

// status returns one flow's line of `sluice status`.
func (s *stepper) status(flow string) flows.FlowReport {
	s.t.Helper()
	rep := s.report()
	for _, f := range rep.Flows {
		if f.Name == flow {
			return f
		}
	}
	s.t.Fatalf("status has no flow %s", flow)
	return flows.FlowReport{}
}
