package consumer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/consumer/devkafka"
)

const (
	benchRecords    = 1_000_000
	benchValueSize  = 200
	benchPartitions = 4
)

// noopHandler processes nothing, so a benchmark measures the consumer.
type noopHandler struct{}

func (noopHandler) Positions(context.Context, string, []int32) (map[int32]int64, error) {
	return nil, nil
}
func (noopHandler) Process(context.Context, *RecordBatch) error { return nil }

// BenchmarkConsume compares a bounded Consume with a no-op handler against
// ConsumeOnly (sarama reading and discarding) on one topic of 1M records of
// 200 bytes, produced once per run.
func BenchmarkConsume(b *testing.B) {
	broker, err := devkafka.Start(devkafka.Config{Addr: "127.0.0.1:0", Topics: map[string]int32{"bench": benchPartitions}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { broker.Close() })
	addr := broker.Addr()
	msgs := make([]Message, benchRecords)
	for i := range msgs {
		v := make([]byte, benchValueSize)
		copy(v, fmt.Sprintf(`{"id":%d,"payload":"`, i))
		for j := len(fmt.Sprintf(`{"id":%d,"payload":"`, i)); j < benchValueSize-2; j++ {
			v[j] = 'a' + byte((i+j)%26)
		}
		copy(v[benchValueSize-2:], `"}`)
		msgs[i] = Message{Value: v, Partition: -1}
	}
	start := time.Now()
	if err := Produce(context.Background(), []string{addr}, "bench", msgs); err != nil {
		b.Fatal(err)
	}
	b.Logf("produced %d records of %d bytes in %v", benchRecords, benchValueSize, time.Since(start))
	msgs = nil
	total := int64(benchRecords * benchValueSize)

	b.Run("Consume", func(b *testing.B) {
		b.SetBytes(total)
		b.ReportAllocs()
		for i := range b.N {
			cfg := Config{Brokers: []string{addr}, Group: fmt.Sprintf("bench-%d-%d", b.N, i), Topic: "bench", Bounded: true}
			if err := Consume(context.Background(), cfg, noopHandler{}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(benchRecords)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
	})
	b.Run("ConsumeOnly", func(b *testing.B) {
		b.SetBytes(total)
		b.ReportAllocs()
		for range b.N {
			n, size, err := ConsumeOnly(context.Background(), []string{addr}, "bench")
			if err != nil {
				b.Fatal(err)
			}
			if n != benchRecords || size != total {
				b.Fatalf("read %d records of %d bytes, want %d of %d", n, size, benchRecords, total)
			}
		}
		b.ReportMetric(float64(benchRecords)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
	})
}
