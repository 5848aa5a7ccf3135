package consumer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// txStep is one transaction of a test: n records, committed or aborted.
type txStep struct {
	n      int
	commit bool
}

// produceTx writes the steps to partition 0 of topic with a transactional
// producer and returns how many records were committed.
func produceTx(t *testing.T, addr, topic string, steps []txStep) int64 {
	t.Helper()
	conf := baseConfig("tx-test", nil, nil)
	conf.Producer.Idempotent = true
	conf.Producer.RequiredAcks = sarama.WaitForAll
	conf.Producer.Return.Successes = true
	conf.Producer.Transaction.ID = fmt.Sprintf("tx-%d", groupSeq.Add(1))
	conf.Producer.Partitioner = sarama.NewManualPartitioner
	conf.Net.MaxOpenRequests = 1
	p, err := sarama.NewSyncProducer([]string{addr}, conf)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var committed int64
	for i, s := range steps {
		if err := p.BeginTxn(); err != nil {
			t.Fatal(err)
		}
		msgs := make([]*sarama.ProducerMessage, s.n)
		for j := range msgs {
			msgs[j] = &sarama.ProducerMessage{Topic: topic, Partition: 0, Value: sarama.StringEncoder(fmt.Sprintf("step %d record %d", i, j))}
		}
		if err := p.SendMessages(msgs); err != nil {
			t.Fatal(err)
		}
		if s.commit {
			err = p.CommitTxn()
			committed += int64(s.n)
		} else {
			err = p.AbortTxn()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return committed
}

func TestBoundedTransactionalTopic(t *testing.T) {
	eachMode(t, func(t *testing.T, exclusive bool) {
		cases := []struct {
			name  string
			steps []txStep
		}{
			{"commit marker last", []txStep{{10, true}, {5, true}}},
			{"aborted transaction last", []txStep{{10, true}, {5, false}}},
			{"aborted in the middle", []txStep{{5, true}, {7, false}, {5, true}}},
			{"only aborted", []txStep{{4, false}, {4, false}}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				addr := startBroker(t, map[string]int32{"tx": 1})
				committed := produceTx(t, addr, "tx", tc.steps)

				l := newFakeLedger()
				cfg := testConfig(t, addr, "tx")
				cfg.Exclusive = exclusive
				cfg.Bounded = true
				cfg.MaxWait = time.Minute // only the end may flush a partial batch
				start := time.Now()
				if err := Consume(context.Background(), cfg, l); err != nil {
					t.Fatal(err)
				}
				if took := time.Since(start); took > 10*time.Second {
					t.Errorf("bounded read took %v", took)
				}
				if got := l.rowCount(); int64(got) != committed {
					t.Errorf("processed %d records, want the %d committed", got, committed)
				}
				// A second run from the ledger position finds nothing left.
				before := len(l.batchList())
				if err := Consume(context.Background(), cfg, l); err != nil {
					t.Fatal(err)
				}
				if after := len(l.batchList()); after != before {
					t.Errorf("second run processed %d more batches, want none", after-before)
				}

				records, _, err := ConsumeOnly(context.Background(), []string{addr}, "tx")
				if err != nil {
					t.Fatal(err)
				}
				if records != committed {
					t.Errorf("ConsumeOnly read %d records, want %d", records, committed)
				}
			})
		}
	})
}

func TestHasRecordsBefore(t *testing.T) {
	addr := startBroker(t, map[string]int32{"tx": 1})
	// Offsets: 0-4 committed data, 5 commit marker, 6-9 aborted data,
	// 10 abort marker, 11-12 committed data, 13 commit marker.
	produceTx(t, addr, "tx", []txStep{{5, true}, {4, false}, {2, true}})
	client, err := sarama.NewClient([]string{addr}, baseConfig("probe-test", nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	cases := []struct {
		name      string
		from, end int64
		want      bool
	}{
		{"committed data ahead", 0, 14, true},
		{"from the commit marker", 5, 11, false},
		{"aborted range only", 6, 11, false},
		{"committed after aborted", 6, 14, true},
		{"last marker", 13, 14, false},
		{"empty range", 14, 14, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := hasRecordsBefore(client, "tx", 0, tc.from, tc.end)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("hasRecordsBefore(%d, %d) = %v, want %v", tc.from, tc.end, got, tc.want)
			}
		})
	}
}
