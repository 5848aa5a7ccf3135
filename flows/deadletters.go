package flows

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/consumer"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/spec"
	"github.com/sluicehq/sluice/sinks"
)

// Dead letters replayed (docs/operations.md, "Replaying dead letters"): a
// pending dead letter is one of _sluice_dead_letters that no row of
// _sluice_dead_letters_replayed marks. A replay decodes the payloads of a
// flow's pending dead letters with the spec as it is now, as the records of
// their original source positions, and loads them through the flow's own
// handler; each load also writes a mark per dead letter it took up (those
// that fail again are written anew, with their new reason, by the same
// load), so a dead letter is taken up by one committed load at most.
//
// A replay's loads keep a chain of their own (the ledger flow
// "<flow>/dead_letters", one counter slot): every load reads the marks as
// of that chain's head and continues it, so two replays, or a replay
// retried after a crash, never both commit a load built from the same
// marks. The flow's own slots (Kafka partitions, files) are never named.

// DeadLetterFilter selects dead letters; a zero field selects all.
type DeadLetterFilter struct {
	Flow   string
	Reason string
	Since  time.Time // written at or after
}

func (f DeadLetterFilter) match(d *PendingDeadLetter) bool {
	return (f.Flow == "" || d.Flow == f.Flow) && (f.Reason == "" || d.Reason == f.Reason) &&
		(f.Since.IsZero() || !d.At.Before(f.Since))
}

// PendingDeadLetter is a dead letter that no replay took up yet.
type PendingDeadLetter struct {
	batch.DeadLetter
	LoadID string // the load that wrote it
}

// markKey identifies a dead letter: its flow, source, position and load.
type markKey struct{ flow, source, position, loadID string }

func (d *PendingDeadLetter) key() markKey {
	return markKey{d.Flow, d.Source, d.Position, d.LoadID}
}

// PendingDeadLetters returns the pipeline's pending dead letters that
// filter selects, by time, then flow, source and position.
func PendingDeadLetters(ctx context.Context, p *spec.Pipeline, sink sinks.Sink, filter DeadLetterFilter) ([]PendingDeadLetter, error) {
	all, err := pendingDeadLetters(ctx, p, sink)
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for i := range all {
		if filter.match(&all[i]) {
			out = append(out, all[i])
		}
	}
	return out, nil
}

func pendingDeadLetters(ctx context.Context, p *spec.Pipeline, sink sinks.Sink) ([]PendingDeadLetter, error) {
	marked := map[markKey]bool{}
	mb, err := sink.Scan(ctx, batch.ReplayedTable)
	switch {
	case errors.Is(err, sinks.ErrUnknownTable):
		// A destination no replay ran against yet.
	case err != nil:
		return nil, fmt.Errorf("read %s: %w", batch.ReplayedTable, err)
	default:
		pipe, flow, src, pos, lid := strCol(mb, "pipeline"), strCol(mb, "flow"), strCol(mb, "source"), strCol(mb, "position"), strCol(mb, "dead_letter_load_id")
		for i := range mb.Len() {
			if pipe(i) == p.Pipeline {
				marked[markKey{flow(i), src(i), pos(i), lid(i)}] = true
			}
		}
	}
	b, err := sink.Scan(ctx, batch.DeadLettersTable)
	if errors.Is(err, sinks.ErrUnknownTable) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", batch.DeadLettersTable, err)
	}
	pipe, flow, target, src, pos := strCol(b, "pipeline"), strCol(b, "flow"), strCol(b, "target"), strCol(b, "source"), strCol(b, "position")
	reason, msg, lid := strCol(b, "reason"), strCol(b, "error"), strCol(b, batch.LoadIDColumn)
	payload, at := b.Column("payload"), b.Column("at")
	var out []PendingDeadLetter
	for i := range b.Len() {
		if pipe(i) != p.Pipeline {
			continue
		}
		d := PendingDeadLetter{LoadID: lid(i), DeadLetter: batch.DeadLetter{Pipeline: pipe(i), Flow: flow(i), Target: target(i),
			Source: src(i), Position: pos(i), Reason: reason(i), Error: msg(i), At: time.UnixMicro(at.Ints[i]).UTC()}}
		if !payload.IsNull(i) {
			d.Payload = payload.Bytes[i]
		}
		if !marked[d.key()] {
			out = append(out, d)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := &out[i], &out[j]
		if !a.At.Equal(b.At) {
			return a.At.Before(b.At)
		}
		if a.Flow != b.Flow {
			return a.Flow < b.Flow
		}
		if a.Source != b.Source {
			return a.Source < b.Source
		}
		return positionLess(a.Position, b.Position)
	})
	return out, nil
}

