package consumer

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"golang.org/x/sync/errgroup"
)

// ConsumeOnly reads every partition of topic from its start to the last
// stable offset at the time of the call and discards the records, returning
// how many records and key+value bytes it read. It uses Consume's fetch
// settings and no consumer group: it is the baseline Consume's throughput is
// measured against.
func ConsumeOnly(ctx context.Context, brokers []string, topic string) (records int64, bytes int64, err error) {
	client, err := sarama.NewClient(brokers, baseConfig(DefaultClientID, nil, nil))
	if err != nil {
		return 0, 0, fmt.Errorf("consumer: connect to %v: %w", brokers, err)
	}
	defer client.Close()
	partitions, err := topicPartitions(client, topic)
	if err != nil {
		return 0, 0, fmt.Errorf("consumer: %s: %w", topic, err)
	}
	ends, err := listOffsets(client, topic, partitions, sarama.OffsetNewest)
	if err != nil {
		return 0, 0, fmt.Errorf("consumer: end offsets of %s: %w", topic, err)
	}
	starts, err := listOffsets(client, topic, partitions, sarama.OffsetOldest)
	if err != nil {
		return 0, 0, fmt.Errorf("consumer: start offsets of %s: %w", topic, err)
	}
	cons, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return 0, 0, fmt.Errorf("consumer: %w", err)
	}
	defer cons.Close()
	prober := &tailProber{brokers: brokers, conf: baseConfig(DefaultClientID, nil, nil)}
	defer prober.close()

	var nrec, nbytes atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	for _, p := range partitions {
		start, end := starts[p], ends[p]
		if start >= end {
			continue
		}
		g.Go(func() error {
			pc, err := cons.ConsumePartition(topic, p, start)
			if err != nil {
				return fmt.Errorf("consumer: read %s/%d: %w", topic, p, err)
			}
			defer pc.AsyncClose()
			var recs, size int64
			defer func() {
				nrec.Add(recs)
				nbytes.Add(size)
			}()
			probe := time.NewTicker(probeTick)
			defer probe.Stop()
			next, quiet := start, 0
			for next < end {
				select {
				case m := <-pc.Messages():
					if m.Offset >= end {
						return nil
					}
					recs++
					size += int64(len(m.Key) + len(m.Value))
					next = m.Offset + 1
					quiet = 0
				case cerr := <-pc.Errors():
					return fmt.Errorf("consumer: read %s/%d: %w", topic, p, cerr)
				case <-probe.C:
					if quiet++; !probeDue(quiet) {
						continue
					}
					more, err := prober.hasRecordsBefore(topic, p, next, end)
					if err != nil {
						return fmt.Errorf("consumer: read %s/%d: %w", topic, p, err)
					}
					if !more {
						return nil
					}
				case <-gctx.Done():
					return gctx.Err()
				}
			}
			return nil
		})
	}
	err = g.Wait()
	return nrec.Load(), nbytes.Load(), err
}
