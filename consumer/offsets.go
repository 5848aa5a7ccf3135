package consumer

import (
	"context"
	"fmt"

	"github.com/IBM/sarama"
)

// EndOffsets returns the last stable offset of every partition of the
// config's topic (read_committed), for progress and lag reports.
func EndOffsets(ctx context.Context, cfg Config) (map[int32]int64, error) {
	client, err := sarama.NewClient(cfg.Brokers, baseConfig(cfg.ClientID, cfg.TLS, cfg.SASL))
	if err != nil {
		return nil, fmt.Errorf("consumer: connect to %v: %w", cfg.Brokers, err)
	}
	defer client.Close()
	partitions, err := topicPartitions(client, cfg.Topic)
	if err != nil {
		return nil, fmt.Errorf("consumer: partitions of %s: %w", cfg.Topic, err)
	}
	ends, err := listOffsets(client, cfg.Topic, partitions, sarama.OffsetNewest)
	if err != nil {
		return nil, fmt.Errorf("consumer: end offsets of %s: %w", cfg.Topic, err)
	}
	return ends, ctx.Err()
}

// StartOffsets returns the log start offset of every partition of the
// config's topic: the oldest record retention kept.
func StartOffsets(ctx context.Context, cfg Config) (map[int32]int64, error) {
	client, err := sarama.NewClient(cfg.Brokers, baseConfig(cfg.ClientID, cfg.TLS, cfg.SASL))
	if err != nil {
		return nil, fmt.Errorf("consumer: connect to %v: %w", cfg.Brokers, err)
	}
	defer client.Close()
	partitions, err := topicPartitions(client, cfg.Topic)
	if err != nil {
		return nil, fmt.Errorf("consumer: partitions of %s: %w", cfg.Topic, err)
	}
	starts, err := listOffsets(client, cfg.Topic, partitions, sarama.OffsetOldest)
	if err != nil {
		return nil, fmt.Errorf("consumer: start offsets of %s: %w", cfg.Topic, err)
	}
	return starts, ctx.Err()
}
