package flows

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"maps"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/backfill"
	"github.com/sluicehq/sluice/cdc"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/spec"
	"github.com/sluicehq/sluice/sinks"
)

// A snapshot applies bucket by bucket. Its rows are spread over
// snapshotParts part files by a hash of their encoded key, and for SCD type
// 2 the target's current keys over the same parts; consecutive parts form
// buckets of about snapshotBucketRows rows (snapshot rows plus target keys).
// Every key's rows and current row are in one bucket, so a bucket alone
// decides its keys: duplicates (which refuse the whole snapshot), the
// deletes of current keys the snapshot lacks, and the engine's output. Every
// bucket's output goes into one load, which the destination stages on disk:
// the version commits whole or not at all, and readers see it wholly applied
// or not at all.
//
// For SCD type 1 the version is a truncate at it, then an upsert at it of
// every row. The truncate goes through the engine first, alone; its new
// table state (the barrier) is what the buckets' engine calls read as the
// table's, though it commits only with the load.

// snapshotParts is how many part files a snapshot's rows and the target's
// keys are spread over: the finest split buckets can have.
const snapshotParts = 256

// defaultSnapshotBucketRows is the rows a bucket holds at most, as far as
// the parts allow.
const defaultSnapshotBucketRows = 500_000

// snapshotBucketRows, when positive, replaces defaultSnapshotBucketRows
// (tests make buckets small).
var snapshotBucketRows atomic.Int64

// snapshotBucketHook, when set, runs after each bucket's output is staged
// into the load (tests fail or cancel a load midway with it).
var snapshotBucketHook atomic.Pointer[func(bucket int) error]

// snapshotApply is one snapshot version being applied.
type snapshotApply struct {
	r           *runner
	flow        *spec.Flow
	target      *cdcTarget
	version     snapshotVersion
	cfg         cdc.Config
	src         batch.Schema // the snapshot's columns
	withVersion batch.Schema // src, then the version column: the engine's source
	keyer       *cdc.Engine  // encodes keys (KeyOf)

	dir       string
	release   func()       // unlocks dir
	rows      *spill       // the snapshot's rows
	keys      *spill       // the target's current keys (SCD type 2), else nil
	keySchema batch.Schema // the target's key columns
	kids      *snapshotKids
}

// cleanup removes the spilled files.
func (a *snapshotApply) cleanup() {
	spills := []*spill{a.rows, a.keys}
	if a.kids != nil {
		spills = append(append(spills, a.kids.cur), slices.Collect(maps.Values(a.kids.rows))...)
	}
	for _, s := range spills {
		if s != nil {
			_ = s.finish()
		}
	}
	if a.dir != "" {
		if err := os.RemoveAll(a.dir); err != nil {
			a.r.log.Warn("snapshot spill not removed", "dir", a.dir, "err", err)
		}
		a.release()
	}
}

// spillSnapshot reads every file of the snapshot once, spilling each row
// by its key.
func (a *snapshotApply) spillSnapshot(ctx context.Context, format string) error {
	dir, release, err := newSpillDir(os.TempDir(), a.r.log)
	if err != nil {
		return fmt.Errorf("spill: %w", err)
	}
	a.dir, a.release = dir, release
	a.rows = newSpill(dir, "rows", a.src, snapshotParts, maphash.MakeSeed())
	a.kids = a.newSnapshotKids()
	var ord int64
	for _, fl := range a.version.files {
		if err := a.spillFile(ctx, fl, format, &ord); err != nil {
			return err
		}
	}
	if a.kids != nil {
		for _, s := range a.kids.rows {
			if err := s.finish(); err != nil {
				return err
			}
		}
	}
	return a.rows.finish()
}

