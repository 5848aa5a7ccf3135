package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/bits"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/local/fsys"
)

// Bucket sizing of CDC targets.
const (
	// DefaultBucketRows is Options.BucketRows' default.
	DefaultBucketRows = 1 << 16
	// maxBuckets bounds the buckets of a table (and so its files per
	// partition folder); past it, buckets grow instead.
	maxBuckets = 1 << 12
)

// bucketHash hashes an encoded key: FNV-1a, then a 64-bit finalizer so
// that the low bits, which pick the bucket, mix every byte. It is part of
// the on-disk format: changing it misplaces every stored row.
func bucketHash(key string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// bucketOf returns the bucket of a hash among n, a power of two.
func bucketOf(h uint64, n int) int { return int(h & uint64(n-1)) }

// bucketsFor returns the bucket count of a table of rows rows that has n:
// n until the buckets average twice target rows, then the power of two
// that brings them back to target (at most maxBuckets). Growing by powers
// of two splits each bucket into several: a row's new bucket is its old one
// plus a multiple of n.
func bucketsFor(n int, rows int64, target int) int {
	n = max(n, 1)
	if target <= 0 || n >= maxBuckets || rows <= 2*int64(target)*int64(n) {
		return n
	}
	want := (rows + int64(target) - 1) / int64(target)
	next := 1 << bits.Len64(uint64(want-1))
	return max(n, min(next, maxBuckets))
}

// ident is a CDC row's identity: the key, and for SCD type 2 the sequence
// (__START_AT).
type ident struct{ key, seq string }

// cdcChanges are a load's staged changes of one CDC target, read back.
type cdcChanges struct {
	scd2     bool
	trunc    string
	hasTrunc bool
	up       *batch.Batch // the table's columns
	upKeys   []string
	upSeqs   []string
	upRows   []int // the rows of up that count, ascending: the last upsert of each identity
	// gone holds the identities of the rows the load removes or replaces,
	// distinct and in identity order (compareIdent; an SCD type 1
	// identity is its key, with an empty sequence). Files keep their rows
	// in that order too, so a rewrite finds them with a goneCursor by
	// merging rather than one hash lookup per row.
	gone []ident
}

// readChanges reads a load's staged changes of table (staged under the
// load's id) as entry ce describes them, with the table's current columns.
// The upserts are taken from staged instead of the staged file when the
// caller has them (upsertSchema(def.Schema) and ce.Upserts rows).
func (s *Sink) readChanges(loadID, table string, def tableDef, ce *cdcEntry, staged *batch.Batch) (*cdcChanges, error) {
	var rmKeys, rmSeqs []string
	if ce.Removes > 0 {
		p, err := readPairs(s.disk, s.lay.stagedRemoves(loadID, table))
		if err != nil {
			return nil, err
		}
		if int64(p.len()) != ce.Removes {
			return nil, fmt.Errorf("%s: %d removals, the ledger says %d", s.lay.stagedRemoves(loadID, table), p.len(), ce.Removes)
		}
		rmKeys, rmSeqs = p.a, p.b
	}
	n := len(def.Schema.Columns)
	b, from := staged, "the load's staged rows"
	if b == nil {
		b, from = batch.New(upsertSchema(def.Schema), int(ce.Upserts)), s.lay.stagedUpserts(loadID, table)
		if ce.Upserts > 0 {
			if err := readFile(s.disk, from, b, nil); err != nil {
				return nil, err
			}
		}
	}
	if int64(b.Len()) != ce.Upserts {
		return nil, fmt.Errorf("%s: %d upserts, the ledger says %d", from, b.Len(), ce.Upserts)
	}
	c := newChanges(def.Kind == sinks.KindSCD2, rmKeys, rmSeqs, b.Vectors[n].Strs, b.Vectors[n+1].Strs)
	c.up = &batch.Batch{Schema: def.Schema, Vectors: b.Vectors[:n]}
	if ce.Truncate != nil {
		c.trunc, c.hasTrunc = string(ce.Truncate), true
	}
	return c, nil
}

// newChanges returns the changes of removed identities rmKeys, rmSeqs and
// upserts of identities upKeys, upSeqs (the rows of up, which the caller
// sets): the later upsert of an identity wins.
func newChanges(scd2 bool, rmKeys, rmSeqs, upKeys, upSeqs []string) *cdcChanges {
	c := &cdcChanges{scd2: scd2, upKeys: upKeys, upSeqs: upSeqs}
	ups := c.sortedIdents(upKeys, upSeqs)
	c.upRows = make([]int, 0, len(ups))
	upIDs := make([]ident, 0, len(ups))
	for j, i := range ups {
		// The rows of an identity are in row order: its last is the last.
		if j+1 < len(ups) && c.compare(upKeys[ups[j+1]], upSeqs[ups[j+1]], upKeys[i], upSeqs[i]) == 0 {
			continue
		}
		c.upRows = append(c.upRows, i)
		upIDs = append(upIDs, c.id(upKeys[i], upSeqs[i]))
	}
	slices.Sort(c.upRows)
	rms := c.sortedIdents(rmKeys, rmSeqs)
	c.gone = make([]ident, 0, len(upIDs)+len(rms))
	add := func(id ident) {
		if n := len(c.gone); n == 0 || c.gone[n-1] != id {
			c.gone = append(c.gone, id)
		}
	}
	// Merge the two ordered lists, dropping repeats.
	j := 0
	for _, r := range rms {
		rid := c.id(rmKeys[r], rmSeqs[r])
		for j < len(upIDs) && compareIdent(upIDs[j].key, upIDs[j].seq, rid.key, rid.seq) < 0 {
			add(upIDs[j])
			j++
		}
		add(rid)
	}
	for ; j < len(upIDs); j++ {
		add(upIDs[j])
	}
	return c
}

// id returns the identity of a row: for SCD type 1 its key alone.
func (c *cdcChanges) id(key, seq string) ident {
	if c.scd2 {
		return ident{key, seq}
	}
	return ident{key: key}
}

// compare orders two rows by identity.
func (c *cdcChanges) compare(k1, s1, k2, s2 string) int {
	if !c.scd2 {
		return strings.Compare(k1, k2)
	}
	return compareIdent(k1, s1, k2, s2)
}

// sortedIdents returns the indexes of identities keys, seqs in identity
// order, equal ones in index order. The engine stages its rows in that
// order already: then it only checks.
func (c *cdcChanges) sortedIdents(keys, seqs []string) []int {
	order := make([]int, len(keys))
	sorted := true
	for i := range order {
		order[i] = i
		if i > 0 && c.compare(keys[i-1], seqs[i-1], keys[i], seqs[i]) > 0 {
			sorted = false
		}
	}
	if !sorted {
		slices.SortStableFunc(order, func(a, b int) int { return c.compare(keys[a], seqs[a], keys[b], seqs[b]) })
	}
	return order
}

// goneCursor finds the rows a load removes or replaces among a file's
// rows, read in order: gone is the changes' identities of the file's
// bucket, in identity order. A file's rows are in identity order (every
// file this package writes is), so finding them all costs one pass over
// both; a row out of order is looked up by binary search instead.
type goneCursor struct {
	gone          []ident
	scd2          bool
	i             int
	prev, prevSeq string
	started       bool
}

// has reports whether the row of identity (key, seq) is gone.
func (g *goneCursor) has(key, seq string) bool {
	if !g.scd2 {
		seq = ""
	}
	if g.started && compareIdent(key, seq, g.prev, g.prevSeq) < 0 {
		g.i, _ = slices.BinarySearchFunc(g.gone, ident{key, seq}, func(a, b ident) int { return compareIdent(a.key, a.seq, b.key, b.seq) })
	}
	g.prev, g.prevSeq, g.started = key, seq, true
	for g.i < len(g.gone) && compareIdent(g.gone[g.i].key, g.gone[g.i].seq, key, seq) < 0 {
		g.i++
	}
	return g.i < len(g.gone) && g.gone[g.i].key == key && g.gone[g.i].seq == seq
}

// upsertSchema is the schema of a load's staged upserts: the table's
// columns, then each row's encoded key and sequence.
func upsertSchema(s batch.Schema) batch.Schema {
	return batch.Schema{Columns: append(slices.Clone(s.Columns),
		batch.Column{Name: "_sluice_key", Type: batch.String}, batch.Column{Name: "_sluice_seq", Type: batch.String})}
}

// cdcPlan is a load's change of a CDC target's files, built against
// version Base: the files it drops and those it adds (written under the
// plan's folder, data/<name> and ids/<name>.ids). Bucket files are named
// b<bucket>-<version>.parquet, in their partition folder.
type cdcPlan struct {
	Base    int64       `json:"base"`
	Buckets int         `json:"buckets"`
	Drop    []string    `json:"drop"`
	Add     []fileEntry `json:"add"`
}

const planFile = "plan.json"

// outKey names an output file: a bucket in a partition folder, and for a
// split SCD type 2 target its current file or a history file: the load's
// new one (of 0), the one replacing the bucket's history file number of
// (1-based), or, for of one past the bucket's history files, the one its
// merged history files make.
type outKey struct {
	bucket int
	dir    string
	hist   bool
	of     int
}

// bucketOut is a bucket file being made, with its sidecar: the segments
// of rows it receives are merged in identity order when it is finished.
type bucketOut struct {
	entry fileEntry
	fw    *fileWriter
	ids   *pairsWriter
	segs  []segment
}

// segment is rows bound for an output file, with their identities: row
// rows[i] of b (row i when rows is nil) has identity keys[i], seqs[i].
type segment struct {
	b          *batch.Batch
	rows       []int
	keys, seqs []string
}

// planner builds a cdcPlan.
type planner struct {
	s       *Sink
	table   string
	def     tableDef
	cur     manifest
	ch      *cdcChanges
	out     string // the plan's folder
	n, newN int
	part    *partitioner
	// endAt is the column of __END_AT when the target's files are split
	// into current and history (scd2.go), else -1.
	endAt int
	// goneBy holds the identities the changes remove or replace by
	// current bucket, each in identity order.
	goneBy map[int][]ident
	mu     sync.Mutex      // guards dirs: groups are rewritten concurrently
	dirs   map[string]bool // folders made under out
	plan   cdcPlan
	syncer *fileSyncer // syncs the files written
}

// planPart is what rewriting one group (or creating one new bucket)
// contributes to the plan; the parts are joined in group order, so that a
// plan does not depend on which rewrite finished first.
type planPart struct {
	drop []string
	add  []fileEntry
}

// rewriteWorkers bounds the groups rewritten at once: each holds one
// bucket's rows in memory.
func rewriteWorkers() int { return max(1, min(runtime.GOMAXPROCS(0), 4)) }

// buildPlan applies changes to the current version cur of a CDC target:
// it rewrites only the files the changes touch (those holding a removed,
// replaced or truncated row, or receiving upserts), or every file when the
// table outgrows its buckets, into the folder out. The plan is written to
// out/plan.json, and everything is synced.
func (s *Sink) buildPlan(ctx context.Context, table string, def tableDef, cur manifest, ch *cdcChanges, out string) (*cdcPlan, error) {
	if err := s.disk.RemoveAll(out); err != nil {
		return nil, err
	}
	for _, d := range []string{filepath.Join(out, "data"), filepath.Join(out, "ids")} {
		if err := s.disk.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("plan: %w", err)
		}
	}
	p := &planner{s: s, table: table, def: def, cur: cur, ch: ch, out: out, n: max(cur.Buckets, 1), dirs: map[string]bool{},
		endAt: splitColumn(def), syncer: newFileSyncer()}
	var rows int64
	for _, f := range cur.Files {
		rows += f.Rows
	}
	p.newN = bucketsFor(p.n, rows+int64(len(ch.upRows)), s.opts.BucketRows)
	p.plan = cdcPlan{Base: cur.Version, Buckets: p.newN}
	if len(def.PartitionBy) > 0 {
		var err error
		if p.part, err = newPartitioner(def.Schema, def.PartitionBy); err != nil {
			return nil, err
		}
	}
	err := p.run(ctx)
	if serr := p.syncer.wait(); err == nil {
		err = serr
	}
	if err != nil {
		return nil, err
	}
	if err := p.sync(); err != nil {
		return nil, err
	}
	data, err := json.Marshal(p.plan)
	if err != nil {
		return nil, err
	}
	if err := writeFileSync(s.disk, filepath.Join(out, planFile), data); err != nil {
		return nil, err
	}
	if err := s.disk.SyncDir(out); err != nil {
		return nil, err
	}
	return &p.plan, nil
}

