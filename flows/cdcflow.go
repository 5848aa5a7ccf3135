package flows

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/backfill"
	"github.com/sluicehq/sluice/cdc"
	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/consumer"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/decode"
	"github.com/sluicehq/sluice/flows/spec"
	"github.com/sluicehq/sluice/sinks"
)

// DefaultStateCacheBytes bounds each CDC target's in-memory cache of key
// states read back from the destination, unless its table's state_cache
// sets it.
const DefaultStateCacheBytes = 256 << 20

// cdcTarget is a CDC target shared by the flows that write it: their batches
// apply one at a time, over one cache of committed key states, and load in
// the order they applied (see cdcorder.go).
type cdcTarget struct {
	name  string
	table *spec.Table
	cache *cdc.Cache

	mu    sync.Mutex    // held while a batch applies, or by exclusive work
	epoch atomic.Uint64 // moves on when a load did not commit
	// Guarded by mu: the outputs whose loads have not ended, in the order
	// of their turns, and the epoch they belong to; the channel the last
	// turn closes when it ended.
	pending      []*pendingOutput
	pendingEpoch uint64
	tail         chan struct{}
	// ahead holds a token per batch applied whose load has not ended: one
	// loads while the next is applied, and no more wait in memory.
	ahead chan struct{}
	// expiry is the handler whose flow decides what the target's key
	// states forget (expire.go); nil when no auto_cdc flow writes it.
	expiry *cdcHandler
}

// maxBatchesAhead bounds a CDC target's batches applied and not loaded
// yet, the one loading included.
const maxBatchesAhead = 2

// stateStore reads a target's committed CDC state from the sink.
type stateStore struct {
	sr    sinks.StateReader
	table string
}

func (s stateStore) Get(ctx context.Context, keys []string) ([]*cdc.KeyState, error) {
	raw, err := s.sr.GetState(ctx, s.table, keys)
	if err != nil {
		return nil, err
	}
	out := make([]*cdc.KeyState, len(keys))
	for i, k := range keys {
		v := raw[k]
		if k == "" || v == nil {
			continue
		}
		st := new(cdc.KeyState)
		if err := st.UnmarshalBinary(v); err != nil {
			return nil, fmt.Errorf("state of %s: %w", s.table, err)
		}
		out[i] = st
	}
	return out, nil
}

// NoKeyStates implements cdc.KeyStateProber; a destination that cannot
// tell says no.
func (s stateStore) NoKeyStates(ctx context.Context) (bool, error) {
	p, ok := s.sr.(sinks.KeyStateProber)
	if !ok {
		return false, nil
	}
	has, err := p.HasKeyStates(ctx, s.table)
	return err == nil && !has, err
}

func (s stateStore) Table(ctx context.Context) (cdc.TableState, error) {
	var ts cdc.TableState
	raw, err := s.sr.GetState(ctx, s.table, []string{""})
	if err != nil {
		return ts, err
	}
	if v := raw[""]; v != nil {
		if err := ts.UnmarshalBinary(v); err != nil {
			return ts, fmt.Errorf("table state of %s: %w", s.table, err)
		}
	}
	return ts, nil
}

// cdcTargets prepares the CDC targets of the pipeline, each with its cache
// of key states; runTarget takes their leases.
func (r *runner) cdcTargets() (map[string]*cdcTarget, error) {
	targets := map[string]*cdcTarget{}
	for i := range r.p.Tables {
		t := &r.p.Tables[i]
		if !t.CDC {
			continue
		}
		sr, ok := r.sink.(sinks.StateReader)
		if !ok {
			return nil, fmt.Errorf("table %s: the destination does not support CDC targets", t.Name)
		}
		cacheBytes := t.StateCache
		if cacheBytes <= 0 {
			cacheBytes = DefaultStateCacheBytes
		}
		targets[t.Name] = &cdcTarget{name: t.Name, table: t, cache: cdc.NewCache(stateStore{sr: sr, table: t.Name}, cacheBytes),
			ahead: make(chan struct{}, maxBatchesAhead)}
	}
	return targets, nil
}

// cdcHandler applies each batch of an auto_cdc flow through the engine.
type cdcHandler struct {
	r      *runner
	flow   *spec.Flow
	target *cdcTarget
	cfg    cdc.Config
	engine *cdc.Engine
	rules  *flowRules // nil when the flow has none
	pool   sync.Pool  // of *decode.JSON or *decode.Debezium: decoders are not safe for concurrent use
	// debezium: the source is Debezium envelopes; ops from the envelope
	// decide unless the flow sets apply_as_deletes or apply_as_truncates.
	debezium bool
	// infers: the target is typed by the flow's messages; its columns grow
	// as they bring new fields, and engine follows them (current).
	infers bool
	// tombstones is what a Kafka message with a null value becomes.
	tombstones decode.Tombstones
	// wire rewrites messages of a schema registry's wire format as JSON
	// first; nil when they are JSON.
	wire *wireStep

	gmu  sync.Mutex
	open *joinedLoad // the load batches ready now join (cdcjoin.go); nil when none forms
}

