package devkafka_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/sluicehq/sluice/consumer"
	"github.com/sluicehq/sluice/consumer/devkafka"
)

func TestParseTopic(t *testing.T) {
	cases := []struct {
		in         string
		name       string
		partitions int32
		wantErr    bool
	}{
		{in: "orders:3", name: "orders", partitions: 3},
		{in: "orders", name: "orders", partitions: 1},
		{in: "a.b_c-D:12", name: "a.b_c-D", partitions: 12},
		{in: "orders:0", wantErr: true},
		{in: "orders:-2", wantErr: true},
		{in: "orders:x", wantErr: true},
		{in: ":3", wantErr: true},
		{in: "bad/name", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			name, n, err := devkafka.ParseTopic(tc.in)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("ParseTopic(%q) = %q, %d; want an error", tc.in, name, n)
				}
				return
			}
			if err != nil || name != tc.name || n != tc.partitions {
				t.Fatalf("ParseTopic(%q) = %q, %d, %v; want %q, %d", tc.in, name, n, err, tc.name, tc.partitions)
			}
		})
	}
}

// readAll reads every record of every partition with a plain sarama
// consumer, independent of the consumer package.
func readAll(t *testing.T, addr, topic string) map[int32][]string {
	t.Helper()
	conf := sarama.NewConfig()
	conf.Version = sarama.V2_8_0_0
	client, err := sarama.NewClient([]string{addr}, conf)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	parts, err := client.Partitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32][]string{}
	for _, p := range parts {
		end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			t.Fatal(err)
		}
		if end == 0 {
			continue
		}
		pc, err := c.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		for {
			select {
			case m := <-pc.Messages():
				out[p] = append(out[p], string(m.Value))
				if m.Offset+1 >= end {
					pc.Close()
					goto next
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("partition %d: no record within 10s", p)
			}
		}
	next:
	}
	return out
}

func TestRestartKeepsRecords(t *testing.T) {
	dir := t.TempDir()
	cfg := devkafka.Config{Addr: "127.0.0.1:0", Topics: map[string]int32{"orders": 2}, DataDir: dir}
	b, err := devkafka.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []consumer.Message
	for p := range int32(2) {
		for i := range 50 {
			msgs = append(msgs, consumer.Message{Value: []byte(fmt.Sprintf("%d-%d", p, i)), Partition: p})
		}
	}
	if err := consumer.Produce(context.Background(), []string{b.Addr()}, "orders", msgs); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	// Restart on the same directory, with one more topic.
	cfg.Topics["more"] = 3
	b, err = devkafka.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	got := readAll(t, b.Addr(), "orders")
	for p := range int32(2) {
		if len(got[p]) != 50 {
			t.Fatalf("partition %d holds %d records after restart, want 50", p, len(got[p]))
		}
		for i, v := range got[p] {
			if want := fmt.Sprintf("%d-%d", p, i); v != want {
				t.Fatalf("partition %d record %d is %q, want %q", p, i, v, want)
			}
		}
	}
	lag, err := consumer.Lag(context.Background(), []string{b.Addr()}, "nobody", "orders")
	if err != nil || lag[0] != 50 || lag[1] != 50 {
		t.Errorf("lag of a group that never committed: %v, %v; want 50 per partition", lag, err)
	}
	lag, err = consumer.Lag(context.Background(), []string{b.Addr()}, "nobody", "more")
	if err != nil {
		t.Fatalf("topic created on restart: %v", err)
	}
	if len(lag) != 3 {
		t.Errorf("topic more has %d partitions, want 3", len(lag))
	}
}

