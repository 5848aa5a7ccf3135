package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/local/fsys"
)

// manifest describes one version of a table: _sluice/tables/<t>/v<N>.json
// beside the folder v<N>/ that holds its files.
type manifest struct {
	Version int64 `json:"version"`
	// Through is a ledger seq: the version holds every committed load with a
	// seq up to Through that wrote the table, and no other. Loads are
	// published in seq order under the destination lock, so this one number
	// says which loads are in, however compaction merged their files.
	Through int64       `json:"through"`
	Created time.Time   `json:"created"`
	Files   []fileEntry `json:"files"`
	// Buckets is set for a CDC target: its rows are spread over this many
	// buckets (a power of two) by a hash of their key (see bucketOf); each
	// bucket has at most one file per partition folder (an SCD type 2
	// target: one current file and up to maxHistoryFiles history files),
	// and each file an identity sidecar in the version's .ids folder.
	Buckets int `json:"buckets,omitempty"`
}

type fileEntry struct {
	Name  string `json:"name"`
	Rows  int64  `json:"rows"`
	Bytes int64  `json:"bytes"`
	// Loads is the seq range of the loads whose rows the file holds (for a
	// CDC target's file, the load that wrote it).
	FirstSeq int64 `json:"first_seq"`
	LastSeq  int64 `json:"last_seq"`
	// CDC targets: the file's bucket, and the least sequence of its rows
	// (a truncate above it rewrites the file).
	Bucket int    `json:"bucket,omitempty"`
	MinSeq []byte `json:"min_seq,omitempty"`
	// SCD type 2 targets (scd2.go): the greatest sequence of the file's
	// rows, and whether it holds the bucket's current versions
	// (kindCurrent) or closed ones (kindHistory); "" for SCD type 1 and for
	// files holding both, as destinations made before the split have.
	MaxSeq []byte `json:"max_seq,omitempty"`
	Kind   string `json:"kind,omitempty"`
}

// errNoTable is returned by current for a table without a folder.
var errNoTable = errors.New("table has no folder")

// current reads the manifest of the version a table's symlink points to:
// errNoTable when there is no symlink, fs.ErrNotExist when the version was
// removed after the symlink was read (a reader lost a race with a swap and
// KeepVersions).
func (s *Sink) current(table string) (manifest, error) {
	target, err := s.disk.Readlink(s.lay.link(table))
	if errors.Is(err, fs.ErrNotExist) {
		return manifest{}, errNoTable
	}
	if err != nil {
		return manifest{}, err
	}
	v, ok := parseLinkTarget(table, target)
	if !ok {
		return manifest{}, fmt.Errorf("%s points to %s, not to a version of the table", s.lay.link(table), target)
	}
	return s.readManifest(table, v)
}

func (s *Sink) readManifest(table string, v int64) (manifest, error) {
	data, err := s.disk.ReadFile(s.lay.manifestFile(table, v))
	if err != nil {
		return manifest{}, err
	}
	var m manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return manifest{}, fmt.Errorf("%s: %w", s.lay.manifestFile(table, v), err)
	}
	if m.Version != v {
		return manifest{}, fmt.Errorf("%s: holds version %d", s.lay.manifestFile(table, v), m.Version)
	}
	return m, nil
}

