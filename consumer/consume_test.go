package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/sluicehq/sluice/flows/batch"
)

func TestConsumeBounded(t *testing.T) {
	eachMode(t, func(t *testing.T, exclusive bool) {
		const n = 500
		all := map[int32]int64{0: n, 1: n, 2: n}
		zero := map[int32]int64{0: 0, 1: 0, 2: 0}
		cases := []struct {
			name     string
			produce  bool
			ledger   map[int32]int64 // preset positions
			start    string
			wantFrom map[int32]int64 // first offset expected processed
			wantTo   map[int32]int64 // processed up to
		}{
			{name: "from the start", produce: true, wantFrom: zero, wantTo: all},
			{name: "seeks to ledger positions", produce: true,
				ledger:   map[int32]int64{0: 100, 2: 499},
				wantFrom: map[int32]int64{0: 100, 1: 0, 2: 499}, wantTo: all},
			{name: "ledger at the end", produce: true,
				ledger: map[int32]int64{0: n, 1: n, 2: n}, wantFrom: all, wantTo: all},
			{name: "empty topic", wantFrom: map[int32]int64{}, wantTo: map[int32]int64{}},
			{name: "start latest without positions", produce: true, start: "latest",
				wantFrom: map[int32]int64{}, wantTo: map[int32]int64{}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				addr := startBroker(t, map[string]int32{"orders": 3})
				if tc.produce {
					produceN(t, addr, "orders", []int32{0, 1, 2}, n, 50)
				}
				l := newFakeLedger()
				for p, at := range tc.ledger {
					l.pos[p] = at
				}
				cfg := testConfig(t, addr, "orders")
				cfg.Exclusive = exclusive
				cfg.Bounded = true
				cfg.MaxRows = 64
				cfg.Start = tc.start
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				start := time.Now()
				if err := Consume(ctx, cfg, l); err != nil {
					t.Fatalf("Consume: %v", err)
				}
				t.Logf("bounded consume took %v", time.Since(start))
				l.checkExactlyOnce(t, tc.wantFrom, filterProcessed(tc.wantFrom, tc.wantTo))
				for p, want := range tc.wantTo {
					if tc.wantFrom[p] < want {
						if got := l.positionsNow()[p]; got != want {
							t.Errorf("partition %d ledger at %d, want %d", p, got, want)
						}
					}
				}
			})
		}
	})
}

// filterProcessed drops partitions where nothing is expected.
func filterProcessed(from, to map[int32]int64) map[int32]int64 {
	out := map[int32]int64{}
	for p, end := range to {
		if from[p] < end {
			out[p] = end
		}
	}
	return out
}

