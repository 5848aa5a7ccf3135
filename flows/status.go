package flows

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/consumer"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/spec"
	"github.com/sluicehq/sluice/sinks"
)

// Report is what `sluice status` shows.
type Report struct {
	Pipeline   string            `json:"pipeline"`
	Processes  []sinks.Heartbeat `json:"processes"`
	Flows      []FlowReport      `json:"flows"`
	LoadsTotal int               `json:"loads_total"`
	// Schema is the pipeline's latest row of _sluice_version; nil before
	// the first load.
	Schema *SchemaVersion `json:"schema,omitempty"`
}

// SchemaVersion is a version of the pipeline's schema (docs/schema.md#schema-history).
type SchemaVersion struct {
	Version    int64     `json:"version"`
	Hash       string    `json:"version_hash"`
	InsertedAt time.Time `json:"inserted_at"`
}

// ChildTable is a child table and the table of its parent rows.
type ChildTable struct {
	Name   string `json:"name"`
	Parent string `json:"parent"`
}

// FlowReport is one flow's state.
type FlowReport struct {
	Name        string              `json:"name"`
	Kind        string              `json:"kind"`
	Target      string              `json:"target"`
	Source      string              `json:"source"`
	Loads       int                 `json:"loads"`
	Rows        int64               `json:"rows"`
	DeadLetters int64               `json:"dead_letters"`
	LastLoadAt  *time.Time          `json:"last_load_at,omitempty"`
	Partitions  []PartitionProgress `json:"partitions,omitempty"`
	LagError    string              `json:"lag_error,omitempty"`
	// ChildTables are the child tables of the flow's target, as the
	// latest schema version has them (docs/schema.md#child-tables).
	ChildTables []ChildTable `json:"child_tables,omitempty"`
	// Files: how many files of a files source were read to their end.
	FilesDone int `json:"files_done,omitempty"`
	// Once: a once-flow's state: "pending", "running" or "complete".
	Once string `json:"once,omitempty"`
	// Snapshots: the snapshot versions a snapshot flow applied.
	Snapshots []string `json:"snapshots,omitempty"`
	// Cursor: an incremental flow's stored last_value ("" before its
	// first run completed) and the runs it completed.
	Cursor string `json:"cursor,omitempty"`
	Runs   int64  `json:"runs,omitempty"`
	// CutOvers: a live CDC flow's changes that came older than their key's
	// last replayed change, so they missed the per-key cut-over (see
	// docs/operations.md), and the first of their keys.
	CutOvers    int64                     `json:"cut_overs,omitempty"`
	CutOverKeys []checkpoint.CutOverEntry `json:"cut_over_keys,omitempty"`
	// Expectations: per expectation of the flow (and its where filter,
	// named ""), the records it counted in committed loads.
	Expectations []ExpectationCount `json:"expectations,omitempty"`
}

// ExpectationCount is what one expectation (or the where filter) of a flow
// counted: the records that violated it (action warn or drop) or that the
// filter left out (action filtered).
type ExpectationCount struct {
	Expectation string `json:"expectation"`
	Action      string `json:"action"`
	Rows        int64  `json:"rows"`
}

// PartitionProgress is a Kafka partition's ledger position and lag.
type PartitionProgress struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Position  int64  `json:"position"` // next offset to read, from the ledger; -1 when none
	End       int64  `json:"end"`      // the partition's last stable offset; -1 when unknown
	Lag       int64  `json:"lag"`      // records not yet loaded; -1 when unknown
}

