package consumer

import (
	"context"
	"errors"
	"fmt"

	"github.com/IBM/sarama"
)

// CreateTopic creates topic with the given number of partitions (replication
// factor 1 on a single broker, else the broker default). A topic that exists
// already is left as it is.
func CreateTopic(ctx context.Context, brokers []string, topic string, partitions int32) error {
	client, err := sarama.NewClient(brokers, baseConfig(DefaultClientID, nil, nil))
	if err != nil {
		return fmt.Errorf("consumer: connect to %v: %w", brokers, err)
	}
	defer client.Close()
	if err := createTopic(client, topic, partitions); err != nil {
		return fmt.Errorf("consumer: create topic %s: %w", topic, err)
	}
	return ctx.Err()
}

func createTopic(client sarama.Client, topic string, partitions int32) error {
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		return err
	}
	// admin.Close would close the caller's client.
	rf := int16(-1)
	if len(client.Brokers()) == 1 {
		rf = 1
	}
	err = admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: rf}, false)
	if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
		return err
	}
	return client.RefreshMetadata(topic)
}

// Lag returns, for each partition of topic, how many records group has not
// committed yet: the last stable offset minus the group's committed offset
// (minus the log start when the group committed nothing).
func Lag(ctx context.Context, brokers []string, group, topic string) (map[int32]int64, error) {
	return LagOf(ctx, Config{Brokers: brokers, Group: group, Topic: topic})
}

// LagOf is Lag for a consumer's config: its brokers, security, group and
// topic.
func LagOf(ctx context.Context, cfg Config) (map[int32]int64, error) {
	client, err := sarama.NewClient(cfg.Brokers, baseConfig(cfg.ClientID, cfg.TLS, cfg.SASL))
	if err != nil {
		return nil, fmt.Errorf("consumer: connect to %v: %w", cfg.Brokers, err)
	}
	defer client.Close()
	lag, err := lag(client, cfg.Group, cfg.Topic)
	if err != nil {
		return nil, fmt.Errorf("consumer: lag of %s on %s: %w", cfg.Group, cfg.Topic, err)
	}
	return lag, ctx.Err()
}

func lag(client sarama.Client, group, topic string) (map[int32]int64, error) {
	partitions, err := topicPartitions(client, topic)
	if err != nil {
		return nil, err
	}
	ends, err := listOffsets(client, topic, partitions, sarama.OffsetNewest)
	if err != nil {
		return nil, err
	}
	starts, err := listOffsets(client, topic, partitions, sarama.OffsetOldest)
	if err != nil {
		return nil, err
	}
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		return nil, err
	}
	committed, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: partitions})
	if err == nil && !errors.Is(committed.Err, sarama.ErrNoError) {
		err = committed.Err
	}
	switch {
	case errors.Is(err, sarama.ErrGroupIDNotFound):
		committed = nil // a group that never committed lags by everything
	case err != nil:
		return nil, err
	}
	out := make(map[int32]int64, len(partitions))
	for _, p := range partitions {
		at := starts[p]
		if committed != nil {
			if b := committed.GetBlock(topic, p); b != nil && b.Offset >= 0 {
				at = b.Offset
			}
		}
		out[p] = max(ends[p]-at, 0)
	}
	return out, nil
}
