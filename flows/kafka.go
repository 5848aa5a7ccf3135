package flows

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/consumer"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/decode"
	"github.com/sluicehq/sluice/flows/spec"
	"github.com/sluicehq/sluice/sinks"
)

// runKafkaFlow consumes one append flow's topic into its target.
func (r *runner) runKafkaFlow(ctx context.Context, f *spec.Flow) error {
	target := r.p.Table(f.Target)
	if target == nil {
		return fmt.Errorf("target %s is not a table of the spec", f.Target)
	}
	proto, err := decode.NewJSON(f.SourceSchema())
	if err != nil {
		return err
	}
	h := &appendHandler{
		r:      r,
		flow:   f,
		target: target.Schema,
		log:    r.log.With("flow", f.Name),
		pool:   sync.Pool{New: func() any { return proto.Clone() }},
	}
	cfg, err := r.consumerConfig(f)
	if err != nil {
		return err
	}
	h.log.Info("flow starting", "topic", cfg.Topic, "group", cfg.Group, "mode", r.opts.Mode.String())
	start := time.Now()
	err = consumer.Consume(ctx, cfg, h)
	h.log.Info("flow stopped", "rows", h.rows.Load(), "dead_letters", h.deadLetters.Load(),
		"loads", h.loads.Load(), "elapsed", time.Since(start).Round(time.Millisecond))
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
		Logger:   r.log.With("flow", f.Name),
	}
	if err := kafkaSecurity(&cfg, r.p.Kafka); err != nil {
		return cfg, err
	}
	if r.opts.Consumer != nil {
		r.opts.Consumer(&cfg)
	}
	return cfg, nil
}

// appendHandler writes each batch of records as one load of the target.
type appendHandler struct {
	r      *runner
	flow   *spec.Flow
	target batch.Schema
	log    *slog.Logger
	pool   sync.Pool // of *decode.JSON: a decoder is not safe for concurrent use

	rows, deadLetters, loads atomic.Int64
}

func (h *appendHandler) Positions(ctx context.Context, topic string, partitions []int32) (map[int32]int64, error) {
	all, err := h.r.kafkaPositions(ctx, h.flow.Name)
	if err != nil {
		return nil, err
	}
	out := make(map[int32]int64, len(partitions))
	for _, p := range partitions {
		if off, ok := all[batch.TopicPartition{Topic: topic, Partition: p}]; ok {
			out[p] = off
		}
	}
	return out, nil
}

func (h *appendHandler) Process(ctx context.Context, rb *consumer.RecordBatch) error {
	dec := h.pool.Get().(*decode.JSON)
	out := batch.New(dec.Schema(), len(rb.Records))
	dls := dec.DecodeAll(rb.Records, out, nil)
	h.pool.Put(dec)

	now := time.Now().UTC()
	for i := range dls {
		dls[i].Pipeline, dls[i].Flow, dls[i].Target, dls[i].At = h.r.p.Pipeline, h.flow.Name, h.flow.Target, now
	}
	if len(dls) > 0 && h.flow.OnError == spec.OnErrorFail {
		d := dls[0]
		return fmt.Errorf("record %s %s: %s (%s); on_error: fail, nothing of the batch committed",
			d.Source, d.Position, d.Error, d.Reason)
	}
	rows := Project(out, h.target)

	tp := batch.TopicPartition{Topic: rb.Topic, Partition: rb.Partition}
	c := sinks.Commit{
		From:        batch.Positions{{Topic: rb.Topic, Partition: rb.Partition, Offset: rb.From}},
		To:          batch.Positions{{Topic: rb.Topic, Partition: rb.Partition, Offset: rb.Next}},
		Rows:        int64(rows.Len()),
		DeadLetters: int64(len(dls)),
	}
	attempts := 0
	err := h.r.retry(ctx, "load", func(ctx context.Context) error {
		attempts++
		return h.load(ctx, rb, rows, dls, c)
	})
	if errors.Is(err, sinks.ErrStale) {
		// Either an earlier attempt of this very load committed before its
		// error reached us (the ledger then stands at rb.Next), or another
		// writer took the partition over: its rows are its own, and ours
		// must not be published twice.
		pos, perr := h.r.kafkaPositions(ctx, h.flow.Name)
		if perr != nil {
			return perr
		}
		switch {
		case attempts > 1 && pos[tp] == rb.Next:
			err = nil
		case h.r.opts.Mode == ModeRun:
			// The group gave the partition to another member: this
			// session is over, and the rebalance that ends it seeks the
			// partition's next owner to the ledger.
			h.log.Warn("batch abandoned: another writer committed this partition", "topic", rb.Topic,
				"partition", rb.Partition, "from", rb.From, "ledger", pos[tp])
			return nil
		default:
			return fmt.Errorf("partition %s/%d: another writer committed it while this update ran (ledger at %d, batch from %d); run update again: %w",
				rb.Topic, rb.Partition, pos[tp], rb.From, err)
		}
	}
	if err != nil {
		return err
	}
	h.rows.Add(c.Rows)
	h.deadLetters.Add(c.DeadLetters)
	h.loads.Add(1)
	h.log.Debug("load committed", "topic", rb.Topic, "partition", rb.Partition,
		"from", rb.From, "next", rb.Next, "rows", c.Rows, "dead_letters", c.DeadLetters)
	return nil
}

func (h *appendHandler) load(ctx context.Context, rb *consumer.RecordBatch, rows *batch.Batch, dls []batch.DeadLetter, c sinks.Commit) error {
	ld, err := h.r.sink.Begin(ctx, sinks.LoadMeta{
		LoadID:     newLoadID(),
		Pipeline:   h.r.p.Pipeline,
		Flow:       h.flow.Name,
		Targets:    []string{h.flow.Target},
		Generation: int64(rb.Generation),
	})
	if err != nil {
		return err
	}
	if err := h.write(ctx, ld, rows, dls, c); err != nil {
		if aerr := ld.Abort(context.WithoutCancel(ctx)); aerr != nil {
			h.log.Warn("load not aborted; recovery removes it", "err", aerr)
		}
		return err
	}
	return nil
}

func (h *appendHandler) write(ctx context.Context, ld sinks.Load, rows *batch.Batch, dls []batch.DeadLetter, c sinks.Commit) error {
	if rows.Len() > 0 {
		if err := ld.Write(ctx, h.flow.Target, rows); err != nil {
			return err
		}
	}
	if len(dls) > 0 {
		if err := ld.Write(ctx, batch.DeadLettersTable, batch.DeadLetterBatch(dls)); err != nil {
			return err
		}
	}
	return ld.Commit(ctx, c)
}

// Project returns a batch of the target schema holding b's columns: columns
// of the target that b lacks are all NULL (the spec only allows that for
// nullable columns). Vectors are shared, not copied.
func Project(b *batch.Batch, target batch.Schema) *batch.Batch {
	if b.Schema.Equal(target) {
		return b
	}
	n := b.Len()
	out := &batch.Batch{Schema: target, Vectors: make([]*batch.Vector, len(target.Columns))}
	for i, c := range target.Columns {
		if v := b.Column(c.Name); v != nil {
			out.Vectors[i] = v
			continue
		}
		v := batch.NewVector(c.Type, n)
		for range n {
			v.AppendNull()
		}
		out.Vectors[i] = v
	}
	return out
}
