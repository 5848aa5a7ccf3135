package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

// ErrUnknownTopic is returned by a bounded Consume whose topic does not exist.
var ErrUnknownTopic = errors.New("topic does not exist")

// How often a continuous Consume looks for its missing topic, and how often
// it says so.
const (
	topicPollInterval = time.Second
	topicLogInterval  = 10 * time.Second
)

// maxSessionFailures is how many consecutive failed group sessions a bounded
// Consume tolerates before it gives up; a continuous one retries forever.
const maxSessionFailures = 5

// Consume reads cfg.Topic as member of the consumer group cfg.Group and hands
// each partition's records, in batches, to h.Process; see the package
// documentation for positions, batching, rebalances and shutdown.
//
// A continuous Consume returns nil once ctx is cancelled and its in-flight
// batches are finished; a bounded one returns nil when every partition reached
// the end offset read at its start. Either returns the first Process or
// Positions error, wrapped with the topic and partition.
func Consume(ctx context.Context, cfg Config, h Handler) error {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.TLS != nil {
		if err := probeTLS(ctx, cfg.Brokers, cfg.TLS); err != nil {
			return err
		}
	}
	client, err := sarama.NewClient(cfg.Brokers, cfg.saramaConfig())
	if err != nil {
		if cfg.TLS == nil {
			if perr := probeTLS(ctx, cfg.Brokers, nil); perr != nil {
				return perr
			}
		}
		return connectError(cfg, err)
	}
	defer client.Close()
	if cfg.Connected != nil {
		cfg.Connected()
	}

	r := &runner{
		cfg:    cfg,
		h:      h,
		log:    cfg.Logger.With("topic", cfg.Topic, "group", cfg.Group),
		client: client,
		from:   map[int32]int64{},
		prober: &tailProber{brokers: cfg.Brokers, conf: cfg.saramaConfig()},
	}
	defer r.prober.close()
	partitions, err := r.waitTopic(ctx)
	if err != nil || partitions == nil {
		return err
	}
	if cfg.Bounded {
		if err := r.readBounds(partitions); err != nil {
			return err
		}
		if ok, err := r.doneBeforeJoin(ctx, partitions); err != nil || ok {
			return err
		}
	}

	var cancelRun context.CancelFunc
	r.runCtx, cancelRun = context.WithCancel(ctx)
	r.cancelRun = cancelRun
	defer cancelRun()
	var cancelProc context.CancelFunc
	r.procCtx, cancelProc = context.WithCancel(context.WithoutCancel(ctx))
	defer cancelProc()
	stopDrain := context.AfterFunc(r.runCtx, func() {
		time.AfterFunc(cfg.DrainTimeout, cancelProc)
	})
	defer stopDrain()
	stopRevoked := context.AfterFunc(ctx, func() {
		if errors.Is(context.Cause(ctx), ErrRevoked) {
			cancelProc() // the loads in Process could not commit
		}
	})
	defer stopRevoked()

	if cfg.Exclusive {
		r.consumeDirect(partitions)
		return r.failure()
	}

	group, err := sarama.NewConsumerGroupFromClient(cfg.Group, client)
	if err != nil {
		return fmt.Errorf("consumer: group %s: %w", cfg.Group, err)
	}
	r.group = group
	errsDone := make(chan struct{})
	go func() {
		defer close(errsDone)
		for err := range group.Errors() {
			r.log.Warn("consumer: kafka error", "error", err)
		}
	}()

	r.consumeLoop()

	if err := group.Close(); err != nil {
		r.log.Warn("consumer: leave group", "error", err)
	}
	<-errsDone
	return r.failure()
}

// ConnectError is a Consume that could not reach any of its brokers:
// nothing was read, so trying again later is safe.
type ConnectError struct {
	Brokers []string
	TLS     bool
	Err     error
}

func (e *ConnectError) Error() string {
	hint := " (are the brokers up, and kafka.brokers right?)"
	if e.TLS {
		hint = " (are the brokers up, and is each a TLS listener, as kafka.tls asks?)"
	}
	return fmt.Sprintf("consumer: connect to %v: %v%s", e.Brokers, e.Err, hint)
}

