package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
)

// inferredOrdersSpec is the demo's orders pipeline with no columns
// declared: the table takes its columns from the messages (schema_contract
// evolve, the default).
const inferredOrdersSpec = `pipeline: demo
kafka:
  brokers: [%s]
destination:
  local: {path: %s}
tables:
  - name: orders
flows:
  - name: orders_stream
    target: orders
    kind: append
    source:
      kafka:
        topic: orders
        format: json
`

// BenchmarkAppendInferredLocal measures the cost of inference and
// evolution on the append path: the same orders loaded into the local
// destination, alternately into a table typed by its messages and into a
// table declaring exactly the columns inference gave it (so that both
// write the same Parquet), and reports the ratio of the median
// throughputs, inferred / declared. Run it with -benchtime 1x (make bench
// does).
func BenchmarkAppendInferredLocal(b *testing.B) {
	n := benchMessages()
	broker := startBroker(b, map[string]int32{"orders": benchPartitions})
	msgs, _ := orderMessages(n)
	produceMsgs(b, broker.Addr(), "orders", msgs)
	msgs = nil
	ctx := context.Background()

	inferredSpec := fmt.Sprintf(inferredOrdersSpec, broker.Addr(), "./data")
	for b.Loop() {
		// The first run of a process is slower whatever it runs (the
		// broker's and the heap's warm-up): it only gives the columns.
		_, cols := loadTopic(ctx, b, inferredSpec, n)
		declaredSpec := declaredOrdersSpec(broker.Addr(), cols)
		var inferred, declared []time.Duration
		for range inferenceRounds {
			took, again := loadTopic(ctx, b, declaredSpec, n)
			if !cols.Equal(again) {
				b.Fatalf("declared table has columns %v, the inferred one %v", again, cols)
			}
			declared = append(declared, took)
			took, _ = loadTopic(ctx, b, inferredSpec, n)
			inferred = append(inferred, took)
		}
		slices.Sort(inferred)
		slices.Sort(declared)
		mi, md := inferred[len(inferred)/2], declared[len(declared)/2]
		ir, dr := float64(n)/mi.Seconds(), float64(n)/md.Seconds()
		b.ReportMetric(dr, "declared_msgs/s")
		b.ReportMetric(ir, "inferred_msgs/s")
		b.ReportMetric(ir/dr, "ratio")
		fmt.Printf("append into local, %d messages, %d columns, median of %d alternating runs: declared %.0f msg/s (%v); inferred %.0f msg/s (%v); ratio %.2f\n",
			n, len(cols.Columns), inferenceRounds, dr, roundAll(declared), ir, roundAll(inferred), ir/dr)
	}
}

// inferenceRounds is how many times BenchmarkAppendInferredLocal loads
// the topic each way.
const inferenceRounds = 3

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// declaredOrdersSpec is inferredOrdersSpec with cols declared on the table.
func declaredOrdersSpec(brokerAddr string, cols batch.Schema) string {
	var decl strings.Builder
	decl.WriteString("  - name: orders\n    columns:\n")
	for _, c := range cols.Columns {
		fmt.Fprintf(&decl, "      - {name: %s, type: %q, nullable: %t}\n", c.Name, c.Type, c.Nullable)
	}
	return strings.Replace(fmt.Sprintf(inferredOrdersSpec, brokerAddr, "./data"), "  - name: orders\n", decl.String(), 1)
}
