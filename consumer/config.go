package consumer

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// kafkaVersion is the protocol version sluice speaks to brokers: Kafka 2.8
// request versions (read_committed fetch and list offsets, flexible
// encodings), which Kafka 2.8 and later, Redpanda and kfake all serve.
var kafkaVersion = sarama.V2_8_0_0

// Fetch settings shared by Consume and ConsumeOnly, tuned for throughput of
// small (a few hundred bytes) records on few partitions:
//
//   - fetchDefault: bytes asked per partition per fetch. 4 MiB lets one
//     fetch carry ~20k records of 200 bytes, so the per-request cost
//     disappears; sarama grows it up to fetchMax for a larger record batch.
//   - fetchMaxBytes: bytes per fetch response over all partitions.
//   - channelBuffer: messages buffered per partition between sarama's
//     fetcher and the batching loop. A deep buffer keeps the fetcher going
//     while a partition's batch is handed to Process.
//   - maxProcessingTime: how long the fetcher waits for a partition's loop to
//     take a message before it stops fetching that partition (and only that
//     one) until the loop catches up; a partition in Process must not stall
//     the others sharing its broker.
//   - maxWaitTime: how long the broker holds a fetch open when there is no
//     new data (it answers at once when there is).
const (
	fetchDefault      = 4 << 20
	fetchMax          = 64 << 20
	fetchMaxBytes     = 100 << 20
	channelBuffer     = 4096
	maxProcessingTime = 250 * time.Millisecond
	maxWaitTime       = 100 * time.Millisecond
)

// commitInterval is how often marked group offsets are committed.
const commitInterval = time.Second

// withDefaults returns the config with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.ClientID == "" {
		c.ClientID = DefaultClientID
	}
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = c.SessionTimeout / 3
	}
	if c.RebalanceTimeout <= 0 {
		c.RebalanceTimeout = min(max(3*c.SessionTimeout, 5*time.Second), MaxDefaultRebalanceTimeout)
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	if c.MaxRows <= 0 {
		c.MaxRows = DefaultMaxRows
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.MaxWait <= 0 {
		c.MaxWait = DefaultMaxWait
	}
	if c.Start == "" {
		c.Start = "earliest"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports every invalid field of a config after defaults.
func (c Config) Validate() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("no brokers"))
	}
	if c.Group == "" {
		errs = append(errs, errors.New("no group"))
	}
	if c.Topic == "" {
		errs = append(errs, errors.New("no topic"))
	}
	if c.Start != "" && c.Start != "earliest" && c.Start != "latest" {
		errs = append(errs, fmt.Errorf("start %q is neither earliest nor latest", c.Start))
	}
	if c.HeartbeatInterval > 0 && c.SessionTimeout > 0 && c.HeartbeatInterval >= c.SessionTimeout {
		errs = append(errs, fmt.Errorf("heartbeat interval %v is not below the session timeout %v", c.HeartbeatInterval, c.SessionTimeout))
	}
	if c.SASL != nil {
		switch c.SASL.Mechanism {
		case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512":
		default:
			errs = append(errs, fmt.Errorf("sasl mechanism %q is none of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512", c.SASL.Mechanism))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("consumer: config: %w", err)
	}
	return nil
}

// baseConfig is the sarama config every client of this package starts from:
// connection, security and the fetch settings above.
func baseConfig(clientID string, tlsCfg *tls.Config, sc *SASL) *sarama.Config {
	conf := sarama.NewConfig()
	conf.Version = kafkaVersion
	conf.ClientID = clientID
	if conf.ClientID == "" {
		conf.ClientID = DefaultClientID
	}
	conf.Metadata.AllowAutoTopicCreation = false
	conf.Consumer.IsolationLevel = sarama.ReadCommitted
	conf.Consumer.Fetch.Default = fetchDefault
	conf.Consumer.Fetch.Max = fetchMax
	conf.Consumer.Fetch.MaxBytes = fetchMaxBytes
	conf.ChannelBufferSize = channelBuffer
	conf.Consumer.MaxProcessingTime = maxProcessingTime
	conf.Consumer.MaxWaitTime = maxWaitTime
	conf.Consumer.Return.Errors = true
	if tlsCfg != nil {
		conf.Net.TLS.Enable = true
		conf.Net.TLS.Config = tlsCfg
	}
	if sc != nil {
		conf.Net.SASL.Enable = true
		conf.Net.SASL.User = sc.User
		conf.Net.SASL.Password = sc.Password
		conf.Net.SASL.Handshake = true
		switch sc.Mechanism {
		case "PLAIN":
			conf.Net.SASL.Mechanism = sarama.SASLTypePlaintext
		case "SCRAM-SHA-256":
			conf.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA256
			conf.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{sha512: false} }
		case "SCRAM-SHA-512":
			conf.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA512
			conf.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{sha512: true} }
		}
	}
	return conf
}

// saramaConfig is the client config of Consume: a group member's, or for
// an Exclusive Consume, a reader's without a group.
func (c Config) saramaConfig() *sarama.Config {
	conf := baseConfig(c.ClientID, c.TLS, c.SASL)
	// The offset after each processed batch is marked and committed in the
	// background every commitInterval, and when the reading ends; the
	// ledger, not these offsets, decides where a partition starts. A
	// synchronous commit would block the partition's loop: sarama sends a
	// broker's requests one at a time, so it waits behind the fetch
	// long-poll.
	conf.Consumer.Offsets.AutoCommit.Enable = true
	conf.Consumer.Offsets.AutoCommit.Interval = commitInterval
	conf.Consumer.Offsets.Initial = sarama.OffsetOldest
	if c.Start == "latest" {
		conf.Consumer.Offsets.Initial = sarama.OffsetNewest
	}
	if c.Exclusive {
		return conf // no group session: the timeouts below do not apply
	}
	conf.Consumer.Group.Session.Timeout = c.SessionTimeout
	conf.Consumer.Group.Heartbeat.Interval = c.HeartbeatInterval
	conf.Consumer.Group.Rebalance.Timeout = c.RebalanceTimeout
	// A JoinGroup request is answered only when the rebalance completes,
	// which may take the whole rebalance timeout. A read timeout shorter
	// than that drops the answer and rejoins as a new member that the next
	// rebalance waits for in turn: a livelock.
	conf.Net.ReadTimeout = max(conf.Net.ReadTimeout, c.RebalanceTimeout+10*time.Second)
	// Eager range assignment: every rebalance ends the session, so Setup
	// sees the whole new assignment and can seek every claim to the ledger
	// before any record is read. Cooperative rebalancing keeps claims across
	// generations and starts added ones without a hook to seek them first.
	conf.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyRange()}
	return conf
}

// scramClient adapts franz-go's SCRAM implementation to sarama's SCRAMClient.
type scramClient struct {
	sha512 bool
	sess   sasl.Session
	first  []byte
	begun  bool
	done   bool
}

func (s *scramClient) Begin(user, password, authzID string) error {
	auth := scram.Auth{User: user, Pass: password, Zid: authzID}
	mech := auth.AsSha256Mechanism()
	if s.sha512 {
		mech = auth.AsSha512Mechanism()
	}
	sess, first, err := mech.Authenticate(context.Background(), "")
	if err != nil {
		return err
	}
	s.sess, s.first = sess, first
	return nil
}

func (s *scramClient) Step(challenge string) (string, error) {
	if !s.begun {
		s.begun = true
		return string(s.first), nil
	}
	done, next, err := s.sess.Challenge([]byte(challenge))
	if err != nil {
		return "", err
	}
	s.done = done
	return string(next), nil
}

func (s *scramClient) Done() bool { return s.done }
