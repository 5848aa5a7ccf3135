package consumer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/IBM/sarama"
	"github.com/sluicehq/sluice/flows/batch"
)

// probeTick is how often a bounded claim that received nothing checks
// whether records are still to come before its end offset (see tail.go).
const probeTick = 100 * time.Millisecond

// busyPoll is how often a batch held back by a Busy handler checks whether
// the handler can take it.
const busyPoll = 5 * time.Millisecond

// catchUpPoll is how often a batch kept filling past its MaxWait because its
// partition is behind checks that records still come. Longer than the
// fetcher may stall a partition while another one's loop is not reading
// (maxProcessingTime), so that such a stall does not close a batch early.
const catchUpPoll = 2 * maxProcessingTime

// maxHeldBatches bounds the batches a runner's claims hold back for a Busy
// handler, together: at most this many times MaxRows and MaxBytes. A CDC
// target has two batches applied ahead of their loads; four batches' worth
// held back lets its next loads be full ones (with one batch's worth, the
// CDC benchmark's four partitions made smaller loads, and local SCD type 2,
// whose loads rewrite the history they touch, took 16 to 19% more time),
// and a topic of many partitions still holds four batches back, not one per
// partition.
const maxHeldBatches = 4

// session is what a claim loop needs of the assignment its partition is
// read in: a group session (sarama.ConsumerGroupSession), or a partition
// read directly (Config.Exclusive, direct.go).
type session interface {
	// Context ends when the partition's reading must stop.
	Context() context.Context
	GenerationID() int32
	MarkOffset(topic string, partition int32, offset int64, metadata string)
}

// claim is what a claim loop reads of its partition: the part of
// sarama.ConsumerGroupClaim it uses.
type claim interface {
	Topic() string
	Partition() int32
	InitialOffset() int64
	HighWaterMarkOffset() int64
	Messages() <-chan *sarama.ConsumerMessage
}

// claimLoop is the batching loop of one claim: one partition in one group
// session, or one partition read directly.
type claimLoop struct {
	r     *runner
	sess  session
	claim claim
	topic string
	p     int32

	recs  []batch.Record
	bytes int
	prev  int64 // From of the next batch
	next  int64 // offset after the last record read; negative until known

	wait  *time.Timer // MaxWait of the current batch
	waitC <-chan time.Time
	held  bool  // past MaxWait, held back by a Busy handler (counted in runner.held*)
	seen  int64 // the batch's first offset, or next when catchingUp last looked

	// Bounded mode.
	bounded bool
	end     int64
	// first is the limit of records of the claim's first batch when its
	// range holds more than MaxRows: the remainder of the range over
	// MaxRows, so that the batches after it are full and the small one
	// comes first, when the target is smallest (0: MaxRows).
	first    int
	finished bool
	quiet    int // probe ticks without a record

	// moved is set when Process found the partition moved on in the
	// ledger without the batch (ErrMoved) and the partition is read
	// directly: it is read again from the ledger.
	moved bool
}

func newClaimLoop(r *runner, sess session, claim claim, from int64) *claimLoop {
	return &claimLoop{
		r:       r,
		sess:    sess,
		claim:   claim,
		topic:   claim.Topic(),
		p:       claim.Partition(),
		recs:    make([]batch.Record, 0, min(r.cfg.MaxRows, 1<<14)),
		prev:    from,
		next:    claim.InitialOffset(),
		bounded: r.cfg.Bounded,
	}
}

func (l *claimLoop) run() {
	if l.prev >= 0 && l.next != l.prev {
		l.r.log.Warn("consumer: ledger position is out of the partition's range; reading from the start policy instead",
			"partition", l.p, "position", l.prev, "start", l.r.cfg.Start)
	}
	defer func() {
		if l.wait != nil {
			l.wait.Stop()
		}
	}()
	var probeC <-chan time.Time
	if l.bounded {
		l.checkStart()
		if !l.finished {
			t := time.NewTicker(probeTick)
			defer t.Stop()
			probeC = t.C
		}
	}
	msgs := l.claim.Messages()
	done := l.sess.Context().Done()
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				l.exit()
				return
			}
			if !l.add(m) {
				return
			}
		case <-l.waitC:
			l.waitC = nil
			if l.catchingUp() {
				l.wait.Reset(cmp.Or(l.r.cfg.catchUpPoll, catchUpPoll))
				l.waitC = l.wait.C
				continue
			}
			if l.holdBack() {
				l.wait.Reset(busyPoll) // keeps filling while the handler is busy
				l.waitC = l.wait.C
				continue
			}
			if !l.flush() {
				return
			}
		case <-probeC:
			if !l.onProbeTick() {
				return
			}
			if l.finished {
				probeC = nil
			}
		case <-done:
			l.exit()
			return
		}
	}
}