func (p *planner) run(ctx context.Context) error {
	ch := p.ch
	rebucket := p.newN != p.n
	// The upserts by output file, and the buckets (of the current count)
	// that changes touch.
	targets := map[outKey][]int{}
	var order []outKey
	byGroup := map[outKey][]outKey{} // output files by the current bucket they come from
	touched := map[int]bool{}
	upDirs := make([]string, len(ch.upRows))
	if p.part != nil && len(ch.upRows) > 0 {
		dirs, rows, err := p.part.split(take(ch.up, ch.upRows))
		if err != nil {
			return err
		}
		for d, rs := range rows {
			for _, r := range rs {
				upDirs[r] = dirs[d]
			}
		}
	}
	for i, r := range ch.upRows {
		h := bucketHash(ch.upKeys[r])
		touched[bucketOf(h, p.n)] = true
		k := outKey{bucket: bucketOf(h, p.newN), dir: upDirs[i]}
		if _, ok := targets[k]; !ok {
			order = append(order, k)
			g := outKey{bucket: bucketOf(h, p.n), dir: k.dir}
			byGroup[g] = append(byGroup[g], k)
		}
		targets[k] = append(targets[k], r)
	}
	// goneBy: each bucket's part of ch.gone, in one backing array.
	goneB := make([]int32, len(ch.gone))
	counts := make([]int, p.n)
	for i, id := range ch.gone {
		b := bucketOf(bucketHash(id.key), p.n)
		goneB[i] = int32(b)
		counts[b]++
	}
	p.goneBy = make(map[int][]ident, p.n)
	backing := make([]ident, 0, len(ch.gone))
	for b, c := range counts {
		if c > 0 {
			touched[b] = true
			p.goneBy[b] = backing[len(backing) : len(backing) : len(backing)+c]
			backing = backing[:len(backing)+c]
		}
	}
	for i, id := range ch.gone {
		b := int(goneB[i])
		p.goneBy[b] = append(p.goneBy[b], id) // in identity order, as ch.gone
	}

	// The current files by output file (one per bucket and folder; kept
	// general should a version ever hold several).
	groups := map[outKey][]fileEntry{}
	var keys []outKey
	for _, f := range p.cur.Files {
		k := outKey{bucket: f.Bucket, dir: dirOf(f.Name)}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], f)
	}
	done := map[outKey]bool{}
	var jobs []func(*planPart) error
	for _, k := range keys {
		files := groups[k]
		affected := rebucket || touched[k.bucket]
		for _, f := range files {
			affected = affected || (ch.hasTrunc && string(f.MinSeq) < ch.trunc)
		}
		if !affected {
			continue
		}
		// The upserts that land in this group's files: its bucket, or when
		// the buckets grow, the buckets it splits into.
		mine := byGroup[k]
		jobs = append(jobs, func(part *planPart) error { return p.rewrite(k, files, mine, targets, rebucket, part) })
		for _, t := range mine {
			done[t] = true
		}
	}
	// Upserts into buckets (or folders) that have no file yet.
	for _, t := range order {
		if done[t] {
			continue
		}
		jobs = append(jobs, func(part *planPart) error {
			outs := map[outKey]*bucketOut{}
			rs := targets[t]
			if err := p.put(p.getter(outs), t, take(ch.up, rs), nil, gather(ch.upKeys, rs), gather(ch.upSeqs, rs), false); err != nil {
				for _, o := range outs {
					o.discard()
				}
				return err
			}
			return p.finishAll(outs, part)
		})
	}
	parts, err := runJobs(ctx, jobs, rewriteWorkers())
	if err != nil {
		return err
	}
	for _, part := range parts {
		p.plan.Drop = append(p.plan.Drop, part.drop...)
		p.plan.Add = append(p.plan.Add, part.add...)
	}
	return nil
}

