package flows

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/backfill"
	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/consumer"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/spec"
	"github.com/sluicehq/sluice/sinks"
)

// Verification (docs/operations.md#verifying-a-target): a target's rows
// per day against the same computed from its source, read again. The
// source's records go through the flow's own decoding and rules (its
// handler's prepare), into a load that is never committed, so that "what
// the target should hold" is computed by the code that loaded it, from the
// range of offsets its committed loads cover.

// VerifyOptions are Verify's.
type VerifyOptions struct {
	Table string // an append target of one Kafka flow
	Day   string // the column that gives a row's day: timestamp, date or string
	Max   string // a column whose maximum per day is compared too; "" none
	// From and To bound the days compared (YYYY-MM-DD, inclusive); ""
	// unbounded.
	From, To string
}

// VerifyReport is Verify's result: every day of either side, in order.
type VerifyReport struct {
	Table  string     `json:"table"`
	Flow   string     `json:"flow"`
	Day    string     `json:"day_column"`
	Max    string     `json:"max_column,omitempty"`
	Days   []DayCheck `json:"days"`
	Differ int        `json:"days_that_differ"`
}

// DayCheck is one day's figures in the target and from the source.
type DayCheck struct {
	Day        string `json:"day"`
	TargetRows int64  `json:"target_rows"`
	SourceRows int64  `json:"source_rows"`
	TargetMax  string `json:"target_max,omitempty"`
	SourceMax  string `json:"source_max,omitempty"`
	Equal      bool   `json:"equal"`
}

// ErrVerifyMoved is a pipeline that committed loads while Verify read:
// its figures would compare different moments.
var ErrVerifyMoved = errors.New("the flow committed loads while verify read its target and source")

// Verify compares o.Table with its source, day by day.
func Verify(ctx context.Context, p *spec.Pipeline, sink sinks.Sink, o VerifyOptions) (*VerifyReport, error) {
	t := p.Table(o.Table)
	if t == nil {
		return nil, fmt.Errorf("%w: %s is not a table of the spec", ErrUnknownFlow, o.Table)
	}
	var f *spec.Flow
	for i := range p.Flows {
		if p.Flows[i].Target == o.Table {
			if f != nil {
				return nil, fmt.Errorf("table %s is written by flows %s and %s: verify compares a table with one source", o.Table, f.Name, p.Flows[i].Name)
			}
			f = &p.Flows[i]
		}
	}
	switch {
	case f == nil:
		return nil, fmt.Errorf("no flow writes table %s", o.Table)
	case f.Kind != spec.KindAppend || (f.Source.Kafka == nil && f.Source.Files == nil) || f.Incremental != nil:
		return nil, fmt.Errorf("flow %s is a %s flow from %s: verify reads the sources of Kafka and files append flows again (docs/operations.md#verifying-a-target says why not others)",
			f.Name, f.Kind, sourceKind(f))
	}
	r := newRunner(p, sink, Options{Mode: ModeUpdate})
	if err := r.resolveFromData(ctx); err != nil {
		return nil, err
	}
	h, err := r.newAppendHandler(f)
	if err != nil {
		return nil, err
	}
	for attempt := 0; attempt < 3; attempt++ {
		before, err := sink.Heads(ctx, p.Pipeline, f.Name, nil)
		if err != nil {
			return nil, err
		}
		target, err := sink.Scan(ctx, o.Table)
		if err != nil {
			return nil, err
		}
		want := newDays(o)
		if err := want.add(target); err != nil {
			return nil, fmt.Errorf("table %s: %w", o.Table, err)
		}
		got := newDays(o)
		if f.Source.Files != nil {
			err = r.replayFiles(ctx, f, h, before.Files(), got)
		} else {
			err = r.replay(ctx, f, h, before.Kafka(), got)
		}
		if err != nil {
			return nil, err
		}
		after, err := sink.Heads(ctx, p.Pipeline, f.Name, nil)
		if err != nil {
			return nil, err
		}
		if !maps.Equal(before.Kafka(), after.Kafka()) || !maps.Equal(before.Files(), after.Files()) {
			continue
		}
		return compareDays(o, f.Name, want, got), nil
	}
	return nil, ErrVerifyMoved
}

// replay reads the offsets the flow's committed loads cover and adds the
// target rows its handler makes of them to into.
func (r *runner) replay(ctx context.Context, f *spec.Flow, h *appendHandler, heads map[batch.TopicPartition]int64, into *days) error {
	cfg, err := r.consumerConfig(f)
	if err != nil {
		return err
	}
	store, err := OpenCheckpoints(ctx, r.sink, nil)
	if err != nil {
		return fmt.Errorf("checkpoint store: %w", err)
	}
	defer store.Close()
	firsts, err := checkpoint.FirstOffsets(ctx, store, r.p.Pipeline, f.Name)
	if err != nil {
		return err
	}
	ranges := map[int32]consumer.Range{}
	for tp, next := range heads {
		if tp.Topic == f.Source.Kafka.Topic {
			ranges[tp.Partition] = consumer.Range{From: 0, To: next}
		}
	}
	for _, fo := range firsts {
		if rg, ok := ranges[fo.Partition]; ok && fo.Topic == f.Source.Kafka.Topic {
			rg.From = fo.Offset
			ranges[fo.Partition] = rg
		}
	}
	capture := &captureLoad{table: f.Target, into: into}
	return consumer.ReadRanges(ctx, cfg, ranges, func(part int32, recs []batch.Record) error {
		rb := &consumer.RecordBatch{Topic: f.Source.Kafka.Topic, Partition: part, From: recs[0].Offset, Next: recs[len(recs)-1].Offset + 1, Records: recs}
		pr, err := h.prepare(ctx, rb)
		if err != nil {
			return err
		}
		return pr.write(ctx, capture)
	})
}

