package flows

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/consumer"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/spec"
	"github.com/sluicehq/sluice/flows/wire"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/sinks"
)

// Mode says how long a runner goes on.
type Mode int

const (
	// ModeUpdate processes what exists when it starts (Kafka up to the last
	// stable offsets read at start), commits and returns (sluice update).
	ModeUpdate Mode = iota
	// ModeRun goes on until its context is cancelled, then drains the batches
	// in flight, commits and returns (sluice run).
	ModeRun
)

func (m Mode) String() string {
	if m == ModeRun {
		return "run"
	}
	return "update"
}

// Defaults of Options.
const (
	DefaultRetryFor       = 5 * time.Minute
	DefaultHeartbeatEvery = 3 * time.Second
	DefaultHeartbeatTTL   = 10 * time.Second
)

// Options configure Execute.
type Options struct {
	Mode   Mode
	Logger *slog.Logger // nil discards

	// RetryFor bounds how long update retries a destination that keeps
	// failing with retryable errors; default DefaultRetryFor. run retries
	// without end.
	RetryFor time.Duration

	// LeaseTTL is how long the lease of a CDC target (or of a files flow's
	// files) outlives its last renewal, renewed every third of it; default
	// DefaultLeaseTTL. Another process takes a lease over about a TTL after
	// its holder died or stopped renewing it.
	LeaseTTL time.Duration

	// HeartbeatEvery is how often the process renews its heartbeat in the
	// destination (default DefaultHeartbeatEvery); a heartbeat expires
	// HeartbeatTTL after its last renewal (default DefaultHeartbeatTTL).
	HeartbeatEvery time.Duration
	HeartbeatTTL   time.Duration

	// FullRefresh empties every target and replays every flow from the
	// start; Refresh does so for the targets of the named flows (and every
	// flow writing them). Update mode only. AllowDataLoss lets a refresh go
	// ahead when a Kafka source no longer holds a flow's first offset.
	FullRefresh   bool
	Refresh       []string
	AllowDataLoss bool

	// Progress is where files flows show their progress: a progress bar
	// when it is a terminal, else Info lines on the logger every
	// backfill.DefaultProgressInterval. nil: log lines only.
	Progress io.Writer

	// ExpireEvery is how often run forgets, for keys that get no more
	// events, what CDC state keeps longer than tombstone_retention; default
	// a quarter of the retention, within [1m, 6h].
	ExpireEvery time.Duration

	// Expire makes update, once its flows ended without an error, go over
	// every CDC target's key states once and forget what expired, then
	// compact the targets whose destination keeps removal markers when they
	// pass a tenth of its rows, as run does periodically.
	Expire bool

	// PollFiles is how often run looks for new files of files and
	// snapshots flows; default DefaultPollFiles.
	PollFiles time.Duration

	// Consumer, when set, adjusts each flow's consumer configuration after
	// sluice derived it from the spec (tests shorten timeouts with it).
	Consumer func(*consumer.Config)

	// Checkpoints, when set, wraps the pipeline's checkpoint store (tests
	// inject faults with it).
	Checkpoints func(checkpoint.Store) checkpoint.Store

	// Metrics, when set, records the run's metrics and readiness
	// (docs/operations.md#metrics); nil records nothing.
	Metrics *metrics.Set

	// Summary, when set, gets what each flow committed once Execute is
	// about to return, in the spec's order (update prints it).
	Summary func([]FlowSummary)

	// LogEvery is how often run logs, at Info, what each flow committed
	// since the last such line; default DefaultLogEvery, negative never.
	LogEvery time.Duration
}

// DefaultLogEvery is how often run logs the loads committed.
const DefaultLogEvery = 30 * time.Second

// FlowSummary is what one flow committed during an Execute.
type FlowSummary struct {
	Flow, Target string
	Loads        int64
	Rows         int64
	DeadLetters  int64
	// Lag is the records of its Kafka partitions past its committed
	// positions as of its last load; -1 when it read no Kafka batch.
	Lag     int64
	Elapsed time.Duration
}