func TestBatchLimits(t *testing.T) {
	cases := []struct {
		name     string
		rows     int
		maxRows  int
		maxBytes int
		size     int
		check    func(t *testing.T, bs []batchInfo)
	}{
		{name: "rows", rows: 1000, maxRows: 64, maxBytes: 1 << 20, size: 10, check: func(t *testing.T, bs []batchInfo) {
			for _, b := range bs {
				if b.Rows > 64 {
					t.Errorf("batch of %d rows, limit 64", b.Rows)
				}
			}
			if len(bs) < 1000/64+1 {
				t.Errorf("%d batches for 1000 rows of at most 64", len(bs))
			}
		}},
		{name: "bytes", rows: 500, maxRows: 10000, maxBytes: 1000, size: 97, check: func(t *testing.T, bs []batchInfo) {
			for _, b := range bs {
				if b.Bytes > 1000 {
					t.Errorf("batch of %d bytes, limit 1000", b.Bytes)
				}
			}
			if len(bs) < 500*100/1000 {
				t.Errorf("%d batches for 50000 bytes in batches of at most 1000", len(bs))
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			addr := startBroker(t, map[string]int32{"t": 1})
			produceN(t, addr, "t", []int32{0}, tc.rows, tc.size)
			l := newFakeLedger()
			cfg := testConfig(t, addr, "t")
			cfg.Bounded = true
			cfg.MaxRows = tc.maxRows
			cfg.MaxBytes = tc.maxBytes
			cfg.MaxWait = time.Minute
			if err := Consume(context.Background(), cfg, l); err != nil {
				t.Fatal(err)
			}
			if l.rowCount() != tc.rows {
				t.Fatalf("processed %d rows, want %d", l.rowCount(), tc.rows)
			}
			tc.check(t, l.batchList())
		})
	}
}

func TestBatchMaxWait(t *testing.T) {
	addr := startBroker(t, map[string]int32{"t": 1})
	l := newFakeLedger()
	cfg := testConfig(t, addr, "t")
	cfg.MaxWait = 300 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wait := runConsume(ctx, cfg, l)

	// A first record proves the member reads; then a burst of records is
	// held back until MaxWait after its first record and arrives as one batch.
	produceN(t, addr, "t", []int32{0}, 1, 10)
	waitFor(t, 10*time.Second, "the first record", func() bool { return l.rowCount() == 1 })
	sent := time.Now()
	msgs := make([]Message, 20)
	for i := range msgs {
		msgs[i] = Message{Value: []byte("v"), Partition: 0}
	}
	if err := Produce(ctx, []string{addr}, "t", msgs); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the burst", func() bool { return l.rowCount() == 21 })
	cancel()
	if err := wait(t); err != nil {
		t.Fatal(err)
	}
	bs := l.batchList()
	if len(bs) != 2 || bs[1].Rows != 20 {
		t.Fatalf("batches %+v, want one of 1 row then one of 20", bs)
	}
	if waited := bs[1].At.Sub(sent); waited < 250*time.Millisecond || waited > 3*time.Second {
		t.Errorf("burst processed %v after it was sent, want about MaxWait (300ms)", waited)
	}
}

// TestBatchFillsWhileBehind checks that a batch whose MaxWait passes while
// its partition still holds records past it keeps filling: a backlog is
// read in full batches, whatever the wait. In a bounded read (update) the
// remainder of the range over MaxRows comes first; in an open-ended one
// (run) the records that cannot fill a batch come last, in batches closed
// at MaxWait.
func TestBatchFillsWhileBehind(t *testing.T) {
	eachMode(t, func(t *testing.T, exclusive bool) {
		for _, bounded := range []bool{true, false} {
			t.Run(fmt.Sprintf("bounded=%v", bounded), func(t *testing.T) {
				addr := startBroker(t, map[string]int32{"t": 1})
				produceN(t, addr, "t", []int32{0}, 70_000, 100)
				l := newFakeLedger()
				cfg := testConfig(t, addr, "t")
				cfg.Exclusive = exclusive
				cfg.Bounded = bounded
				cfg.MaxRows = 20_000
				cfg.MaxWait = time.Millisecond    // passes many times while a batch is read
				cfg.catchUpPoll = 5 * time.Second // no stall of a busy machine closes a batch early
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				wait := runConsume(ctx, cfg, l)
				if !bounded {
					waitFor(t, 20*time.Second, "every record", func() bool { return l.rowCount() == 70_000 })
					cancel()
				}
				if err := wait(t); err != nil {
					t.Fatal(err)
				}
				var rows []int
				for _, b := range l.batchList() {
					rows = append(rows, b.Rows)
				}
				if bounded && !slices.Equal(rows, []int{10_000, 20_000, 20_000, 20_000}) {
					t.Fatalf("batches of %v rows, want [10000 20000 20000 20000]", rows)
				}
				if !bounded && (len(rows) < 4 || !slices.Equal(rows[:3], []int{20_000, 20_000, 20_000})) {
					t.Fatalf("batches of %v rows, want three of 20000, then the last 10000", rows)
				}
			})
		}
	})
}

// TestBoundedRemainderFirst checks that a bounded read starting from a
// ledger position takes the remainder of what is left over MaxRows first,
// and that a range of at most MaxRows is one batch.
func TestBoundedRemainderFirst(t *testing.T) {
	addr := startBroker(t, map[string]int32{"t": 2})
	produceN(t, addr, "t", []int32{0, 1}, 57, 10)
	l := newFakeLedger()
	l.pos[0] = 12 // 45 records left: 5, 20, 20
	l.pos[1] = 40 // 17 left: one batch
	cfg := testConfig(t, addr, "t")
	cfg.Bounded = true
	cfg.MaxRows = 20
	cfg.MaxWait = time.Minute
	if err := Consume(context.Background(), cfg, l); err != nil {
		t.Fatal(err)
	}
	got := map[int32][]int{}
	for _, b := range l.batchList() {
		got[b.Partition] = append(got[b.Partition], b.Rows)
	}
	if !slices.Equal(got[0], []int{5, 20, 20}) || !slices.Equal(got[1], []int{17}) {
		t.Fatalf("batches of %v rows, want [5 20 20] in partition 0 and [17] in 1", got)
	}
}

// TestCatchingUp checks when a batch past its MaxWait keeps filling: while
// its partition holds records enough to fill it past the last one read (in
// a bounded read, any before its end) and records came since the last
// look; not at the head, and not when reads stall.
func TestCatchingUp(t *testing.T) {
	c := &hwmClaim{hwm: 100}
	r := &runner{cfg: Config{MaxRows: 50}}
	l := &claimLoop{r: r, claim: c, next: 10, seen: 1, recs: make([]batch.Record, 9)}
	if !l.catchingUp() {
		t.Fatal("90 records to read past the batch of 9 (41 fill it), records came: want catching up")
	}
	if l.catchingUp() {
		t.Fatal("behind, nothing came since the last look: want the batch closed")
	}
	l.next, l.recs = 70, make([]batch.Record, 19)
	if l.catchingUp() {
		t.Fatal("30 records to read past the batch of 19 (31 would fill it): want the batch closed")
	}
	l.next = 100
	if l.catchingUp() {
		t.Fatal("at the high water mark: want the batch closed")
	}
	// A bounded read goes to its end, whatever the high water mark.
	l = &claimLoop{r: r, claim: c, bounded: true, end: 50, next: 50, seen: 40}
	if l.catchingUp() {
		t.Fatal("at a bounded read's end: want the batch closed")
	}
	l.next, l.seen = 40, 30
	if !l.catchingUp() {
		t.Fatal("before a bounded read's end, records came: want catching up")
	}
}

// hwmClaim is a claim that only reports a high water mark.
type hwmClaim struct {
	sarama.ConsumerGroupClaim
	hwm int64
}

func (c *hwmClaim) HighWaterMarkOffset() int64 { return c.hwm }

func TestGroupOffsetsCommittedAfterProcess(t *testing.T) {
	eachMode(t, func(t *testing.T, exclusive bool) {
		addr := startBroker(t, map[string]int32{"t": 1})
		produceN(t, addr, "t", []int32{0}, 300, 10)
		l := newFakeLedger()
		release := make(chan struct{})
		inSecond := make(chan struct{})
		calls := 0
		l.process = func(ctx context.Context, b *RecordBatch) error {
			calls++
			if calls == 2 {
				close(inSecond)
				<-release
			}
			return nil
		}
		cfg := testConfig(t, addr, "t")
		cfg.Exclusive = exclusive
		cfg.Bounded = true
		cfg.MaxRows = 100
		wait := runConsume(context.Background(), cfg, l)

		<-inSecond
		lagOf := func() int64 {
			lag, err := Lag(context.Background(), []string{addr}, cfg.Group, "t")
			if err != nil {
				t.Fatal(err)
			}
			return lag[0]
		}
		// The first batch's offset is committed in the background; the second
		// batch's must not be while it is in Process.
		waitFor(t, 5*time.Second, "the first batch's commit", func() bool { return lagOf() == 200 })
		time.Sleep(commitInterval + 500*time.Millisecond)
		if lag := lagOf(); lag != 200 {
			t.Errorf("lag while the second batch is in Process: %d, want 200", lag)
		}
		close(release)
		if err := wait(t); err != nil {
			t.Fatal(err)
		}
		if lag := lagOf(); lag != 0 {
			t.Errorf("lag after the bounded run: %d, want 0", lag)
		}
	})
}

func TestProcessErrorStopsConsume(t *testing.T) {
	eachMode(t, func(t *testing.T, exclusive bool) {
		errBoom := errors.New("boom")
		for _, bounded := range []bool{true, false} {
			name := "continuous"
			if bounded {
				name = "bounded"
			}
			t.Run(name, func(t *testing.T) {
				addr := startBroker(t, map[string]int32{"t": 2})
				produceN(t, addr, "t", []int32{0, 1}, 200, 10)
				l := newFakeLedger()
				l.process = func(_ context.Context, b *RecordBatch) error {
					if b.Partition == 1 && b.From >= 0 {
						return errBoom
					}
					return nil
				}
				cfg := testConfig(t, addr, "t")
				cfg.Exclusive = exclusive
				cfg.Bounded = bounded
				cfg.MaxRows = 50
				err := runConsume(context.Background(), cfg, l)(t)
				if !errors.Is(err, errBoom) {
					t.Fatalf("Consume returned %v, want boom", err)
				}
				if !strings.Contains(err.Error(), "t/1") {
					t.Errorf("error %q does not name the partition t/1", err)
				}
				if got := l.positionsNow()[1]; got != 50 {
					t.Errorf("partition 1 ledger at %d, want 50 (the failed batch not applied)", got)
				}
			})
		}
	})
}

func TestPositionsErrorStopsConsume(t *testing.T) {
	eachMode(t, func(t *testing.T, exclusive bool) {
		errDown := errors.New("destination down")
		addr := startBroker(t, map[string]int32{"t": 1})
		produceN(t, addr, "t", []int32{0}, 10, 10)
		l := newFakeLedger()
		calls := 0
		l.positions = func([]int32) error {
			// The bounded pre-check asks first; fail on the group assignment.
			if calls++; calls > 1 {
				return errDown
			}
			return nil
		}
		cfg := testConfig(t, addr, "t")
		cfg.Exclusive = exclusive
		cfg.Bounded = true
		err := runConsume(context.Background(), cfg, l)(t)
		if !errors.Is(err, errDown) {
			t.Fatalf("Consume returned %v, want the Positions error", err)
		}
		if l.rowCount() != 0 {
			t.Errorf("%d rows processed without positions", l.rowCount())
		}
	})
}

func TestContinuousCancelFlushesPartialBatch(t *testing.T) {
	eachMode(t, func(t *testing.T, exclusive bool) {
		addr := startBroker(t, map[string]int32{"t": 2})
		l := newFakeLedger()
		cfg := testConfig(t, addr, "t")
		cfg.Exclusive = exclusive
		cfg.MaxRows = 100
		cfg.MaxWait = time.Minute
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		wait := runConsume(ctx, cfg, l)

		produceN(t, addr, "t", []int32{0, 1}, 100, 10) // one full batch each
		waitFor(t, 10*time.Second, "the full batches", func() bool { return l.rowCount() == 200 })
		produceN(t, addr, "t", []int32{0, 1}, 30, 10) // partial batches, held by MaxWait
		time.Sleep(time.Second)
		if got := l.rowCount(); got != 200 {
			t.Fatalf("%d rows processed before cancel, want 200 (partials held)", got)
		}
		cancel()
		if err := wait(t); err != nil {
			t.Fatalf("Consume after cancel: %v", err)
		}
		l.checkExactlyOnce(t, map[int32]int64{0: 0, 1: 0}, map[int32]int64{0: 130, 1: 130})
		lag, err := Lag(context.Background(), []string{addr}, cfg.Group, "t")
		if err != nil {
			t.Fatal(err)
		}
		if lag[0] != 0 || lag[1] != 0 {
			t.Errorf("lag after shutdown %v, want the flushed batches committed", lag)
		}
	})
}

func TestInFlightBatchCompletesOnCancel(t *testing.T) {
	eachMode(t, func(t *testing.T, exclusive bool) {
		addr := startBroker(t, map[string]int32{"t": 1})
		produceN(t, addr, "t", []int32{0}, 50, 10)
		l := newFakeLedger()
		entered := make(chan struct{})
		var once sync.Once // the records may come in more than one batch
		l.process = func(ctx context.Context, b *RecordBatch) error {
			once.Do(func() { close(entered) })
			time.Sleep(300 * time.Millisecond)
			return ctx.Err()
		}
		cfg := testConfig(t, addr, "t")
		cfg.Exclusive = exclusive
		ctx, cancel := context.WithCancel(context.Background())
		wait := runConsume(ctx, cfg, l)
		<-entered
		cancel()
		if err := wait(t); err != nil {
			t.Fatalf("Consume: %v", err)
		}
		if got := l.positionsNow()[0]; got != 50 {
			t.Errorf("ledger at %d, want 50: the in-flight batch must complete", got)
		}
	})
}

func TestBoundedMissingTopic(t *testing.T) {
	addr := startBroker(t, nil)
	cfg := testConfig(t, addr, "nope")
	cfg.Bounded = true
	err := Consume(context.Background(), cfg, newFakeLedger())
	if !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("Consume returned %v, want ErrUnknownTopic", err)
	}
}

