package devkafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
)

// DefaultAddr is where the broker listens when Config sets no address.
const DefaultAddr = "127.0.0.1:9092"

// DefaultMinSessionTimeout is the smallest consumer group session timeout the
// broker accepts when Config sets none. Real brokers default to 6 s; a low
// floor lets tests use short sessions.
const DefaultMinSessionTimeout = 500 * time.Millisecond

// DefaultMaxMessageBytes is the largest record batch the broker accepts
// when Config sets none: Kafka's default message.max.bytes.
const DefaultMaxMessageBytes = 1048588

// Config configures the broker.
type Config struct {
	// Addr is the host:port to listen on; default DefaultAddr. Port 0 picks
	// a free port (see Broker.Addr). The host is also what the broker
	// advertises to clients, so listen on an address they can reach.
	Addr string
	// Topics maps each topic to create to its partition count. Topics that
	// exist already (reloaded from DataDir) are left as they are.
	Topics map[string]int32
	// DataDir keeps the broker's log and groups on disk, reloaded on the
	// next start; "" keeps everything in memory.
	DataDir string
	// MinSessionTimeout is the smallest group session timeout accepted;
	// default DefaultMinSessionTimeout.
	MinSessionTimeout time.Duration
	// Logger receives the broker's warnings and errors (its per-request
	// chatter at Debug); nil discards.
	Logger *slog.Logger
	// DefaultPartitions is the partition count of a topic the broker
	// creates when a client asks for one it does not have (a producer's
	// first produce: its metadata request allows auto-creation, as
	// Kafka's auto.create.topics.enable does); default 1.
	DefaultPartitions int32
	// MaxMessageBytes is the largest record batch a produce may carry
	// (Kafka's message.max.bytes; a larger one gets MESSAGE_TOO_LARGE);
	// default DefaultMaxMessageBytes.
	MaxMessageBytes int
}

// Broker is a running embedded broker.
type Broker struct {
	c    *kfake.Cluster
	addr string
}

// Start starts a broker and creates cfg.Topics.
func Start(cfg Config) (*Broker, error) {
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	if cfg.MinSessionTimeout <= 0 {
		cfg.MinSessionTimeout = DefaultMinSessionTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.DefaultPartitions == 0 {
		cfg.DefaultPartitions = 1
	}
	if cfg.MaxMessageBytes == 0 {
		cfg.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if cfg.DefaultPartitions < 0 {
		return nil, fmt.Errorf("devkafka: %d default partitions, want at least 1", cfg.DefaultPartitions)
	}
	if cfg.MaxMessageBytes < 0 {
		return nil, fmt.Errorf("devkafka: max message bytes %d, want a positive number", cfg.MaxMessageBytes)
	}
	if _, _, err := net.SplitHostPort(cfg.Addr); err != nil {
		return nil, fmt.Errorf("devkafka: address %q: %w", cfg.Addr, err)
	}
	for name, n := range cfg.Topics {
		if err := checkTopic(name, n); err != nil {
			return nil, fmt.Errorf("devkafka: %w", err)
		}
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			return net.Listen(network, cfg.Addr)
		}),
		kfake.GroupMinSessionTimeout(cfg.MinSessionTimeout),
		kfake.WithLogger(logger{cfg.Logger}),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(int(cfg.DefaultPartitions)),
		kfake.BrokerConfigs(map[string]string{"message.max.bytes": strconv.Itoa(cfg.MaxMessageBytes)}),
	}
	if cfg.DataDir != "" {
		opts = append(opts, kfake.DataDir(cfg.DataDir))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("devkafka: start on %s: %w", cfg.Addr, err)
	}
	b := &Broker{c: c, addr: c.ListenAddrs()[0]}
	for name, n := range cfg.Topics {
		if err := b.CreateTopic(name, n); err != nil {
			c.Close()
			return nil, err
		}
	}
	cfg.Logger.Info("devkafka: broker started", "addr", b.addr, "data_dir", cfg.DataDir, "topics", len(cfg.Topics))
	return b, nil
}

// Addr returns the host:port the broker listens on.
func (b *Broker) Addr() string { return b.addr }

// CreateTopic creates a topic; one that exists already is left as it is.
func (b *Broker) CreateTopic(name string, partitions int32) error {
	if err := checkTopic(name, partitions); err != nil {
		return fmt.Errorf("devkafka: %w", err)
	}
	err := b.c.CreateTopic(name, partitions, nil)
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("devkafka: create topic %s: %w", name, err)
	}
	return nil
}

// Close stops the broker; with a DataDir its state is saved first.
func (b *Broker) Close() error {
	b.c.Close()
	return nil
}

var topicName = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

func checkTopic(name string, partitions int32) error {
	if !topicName.MatchString(name) || name == "." || name == ".." {
		return fmt.Errorf("topic name %q: want 1 to 249 of a-z A-Z 0-9 . _ -", name)
	}
	if partitions < 1 {
		return fmt.Errorf("topic %s: %d partitions, want at least 1", name, partitions)
	}
	return nil
}

// ParseTopic parses a topic flag: "orders:3" is topic orders with 3
// partitions, "orders" has 1.
func ParseTopic(s string) (name string, partitions int32, err error) {
	name, count, hasCount := strings.Cut(s, ":")
	partitions = 1
	if hasCount {
		n, perr := strconv.ParseInt(count, 10, 32)
		if perr != nil {
			return "", 0, fmt.Errorf("devkafka: topic %q: partitions %q is not a number", s, count)
		}
		partitions = int32(n)
	}
	if err := checkTopic(name, partitions); err != nil {
		return "", 0, fmt.Errorf("devkafka: %w", err)
	}
	return name, partitions, nil
}

// logger forwards kfake's log to slog. kfake logs every request at its info
// level; that goes to Debug.
type logger struct{ l *slog.Logger }

func (g logger) Logf(level kfake.LogLevel, msg string, args ...any) {
	var lv slog.Level
	switch level {
	case kfake.LogLevelError:
		lv = slog.LevelError
	case kfake.LogLevelWarn:
		lv = slog.LevelWarn
	case kfake.LogLevelInfo:
		lv = slog.LevelDebug
	default:
		lv = slog.LevelDebug - 4
	}
	ctx := context.Background()
	if !g.l.Enabled(ctx, lv) {
		return
	}
	g.l.Log(ctx, lv, "devkafka: "+fmt.Sprintf(msg, args...))
}