func (e *ConnectError) Unwrap() error { return e.Err }

// connectError is the error of a client that did not connect: a
// ConnectError (worth waiting for) unless the brokers refused it (bad
// credentials, a bad configuration), which no wait changes.
func connectError(cfg Config, err error) error {
	var ce sarama.ConfigurationError
	if errors.Is(err, sarama.ErrSASLAuthenticationFailed) || errors.As(err, &ce) || errors.Is(err, sarama.ErrClusterAuthorizationFailed) {
		return fmt.Errorf("consumer: connect to %v: %w (check kafka.sasl and kafka.tls)", cfg.Brokers, err)
	}
	return &ConnectError{Brokers: cfg.Brokers, TLS: cfg.TLS != nil, Err: err}
}

// Connecting tells the runner's retries which errors to retry: a
// ConnectError.
type Connecting struct{}

// Component names the brokers in retry log lines.
func (Connecting) Component() string { return "broker" }

// ReportsRecovery marks that Consume reports the end of an outage itself
// (Config.Connected): it returns only when it ends.
func (Connecting) ReportsRecovery() {}

// Retryable reports whether err is a ConnectError.
func (Connecting) Retryable(err error) bool {
	var ce *ConnectError
	return errors.As(err, &ce)
}

// runner is the consumer group handler of one Consume call.
type runner struct {
	cfg    Config
	h      Handler
	log    *slog.Logger
	client sarama.Client
	group  sarama.ConsumerGroup // nil when reading directly
	direct *direct              // an Exclusive Consume's partitions; nil in a group

	// runCtx ends the group sessions: on ctx cancellation, on the first
	// error, and in bounded mode when every partition is done. procCtx is
	// what Process gets: it outlives runCtx by DrainTimeout. They live here
	// because sarama's handler methods take no context.
	runCtx    context.Context
	cancelRun context.CancelFunc
	procCtx   context.Context

	mu   sync.Mutex
	err  error
	from map[int32]int64 // ledger position of each claim of the session; -1 when none

	// Bounded mode: the end (last stable offset) and start (log start
	// offset) of each partition read at start, and the partitions done.
	ends   map[int32]int64
	starts map[int32]int64
	done   map[int32]bool
	prober *tailProber

	// The rows and bytes of the claims' batches held back past MaxWait by
	// a Busy handler (see claimLoop.holdBack).
	heldRows, heldBytes atomic.Int64
}

func (r *runner) hasRecordsBefore(p int32, from, end int64) (bool, error) {
	return r.prober.hasRecordsBefore(r.cfg.Topic, p, from, end)
}

// waitTopic returns the topic's partitions. A missing topic is an error in
// bounded mode and is waited for otherwise; nil partitions with a nil error
// mean ctx ended while waiting.
func (r *runner) waitTopic(ctx context.Context) ([]int32, error) {
	var lastLog time.Time
	for {
		partitions, err := topicPartitions(r.client, r.cfg.Topic)
		if err == nil {
			return partitions, nil
		}
		if !errors.Is(err, ErrUnknownTopic) {
			return nil, fmt.Errorf("consumer: metadata of %s: %w", r.cfg.Topic, err)
		}
		if r.cfg.Bounded {
			return nil, fmt.Errorf("consumer: %s: %w", r.cfg.Topic, ErrUnknownTopic)
		}
		if time.Since(lastLog) >= topicLogInterval {
			r.log.Info("consumer: waiting for topic to exist")
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(topicPollInterval):
		}
	}
}

// topicPartitions returns the partitions of topic, or ErrUnknownTopic.
func topicPartitions(client sarama.Client, topic string) ([]int32, error) {
	err := client.RefreshMetadata(topic)
	if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		return nil, ErrUnknownTopic
	}
	if err != nil {
		return nil, err
	}
	partitions, err := client.Partitions(topic)
	if errors.Is(err, sarama.ErrUnknownTopicOrPartition) || (err == nil && len(partitions) == 0) {
		return nil, ErrUnknownTopic
	}
	return partitions, err
}

