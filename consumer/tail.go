package consumer

import (
	"encoding/binary"
	"errors"
	"slices"
	"sync"

	"github.com/IBM/sarama"
)

// A bounded read ends a partition when its position reaches the end offset.
// The position is known from the records received, but on a transactional
// topic the offsets just below the end can be transaction markers (and
// aborted records), which a read_committed consumer never receives, and
// sarama does not expose how far its fetcher got. So a quiet bounded claim
// asks the broker directly: hasRecordsBefore fetches from its position and
// applies the read_committed rules sarama applies (skip control batches,
// skip transactional batches of aborted transactions).

const (
	probeFetchBytes = 64 << 10
	probeFetchMax   = 64 << 20
)

// tailProber asks brokers about the tail of partitions. It has a client of
// its own: sarama sends one request at a time per broker connection, so a
// probe sharing the consumer's connection would wait behind its fetch
// long-polls (and hold up its fetches and commits in turn).
type tailProber struct {
	brokers []string
	conf    *sarama.Config

	mu     sync.Mutex
	client sarama.Client
}

func (t *tailProber) hasRecordsBefore(topic string, partition int32, from, end int64) (bool, error) {
	t.mu.Lock()
	if t.client == nil {
		c, err := sarama.NewClient(t.brokers, t.conf)
		if err != nil {
			t.mu.Unlock()
			return false, err
		}
		t.client = c
	}
	client := t.client
	t.mu.Unlock()
	return hasRecordsBefore(client, topic, partition, from, end)
}

func (t *tailProber) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.client != nil {
		t.client.Close()
		t.client = nil
	}
}

// hasRecordsBefore reports whether a read_committed consumer at offset from
// would still receive a record with an offset below end.
func hasRecordsBefore(client sarama.Client, topic string, partition int32, from, end int64) (bool, error) {
	size := int32(probeFetchBytes)
	for from < end {
		broker, err := client.Leader(topic, partition)
		if err != nil {
			return false, err
		}
		req := &sarama.FetchRequest{
			Version:   4, // the first with isolation levels and aborted transactions
			MinBytes:  0,
			MaxBytes:  size,
			Isolation: sarama.ReadCommitted,
		}
		req.AddBlock(topic, partition, from, size, -1)
		resp, err := broker.Fetch(req)
		if err != nil {
			return false, err
		}
		block := resp.GetBlock(topic, partition)
		if block == nil {
			return false, sarama.ErrIncompleteResponse
		}
		if !errors.Is(block.Err, sarama.ErrNoError) {
			return false, block.Err
		}
		found, next := scanCommitted(block, from, end)
		if found {
			return true, nil
		}
		if next > from {
			from = next
			continue
		}
		// Nothing decoded: the next batch is larger than the fetch, or the
		// broker has nothing from here (it then cannot have a record below
		// an end it reported as stable).
		if block.Partial && size < probeFetchMax {
			size *= 2
			continue
		}
		return block.Partial, nil
	}
	return false, nil
}

// scanCommitted looks through one fetched block for a record in [from, end)
// that read_committed delivers, and returns the offset after the last batch
// it read.
func scanCommitted(block *sarama.FetchResponseBlock, from, end int64) (bool, int64) {
	aborted := slices.Clone(block.AbortedTransactions)
	slices.SortFunc(aborted, func(a, b *sarama.AbortedTransaction) int {
		switch {
		case a.FirstOffset < b.FirstOffset:
			return -1
		case a.FirstOffset > b.FirstOffset:
			return 1
		}
		return 0
	})
	abortedPIDs := map[int64]bool{}
	next := from
	for _, rs := range block.RecordsSet {
		rb := rs.RecordBatch
		if rb == nil {
			// A legacy message set: no transactions, every message is
			// delivered. Brokers speaking fetch v4 only send these for
			// data written in the pre-0.11 format; assume records remain.
			return true, next
		}
		if rb.PartialTrailingRecord {
			break
		}
		last := rb.FirstOffset + int64(rb.LastOffsetDelta)
		for len(aborted) > 0 && aborted[0].FirstOffset <= last {
			abortedPIDs[aborted[0].ProducerID] = true
			aborted = aborted[1:]
		}
		switch {
		case rb.Control:
			if isAbortMarker(rb) {
				delete(abortedPIDs, rb.ProducerID)
			}
		case rb.IsTransactional && abortedPIDs[rb.ProducerID]:
		default:
			for _, rec := range rb.Records {
				if o := rb.FirstOffset + rec.OffsetDelta; o >= from && o < end {
					return true, next
				}
			}
		}
		if last+1 > next {
			next = last + 1
		}
	}
	return false, next
}

// isAbortMarker reports whether a control batch ends a transaction with an
// abort. A control record's key is a version (int16) and a type (int16):
// 0 abort, 1 commit.
func isAbortMarker(rb *sarama.RecordBatch) bool {
	if len(rb.Records) == 0 || len(rb.Records[0].Key) < 4 {
		return false
	}
	return binary.BigEndian.Uint16(rb.Records[0].Key[2:4]) == 0
}