// checkStart finishes a bounded claim that has nothing to read: a partition
// done earlier in this run, one created after the run started, one whose
// start is at or past its end.
func (l *claimLoop) checkStart() {
	end, ok := l.r.ends[l.p]
	if !ok || l.r.isDone(l.p) {
		l.finish()
		return
	}
	l.end = end
	switch l.next {
	case sarama.OffsetNewest:
		l.finish()
		return
	case sarama.OffsetOldest:
		l.next = l.r.starts[l.p]
	}
	if l.next >= l.end {
		l.finish()
		return
	}
	if n, rows := l.end-l.next, int64(l.r.cfg.MaxRows); n > rows {
		l.first = int(n % rows)
	}
}

// holdBack reports whether the batch, past its MaxWait, keeps filling: while
// the handler is Busy, as long as the batches the runner's claims hold back
// stay within maxHeldBatches times MaxRows and MaxBytes together. Past that,
// the batch goes to Process and waits there, and its claim stops reading.
func (l *claimLoop) holdBack() bool {
	b, ok := l.r.h.(Busy)
	if !ok || !b.Busy() {
		return false
	}
	if !l.held {
		l.held = true
		l.r.heldRows.Add(int64(len(l.recs)))
		l.r.heldBytes.Add(int64(l.bytes))
	}
	return l.r.heldRows.Load() <= maxHeldBatches*int64(l.r.cfg.MaxRows) &&
		l.r.heldBytes.Load() <= maxHeldBatches*int64(l.r.cfg.MaxBytes)
}

// catchingUp reports whether the batch, past its MaxWait, keeps filling
// because its partition is behind: records came since the batch began or
// since the last look (every catchUpPoll), and the partition holds enough
// past them to fill the batch (below the high water mark of its last
// fetch), or, in a bounded read, any before its end (where the batch closes
// anyway). MaxWait bounds how long a batch waits for records to arrive, not
// how long reading records already there takes: a claim catching up on a
// backlog (a first run, a replay, a consumer that fell behind) makes full
// batches, so fewer loads, whatever the handler. At the head of a
// partition, with only the records of the last fetch in flight, a batch
// closes at MaxWait as before; one whose reads stall closes at the next
// look.
func (l *claimLoop) catchingUp() bool {
	came := l.next > l.seen
	l.seen = l.next
	if l.bounded {
		return came && l.next < l.end
	}
	need := max(1, int64(l.r.cfg.MaxRows-len(l.recs)))
	return came && l.claim.HighWaterMarkOffset()-l.next >= need
}

// reset empties the batch once it was processed or dropped.
func (l *claimLoop) reset() {
	if l.held {
		l.held = false
		l.r.heldRows.Add(-int64(len(l.recs)))
		l.r.heldBytes.Add(-int64(l.bytes))
	}
	l.first = 0
	clear(l.recs)
	l.recs = l.recs[:0]
	l.bytes = 0
}

// add takes one record; false means the claim must stop (an error).
func (l *claimLoop) add(m *sarama.ConsumerMessage) bool {
	if l.finished {
		return true // past the end of a bounded read; the partition is paused
	}
	l.quiet = 0
	if l.bounded && m.Offset >= l.end {
		if !l.flush() {
			return false
		}
		l.finish()
		return true
	}
	size := len(m.Key) + len(m.Value)
	if len(l.recs) > 0 && l.bytes+size > l.r.cfg.MaxBytes {
		if !l.flush() {
			return false
		}
	}
	l.recs = append(l.recs, batch.Record{
		Topic:     m.Topic,
		Partition: m.Partition,
		Offset:    m.Offset,
		Timestamp: m.Timestamp,
		Key:       m.Key, // sarama hands out fresh buffers per fetch: no copy
		Value:     m.Value,
	})
	l.bytes += size
	if l.held {
		l.r.heldRows.Add(1)
		l.r.heldBytes.Add(int64(size))
	}
	l.next = m.Offset + 1
	if len(l.recs) == 1 {
		// The first record counts as come: a MaxWait shorter than one
		// scheduling hiccup must not close a batch of a backlog at one
		// record.
		l.seen = m.Offset
		l.armWait()
	}
	if len(l.recs) >= l.rows() || l.bytes >= l.r.cfg.MaxBytes {
		if !l.flush() {
			return false
		}
	}
	if l.bounded && l.next >= l.end {
		if !l.flush() {
			return false
		}
		l.finish()
	}
	return true
}

