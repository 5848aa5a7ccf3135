package consumer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// partitionPoll is how often an Exclusive Consume refreshes its topic's
// metadata to read the partitions added to it.
const partitionPoll = 10 * time.Second

// restartDelay is how long a partition whose partition consumer gave up
// waits before it is read again.
const restartDelay = time.Second

// direct reads every partition of a topic without a consumer group
// (Config.Exclusive): a sarama partition consumer per partition, started
// at the ledger position, each batched by a claimLoop as a group claim is.
// A partition whose reading ends by itself (its partition consumer gave
// up, or the ledger moved on without a batch) is started again from the
// ledger; partitions added to the topic are started once the metadata
// shows them.
type direct struct {
	r       *runner
	cons    sarama.Consumer
	offsets *groupOffsets
	wg      sync.WaitGroup

	mu      sync.Mutex
	reading map[int32]*partition // the partitions being read
	opened  map[int32]bool       // every partition read since Consume began
	again   []int32              // partitions whose reading ended: started again
	wake    chan struct{}        // signalled when again grew
}

// partition is one partition read directly: the session and the claim of
// its claimLoop.
type partition struct {
	d       *direct
	p       int32
	initial int64
	ctx     context.Context
	cancel  context.CancelFunc
	pc      sarama.PartitionConsumer
}

func (pt *partition) Context() context.Context { return pt.ctx }
func (pt *partition) GenerationID() int32      { return 0 }
func (pt *partition) MarkOffset(_ string, p int32, offset int64, _ string) {
	pt.d.offsets.mark(p, offset)
}
func (pt *partition) Topic() string                            { return pt.d.r.cfg.Topic }
func (pt *partition) Partition() int32                         { return pt.p }
func (pt *partition) InitialOffset() int64                     { return pt.initial }
func (pt *partition) HighWaterMarkOffset() int64               { return pt.pc.HighWaterMarkOffset() }
func (pt *partition) Messages() <-chan *sarama.ConsumerMessage { return pt.pc.Messages() }

// consumeDirect reads the topic's partitions until runCtx ends, then waits
// for every partition's loop to finish (the batch in Process, the final
// flush) and commits the group offsets a last time.
func (r *runner) consumeDirect(partitions []int32) {
	cons, err := sarama.NewConsumerFromClient(r.client)
	if err != nil {
		r.fail(fmt.Errorf("consumer: %s: %w", r.cfg.Topic, err))
		return
	}
	defer cons.Close() // not the shared client
	d := &direct{r: r, cons: cons, reading: map[int32]*partition{}, opened: map[int32]bool{}, wake: make(chan struct{}, 1),
		offsets: &groupOffsets{client: r.client, group: r.cfg.Group, topic: r.cfg.Topic, log: r.log}}
	r.direct = d // before any claim loop starts, which reads it
	stopCommits := d.offsets.every(commitInterval)
	defer func() {
		d.wg.Wait()
		stopCommits()
		d.offsets.commit()
		r.log.Info("consumer: partitions revoked", "partitions", d.read())
	}()

	poll := time.NewTicker(cmp.Or(r.cfg.partitionPoll, partitionPoll))
	defer poll.Stop()
	todo := partitions
	failures := 0
	var retry <-chan time.Time
	for {
		if len(todo) > 0 && retry == nil {
			left, err := d.start(todo)
			if err != nil {
				if r.runCtx.Err() == nil {
					r.fail(err)
				}
				return
			}
			todo = left
			if len(left) == 0 {
				failures = 0
			} else {
				failures++
				if r.cfg.Bounded && failures >= maxSessionFailures {
					r.fail(fmt.Errorf("consumer: %s: partitions %v could not be read", r.cfg.Topic, left))
					return
				}
				retry = time.After(min(time.Duration(failures)*500*time.Millisecond, 10*time.Second))
			}
		}
		select {
		case <-r.runCtx.Done():
			return
		case <-retry:
			retry = nil
		case <-d.wake:
			d.mu.Lock()
			todo = append(todo, d.again...)
			d.again = nil
			d.mu.Unlock()
		case <-poll.C:
			if r.cfg.Bounded {
				continue // reads what there was when it started
			}
			ps, err := topicPartitions(r.client, r.cfg.Topic)
			if err != nil {
				r.log.Warn("consumer: refresh the topic's partitions", "error", err)
				continue
			}
			for _, p := range ps {
				if !d.known(p) && !slices.Contains(todo, p) {
					todo = append(todo, p)
				}
			}
		}
	}
}

// known reports whether partition p is being read or waits to be again.
func (d *direct) known(p int32) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.reading[p] != nil || slices.Contains(d.again, p)
}