// runJobs runs jobs on up to workers goroutines, each into its own part;
// the first error (or the context's) stops the jobs not yet started.
func runJobs(ctx context.Context, jobs []func(*planPart) error, workers int) ([]planPart, error) {
	parts := make([]planPart, len(jobs))
	var (
		wg    sync.WaitGroup
		next  atomic.Int64
		mu    sync.Mutex
		first error
	)
	failed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return first != nil
	}
	for range min(workers, len(jobs)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(jobs) || failed() {
					return
				}
				err := ctx.Err()
				if err == nil {
					err = jobs[i](&parts[i])
				}
				if err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return parts, first
}

// rewrite replaces the files of one bucket and folder: their rows minus
// those the changes remove or replace, plus the upserts of mine. A group
// that loses no row and gains none is left as it is (unless rebucketing).
// Of a split SCD type 2 target's group, the current file is rewritten and
// the history files only as scd2.go says; the others stay.
func (p *planner) rewrite(k outKey, files []fileEntry, mine []outKey, targets map[outKey][]int, rebucket bool, part *planPart) error {
	ch := p.ch
	type kept struct {
		f          fileEntry
		ids        *pairs
		keep       []int
		everything bool
	}
	// scan reads a file's identities and picks the rows that stay; with
	// cur set, it notes the greatest sequence of cur's keys.
	scan := func(f fileEntry, cur map[string]seqAt) (kept, error) {
		ids, err := readPairs(p.s.disk, filepath.Join(p.s.lay.idsDir(p.table, p.cur.Version), f.Name+idsSuffix))
		if err != nil {
			return kept{}, err
		}
		if int64(ids.len()) != f.Rows {
			return kept{}, fmt.Errorf("%s: %d identities for %d rows", f.Name, ids.len(), f.Rows)
		}
		keep := make([]int, 0, ids.len())
		gone := goneCursor{gone: p.goneBy[k.bucket], scd2: ch.scd2}
		for i := range ids.a {
			key, seq := ids.a[i], ids.b[i]
			if cur != nil {
				if c, ok := cur[key]; ok && (!c.ok || seq > c.seq) {
					cur[key] = seqAt{seq, true}
				}
			}
			if ch.hasTrunc && seq < ch.trunc {
				continue
			}
			if gone.has(key, seq) {
				continue
			}
			keep = append(keep, i)
		}
		return kept{f, ids, keep, len(keep) == ids.len()}, nil
	}
	var curFiles, histFiles []fileEntry
	for _, f := range files {
		if f.Kind == kindHistory {
			histFiles = append(histFiles, f)
		} else {
			curFiles = append(curFiles, f)
		}
	}
	var ks []kept // the files rewritten
	changed := rebucket || len(mine) > 0 || len(curFiles) > 1
	var curSeqs map[string]seqAt
	if len(histFiles) > 0 && !rebucket {
		curSeqs = make(map[string]seqAt, len(p.goneBy[k.bucket]))
		for _, id := range p.goneBy[k.bucket] {
			curSeqs[id.key] = seqAt{}
		}
	}
	for _, f := range curFiles {
		x, err := scan(f, curSeqs)
		if err != nil {
			return err
		}
		// A file holding both kinds is split when its bucket is touched.
		changed = changed || !x.everything || (p.endAt >= 0 && f.Kind == kindMixed)
		ks = append(ks, x)
	}
	nCur := len(ks)
	// replace maps history files read (by index into ks) to the output
	// their rows go to (outKey.of); those it lacks join the load's new
	// history file.
	var replace map[int]int
	if len(histFiles) > 0 {
		var cands []ident
		if curSeqs != nil {
			cands = historyCandidates(p.goneBy[k.bucket], curSeqs)
		}
		var stay, lost []int      // history files kept as they are, and those that lose rows
		at := map[int]int{}       // index into histFiles of a file that loses rows -> into ks
		scanned := map[int]kept{} // the files kept that were scanned
		for i, f := range histFiles {
			read := rebucket || (ch.hasTrunc && string(f.MinSeq) < ch.trunc) || mayHold(f, cands)
			if !read {
				stay = append(stay, i)
				continue
			}
			x, err := scan(f, nil)
			if err != nil {
				return err
			}
			if !rebucket && x.everything {
				stay = append(stay, i)
				scanned[i] = x
				continue
			}
			changed = true
			lost = append(lost, i)
			at[i] = len(ks)
			ks = append(ks, x)
		}
		if changed {
			replace = map[int]int{}
			of := historyOutputs(histFiles, stay, lost, rebucket)
			for _, i := range slices.Sorted(maps.Keys(of)) {
				j, ok := at[i]
				if !ok { // a file that stays as it is, merged
					x, ok := scanned[i]
					if !ok {
						var err error
						if x, err = scan(histFiles[i], nil); err != nil {
							return err
						}
					}
					j = len(ks)
					ks = append(ks, x)
				}
				replace[j] = of[i]
			}
		}
	}
	if !changed {
		return nil
	}
	outs := map[outKey]*bucketOut{}
	get := p.getter(outs)
	fail := func(err error) error {
		for _, o := range outs {
			o.discard()
		}
		return err
	}
	for j, x := range ks {
		part.drop = append(part.drop, x.f.Name)
		if len(x.keep) == 0 {
			continue
		}
		b := batch.New(p.def.Schema, int(x.f.Rows))
		if err := readFile(p.s.disk, filepath.Join(p.s.lay.versionDir(p.table, p.cur.Version), x.f.Name), b, nil); err != nil {
			return fail(err)
		}
		if int64(b.Len()) != x.f.Rows {
			return fail(fmt.Errorf("%s: %d rows, the manifest says %d", x.f.Name, b.Len(), x.f.Rows))
		}
		var sel []int // the rows of b that stay (nil: every row), gathered by finish
		if !x.everything {
			sel = x.keep
		}
		keys, seqs := gather(x.ids.a, x.keep), gather(x.ids.b, x.keep)
		closed := j >= nCur // a history file's rows
		// Split by bucket when the buckets grow.
		split := map[int][]int{}
		var bs []int
		for i, key := range keys {
			nb := k.bucket
			if rebucket {
				nb = bucketOf(bucketHash(key), p.newN)
			}
			if _, ok := split[nb]; !ok {
				bs = append(bs, nb)
			}
			split[nb] = append(split[nb], i)
		}
		for _, nb := range bs {
			t := outKey{bucket: nb, dir: k.dir, of: replace[j]}
			rs := split[nb]
			var err error
			if len(rs) == len(keys) {
				err = p.put(get, t, b, sel, keys, seqs, closed)
			} else {
				rows := rs
				if sel != nil {
					rows = gather(sel, rs)
				}
				err = p.put(get, t, b, rows, gather(keys, rs), gather(seqs, rs), closed)
			}
			if err != nil {
				return fail(err)
			}
		}
	}
	for _, t := range mine {
		rs := targets[t]
		if err := p.put(get, t, take(ch.up, rs), nil, gather(ch.upKeys, rs), gather(ch.upSeqs, rs), false); err != nil {
			return fail(err)
		}
	}
	return p.finishAll(outs, part)
}

