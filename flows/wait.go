package flows

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/sluicehq/sluice/backfill"
	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/consumer"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/spec"
	"github.com/sluicehq/sluice/sinks"
)

// Readiness for downstream jobs (docs/operations.md#waiting-for-a-pipeline):
// Wait reads, when it starts, what each flow has to reach (its Kafka
// partitions' end offsets, the files and snapshots there are), then polls
// the destination's ledger until every flow committed that far.

// WaitOptions are Wait's.
type WaitOptions struct {
	Flows    []string      // the flows to wait for; nil: every flow
	Interval time.Duration // how often to poll; default 1s
	Timeout  time.Duration // how long to wait at most; 0: until ctx ends
}

// WaitReport is where the flows stand when Wait returns.
type WaitReport struct {
	CaughtUp bool         `json:"caught_up"`
	Waited   string       `json:"waited"`
	Flows    []WaitedFlow `json:"flows"`
	// Unpublished counts the committed loads not yet visible (a writer
	// between its commit point and its publication).
	Unpublished int `json:"unpublished,omitempty"`
}

// WaitedFlow is one flow's standing: Behind lists, one line each, what it
// has yet to commit.
type WaitedFlow struct {
	Flow     string   `json:"flow"`
	CaughtUp bool     `json:"caught_up"`
	Behind   []string `json:"behind,omitempty"`
	Note     string   `json:"note,omitempty"` // why the flow is not waited on, when it is not
}

// ErrWaitTimeout is a Wait whose timeout passed before every flow caught up.
var ErrWaitTimeout = errors.New("timed out before every flow caught up")

// goal is what one flow has to commit.
type goal struct {
	f         *spec.Flow
	ends      map[int32]int64 // Kafka: partition -> end offset at the start
	topic     string
	cfg       consumer.Config
	starts    map[int32]int64 // Kafka: the log start offsets at the start
	latest    bool            // Kafka: a partition without a position starts at its end
	files     []string        // files flows: the files there were at the start
	snapshot  string          // snapshot flows: the newest ready version at the start
	once      bool            // a once-flow: done when complete
	unplanned string          // why the flow is not waited on, when it is not
}

// Wait waits until every flow of o.Flows (all when nil) has committed what
// its sources held when the wait started. It returns the report and
// ErrWaitTimeout when o.Timeout passed first.
func Wait(ctx context.Context, p *spec.Pipeline, sink sinks.Sink, o WaitOptions) (*WaitReport, error) {
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	for _, name := range o.Flows {
		if p.Flow(name) == nil {
			return nil, fmt.Errorf("%w: %s", ErrUnknownFlow, name)
		}
	}
	start := time.Now()
	var goals []goal
	for i := range p.Flows {
		f := &p.Flows[i]
		if o.Flows != nil && !slices.Contains(o.Flows, f.Name) {
			continue
		}
		g, err := goalOf(ctx, p, f)
		if err != nil {
			return nil, fmt.Errorf("flow %s: %w", f.Name, err)
		}
		goals = append(goals, g)
	}
	var deadline <-chan time.Time
	if o.Timeout > 0 {
		t := time.NewTimer(o.Timeout)
		defer t.Stop()
		deadline = t.C
	}
	for {
		rep, err := standing(ctx, p, sink, goals)
		if err != nil {
			return nil, err
		}
		rep.Waited = time.Since(start).Round(time.Millisecond).String()
		if rep.CaughtUp {
			return rep, nil
		}
		select {
		case <-ctx.Done():
			return rep, ctx.Err()
		case <-deadline:
			return rep, ErrWaitTimeout
		case <-time.After(o.Interval):
		}
	}
}