// read returns the partitions read since Consume began, in order.
func (d *direct) read() []int32 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Sorted(maps.Keys(d.opened))
}

// start begins reading partitions ps at their ledger positions, as a
// group session's Setup seeks its claims (runner.Setup). It returns the
// partitions it could not start yet (logged; the caller tries again),
// and an error that ends Consume: the positions could not be read.
func (d *direct) start(ps []int32) (left []int32, err error) {
	r := d.r
	topic := r.cfg.Topic
	slices.Sort(ps)
	pos, err := r.h.Positions(r.runCtx, topic, ps)
	if err != nil {
		return nil, fmt.Errorf("consumer: positions of %s: %w", topic, err)
	}
	// Where the partitions without a ledger position start: their log
	// start (the ledger is the only truth: a full refresh forgets
	// positions, whatever the group committed), or with start: latest the
	// group's committed offset, else the newest.
	var bare []int32
	for _, p := range ps {
		if at, ok := pos[p]; !ok || at < 0 {
			bare = append(bare, p)
		}
	}
	var starts, committed map[int32]int64
	if len(bare) > 0 {
		if r.cfg.Start == "latest" {
			committed, err = d.offsets.read(bare)
		} else {
			starts, err = listOffsets(r.client, topic, bare, sarama.OffsetOldest)
		}
		if err != nil {
			r.log.Warn("consumer: start offsets not read; trying again", "partitions", bare, "error", err)
			return ps, nil
		}
	}
	from := make(map[int32]int64, len(ps))
	var opened []int32
	for _, p := range ps {
		at, ok := pos[p]
		offset := at
		if !ok || at < 0 {
			at = -1
			if offset = starts[p]; r.cfg.Start == "latest" {
				offset = sarama.OffsetNewest
				if c, ok := committed[p]; ok {
					offset = c
				}
			}
		}
		if err := d.open(p, offset, at); err != nil {
			r.log.Warn("consumer: partition not read; trying again", "partition", p, "offset", offset, "error", err)
			left = append(left, p)
			continue
		}
		from[p] = at
		opened = append(opened, p)
	}
	if len(opened) > 0 {
		r.log.Info("consumer: partitions assigned", "partitions", opened, "exclusive", true)
		r.log.Debug("consumer: ledger positions", "positions", from)
	}
	return left, nil
}

// open starts reading partition p at offset; from is its ledger position
// (-1 when none). A ledger position out of the partition's range (retention
// removed it) starts at Config.Start instead, as a group claim does (the
// claim loop says so).
func (d *direct) open(p int32, offset, from int64) error {
	r := d.r
	pc, err := d.cons.ConsumePartition(r.cfg.Topic, p, offset)
	if errors.Is(err, sarama.ErrOffsetOutOfRange) {
		offset = r.client.Config().Consumer.Offsets.Initial
		pc, err = d.cons.ConsumePartition(r.cfg.Topic, p, offset)
	}
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(r.runCtx)
	pt := &partition{d: d, p: p, initial: offset, ctx: ctx, cancel: cancel, pc: pc}
	d.mu.Lock()
	d.reading[p] = pt
	d.opened[p] = true
	d.mu.Unlock()
	d.wg.Go(func() { pt.run(from) })
	return nil
}

// run batches the partition until its reading ends, then closes its
// partition consumer; a reading that ended before Consume did is started
// again.
func (pt *partition) run(from int64) {
	d, r := pt.d, pt.d.r
	errsDone := make(chan struct{})
	go func() {
		defer close(errsDone)
		for err := range pt.pc.Errors() {
			r.log.Warn("consumer: kafka error", "partition", pt.p, "error", err)
		}
	}()
	l := newClaimLoop(r, pt, pt, from)
	l.run()
	pt.cancel()
	pt.pc.AsyncClose()
	go func() {
		for range pt.pc.Messages() {
		}
	}()
	<-errsDone // closed once sarama let the partition go: it can be read again
	if r.runCtx.Err() == nil && !l.moved {
		// Its partition consumer gave up (the error is logged above).
		r.log.Warn("consumer: reading of partition ended; reading it again from the ledger", "partition", pt.p)
		select {
		case <-r.runCtx.Done():
		case <-time.After(restartDelay):
		}
	}
	d.mu.Lock()
	delete(d.reading, pt.p)
	if r.runCtx.Err() == nil {
		d.again = append(d.again, pt.p)
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
	d.mu.Unlock()
}

// pause stops fetching partition p (a bounded read is done with it).
func (d *direct) pause(p int32) {
	d.mu.Lock()
	pt := d.reading[p]
	d.mu.Unlock()
	if pt != nil {
		pt.pc.Pause()
	}
}