func (r *runner) newCDCHandler(f *spec.Flow, t *cdcTarget) (*cdcHandler, error) {
	cfg := cdc.Config{
		Pipeline:                          r.p.Pipeline,
		Flow:                              f.Name,
		Target:                            f.Target,
		Source:                            f.RecordSchema(),
		Table:                             t.table.Schema,
		Kafka:                             f.Source.Kafka != nil,
		Keys:                              f.Keys,
		SequenceBy:                        f.SequenceBy,
		ApplyAsDeletes:                    f.ApplyAsDeletes,
		ApplyAsTruncates:                  f.ApplyAsTruncates,
		ColumnList:                        f.ColumnList,
		ExceptColumnList:                  f.ExceptColumnList,
		SCDType:                           f.StoredAsSCDType,
		TrackHistoryColumnList:            f.TrackHistoryColumnList,
		TrackHistoryExceptColumnList:      f.TrackHistoryExceptColumnList,
		IgnoreNullUpdates:                 f.IgnoreNullUpdates,
		IgnoreNullUpdatesColumnList:       f.IgnoreNullUpdatesColumnList,
		IgnoreNullUpdatesExceptColumnList: f.IgnoreNullUpdatesExceptColumnList,
		TombstoneRetention:                f.TombstoneRetention,
		ReplayFlows:                       r.replayFlows(f),
		FailOnError:                       f.OnError == spec.OnErrorFail,
		Logger:                            r.log.With("flow", f.Name),
	}
	tombstones := decode.TombstoneSkip
	if k := f.Source.Kafka; k != nil {
		tombstones = map[string]decode.Tombstones{spec.TombstonesDelete: decode.TombstoneDelete,
			spec.TombstonesSkip: decode.TombstoneSkip, spec.TombstonesDeadLetter: decode.TombstoneDeadLetter}[k.TombstoneMode(f)]
	}
	ws, err := r.newWireStep(f)
	if err != nil {
		return nil, err
	}
	if f.TypedByMessages(r.p) {
		cfg.Lenient = true
		h := &cdcHandler{r: r, flow: f, target: t, cfg: cfg, rules: newFlowRules(f, true), infers: true, tombstones: tombstones, wire: ws}
		if _, err := h.current(); err != nil {
			return nil, err
		}
		return h, nil
	}
	cfg = trackIDs(cfg)
	eng, err := cdc.New(cfg, pendingStore{t})
	if err != nil {
		return nil, err
	}
	h := &cdcHandler{r: r, flow: f, target: t, cfg: cfg, engine: eng, rules: newFlowRules(f, false), tombstones: tombstones, wire: ws}
	if f.Source.Kafka == nil {
		return h, nil // a file source: the backfill readers decode
	}
	if f.Source.Kafka.Format == spec.FormatDebezium {
		proto, err := decode.NewDebezium(f.SourceSchema(), f.Keys, f.StoredAsSCDType == 2, f.SourceUnits(r.p))
		if err != nil {
			return nil, err
		}
		proto.SetUnavailable(f.Source.Kafka.Placeholder())
		proto.SetTombstones(tombstones)
		h.debezium = true
		h.pool.New = func() any { return proto.Clone() }
		return h, nil
	}
	proto, err := decode.NewJSON(f.SourceSchema(), f.SourceUnits(r.p))
	if err != nil {
		return nil, err
	}
	if err := proto.SetPaths(f.SourcePaths(r.p)); err != nil {
		return nil, err
	}
	h.pool.New = func() any { return proto.Clone() }
	return h, nil
}

func (h *cdcHandler) prepare(ctx context.Context, rb *consumer.RecordBatch) (*prepared, error) {
	in, dls, err := h.decode(ctx, rb)
	if err != nil {
		return nil, err
	}
	in, dls, counts, err := h.applyRules(in, dls)
	if err != nil {
		return nil, err
	}
	return h.apply(ctx, in, dls, counts)
}

// applyRules runs the flow's rules (rules.go) over the decoded records:
// the engine gets the rows they keep, with their positions.
// cdcRecords is a decoded batch of a CDC flow: the engine's input, and for
// a target typed by its messages the rows of the child tables of its
// records, by the part of their names after <table>__.
type cdcRecords struct {
	cdc.Input
	kids map[string]*batch.Batch
}