// getter returns a function that returns the output of outs for a key,
// created on first use.
func (p *planner) getter(outs map[outKey]*bucketOut) func(outKey) (*bucketOut, error) {
	return func(t outKey) (*bucketOut, error) {
		if o := outs[t]; o != nil {
			return o, nil
		}
		o, err := p.create(t)
		if err == nil {
			outs[t] = o
		}
		return o, err
	}
}

// finishAll finishes the outputs in bucket order, current before history;
// on an error the others are discarded.
func (p *planner) finishAll(outs map[outKey]*bucketOut, part *planPart) error {
	ts := make([]outKey, 0, len(outs))
	for t := range outs {
		ts = append(ts, t)
	}
	slices.SortFunc(ts, func(a, b outKey) int {
		if a.bucket != b.bucket {
			return a.bucket - b.bucket
		}
		if a.hist != b.hist {
			if a.hist {
				return 1
			}
			return -1
		}
		if a.of != b.of {
			return a.of - b.of
		}
		return strings.Compare(a.dir, b.dir)
	})
	for i, t := range ts {
		if err := p.finish(outs[t], part); err != nil {
			for _, u := range ts[i+1:] {
				outs[u].discard()
			}
			return err
		}
	}
	return nil
}

// create starts the file of an output bucket.
func (p *planner) create(t outKey) (*bucketOut, error) {
	prefix, kind := "b", kindMixed
	if p.endAt >= 0 {
		kind = kindCurrent
		if t.hist {
			prefix, kind = "h", kindHistory
		}
	}
	name := path.Join(t.dir, fmt.Sprintf("%s%05d-%012d.parquet", prefix, t.bucket, p.cur.Version+1))
	if t.of > 0 {
		name = path.Join(t.dir, fmt.Sprintf("%s%05d-%012d-%d.parquet", prefix, t.bucket, p.cur.Version+1, t.of))
	}
	if t.dir != "" {
		p.mu.Lock()
		if !p.dirs[t.dir] {
			for _, sub := range []string{"data", "ids"} {
				if err := p.s.disk.MkdirAll(filepath.Join(p.out, sub, filepath.FromSlash(t.dir)), 0o755); err != nil {
					p.mu.Unlock()
					return nil, err
				}
			}
			for d := t.dir; d != "." && !p.dirs[d]; d = path.Dir(d) {
				p.dirs[d] = true
			}
		}
		p.mu.Unlock()
	}
	fw, err := createPlainFile(p.s.disk, filepath.Join(p.out, "data", filepath.FromSlash(name)), p.def.Schema, loadCodec)
	if err != nil {
		return nil, err
	}
	ids, err := createPairs(p.s.disk, filepath.Join(p.out, "ids", filepath.FromSlash(name)+idsSuffix))
	if err != nil {
		fw.discard()
		return nil, err
	}
	return &bucketOut{entry: fileEntry{Name: name, Bucket: t.bucket, Kind: kind}, fw: fw, ids: ids}, nil
}