// flowTally counts a flow's committed loads (FlowSummary).
type flowTally struct {
	loads, rows, deadLetters atomic.Int64
	mu                       sync.Mutex
	lag                      map[string]int64 // topic/partition -> records behind
	start, end               time.Time
}

func (t *flowTally) setLag(topic string, partition int32, n int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lag == nil {
		t.lag = map[string]int64{}
	}
	t.lag[topic+"/"+strconv.Itoa(int(partition))] = max(n, 0)
}

func (t *flowTally) summary(f *spec.Flow) FlowSummary {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := FlowSummary{Flow: f.Name, Target: f.Target, Loads: t.loads.Load(), Rows: t.rows.Load(), DeadLetters: t.deadLetters.Load(), Lag: -1}
	if t.lag != nil {
		s.Lag = 0
		for _, n := range t.lag {
			s.Lag += n
		}
	}
	if !t.start.IsZero() {
		end := t.end
		if end.IsZero() {
			end = time.Now()
		}
		s.Elapsed = end.Sub(t.start)
	}
	return s
}

// tally returns flow f's counters.
func (r *runner) tally(f string) *flowTally {
	if t := r.tallies[f]; t != nil {
		return t
	}
	return &flowTally{} // a flow outside the spec's (replays): not summed
}

// ErrRunAlive is returned by an update while a run of the pipeline is alive.
var ErrRunAlive = errors.New("a sluice run of this pipeline is alive")

// Execute runs every flow of the pipeline against the sink in the given mode.
// It returns when all flows finished (update), or when ctx is cancelled and
// the flows drained (run). Errors of several flows are all returned.
func Execute(ctx context.Context, p *spec.Pipeline, sink sinks.Sink, opts Options) error {
	r := newRunner(p, sink, opts)
	return r.execute(ctx)
}

type runner struct {
	p           *spec.Pipeline
	sink        sinks.Sink
	opts        Options
	log         *slog.Logger
	id          string
	checkpoints checkpoint.Store
	// dataMu guards the schemas of tables typed by their data once their
	// first files arrive (ensureFromData) or new fields of their messages
	// (evolve) against the flows reading and writing them.
	dataMu sync.RWMutex
	// inferred holds, per flow that infers its columns from JSON messages
	// (spec.Flow.InfersJSON), the columns it decodes: its target's columns
	// at the start and those its messages added since. Under dataMu.
	inferred map[string]batch.Schema
	// children holds the child tables of tables typed by their messages
	// (docs/schema.md#child-tables), by name, with their columns. Under
	// dataMu.
	children map[string]childTable
	versions schemaVersions
	// names holds, per flow that infers its columns from JSON messages,
	// the field names normalized to other column names. Under dataMu.
	names map[string]map[string]string

	regMu      sync.Mutex
	registries map[string]*wire.Registry // schema registry clients, by connection

	tallies map[string]*flowTally // by flow name; set before any flow runs
}

