package consumer

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"golang.org/x/sync/errgroup"

	"github.com/sluicehq/sluice/flows/batch"
)

// Range is the offsets [From, To) of one partition.
type Range struct{ From, To int64 }

// rangeBatch is how many records ReadRanges hands over at once.
const rangeBatch = 1000

// ReadRanges reads the given offset ranges of the config's topic, read
// committed and without a consumer group (it moves no one's position), and
// hands each partition's records to fn in order, in batches; fn is never
// called concurrently. A range whose start retention removed is an error.
func ReadRanges(ctx context.Context, cfg Config, ranges map[int32]Range, fn func(partition int32, recs []batch.Record) error) error {
	client, err := sarama.NewClient(cfg.Brokers, baseConfig(cfg.ClientID, cfg.TLS, cfg.SASL))
	if err != nil {
		return connectError(cfg, err)
	}
	defer client.Close()
	parts := make([]int32, 0, len(ranges))
	for p := range ranges {
		parts = append(parts, p)
	}
	starts, err := listOffsets(client, cfg.Topic, parts, sarama.OffsetOldest)
	if err != nil {
		return fmt.Errorf("consumer: start offsets of %s: %w", cfg.Topic, err)
	}
	for p, r := range ranges {
		if r.From < r.To && starts[p] > r.From {
			return fmt.Errorf("consumer: %s/%d starts at offset %d now, and the range to read starts at %d: retention removed offsets %d to %d",
				cfg.Topic, p, starts[p], r.From, r.From, starts[p]-1)
		}
	}
	cons, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return fmt.Errorf("consumer: %w", err)
	}
	defer cons.Close()
	prober := &tailProber{brokers: cfg.Brokers, conf: baseConfig(cfg.ClientID, cfg.TLS, cfg.SASL)}
	defer prober.close()
	var mu sync.Mutex
	deliver := func(p int32, recs []batch.Record) error {
		mu.Lock()
		defer mu.Unlock()
		return fn(p, recs)
	}
	g, gctx := errgroup.WithContext(ctx)
	for p, r := range ranges {
		if r.From >= r.To {
			continue
		}
		g.Go(func() error {
			pc, err := cons.ConsumePartition(cfg.Topic, p, r.From)
			if err != nil {
				return fmt.Errorf("consumer: read %s/%d: %w", cfg.Topic, p, err)
			}
			defer pc.AsyncClose()
			probe := time.NewTicker(probeTick)
			defer probe.Stop()
			var recs []batch.Record
			flush := func() error {
				if len(recs) == 0 {
					return nil
				}
				err := deliver(p, recs)
				recs = nil
				return err
			}
			next, quiet := r.From, 0
			for next < r.To {
				select {
				case m := <-pc.Messages():
					if m.Offset >= r.To {
						return flush()
					}
					recs = append(recs, batch.Record{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Timestamp: m.Timestamp, Key: m.Key, Value: m.Value})
					next, quiet = m.Offset+1, 0
					if len(recs) >= rangeBatch {
						if err := flush(); err != nil {
							return err
						}
					}
				case cerr := <-pc.Errors():
					return fmt.Errorf("consumer: read %s/%d: %w", cfg.Topic, p, cerr)
				case <-probe.C:
					if quiet++; !probeDue(quiet) {
						continue
					}
					more, err := prober.hasRecordsBefore(cfg.Topic, p, next, r.To)
					if err != nil {
						return fmt.Errorf("consumer: read %s/%d: %w", cfg.Topic, p, err)
					}
					if !more {
						return flush()
					}
				case <-gctx.Done():
					return gctx.Err()
				}
			}
			return flush()
		})
	}
	return g.Wait()
}

// Pending reports, per partition of ranges, whether [From, To) holds a
// record a read committed consumer would get: on a transactional topic
// the offsets just below the end can be transaction markers or aborted
// records, which no flow ever commits a position past.
func Pending(ctx context.Context, cfg Config, ranges map[int32]Range) (map[int32]bool, error) {
	prober := &tailProber{brokers: cfg.Brokers, conf: baseConfig(cfg.ClientID, cfg.TLS, cfg.SASL)}
	defer prober.close()
	out := make(map[int32]bool, len(ranges))
	for p, r := range ranges {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if r.From >= r.To {
			continue
		}
		more, err := prober.hasRecordsBefore(cfg.Topic, p, r.From, r.To)
		if err != nil {
			return nil, fmt.Errorf("consumer: %s/%d: %w", cfg.Topic, p, err)
		}
		out[p] = more
	}
	return out, nil
}