// writeSel adds rows of b to the output: row rows[i] (or i when rows is
// nil) with identity keys[i], seqs[i]. Selecting rather than copying them
// out of b saves a copy of every row a rewrite keeps.
func (o *bucketOut) writeSel(b *batch.Batch, rows []int, keys, seqs []string) error {
	if len(keys) > 0 {
		o.segs = append(o.segs, segment{b: b, rows: rows, keys: keys, seqs: seqs})
	}
	return nil
}

// compareIdent orders identities: by key, then sequence, bytewise (the
// order of the values they encode).
func compareIdent(k1, s1, k2, s2 string) int {
	if c := strings.Compare(k1, k2); c != 0 {
		return c
	}
	return strings.Compare(s1, s2)
}

// rowRef is a row of one of an output's segments.
type rowRef struct{ seg, row int32 }

// merged returns the rows of the segments in identity order: each segment
// sorted (those written by this package already are), then merged.
func merged(segs []segment) []rowRef {
	heads := make([][]int32, len(segs))
	n := 0
	for i, sg := range segs {
		order := make([]int32, len(sg.keys))
		sorted := true
		for r := range order {
			order[r] = int32(r)
			if r > 0 && compareIdent(sg.keys[r-1], sg.seqs[r-1], sg.keys[r], sg.seqs[r]) > 0 {
				sorted = false
			}
		}
		if !sorted {
			slices.SortStableFunc(order, func(a, b int32) int { return compareIdent(sg.keys[a], sg.seqs[a], sg.keys[b], sg.seqs[b]) })
		}
		heads[i] = order
		n += len(order)
	}
	// A k-way merge: a binary heap of the segments by their next row
	// (ties by segment, as the output of a stable merge).
	less := func(i, j int) bool {
		a, b := heads[i][0], heads[j][0]
		if c := compareIdent(segs[i].keys[a], segs[i].seqs[a], segs[j].keys[b], segs[j].seqs[b]); c != 0 {
			return c < 0
		}
		return i < j
	}
	h := make([]int, 0, len(segs))
	for i := range segs {
		if len(heads[i]) > 0 {
			h = append(h, i)
		}
	}
	down := func(at int) {
		for {
			l, m := 2*at+1, at
			if l < len(h) && less(h[l], h[m]) {
				m = l
			}
			if r := l + 1; r < len(h) && less(h[r], h[m]) {
				m = r
			}
			if m == at {
				return
			}
			h[at], h[m] = h[m], h[at]
			at = m
		}
	}
	for i := len(h)/2 - 1; i >= 0; i-- {
		down(i)
	}
	out := make([]rowRef, 0, n)
	for len(h) > 0 {
		best := h[0]
		out = append(out, rowRef{int32(best), heads[best][0]})
		if heads[best] = heads[best][1:]; len(heads[best]) == 0 {
			h[0] = h[len(h)-1]
			h = h[:len(h)-1]
		}
		down(0)
	}
	return out
}

