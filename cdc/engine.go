package cdc

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/flows/batch"
)

// Input is one batch of a flow's records.
type Input struct {
	// Batch holds the decoded records; its columns are Config.Source's.
	Batch *batch.Batch
	// Positions has one position per row (required).
	Positions []Position
	// Ops, when set, has one operation per row and replaces the flow's
	// apply_as_deletes and apply_as_truncates (a Debezium source knows its
	// operations).
	Ops []Op
	// Meta, when set, has one entry per row: what expressions read as
	// _kafka_timestamp and _kafka_key.
	Meta []RecordMeta
	// Payloads, when set, has the raw message of each row, for dead
	// letters; otherwise a dead letter carries the row as JSON.
	Payloads [][]byte
	// Now is the processing time: tombstones are created and expire by it.
	Now time.Time
	// Absent, when set, has per column of Config.Source the rows whose
	// record does not carry the column's value (nil for a column without
	// any): an upsert leaves such a column as the key's previous change
	// set it (SCD type 1), or as the previous version has it (SCD type 2),
	// as ignore-null does with a null. Debezium's placeholder of a TOAST
	// value is one.
	Absent [][]bool
	// Tombstones, when set, has one entry per row: true for a record that
	// deletes its key just after the key's newest sequence, whatever Ops
	// or the flow's expressions say (OpTombstone). Such a row needs only
	// its key: its sequence columns are not read. A tombstone of a key
	// with no state changes nothing.
	Tombstones []bool
}

// markTombstones sets the operation of the tombstone rows, and forgets
// what evaluating the flow's expressions over them failed with.
func (in *Input) markTombstones(ops []Op, errs map[int]error) {
	for i, t := range in.Tombstones {
		if t {
			ops[i] = OpTombstone
			delete(errs, i)
		}
	}
}

// absent reports whether the record of row does not carry column col.
func (in *Input) absent(col, row int) bool {
	return col < len(in.Absent) && in.Absent[col] != nil && in.Absent[col][row]
}

// Output is what applying a batch changes. Applying it to the target is
// idempotent: a sink may apply the same Output twice, and a batch applied
// again (a replay) yields an Output with no rows and no states.
type Output struct {
	// Upserts are rows to write, each replacing the row of the same
	// identity: the key for SCD type 1, the key and __START_AT for SCD type
	// 2. They come in key order, and by __START_AT within a key.
	Upserts Rows
	// Deletes are rows to remove, as they were: identities that exist no
	// more.
	Deletes Rows
	// States are the new states of the keys whose state changed, in key
	// order; a nil State removes the key's state. They belong in the same
	// load as the rows.
	States []KeyChange
	// Table is the new table state when the batch changed it (a truncate),
	// else nil. When its newest barrier is new, the sink also removes every
	// row of the target whose sequence is below it (see TableState); the
	// rows of this Output are all at or above it.
	Table *TableState
	// Refresh is set when a truncate arrived after events newer than it
	// with ignore-null in play: rows at or above the barrier that this
	// Output does not list may lose values set before it. The caller then
	// applies Engine.Refresh to the keys of the target's rows whose
	// sequence is at or above Table.Newest().Seq.
	Refresh bool
	// DeadLetters are the records that could not be applied: a null key or
	// sequence, or an expression that could not be evaluated.
	DeadLetters []batch.DeadLetter
	// CutOvers are the events of this batch older than their key's newest
	// change, that change replayed by one of Config.ReplayFlows.
	CutOvers []CutOver
	Stats    Stats
}

// CutOver is an event that came older than its key's last replayed change.
type CutOver struct {
	Row        int    // the event's row in Input.Batch
	Key        string // the key, encoded
	ReplayFlow string // the flow that replayed the newer change
	Replayed   string // the sequence of that change, encoded
}

// Rows are target rows with their identity.
type Rows struct {
	Batch *batch.Batch // the target's schema (Engine.Schema)
	Keys  []string     // the encoded key of each row
	// Seqs has the encoded sequence of each row: for SCD type 1 the
	// sequence of the upsert it shows, for SCD type 2 its __START_AT. The
	// encoding orders bytewise like the sequence.
	Seqs []string
}

// Len returns the number of rows.
func (r *Rows) Len() int { return len(r.Keys) }

// KeyChange is the new state of one key.
type KeyChange struct {
	Key   string
	State *KeyState // nil: the key has no state any more
}

// Stats count what a batch did.
type Stats struct {
	Upserts, Deletes, Truncates int // valid events read
	DeadLetters                 int
	Late                        int // events older than their key's newest event already applied
	// Suppressed are upserts a tombstone or a truncate kept out (SCD type
	// 1), or that a delete applied in an earlier batch closed (SCD type 2).
	Suppressed int
	// TombstoneGap is the longest processing-time gap between the creation
	// of a tombstone (or truncate) and an event of this batch it decided:
	// sluice status shows it so that users can size tombstone_retention.
	TombstoneGap time.Duration
	Expired      int // tombstones forgotten after tombstone_retention
}