func newRunner(p *spec.Pipeline, sink sinks.Sink, opts Options) *runner {
	if opts.RetryFor <= 0 {
		opts.RetryFor = DefaultRetryFor
	}
	if opts.HeartbeatEvery <= 0 {
		opts.HeartbeatEvery = DefaultHeartbeatEvery
	}
	if opts.HeartbeatTTL <= 0 {
		opts.HeartbeatTTL = DefaultHeartbeatTTL
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = DefaultLeaseTTL
	}
	if opts.PollFiles <= 0 {
		opts.PollFiles = DefaultPollFiles
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.LogEvery == 0 {
		opts.LogEvery = DefaultLogEvery
	}
	tallies := make(map[string]*flowTally, len(p.Flows))
	for _, f := range p.Flows {
		tallies[f.Name] = &flowTally{}
	}
	return &runner{names: map[string]map[string]string{}, p: p, sink: sink, opts: opts, log: log.With("pipeline", p.Pipeline), id: newLoadID(),
		tallies: tallies}
}

func (r *runner) execute(ctx context.Context) error {
	if _, _, err := refreshSet(r.p, false, r.opts.Refresh); err != nil {
		return err
	}
	if r.opts.Summary != nil {
		defer func() {
			out := make([]FlowSummary, len(r.p.Flows))
			for i := range r.p.Flows {
				out[i] = r.tally(r.p.Flows[i].Name).summary(&r.p.Flows[i])
			}
			r.opts.Summary(out)
		}()
	}
	if r.opts.Mode == ModeRun && r.opts.LogEvery > 0 {
		stop := r.logCommitted(ctx, r.opts.LogEvery)
		defer stop()
	}
	for i := range r.p.Flows {
		f := &r.p.Flows[i]
		supported := (f.Source.Kafka != nil || f.Source.Files != nil) && (f.Kind == spec.KindAppend || f.Kind == spec.KindAutoCDC) ||
			f.Kind == spec.KindAutoCDCFromSnapshot
		if !supported {
			return fmt.Errorf("flow %s: %s flows from %s sources are not supported by this version of sluice", f.Name, f.Kind, sourceKind(f))
		}
	}

	if err := r.resolveFromData(ctx); err != nil {
		return err
	}
	if err := r.resolveSnapshotSchemas(); err != nil {
		return err
	}
	changed, err := r.ensure(ctx)
	if err != nil {
		return err
	}
	if err := r.loadVersions(ctx); err != nil {
		return err
	}
	if err := r.gate(ctx); err != nil {
		return err
	}
	stopBeat, err := r.startHeartbeat(ctx)
	if err != nil {
		return err
	}
	defer stopBeat()

	if err := r.retry(ctx, "recover", r.sink.Recover); err != nil {
		return err
	}
	targets, err := r.cdcTargets()
	if err != nil {
		return err
	}
	store, err := OpenCheckpoints(ctx, r.sink, r.log)
	if err != nil {
		return fmt.Errorf("checkpoint store: %w", err)
	}
	defer store.Close()
	if r.opts.Checkpoints != nil {
		store = r.opts.Checkpoints(store)
	}
	r.checkpoints = newRetryingStore(store, r)
	held := map[string]*leaseKeeper{}
	defer func() {
		for _, k := range held {
			k.release(ctx)
		}
	}()
	if r.opts.FullRefresh || len(r.opts.Refresh) > 0 {
		if r.opts.Mode != ModeUpdate {
			return errors.New("a refresh runs with update, not run")
		}
		// A refresh empties targets: it holds their leases first.
		if err := r.holdAll(ctx, targets, held); err != nil {
			return err
		}
		if err := r.refresh(ctx); err != nil {
			return err
		}
		if err := r.recreate(ctx, changed); err != nil {
			return err
		}
	}
	refreshed, _, _ := refreshSet(r.p, r.opts.FullRefresh, r.opts.Refresh)
	if err := r.checkContracts(ctx, refreshed); err != nil {
		return err
	}

	handlers := make([]batchHandler, len(r.p.Flows))
	for i := range r.p.Flows {
		f := &r.p.Flows[i]
		var err error
		if f.Kind == spec.KindAutoCDCFromSnapshot {
			continue // built per snapshot version
		}
		if t := targets[f.Target]; t != nil {
			if f.DataTold(r.p) && !f.InfersJSON() && len(f.SourceSchema().Columns) == 0 {
				return fmt.Errorf("flow %s: no file yet to take the columns of CDC target %s from: start sluice once its first files are there, or declare the columns", f.Name, f.Target)
			}
			var h *cdcHandler
			h, err = r.newCDCHandler(f, t)
			if h != nil && (t.expiry == nil || h.flow.TombstoneRetention > t.expiry.flow.TombstoneRetention) {
				// Of the flows writing a target, the one whose tombstone_retention is
				// longest decides its expiry: forgetting later than a flow asks is
				// safe, earlier is not.
				t.expiry = h
			}
			handlers[i] = h
		} else {
			handlers[i], err = r.newAppendHandler(f)
		}
		if err != nil {
			return fmt.Errorf("flow %s: %w", f.Name, err)
		}
	}

	names := make([]string, len(r.p.Flows))
	for i := range r.p.Flows {
		names[i] = r.p.Flows[i].Name
	}
	r.opts.Metrics.Expect(names)
	// runFlow runs flow i; a flow's error names it.
	runFlow := func(ctx context.Context, i int) error {
		f, h := &r.p.Flows[i], handlers[i]
		ctx = withFlow(ctx, f.Name)
		r.opts.Metrics.FlowStarted(f.Name)
		t := r.tally(f.Name)
		t.mu.Lock()
		t.start = time.Now()
		t.mu.Unlock()
		defer func() {
			t.mu.Lock()
			t.end = time.Now()
			t.mu.Unlock()
		}()
		var err error
		switch {
		case f.Kind == spec.KindAutoCDCFromSnapshot:
			err = r.runSnapshotFlow(ctx, f, targets[f.Target])
		case f.Source.Files != nil:
			err = r.runFilesFlow(ctx, f, h)
		default:
			err = r.runKafkaFlow(ctx, f, h)
		}
		if err == nil || r.stopped(ctx, err) {
			return nil
		}
		r.opts.Metrics.FlowFailing(f.Name, err)
		return fmt.Errorf("flow %s: %w", f.Name, err)
	}
	// A CDC target's flows run under its lease, with its expiry; every
	// other flow runs on its own.
	var groups []func(ctx context.Context) error
	byTarget := map[string][]int{}
	for i := range r.p.Flows {
		if t := targets[r.p.Flows[i].Target]; t != nil {
			byTarget[t.name] = append(byTarget[t.name], i)
			continue
		}
		groups = append(groups, func(ctx context.Context) error { return runFlow(ctx, i) })
	}
	for _, name := range slices.Sorted(maps.Keys(byTarget)) {
		t, flows := targets[name], byTarget[name]
		k := held[name]
		delete(held, name)
		groups = append(groups, func(ctx context.Context) error {
			return r.runTarget(ctx, t, k, flows, runFlow)
		})
	}
	all := make([]int, len(groups))
	for i := range all {
		all[i] = i
	}
	if err := r.runParallel(ctx, all, func(ctx context.Context, i int) error { return groups[i](ctx) }); err != nil {
		return err
	}
	if r.opts.Mode == ModeUpdate {
		return r.settle(ctx)
	}
	return nil
}

// settle publishes, before an update returns, the committed loads whose
// publication failed: the sink publishes them at its next maintenance,
// which a finished update does not wait for, and an update that returned
// has every row it loaded visible (docs/operations.md).
func (r *runner) settle(ctx context.Context) error {
	st, ok := r.sink.(sinks.Settler)
	if !ok {
		return nil
	}
	var n int
	if err := r.retry(ctx, "count unpublished loads", func(ctx context.Context) error {
		var err error
		n, err = st.Unpublished(ctx)
		return err
	}); err != nil || n == 0 {
		return err
	}
	r.log.Info("committed loads not published yet; publishing them before the update ends", "loads", n)
	return r.retry(ctx, "publish committed loads", r.sink.Recover)
}

// logCommitted logs, every interval until stopped, what each flow
// committed since the line before: one Info line per flow that loaded or
// is behind.
func (r *runner) logCommitted(ctx context.Context, every time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := make(map[string]FlowSummary, len(r.p.Flows))
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for i := range r.p.Flows {
				f := &r.p.Flows[i]
				now, before := r.tally(f.Name).summary(f), last[f.Name]
				last[f.Name] = now
				if now.Loads == before.Loads && now.Lag <= 0 {
					continue
				}
				attrs := []any{"flow", f.Name, "loads", now.Loads - before.Loads, "rows", now.Rows - before.Rows,
					"dead_letters", now.DeadLetters - before.DeadLetters, "last", every.String()}
				if now.Lag >= 0 {
					attrs = append(attrs, "lag", now.Lag)
				}
				r.log.Info("loads committed", attrs...)
			}
		}
	}()
	return func() { cancel(); <-done }
}