func (a *snapshotApply) spillFile(ctx context.Context, fl backfill.File, format string, ord *int64) error {
	opts := backfill.ReadOptions{Units: a.flow.SourceUnits(a.r.p), Paths: a.flow.SourcePaths(a.r.p), Names: a.r.namesOf(a.flow)}
	if a.kids != nil {
		opts.Children = a.kids.schemas
	}
	var keys []string
	var ords []int64
	return backfill.ReadFile(ctx, fl, format, a.src, opts, func(ch *backfill.Chunk) error {
		if len(ch.DeadLetters) > 0 {
			d := ch.DeadLetters[0]
			return fmt.Errorf("file %s row %s: %s: a snapshot applies whole or not at all", d.Source, d.Position, d.Error)
		}
		keys, ords = keys[:0], ords[:0]
		for i := range ch.Batch.Len() {
			k, err := a.keyer.KeyOf(ch.Batch, i)
			if err != nil {
				return fmt.Errorf("file %s row %d: %w", ch.File, ch.Row(i)+1, err)
			}
			keys, ords = append(keys, k), append(ords, *ord+int64(i))
		}
		if a.kids != nil {
			if err := a.spillChunk(ch, keys, ords); err != nil {
				return err
			}
		}
		for i, k := range keys {
			if err := a.rows.add(k, ch.Batch, i, ords[i]); err != nil {
				return err
			}
		}
		*ord += int64(len(keys))
		return nil
	})
}

// spillTargetKeys spills into the parts of the snapshot's rows the keys of
// the target's rows (SCD type 2) whose version is open at the snapshot's
// version or after it: __END_AT null or after the version. Those are the
// keys a delete at the version changes now; keys whose versions all ended
// by then get theirs when a change older than the version comes (the
// engine's snapshot barriers, docs/cdc.md#snapshots).
func (a *snapshotApply) spillTargetKeys(ctx context.Context) error {
	a.keySchema = batch.Schema{}
	for _, k := range a.flow.Keys {
		i := a.target.table.Schema.Index(k)
		if i < 0 {
			return fmt.Errorf("key %s is not a column of table %s", k, a.target.name)
		}
		a.keySchema.Columns = append(a.keySchema.Columns, a.target.table.Schema.Columns[i])
	}
	a.keys = newSpill(a.dir, "keys", a.keySchema, snapshotParts, a.rows.seed)
	nk := len(a.keySchema.Columns)
	// Only the versions open at the version or after it: the destination
	// reads no more of the history than that.
	after := batch.NewVector(a.version.value.Type, 1)
	a.version.value.AppendTo(after, 1)
	where := sinks.KeyFilter{Column: cdc.EndAtColumn, After: after}
	add := func(b *batch.Batch) error {
		end := b.Vectors[nk]
		keys := &batch.Batch{Schema: a.keySchema, Vectors: b.Vectors[:nk]}
		for i := range b.Len() {
			if !end.IsNull(i) && backfill.ValueAt(end, i).Compare(a.version.value) <= 0 {
				continue // a destination may hand over rows it could not filter
			}
			k, err := a.keyer.KeyOf(keys, i)
			if err != nil {
				return err
			}
			if err := a.keys.add(k, keys, i, 0); err != nil {
				return err
			}
		}
		return nil
	}
	var err error
	if ks, ok := a.r.sink.(sinks.KeyScanner); ok {
		err = ks.ScanKeys(ctx, a.flow.Target, append(a.keySchema.Names(), cdc.EndAtColumn), where, add)
	} else {
		err = a.scanKeys(ctx, add)
	}
	if err != nil && !errors.Is(err, sinks.ErrUnknownTable) {
		return err
	}
	return a.keys.finish()
}

// scanKeys reads the keys and __END_AT through Scan, for a destination
// that cannot stream them.
func (a *snapshotApply) scanKeys(ctx context.Context, add func(*batch.Batch) error) error {
	return a.scanColumns(ctx, append(a.keySchema.Names(), cdc.EndAtColumn), add)
}

// scanColumns reads columns of the target through Scan, for a destination
// that cannot stream them.
func (a *snapshotApply) scanColumns(ctx context.Context, names []string, add func(*batch.Batch) error) error {
	cur, err := a.r.sink.Scan(ctx, a.flow.Target)
	if err != nil {
		return err
	}
	out := &batch.Batch{}
	for _, name := range names {
		v := cur.Column(name)
		if v == nil {
			return fmt.Errorf("table %s has no column %s", a.flow.Target, name)
		}
		out.Schema.Columns = append(out.Schema.Columns, batch.Column{Name: name, Type: v.Type, Nullable: true})
		out.Vectors = append(out.Vectors, v)
	}
	return add(out)
}