// ReasonExpression is the dead-letter reason of a record whose
// apply_as_deletes or apply_as_truncates fails to evaluate.
const ReasonExpression = "expression_error"

// EventError is returned by Apply under on_error: fail for the first
// record that would have been a dead letter.
type EventError struct {
	Reason   string // batch.ReasonNullKey, batch.ReasonNullSequence or ReasonExpression
	Position Position
	Err      error
}

func (e *EventError) Error() string {
	return fmt.Sprintf("%s at %s: %v", e.Reason, e.Position, e.Err)
}

func (e *EventError) Unwrap() error { return e.Err }

// Engine applies the batches of one flow. It is not safe for concurrent
// use, and the batches of all flows writing one target must be applied one
// at a time: each Apply must follow the commit (and Cache.Commit) or abort
// of the previous Output for the target.
type Engine struct {
	cfg       Config
	p         *plan
	store     StateStore
	cls       *classifier
	log       *slog.Logger
	retention int64 // µs

	// scratch reused between batches
	ops    []Op
	refs   []rowRef
	sorted []rowRef // sortRefs' scratch
	keyBuf []byte
	seqBuf []byte
	fresh  []event
	// scr is the scratch of each goroutine applying keys: scr[0] that of
	// Apply's own.
	scr []*scratch
	// workers is how many goroutines apply the keys of a batch of at
	// least parallelKeys keys.
	workers      int
	parallelKeys int
}

// scratch is what applying a key reuses from the previous key and batch.
type scratch struct {
	merged  []event
	expBuf  []event
	marks   []bool
	vers    []version
	oldVers []version
	newVers []version
	arena   []value // values materialized or resolved for the key being applied
	used    int
	encBuf  []byte   // the encoding of the state being built
	decEv   []event  // the events of the stored state being applied
	decVals []value  // and their values
	strBuf  []string // position strings of the state being encoded or decoded
	decOffs []int32  // where the decoded state's events start
}

// defaultParallelKeys is the number of keys from which a batch's keys are
// split between goroutines: below it, starting them costs more than it
// saves.
const defaultParallelKeys = 4096

// maxApplyWorkers bounds the goroutines applying one batch's keys.
const maxApplyWorkers = 4

