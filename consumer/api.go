package consumer

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
)

// Default batch limits; a flow's spec may override each.
const (
	DefaultMaxRows  = 100_000
	DefaultMaxBytes = 32 << 20
	DefaultMaxWait  = time.Second
)

// DefaultSessionTimeout is the consumer group session timeout when the spec
// sets none.
const DefaultSessionTimeout = 10 * time.Second

// Defaults of the group and shutdown timings.
const (
	// MaxDefaultRebalanceTimeout caps the default rebalance timeout: how
	// long the group waits for every member to rejoin during a rebalance,
	// that is for in-flight batches to finish. The default is three session
	// timeouts, at least 5 s and at most this.
	MaxDefaultRebalanceTimeout = time.Minute
	// DefaultDrainTimeout bounds the work left when Consume is cancelled:
	// the batch in Process and the final flush of partial batches.
	DefaultDrainTimeout = 30 * time.Second
	// DefaultClientID is the Kafka client id when Config sets none.
	DefaultClientID = "sluice"
)

// Config configures one flow's consumer.
type Config struct {
	Brokers  []string
	Group    string // the full group id: <group>.<flow>
	Topic    string
	ClientID string

	SessionTimeout time.Duration // default DefaultSessionTimeout
	// HeartbeatInterval is how often the member heartbeats the group
	// coordinator; default a third of SessionTimeout.
	HeartbeatInterval time.Duration
	// RebalanceTimeout is how long a rebalance waits for members to rejoin;
	// default three session timeouts, between 5 s and
	// MaxDefaultRebalanceTimeout. A member killed while the group was
	// rebalancing holds the next rebalance up for this long.
	RebalanceTimeout time.Duration
	// DrainTimeout bounds, once ctx is cancelled, the batch still in Process
	// and the final flush of partial batches; default DefaultDrainTimeout.
	DrainTimeout time.Duration

	MaxRows  int           // records per batch; default DefaultMaxRows
	MaxBytes int           // value+key bytes per batch; default DefaultMaxBytes
	MaxWait  time.Duration // how long a partial batch waits for more to arrive (not for a backlog to be read); default DefaultMaxWait

	// Start is where a partition without a ledger position starts:
	// "earliest" (default: its log start, whatever offset the group
	// committed) or "latest" (the group's committed offset when it has one,
	// else the newest offset).
	Start string

	// Bounded makes Consume capture every partition's last stable offset when
	// it starts, process up to it, and return nil (sluice update). A missing
	// topic is then an error; otherwise it is waited for, and logged.
	Bounded bool

	// Exclusive makes Consume read every partition of Topic itself, without
	// joining the group: the caller guarantees that no other process loads
	// the topic into the same ledger meanwhile (a CDC target's lease,
	// docs/operations.md "Several processes"). Reading starts at once, at
	// the ledger positions, instead of waiting for a rebalance (which waits
	// for a dead member's session to expire), and ends as soon as ctx is
	// cancelled. Partitions added to the topic are read once a metadata
	// refresh, every 10 s, shows them. The offsets processed are still
	// committed to Group, for lag tools. SessionTimeout, HeartbeatInterval
	// and RebalanceTimeout do not apply.
	Exclusive bool

	TLS  *tls.Config
	SASL *SASL

	Logger *slog.Logger // nil discards
	// Connected, when set, is called once Consume reached the brokers
	// (after a ConnectError of an earlier call, the outage is over).
	Connected func()

	catchUpPoll   time.Duration // tests: how often a batch kept filling while behind looks; default catchUpPoll
	partitionPoll time.Duration // tests: how often an Exclusive Consume looks for new partitions; default partitionPoll
}

// SASL holds SASL/PLAIN or SCRAM credentials.
type SASL struct {
	Mechanism string // PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
	User      string
	Password  string
}

// Handler applies batches. Process is called concurrently for different
// partitions and sequentially within one partition.
type Handler interface {
	// Positions returns the ledger position (next offset to read) of each of
	// the given partitions that has one. It is called on every assignment
	// (read directly: whenever partitions start being read).
	Positions(ctx context.Context, topic string, partitions []int32) (map[int32]int64, error)
	// Process applies one batch and returns once its load is committed (or
	// abandoned with an error). An error stops Consume, but for one that
	// wraps ErrMoved. b.Records is reused
	// for the partition's next batch once Process returns: keep nothing of it
	// but copies (the Key and Value slices themselves are never reused).
	Process(ctx context.Context, b *RecordBatch) error
}

// ErrMoved is what Process returns, wrapped, when the ledger moved on
// from the batch's From without it: another writer committed the
// partition, and the batch is dropped. In a group the partition is that
// writer's now, and the rebalance that ends the session is coming; the
// claim goes on meanwhile. An Exclusive Consume reads the partition again
// from its ledger position.
var ErrMoved = errors.New("the partition moved on in the ledger")

// ErrRevoked, as the cause of Consume's ctx (context.WithCancelCause),
// stops Consume at once: whoever cancelled it lost the right to load what
// it reads (a lease taken over). The context of the batches in Process is
// cancelled too, and partial batches are dropped, not flushed; Consume
// returns nil (or the error of a Process that failed before).
var ErrRevoked = errors.New("consuming revoked")

// Busy is implemented by a Handler that can say when it cannot take a batch
// yet (its pipeline is full). A batch whose MaxWait elapses while Busy
// reports true is not handed over then: it keeps filling, up to MaxRows and
// MaxBytes, and goes to Process as soon as Busy turns false (checked every
// busyPoll). Handing it over earlier would only make it wait inside
// Process, and larger batches mean fewer loads; how long a batch waits for
// its load does not change. The batches held back of all partitions stay
// within four times MaxRows and MaxBytes together: past that, they go to
// Process and wait there.
type Busy interface {
	Busy() bool
}

// RecordBatch is a run of records of one partition, in offset order.
type RecordBatch struct {
	Topic      string
	Partition  int32
	Generation int32 // consumer group generation of this assignment; 0 when read directly (Exclusive)
	// From is the position this batch continues from: the ledger position on
	// the first batch of an assignment (-1 when the ledger had none), then
	// the Next of the previous batch.
	From int64
	Next int64 // offset after the last record
	// HighWater is the partition's high watermark as the consumer last
	// saw it: HighWater - Next records were behind this batch.
	HighWater int64
	Records   []batch.Record
	Bytes     int // sum of key and value lengths
}