// buckets splits the parts into ranges [from, to) of about the bucket size.
func (a *snapshotApply) buckets() [][2]int {
	size := snapshotBucketRows.Load()
	if size <= 0 {
		size = defaultSnapshotBucketRows
	}
	total := a.rows.rows
	if a.keys != nil {
		total += a.keys.rows
	}
	n := int(min(max((total+size-1)/size, 1), snapshotParts))
	out := make([][2]int, n)
	for j := range n {
		out[j] = [2]int{j * snapshotParts / n, (j + 1) * snapshotParts / n}
	}
	return out
}

// snapshotSlotPrefix names the slot of a snapshot version in the ledger:
// a version's load takes it from no position to done.
const snapshotSlotPrefix = "snapshot:"

// load applies the spilled snapshot in one load and commits it. A version
// applied once (by an earlier attempt or run) is not applied again.
func (a *snapshotApply) load(ctx context.Context) error {
	slot := snapshotSlotPrefix + a.version.text
	p := &prepared{again: a.target.cache.Reset} // an earlier attempt's outcome may be unknown
	p.write = func(ctx context.Context, ld sinks.Load) (err error) {
		p.rows, err = a.write(ctx, ld)
		return err
	}
	return a.r.commitLoad(ctx, a.flow, 0, p, sinks.Commit{
		From: batch.Positions{{File: slot}},
		To:   batch.Positions{{File: slot, Done: true}},
	})
}

// write runs the engine over each bucket and stages its output into ld; it
// returns the rows written.
func (a *snapshotApply) write(ctx context.Context, ld sinks.Load) (int64, error) {
	now := time.Now()
	// Key states are read from the destination, not through the target's
	// cache: each key is read once, and the cache is reset afterwards.
	var store cdc.StateStore = a.target.cache
	if sr, ok := a.r.sink.(sinks.StateReader); ok {
		store = stateStore{sr: sr, table: a.flow.Target}
	}
	eng, err := cdc.New(a.cfg, store)
	if err != nil {
		return 0, err
	}
	var written int64
	stage := func(out *cdc.Output) error {
		if out.Refresh || len(out.DeadLetters) > 0 {
			return errors.New("a snapshot's events need no refresh and make no dead letters")
		}
		written += int64(out.Upserts.Len())
		return writeOutput(ctx, ld, a.flow.Target, out)
	}
	// The version's barrier first, alone: for SCD type 1 a truncate at
	// it, for SCD type 2 the delete at it of the keys first seen later.
	barrier := cdc.OpTruncate
	if a.flow.StoredAsSCDType == 2 {
		barrier = cdc.OpSnapshot
	}
	in := cdc.Input{Batch: batch.New(a.withVersion, 1), Now: now, Ops: []cdc.Op{barrier}, Positions: []cdc.Position{a.position(0)}}
	for c := range a.src.Columns {
		in.Batch.Vectors[c].AppendNull()
	}
	a.version.value.AppendTo(in.Batch.Vectors[len(a.src.Columns)], 1)
	out, err := eng.Apply(ctx, in)
	if err != nil {
		return 0, err
	}
	if err := stage(out); err != nil {
		return 0, err
	}
	if out.Table != nil {
		// The buckets apply under the barrier this load sets.
		if eng, err = cdc.New(a.cfg, layered{base: store, top: []*pendingOutput{{table: out.Table}}}); err != nil {
			return 0, err
		}
	}
	deletes := a.rows.rows + 1 // delete offsets follow the rows'
	buckets := a.buckets()
	a.r.log.Info("snapshot applying", "flow", a.flow.Name, "version", a.version.text, "rows", a.rows.rows, "buckets", len(buckets))
	for b, parts := range buckets {
		in, fresh, err := a.bucketInput(parts[0], parts[1], &deletes)
		if err != nil {
			return 0, err
		}
		in.Now = now
		out, err := eng.Apply(ctx, in)
		if err != nil {
			return 0, err
		}
		if a.kids != nil {
			// The child rows first, as every load writes them.
			if err := a.writeKids(ctx, ld, parts[0], parts[1], fresh, out); err != nil {
				return 0, err
			}
		}
		if err := stage(out); err != nil {
			return 0, err
		}
		if h := snapshotBucketHook.Load(); h != nil {
			if err := (*h)(b); err != nil {
				return 0, err
			}
		}
	}
	return written, nil
}