// gatherRows builds a batch of schema from rows of the segments.
func gatherRows(schema batch.Schema, segs []segment, refs []rowRef) *batch.Batch {
	out := &batch.Batch{Schema: schema, Vectors: make([]*batch.Vector, len(schema.Columns))}
	for c, col := range schema.Columns {
		if col.Type.Kind == batch.KindArray {
			w := batch.NewVector(col.Type, len(refs))
			for _, r := range refs {
				w.AppendFrom(segs[r.seg].b.Vectors[c], int(r.row))
			}
			out.Vectors[c] = w
			continue
		}
		w := &batch.Vector{Type: col.Type}
		for _, sg := range segs {
			if sg.b.Vectors[c].Nulls != nil {
				w.Nulls = make([]bool, len(refs))
				break
			}
		}
		if w.Nulls != nil {
			for i, r := range refs {
				w.Nulls[i] = segs[r.seg].b.Vectors[c].IsNull(int(r.row))
			}
		}
		switch col.Type.Kind {
		case batch.KindInt64, batch.KindTimestamp, batch.KindDate:
			w.Ints = gatherFrom(segs, refs, c, func(v *batch.Vector) []int64 { return v.Ints })
		case batch.KindFloat64:
			w.Floats = gatherFrom(segs, refs, c, func(v *batch.Vector) []float64 { return v.Floats })
		case batch.KindBool:
			w.Bools = gatherFrom(segs, refs, c, func(v *batch.Vector) []bool { return v.Bools })
		case batch.KindString:
			w.Strs = gatherFrom(segs, refs, c, func(v *batch.Vector) []string { return v.Strs })
		case batch.KindBytes:
			w.Bytes = gatherFrom(segs, refs, c, func(v *batch.Vector) [][]byte { return v.Bytes })
		case batch.KindDecimal:
			w.Decs = gatherFrom(segs, refs, c, func(v *batch.Vector) []batch.Dec128 { return v.Decs })
		}
		out.Vectors[c] = w
	}
	return out
}