// goalOf reads what flow f has to commit, as its sources stand now.
func goalOf(ctx context.Context, p *spec.Pipeline, f *spec.Flow) (goal, error) {
	g := goal{f: f, once: f.Once}
	switch {
	case f.Source.Kafka != nil:
		cfg, err := consumerBase(p, f)
		if err != nil {
			return g, err
		}
		if g.ends, err = consumer.EndOffsets(ctx, cfg); err != nil {
			return g, err
		}
		if g.starts, err = consumer.StartOffsets(ctx, cfg); err != nil {
			return g, err
		}
		g.cfg, g.latest = cfg, f.Start == spec.StartLatest
		g.topic = f.Source.Kafka.Topic
	case f.Kind == spec.KindAutoCDCFromSnapshot && f.Source.Snapshots != nil:
		planned, err := backfill.PlanSnapshots(p.Dir, f.Source.Snapshots.Path, nil)
		if err != nil {
			return g, err
		}
		for _, v := range planned {
			if v.Ready {
				g.snapshot = v.Text // ascending: the newest ready one wins
			}
		}
	case f.Kind == spec.KindAutoCDCFromSnapshot:
		g.snapshot = f.SnapshotVersion
	case f.Incremental != nil:
		g.unplanned = "an incremental flow reads its files again on every run: not waited on"
	case f.Source.Files != nil:
		files, err := backfill.Plan(p.Dir, f.Source.Files.Path)
		if err != nil {
			return g, err
		}
		for _, file := range files {
			g.files = append(g.files, file.Name)
		}
	}
	return g, nil
}

// standing compares the destination's ledger with the goals.
func standing(ctx context.Context, p *spec.Pipeline, sink sinks.Sink, goals []goal) (*WaitReport, error) {
	store, err := OpenCheckpoints(ctx, sink, nil)
	if err != nil {
		return nil, fmt.Errorf("checkpoint store: %w", err)
	}
	defer store.Close()
	rep := &WaitReport{CaughtUp: true}
	for _, g := range goals {
		heads, err := sink.Heads(ctx, p.Pipeline, g.f.Name, nil)
		if err != nil {
			return nil, err
		}
		var behind []string
		if g.once {
			st, _, err := checkpoint.GetOnce(ctx, store, p.Pipeline, g.f.Name)
			if err != nil {
				return nil, err
			}
			if !st.Complete {
				behind = append(behind, "once-flow not complete")
			}
		}
		pos := heads.Kafka()
		short := map[int32]consumer.Range{}
		for part, end := range g.ends {
			at, ok := pos[batch.TopicPartition{Topic: g.topic, Partition: part}]
			if !ok {
				if g.latest {
					continue // the flow reads what comes after its start: nothing of this partition yet
				}
				at = g.starts[part] // what retention kept is what the flow will read
			}
			if at < end {
				short[part] = consumer.Range{From: at, To: end}
			}
		}
		if len(short) > 0 {
			// Below the end may be only transaction markers and aborted
			// records: nothing to commit.
			pending, err := consumer.Pending(ctx, g.cfg, short)
			if err != nil {
				return nil, err
			}
			for _, part := range slices.Sorted(maps.Keys(short)) {
				if r := short[part]; pending[part] {
					behind = append(behind, fmt.Sprintf("partition %s/%d at offset %d of %d (%d behind)", g.topic, part, r.From, r.To, r.To-r.From))
				}
			}
		}
		done := heads.Files()
		for _, file := range g.files {
			if !done[file].Done {
				behind = append(behind, "file "+file+" not read to its end")
			}
		}
		if g.snapshot != "" {
			st, _, err := checkpoint.GetSnapshot(ctx, store, p.Pipeline, g.f.Name)
			if err != nil {
				return nil, err
			}
			if !st.Has(g.snapshot) {
				behind = append(behind, "snapshot "+g.snapshot+" not applied")
			}
		}
		wf := WaitedFlow{Flow: g.f.Name, CaughtUp: len(behind) == 0, Behind: behind, Note: g.unplanned}
		rep.CaughtUp = rep.CaughtUp && wf.CaughtUp
		rep.Flows = append(rep.Flows, wf)
	}
	if st, ok := sink.(sinks.Settler); ok && rep.CaughtUp {
		// Committed is not yet visible: a reader must see the rows.
		if rep.Unpublished, err = st.Unpublished(ctx); err != nil {
			return nil, err
		}
		rep.CaughtUp = rep.Unpublished == 0
	}
	return rep, nil
}