// strCol returns a reader of a string column of b ("" when b lacks it).
func strCol(b *batch.Batch, name string) func(int) string {
	v := b.Column(name)
	if v == nil {
		return func(int) string { return "" }
	}
	return func(i int) string {
		if v.IsNull(i) {
			return ""
		}
		return v.Strs[i]
	}
}

// positionLess orders "partition/offset" or row positions numerically.
func positionLess(a, b string) bool {
	ap, ao, aok := kafkaPosition(a)
	bp, bo, bok := kafkaPosition(b)
	if aok && bok {
		if ap != bp {
			return ap < bp
		}
		return ao < bo
	}
	ar, aerr := strconv.ParseInt(a, 10, 64)
	br, berr := strconv.ParseInt(b, 10, 64)
	if aerr == nil && berr == nil {
		return ar < br
	}
	return a < b
}

// kafkaPosition parses a dead letter's "partition/offset".
func kafkaPosition(s string) (partition int32, offset int64, ok bool) {
	ps, os, found := strings.Cut(s, "/")
	if !found {
		return 0, 0, false
	}
	p, err1 := strconv.ParseInt(ps, 10, 32)
	o, err2 := strconv.ParseInt(os, 10, 64)
	if err1 != nil || err2 != nil || p < 0 || o < 0 {
		return 0, 0, false
	}
	return int32(p), o, true
}

// ReplayReport sums up a replay.
type ReplayReport struct {
	// Replayed counts the dead letters applied as records of their flow.
	Replayed int `json:"replayed"`
	// Failing counts, by their new reason, the dead letters that failed
	// again: they stay pending, written anew with that reason.
	Failing map[string]int `json:"failing"`
	// Skipped counts, by why, the dead letters the replay did not try:
	// they stay pending as they were.
	Skipped map[string]int `json:"skipped"`
	// Flows has the counts per flow.
	Flows []FlowReplay `json:"flows"`
}

// FlowReplay is a flow's part of a replay.
type FlowReplay struct {
	Flow     string         `json:"flow"`
	Replayed int            `json:"replayed"`
	Failing  map[string]int `json:"failing"`
	Skipped  map[string]int `json:"skipped"`
	Loads    int            `json:"loads"`
}

// ErrTargetBusy is returned by a replay whose flow writes a CDC target that
// another process holds the lease of (a sluice run).
var ErrTargetBusy = errors.New("the table's lease is held by another process")

// ReplayDeadLetters applies the pending dead letters that filter selects
// again, with the spec as it is now (see the top of this file). A flow of
// a CDC target is replayed under the target's lease; when another process
// holds it past opts.LeaseTTL (a sluice run), that flow is refused with
// ErrTargetBusy and the others go on. Errors of several flows are all
// returned, with the report of what was done.
func ReplayDeadLetters(ctx context.Context, p *spec.Pipeline, sink sinks.Sink, opts Options, filter DeadLetterFilter) (*ReplayReport, error) {
	opts.Mode = ModeUpdate
	r := newRunner(p, sink, opts)
	rep := &ReplayReport{Failing: map[string]int{}, Skipped: map[string]int{}}
	if err := r.resolveFromData(ctx); err != nil {
		return rep, err
	}
	if err := r.resolveSnapshotSchemas(); err != nil {
		return rep, err
	}
	if _, err := r.ensure(ctx); err != nil {
		return rep, err
	}
	if err := r.loadVersions(ctx); err != nil {
		return rep, err
	}
	// Recovery of a process starting now must see this one alive, and not
	// take its loads in progress for abandoned.
	stopBeat, err := r.startHeartbeat(ctx)
	if err != nil {
		return rep, err
	}
	defer stopBeat()
	if err := r.retry(ctx, "recover", r.sink.Recover); err != nil {
		return rep, err
	}
	pending, err := PendingDeadLetters(ctx, p, sink, filter)
	if err != nil {
		return rep, err
	}
	byFlow := map[string][]PendingDeadLetter{}
	for _, d := range pending {
		byFlow[d.Flow] = append(byFlow[d.Flow], d)
	}
	targets, err := r.cdcTargets()
	if err != nil {
		return rep, err
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(byFlow)) {
		fr := FlowReplay{Flow: name, Failing: map[string]int{}, Skipped: map[string]int{}}
		err := r.replayFlow(ctx, name, byFlow[name], targets, filter, &fr)
		rep.Flows = append(rep.Flows, fr)
		rep.Replayed += fr.Replayed
		for k, n := range fr.Failing {
			rep.Failing[k] += n
		}
		for k, n := range fr.Skipped {
			rep.Skipped[k] += n
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("flow %s: %w", name, err))
		}
	}
	return rep, errors.Join(errs...)
}