func gatherFrom[T any](segs []segment, refs []rowRef, c int, vals func(*batch.Vector) []T) []T {
	src := make([][]T, len(segs))
	for i, sg := range segs {
		src[i] = vals(sg.b.Vectors[c])
	}
	out := make([]T, len(refs))
	for i, r := range refs {
		out[i] = src[r.seg][r.row]
	}
	return out
}

// discard closes an output's files unfinished.
func (o *bucketOut) discard() {
	o.fw.discard()
	o.ids.discard()
}

// finish closes an output's files and adds it to the plan part (an output
// that received no row is removed).
func (p *planner) finish(o *bucketOut, part *planPart) error {
	refs := merged(o.segs)
	if len(refs) > 0 {
		minSeq, maxSeq := "", ""
		for i, r := range refs {
			sg := o.segs[r.seg]
			seq := sg.seqs[r.row]
			o.ids.add(sg.keys[r.row], seq)
			if i == 0 || seq < minSeq {
				minSeq = seq
			}
			if i == 0 || seq > maxSeq {
				maxSeq = seq
			}
		}
		// From identities to the rows of the segments' batches.
		for i, r := range refs {
			if sel := o.segs[r.seg].rows; sel != nil {
				refs[i].row = int32(sel[r.row])
			}
		}
		rows := gatherRows(p.def.Schema, o.segs, refs)
		o.entry.Rows = int64(len(refs))
		o.entry.MinSeq = []byte(minSeq)
		if o.entry.Kind != kindMixed {
			o.entry.MaxSeq = []byte(maxSeq)
		}
		o.segs = nil
		if err := o.fw.write(rows); err != nil {
			o.fw.discard()
			o.ids.discard()
			return err
		}
	}
	size, err := o.fw.closeTo(p.syncer)
	if err != nil {
		o.ids.discard()
		return err
	}
	n, err := o.ids.closeTo(p.syncer)
	if err != nil {
		return err
	}
	if n != o.entry.Rows {
		return fmt.Errorf("%s: %d identities for %d rows", o.entry.Name, n, o.entry.Rows)
	}
	if o.entry.Rows == 0 {
		p.s.disk.Remove(filepath.Join(p.out, "data", filepath.FromSlash(o.entry.Name)))
		p.s.disk.Remove(filepath.Join(p.out, "ids", filepath.FromSlash(o.entry.Name)+idsSuffix))
		return nil
	}
	o.entry.Bytes = size
	part.add = append(part.add, o.entry)
	return nil
}

