package local

import (
	"bytes"
	"cmp"
	"slices"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
)

// An SCD type 2 target keeps, per bucket and partition folder, one current
// file (b<bucket>-<version>.parquet: the rows whose __END_AT is NULL) and
// any number of history files (h<bucket>-<version>.parquet: closed
// versions). A load that touches a bucket rewrites its current file and
// writes the versions it closes into one new history file; it rewrites an
// existing history file only when it removes or replaces one of its rows
// (a late event splitting or absorbing a closed version), or to merge the
// bucket's history files when they exceed maxHistoryFiles. A rewritten
// history file's remaining rows go into a file that replaces it, so that
// history files keep their age and late events, which mostly split recently
// closed versions, rewrite recent files only; a bucket still gains at most
// one file per load. When the files a load rewrites hold most of the
// bucket's history (late events all over it), their rows join the load's new
// history file instead.
//
// Finding the history rows a load replaces without reading every history
// sidecar rests on a key's versions never overlapping, with at most one
// current: a key's current version is its latest, so every closed version of
// a key whose current row has sequence c starts below c. A replaced or
// removed identity (key, s) can therefore be in a history file only when its
// key has no row in the bucket's current file or s is below that row's
// sequence, and only in a file whose sequence range holds s; only the
// sidecars of such files are read.

// File kinds of an SCD type 2 target (fileEntry.Kind).
const (
	kindMixed   = "" // SCD type 1, and SCD type 2 files made before the split
	kindCurrent = "current"
	kindHistory = "history"
)

// endAtColumn is the column whose NULL marks an SCD type 2 row current.
const endAtColumn = "__END_AT"

// maxHistoryFiles bounds the history files of a bucket and folder: a load
// that would leave more merges some into one (mergeHistory). A bucket's
// rows are bounded (buckets split as the table grows), and so is what its
// merges rewrite.
const maxHistoryFiles = 8

// splitColumn returns the index of __END_AT in an SCD type 2 target's
// columns, or -1 when its files are not split into current and history
// (SCD type 1, or a table without the column).
func splitColumn(def tableDef) int {
	if def.Kind != sinks.KindSCD2 {
		return -1
	}
	return def.Schema.Index(endAtColumn)
}

// seqAt is the greatest sequence of a key's rows in a bucket's current
// files; ok is false when it has none.
type seqAt struct {
	seq string
	ok  bool
}

// historyCandidates returns the identities among gone (those a load
// removes or replaces in one bucket) that may be in a history file, given
// the greatest sequence of each of their keys in the bucket's current
// files (see the comment at the top).
func historyCandidates(gone []ident, cur map[string]seqAt) []ident {
	var out []ident
	for _, id := range gone {
		if c := cur[id.key]; !c.ok || id.seq < c.seq {
			out = append(out, id)
		}
	}
	return out
}

// mayHold reports whether a history file may hold one of the candidate
// identities: one whose sequence is in the file's range.
func mayHold(f fileEntry, cands []ident) bool {
	for _, id := range cands {
		if id.seq >= string(f.MinSeq) && id.seq <= string(f.MaxSeq) {
			return true
		}
	}
	return false
}

// historyOutputs returns where the rows of a bucket's history files go
// when a load rewrites the bucket, by index into files: to the file of
// number of (outKey.of) for those in the map, else to the load's new
// history file (files it does not list stay as they are, unless lost). lost
// are the files that lose rows, stay the others.
//
// A file that loses rows is replaced by a file of the rest (when the
// buckets grow, by one in each bucket its rows go to), so that history
// files keep their age: late events rewrite the recent files holding the
// versions they split, not all history. When the files that lose rows hold
// three quarters of the bucket's history or more (late events all over
// it), they join the load's new history file instead: one file rather than
// many. The files merged (mergeHistory; when the buckets grow, all but the
// recentHistoryFiles newest, since every file is rewritten anyway) go into
// one file of their own, number len(files)+1.
func historyOutputs(files []fileEntry, stay, lost []int, rebucket bool) map[int]int {
	merged := len(files) + 1
	of := map[int]int{}
	if rebucket {
		for _, i := range lost {
			of[i] = i + 1
		}
		for _, i := range oldHistory(files, lost) {
			of[i] = merged
		}
		return of
	}
	var lostRows, allRows int64
	for _, f := range files {
		allRows += f.Rows
	}
	for _, i := range lost {
		lostRows += files[i].Rows
	}
	remain := stay
	if 4*lostRows < 3*allRows {
		for _, i := range lost {
			of[i] = i + 1
		}
		remain = slices.Sorted(slices.Values(append(slices.Clone(stay), lost...)))
	}
	for _, i := range mergeHistory(files, remain) {
		of[i] = merged
	}
	return of
}