// Status reads the pipeline's state from the destination and, when reach is
// true, the partitions' end offsets from Kafka.
func Status(ctx context.Context, p *spec.Pipeline, sink sinks.Sink, reach bool) (*Report, error) {
	totals, err := sink.Totals(ctx, p.Pipeline)
	if err != nil {
		return nil, err
	}
	hbs, err := sink.Heartbeats(ctx, p.Pipeline, time.Now())
	if err != nil {
		return nil, err
	}
	if hbs == nil {
		hbs = []sinks.Heartbeat{} // "processes": [] when none is alive
	}
	rep := &Report{Pipeline: p.Pipeline, Processes: hbs}
	for _, t := range totals {
		rep.LoadsTotal += int(t.Loads)
	}
	store, err := OpenCheckpoints(ctx, sink, nil)
	if err != nil {
		store = nil // status still reports what the ledger says
	} else {
		defer store.Close()
	}
	counts, err := expectationCounts(ctx, p, sink)
	if err != nil {
		return nil, err
	}
	children := map[string][]ChildTable{} // by the table typed by its messages
	if v, err := latestVersion(ctx, sink, p.Pipeline); err != nil {
		return nil, err
	} else if v.Version > 0 {
		rep.Schema = &SchemaVersion{Version: v.Version, Hash: v.Hash, InsertedAt: v.At}
		var doc schemaDoc
		if json.Unmarshal([]byte(v.Schema), &doc) == nil {
			for _, t := range doc.Tables {
				if t.Root != "" {
					children[t.Root] = append(children[t.Root], ChildTable{Name: t.Name, Parent: t.Parent})
				}
			}
		}
	}
	for i := range p.Flows {
		f := &p.Flows[i]
		fr := FlowReport{Name: f.Name, Kind: f.Kind, Target: f.Target, Source: sourceKind(f), Expectations: counts[f.Name]}
		if f.HasChildren(p) {
			fr.ChildTables = children[f.Target]
		}
		if t, ok := totals[f.Name]; ok {
			fr.Loads, fr.Rows, fr.DeadLetters = int(t.Loads), t.Rows, t.DeadLetters
			at := t.LastAt
			fr.LastLoadAt = &at
		}
		heads, err := sink.Heads(ctx, p.Pipeline, f.Name, nil)
		if err != nil {
			return nil, err
		}
		if f.Source.Files != nil {
			fr.Source = "files:" + f.Source.Files.Path
			for _, fp := range heads.Files() {
				if fp.Done && f.Incremental == nil { // an incremental flow reads its files again on every run
					fr.FilesDone++
				}
			}
		}
		if f.Source.Snapshots != nil {
			fr.Source = "snapshots:" + f.Source.Snapshots.Path
		}
		if store != nil {
			if f.Once {
				st, _, err := checkpoint.GetOnce(ctx, store, p.Pipeline, f.Name)
				if err != nil {
					return nil, err
				}
				switch {
				case st.Complete:
					fr.Once = "complete"
				case !st.StartedAt.IsZero():
					fr.Once = "running"
				default:
					fr.Once = "pending"
				}
			}
			if f.Kind == spec.KindAutoCDC && !f.Once {
				st, err := checkpoint.GetCutOvers(ctx, store, p.Pipeline, f.Name)
				if err != nil {
					return nil, err
				}
				fr.CutOvers, fr.CutOverKeys = st.Changes, st.Keys
			}
			if f.Incremental != nil {
				st, _, err := checkpoint.GetCursor(ctx, store, p.Pipeline, f.Name)
				if err != nil {
					return nil, err
				}
				fr.Cursor, fr.Runs = st.LastValue, st.Runs
			}
			if f.Kind == spec.KindAutoCDCFromSnapshot {
				st, _, err := checkpoint.GetSnapshot(ctx, store, p.Pipeline, f.Name)
				if err != nil {
					return nil, err
				}
				fr.Snapshots = st.Applied
			}
		}
		if f.Source.Kafka != nil {
			fr.Source = "kafka:" + f.Source.Kafka.Topic
			pos := heads.Kafka()
			var ends map[int32]int64
			if reach {
				cfg, err := consumerBase(p, f)
				if err == nil {
					ends, err = consumer.EndOffsets(ctx, cfg)
				}
				if err != nil {
					fr.LagError = err.Error()
				}
			}
			fr.Partitions = progress(f.Source.Kafka.Topic, pos, ends)
		}
		rep.Flows = append(rep.Flows, fr)
	}
	return rep, nil
}

func progress(topic string, pos map[batch.TopicPartition]int64, ends map[int32]int64) []PartitionProgress {
	seen := map[int32]bool{}
	var out []PartitionProgress
	add := func(part int32) {
		if seen[part] {
			return
		}
		seen[part] = true
		pp := PartitionProgress{Topic: topic, Partition: part, Position: -1, End: -1, Lag: -1}
		if off, ok := pos[batch.TopicPartition{Topic: topic, Partition: part}]; ok {
			pp.Position = off
		}
		if end, ok := ends[part]; ok {
			pp.End = end
			pp.Lag = end - max(pp.Position, 0)
		}
		out = append(out, pp)
	}
	for tp := range pos {
		if tp.Topic == topic {
			add(tp.Partition)
		}
	}
	for part := range ends {
		add(part)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Partition < out[j].Partition })
	return out
}

// consumerBase is the consumer configuration of a flow without run-mode
// details: enough to reach the brokers.
func consumerBase(p *spec.Pipeline, f *spec.Flow) (consumer.Config, error) {
	cfg := consumer.Config{Brokers: p.Kafka.Brokers, Group: p.FlowGroup(f), Topic: f.Source.Kafka.Topic,
		ClientID: "sluice-" + p.Pipeline + "-status"}
	return cfg, kafkaSecurity(&cfg, p.Kafka)
}

// expectationCounts sums _sluice_expectations per flow of the pipeline
// (the rows of a flow's loads before its last reset are gone with them).
func expectationCounts(ctx context.Context, p *spec.Pipeline, sink sinks.Sink) (map[string][]ExpectationCount, error) {
	need := false
	for i := range p.Flows {
		f := &p.Flows[i]
		need = need || f.Where != "" || len(f.Expectations) > 0 || f.SchemaContract != nil
	}
	if !need {
		return nil, nil
	}
	b, err := sink.Scan(ctx, batch.ExpectationsTable)
	if errors.Is(err, sinks.ErrUnknownTable) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	type key struct{ flow, exp, action string }
	sums := map[key]int64{}
	pipe, flow, exp, action, rows := b.Column("pipeline"), b.Column("flow"), b.Column("expectation"), b.Column("action"), b.Column("rows")
	for i := range b.Len() {
		if pipe.Strs[i] == p.Pipeline {
			sums[key{flow.Strs[i], exp.Strs[i], action.Strs[i]}] += rows.Ints[i]
		}
	}
	out := map[string][]ExpectationCount{}
	for k, n := range sums {
		out[k.flow] = append(out[k.flow], ExpectationCount{Expectation: k.exp, Action: k.action, Rows: n})
	}
	for _, l := range out {
		slices.SortFunc(l, func(a, b ExpectationCount) int {
			return strings.Compare(a.Expectation+"/"+a.Action, b.Expectation+"/"+b.Action)
		})
	}
	return out, nil
}