func (h *cdcHandler) applyRules(in cdcRecords, dls []batch.DeadLetter) (cdcRecords, []batch.DeadLetter, *batch.Batch, error) {
	if h.rules == nil {
		return in, dls, nil, nil
	}
	// Deletes and truncates pass the rules: they carry little more than
	// their key, and filtering one would keep a deleted row.
	var pass []bool
	if ops, err := cdc.ClassifyOps(h.flow.ApplyAsDeletes, h.flow.ApplyAsTruncates, in.Batch.Schema, h.flow.Source.Kafka != nil, in.Input); err == nil {
		pass = make([]bool, len(ops))
		for i, op := range ops {
			pass[i] = op != cdc.OpUpsert
		}
	} else if in.Tombstones != nil {
		// An expression over a computed column: the engine decides the
		// other rows after the rules, but a tombstone is known now.
		pass = slices.Clone(in.Tombstones)
	}

	res, err := h.rules.apply(h.r, in.Batch, pass, func(i int) batch.DeadLetter {
		p := in.Positions[i]
		d := batch.DeadLetter{Source: p.Topic, Position: fmt.Sprintf("%d/%d", p.Partition, p.Offset)}
		if p.Topic == "" {
			d.Source, d.Position = p.File, fmt.Sprint(p.Offset+1)
		}
		if in.Payloads != nil {
			d.Payload = in.Payloads[i]
		} else {
			d.Payload = cdc.RowJSON(in.Batch, i)
		}
		return d
	})
	if err != nil {
		return cdcRecords{}, nil, nil, err
	}
	out := cdcRecords{Input: cdc.Input{Batch: res.batch, Positions: pick(in.Positions, res.rows), Meta: pick(in.Meta, res.rows),
		Payloads: pick(in.Payloads, res.rows), Ops: pick(in.Ops, res.rows), Absent: pickAbsent(in.Absent, res.rows),
		Tombstones: pick(in.Tombstones, res.rows)}, kids: in.kids}
	if len(in.kids) > 0 && res.batch.Len() < in.Batch.Len() {
		out.kids = keepChildren(res.batch, in.kids)
	}
	return out, append(dls, res.dls...), res.counts, nil
}

// applied returns the _sluice_id column of the rows of in the engine did
// not make dead letters, as the one column of a batch (keepChildren).
func applied(in cdc.Input, dls []batch.DeadLetter) *batch.Batch {
	dead := map[string]bool{}
	for _, d := range dls {
		dead[d.Source+" "+d.Position] = true
	}
	ids := in.Batch.Column(batch.IDColumn)
	out := batch.New(batch.Schema{Columns: []batch.Column{{Name: batch.IDColumn, Type: batch.String, Nullable: true}}}, in.Batch.Len())
	for i, p := range in.Positions {
		if src, pos := p.DeadLetterAt(); ids == nil || ids.IsNull(i) || dead[src+" "+pos] {
			continue
		}
		out.Vectors[0].AppendString(ids.Strs[i])
	}
	return out
}

// absentOf returns the cells as Input.Absent of b; nil for none.
func absentOf(cells []decode.Cell, b *batch.Batch) [][]bool {
	if len(cells) == 0 {
		return nil
	}
	out := make([][]bool, len(b.Vectors))
	for _, c := range cells {
		if out[c.Column] == nil {
			out[c.Column] = make([]bool, b.Len())
		}
		out[c.Column][c.Row] = true
	}
	return out
}

// pickAbsent is pick of each column of an Input.Absent.
func pickAbsent(absent [][]bool, rows []int) [][]bool {
	if absent == nil {
		return nil
	}
	out := make([][]bool, len(absent))
	for c, col := range absent {
		out[c] = pick(col, rows)
	}
	return out
}

// pick returns the elements of s at rows, in order; nil for a nil s.
func pick[T any](s []T, rows []int) []T {
	if s == nil {
		return nil
	}
	out := make([]T, len(rows))
	for j, i := range rows {
		out[j] = s[i]
	}
	return out
}

// prepareChunk applies a chunk of a file source: each row's position is
// the file and its row number.
func (h *cdcHandler) prepareChunk(ctx context.Context, ch *backfill.Chunk) (*prepared, error) {
	n := ch.Batch.Len()
	in := cdc.Input{Batch: ch.Batch, Positions: make([]cdc.Position, n)}
	for i := range n {
		in.Positions[i] = cdc.Position{Flow: h.flow.Name, File: ch.File, Offset: ch.Row(i)}
	}
	recs, dls, counts, err := h.applyRules(cdcRecords{Input: in, kids: ch.Children}, ch.DeadLetters)
	if err != nil {
		return nil, err
	}
	return h.apply(ctx, recs, dls, counts)
}