// stopped reports whether err is only how a continuous run's flow noticed
// that the run is stopping: whatever it was reading or writing when its
// context ended failed with the cancellation. That is the stop, not an
// error.
func (r *runner) stopped(ctx context.Context, err error) bool {
	return r.opts.Mode == ModeRun && ctx.Err() != nil && errors.Is(err, context.Canceled)
}

func sourceKind(f *spec.Flow) string {
	switch {
	case f.Source.Kafka != nil:
		return "kafka"
	case f.Source.Files != nil:
		return "files"
	case f.Source.Snapshots != nil:
		return "snapshots"
	}
	return "unknown"
}

// Tables returns the destination tables the pipeline's spec resolves, or
// those named. A table whose columns its data tells and which has no data
// yet is left out: it is created when its first files arrive.
func Tables(p *spec.Pipeline, names ...string) []sinks.Table {
	out := make([]sinks.Table, 0, len(p.Tables))
	for _, t := range p.Tables {
		if len(t.Schema.Columns) == 0 || len(names) > 0 && !slices.Contains(names, t.Name) {
			continue
		}
		st := sinks.Table{Name: t.Name, Schema: t.Schema, OrderBy: t.OrderBy, PartitionBy: t.PartitionBy}
		if t.CDC {
			st.Kind, st.Keys = sinks.KindSCD1, t.Keys
			if t.SCDType == 2 {
				st.Kind = sinks.KindSCD2
			}
		}
		out = append(out, st)
	}
	return out
}