// sync makes the plan's folders durable, deepest first.
func (p *planner) sync() error {
	dirs := make([]string, 0, len(p.dirs)+1)
	for d := range p.dirs {
		dirs = append(dirs, d)
	}
	slices.SortFunc(dirs, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	for _, sub := range []string{"data", "ids"} {
		for _, d := range append(dirs, ".") {
			if err := p.s.disk.SyncDir(filepath.Join(p.out, sub, filepath.FromSlash(d))); err != nil {
				return err
			}
		}
	}
	return nil
}

// dirOf returns the partition folder of a file name ("" when none).
func dirOf(name string) string {
	if d := path.Dir(name); d != "." {
		return d
	}
	return ""
}

// readPlan reads a prepared plan; nil when it does not exist.
func readPlan(disk fsys.FS, dir string) (*cdcPlan, error) {
	data, err := disk.ReadFile(filepath.Join(dir, planFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var p cdcPlan
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, planFile), err)
	}
	return &p, nil
}

// applyPlan publishes a plan built in dir on cur as the table's next
// version, holding every load through seq.
func (s *Sink) applyPlan(table string, cur manifest, plan *cdcPlan, dir string, seq int64) (manifest, error) {
	if plan.Base != cur.Version {
		return manifest{}, fmt.Errorf("plan built on version %d applied to version %d", plan.Base, cur.Version)
	}
	drop := make(map[string]bool, len(plan.Drop))
	for _, n := range plan.Drop {
		drop[n] = true
	}
	m := manifest{Version: cur.Version + 1, Through: seq, Created: time.Now().UTC(), Buckets: plan.Buckets}
	for _, f := range cur.Files {
		if !drop[f.Name] {
			m.Files = append(m.Files, f)
		}
	}
	srcs := make(map[string]string, 2*len(plan.Add))
	for _, f := range plan.Add {
		f.FirstSeq, f.LastSeq = seq, seq
		m.Files = append(m.Files, f)
		srcs[f.Name] = filepath.Join(dir, "data", filepath.FromSlash(f.Name))
		srcs[f.Name+idsSuffix] = filepath.Join(dir, "ids", filepath.FromSlash(f.Name)+idsSuffix)
	}
	if err := s.installVersion(table, m, srcs); err != nil {
		return manifest{}, err
	}
	return m, nil
}