// apply runs the engine over a decoded batch and gives it the target's
// next turn to load.
func (h *cdcHandler) apply(ctx context.Context, in cdcRecords, dls []batch.DeadLetter, counts *batch.Batch) (*prepared, error) {
	if err := h.r.onErrorFail(h.flow, dls); err != nil {
		return nil, err
	}
	if err := h.target.takeAhead(ctx); err != nil {
		return nil, err
	}
	return h.applyAhead(ctx, in, dls, counts)
}

// takeAhead waits until fewer than maxBatchesAhead batches of the target
// are applied and not loaded, and takes a place among them.
func (t *cdcTarget) takeAhead(ctx context.Context) error {
	select {
	case t.ahead <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// applyAhead is apply once the batch took its place ahead (takeAhead);
// the prepared load gives it back when it ended, an error at once.
func (h *cdcHandler) applyAhead(ctx context.Context, in cdcRecords, dls []batch.DeadLetter, counts *batch.Batch) (*prepared, error) {
	t := h.target
	t.mu.Lock()
	epoch := t.begin()
	in.Now = time.Now()
	eng, in, err := h.engineFor(in)
	var out *cdc.Output
	if err == nil {
		out, err = applyWith(ctx, eng, in.Input)
	}
	if err != nil {
		t.mu.Unlock()
		<-t.ahead
		return nil, err
	}
	if out.Refresh {
		// The truncate's rewrite reads the target: it waits for the
		// loads before it, and applies the batch again then.
		out = nil
	}
	cb := &cdcBatch{h: h, in: in, dls: dls, counts: counts, tk: t.enqueue(epoch, out)}
	t.mu.Unlock()
	p := &prepared{
		turn: cb.turn,
		done: func(committed bool) {
			cb.tk.end(cb.out, committed)
			<-t.ahead
			if committed {
				h.reportCutOvers(ctx, cb.cutOvers)
			}
		},
	}
	cb.p = p
	if out != nil {
		cb.fill(out)
	}
	return p, nil
}

// cdcBatch is a batch applied by a CDC flow, until its load ended.
type cdcBatch struct {
	h        *cdcHandler
	in       cdcRecords
	dls      []batch.DeadLetter // the decoder's and the rules'
	counts   *batch.Batch       // the rules' counts (_sluice_expectations); nil when none
	tk       *ticket
	p        *prepared
	out      *cdc.Output
	cutOvers []checkpoint.CutOverEntry
}

// fill makes the prepared load write out.
func (cb *cdcBatch) fill(out *cdc.Output) {
	h := cb.h
	dls := append(slices.Clip(cb.dls), out.DeadLetters...)
	h.r.stampDeadLetters(h.flow, dls)
	cb.out = out
	cb.cutOvers = h.cutOvers(cb.in.Input, out)
	cb.p.rows, cb.p.deadLetters = int64(out.Upserts.Len()), int64(len(dls))
	kids := cb.in.kids
	if len(kids) > 0 && len(out.DeadLetters) > 0 {
		kids = keepChildren(applied(cb.in.Input, out.DeadLetters), kids)
	}
	cb.p.write = func(ctx context.Context, ld sinks.Load) error {
		// A record's child rows are in the load of its change; they name
		// the change by its _sluice_id (docs/schema.md#child-tables).
		for _, suffix := range slices.Sorted(maps.Keys(kids)) {
			if err := h.r.writeRows(ctx, ld, h.flow.Target+"__"+suffix, kids[suffix]); err != nil {
				return err
			}
		}
		if err := writeOutput(ctx, ld, h.flow.Target, out); err != nil {
			return err
		}
		if cb.counts != nil {
			if err := ld.Write(ctx, batch.ExpectationsTable, cb.counts); err != nil {
				return err
			}
		}
		return writeDeadLetters(ctx, ld, dls)
	}
}

// turn waits for the batch's turn to load, applying it again if what it
// was applied over changed meanwhile.
func (cb *cdcBatch) turn(ctx context.Context) error {
	stale, err := cb.tk.wait(ctx)
	if err != nil || !stale {
		return err
	}
	h, t := cb.h, cb.h.target
	t.mu.Lock()
	defer t.mu.Unlock()
	h.r.log.Debug("batch applied again: a load before it did not commit, or it rewrites the target", "flow", h.flow.Name, "rows", cb.in.Batch.Len())
	epoch := t.restart()
	cb.in.Now = time.Now()
	eng, in, err := h.engineFor(cb.in)
	if err != nil {
		return err
	}
	cb.in = in
	out, err := applyWith(ctx, eng, cb.in.Input)
	if err == nil && out.Refresh {
		out, err = h.refresh(ctx, out, cb.in.Now)
	}
	if err != nil {
		return err
	}
	cb.tk.epoch = epoch
	cb.tk.pend(out)
	cb.fill(out)
	return nil
}

// current returns the engine of the flow's columns now. For a target typed
// by its messages it is built again once the target gained columns, and it
// is nil while a key or sequence column is missing (no message has had the
// field yet). The caller holds the target's mu, or is alone.
func (h *cdcHandler) current() (*cdc.Engine, error) {
	if !h.infers {
		return h.engine, nil
	}
	src, table := h.r.recordSchema(h.flow), h.r.tableSchema(h.flow.Target)
	if h.engine != nil && h.cfg.Source.Equal(src) && h.cfg.Table.Equal(table) {
		return h.engine, nil
	}
	if missing := h.missingIdentity(src); len(missing) > 0 {
		return nil, nil
	}
	cfg := h.cfg
	cfg.Source, cfg.Table = src, table
	eng, err := cdc.New(trackIDs(cfg), pendingStore{h.target})
	if err != nil {
		return nil, err
	}
	h.cfg, h.engine = cfg, eng
	return eng, nil
}

// trackIDs has an SCD2 target with child tables track _sluice_id: a
// version's child rows are those of the change that started it, so a
// change with other ones starts a version (docs/schema.md#child-tables).
func trackIDs(cfg cdc.Config) cdc.Config {
	if len(cfg.TrackHistoryColumnList) > 0 && cfg.Table.Index(batch.IDColumn) >= 0 && !slices.Contains(cfg.TrackHistoryColumnList, batch.IDColumn) {
		cfg.TrackHistoryColumnList = append(slices.Clone(cfg.TrackHistoryColumnList), batch.IDColumn)
	}
	return cfg
}

// missingIdentity returns the key and sequence columns s lacks; a
// computed one is never missing (the rules add it after decoding).
func (h *cdcHandler) missingIdentity(s batch.Schema) []string {
	var out []string
	for _, n := range append(slices.Clone(h.flow.Keys), h.flow.SequenceBy...) {
		computed := slices.ContainsFunc(h.flow.ComputedColumns, func(c spec.ComputedColumn) bool { return c.Name == n })
		if s.Index(n) < 0 && !computed {
			out = append(out, n)
		}
	}
	return out
}

// engineFor returns the engine to apply in with, and in over its source
// columns: in a target typed by its messages, a batch decoded before the
// target gained columns has none of them (NULL). Without an engine yet (current), in has no rows: the flow's
// decode made them dead letters. The caller holds the target's mu.
func (h *cdcHandler) engineFor(in cdcRecords) (*cdc.Engine, cdcRecords, error) {
	eng, err := h.current()
	if err != nil || eng == nil {
		return nil, in, err
	}
	if h.infers {
		in.Batch = Project(in.Batch, h.cfg.Source)
	}
	return eng, in, nil
}

// apply runs eng over in; without an engine, in is empty (engineFor).
func applyWith(ctx context.Context, eng *cdc.Engine, in cdc.Input) (*cdc.Output, error) {
	if eng == nil {
		return &cdc.Output{}, nil
	}
	return eng.Apply(ctx, in)
}

// decode turns a batch of records into the engine's input; records that do
// not decode become dead letters.
func (h *cdcHandler) decode(ctx context.Context, rb *consumer.RecordBatch) (cdcRecords, []batch.DeadLetter, error) {
	var early []batch.DeadLetter
	if h.wire != nil {
		recs, dls, err := h.wire.records(ctx, rb.Records)
		if err != nil {
			return cdcRecords{}, nil, err
		}
		decoded := *rb
		decoded.Records, rb, early = recs, &decoded, dls
	}
	if h.infers {
		in, dls, err := h.decodeInferring(ctx, rb)
		return in, append(early, dls...), err
	}
	in, dls := h.decodeDeclared(rb)
	return cdcRecords{Input: in}, append(early, dls...), nil
}

// decodeInferring decodes the records of a flow whose messages type its
// target: fields that are no columns yet add them (runner.evolve) and the
// batch is decoded again. While the messages have not brought a key or
// sequence column, their records are dead letters.
func (h *cdcHandler) decodeInferring(ctx context.Context, rb *consumer.RecordBatch) (cdcRecords, []batch.DeadLetter, error) {
	for try := 0; ; try++ {
		dec, err := h.r.inferringDecoder(&h.pool, h.flow, nil)
		if err != nil {
			return cdcRecords{}, nil, err
		}
		if h.wire != nil {
			dec.SetTypes(h.wire.hints())
		}
		in, dls := h.decodeWith(dec, rb)
		found, kids, foundKids := dec.Found(), dec.ChildRows(), dec.FoundChildren()
		renamed := dec.Renamed()
		h.pool.Put(dec)
		h.r.noteNames(h.flow, renamed)
		// A target is created with its keys: until the messages bring
		// them (and the sequence), their records are dead letters.
		next, _ := addColumns(batch.Schema{Columns: slices.Clone(in.Batch.Schema.Columns)}, found)
		if missing := h.missingIdentity(next); len(missing) > 0 {
			dls = h.withoutIdentity(in, dls, missing)
			return cdcRecords{Input: cdc.Input{Batch: batch.New(in.Batch.Schema, 0)}}, dls, nil
		}
		if len(found) == 0 && len(foundKids) == 0 {
			return cdcRecords{Input: in, kids: kids}, dls, nil
		}
		if try == 2 {
			return cdcRecords{}, nil, fmt.Errorf("flow %s: the columns of table %s did not take the batch's fields %v",
				h.flow.Name, h.flow.Target, batch.Schema{Columns: found}.Names())
		}
		if err := h.r.evolve(ctx, h.flow, found, foundKids); err != nil {
			return cdcRecords{}, nil, err
		}
		if err := h.r.checkTargetContract(ctx, h.flow.Target); err != nil {
			return cdcRecords{}, nil, err
		}
	}
}

// withoutIdentity makes the rows of in dead letters: the messages have not
// brought the key or sequence columns missing yet.
func (h *cdcHandler) withoutIdentity(in cdc.Input, dls []batch.DeadLetter, missing []string) []batch.DeadLetter {
	for i, p := range in.Positions {
		if in.Tombstones != nil && in.Tombstones[i] {
			continue // the target has no row yet: it deletes nothing
		}
		src, pos := p.DeadLetterAt()
		dls = append(dls, batch.DeadLetter{Source: src, Position: pos, Reason: batch.ReasonMissingField,
			Error: fmt.Sprintf("field %q: missing, and it is a key or the sequence of flow %s (no message has had it yet)", missing[0], h.flow.Name), Payload: in.Payloads[i]})
	}
	return dls
}

// decodeDeclared decodes the records of a flow of declared columns.
func (h *cdcHandler) decodeDeclared(rb *consumer.RecordBatch) (cdc.Input, []batch.DeadLetter) {
	n := len(rb.Records)
	in := cdc.Input{Positions: make([]cdc.Position, 0, n), Meta: make([]cdc.RecordMeta, 0, n), Payloads: make([][]byte, 0, n)}
	var dls []batch.DeadLetter
	if h.debezium {
		dec := h.pool.Get().(*decode.Debezium)
		defer h.pool.Put(dec)
		in.Batch = batch.New(dec.Schema(), n)
		var from []int
		in.Ops, from, dls = dec.DecodeAll(rb.Records, in.Batch, make([]cdc.Op, 0, n), make([]int, 0, n), nil)
		for i, op := range in.Ops {
			if op == cdc.OpTombstone {
				if in.Tombstones == nil {
					in.Tombstones = make([]bool, len(in.Ops))
				}
				in.Tombstones[i] = true
			}
		}
		if h.flow.ApplyAsDeletes != "" || h.flow.ApplyAsTruncates != "" {
			in.Ops = nil // the flow's expressions decide, but for tombstones
		}
		for _, i := range from {
			h.addRecord(&in, &rb.Records[i])
		}
		in.Absent = absentOf(dec.Unavailable(), in.Batch)
		return in, dls
	}
	dec := h.pool.Get().(*decode.JSON)
	defer h.pool.Put(dec)
	return h.decodeWith(dec, rb)
}

// decodeWith decodes the records with a JSON decoder.
func (h *cdcHandler) decodeWith(dec *decode.JSON, rb *consumer.RecordBatch) (cdc.Input, []batch.DeadLetter) {
	n := len(rb.Records)
	in := cdc.Input{Positions: make([]cdc.Position, 0, n), Meta: make([]cdc.RecordMeta, 0, n), Payloads: make([][]byte, 0, n)}
	var dls []batch.DeadLetter
	in.Batch = batch.New(dec.Schema(), n)
	// Until the messages bring the keys, the target has no row to delete.
	skip := h.tombstones == decode.TombstoneSkip || !hasColumns(dec.Schema(), h.flow.Keys)
	for i := range rb.Records {
		rec := &rb.Records[i]
		if rec.Value == nil && h.tombstones != decode.TombstoneDeadLetter {
			if skip {
				continue
			}
			if err := dec.DecodeTombstone(rec, in.Batch, h.flow.Keys, h.flow.Source.Kafka.KeyFormatOrDefault()); err != nil {
				dls = append(dls, batch.DeadLetter{Source: rec.Topic, Position: rec.Position(), Reason: err.Reason, Error: err.Error()})
				continue
			}
			if in.Tombstones == nil {
				in.Tombstones = make([]bool, in.Batch.Len()-1, n)
			}
			in.Tombstones = append(in.Tombstones, true)
			h.addRecord(&in, rec)
			continue
		}
		if err := dec.Decode(rec, in.Batch); err != nil {
			d := batch.DeadLetter{Source: rec.Topic, Position: rec.Position(), Reason: batch.ReasonUndecodable, Error: err.Error(), Payload: rec.Payload()}
			var de *decode.Error
			if errors.As(err, &de) {
				d.Reason = de.Reason
			}
			dls = append(dls, d)
			continue
		}
		if in.Tombstones != nil {
			in.Tombstones = append(in.Tombstones, false)
		}
		h.addRecord(&in, rec)
	}
	return in, dls
}

// hasColumns reports whether every name is a column of s.
func hasColumns(s batch.Schema, names []string) bool {
	for _, n := range names {
		if s.Index(n) < 0 {
			return false
		}
	}
	return true
}

// addRecord records the position and metadata of a decoded row.
func (h *cdcHandler) addRecord(in *cdc.Input, rec *batch.Record) {
	in.Positions = append(in.Positions, cdc.Position{Flow: h.flow.Name, Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset})
	in.Meta = append(in.Meta, cdc.RecordMeta{Timestamp: rec.Timestamp, Key: rec.Key})
	in.Payloads = append(in.Payloads, rec.Payload())
}

// writeOutput stages an engine Output into a load of the target.
func writeOutput(ctx context.Context, ld sinks.Load, table string, out *cdc.Output) error {
	cl, ok := ld.(sinks.CDCLoad)
	if !ok {
		return fmt.Errorf("table %s: the destination does not support CDC targets", table)
	}
	if out.Table != nil {
		if b := out.Table.Newest(); b != nil {
			if err := cl.TruncateBelow(ctx, table, b.Seq); err != nil {
				return err
			}
		}
	}
	if out.Deletes.Len() > 0 {
		if err := cl.Remove(ctx, table, out.Deletes.Batch, out.Deletes.Keys, out.Deletes.Seqs); err != nil {
			return err
		}
	}
	if out.Upserts.Len() > 0 {
		if err := cl.Upsert(ctx, table, out.Upserts.Batch, out.Upserts.Keys, out.Upserts.Seqs); err != nil {
			return err
		}
	}
	entries := make([]sinks.StateEntry, 0, len(out.States)+1)
	for _, kc := range out.States {
		e := sinks.StateEntry{Key: kc.Key}
		if kc.State != nil {
			enc, err := kc.State.Encoding()
			if err != nil {
				return fmt.Errorf("state of %s: %w", table, err)
			}
			e.Value = stateBytes(enc)
		}
		entries = append(entries, e)
	}
	if out.Table != nil {
		v, err := out.Table.MarshalBinary()
		if err != nil {
			return fmt.Errorf("table state of %s: %w", table, err)
		}
		entries = append(entries, sinks.StateEntry{Key: "", Value: v})
	}
	if len(entries) == 0 {
		return nil
	}
	return cl.PutState(ctx, table, entries)
}

// stateBytes returns a state's encoding as the bytes a sink's PutState
// takes, sharing them: sinks read a state entry's value and never change
// it. An encoding is never empty (it starts with its format version), and
// an empty one would stay a state, not the nil that removes one.
func stateBytes(enc string) []byte {
	if enc == "" {
		return []byte{}
	}
	return unsafe.Slice(unsafe.StringData(enc), len(enc))
}

// refresh answers Output.Refresh: a truncate arrived after rows it cannot
// remove but whose values it changes (ignore-null). Every key of the
// target is re-derived over the state the Output leaves, and both outputs
// become one.
func (h *cdcHandler) refresh(ctx context.Context, out *cdc.Output, now time.Time) (*cdc.Output, error) {
	cur, err := h.r.sink.Scan(ctx, h.flow.Target)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var keys []string
	add := func(k string) {
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	for i := range cur.Len() {
		k, err := h.engine.KeyOf(cur, i)
		if err != nil {
			return nil, err
		}
		add(k)
	}
	for _, k := range out.Upserts.Keys {
		add(k)
	}
	eng, err := cdc.New(h.cfg, layered{base: pendingStore{h.target}, top: []*pendingOutput{newPendingOutput(out)}})
	if err != nil {
		return nil, err
	}
	again, err := eng.Refresh(ctx, keys, now)
	if err != nil {
		return nil, err
	}
	h.r.log.Info("truncate under ignore-null: rows rewritten", "flow", h.flow.Name, "keys", len(keys))
	return mergeOutputs(out, again), nil
}

// mergeOutputs returns a followed by b as one Output: where both touch an
// identity, b's word is the last.
func mergeOutputs(a, b *cdc.Output) *cdc.Output {
	later := map[[2]string]bool{}
	mark := func(r cdc.Rows) {
		for i := range r.Keys {
			later[[2]string{r.Keys[i], r.Seqs[i]}] = true
		}
	}
	mark(b.Upserts)
	mark(b.Deletes)
	keep := func(r cdc.Rows) cdc.Rows {
		if r.Batch == nil {
			return r
		}
		out := cdc.Rows{Batch: batch.New(r.Batch.Schema, r.Len())}
		for i := range r.Keys {
			if later[[2]string{r.Keys[i], r.Seqs[i]}] {
				continue
			}
			out.Batch.AppendRow(r.Batch, i)
			out.Keys = append(out.Keys, r.Keys[i])
			out.Seqs = append(out.Seqs, r.Seqs[i])
		}
		return out
	}
	concat := func(x, y cdc.Rows) cdc.Rows {
		if x.Len() == 0 {
			return y
		}
		if y.Len() == 0 {
			return x
		}
		out := cdc.Rows{Batch: batch.New(x.Batch.Schema, x.Len()+y.Len())}
		for _, r := range []cdc.Rows{x, y} {
			out.Batch.AppendBatch(r.Batch)
			out.Keys = append(out.Keys, r.Keys...)
			out.Seqs = append(out.Seqs, r.Seqs...)
		}
		return out
	}
	m := &cdc.Output{
		Upserts:     concat(keep(a.Upserts), b.Upserts),
		Deletes:     concat(keep(a.Deletes), b.Deletes),
		Table:       a.Table,
		DeadLetters: a.DeadLetters,
		Stats:       a.Stats,
	}
	if b.Table != nil {
		m.Table = b.Table
	}
	states := map[string]int{}
	for _, kc := range a.States {
		states[kc.Key] = len(m.States)
		m.States = append(m.States, kc)
	}
	for _, kc := range b.States {
		if i, ok := states[kc.Key]; ok {
			m.States[i] = kc
		} else {
			m.States = append(m.States, kc)
		}
	}
	return m
}

// replayFlows names the once auto_cdc flows writing f's target, for a flow
// that is not one (its changes older than a key's replayed ones are
// reported).
func (r *runner) replayFlows(f *spec.Flow) []string {
	if f.Once {
		return nil
	}
	var out []string
	for _, o := range r.p.FlowsOf(f.Target) {
		if o.Once && o.Kind == spec.KindAutoCDC {
			out = append(out, o.Name)
		}
	}
	return out
}

// cutOvers renders the engine's cut-overs: the key and sequence values.
func (h *cdcHandler) cutOvers(in cdc.Input, out *cdc.Output) []checkpoint.CutOverEntry {
	var entries []checkpoint.CutOverEntry
	text := func(cols []string, row int) string {
		parts := make([]string, len(cols))
		for i, c := range cols {
			if v := in.Batch.Column(c); v != nil {
				parts[i] = fmt.Sprint(v.Value(row))
			}
		}
		return strings.Join(parts, ",")
	}
	for _, c := range out.CutOvers {
		entries = append(entries, checkpoint.CutOverEntry{Key: text(h.flow.Keys, c.Row), Seq: text(h.flow.SequenceBy, c.Row), ReplayFlow: c.ReplayFlow})
	}
	return entries
}

// reportCutOvers adds a committed batch's cut-overs to the flow's report in
// the checkpoint store (a report: a failure to write it is logged).
func (h *cdcHandler) reportCutOvers(ctx context.Context, entries []checkpoint.CutOverEntry) {
	if len(entries) == 0 || h.r.checkpoints == nil {
		return
	}
	h.r.log.Warn("live changes older than their key's replayed history", "flow", h.flow.Name, "changes", len(entries), "first_key", entries[0].Key)
	if _, err := checkpoint.AddCutOvers(context.WithoutCancel(ctx), h.r.checkpoints, h.r.p.Pipeline, h.flow.Name, entries, time.Now()); err != nil {
		h.r.log.Warn("cut-over report not stored", "flow", h.flow.Name, "err", err)
	}
}
