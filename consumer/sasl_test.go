package consumer

import (
	"context"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"
)

func TestSASL(t *testing.T) {
	cases := []struct {
		name string
		sasl SASL
	}{
		{"plain", SASL{Mechanism: "PLAIN", User: "plain-user", Password: "pw1"}},
		{"scram-sha-256", SASL{Mechanism: "SCRAM-SHA-256", User: "scram256", Password: "pw2"}},
		{"scram-sha-512", SASL{Mechanism: "SCRAM-SHA-512", User: "scram512", Password: "pw3"}},
	}
	c, err := kfake.NewCluster(
		kfake.NumBrokers(1),
		kfake.EnableSASL(),
		kfake.Superuser("PLAIN", "plain-user", "pw1"),
		kfake.Superuser("SCRAM-SHA-256", "scram256", "pw2"),
		kfake.Superuser("SCRAM-SHA-512", "scram512", "pw3"),
		kfake.GroupMinSessionTimeout(200*time.Millisecond),
		kfake.SeedTopics(2, "secure"),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr := c.ListenAddrs()[0]

	// Write 10 records per partition as the PLAIN user.
	pconf := baseConfig("sasl-test", nil, &cases[0].sasl)
	pconf.Producer.Return.Successes = true
	pconf.Producer.Partitioner = sarama.NewManualPartitioner
	p, err := sarama.NewSyncProducer([]string{addr}, pconf)
	if err != nil {
		t.Fatal(err)
	}
	for part := range int32(2) {
		for range 10 {
			if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: "secure", Partition: part, Value: sarama.StringEncoder("v")}); err != nil {
				t.Fatal(err)
			}
		}
	}
	p.Close()

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := newFakeLedger()
			cfg := testConfig(t, addr, "secure")
			cfg.Bounded = true
			cfg.SASL = &tc.sasl
			if err := Consume(context.Background(), cfg, l); err != nil {
				t.Fatal(err)
			}
			l.checkExactlyOnce(t, map[int32]int64{0: 0, 1: 0}, map[int32]int64{0: 10, 1: 10})

			wrong := tc.sasl
			wrong.Password = "wrong"
			cfg.SASL = &wrong
			if err := Consume(context.Background(), cfg, newFakeLedger()); err == nil {
				t.Error("Consume with a wrong password returned nil")
			}
		})
	}
}