// readBounds captures every partition's last stable offset (the end of a
// bounded read) and log start offset.
func (r *runner) readBounds(partitions []int32) error {
	ends, err := listOffsets(r.client, r.cfg.Topic, partitions, sarama.OffsetNewest)
	if err != nil {
		return fmt.Errorf("consumer: end offsets of %s: %w", r.cfg.Topic, err)
	}
	starts, err := listOffsets(r.client, r.cfg.Topic, partitions, sarama.OffsetOldest)
	if err != nil {
		return fmt.Errorf("consumer: start offsets of %s: %w", r.cfg.Topic, err)
	}
	r.ends, r.starts, r.done = ends, starts, map[int32]bool{}
	r.log.Info("consumer: bounded read", "end_offsets", offsetList(ends))
	return nil
}

// offsetList renders partition offsets for a log line, in partition order:
// "0:152 1:158".
func offsetList(offs map[int32]int64) string {
	ps := slices.Sorted(maps.Keys(offs))
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = strconv.Itoa(int(p)) + ":" + strconv.FormatInt(offs[p], 10)
	}
	return strings.Join(parts, " ")
}

// doneBeforeJoin reports whether a bounded read has nothing to do: every
// partition is empty or its ledger position is at its end already. It saves
// joining the group for nothing.
func (r *runner) doneBeforeJoin(ctx context.Context, partitions []int32) (bool, error) {
	pos, err := r.h.Positions(ctx, r.cfg.Topic, partitions)
	if err != nil {
		return false, fmt.Errorf("consumer: positions of %s: %w", r.cfg.Topic, err)
	}
	for _, p := range partitions {
		at, ok := pos[p]
		if r.starts[p] < r.ends[p] && (!ok || at < r.ends[p]) {
			return false, nil
		}
	}
	r.log.Info("consumer: every partition is at its end offset already")
	return true, nil
}

// listOffsets returns the read_committed offset of each partition at query
// (sarama.OffsetNewest: the last stable offset; OffsetOldest: the log start).
func listOffsets(client sarama.Client, topic string, partitions []int32, query int64) (map[int32]int64, error) {
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		return nil, err
	}
	// Closing admin would close the shared client; it holds nothing else.
	req := map[string]map[int32]int64{topic: {}}
	for _, p := range partitions {
		req[topic][p] = query
	}
	res, err := admin.ListOffsets(req, &sarama.ListOffsetsOptions{IsolationLevel: sarama.ReadCommitted})
	if err != nil {
		return nil, err
	}
	out := make(map[int32]int64, len(partitions))
	var errs []error
	for _, p := range partitions {
		o := res[topic][p]
		switch {
		case o == nil:
			errs = append(errs, fmt.Errorf("partition %d: no answer", p))
		case o.Err != nil && !errors.Is(o.Err, sarama.ErrNoError):
			errs = append(errs, fmt.Errorf("partition %d: %w", p, o.Err))
		default:
			out[p] = o.Offset
		}
	}
	return out, errors.Join(errs...)
}

// consumeLoop runs group sessions until runCtx ends. With eager rebalancing
// each rebalance ends a session; the loop joins the next one.
func (r *runner) consumeLoop() {
	failures := 0
	for r.runCtx.Err() == nil {
		err := r.group.Consume(r.runCtx, []string{r.cfg.Topic}, r)
		if r.runCtx.Err() != nil {
			return
		}
		if err == nil {
			failures = 0
			continue
		}
		failures++
		if r.cfg.Bounded && failures >= maxSessionFailures {
			r.fail(fmt.Errorf("consumer: group %s: %w", r.cfg.Group, err))
			return
		}
		r.log.Warn("consumer: group session failed, rejoining", "error", err, "attempt", failures)
		select {
		case <-r.runCtx.Done():
		case <-time.After(min(time.Duration(failures)*500*time.Millisecond, 10*time.Second)):
		}
	}
}

