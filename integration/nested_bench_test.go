package integration

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/consumer"
	"github.com/sluicehq/sluice/flows"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/sample"
	"github.com/sluicehq/sluice/flows/spec"
	"github.com/sluicehq/sluice/sinks"
	sinkdest "github.com/sluicehq/sluice/sinks/destination"
)

// nestedBenchSpec is a pipeline of one table typed by the messages of a
// topic: %s the broker, the destination, the topic.
const nestedBenchSpec = `pipeline: demo
kafka:
  brokers: [%s]
destination: %s
tables:
  - name: orders
flows:
  - name: orders_stream
    target: orders
    kind: append
    source: {kafka: {topic: %s}}
`

// nestedItems is how many items each nested order has.
const nestedItems = 5

// nestedOrders returns n sample orders as the demo produces them, and the
// same orders each with nestedItems items (a list of objects of three
// fields, about 60 bytes each), spread over benchPartitions partitions.
func nestedOrders(n int) (flat, nested []consumer.Message) {
	rng := rand.New(rand.NewPCG(1, 2))
	flat, nested = make([]consumer.Message, n), make([]consumer.Message, n)
	for i := range flat {
		v := sample.Order(rng, i)
		flat[i] = consumer.Message{Key: []byte(strconv.Itoa(i)), Value: v, Partition: int32(i % benchPartitions)}
		w := append(bytes.Clone(v[:len(v)-1]), `,"lines":[`...)
		for j := range nestedItems {
			if j > 0 {
				w = append(w, ',')
			}
			w = fmt.Appendf(w, `{"sku":"sku-%06d","qty":%d,"price":"%d.%02d"}`, rng.IntN(100_000), 1+rng.IntN(9), rng.IntN(500), rng.IntN(100))
		}
		nested[i] = consumer.Message{Key: flat[i].Key, Value: append(w, "]}"...), Partition: flat[i].Partition}
	}
	return flat, nested
}

// BenchmarkNestedLocal measures nested orders (each with five items, into
// a table typed by its messages and its child table orders__lines) against
// the flat append of the same orders without items, in the same run, in
// orders (rows of input) per second, into the local destination. Run it
// with -benchtime 1x (make bench does).
func BenchmarkNestedLocal(b *testing.B) { benchNested(b, "local") }

// BenchmarkNestedClickHouse is BenchmarkNestedLocal into ClickHouse.
func BenchmarkNestedClickHouse(b *testing.B) { benchNested(b, "clickhouse") }

func benchNested(b *testing.B, kind string) {
	addr := ""
	if kind == "clickhouse" {
		addr = clickHouseAddr(b)
	}
	n := benchMessages() / 5
	broker := startBroker(b, map[string]int32{"flat": benchPartitions, "nested": benchPartitions})
	flat, nested := nestedOrders(n)
	produceMsgs(b, broker.Addr(), "flat", flat)
	produceMsgs(b, broker.Addr(), "nested", nested)
	flat, nested = nil, nil
	ctx := context.Background()
	run := func(topic string) time.Duration {
		dest := "{local: {path: ./data}}"
		if kind == "clickhouse" {
			dest = newClickHouseDest(b, addr).yaml()
		}
		took, _ := loadTopic(ctx, b, fmt.Sprintf(nestedBenchSpec, broker.Addr(), dest, topic), n)
		return took
	}
	for b.Loop() {
		run("flat") // a process's first run is slower, whatever it runs
		var flatRuns, nestedRuns []time.Duration
		for range inferenceRounds {
			flatRuns = append(flatRuns, run("flat"))
			nestedRuns = append(nestedRuns, run("nested"))
		}
		slices.Sort(flatRuns)
		slices.Sort(nestedRuns)
		fr := float64(n) / flatRuns[len(flatRuns)/2].Seconds()
		nr := float64(n) / nestedRuns[len(nestedRuns)/2].Seconds()
		b.ReportMetric(fr, "flat_orders/s")
		b.ReportMetric(nr, "nested_orders/s")
		b.ReportMetric(nr/fr, "ratio")
		fmt.Printf("into %s, %d orders, %d items each: flat %.0f orders/s (%v); nested %.0f orders/s, %.0f rows/s (%v); ratio %.2f\n",
			kind, n, nestedItems, fr, roundAll(flatRuns), nr, nr*(1+nestedItems), roundAll(nestedRuns), nr/fr)
	}
}

// runUpdate runs update of specText in a fresh folder, in this process,
// and returns how long it took and its destination, open: the caller
// closes it.
func runUpdate(ctx context.Context, b *testing.B, specText string) (time.Duration, sinks.Sink) {
	b.Helper()
	took, sink, err := update(ctx, b.TempDir(), specText)
	if err != nil {
		b.Fatal(err)
	}
	return took, sink
}

// update is runUpdate in folder dir, for any goroutine.
func update(ctx context.Context, dir, specText string) (time.Duration, sinks.Sink, error) {
	specPath := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(specPath, []byte(specText), 0o644); err != nil {
		return 0, nil, err
	}
	p, err := spec.Load(specPath)
	if err != nil {
		return 0, nil, err
	}
	sink, err := sinkdest.Open(ctx, p, nil)
	if err != nil {
		return 0, nil, err
	}
	start := time.Now()
	if err := flows.Execute(ctx, p, sink, flows.Options{Mode: flows.ModeUpdate}); err != nil {
		sink.Close()
		return 0, nil, err
	}
	return time.Since(start), sink, nil
}

// loadTopic runs update of specText (runUpdate), checks that table orders
// holds n rows, and returns how long the update took and the table's
// columns.
func loadTopic(ctx context.Context, b *testing.B, specText string, n int) (time.Duration, batch.Schema) {
	b.Helper()
	took, sink := runUpdate(ctx, b, specText)
	defer sink.Close()
	got, err := sink.Scan(ctx, "orders")
	if err != nil {
		b.Fatal(err)
	}
	if got.Len() != n {
		b.Fatalf("sluice loaded %d orders, want %d", got.Len(), n)
	}
	cols, err := sink.Columns(ctx, "orders")
	if err != nil {
		b.Fatal(err)
	}
	return took, cols
}