// replayFiles reads again the files the flow's committed loads read to
// their end and adds the target rows its handler makes of them to into. A
// file it is reading now makes the comparison impossible: an error.
func (r *runner) replayFiles(ctx context.Context, f *spec.Flow, h *appendHandler, heads map[string]batch.Position, into *days) error {
	files, err := backfill.Plan(r.p.Dir, f.Source.Files.Path)
	if err != nil {
		return err
	}
	var read []backfill.File
	for _, file := range files {
		switch pos, ok := heads[file.Name]; {
		case ok && pos.Done:
			read = append(read, file)
		case ok:
			return fmt.Errorf("file %s is being loaded (%d rows committed): verify once the flow read it to its end", file.Name, pos.RowGroup)
		}
	}
	for name := range heads {
		if !slices.ContainsFunc(files, func(f backfill.File) bool { return f.Name == name }) {
			return fmt.Errorf("file %s was loaded and is gone: its rows cannot be read again", name)
		}
	}
	rs, err := r.filesSchema(f, read, true)
	if err != nil {
		return err
	}
	byName := make(map[string]backfill.File, len(read))
	for _, file := range read {
		byName[file.Name] = file
	}
	capture := &captureLoad{table: f.Target, into: into}
	return backfill.ReadFiles(ctx, read, backfill.ReadFilesOptions{
		Parallel: 1,
		Open: func(_ context.Context, file backfill.File) (backfill.Reader, error) {
			return rs.open(f, file, 0)
		},
		Log: r.log,
	}, func(ctx context.Context, ch *backfill.Chunk) error {
		var pr *prepared
		var err error
		if rs.lines {
			pr, err = h.prepareLines(ctx, ch, byName[ch.File], rs.hive)
		} else {
			pr, err = h.prepareChunk(ctx, ch)
		}
		if err != nil {
			return fmt.Errorf("file %s: %w", ch.File, err)
		}
		return pr.write(ctx, capture)
	})
}

// captureLoad is a load that is never committed: it keeps the rows
// written to one table, for a comparison.
type captureLoad struct {
	table string
	into  *days
}

func (c *captureLoad) Write(_ context.Context, table string, b *batch.Batch) error {
	if table != c.table {
		return nil
	}
	return c.into.add(b)
}

func (c *captureLoad) Commit(context.Context, sinks.Commit) error {
	return errors.New("verify commits nothing")
}

func (c *captureLoad) Abort(context.Context) error { return nil }

// days is a table's rows by day: their count and the maximum of a column.
type days struct {
	o     VerifyOptions
	loc   *time.Location
	count map[string]int64
	max   map[string]any
}

func newDays(o VerifyOptions) *days {
	return &days{o: o, loc: time.UTC, count: map[string]int64{}, max: map[string]any{}}
}

func (d *days) add(b *batch.Batch) error {
	dv := b.Column(d.o.Day)
	if dv == nil {
		return fmt.Errorf("no column %s", d.o.Day)
	}
	var mv *batch.Vector
	if d.o.Max != "" {
		if mv = b.Column(d.o.Max); mv == nil {
			return fmt.Errorf("no column %s", d.o.Max)
		}
	}
	for i := range b.Len() {
		day := dayOf(dv.Value(i))
		if (d.o.From != "" && day < d.o.From) || (d.o.To != "" && day > d.o.To) {
			continue
		}
		d.count[day]++
		if mv != nil {
			if v := mv.Value(i); v != nil && (d.max[day] == nil || compareValues(v, d.max[day]) > 0) {
				d.max[day] = v
			}
		}
	}
	return nil
}

// dayOf is the day a value names: YYYY-MM-DD of a timestamp (UTC) or a
// date, the text of a string, "null" for none.
func dayOf(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case time.Time:
		return x.UTC().Format(time.DateOnly)
	case batch.DateValue:
		return x.String()
	case string:
		return x
	}
	return fmt.Sprint(v)
}

// compareValues orders two values of one column.
func compareValues(a, b any) int {
	switch x := a.(type) {
	case int64:
		return cmpOrdered(x, b.(int64))
	case float64:
		return cmpOrdered(x, b.(float64))
	case string:
		return strings.Compare(x, b.(string))
	case time.Time:
		return x.Compare(b.(time.Time))
	case batch.DateValue:
		return cmpOrdered(x, b.(batch.DateValue))
	case batch.Decimal128Value:
		return x.Unscaled.Cmp(b.(batch.Decimal128Value).Unscaled)
	case bool:
		return cmpOrdered(boolInt(x), boolInt(b.(bool)))
	}
	return strings.Compare(fmt.Sprint(a), fmt.Sprint(b))
}

func cmpOrdered[T int64 | float64 | batch.DateValue](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func valueText(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	}
	return fmt.Sprint(v)
}

func compareDays(o VerifyOptions, flow string, target, source *days) *VerifyReport {
	rep := &VerifyReport{Table: o.Table, Flow: flow, Day: o.Day, Max: o.Max}
	all := map[string]bool{}
	for d := range target.count {
		all[d] = true
	}
	for d := range source.count {
		all[d] = true
	}
	for _, d := range slices.Sorted(maps.Keys(all)) {
		c := DayCheck{Day: d, TargetRows: target.count[d], SourceRows: source.count[d],
			TargetMax: valueText(target.max[d]), SourceMax: valueText(source.max[d])}
		c.Equal = c.TargetRows == c.SourceRows && c.TargetMax == c.SourceMax
		if !c.Equal {
			rep.Differ++
		}
		rep.Days = append(rep.Days, c)
	}
	return rep
}