// Why a replay leaves dead letters alone (ReplayReport.Skipped).
const (
	SkipNoFlow   = "flow_not_in_spec"
	SkipSource   = "source_not_replayable"
	SkipPosition = "bad_position"
)

// replayLedgerFlow is the ledger flow of a flow's replay loads.
func replayLedgerFlow(flow string) string { return flow + "/dead_letters" }

// replaySlot is the one slot of a replay chain: its row counts the loads.
func replaySlot(n int64) batch.Position {
	return batch.Position{File: batch.DeadLettersTable, RowGroup: n}
}

// replayFlow replays the pending dead letters of one flow, a batch of at
// most batch.rows of them per load.
func (r *runner) replayFlow(ctx context.Context, name string, dls []PendingDeadLetter, targets map[string]*cdcTarget, filter DeadLetterFilter, fr *FlowReplay) error {
	f := r.p.Flow(name)
	if f == nil {
		fr.Skipped[SkipNoFlow] += len(dls)
		return nil
	}
	if f.Source.Kafka == nil || (f.Kind != spec.KindAppend && f.Kind != spec.KindAutoCDC) {
		// A file row's payload is its JSON rendering, not what the file
		// holds, and a snapshot row means nothing outside its snapshot:
		// these are recovered by a refresh of the flow.
		fr.Skipped[SkipSource] += len(dls)
		return nil
	}
	var h batchHandler
	if t := targets[f.Target]; t != nil {
		leaser, ok := r.sink.(sinks.Leaser)
		if !ok {
			return errors.New("the destination cannot lease CDC targets")
		}
		k, err := r.tryLease(ctx, leaser, t.name)
		if err != nil {
			return err
		}
		defer k.release(ctx)
		ch, err := r.newCDCHandler(f, t)
		if err != nil {
			return err
		}
		h = ch
		lost, err := k.underLease(ctx, func(ctx context.Context) error { return r.replayBatches(ctx, f, h, dls, filter, fr) })
		if lost {
			t.cache.Reset()
			return fmt.Errorf("table %s: another process took its lease over during the replay; run the replay again", t.name)
		}
		return err
	}
	ah, err := r.newAppendHandler(f)
	if err != nil {
		return err
	}
	return r.replayBatches(ctx, f, ah, dls, filter, fr)
}

// tryLease takes the lease of a CDC target, waiting at most a little
// longer than a lease lives (a holder that died is waited out); a live
// holder is refused with ErrTargetBusy.
func (r *runner) tryLease(ctx context.Context, leaser sinks.Leaser, table string) (*leaseKeeper, error) {
	wctx, cancel := context.WithTimeout(ctx, 2*r.leaseTTL()+time.Second)
	defer cancel()
	k, err := r.holdLease(wctx, leaser, table, "waiting for another process to release the table")
	if err == nil {
		return k, nil
	}
	if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("table %s: %w (a sluice run of the pipeline writes it): stop the run, replay, then start it again; its append flows' dead letters replay while it runs", table, ErrTargetBusy)
	}
	return nil, err
}

// replayBatches loads the dead letters in batches. Each batch starts at the
// replay chain's head with the marks as of it; a commit refused because
// the chain moved (another replay, or an attempt of this one whose outcome
// was unknown) reads the marks again and goes on with what is still
// pending.
func (r *runner) replayBatches(ctx context.Context, f *spec.Flow, h batchHandler, dls []PendingDeadLetter, filter DeadLetterFilter, fr *FlowReplay) error {
	ledgerFlow := replayLedgerFlow(f.Name)
	size := max(f.Batch.Rows, 1)
	for attempt := 0; len(dls) > 0; {
		heads, err := r.heads(ctx, ledgerFlow, nil)
		if err != nil {
			return err
		}
		head := heads[sinks.Slot(replaySlot(0))].RowGroup
		chunk := dls[:min(len(dls), size)]
		outcome, err := r.replayBatch(ctx, f, h, chunk, head)
		if errors.Is(err, sinks.ErrStale) && attempt < 10 {
			// Read again what is pending: everything committed up to
			// the head read next is then published and visible.
			attempt++
			if err := r.retry(ctx, "recover", r.sink.Recover); err != nil {
				return err
			}
			all, err := pendingDeadLetters(ctx, r.p, r.sink)
			if err != nil {
				return err
			}
			left := map[markKey]bool{}
			for i := range dls {
				left[dls[i].key()] = true
			}
			dls = dls[:0]
			for i := range all {
				if all[i].Flow == f.Name && filter.match(&all[i]) && left[all[i].key()] {
					dls = append(dls, all[i])
				}
			}
			continue
		}
		if err != nil {
			return err
		}
		attempt = 0
		fr.Loads++
		fr.Replayed += outcome.replayed
		for k, n := range outcome.failing {
			fr.Failing[k] += n
		}
		for k, n := range outcome.skipped {
			fr.Skipped[k] += n
		}
		dls = dls[len(chunk):]
	}
	return nil
}

