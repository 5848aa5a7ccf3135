package consumer

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"maps"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/sluicehq/sluice/consumer/devkafka"
)

// startBroker starts an in-memory dev broker on a free port for one test.
func startBroker(t testing.TB, topics map[string]int32) string {
	t.Helper()
	b, err := devkafka.Start(devkafka.Config{Addr: "127.0.0.1:0", Topics: topics, MinSessionTimeout: 200 * time.Millisecond, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b.Addr()
}

var groupSeq atomic.Int64

// testConfig is a consumer config with short group timings.
func testConfig(t testing.TB, addr, topic string) Config {
	return Config{
		Brokers:           []string{addr},
		Group:             fmt.Sprintf("test-%d", groupSeq.Add(1)),
		Topic:             topic,
		SessionTimeout:    2 * time.Second,
		HeartbeatInterval: 300 * time.Millisecond,
		RebalanceTimeout:  2 * time.Second,
		DrainTimeout:      5 * time.Second,
		MaxWait:           100 * time.Millisecond,
		Logger:            testLogger(t),
	}
}

func init() {
	// SLUICE_TEST_SARAMA_LOG=1 shows sarama's own log when debugging a test.
	if os.Getenv("SLUICE_TEST_SARAMA_LOG") != "" {
		sarama.Logger = log.New(os.Stderr, "[sarama] ", log.Lmicroseconds)
	}
}

// testLogger logs to stderr when SLUICE_TEST_LOG is set, else discards.
func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("SLUICE_TEST_LOG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug - 4})).With("test", t.Name())
}

// produceN writes n records to each of the given partitions; record i of
// partition p has key "p-i" and a value of size bytes.
func produceN(t testing.TB, addr, topic string, partitions []int32, n, size int) {
	t.Helper()
	msgs := make([]Message, 0, n*len(partitions))
	for _, p := range partitions {
		for i := range n {
			v := make([]byte, size)
			copy(v, fmt.Sprintf("%d-%d", p, i))
			msgs = append(msgs, Message{Key: []byte(fmt.Sprintf("%d-%d", p, i)), Value: v, Partition: p})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := Produce(ctx, []string{addr}, topic, msgs); err != nil {
		t.Fatal(err)
	}
}

// fakeLedger is a Handler that keeps positions in a map, as a destination's
// ledger would: Process refuses a batch that does not continue from the
// stored position, and records how often each offset was processed.
type fakeLedger struct {
	mu      sync.Mutex
	pos     map[int32]int64
	seen    map[int32]map[int64]int
	batches []batchInfo
	rows    int

	// Optional behaviour.
	delay     time.Duration
	process   func(ctx context.Context, b *RecordBatch) error // called first; an error is returned
	positions func(partitions []int32) error
}

type batchInfo struct {
	Partition  int32
	From, Next int64
	Rows       int
	Bytes      int
	Generation int32
	At         time.Time
}

func newFakeLedger() *fakeLedger {
	return &fakeLedger{pos: map[int32]int64{}, seen: map[int32]map[int64]int{}}
}

func (l *fakeLedger) Positions(_ context.Context, _ string, partitions []int32) (map[int32]int64, error) {
	if l.positions != nil {
		if err := l.positions(partitions); err != nil {
			return nil, err
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[int32]int64{}
	for _, p := range partitions {
		if at, ok := l.pos[p]; ok {
			out[p] = at
		}
	}
	return out, nil
}

func (l *fakeLedger) Process(ctx context.Context, b *RecordBatch) error {
	if l.process != nil {
		if err := l.process(ctx, b); err != nil {
			return err
		}
	}
	if l.delay > 0 {
		time.Sleep(l.delay)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("process context: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	want, ok := l.pos[b.Partition]
	if !ok {
		want = -1
	}
	if b.From != want {
		return fmt.Errorf("stale batch: from %d, ledger at %d", b.From, want)
	}
	if len(b.Records) == 0 || b.Next != b.Records[len(b.Records)-1].Offset+1 {
		return fmt.Errorf("batch next %d does not follow its records", b.Next)
	}
	size := 0
	for i, r := range b.Records {
		if r.Partition != b.Partition || r.Topic != b.Topic {
			return fmt.Errorf("record %d of %s/%d is from %s/%d", i, b.Topic, b.Partition, r.Topic, r.Partition)
		}
		if i > 0 && r.Offset <= b.Records[i-1].Offset {
			return fmt.Errorf("offsets out of order: %d after %d", r.Offset, b.Records[i-1].Offset)
		}
		size += len(r.Key) + len(r.Value)
	}
	if size != b.Bytes {
		return fmt.Errorf("batch bytes %d, records hold %d", b.Bytes, size)
	}
	if l.seen[b.Partition] == nil {
		l.seen[b.Partition] = map[int64]int{}
	}
	for _, r := range b.Records {
		l.seen[b.Partition][r.Offset]++
	}
	l.pos[b.Partition] = b.Next
	l.rows += len(b.Records)
	l.batches = append(l.batches, batchInfo{b.Partition, b.From, b.Next, len(b.Records), b.Bytes, b.Generation, time.Now()})
	return nil
}

func (l *fakeLedger) positionsNow() map[int32]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.pos)
}

func (l *fakeLedger) rowCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rows
}

func (l *fakeLedger) batchList() []batchInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]batchInfo(nil), l.batches...)
}

// checkExactlyOnce verifies that every offset in [from[p], to[p]) of every
// partition was processed exactly once and nothing else was.
func (l *fakeLedger) checkExactlyOnce(t testing.TB, from, to map[int32]int64) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for p, end := range to {
		for o := from[p]; o < end; o++ {
			if n := l.seen[p][o]; n != 1 {
				t.Errorf("partition %d offset %d processed %d times, want once", p, o, n)
			}
		}
		for o, n := range l.seen[p] {
			if o < from[p] || o >= end {
				t.Errorf("partition %d offset %d processed %d times, want never", p, o, n)
			}
		}
	}
	for p := range l.seen {
		if _, ok := to[p]; !ok {
			t.Errorf("partition %d processed, want nothing", p)
		}
	}
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runConsume runs Consume in the background; the returned function waits for
// its result.
func runConsume(ctx context.Context, cfg Config, h Handler) func(t testing.TB) error {
	done := make(chan error, 1)
	go func() { done <- Consume(ctx, cfg, h) }()
	return func(t testing.TB) error {
		t.Helper()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			t.Fatal("Consume did not return within 30s")
			return errors.New("unreachable")
		}
	}
}

// eachMode runs test as a member of a consumer group and reading every
// partition directly (Config.Exclusive).
func eachMode(t *testing.T, test func(t *testing.T, exclusive bool)) {
	t.Run("group", func(t *testing.T) { test(t, false) })
	t.Run("exclusive", func(t *testing.T) { test(t, true) })
}