// New returns an engine for cfg reading committed state from store
// (usually a *Cache).
func New(cfg Config, store StateStore) (*Engine, error) {
	p, err := cfg.resolve()
	if err != nil {
		return nil, fmt.Errorf("cdc: flow %s: %w", cfg.Flow, err)
	}
	cls, err := newClassifier(cfg.ApplyAsDeletes, cfg.ApplyAsTruncates, cfg.Source, cfg.Kafka, cfg.Lenient)
	if err != nil {
		return nil, fmt.Errorf("cdc: flow %s: %w", cfg.Flow, err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ret := cfg.TombstoneRetention
	if ret <= 0 {
		ret = DefaultTombstoneRetention
	}
	return &Engine{cfg: cfg, p: p, store: store, cls: cls, log: log, retention: ret.Microseconds(),
		workers: min(runtime.GOMAXPROCS(0), maxApplyWorkers), parallelKeys: defaultParallelKeys}, nil
}

// scratchOf returns the scratch of worker i.
func (e *Engine) scratchOf(i int) *scratch {
	for len(e.scr) <= i {
		e.scr = append(e.scr, &scratch{})
	}
	return e.scr[i]
}

// newApplyCtx returns the context of an apply by worker i, over its
// scratch.
func (e *Engine) newApplyCtx(in Input, now int64, refresh bool, out *Output, i int) *applyCtx {
	return &applyCtx{e: e, p: e.p, scratch: e.scratchOf(i), now: now, in: in, out: out, refresh: refresh}
}

// Schema returns the schema of the rows the engine writes.
func (e *Engine) Schema() batch.Schema { return e.p.table }

// KeyOf returns the encoded key of row i of a batch of the target's
// schema: what Rows.Keys holds for that row. Sinks use it on rows they
// read back.
func (e *Engine) KeyOf(b *batch.Batch, i int) (string, error) {
	var buf []byte
	for _, k := range e.cfg.Keys {
		v := b.Column(k)
		if v == nil {
			return "", fmt.Errorf("cdc: key column %s missing", k)
		}
		if v.IsNull(i) {
			return "", fmt.Errorf("cdc: key column %s is null", k)
		}
		buf = appendOrdered(buf, v, i)
	}
	return string(buf), nil
}

// rowRef is a valid record of the batch with its encoded key and sequence
// (offsets into the batch's key and sequence arenas).
type rowRef struct {
	row    int32
	k0, k1 int32
	s0, s1 int32
	// kp and sp are the first 8 bytes of the key's and the sequence's
	// encodings, big-endian: most comparisons of a sort end on them.
	kp, sp uint64
}

// radixMin is the batch size from which sortRefs sorts by radix.
const radixMin = 1024

// sortRefs sorts refs as compare does, compare ordering by kp first: a
// least-significant-digit radix sort on kp (skipping the bytes every ref
// shares), then each run of refs of equal kp by compare. It returns the
// sorted refs and the other buffer, to pass back as scratch next time.
func sortRefs(refs, scratch []rowRef, compare func(x, y rowRef) int) (sorted, spare []rowRef) {
	if len(refs) < radixMin {
		slices.SortFunc(refs, compare)
		return refs, scratch
	}
	if cap(scratch) < len(refs) {
		scratch = make([]rowRef, len(refs))
	}
	src, dst := refs, scratch[:len(refs)]
	var counts [256]int
	for shift := uint(0); shift < 64; shift += 8 {
		clear(counts[:])
		for i := range src {
			counts[byte(src[i].kp>>shift)]++
		}
		if counts[byte(src[0].kp>>shift)] == len(src) {
			continue // every ref has this byte
		}
		at := 0
		for b, n := range counts {
			counts[b] = at
			at += n
		}
		for i := range src {
			b := byte(src[i].kp >> shift)
			dst[counts[b]] = src[i]
			counts[b]++
		}
		src, dst = dst, src
	}
	for i := 0; i < len(src); {
		j := i + 1
		for j < len(src) && src[j].kp == src[i].kp {
			j++
		}
		if j-i > 1 {
			slices.SortFunc(src[i:j], compare)
		}
		i = j
	}
	return src, dst
}

// prefix returns the first 8 bytes of b as a big-endian number, zeros
// after its end: prefixes order as the byte strings do, or tie.
func prefix(b []byte) uint64 {
	if len(b) >= 8 {
		return binary.BigEndian.Uint64(b)
	}
	var p [8]byte
	copy(p[:], b)
	return binary.BigEndian.Uint64(p[:])
}

// Apply applies a batch: it reads the state of the batch's keys, and
// returns the rows and states that change. It writes nothing: the caller
// loads the Output and, once committed, records it in the Cache.
func (e *Engine) Apply(ctx context.Context, in Input) (*Output, error) {
	return e.apply(ctx, in, nil, false)
}

// Expire re-examines keys that get no event: what their state remembers
// longer than tombstone_retention is forgotten. The Output holds only state
// changes, since forgetting never changes a row. A sink may run it over the
// keys it stores, in the background, to bound the hidden state.
func (e *Engine) Expire(ctx context.Context, keys []string, now time.Time) (*Output, error) {
	return e.apply(ctx, Input{Now: now}, keys, false)
}

// Refresh is Expire that also writes the current row of every key that has
// one (SCD type 1): the answer to Output.Refresh, when a truncate arrived
// after rows it cannot remove but whose values it changes. It cannot tell
// which truncates a row in the target was derived under, so it writes the
// row whether or not it changed.
func (e *Engine) Refresh(ctx context.Context, keys []string, now time.Time) (*Output, error) {
	return e.apply(ctx, Input{Now: now}, keys, true)
}

func (e *Engine) apply(ctx context.Context, in Input, extra []string, refresh bool) (*Output, error) {
	if in.Now.IsZero() {
		return nil, errors.New("cdc: Input.Now is not set")
	}
	n := in.Batch.Len()
	if n > 0 {
		if err := e.checkInput(in); err != nil {
			return nil, err
		}
	}
	a := e.newApplyCtx(in, in.Now.UnixMicro(), refresh, &Output{}, 0)

	// Operations.
	e.ops = grow(e.ops, n)
	ops := e.ops
	errs := map[int]error{}
	switch {
	case in.Ops != nil:
		copy(ops, in.Ops)
	case n > 0:
		e.cls.classify(in.Batch, in.Positions, in.Meta, ops, errs)
	}
	in.markTombstones(ops, errs)

	// Validate, encode keys and sequences.
	refs := e.refs[:0]
	keyBuf, seqBuf := e.keyBuf[:0], e.seqBuf[:0]
	var truncs, snaps []Barrier
	for i := range n {
		if err := errs[i]; err != nil {
			if fail := a.deadLetter(i, ReasonExpression, err); fail != nil {
				return nil, fail
			}
			continue
		}
		op := ops[i]
		if op == OpTruncate && e.p.scd2 {
			return nil, fmt.Errorf("cdc: flow %s: a truncate at %s on an SCD type 2 table", e.cfg.Flow, in.Positions[i])
		}
		if op == OpSnapshot && (!e.p.scd2 || !e.cfg.Snapshot) {
			return nil, fmt.Errorf("cdc: flow %s: a snapshot barrier at %s, which only a snapshot flow of an SCD type 2 table applies", e.cfg.Flow, in.Positions[i])
		}
		if op != OpTruncate && op != OpSnapshot {
			if col := e.nullKey(i, in.Batch); col != "" {
				if fail := a.deadLetter(i, batch.ReasonNullKey, fmt.Errorf("key column %s is null", col)); fail != nil {
					return nil, fail
				}
				continue
			}
		}
		if col := e.nullSeq(i, in.Batch); col != "" && op != OpTombstone {
			if fail := a.deadLetter(i, batch.ReasonNullSequence, fmt.Errorf("sequence column %s is null", col)); fail != nil {
				return nil, fail
			}
			continue
		}
		s0 := len(seqBuf)
		if op != OpTombstone { // its sequence is resolved per key (applyKey)
			for _, c := range e.p.seqSrc {
				seqBuf = appendOrdered(seqBuf, in.Batch.Vectors[c], i)
			}
		}
		switch op {
		case OpTruncate:
			a.out.Stats.Truncates++
			truncs = append(truncs, Barrier{Seq: string(seqBuf[s0:]), Pos: in.Positions[i], Seen: in.Now.UTC()})
			seqBuf = seqBuf[:s0]
			continue
		case OpSnapshot:
			snaps = append(snaps, Barrier{Seq: string(seqBuf[s0:]), Pos: in.Positions[i], Seen: in.Now.UTC()})
			seqBuf = seqBuf[:s0]
			continue
		case OpDelete, OpTombstone:
			a.out.Stats.Deletes++
		default:
			a.out.Stats.Upserts++
		}
		k0 := len(keyBuf)
		for _, c := range e.p.keySrc {
			keyBuf = appendOrdered(keyBuf, in.Batch.Vectors[c], i)
		}
		refs = append(refs, rowRef{row: int32(i), k0: int32(k0), k1: int32(len(keyBuf)), s0: int32(s0), s1: int32(len(seqBuf)),
			kp: prefix(keyBuf[k0:]), sp: prefix(seqBuf[s0:])})
	}
	e.keyBuf, e.seqBuf = keyBuf, seqBuf
	keyStr, seqStr := string(keyBuf), string(seqBuf)
	pos := in.Positions
	refs, e.sorted = sortRefs(refs, e.sorted, func(x, y rowRef) int {
		if x.kp != y.kp {
			return cmp.Compare(x.kp, y.kp)
		}
		if c := strings.Compare(keyStr[x.k0:x.k1], keyStr[y.k0:y.k1]); c != 0 {
			return c
		}
		if x.sp != y.sp {
			return cmp.Compare(x.sp, y.sp)
		}
		if c := strings.Compare(seqStr[x.s0:x.s1], seqStr[y.s0:y.s1]); c != 0 {
			return c
		}
		return pos[x.row].Compare(pos[y.row])
	})
	e.refs = refs

	// Keys, and the batch's events grouped by key, in slices sized once:
	// grown by appending, their copies of pointers cost write barriers.
	newKey := func(j int) bool {
		return j == 0 || keyStr[refs[j].k0:refs[j].k1] != keyStr[refs[j-1].k0:refs[j-1].k1]
	}
	nkeys := 0
	for j := range refs {
		if newKey(j) {
			nkeys++
		}
	}
	groups := make([]group, 0, nkeys+len(extra))
	fresh := e.fresh[:0]
	if cap(fresh) < len(refs) {
		fresh = make([]event, 0, len(refs)) // never grown below: groups share it
	}
	start := 0                          // of the current key's events
	marks := e.cfg.Snapshot && e.p.scd2 // upserts mark their key present in the snapshot
	for j, r := range refs {
		if newKey(j) {
			groups = append(groups, group{key: strings.Clone(keyStr[r.k0:r.k1])})
			start = j
		}
		op := ops[r.row]
		fresh = append(fresh, event{seq: seqStr[r.s0:r.s1], pos: pos[r.row], del: op == OpDelete || op == OpTombstone, tomb: op == OpTombstone,
			snap: marks && op == OpUpsert, seen: a.now, row: r.row})
		groups[len(groups)-1].fresh = fresh[start : j+1 : j+1]
	}
	e.fresh = fresh
	if len(extra) > 0 {
		have := make(map[string]bool, len(groups))
		for _, g := range groups {
			have[g.key] = true
		}
		for _, k := range extra {
			if !have[k] {
				have[k] = true
				groups = append(groups, group{key: k})
			}
		}
		slices.SortFunc(groups, func(x, y group) int { return strings.Compare(x.key, y.key) })
	}

	// State.
	table, err := e.store.Table(ctx)
	if err != nil {
		return nil, fmt.Errorf("cdc: flow %s: read table state: %w", e.cfg.Flow, err)
	}
	oldB, newB := table.Truncates, table.Truncates
	if len(truncs) > 0 {
		newB = e.mergeBarriers(oldB, truncs, a.now)
		if !equalBarriers(oldB, newB) {
			a.out.Table = &TableState{Truncates: newB, Snapshots: table.Snapshots}
			// A truncate older than what a key already holds changes the
			// values ignore-null kept, which no barrier rule can remove.
			a.out.Refresh = e.p.anyElig
		}
	}
	a.snaps = table.Snapshots
	if len(snaps) > 0 {
		if merged := e.mergeSnapshots(table.Snapshots, snaps, a.now); !equalBarriers(merged, table.Snapshots) {
			a.snaps = merged
			a.out.Table = &TableState{Truncates: newB, Snapshots: merged}
		}
	}
	a.out.Upserts = e.newRows(len(groups))
	a.out.Deletes = e.newRows(0)
	a.out.States = make([]KeyChange, 0, len(groups))
	keys := make([]string, len(groups))
	for g := range groups {
		keys[g] = groups[g].key
	}
	var states []*KeyState // states[g] is groups[g]'s
	if len(keys) > 0 {
		if states, err = e.store.Get(ctx, keys); err != nil {
			return nil, fmt.Errorf("cdc: flow %s: read key states: %w", e.cfg.Flow, err)
		}
		if len(states) != len(keys) {
			return nil, fmt.Errorf("cdc: flow %s: the state store returned %d states for %d keys", e.cfg.Flow, len(states), len(keys))
		}
	}
	if err := e.applyKeys(a, groups, states, oldB, newB); err != nil {
		return nil, fmt.Errorf("cdc: flow %s: %w", e.cfg.Flow, err)
	}
	st := &a.out.Stats
	e.log.DebugContext(ctx, "cdc: batch applied", "flow", e.cfg.Flow, "target", e.cfg.Target,
		"upserts", st.Upserts, "deletes", st.Deletes, "truncates", st.Truncates, "dead_letters", st.DeadLetters,
		"rows_written", a.out.Upserts.Len(), "rows_removed", a.out.Deletes.Len(), "states", len(a.out.States),
		"late", st.Late, "suppressed", st.Suppressed, "expired", st.Expired)
	return a.out, nil
}

// group is a key of a batch and its events, in order.
type group struct {
	key   string
	fresh []event
}

// applyKeys applies each group's events over its key's state (states[g]
// is groups[g]'s), into a's Output. Keys are independent: a large batch's
// keys are split into contiguous runs, each applied by a goroutine of its
// own into an Output of its own, and the runs' Outputs are appended in
// order, so that the result is the one a single goroutine would give.
func (e *Engine) applyKeys(a *applyCtx, groups []group, states []*KeyState, oldB, newB []Barrier) error {
	run := func(a *applyCtx, groups []group, states []*KeyState) error {
		for i, g := range groups {
			err := a.applyKey(g.key, states[i], g.fresh, oldB, newB)
			a.release()
			if err != nil {
				return err
			}
		}
		return nil
	}
	w := min(e.workers, len(groups)/max(e.parallelKeys, 1))
	if w <= 1 {
		return run(a, groups, states)
	}
	parts := make([]*applyCtx, w)
	errs := make([]error, w)
	var wg sync.WaitGroup
	for i := range w {
		lo, hi := i*len(groups)/w, (i+1)*len(groups)/w
		parts[i] = a
		if i > 0 {
			out := &Output{Upserts: e.newRows(hi - lo), Deletes: e.newRows(0), States: make([]KeyChange, 0, hi-lo)}
			parts[i] = e.newApplyCtx(a.in, a.now, a.refresh, out, i)
			parts[i].snaps = a.snaps
		}
		wg.Go(func() { errs[i] = run(parts[i], groups[lo:hi], states[lo:hi]) })
	}
	wg.Wait()
	for _, p := range parts[1:] {
		a.out.append(p.out)
	}
	return errors.Join(errs...)
}

// append appends what applying later keys gave to o.
func (o *Output) append(p *Output) {
	o.Upserts.append(p.Upserts)
	o.Deletes.append(p.Deletes)
	o.States = append(o.States, p.States...)
	o.DeadLetters = append(o.DeadLetters, p.DeadLetters...)
	o.CutOvers = append(o.CutOvers, p.CutOvers...)
	st := &o.Stats
	st.DeadLetters += p.Stats.DeadLetters
	st.Late += p.Stats.Late
	st.Suppressed += p.Stats.Suppressed
	st.Expired += p.Stats.Expired
	st.TombstoneGap = max(st.TombstoneGap, p.Stats.TombstoneGap)
}

// append appends p's rows to r.
func (r *Rows) append(p Rows) {
	if p.Len() == 0 {
		return
	}
	r.Batch.AppendBatch(p.Batch)
	r.Keys = append(r.Keys, p.Keys...)
	r.Seqs = append(r.Seqs, p.Seqs...)
}

func (e *Engine) checkInput(in Input) error {
	b := in.Batch
	if len(b.Vectors) != len(e.cfg.Source.Columns) {
		return fmt.Errorf("cdc: flow %s: batch has %d columns, the source %d", e.cfg.Flow, len(b.Vectors), len(e.cfg.Source.Columns))
	}
	for i, c := range e.cfg.Source.Columns {
		if b.Vectors[i].Type != c.Type {
			return fmt.Errorf("cdc: flow %s: batch column %d is %v, source column %s is %v", e.cfg.Flow, i, b.Vectors[i].Type, c.Name, c.Type)
		}
	}
	n := b.Len()
	if len(in.Positions) != n {
		return fmt.Errorf("cdc: flow %s: %d positions for %d rows", e.cfg.Flow, len(in.Positions), n)
	}
	if in.Ops != nil && len(in.Ops) != n {
		return fmt.Errorf("cdc: flow %s: %d operations for %d rows", e.cfg.Flow, len(in.Ops), n)
	}
	if in.Meta != nil && len(in.Meta) != n {
		return fmt.Errorf("cdc: flow %s: %d metadata entries for %d rows", e.cfg.Flow, len(in.Meta), n)
	}
	if in.Payloads != nil && len(in.Payloads) != n {
		return fmt.Errorf("cdc: flow %s: %d payloads for %d rows", e.cfg.Flow, len(in.Payloads), n)
	}
	if in.Tombstones != nil && len(in.Tombstones) != n {
		return fmt.Errorf("cdc: flow %s: %d tombstone flags for %d rows", e.cfg.Flow, len(in.Tombstones), n)
	}
	return nil
}

func (e *Engine) nullKey(i int, b *batch.Batch) string {
	for j, c := range e.p.keySrc {
		if b.Vectors[c].IsNull(i) {
			return e.cfg.Keys[j]
		}
	}
	return ""
}

func (e *Engine) nullSeq(i int, b *batch.Batch) string {
	for j, c := range e.p.seqSrc {
		if b.Vectors[c].IsNull(i) {
			return e.cfg.SequenceBy[j]
		}
	}
	return ""
}

func (e *Engine) newRows(capacity int) Rows {
	return Rows{Batch: batch.New(e.p.table, capacity), Keys: make([]string, 0, capacity), Seqs: make([]string, 0, capacity)}
}

// applyCtx is one Apply call.
type applyCtx struct {
	e *Engine
	p *plan
	*scratch
	now int64
	in  Input
	out *Output
	// refresh is set by Refresh: SCD type 1 rows are written whether or
	// not they changed.
	refresh bool
	// snaps are the table's snapshot barriers (TableState.Snapshots) this
	// apply reads, with those it adds.
	snaps []Barrier

	states []KeyState // where newState takes the Output's states from
	// reuse, when its offs are set, is the encoding of the key's stored
	// state, whose events a new state that starts with them copies.
	reuse prefixCode
}

// take returns n values from the engine's arena. They live until the key
// being applied is done (see release).
func (a *applyCtx) take(n int) []value {
	s := a.scratch
	if s.used+n > len(s.arena) {
		s.arena = make([]value, max(2*len(s.arena), n, 1024))
		s.used = 0
	}
	v := s.arena[s.used : s.used+n : s.used+n]
	s.used += n
	return v
}

// release makes the arena reusable: nothing taken so far is read again.
func (a *applyCtx) release() { a.used = 0 }

// valsOf returns the values of an upsert, reading a batch event's row on
// first use.
func (a *applyCtx) valsOf(ev *event) []value {
	if ev.vals != nil || ev.del {
		return ev.vals
	}
	p, b := a.p, a.in.Batch
	vals := a.take(len(p.names))
	row := int(ev.row)
	for c, si := range p.src {
		switch {
		case si < 0:
			vals[c] = null
		case a.in.absent(si, row):
			vals[c] = value{k: vAbsent}
		case b.Vectors[si].IsNull(row):
			if p.eligible[c] {
				vals[c] = value{k: vAbsent}
			} else {
				vals[c] = null
			}
		default:
			vals[c] = readValue(b.Vectors[si], row)
		}
	}
	ev.vals = vals
	return vals
}

func (a *applyCtx) deadLetter(i int, reason string, err error) error {
	pos := a.in.Positions[i]
	if a.e.cfg.FailOnError {
		return &EventError{Reason: reason, Position: pos, Err: err}
	}
	var payload []byte
	if a.in.Payloads != nil {
		payload = a.in.Payloads[i]
	} else {
		payload = rowJSON(a.in.Batch, i)
	}
	a.out.DeadLetters = append(a.out.DeadLetters, batch.DeadLetter{
		Pipeline: a.e.cfg.Pipeline,
		Flow:     a.e.cfg.Flow,
		Target:   a.e.cfg.Target,
		Source:   pos.source(),
		Position: pos.deadLetterPosition(),
		Reason:   reason,
		Error:    err.Error(),
		Payload:  payload,
		At:       a.in.Now.UTC(),
	})
	a.out.Stats.DeadLetters++
	return nil
}

// rowJSON renders row i as a JSON object, for dead letters.
// RowJSON renders row i of b as a JSON object, the payload of a dead letter
// that has no message of its own.
func RowJSON(b *batch.Batch, i int) []byte { return rowJSON(b, i) }

func rowJSON(b *batch.Batch, i int) []byte {
	var sb strings.Builder
	sb.WriteByte('{')
	for c, col := range b.Schema.Columns {
		if c > 0 {
			sb.WriteByte(',')
		}
		writeJSONString(&sb, col.Name)
		sb.WriteByte(':')
		writeJSONValue(&sb, col.Type, readValue(b.Vectors[c], i))
	}
	sb.WriteByte('}')
	return []byte(sb.String())
}

// mergeBarriers adds a batch's truncates to the table's: one per sequence
// (the least position, the earliest creation), all kept. A truncate is a
// delete of every key, and key states are only cleaned when their key is
// touched: forgetting an older truncate would let a key's state from before
// it come back on a later ignore-null update. Truncates are rare and small.
func (e *Engine) mergeBarriers(old, add []Barrier, now int64) []Barrier {
	all := slices.Concat(old, add)
	slices.SortStableFunc(all, func(x, y Barrier) int {
		if c := strings.Compare(x.Seq, y.Seq); c != 0 {
			return c
		}
		return x.Pos.Compare(y.Pos)
	})
	out := all[:0]
	for _, b := range all {
		if n := len(out); n > 0 && out[n-1].Seq == b.Seq {
			if b.Seen.Before(out[n-1].Seen) {
				out[n-1].Seen = b.Seen
			}
			continue
		}
		out = append(out, b)
	}
	return out
}

// applyKey merges a key's new events into its state and records what
// changes.
func (a *applyCtx) applyKey(key string, old *KeyState, fresh []event, oldB, newB []Barrier) error {
	a.reuse = prefixCode{}
	oldEv, remapped, err := a.bind(old)
	if err != nil {
		return fmt.Errorf("key %x: %w", key, err)
	}
	// What the retention forgot first: a tombstone must not find, and
	// renew, an expired delete (docs/cdc.md, Tombstones).
	var live []event
	if a.p.scd2 {
		live = a.expire2(oldEv)
	} else {
		live = a.expire1(oldEv, newB)
	}
	if len(fresh) > 0 && fresh[0].tomb {
		fresh = a.resolveTombstones(live, fresh)
	}
	if len(fresh) > 0 && len(oldEv) > 0 {
		last := oldEv[len(oldEv)-1]
		replayed := slices.Contains(a.e.cfg.ReplayFlows, last.pos.Flow) && !slices.Contains(a.e.cfg.ReplayFlows, a.e.cfg.Flow)
		for i := range fresh {
			if fresh[i].seq < last.seq {
				a.out.Stats.Late++
				if replayed && fresh[i].row >= 0 {
					a.out.CutOvers = append(a.out.CutOvers, CutOver{Row: int(fresh[i].row), Key: key, ReplayFlow: last.pos.Flow, Replayed: last.seq})
				}
			}
		}
	}
	var kept []event
	if a.p.scd2 {
		fresh = a.snapshotDeletes(oldEv, fresh)
		kept = a.compact2(a.merge(live, fresh))
	} else {
		kept = a.compact1(a.merge(live, fresh), newB)
	}
	for i := range kept {
		a.valsOf(&kept[i])
	}
	same := commonEvents(oldEv, kept) // the events before it are unchanged
	changed := remapped || same < len(oldEv) || same < len(kept)
	if remapped {
		same = 0
	}
	newEv := oldEv
	if changed {
		var ns *KeyState
		newEv = nil
		if len(kept) > 0 {
			if ns, err = a.newState(kept, same); err != nil {
				return fmt.Errorf("key %x: %w", key, err)
			}
			newEv = kept
		}
		a.out.States = append(a.out.States, KeyChange{Key: key, State: ns})
	}
	if a.refresh && !a.p.scd2 {
		if nr, ok := a.fold1(newEv, newB); ok {
			return a.appendRow(&a.out.Upserts, key, nr.vals, nr.seq, "", "")
		}
	}
	if !changed && equalBarriers(oldB, newB) {
		return nil
	}
	if a.p.scd2 {
		return a.diff2(key, oldEv, newEv, min(same, len(newEv)))
	}
	a.diff1(key, oldEv, newEv, oldB, newB)
	return nil
}

// bind returns the events of a stored state with values in the plan's
// column order; remapped is true when the state followed other columns.
func (a *applyCtx) bind(s *KeyState) (evs []event, remapped bool, err error) {
	if s == nil {
		return nil, false, nil
	}
	names := a.p.names
	if s.events == nil && s.enc != "" {
		// Kept encoded (by the Cache, or an Output): decoded into the
		// engine's scratch, which the next key reuses.
		cols, evs, needed, err := decodeState(s.enc, names, a.decEv[:0], a.decVals, &a.strBuf, &a.decOffs)
		if err != nil {
			return nil, false, err
		}
		if len(a.decOffs) > 0 && unsafe.SliceData(cols) == unsafe.SliceData(names) {
			a.reuse = prefixCode{enc: s.enc, offs: a.decOffs}
		}
		a.decEv = evs[:0]
		if needed > len(a.decVals) {
			a.decVals = make([]value, max(needed, 2*len(a.decVals), 1024))
		}
		s = &KeyState{cols: cols, events: evs}
	}
	if len(s.cols) == len(names) && (len(names) == 0 || unsafe.SliceData(s.cols) == unsafe.SliceData(names) || slices.Equal(s.cols, names)) {
		return s.events, false, nil
	}
	idx := make([]int, len(names))
	for c, n := range names {
		idx[c] = slices.Index(s.cols, n)
	}
	evs = make([]event, len(s.events))
	for i, ev := range s.events {
		if !ev.del {
			vals := make([]value, len(names))
			for c, j := range idx {
				if j < 0 {
					continue
				}
				v := ev.vals[j]
				if v.k != vNull && v.k != vAbsent && v.k != a.p.kinds[c] {
					return nil, false, fmt.Errorf("stored state holds column %s as another type than %s: a full refresh is needed", names[c], a.p.types[c])
				}
				vals[c] = v
			}
			ev.vals = vals
		}
		evs[i] = ev
	}
	return evs, true, nil
}

// merge returns the stored events and the batch's in one sorted list
// without duplicates. SCD type 1 keeps every event once, by (seq,
// position), the stored copy of a redelivered one. SCD type 2 keeps one
// event per sequence: a delete beats an upsert (and among deletes the
// least position stays, with the earliest creation time), among upserts
// the greater position wins.
func (a *applyCtx) merge(old, fresh []event) []event {
	m := append(a.merged[:0], old...)
	m = append(m, fresh...)
	if len(old) > 0 && len(fresh) > 0 {
		slices.SortStableFunc(m, func(x, y event) int {
			if c := strings.Compare(x.seq, y.seq); c != 0 {
				return c
			}
			return x.pos.Compare(y.pos)
		})
	}
	out := m[:0]
	for _, ev := range m {
		if len(out) == 0 {
			out = append(out, ev)
			continue
		}
		last := &out[len(out)-1]
		switch {
		case ev.seq != last.seq:
			out = append(out, ev)
		case ev.pos == last.pos:
			// the same record again: the stored copy (first) stays
		case !a.p.scd2:
			out = append(out, ev)
		case last.del && ev.del:
			last.seen = min(last.seen, ev.seen) // last has the least position
		case ev.del:
			*last = ev
		case last.del:
		default:
			// Sorted by position: ev is greater. The key stays present in
			// the snapshot the replaced upsert came from.
			ev.snap = ev.snap || last.snap
			*last = ev
		}
	}
	a.merged = out
	return out
}

// newState returns the state of kept events, whose first same are those
// of the stored state. It holds only their encoding: that is all that
// sinks and the Cache read, and an engine decodes it when it reads the
// state again (see bind). The encoding of the stored state's events is
// copied, not written again.
func (a *applyCtx) newState(kept []event, same int) (*KeyState, error) {
	var reuse *prefixCode
	if len(a.reuse.offs) > 0 {
		reuse = &a.reuse
	}
	buf, err := appendStateReusing(a.encBuf[:0], a.p.names, kept, &a.strBuf, reuse, same)
	if err != nil {
		return nil, err
	}
	a.encBuf = buf
	if len(a.states) == 0 {
		a.states = make([]KeyState, 256) // one allocation for many keys
	}
	s := &a.states[0]
	a.states = a.states[1:]
	*s = KeyState{cols: a.p.names, enc: string(buf)}
	return s, nil
}

// appendRow appends one target row.
func (a *applyCtx) appendRow(r *Rows, key string, vals []value, seq string, start, end string) error {
	p := a.p
	for c, ti := range p.dataIdx {
		appendValue(r.Batch.Vectors[ti], vals[c])
	}
	if p.scd2 {
		if err := a.appendInterval(r.Batch.Vectors[p.startIdx], start); err != nil {
			return err
		}
		if err := a.appendInterval(r.Batch.Vectors[p.endIdx], end); err != nil {
			return err
		}
	}
	r.Keys = append(r.Keys, key)
	r.Seqs = append(r.Seqs, seq)
	return nil
}

// appendInterval appends a sequence to __START_AT or __END_AT; "" is null.
func (a *applyCtx) appendInterval(v *batch.Vector, seq string) error {
	if seq == "" {
		v.AppendNull()
		return nil
	}
	if len(a.p.seqTypes) == 1 && len(seq) == 8 && kindOf(a.p.seqTypes[0]) == vInt {
		v.AppendInt(int64(binary.BigEndian.Uint64(unsafe.Slice(unsafe.StringData(seq), 8)) ^ (1 << 63)))
		return nil
	}
	vs, err := decodeOrdered(a.p.seqTypes, seq)
	if err != nil {
		return err
	}
	if a.p.listSeqAsJ {
		v.AppendString(sequenceJSON(a.p.seqTypes, vs))
		return nil
	}
	appendValue(v, vs[0])
	return nil
}

func (a *applyCtx) expired(ev *event) bool {
	return ev.seen+a.e.retention <= a.now
}

func (a *applyCtx) gap(seen int64) {
	if g := time.Duration(a.now-seen) * time.Microsecond; g > a.out.Stats.TombstoneGap {
		a.out.Stats.TombstoneGap = g
	}
}
