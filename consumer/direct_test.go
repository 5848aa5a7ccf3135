package consumer

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// admin returns a cluster admin of the broker at addr, closed with the test.
func admin(t testing.TB, addr string) sarama.ClusterAdmin {
	t.Helper()
	a, err := sarama.NewClusterAdmin([]string{addr}, baseConfig("test-admin", nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// TestExclusiveIgnoresTheGroup checks that an Exclusive Consume reads
// every partition at once while a member of its group, stuck in Process
// (paused, or dead with a session not expired yet), holds them all.
func TestExclusiveIgnoresTheGroup(t *testing.T) {
	addr := startBroker(t, map[string]int32{"t": 3})
	produceN(t, addr, "t", []int32{0, 1, 2}, 200, 10)
	cfg := testConfig(t, addr, "t")
	cfg.SessionTimeout = 10 * time.Second
	cfg.HeartbeatInterval = 3 * time.Second
	cfg.RebalanceTimeout = 10 * time.Second
	cfg.MaxRows = 50

	stuck := newFakeLedger()
	entered, release := make(chan struct{}), make(chan struct{})
	var enter sync.Once // partitions call Process concurrently
	stuck.process = func(context.Context, *RecordBatch) error {
		enter.Do(func() { close(entered) })
		<-release
		return nil
	}
	var freeOnce sync.Once
	free := func() { freeOnce.Do(func() { close(release) }) }
	defer free() // a failed test must not leave the member stuck
	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	waitA := runConsume(ctxA, cfg, stuck)
	<-entered

	l := newFakeLedger()
	excl := cfg
	excl.Exclusive = true
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	began := time.Now()
	wait := runConsume(ctx, excl, l)
	waitFor(t, 5*time.Second, "every record read beside the stuck member", func() bool { return l.rowCount() == 600 })
	t.Logf("read every partition %v after it started", time.Since(began).Round(time.Millisecond))
	cancel()
	if err := wait(t); err != nil {
		t.Fatal(err)
	}
	l.checkExactlyOnce(t, map[int32]int64{0: 0, 1: 0, 2: 0}, map[int32]int64{0: 200, 1: 200, 2: 200})
	for _, b := range l.batchList() {
		if b.Generation != 0 {
			t.Fatalf("batch of generation %d read directly, want 0", b.Generation)
		}
	}
	free()
	cancelA()
	if err := waitA(t); err != nil {
		t.Fatal(err)
	}
}

// TestExclusiveReadsAddedPartitions checks that partitions added to the
// topic while an Exclusive Consume runs are read, from their start.
func TestExclusiveReadsAddedPartitions(t *testing.T) {
	addr := startBroker(t, map[string]int32{"t": 1})
	produceN(t, addr, "t", []int32{0}, 30, 10)
	l := newFakeLedger()
	cfg := testConfig(t, addr, "t")
	cfg.Exclusive = true
	cfg.partitionPoll = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait := runConsume(ctx, cfg, l)
	waitFor(t, 10*time.Second, "partition 0", func() bool { return l.rowCount() == 30 })

	if err := admin(t, addr).CreatePartitions("t", 3, nil, false); err != nil {
		t.Fatal(err)
	}
	produceN(t, addr, "t", []int32{1, 2}, 20, 10)
	waitFor(t, 10*time.Second, "the added partitions", func() bool { return l.rowCount() == 70 })
	cancel()
	if err := wait(t); err != nil {
		t.Fatal(err)
	}
	l.checkExactlyOnce(t, map[int32]int64{0: 0, 1: 0, 2: 0}, map[int32]int64{0: 30, 1: 20, 2: 20})
}

// TestExclusiveMovedReadsAgain checks that a partition whose ledger moved
// on without a batch (another writer committed it: ErrMoved) is read
// again from the ledger position, and the others go on.
func TestExclusiveMovedReadsAgain(t *testing.T) {
	addr := startBroker(t, map[string]int32{"t": 2})
	produceN(t, addr, "t", []int32{0, 1}, 100, 10)
	l := newFakeLedger()
	moved := false
	l.process = func(_ context.Context, b *RecordBatch) error {
		if b.Partition != 0 || moved {
			return nil
		}
		moved = true // Process of one partition is sequential
		l.mu.Lock()
		l.pos[0] = 60
		l.mu.Unlock()
		return fmt.Errorf("another writer: %w", ErrMoved)
	}
	cfg := testConfig(t, addr, "t")
	cfg.Exclusive = true
	cfg.MaxRows = 20
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait := runConsume(ctx, cfg, l)
	waitFor(t, 10*time.Second, "both partitions at their ends", func() bool {
		pos := l.positionsNow()
		return pos[0] == 100 && pos[1] == 100
	})
	cancel()
	if err := wait(t); err != nil {
		t.Fatal(err)
	}
	l.checkExactlyOnce(t, map[int32]int64{0: 60, 1: 0}, map[int32]int64{0: 100, 1: 100})
}

// TestExclusiveLedgerOutOfRange checks that a ledger position retention
// removed starts at the partition's log start, as in a group.
func TestExclusiveLedgerOutOfRange(t *testing.T) {
	addr := startBroker(t, map[string]int32{"t": 1})
	produceN(t, addr, "t", []int32{0}, 100, 10)
	if err := admin(t, addr).DeleteRecords("t", map[int32]int64{0: 50}); err != nil {
		t.Fatal(err)
	}
	l := newFakeLedger()
	l.pos[0] = 10
	cfg := testConfig(t, addr, "t")
	cfg.Exclusive = true
	cfg.Bounded = true
	if err := runConsume(context.Background(), cfg, l)(t); err != nil {
		t.Fatal(err)
	}
	if bs := l.batchList(); len(bs) == 0 || bs[0].From != 10 || l.positionsNow()[0] != 100 {
		t.Fatalf("batches %+v, want them from the ledger's 10 to 100, read from offset 50", bs)
	}
	l.checkExactlyOnce(t, map[int32]int64{0: 50}, map[int32]int64{0: 100})
}

// TestRevokedDropsPartialBatches checks that a Consume cancelled with
// ErrRevoked does not flush its partial batches: they could not commit.
func TestRevokedDropsPartialBatches(t *testing.T) {
	eachMode(t, func(t *testing.T, exclusive bool) {
		addr := startBroker(t, map[string]int32{"t": 2})
		l := newFakeLedger()
		cfg := testConfig(t, addr, "t")
		cfg.Exclusive = exclusive
		cfg.MaxRows = 100
		cfg.MaxWait = time.Minute
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		wait := runConsume(ctx, cfg, l)

		produceN(t, addr, "t", []int32{0, 1}, 100, 10) // one full batch each
		waitFor(t, 10*time.Second, "the full batches", func() bool { return l.rowCount() == 200 })
		produceN(t, addr, "t", []int32{0, 1}, 30, 10) // partial batches, held by MaxWait
		time.Sleep(time.Second)
		cancel(ErrRevoked)
		if err := wait(t); err != nil {
			t.Fatalf("Consume after ErrRevoked: %v", err)
		}
		l.checkExactlyOnce(t, map[int32]int64{0: 0, 1: 0}, map[int32]int64{0: 100, 1: 100})
	})
}

// TestRevokedCancelsProcess checks that ErrRevoked cancels the context of
// the batch in Process at once (its load could not commit), not after
// DrainTimeout, and that Consume returns nil.
func TestRevokedCancelsProcess(t *testing.T) {
	eachMode(t, func(t *testing.T, exclusive bool) {
		addr := startBroker(t, map[string]int32{"t": 1})
		produceN(t, addr, "t", []int32{0}, 10, 10)
		l := newFakeLedger()
		entered := make(chan struct{})
		var once sync.Once // the records may come in more than one batch
		l.process = func(ctx context.Context, _ *RecordBatch) error {
			once.Do(func() { close(entered) })
			<-ctx.Done()
			return ctx.Err()
		}
		cfg := testConfig(t, addr, "t")
		cfg.Exclusive = exclusive
		cfg.DrainTimeout = time.Minute
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		wait := runConsume(ctx, cfg, l)
		<-entered
		began := time.Now()
		cancel(ErrRevoked)
		if err := wait(t); err != nil {
			t.Fatalf("Consume after ErrRevoked: %v", err)
		}
		if took := time.Since(began); took > 5*time.Second {
			t.Errorf("Consume returned %v after ErrRevoked, want at once", took)
		}
		if n := l.rowCount(); n != 0 {
			t.Errorf("%d rows processed, want none", n)
		}
	})
}
