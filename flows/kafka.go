package flows

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/backfill"
	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/consumer"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/spec"
	"github.com/sluicehq/sluice/sinks"
)

// batchHandler is what a Kafka flow does with one batch: it returns the
// function that writes the batch into a load, and the counts the ledger
// records. Handlers of CDC flows also get told how the load ended.
type batchHandler interface {
	prepare(ctx context.Context, rb *consumer.RecordBatch) (*prepared, error)
	prepareChunk(ctx context.Context, ch *backfill.Chunk) (*prepared, error)
}

// kafkaFlow consumes one flow's topic; each batch of a partition becomes one
// load of the flow's target.
type kafkaFlow struct {
	r       *runner
	flow    *spec.Flow
	log     *slog.Logger
	handler batchHandler

	rows, deadLetters, loads atomic.Int64
}

// runKafkaFlow consumes one flow's topic into its target.
func (r *runner) runKafkaFlow(ctx context.Context, f *spec.Flow, h batchHandler) error {
	kf := &kafkaFlow{r: r, flow: f, log: r.log.With("flow", f.Name), handler: h}
	cfg, err := r.consumerConfig(f)
	if err != nil {
		return err
	}
	kf.log.Info("flow starting", "kind", f.Kind, "topic", cfg.Topic, "group", cfg.Group, "mode", r.opts.Mode.String())
	start := time.Now()
	// Brokers not reachable yet are waited for as a destination is: run
	// until stopped, update for RetryFor. The retry's own recovery comes
	// only when Consume returns: the outage ends when it connected.
	attempts := 0
	cfg.Connected = func() {
		if attempts > 1 {
			r.log.Info("broker recovered", "flow", f.Name, "attempts", attempts, "after", time.Since(start).Round(time.Millisecond).String())
			r.opts.Metrics.FlowFailing(f.Name, nil)
		}
	}
	err = r.retryWith(ctx, "connect to the brokers", consumer.Connecting{}, func(ctx context.Context) error {
		attempts++
		return consumer.Consume(ctx, cfg, kf)
	})
	kf.log.Info("flow stopped", "rows", kf.rows.Load(), "dead_letters", kf.deadLetters.Load(),
		"loads", kf.loads.Load(), "elapsed", time.Since(start).Round(time.Millisecond))
	return err
}

func (r *runner) consumerConfig(f *spec.Flow) (consumer.Config, error) {
	cfg := consumer.Config{
		Brokers:  r.p.Kafka.Brokers,
		Group:    r.p.FlowGroup(f),
		Topic:    f.Source.Kafka.Topic,
		ClientID: "sluice-" + r.p.Pipeline + "-" + f.Name,
		MaxRows:  f.Batch.Rows,
		MaxBytes: int(f.Batch.Bytes),
		MaxWait:  f.Batch.Wait,
		Start:    f.Start,
		Bounded:  r.opts.Mode == ModeUpdate,
		// A flow of a CDC target runs only under the target's lease
		// (runTarget): it reads every partition itself, from the ledger,
		// as soon as it holds the lease, instead of waiting for a
		// rebalance (docs/operations.md, "Several processes").
		Exclusive: r.leased(f),
		Logger:    r.log.With("flow", f.Name),
	}
	if err := kafkaSecurity(&cfg, r.p.Kafka); err != nil {
		return cfg, err
	}
	if r.opts.Consumer != nil {
		r.opts.Consumer(&cfg)
	}
	return cfg, nil
}

// Positions returns the ledger positions of the flow's partitions.
func (kf *kafkaFlow) Positions(ctx context.Context, topic string, partitions []int32) (map[int32]int64, error) {
	ps := make(batch.Positions, len(partitions))
	for i, p := range partitions {
		ps[i] = batch.Position{Topic: topic, Partition: p}
	}
	heads, err := kf.r.heads(ctx, kf.flow.Name, ps)
	if err != nil {
		return nil, err
	}
	all := heads.Kafka()
	out := make(map[int32]int64, len(partitions))
	for _, p := range partitions {
		if off, ok := all[batch.TopicPartition{Topic: topic, Partition: p}]; ok {
			out[p] = off
		}
	}
	return out, nil
}