// fail records the first error and ends the run. An error after ErrRevoked
// is only its consequence (a Process whose context it cancelled).
func (r *runner) fail(err error) {
	if errors.Is(context.Cause(r.runCtx), ErrRevoked) {
		r.log.Debug("consumer: stopped after its reading was revoked", "error", err)
		return
	}
	r.mu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.mu.Unlock()
	r.cancelRun()
}

func (r *runner) failure() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Setup seeks every claim of the new session to its ledger position before
// any claim starts reading.
func (r *runner) Setup(sess sarama.ConsumerGroupSession) error {
	topic := r.cfg.Topic
	parts := slices.Sorted(slices.Values(sess.Claims()[topic]))
	r.log.Info("consumer: partitions assigned", "partitions", parts, "generation", sess.GenerationID(), "member", sess.MemberID())
	from := make(map[int32]int64, len(parts))
	if len(parts) > 0 {
		pos, err := r.h.Positions(r.runCtx, topic, parts)
		if err != nil {
			if r.runCtx.Err() == nil {
				r.fail(fmt.Errorf("consumer: positions of %s: %w", topic, err))
			}
			return err
		}
		var starts map[int32]int64
		for _, p := range parts {
			at, ok := pos[p]
			if !ok || at < 0 {
				from[p] = -1
				if r.cfg.Start == "latest" {
					continue // the group's committed offset, else the newest
				}
				// The ledger is the only truth: a partition it has no
				// position for starts at its log start, whatever the
				// group committed (a full refresh forgets positions).
				if starts == nil {
					if starts, err = listOffsets(r.client, topic, parts, sarama.OffsetOldest); err != nil {
						if r.runCtx.Err() == nil {
							r.fail(fmt.Errorf("consumer: start offsets of %s: %w", topic, err))
						}
						return err
					}
				}
				sess.ResetOffset(topic, p, starts[p], "")
				continue
			}
			// MarkOffset only moves forward and ResetOffset only backward:
			// together they set the claim's starting offset to the ledger's.
			sess.MarkOffset(topic, p, at, "")
			sess.ResetOffset(topic, p, at, "")
			from[p] = at
		}
		r.log.Debug("consumer: ledger positions", "positions", from)
	}
	r.mu.Lock()
	r.from = from
	r.mu.Unlock()
	return nil
}

// Cleanup runs once every claim of the session returned.
func (r *runner) Cleanup(sess sarama.ConsumerGroupSession) error {
	parts := slices.Sorted(slices.Values(sess.Claims()[r.cfg.Topic]))
	r.log.Info("consumer: partitions revoked", "partitions", parts, "generation", sess.GenerationID())
	return nil
}

// ConsumeClaim batches one partition's records and processes them in order.
func (r *runner) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	r.mu.Lock()
	from, ok := r.from[claim.Partition()]
	r.mu.Unlock()
	if !ok {
		from = -1
	}
	l := newClaimLoop(r, sess, claim, from)
	l.run()
	return nil
}

// markDone records that a bounded read finished a partition, and ends the
// run when it was the last.
func (r *runner) markDone(p int32) {
	r.mu.Lock()
	first := !r.done[p]
	r.done[p] = true
	all := true
	for q := range r.ends {
		all = all && r.done[q]
	}
	r.mu.Unlock()
	if r.direct != nil {
		r.direct.pause(p)
	} else {
		r.group.Pause(map[string][]int32{r.cfg.Topic: {p}})
	}
	if !first {
		return
	}
	r.log.Info("consumer: partition reached its end offset", "partition", p, "end", r.ends[p])
	if all {
		r.log.Info("consumer: every partition reached its end offset")
		r.cancelRun()
	}
}

func (r *runner) isDone(p int32) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.done[p]
}

// flushOnExit reports whether a claim that is ending should still process
// its partial batch: yes when Consume is stopping without error (nothing is
// left to redo), no on a rebalance, an error or ErrRevoked (the next owner
// re-reads the records from the ledger position).
func (r *runner) flushOnExit() bool {
	return r.runCtx.Err() != nil && r.failure() == nil && !errors.Is(context.Cause(r.runCtx), ErrRevoked)
}