// rows is the current batch's limit of records: MaxRows, or first.
func (l *claimLoop) rows() int {
	if l.first > 0 {
		return l.first
	}
	return l.r.cfg.MaxRows
}

func (l *claimLoop) armWait() {
	if l.wait == nil {
		l.wait = time.NewTimer(l.r.cfg.MaxWait)
	} else {
		l.wait.Reset(l.r.cfg.MaxWait)
	}
	l.waitC = l.wait.C
}

// flush hands the accumulated records to Process and, once it returned nil,
// marks the group offset (committed in the background). False means Process failed (Consume
// is stopping with its error).
func (l *claimLoop) flush() bool {
	if l.waitC != nil {
		l.wait.Stop()
		l.waitC = nil
	}
	if len(l.recs) == 0 {
		return true
	}
	b := &RecordBatch{
		Topic:      l.topic,
		Partition:  l.p,
		Generation: l.sess.GenerationID(),
		From:       l.prev,
		Next:       l.recs[len(l.recs)-1].Offset + 1,
		HighWater:  l.claim.HighWaterMarkOffset(),
		Records:    l.recs,
		Bytes:      l.bytes,
	}
	start := time.Now()
	if err := l.r.h.Process(l.r.procCtx, b); err != nil {
		if !errors.Is(err, ErrMoved) {
			l.r.fail(fmt.Errorf("consumer: process %s/%d from offset %d: %w", l.topic, l.p, l.recs[0].Offset, err))
			return false
		}
		if l.r.direct != nil {
			// Nothing ends this reading for us: read the partition
			// again from where the ledger is.
			l.r.log.Info("consumer: partition moved on in the ledger without this batch; reading it again from the ledger",
				"partition", l.p, "from", b.From, "next", b.Next)
			l.moved = true
			l.reset()
			return false
		}
		// In a group, the member the partition went to commits it: the
		// rebalance that ends this session is on its way.
	}
	l.r.log.Debug("consumer: batch processed", "partition", l.p, "from", b.From, "next", b.Next,
		"rows", len(b.Records), "bytes", b.Bytes, "duration", time.Since(start))
	l.prev = b.Next
	l.sess.MarkOffset(l.topic, l.p, b.Next, "")
	l.reset()
	return true
}

// finish ends a bounded claim's reading; the caller flushed what it had.
func (l *claimLoop) finish() {
	l.finished = true
	l.r.markDone(l.p)
}

// onProbeTick checks, after a quiet spell, whether a bounded claim still
// has records to receive before its end; when it has none (the offsets
// left are transaction markers or aborted records) the claim is done.
// Probes back off while records are still on their way.
func (l *claimLoop) onProbeTick() bool {
	if l.finished {
		return true
	}
	l.quiet++
	if !probeDue(l.quiet) {
		return true
	}
	more, err := l.r.hasRecordsBefore(l.p, l.next, l.end)
	if errors.Is(err, sarama.ErrOffsetOutOfRange) {
		// Retention removed the records from l.next on; read from the
		// partition's new start.
		if starts, lerr := listOffsets(l.r.client, l.topic, []int32{l.p}, sarama.OffsetOldest); lerr == nil && starts[l.p] > l.next {
			l.next = starts[l.p]
		}
		return true
	}
	if err != nil {
		l.r.log.Warn("consumer: probe for the end of a bounded read", "partition", l.p, "error", err)
		return true
	}
	if more {
		return true
	}
	if !l.flush() {
		return false
	}
	l.finish()
	return true
}

// exit ends the claim with the session: a partial batch is processed when
// Consume is stopping cleanly and left to the partition's next owner
// otherwise.
func (l *claimLoop) exit() {
	if len(l.recs) == 0 {
		return
	}
	if l.r.flushOnExit() {
		l.flush()
		return
	}
	l.r.log.Debug("consumer: partial batch left to the partition's next owner", "partition", l.p,
		"first_offset", l.recs[0].Offset, "rows", len(l.recs))
	l.reset()
}

// probeDue spaces the probes of a quiet claim: after 1, 2, 4, 8 and 16
// quiet ticks, then every 32.
func probeDue(quiet int) bool {
	return quiet&(quiet-1) == 0 || quiet%32 == 0
}