type batchOutcome struct {
	replayed int
	failing  map[string]int
	skipped  map[string]int
}

// replayBatch loads one batch of dead letters, continuing the replay chain
// at head.
func (r *runner) replayBatch(ctx context.Context, f *spec.Flow, h batchHandler, dls []PendingDeadLetter, head int64) (batchOutcome, error) {
	out := batchOutcome{failing: map[string]int{}, skipped: map[string]int{}}
	rb := &consumer.RecordBatch{Topic: f.Source.Kafka.Topic}
	var taken []*PendingDeadLetter
	for i := range dls {
		d := &dls[i]
		part, off, ok := kafkaPosition(d.Position)
		if !ok || d.Source == "" {
			out.skipped[SkipPosition]++
			continue
		}
		// The dead letter keeps neither the message's key nor its
		// timestamp: the time it was dead-lettered stands in for the
		// latter (docs/operations.md, "Replaying dead letters").
		rb.Records = append(rb.Records, batch.Record{Topic: d.Source, Partition: part, Offset: off, Timestamp: d.At, Value: d.Payload})
		rb.Bytes += len(d.Payload)
		taken = append(taken, d)
	}
	if len(taken) == 0 {
		return out, nil
	}
	p, err := h.prepare(ctx, rb)
	if err != nil {
		return out, err
	}
	// The load writes, beside what the flow's handler writes, a mark per
	// dead letter taken up: failed when the handler wrote it anew.
	q := &prepared{turn: p.turn, again: p.again, done: p.done}
	q.write = func(ctx context.Context, ld sinks.Load) error {
		rec := &deadLetterRecorder{Load: ld, failed: map[[2]string]string{}}
		var w sinks.Load = rec
		if cl, ok := ld.(sinks.CDCLoad); ok {
			w = cdcRecorder{deadLetterRecorder: rec, cdc: cl}
		}
		if err := p.write(ctx, w); err != nil {
			return err
		}
		q.rows, q.deadLetters = p.rows, p.deadLetters
		now := time.Now().UTC().UnixMicro()
		marks := batch.New(batch.ReplayedSchema, len(taken))
		out.replayed, out.failing = 0, map[string]int{}
		for _, d := range taken {
			outcome := batch.OutcomeReplayed
			if reason, ok := rec.failed[[2]string{d.Source, d.Position}]; ok {
				outcome = batch.OutcomeFailed
				out.failing[reason]++
			} else {
				out.replayed++
			}
			for i, s := range []string{r.p.Pipeline, f.Name, f.Target, d.Source, d.Position, d.LoadID, outcome} {
				marks.Vectors[i].AppendString(s)
			}
			marks.Vectors[7].AppendInt(now)
		}
		return ld.Write(ctx, batch.ReplayedTable, marks)
	}
	c := sinks.Commit{From: batch.Positions{replaySlot(head)}, To: batch.Positions{replaySlot(head + 1)}}
	return out, r.commitAs(ctx, f, replayLedgerFlow(f.Name), 0, q, c, false)
}

// deadLetterRecorder passes a load's writes on and notes the dead letters
// written, by source and position, with their reason.
type deadLetterRecorder struct {
	sinks.Load
	failed map[[2]string]string
}

func (d *deadLetterRecorder) Write(ctx context.Context, table string, b *batch.Batch) error {
	if table == batch.DeadLettersTable {
		src, pos, reason := strCol(b, "source"), strCol(b, "position"), strCol(b, "reason")
		for i := range b.Len() {
			d.failed[[2]string{src(i), pos(i)}] = reason(i)
		}
	}
	return d.Load.Write(ctx, table, b)
}

// cdcRecorder is a deadLetterRecorder of a CDC target's load.
type cdcRecorder struct {
	*deadLetterRecorder
	cdc sinks.CDCLoad
}

func (c cdcRecorder) Upsert(ctx context.Context, table string, rows *batch.Batch, keys, seqs []string) error {
	return c.cdc.Upsert(ctx, table, rows, keys, seqs)
}

func (c cdcRecorder) Remove(ctx context.Context, table string, rows *batch.Batch, keys, seqs []string) error {
	return c.cdc.Remove(ctx, table, rows, keys, seqs)
}

func (c cdcRecorder) TruncateBelow(ctx context.Context, table string, seq string) error {
	return c.cdc.TruncateBelow(ctx, table, seq)
}

func (c cdcRecorder) PutState(ctx context.Context, table string, entries []sinks.StateEntry) error {
	return c.cdc.PutState(ctx, table, entries)
}