var _ consumer.Busy = (*kafkaFlow)(nil)

// Busy reports whether a batch handed over now would wait for its place
// ahead: a CDC target's batches applied and not yet loaded are at
// maxBatchesAhead. The consumer keeps filling the partition's batch
// meanwhile, so that the target gets fewer, larger loads.
func (kf *kafkaFlow) Busy() bool {
	h, ok := kf.handler.(*cdcHandler)
	return ok && len(h.target.ahead) == cap(h.target.ahead)
}

// Process loads one batch and returns once its ledger row is written.
func (kf *kafkaFlow) Process(ctx context.Context, rb *consumer.RecordBatch) error {
	kf.r.opts.Metrics.RecordsRead(kf.r.p.Pipeline, kf.flow.Name, len(rb.Records))
	if rb.From < 0 && len(rb.Records) > 0 {
		// The flow's first read of this partition: a later full refresh
		// checks that retention still holds this offset.
		if _, err := checkpoint.RecordFirstOffset(ctx, kf.r.checkpoints, kf.r.p.Pipeline, kf.flow.Name, rb.Topic, rb.Partition, rb.Records[0].Offset); err != nil {
			return err
		}
	}
	if h, ok := kf.handler.(*cdcHandler); ok {
		return kf.processJoined(ctx, h, rb)
	}
	p, err := kf.handler.prepare(ctx, rb)
	if err != nil {
		return err
	}
	return kf.load(ctx, p, []*consumer.RecordBatch{rb})
}

// load loads a prepared batch made of the record batches rbs, of
// different partitions, and returns once its ledger row is written.
func (kf *kafkaFlow) load(ctx context.Context, p *prepared, rbs []*consumer.RecordBatch) error {
	var c sinks.Commit
	for _, rb := range rbs {
		c.From = append(c.From, batch.Position{Topic: rb.Topic, Partition: rb.Partition, Offset: rb.From})
		c.To = append(c.To, batch.Position{Topic: rb.Topic, Partition: rb.Partition, Offset: rb.Next})
	}
	err := kf.r.commitLoad(ctx, kf.flow, int64(rbs[0].Generation), p, c)
	var se *staleError
	if errors.As(err, &se) {
		if kf.r.opts.Mode == ModeRun {
			// In a group, the group gave the partition to another member:
			// this session is over, and the rebalance that ends it seeks
			// the partition's next owner to the ledger. Read directly, the
			// consumer seeks the partition to the ledger again.
			kf.log.Warn("batch abandoned: another writer committed this partition", "topic", se.slot.Topic,
				"partition", se.slot.Partition, "from", se.slot.Offset, "ledger", se.ledger, "partitions", len(rbs))
			return fmt.Errorf("%w: %w", consumer.ErrMoved, se)
		}
		return fmt.Errorf("%w; this update ran meanwhile: run update again", se)
	}
	if err != nil {
		return err
	}
	kf.rows.Add(p.rows)
	kf.deadLetters.Add(p.deadLetters)
	kf.loads.Add(1)
	t := kf.r.tally(kf.flow.Name)
	for _, rb := range rbs {
		t.setLag(rb.Topic, rb.Partition, rb.HighWater-rb.Next)
	}
	if m := kf.r.opts.Metrics; m != nil {
		for _, rb := range rbs {
			m.Lag(kf.r.p.Pipeline, kf.flow.Name, rb.Topic, rb.Partition, rb.HighWater-rb.Next)
		}
		if h, ok := kf.handler.(*cdcHandler); ok {
			m.CacheBytes(kf.r.p.Pipeline, kf.flow.Name, h.target.cache.Bytes())
		}
	}
	for _, rb := range rbs {
		kf.log.Debug("load committed", "topic", rb.Topic, "partition", rb.Partition,
			"from", rb.From, "next", rb.Next, "rows", p.rows, "dead_letters", p.deadLetters, "partitions", len(rbs))
	}
	return nil
}

// leased reports whether flow f writes a CDC target, whose flows run only
// in the process holding its lease (runTarget).
func (r *runner) leased(f *spec.Flow) bool {
	t := r.p.Table(f.Target)
	return t != nil && t.CDC
}
