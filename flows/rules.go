package flows

import (
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/cdc"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/rules"
	"github.com/sluicehq/sluice/flows/spec"
)

// A flow's rules (computed columns, where, expectations; flows/rules) run
// over each decoded batch before it is applied or appended: the records
// they reject go to the dead letters of the same load, and the counts of
// the expectations and of the filter go to _sluice_expectations in it too.

// flowRules compiles a flow's rules once per schema its batches come in
// (a files source's chunks carry its Hive columns).
type flowRules struct {
	flow *spec.Flow
	// lenient: the flow's columns come from its messages, and a name its
	// rules use may be no column yet (rules.New).
	lenient bool
	mu      sync.Mutex
	by      map[string]*rules.Rules
}

func newFlowRules(f *spec.Flow, lenient bool) *flowRules {
	if len(f.ComputedColumns) == 0 && f.Where == "" && len(f.Expectations) == 0 {
		return nil
	}
	return &flowRules{flow: f, lenient: lenient, by: map[string]*rules.Rules{}}
}

func (fr *flowRules) of(s batch.Schema) (*rules.Rules, error) {
	key := fmt.Sprint(s.Columns)
	fr.mu.Lock()
	defer fr.mu.Unlock()
	if r, ok := fr.by[key]; ok {
		return r, nil
	}
	r, err := rules.New(fr.flow, s, fr.lenient)
	if err != nil {
		return nil, fmt.Errorf("flow %s: %w", fr.flow.Name, err)
	}
	fr.by[key] = r
	return r, nil
}

// ruled is what a flow's rules made of a batch.
type ruled struct {
	batch  *batch.Batch
	rows   []int // the input row of each row kept
	dls    []batch.DeadLetter
	counts *batch.Batch // of batch.ExpectationsSchema; nil when nothing counted
}

// apply runs the rules over b but the rows pass marks (see rules.Apply).
// deadLetter gives the source, position and payload of input row i. A
// violated fail expectation is an error that stops the flow with nothing
// of the batch committed.
func (fr *flowRules) apply(r *runner, b *batch.Batch, pass []bool, deadLetter func(i int) batch.DeadLetter) (ruled, error) {
	rs, err := fr.of(b.Schema)
	if err != nil {
		return ruled{}, err
	}
	res := rs.Apply(b, pass)
	f := fr.flow
	if res.Failed != nil {
		d := deadLetter(res.Failed.Row)
		return ruled{}, fmt.Errorf("record %s %s: %s (on_violation: fail); nothing of the batch committed", d.Source, d.Position, res.Failed.Msg)
	}
	out := ruled{batch: res.Batch, rows: res.Rows}
	for _, rej := range res.Rejects {
		d := deadLetter(rej.Row)
		d.Reason, d.Error = rej.Reason, rej.Msg
		out.dls = append(out.dls, d)
	}
	r.stampDeadLetters(f, out.dls)
	add := func(expectation, action string, n int64) {
		out.counts = r.count(out.counts, f, expectation, action, n)
	}
	for _, e := range f.Expectations {
		action := e.OnViolation
		if action == "" {
			action = spec.ViolationWarn
		}
		add(e.Name, action, res.Violated[e.Name])
	}
	add("", "filtered", res.Filtered)
	return out, nil
}

// count adds to counts (of batch.ExpectationsSchema, made when nil) the
// row of n records an expectation (or the where filter, or the schema
// contract) counted; nothing when n is 0.
func (r *runner) count(counts *batch.Batch, f *spec.Flow, expectation, action string, n int64) *batch.Batch {
	if n == 0 {
		return counts
	}
	if counts == nil {
		counts = batch.New(batch.ExpectationsSchema, len(f.Expectations)+2)
	}
	v := counts.Vectors
	v[0].AppendString(r.p.Pipeline)
	v[1].AppendString(f.Name)
	v[2].AppendString(f.Target)
	v[3].AppendString(expectation)
	v[4].AppendString(action)
	v[5].AppendInt(n)
	v[6].AppendInt(time.Now().UTC().UnixMicro())
	return counts
}

// rowDeadLetter is the dead-letter skeleton of a row with no message of
// its own: its file and row number, the row as JSON.
func rowDeadLetter(b *batch.Batch, file string, row func(i int) int64) func(i int) batch.DeadLetter {
	return func(i int) batch.DeadLetter {
		return batch.DeadLetter{Source: file, Position: fmt.Sprint(row(i) + 1), Payload: cdc.RowJSON(b, i)}
	}
}