func TestContinuousWaitsForTopic(t *testing.T) {
	eachMode(t, func(t *testing.T, exclusive bool) {
		addr := startBroker(t, nil)
		l := newFakeLedger()
		cfg := testConfig(t, addr, "later")
		cfg.Exclusive = exclusive
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		wait := runConsume(ctx, cfg, l)
		time.Sleep(1500 * time.Millisecond)
		if err := CreateTopic(ctx, []string{addr}, "later", 2); err != nil {
			t.Fatal(err)
		}
		produceN(t, addr, "later", []int32{0, 1}, 20, 10)
		waitFor(t, 15*time.Second, "records of the late topic", func() bool { return l.rowCount() == 40 })
		cancel()
		if err := wait(t); err != nil {
			t.Fatal(err)
		}
		l.checkExactlyOnce(t, map[int32]int64{0: 0, 1: 0}, map[int32]int64{0: 20, 1: 20})
	})
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"ok", Config{Brokers: []string{"x:1"}, Group: "g", Topic: "t"}, ""},
		{"no brokers", Config{Group: "g", Topic: "t"}, "no brokers"},
		{"no group", Config{Brokers: []string{"x:1"}, Topic: "t"}, "no group"},
		{"bad start", Config{Brokers: []string{"x:1"}, Group: "g", Topic: "t", Start: "middle"}, "start"},
		{"heartbeat too slow", Config{Brokers: []string{"x:1"}, Group: "g", Topic: "t", SessionTimeout: time.Second, HeartbeatInterval: time.Second}, "heartbeat"},
		{"bad sasl", Config{Brokers: []string{"x:1"}, Group: "g", Topic: "t", SASL: &SASL{Mechanism: "GSSAPI"}}, "sasl"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.withDefaults().Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate: %v, want an error about %q", err, tc.want)
			}
		})
	}
}