// recentHistoryFiles is how many of a bucket's history files, those
// holding its greatest sequences, a merge leaves alone: they hold the
// versions closed last, which late events split most often; merged into
// an older file they would have every late event rewrite it.
const recentHistoryFiles = 2

// mergeHistory returns which of a bucket's history files that remain (by
// index into files) a load merges into one history file: none while they
// and the load's new history file number at most maxHistoryFiles; else all
// but the recentHistoryFiles newest (by greatest sequence) and the
// maxHistoryFiles/2 - recentHistoryFiles largest of the others. The merged
// file is a file of its own, not the load's new one, so that the versions
// the load closes start in a small file.
func mergeHistory(files []fileEntry, remain []int) []int {
	if len(remain)+1 <= maxHistoryFiles {
		return nil
	}
	old := oldHistory(files, remain)
	slices.SortStableFunc(old, func(a, b int) int { return cmp.Compare(files[a].Rows, files[b].Rows) })
	merge := old[:len(old)-(maxHistoryFiles/2-recentHistoryFiles)]
	slices.Sort(merge)
	return merge
}

// oldHistory returns the history files of some (by index into files) but
// the recentHistoryFiles newest: those holding the greatest sequences.
func oldHistory(files []fileEntry, some []int) []int {
	byAge := slices.Clone(some)
	slices.SortStableFunc(byAge, func(a, b int) int { return bytes.Compare(files[b].MaxSeq, files[a].MaxSeq) })
	return byAge[min(recentHistoryFiles, len(byAge)):]
}

// put adds rows of b (rows sel[i], or i when sel is nil) with identities
// keys[i], seqs[i] to the output t, through get. For a split SCD type 2
// target the rows go to t's current or history output by their __END_AT,
// or all to its history output when closed is set (rows of a history file).
func (p *planner) put(get func(outKey) (*bucketOut, error), t outKey, b *batch.Batch, sel []int, keys, seqs []string, closed bool) error {
	if len(keys) == 0 {
		return nil
	}
	if p.endAt < 0 {
		o, err := get(t)
		if err != nil {
			return err
		}
		return o.writeSel(b, sel, keys, seqs)
	}
	cur, hist := t, t
	cur.hist, hist.hist = false, true
	if closed {
		o, err := get(hist)
		if err != nil {
			return err
		}
		return o.writeSel(b, sel, keys, seqs)
	}
	end := b.Vectors[p.endAt]
	var open, shut []int // indexes into keys
	for i := range keys {
		r := i
		if sel != nil {
			r = sel[i]
		}
		if end.IsNull(r) {
			open = append(open, i)
		} else {
			shut = append(shut, i)
		}
	}
	for _, g := range []struct {
		t  outKey
		is []int
	}{{cur, open}, {hist, shut}} {
		if len(g.is) == 0 {
			continue
		}
		o, err := get(g.t)
		if err != nil {
			return err
		}
		if len(g.is) == len(keys) {
			err = o.writeSel(b, sel, keys, seqs)
		} else {
			rows := g.is
			if sel != nil {
				rows = gather(sel, g.is)
			}
			err = o.writeSel(b, rows, gather(keys, g.is), gather(seqs, g.is))
		}
		if err != nil {
			return err
		}
	}
	return nil
}