// gate keeps update and run apart: an update refuses to start while a run is
// alive and waits out a run heartbeat that stopped; a run waits while an
// update is alive.
func (r *runner) gate(ctx context.Context) error {
	for {
		hbs, err := r.sink.Heartbeats(ctx, r.p.Pipeline, time.Now())
		if err != nil {
			return err
		}
		var other []sinks.Heartbeat
		for _, hb := range hbs {
			if hb.ID == r.id {
				continue
			}
			if r.opts.Mode == ModeUpdate && hb.Kind == ModeRun.String() ||
				r.opts.Mode == ModeRun && hb.Kind == ModeUpdate.String() {
				other = append(other, hb)
			}
		}
		if len(other) == 0 {
			return nil
		}
		// Renewed since the last look: alive. Otherwise wait one renewal
		// period and look again; a stopped heartbeat is waited out until it
		// expires.
		hb := other[0]
		r.log.Info("heartbeat of another process found; checking whether it is alive",
			"kind", hb.Kind, "host", hb.Host, "pid", hb.PID, "last_beat", hb.BeatAt)
		if err := sleep(ctx, r.opts.HeartbeatEvery+time.Second); err != nil {
			return err
		}
		again, err := r.sink.Heartbeats(ctx, r.p.Pipeline, time.Now())
		if err != nil {
			return err
		}
		for _, h2 := range again {
			if h2.ID != hb.ID || !h2.BeatAt.After(hb.BeatAt) {
				continue
			}
			if r.opts.Mode == ModeUpdate {
				return fmt.Errorf("%w (pid %d on %s, heartbeat renewed %s ago): stop it first; a run already processes everything that arrives",
					ErrRunAlive, h2.PID, h2.Host, time.Since(h2.BeatAt).Round(time.Second))
			}
			r.log.Info("waiting for a sluice update of this pipeline to finish", "host", h2.Host, "pid", h2.PID)
		}
	}
}