// position is the position of the snapshot's event at offset: the
// truncate at 0, row i of the snapshot at i+1, then the deletes.
func (a *snapshotApply) position(offset int64) cdc.Position {
	return cdc.Position{Flow: a.flow.Name, File: a.version.text, Offset: offset}
}

// bucketInput reads the parts [from, to) back as the engine's input: an
// upsert of every snapshot row, and (SCD type 2) a delete of every current
// key the snapshot lacks. A key twice in the snapshot is ErrDuplicateKey.
// With lists, it also returns the rows given a new id, by ordinal
// (assignIDs).
func (a *snapshotApply) bucketInput(from, to int, deletes *int64) (in cdc.Input, fresh map[int64]string, err error) {
	in, ords, err := a.bucketRows(from, to, deletes)
	if err != nil || a.kids == nil {
		return in, nil, err
	}
	fresh, err = a.assignIDs(&in, from, to, ords)
	return in, fresh, err
}

// bucketRows is bucketInput without the ids, and the ordinals of the
// snapshot's rows in it.
func (a *snapshotApply) bucketRows(from, to int, deletes *int64) (cdc.Input, []int64, error) {
	n := a.rows.rowsIn(from, to)
	if a.keys != nil {
		n += a.keys.rowsIn(from, to)
	}
	in := cdc.Input{Batch: batch.New(a.withVersion, int(n))}
	var ords []int64
	for p := from; p < to; p++ {
		var err error
		if ords, err = a.rows.read(p, in.Batch, ords); err != nil {
			return in, ords, err
		}
	}
	vv := in.Batch.Vectors[len(a.src.Columns)]
	a.version.value.AppendTo(vv, len(ords))
	in.Ops = make([]cdc.Op, len(ords), n)
	in.Positions = make([]cdc.Position, len(ords), n)
	seen := make(map[string]int64, len(ords))
	for i, ord := range ords {
		k, err := a.keyer.KeyOf(in.Batch, i)
		if err != nil {
			return in, ords, err
		}
		if prev, dup := seen[k]; dup {
			return in, ords, fmt.Errorf("%w (rows %d and %d): nothing of it applied", ErrDuplicateKey, min(prev, ord)+1, max(prev, ord)+1)
		}
		seen[k] = ord
		in.Ops[i] = cdc.OpUpsert
		in.Positions[i] = a.position(ord + 1)
	}
	if a.keys == nil {
		return in, ords, nil
	}
	cur := batch.New(a.keySchema, int(a.keys.rowsIn(from, to)))
	for p := from; p < to; p++ {
		var err error
		if _, err = a.keys.read(p, cur, nil); err != nil {
			return in, ords, err
		}
	}
	// Every current key the snapshot lacks is deleted at the version: its
	// key columns, the other columns null.
	keyCol := make([]*batch.Vector, len(a.src.Columns))
	for c, col := range a.src.Columns {
		keyCol[c] = cur.Column(col.Name)
	}
	for i := range cur.Len() {
		k, err := a.keyer.KeyOf(cur, i)
		if err != nil {
			return in, ords, err
		}
		if _, ok := seen[k]; ok {
			continue // held by the snapshot, or a key of several versions
		}
		seen[k] = -1
		for c, v := range keyCol {
			if v != nil {
				in.Batch.Vectors[c].AppendFrom(v, i)
			} else {
				in.Batch.Vectors[c].AppendNull()
			}
		}
		a.version.value.AppendTo(vv, 1)
		in.Ops = append(in.Ops, cdc.OpDelete)
		in.Positions = append(in.Positions, a.position(*deletes))
		*deletes++
	}
	return in, ords, nil
}
