package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/consumer"
	"github.com/sluicehq/sluice/flows"
	"github.com/sluicehq/sluice/flows/sample"
	"github.com/sluicehq/sluice/flows/spec"
)

// benchMessages is the size of the benchmark's topic; SLUICE_BENCH_MESSAGES
// overrides it.
func benchMessages() int {
	if v, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_MESSAGES")); err == nil && v > 0 {
		return v
	}
	return 1_000_000
}

// BenchmarkAppendLocal measures sluice's append throughput from the broker
// into the local destination against a consume-only baseline (sarama reading
// the same topic and discarding) measured in the same run, and reports the
// ratio. Run it with -benchtime 1x (make bench does).
func BenchmarkAppendLocal(b *testing.B) {
	n := benchMessages()
	broker := startBroker(b, map[string]int32{"orders": 4})
	rng := rand.New(rand.NewPCG(1, 2))
	msgs := make([]consumer.Message, n)
	var size int64
	for i := range msgs {
		v := sample.Order(rng, i)
		size += int64(len(v))
		msgs[i] = consumer.Message{Key: []byte(strconv.Itoa(i)), Value: v, Partition: -1}
	}
	produceMsgs(b, broker.Addr(), "orders", msgs)
	msgs = nil
	ctx := context.Background()

	for b.Loop() {
		start := time.Now()
		recs, bytes, err := consumer.ConsumeOnly(ctx, []string{broker.Addr()}, "orders")
		if err != nil {
			b.Fatal(err)
		}
		base := time.Since(start)
		if recs != int64(n) {
			b.Fatalf("consume-only read %d records, want %d", recs, n)
		}

		dir := b.TempDir()
		specPath := filepath.Join(dir, "sluice.yaml")
		if err := os.WriteFile(specPath, fmt.Appendf(nil, sample.Spec, broker.Addr(), "./data"), 0o644); err != nil {
			b.Fatal(err)
		}
		p, err := spec.Load(specPath)
		if err != nil {
			b.Fatal(err)
		}
		sink, err := flows.OpenSink(ctx, p, nil)
		if err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		if err := flows.Execute(ctx, p, sink, flows.Options{Mode: flows.ModeUpdate}); err != nil {
			b.Fatal(err)
		}
		took := time.Since(start)
		got, err := sink.Scan(ctx, "orders")
		if err != nil {
			b.Fatal(err)
		}
		if got.Len() != n {
			b.Fatalf("sluice loaded %d rows, want %d", got.Len(), n)
		}
		sink.Close()

		baseRate, rate := float64(n)/base.Seconds(), float64(n)/took.Seconds()
		b.ReportMetric(baseRate, "consume_only_msgs/s")
		b.ReportMetric(rate, "sluice_msgs/s")
		b.ReportMetric(float64(size)/1e6/took.Seconds(), "sluice_MB/s")
		b.ReportMetric(rate/baseRate, "ratio")
		fmt.Printf("append into local, %d messages (%.0f bytes each): consume-only %.0f msg/s (%.1f MB/s, %s); sluice %.0f msg/s (%.1f MB/s, %s); ratio %.2f\n",
			n, float64(size)/float64(n), baseRate, float64(bytes)/1e6/base.Seconds(), base.Round(time.Millisecond),
			rate, float64(size)/1e6/took.Seconds(), took.Round(time.Millisecond), rate/baseRate)
	}
}