func TestNoAutoCreate(t *testing.T) {
	b, err := devkafka.Start(devkafka.Config{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	_, err = consumer.Lag(context.Background(), []string{b.Addr()}, "g", "missing")
	if !errors.Is(err, consumer.ErrUnknownTopic) {
		t.Fatalf("Lag of a missing topic: %v, want ErrUnknownTopic", err)
	}
	if err := b.CreateTopic("missing", 2); err != nil {
		t.Fatal(err)
	}
	if err := b.CreateTopic("missing", 2); err != nil {
		t.Fatalf("creating an existing topic again: %v", err)
	}
	lag, err := consumer.Lag(context.Background(), []string{b.Addr()}, "g", "missing")
	if err != nil || len(lag) != 2 {
		t.Fatalf("Lag after create: %v, %v; want 2 partitions", lag, err)
	}
}

func TestStartErrors(t *testing.T) {
	cases := []struct {
		name string
		cfg  devkafka.Config
	}{
		{"bad address", devkafka.Config{Addr: "nonsense"}},
		{"bad topic", devkafka.Config{Addr: "127.0.0.1:0", Topics: map[string]int32{"a/b": 1}}},
		{"no partitions", devkafka.Config{Addr: "127.0.0.1:0", Topics: map[string]int32{"a": 0}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := devkafka.Start(tc.cfg)
			if err == nil {
				b.Close()
				t.Fatal("Start returned no error")
			}
		})
	}
}

func TestAddrInUse(t *testing.T) {
	b, err := devkafka.Start(devkafka.Config{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	b2, err := devkafka.Start(devkafka.Config{Addr: b.Addr()})
	if err == nil {
		b2.Close()
		t.Fatalf("second broker on %s started", b.Addr())
	}
}

// produceWith sends one message with a plain sarama producer, which asks
// for the topic to be created (as most producers do).
func produceWith(t *testing.T, addr, topic string, value []byte) error {
	t.Helper()
	conf := sarama.NewConfig()
	conf.Version = sarama.V2_8_0_0
	conf.Producer.Return.Successes = true
	conf.Producer.Retry.Max = 1
	conf.Producer.MaxMessageBytes = 64 << 20 // the broker decides
	p, err := sarama.NewSyncProducer([]string{addr}, conf)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, _, err = p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.ByteEncoder(value)})
	return err
}

func TestAutoCreateOnFirstProduce(t *testing.T) {
	for _, tc := range []struct {
		partitions, want int32
	}{{0, 1}, {3, 3}} {
		t.Run(fmt.Sprint(tc.partitions), func(t *testing.T) {
			b, err := devkafka.Start(devkafka.Config{Addr: "127.0.0.1:0", DefaultPartitions: tc.partitions})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if err := produceWith(t, b.Addr(), "fresh", []byte("hello")); err != nil {
				t.Fatalf("first produce to a new topic: %v", err)
			}
			lag, err := consumer.Lag(context.Background(), []string{b.Addr()}, "g", "fresh")
			if err != nil || int32(len(lag)) != tc.want {
				t.Fatalf("topic created by a produce: %v, %v; want %d partitions", lag, err, tc.want)
			}
			var n int64
			for _, l := range lag {
				n += l
			}
			if n != 1 {
				t.Fatalf("topic holds %d records, want 1", n)
			}
		})
	}
	if _, err := devkafka.Start(devkafka.Config{Addr: "127.0.0.1:0", DefaultPartitions: -1}); err == nil {
		t.Fatal("Start with -1 default partitions: no error")
	}
}

func TestMaxMessageBytes(t *testing.T) {
	b, err := devkafka.Start(devkafka.Config{Addr: "127.0.0.1:0", Topics: map[string]int32{"big": 1}, MaxMessageBytes: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := produceWith(t, b.Addr(), "big", make([]byte, 3<<10)); err != nil {
		t.Fatalf("a message under the limit: %v", err)
	}
	err = produceWith(t, b.Addr(), "big", make([]byte, 8<<10))
	if !errors.Is(err, sarama.ErrMessageSizeTooLarge) {
		t.Fatalf("a message over --max-message-bytes: %v, want MESSAGE_TOO_LARGE", err)
	}

	// The default is Kafka's, a little over 1 MiB: a batch just under 1 MiB passes, 2 MiB does not.
	d, err := devkafka.Start(devkafka.Config{Addr: "127.0.0.1:0", Topics: map[string]int32{"big": 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := produceWith(t, d.Addr(), "big", make([]byte, 1<<20-1024)); err != nil {
		t.Fatalf("just under 1 MiB: %v", err)
	}
	if err := produceWith(t, d.Addr(), "big", make([]byte, 2<<20)); !errors.Is(err, sarama.ErrMessageSizeTooLarge) {
		t.Fatalf("2 MiB over the default limit: %v, want MESSAGE_TOO_LARGE", err)
	}
}
