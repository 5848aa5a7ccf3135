package consumer

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// groupOffsets commits the offsets an Exclusive Consume processed to its
// group, as a consumer without a group membership does (generation -1), so
// that lag tools see its progress; the ledger, never these offsets,
// decides where a partition starts. A broker takes such commits while the
// group has no members; one that refuses them (an older sluice reading the
// group as a member) is said once, at Warn.
type groupOffsets struct {
	client       sarama.Client
	group, topic string
	log          *slog.Logger

	mu        sync.Mutex
	marked    map[int32]int64
	committed map[int32]int64
	warned    bool
}

// mark records that partition p was processed up to offset; offsets only
// move forward.
func (o *groupOffsets) mark(p int32, offset int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.marked == nil {
		o.marked = map[int32]int64{}
	}
	if at, ok := o.marked[p]; !ok || offset > at {
		o.marked[p] = offset
	}
}

// every commits the marked offsets every interval until the returned
// function is called.
func (o *groupOffsets) every(interval time.Duration) (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				o.commit()
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// commit sends the offsets marked since the last commit; a failure is
// logged (and the coordinator looked up again) and tried at the next.
func (o *groupOffsets) commit() {
	o.mu.Lock()
	todo := map[int32]int64{}
	for p, at := range o.marked {
		if c, ok := o.committed[p]; !ok || c != at {
			todo[p] = at
		}
	}
	o.mu.Unlock()
	if len(todo) == 0 {
		return
	}
	err := o.send(todo)
	o.mu.Lock()
	defer o.mu.Unlock()
	if err != nil {
		if !o.warned {
			o.warned = true
			o.log.Warn("consumer: group offsets not committed (they only show progress to lag tools)", "error", err)
		} else {
			o.log.Debug("consumer: group offsets not committed", "error", err)
		}
		return
	}
	if o.committed == nil {
		o.committed = map[int32]int64{}
	}
	maps.Copy(o.committed, todo)
}

func (o *groupOffsets) send(offsets map[int32]int64) error {
	coord, err := o.client.Coordinator(o.group)
	if err != nil {
		return err
	}
	req := &sarama.OffsetCommitRequest{
		Version:                 8, // Kafka 2.4 and later (kafkaVersion)
		ConsumerGroup:           o.group,
		ConsumerGroupGeneration: sarama.GroupGenerationUndefined,
	}
	for p, at := range offsets {
		req.AddBlockWithLeaderEpoch(o.topic, p, at, -1, 0, "")
	}
	resp, err := coord.CommitOffset(req)
	if err == nil {
		for p := range offsets {
			if kerr := resp.Errors[o.topic][p]; !errors.Is(kerr, sarama.ErrNoError) {
				err = fmt.Errorf("partition %d: %w", p, kerr)
				break
			}
		}
	}
	if err != nil {
		_ = o.client.RefreshCoordinator(o.group)
	}
	return err
}

// read returns the group's committed offsets of partitions ps (none for a
// group that never committed).
func (o *groupOffsets) read(ps []int32) (map[int32]int64, error) {
	admin, err := sarama.NewClusterAdminFromClient(o.client)
	if err != nil {
		return nil, err
	}
	// Closing admin would close the shared client; it holds nothing else.
	res, err := admin.ListConsumerGroupOffsets(o.group, map[string][]int32{o.topic: ps})
	if err == nil && !errors.Is(res.Err, sarama.ErrNoError) {
		err = res.Err
	}
	if errors.Is(err, sarama.ErrGroupIDNotFound) {
		return map[int32]int64{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	for _, p := range ps {
		if b := res.GetBlock(o.topic, p); b != nil && b.Offset >= 0 {
			out[p] = b.Offset
		}
	}
	return out, nil
}