// writeVersion builds version m.Version of a table: its folder of hard links
// (to the files of version prev for entries in m.Files that srcs does not
// name, else to srcs[name]), synced, for a CDC target likewise its folder of
// identity sidecars (srcs[name+".ids"]), then its manifest, synced. It is
// invisible until swap points the table at it. Runs under the lock.
func (s *Sink) writeVersion(table string, m manifest, srcs map[string]string) error {
	if err := linkVersion(s.disk, s.lay.versionDir(table, m.Version), s.lay.versionDir(table, m.Version-1), m.Files, "", srcs); err != nil {
		return err
	}
	if m.Buckets > 0 {
		if err := linkVersion(s.disk, s.lay.idsDir(table, m.Version), s.lay.idsDir(table, m.Version-1), m.Files, idsSuffix, srcs); err != nil {
			return err
		}
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileSync(s.disk, s.lay.manifestFile(table, m.Version), append(data, '\n')); err != nil {
		return err
	}
	return s.disk.SyncDir(s.lay.tableDir(table))
}

// linkVersion makes dir (removing leftovers of a writer that died before
// its swap) and links into it each file's name+suffix, from srcs or else
// from prev; then syncs the folders, deepest first.
func linkVersion(disk fsys.FS, dir, prev string, files []fileEntry, suffix string, srcs map[string]string) error {
	if err := disk.RemoveAll(dir); err != nil {
		return err
	}
	if err := disk.Mkdir(dir, 0o755); err != nil {
		return err
	}
	subdirs := map[string]bool{} // partition folders, synced deepest first
	for _, f := range files {
		name := f.Name + suffix
		src, ok := srcs[name]
		if !ok {
			src = filepath.Join(prev, name)
		}
		dst := filepath.Join(dir, name)
		if sub := path.Dir(name); sub != "." && !subdirs[sub] {
			if err := disk.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			for ; sub != "." && !subdirs[sub]; sub = path.Dir(sub) {
				subdirs[sub] = true
			}
		}
		if err := disk.Link(src, dst); err != nil {
			return err
		}
	}
	order := make([]string, 0, len(subdirs))
	for sub := range subdirs {
		order = append(order, sub)
	}
	slices.SortFunc(order, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	for _, sub := range append(order, ".") {
		if err := disk.SyncDir(filepath.Join(dir, sub)); err != nil {
			return err
		}
	}
	return nil
}

// swap points a table's symlink at version v: a new symlink renamed over the
// old one (atomic for readers), then the destination folder synced.
func (s *Sink) swap(table string, v int64) error {
	tmp := filepath.Join(s.lay.tmp(), "link-"+table+"-"+randomSuffix())
	if err := s.disk.Symlink(s.lay.linkTarget(table, v), tmp); err != nil {
		return err
	}
	if err := s.disk.Rename(tmp, s.lay.link(table)); err != nil {
		s.disk.Remove(tmp)
		return err
	}
	return s.disk.SyncDir(s.lay.root)
}

// nextVersion publishes a new version of a table from cur: cur's files minus
// drop, plus add (whose sources are in srcs), with the given through.
func (s *Sink) nextVersion(table string, cur manifest, drop map[string]bool, add []fileEntry,
	srcs map[string]string, through int64) (manifest, error) {
	m := manifest{Version: cur.Version + 1, Through: through, Created: time.Now().UTC(), Buckets: cur.Buckets}
	for _, f := range cur.Files {
		if !drop[f.Name] {
			m.Files = append(m.Files, f)
		}
	}
	m.Files = append(m.Files, add...)
	return m, s.installVersion(table, m, srcs)
}

// installVersion writes version m and swaps the table to it.
func (s *Sink) installVersion(table string, m manifest, srcs map[string]string) error {
	if err := s.writeVersion(table, m, srcs); err != nil {
		return err
	}
	if err := s.swap(table, m.Version); err != nil {
		return err
	}
	if err := s.gcVersions(table, m.Version, false); err != nil {
		s.log.Warn("old versions not removed", "table", table, "err", err)
	}
	return nil
}

// publishPending publishes every committed load not yet in its tables, in
// commit order, one new version per table for all of them, then removes
// their staging folders. With async, the loads' key states are queued
// (stateasync.go) rather than applied, and their staging folders stay until
// they are; without, states queued earlier are applied first. Runs under
// the lock after a ledger refresh.
func (s *Sink) publishPending(ctx context.Context, async bool) error {
	if !async {
		if err := s.applyQueued(""); err != nil {
			return err
		}
	}
	s.led.mu.Lock()
	pending := slices.Clone(s.led.since(s.pubd))
	s.led.mu.Unlock()
	if len(pending) == 0 {
		return nil
	}
	byTable := map[string][]*entry{}
	cdc := map[string]bool{}
	add := func(t string, e *entry) {
		if l := byTable[t]; len(l) == 0 || l[len(l)-1] != e {
			byTable[t] = append(l, e)
		}
	}
	for i := range pending {
		for _, f := range pending[i].Files {
			add(f.Table, &pending[i])
		}
		for _, c := range pending[i].CDC {
			add(c.Table, &pending[i])
			cdc[c.Table] = true
		}
		if r := pending[i].Reset; r != nil {
			for _, t := range r.Tables {
				add(t, &pending[i])
			}
			for _, own := range batch.FlowRowTables {
				if len(r.Flows) > 0 && !slices.Contains(r.Tables, own) {
					// The reset's flows lose their dead letters and
					// expectation counts (reset.go).
					add(own, &pending[i])
				}
			}
		}
		for _, r := range pending[i].Replace {
			add(r.Table, &pending[i])
		}
	}
	tables := make([]string, 0, len(byTable))
	for t := range byTable {
		tables = append(tables, t)
	}
	sinks.PublishOrder(tables)
	for _, t := range tables {
		if err := ctx.Err(); err != nil {
			return err
		}
		list := byTable[t]
		if i := lastReset(list, t); i >= 0 {
			// The loads before the reset are emptied with the table.
			if err := s.resetTable(t, list[i].Seq); err != nil {
				return fmt.Errorf("reset %s: %w", t, err)
			}
			if list = list[i+1:]; len(list) == 0 {
				continue
			}
		}
		if cdc[t] {
			if err := s.publishCDC(ctx, t, list, async); err != nil {
				return fmt.Errorf("publish %s: %w", t, err)
			}
			continue
		}
		// The loads up to each reset that drops its flows' rows, then the
		// drop, in seq order.
		for len(list) > 0 {
			j := slices.IndexFunc(list, func(e *entry) bool { return e.Reset != nil })
			if j < 0 {
				j = len(list)
			}
			if j > 0 {
				if err := s.publishTable(t, list[:j]); err != nil {
					return fmt.Errorf("publish %s: %w", t, err)
				}
			}
			if j < len(list) {
				if err := s.dropFlowRows(t, list[j]); err != nil {
					return fmt.Errorf("reset %s: %w", t, err)
				}
				j++
			}
			list = list[j:]
		}
	}
	// Remove the staging folders that remain (Recover goes over the whole
	// ledger: look the folders up once rather than each load's).
	staged, err := s.disk.ReadDir(s.lay.staging())
	if err != nil {
		return err
	}
	present := make(map[string]bool, len(staged))
	for _, e := range staged {
		present[e.Name()] = true
	}
	for i := range pending {
		if !present[fsName(pending[i].LoadID)] || s.stagingQueued(pending[i].LoadID) {
			continue
		}
		dir := s.lay.stagingDir(pending[i].LoadID)
		if err := s.disk.RemoveAll(dir); err != nil {
			s.log.Warn("staging folder not removed", "dir", dir, "err", err)
		}
	}
	s.pubd = pending[len(pending)-1].Seq
	return nil
}

// publishTable publishes append loads of a table as one new version: the
// current files, minus for each load (in seq order) the files in the
// partition folders it replaces, plus its staged files.
func (s *Sink) publishTable(table string, loads []*entry) error {
	cur, err := s.current(table)
	if err != nil {
		return err
	}
	files := slices.Clone(cur.Files)
	var added, dropped int
	srcs := map[string]string{}
	through := cur.Through
	for _, e := range loads {
		if e.Seq <= cur.Through {
			continue // published before a crash, or by another process
		}
		n := len(files)
		files = dropReplaced(files, e.replaced(table))
		dropped += n - len(files)
		for _, f := range e.Files {
			if f.Table != table {
				continue
			}
			name := path.Join(f.Dir, fmt.Sprintf("part-%012d-%d.parquet", e.Seq, f.N))
			src := s.lay.stagedFile(e.LoadID, table, f.N)
			if _, err := s.disk.Stat(src); err != nil {
				return fmt.Errorf("committed load %s (seq %d): its staged file is gone: %w", e.LoadID, e.Seq, err)
			}
			files = append(files, fileEntry{Name: name, Rows: f.Rows, Bytes: f.Bytes, FirstSeq: e.Seq, LastSeq: e.Seq})
			srcs[name] = src
			added++
		}
		through = e.Seq
	}
	if added == 0 && dropped == 0 {
		return nil
	}
	m := manifest{Version: cur.Version + 1, Through: through, Created: time.Now().UTC(), Buckets: cur.Buckets, Files: files}
	if err := s.installVersion(table, m, srcs); err != nil {
		return err
	}
	s.log.Debug("published", "table", table, "files", added, "replaced", dropped, "through", through)
	if s.tooManySmall(m) {
		s.kickCompaction(table)
	}
	return nil
}

// tooManySmall reports whether a compaction would merge files of the
// version (pickSmall): a version's cost (a link per file, its manifest)
// grows with its files, so small loads must not pile up until the next
// CompactInterval.
func (s *Sink) tooManySmall(m manifest) bool { return len(s.pickSmall(m)) > 0 }

// gcVersions removes a table's version folders other than cur once
// superseded for KeepVersions; with sweep, it lists the table's folder and
// also removes those after cur at once (a writer died before its swap).
// Without, it goes up from the oldest version this Sink knows may remain
// and stops at the first kept: versions are numbered one after the other
// and superseded in that order, so a publication's cost does not grow with
// the versions kept meanwhile, and it removes at most gcPerPublish. Runs
// under the lock.
func (s *Sink) gcVersions(table string, cur int64, sweep bool) error {
	lo, known := s.gcLow[table]
	if sweep || !known {
		ents, err := s.disk.ReadDir(s.lay.tableDir(table))
		if err != nil {
			return err
		}
		var versions []int64
		for _, e := range ents {
			stem := strings.TrimSuffix(strings.TrimSuffix(e.Name(), ".json"), idsSuffix)
			if v, ok := parseVersionName(stem); ok {
				versions = append(versions, v)
			}
		}
		slices.Sort(versions)
		versions = slices.Compact(versions)
		var errs []error
		lo = cur
		for _, v := range versions {
			if v > cur && sweep {
				if err := s.removeVersion(table, v); err != nil {
					errs = append(errs, err)
				}
			}
			if v < cur {
				lo = min(lo, v)
			}
		}
		if len(errs) > 0 {
			return errors.Join(errs...)
		}
	}
	now := time.Now()
	for removed := 0; lo < cur && (sweep || removed < gcPerPublish); lo, removed = lo+1, removed+1 {
		if s.opts.KeepVersions > 0 {
			// lo was superseded when its successor's manifest was written.
			st, err := s.disk.Stat(s.lay.manifestFile(table, lo+1))
			if err == nil && now.Sub(st.ModTime()) < s.opts.KeepVersions {
				break
			}
		}
		if err := s.removeVersion(table, lo); err != nil {
			s.gcLow[table] = lo
			return err
		}
	}
	s.gcLow[table] = lo
	return nil
}

// gcPerPublish bounds the versions one publication removes: after a burst
// of loads their versions expire together, and removing them all at once
// would stall one commit; the next publications go on where it stopped.
const gcPerPublish = 4

// removeVersion removes a version's folder, its identities and its
// manifest; whatever is gone already is fine.
func (s *Sink) removeVersion(table string, v int64) error {
	if err := s.disk.RemoveAll(s.lay.versionDir(table, v)); err != nil {
		return err
	}
	if err := s.disk.RemoveAll(s.lay.idsDir(table, v)); err != nil {
		return err
	}
	if err := s.disk.Remove(s.lay.manifestFile(table, v)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