func TestLedgerBeatsGroupOffsets(t *testing.T) {
	eachMode(t, func(t *testing.T, exclusive bool) {
		addr := startBroker(t, map[string]int32{"t": 3})
		produceN(t, addr, "t", []int32{0, 1, 2}, 500, 10)
		cfg := testConfig(t, addr, "t")
		cfg.Exclusive = exclusive
		cfg.Bounded = true
		cfg.MaxRows = 100

		// A first run commits group offsets at the end of every partition.
		if err := Consume(context.Background(), cfg, newFakeLedger()); err != nil {
			t.Fatal(err)
		}
		// A second run in the same group whose ledger stands earlier on
		// partition 0 must seek back there; partitions without a ledger position
		// start at their log start, whatever the group committed (the ledger
		// is the only truth: after a full refresh it holds no positions).
		l := newFakeLedger()
		l.pos[0] = 100
		if err := Consume(context.Background(), cfg, l); err != nil {
			t.Fatal(err)
		}
		l.checkExactlyOnce(t, map[int32]int64{0: 100}, map[int32]int64{0: 500, 1: 500, 2: 500})

		// With start: latest, a partition without a ledger position starts at
		// the group's committed offset: nothing is left to read there.
		cfg.Start = "latest"
		l = newFakeLedger()
		l.pos[0] = 400
		if err := Consume(context.Background(), cfg, l); err != nil {
			t.Fatal(err)
		}
		l.checkExactlyOnce(t, map[int32]int64{0: 400}, map[int32]int64{0: 500})
	})
}

