package consumer

import (
	"context"
	"fmt"
	"time"

	"github.com/IBM/sarama"
	"github.com/hashicorp/go-multierror"
)

// Message is one record for Produce.
type Message struct {
	Key, Value []byte
	// Partition is where the record goes; -1 hashes the key, or spreads
	// records without a key round robin.
	Partition int32
}

// Produce writes msgs to topic with an asynchronous, batching producer (no
// compression, acks from all in-sync replicas) and returns once every
// message is acknowledged. It is meant for the demo, tests and benchmarks.
// Messages to one partition keep their order. Every failed message counts
// in the returned error.
func Produce(ctx context.Context, brokers []string, topic string, msgs []Message) error {
	if len(msgs) == 0 {
		return nil
	}
	conf := baseConfig(DefaultClientID, nil, nil)
	conf.Producer.RequiredAcks = sarama.WaitForAll
	conf.Producer.Return.Successes = true
	conf.Producer.Return.Errors = true
	conf.Producer.Compression = sarama.CompressionNone
	conf.Producer.Flush.Bytes = 512 << 10
	conf.Producer.Flush.Frequency = 5 * time.Millisecond
	conf.Producer.Partitioner = newMessagePartitioner
	// One request in flight per broker keeps each partition's order even
	// when a request is retried.
	conf.Net.MaxOpenRequests = 1
	p, err := sarama.NewAsyncProducer(brokers, conf)
	if err != nil {
		return fmt.Errorf("consumer: producer for %s: %w", topic, err)
	}

	var merr *multierror.Error
	acked := 0
	collect := func() {
		select {
		case <-p.Successes():
		case perr := <-p.Errors():
			merr = multierror.Append(merr, perr.Err)
		}
		acked++
	}
	sent := 0
send:
	for _, m := range msgs {
		pm := &sarama.ProducerMessage{Topic: topic, Partition: m.Partition}
		if m.Key != nil {
			pm.Key = sarama.ByteEncoder(m.Key)
		}
		if m.Value != nil {
			pm.Value = sarama.ByteEncoder(m.Value)
		}
		for {
			select {
			case p.Input() <- pm:
				sent++
				continue send
			case <-p.Successes():
				acked++
			case perr := <-p.Errors():
				merr = multierror.Append(merr, perr.Err)
				acked++
			case <-ctx.Done():
				break send
			}
		}
	}
	for acked < sent {
		collect()
	}
	if err := p.Close(); err != nil {
		merr = multierror.Append(merr, err)
	}
	if ctx.Err() != nil {
		merr = multierror.Append(merr, ctx.Err())
	}
	if err := merr.ErrorOrNil(); err != nil {
		return fmt.Errorf("consumer: produce to %s: %w", topic, err)
	}
	return nil
}

// messagePartitioner honours Message.Partition and otherwise hashes keys or
// spreads keyless records round robin.
type messagePartitioner struct {
	hash, roundRobin sarama.Partitioner
}

func newMessagePartitioner(topic string) sarama.Partitioner {
	return &messagePartitioner{
		hash:       sarama.NewHashPartitioner(topic),
		roundRobin: sarama.NewRoundRobinPartitioner(topic),
	}
}

func (p *messagePartitioner) Partition(m *sarama.ProducerMessage, n int32) (int32, error) {
	switch {
	case m.Partition >= n:
		return -1, fmt.Errorf("partition %d of a topic with %d partitions: %w", m.Partition, n, sarama.ErrInvalidPartition)
	case m.Partition >= 0:
		return m.Partition, nil
	case m.Key != nil:
		return p.hash.Partition(m, n)
	}
	return p.roundRobin.Partition(m, n)
}

func (p *messagePartitioner) RequiresConsistency() bool { return true }