func (r *runner) startHeartbeat(ctx context.Context) (stop func(), err error) {
	host, _ := os.Hostname()
	beat := func(ctx context.Context) error {
		now := time.Now()
		return r.sink.Beat(ctx, sinks.Heartbeat{
			Pipeline: r.p.Pipeline, ID: r.id, Kind: r.opts.Mode.String(), Host: host, PID: os.Getpid(),
			BeatAt: now, Expires: now.Add(r.opts.HeartbeatTTL),
		})
	}
	if err := beat(ctx); err != nil {
		return nil, fmt.Errorf("heartbeat: %w", err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(r.opts.HeartbeatEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if err := beat(context.WithoutCancel(ctx)); err != nil {
					r.log.Warn("heartbeat not renewed", "err", err)
				}
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
		if err := r.sink.EndBeat(context.WithoutCancel(ctx), r.p.Pipeline, r.id); err != nil {
			r.log.Warn("heartbeat not removed; it expires by itself", "err", err)
		}
	}, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// named is a classifier that names what it classifies the errors of, for
// the retry log lines and metrics ("destination" when it does not).
type named interface{ Component() string }

// reportsRecovery is a classifier of an operation that says itself when
// the outage ended: one that runs on long after it (a consumer) would
// report it only when it returns.
type reportsRecovery interface{ ReportsRecovery() }

// flowKey is the context key of the flow an operation is for.
type flowKey struct{}

// withFlow marks ctx as the context of flow f's operations: their retries
// are counted, and their failures make readiness name it.
func withFlow(ctx context.Context, f string) context.Context {
	return context.WithValue(ctx, flowKey{}, f)
}

func flowOf(ctx context.Context) string {
	f, _ := ctx.Value(flowKey{}).(string)
	return f
}

// recovered notes an operation that succeeded after failing: readiness
// and the log say the component answers again.
func (r *runner) recovered(component, flow, what string, attempts int, after time.Duration) {
	if component == "destination" {
		r.opts.Metrics.Destination(nil)
	}
	if flow != "" {
		r.opts.Metrics.FlowFailing(flow, nil)
	}
	r.log.Info(component+" recovered", "op", what, "attempts", attempts, "after", after.Round(time.Millisecond).String())
}

// Retry runs op as a run or update retries a failing component (c
// classifies its errors), for work before Execute: opening the
// destination waits as a destination failing mid-run is waited for.
func Retry(ctx context.Context, p *spec.Pipeline, opts Options, what string, c sinks.Classifier, op func(context.Context) error) error {
	return newRunner(p, nil, opts).retryWith(ctx, what, c, op)
}

// retry runs op until it succeeds, fails with an error the sink does not
// classify as retryable, or (in update mode) RetryFor has passed. Retryable
// failures are logged at Warn with a growing backoff.
func (r *runner) retry(ctx context.Context, what string, op func(context.Context) error) error {
	c, _ := r.sink.(sinks.Classifier)
	return r.retryWith(ctx, what, c, op)
}

// retryWith is retry with the classifier of another component (nil: no
// error is retryable).
func (r *runner) retryWith(ctx context.Context, what string, c sinks.Classifier, op func(context.Context) error) error {
	start := time.Now()
	backoff := 100 * time.Millisecond
	component := "destination"
	if n, ok := c.(named); ok {
		component = n.Component()
	}
	flow := flowOf(ctx)
	for attempt := 1; ; attempt++ {
		err := op(ctx)
		if err == nil && attempt > 1 {
			if _, own := c.(reportsRecovery); !own {
				r.recovered(component, flow, what, attempt, time.Since(start))
			}
		}
		if err == nil || c == nil || !c.Retryable(err) {
			return err
		}
		r.opts.Metrics.Retry(r.p.Pipeline, flow, component)
		if component == "destination" {
			r.opts.Metrics.Destination(err)
		}
		if flow != "" {
			r.opts.Metrics.FlowFailing(flow, err)
		}
		if r.opts.Mode == ModeUpdate && time.Since(start) > r.opts.RetryFor {
			return fmt.Errorf("%s: still failing after %s: %w", what, r.opts.RetryFor, err)
		}
		r.log.Warn(component+" failing; retrying", "op", what, "attempt", attempt, "backoff", backoff, "err", err)
		if serr := sleep(ctx, backoff); serr != nil {
			// Stopped while waiting: the stop, which a run takes for no
			// error, and what it waited on.
			return fmt.Errorf("%w while retrying %s: %w", serr, what, err)
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}