// labelled counts the batches one group member processed into a shared
// ledger.
type labelled struct {
	*fakeLedger
	rows atomic.Int64
}

func (h *labelled) Process(ctx context.Context, b *RecordBatch) error {
	if err := h.fakeLedger.Process(ctx, b); err != nil {
		return err
	}
	h.rows.Add(int64(len(b.Records)))
	return nil
}

func TestRebalanceExactlyOnce(t *testing.T) {
	addr := startBroker(t, map[string]int32{"t": 3})
	shared := newFakeLedger()
	shared.delay = 5 * time.Millisecond
	a, b := &labelled{fakeLedger: shared}, &labelled{fakeLedger: shared}
	cfg := testConfig(t, addr, "t")
	cfg.MaxRows = 25
	cfg.MaxWait = 50 * time.Millisecond

	// Records keep coming for the whole test.
	var produced [3]atomic.Int64
	stopProducing := make(chan struct{})
	producerDone := make(chan struct{})
	go func() {
		defer close(producerDone)
		for {
			select {
			case <-stopProducing:
				return
			default:
			}
			var msgs []Message
			for p := range int32(3) {
				for range 20 {
					msgs = append(msgs, Message{Value: []byte("record"), Partition: p})
				}
			}
			if err := Produce(context.Background(), []string{addr}, "t", msgs); err != nil {
				t.Error(err)
				return
			}
			for p := range 3 {
				produced[p].Add(20)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()

	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	waitA := runConsume(ctxA, cfg, a)
	waitFor(t, 10*time.Second, "the first member to process", func() bool { return a.rows.Load() > 200 })

	ctxB, cancelB := context.WithCancel(context.Background())
	defer cancelB()
	waitB := runConsume(ctxB, cfg, b)
	waitFor(t, 15*time.Second, "the second member to get partitions", func() bool { return b.rows.Load() > 100 })
	aBefore := a.rows.Load()
	waitFor(t, 10*time.Second, "both members to process", func() bool { return a.rows.Load() > aBefore+100 })

	cancelA()
	if err := waitA(t); err != nil {
		t.Fatalf("first member: %v", err)
	}
	bBefore := b.rows.Load()
	waitFor(t, 15*time.Second, "the second member to take over", func() bool { return b.rows.Load() > bBefore+300 })

	close(stopProducing)
	<-producerDone
	want := map[int32]int64{}
	for p := range 3 {
		want[int32(p)] = produced[p].Load()
	}
	waitFor(t, 15*time.Second, "every record", func() bool {
		pos := shared.positionsNow()
		for p, n := range want {
			if pos[p] != n {
				return false
			}
		}
		return true
	})
	cancelB()
	if err := waitB(t); err != nil {
		t.Fatalf("second member: %v", err)
	}
	shared.checkExactlyOnce(t, map[int32]int64{0: 0, 1: 0, 2: 0}, want)
	t.Logf("records %v; first member %d rows, second %d", want, a.rows.Load(), b.rows.Load())
}

// busyLedger is a fakeLedger whose Busy says what busy holds.
type busyLedger struct {
	*fakeLedger
	busy atomic.Bool
}

func (l *busyLedger) Busy() bool { return l.busy.Load() }

// startBusyConsume runs a consumer of topic t (with the given partitions)
// into a busyLedger, busy from the start or not, with batches of at most
// 30 rows and 50 ms; stop cancels it and returns its error.
func startBusyConsume(t *testing.T, partitions int32, busy bool) (addr string, l *busyLedger, cfg Config, stop func() error) {
	addr = startBroker(t, map[string]int32{"t": partitions})
	l = &busyLedger{fakeLedger: newFakeLedger()}
	l.busy.Store(busy)
	cfg = testConfig(t, addr, "t")
	cfg.MaxWait = 50 * time.Millisecond
	cfg.MaxRows = 30
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	wait := runConsume(ctx, cfg, l)
	return addr, l, cfg, func() error { cancel(); return wait(t) }
}

// TestBusyHandlerKeepsFilling checks that a batch whose MaxWait elapses
// while the handler is busy is held back and keeps filling: it goes to
// Process when it reaches MaxRows, or once the handler is no longer busy.
func TestBusyHandlerKeepsFilling(t *testing.T) {
	addr, l, cfg, stop := startBusyConsume(t, 1, false)
	produceN(t, addr, "t", []int32{0}, 1, 10)
	waitFor(t, 10*time.Second, "the first record", func() bool { return l.rowCount() == 1 })
	l.busy.Store(true)
	produceN(t, addr, "t", []int32{0}, 10, 10)
	time.Sleep(10 * cfg.MaxWait)
	if n := l.rowCount(); n != 1 {
		t.Fatalf("%d rows processed while the handler was busy, want the batch held back", n)
	}
	// Busy or not, a full batch goes.
	produceN(t, addr, "t", []int32{0}, 25, 10)
	waitFor(t, 10*time.Second, "the full batch", func() bool { return l.rowCount() == 31 })
	l.busy.Store(false)
	waitFor(t, 10*time.Second, "the rest", func() bool { return l.rowCount() == 36 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	var rows []int
	for _, b := range l.batchList() {
		rows = append(rows, b.Rows)
	}
	if !slices.Equal(rows, []int{1, 30, 5}) {
		t.Fatalf("batches of %v rows, want [1 30 5]", rows)
	}
}

// TestBusyHandlerHoldsFourBatches checks that the batches held back while
// the handler is busy stay within four times MaxRows together: six
// partitions' batches of 25 rows, with MaxRows 30, cannot all wait; the ones
// past the bound go to Process, and the rest follow once the handler is
// free.
func TestBusyHandlerHoldsFourBatches(t *testing.T) {
	addr, l, cfg, stop := startBusyConsume(t, 6, true)
	produceN(t, addr, "t", []int32{0, 1, 2, 3, 4, 5}, 25, 10)
	waitFor(t, 10*time.Second, "a batch past the bound", func() bool { return l.rowCount() > 0 })
	time.Sleep(10 * cfg.MaxWait)
	if n := l.rowCount(); n < 150-4*30 || n > 150-25 {
		t.Fatalf("%d rows of 150 processed while the handler was busy, want 30 to 125 (120 at most held back, some held)", n)
	}
	l.busy.Store(false)
	waitFor(t, 10*time.Second, "the rest", func() bool { return l.rowCount() == 150 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}
