package local

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"path/filepath"
	"slices"
	"time"

	"github.com/gofrs/flock"

	"github.com/sluicehq/sluice/sinks/local/fsys"
)

// compactLoop compacts every table each CompactInterval, and a table a
// publication kicked (kickCompaction) at once, until ctx ends.
func (s *Sink) compactLoop(ctx context.Context) {
	defer s.wg.Done()
	t := time.NewTicker(s.opts.CompactInterval)
	defer t.Stop()
	for {
		var tables []string
		select {
		case <-ctx.Done():
			return
		case <-s.kicked:
			s.kickMu.Lock()
			tables = slices.Sorted(maps.Keys(s.kicks))
			clear(s.kicks)
			s.kickMu.Unlock()
		case <-t.C:
			var err error
			if tables, err = s.listTables(); err != nil {
				s.log.Warn("compaction: tables not listed", "err", err)
				continue
			}
		}
		for _, table := range tables {
			if err := s.Compact(ctx, table); err != nil && ctx.Err() == nil {
				s.log.Warn("compaction failed", "table", table, "err", err)
			}
		}
	}
}

// kickCompaction asks the background compaction to look at table now; a
// Sink without one (CompactInterval < 0) leaves it to Compact.
func (s *Sink) kickCompaction(table string) {
	if s.opts.CompactInterval < 0 {
		return
	}
	s.kickMu.Lock()
	s.kicks[table] = true
	s.kickMu.Unlock()
	select {
	case s.kicked <- struct{}{}:
	default: // already kicked
	}
}

// Compact merges small files of a table's current version: in each folder
// of the table (each partition) that has at least CompactMinFiles files
// smaller than CompactSmallBytes, the smallest of them (up to four times
// CompactSmallBytes in all) become one Zstd-compressed file, and the result
// is published as a new version.
//
// The merge reads and writes outside the destination lock (files never
// change once published); the swap takes the lock, reads the current
// version again and applies only if every merged file is still in it, keeping
// whatever was published meanwhile. Rows keep their _sluice_load_id, and
// the version's ledger watermark is unchanged: the same loads, fewer files.
func (s *Sink) Compact(ctx context.Context, table string) error {
	if s.closed.Load() {
		return errClosed
	}
	m, err := s.current(table)
	if errors.Is(err, errNoTable) || errors.Is(err, fs.ErrNotExist) {
		return nil // not created yet, or superseded meanwhile: next time
	}
	if err != nil {
		return fmt.Errorf("local: compact %s: %w", table, err)
	}
	if m.Buckets > 0 {
		// A CDC target: each load rewrites the buckets it touches into one
		// file per bucket and partition folder, so its files need no merging.
		return nil
	}
	groups := s.pickSmall(m)
	if len(groups) == 0 {
		return nil
	}
	def, err := s.readTable(table)
	if err != nil {
		return fmt.Errorf("local: compact %s: %w", table, err)
	}

	// A staging folder for the merged files, locked like a load's so that
	// Recover leaves it alone while this runs.
	name := "compact-" + table + "-" + randomSuffix()
	tmp := filepath.Join(s.lay.tmp(), name)
	if err := s.disk.Mkdir(tmp, 0o755); err != nil {
		return fmt.Errorf("local: compact %s: %w", table, err)
	}
	lk := flock.New(filepath.Join(tmp, ".lock"))
	if ok, err := lk.TryLock(); err != nil || !ok {
		s.disk.RemoveAll(tmp)
		return fmt.Errorf("local: compact %s: lock: %v", table, err)
	}
	dir := filepath.Join(s.lay.staging(), name)
	if err := s.disk.Rename(tmp, dir); err != nil {
		lk.Close()
		s.disk.RemoveAll(tmp)
		return fmt.Errorf("local: compact %s: %w", table, err)
	}
	defer func() {
		s.disk.RemoveAll(dir)
		lk.Unlock()
		lk.Close()
	}()

	// Hard links keep the inputs while the version folder may be removed.
	src := s.lay.versionDir(table, m.Version)
	for g, group := range groups {
		for i, f := range group {
			err := s.disk.Link(filepath.Join(src, f.Name), filepath.Join(dir, fmt.Sprintf("in-%d-%d.parquet", g, i)))
			if errors.Is(err, fs.ErrNotExist) {
				return nil // the version was superseded and removed: try again later
			}
			if err != nil {
				return fmt.Errorf("local: compact %s: %w", table, err)
			}
		}
	}
	outs := make([]fileEntry, len(groups))
	merged := make([]string, len(groups))
	for g, group := range groups {
		merged[g] = filepath.Join(dir, fmt.Sprintf("merged-%d.parquet", g))
		if outs[g], err = mergeFiles(ctx, s.disk, def, dir, g, group, merged[g]); err != nil {
			return fmt.Errorf("local: compact %s: %w", table, err)
		}
	}
	if err := s.disk.SyncDir(dir); err != nil {
		return fmt.Errorf("local: compact %s: %w", table, err)
	}

	unlock, err := s.lock(ctx)
	if err != nil {
		return fmt.Errorf("local: compact %s: %w", table, err)
	}
	defer unlock()
	cur, err := s.current(table)
	if err != nil {
		return fmt.Errorf("local: compact %s: %w", table, err)
	}
	drop := map[string]bool{}
	for _, group := range groups {
		for _, f := range group {
			drop[f.Name] = true
		}
	}
	still := 0
	for _, f := range cur.Files {
		if drop[f.Name] {
			still++
		}
	}
	if still != len(drop) {
		return nil // another compaction merged some of them meanwhile
	}
	named := map[string]string{}
	var rows int64
	for g := range outs {
		outs[g].Name = path.Join(path.Dir(groups[g][0].Name), fmt.Sprintf("compact-%012d-%d.parquet", cur.Version+1, g))
		named[outs[g].Name] = merged[g]
		rows += outs[g].Rows
	}
	_, err = s.nextVersion(table, cur, drop, outs, named, cur.Through)
	if err != nil {
		return fmt.Errorf("local: compact %s: %w", table, err)
	}
	s.log.Info("compacted", "table", table, "files", len(drop), "into", len(outs), "rows", rows, "version", cur.Version+1)
	return nil
}

// mergeFiles writes the rows of group (linked into dir as in-<g>-<i>) to
// one file and returns its entry, without a name.
func mergeFiles(ctx context.Context, disk fsys.FS, def tableDef, dir string, g int, group []fileEntry, merged string) (fileEntry, error) {
	fw, err := createFile(disk, merged, def.Schema, "", compactCodec)
	if err != nil {
		return fileEntry{}, err
	}
	out := fileEntry{FirstSeq: group[0].FirstSeq, LastSeq: group[0].LastSeq}
	var want int64
	for i, f := range group {
		if err := ctx.Err(); err != nil {
			fw.discard()
			return fileEntry{}, err
		}
		n, err := copyFile(disk, fw, filepath.Join(dir, fmt.Sprintf("in-%d-%d.parquet", g, i)))
		if err != nil {
			fw.discard()
			return fileEntry{}, fmt.Errorf("%s: %w", f.Name, err)
		}
		out.Rows += n
		want += f.Rows
		out.FirstSeq = min(out.FirstSeq, f.FirstSeq)
		out.LastSeq = max(out.LastSeq, f.LastSeq)
	}
	if out.Rows != want {
		fw.discard()
		return fileEntry{}, fmt.Errorf("read %d rows from files that hold %d", out.Rows, want)
	}
	if out.Bytes, err = fw.close(); err != nil {
		return fileEntry{}, err
	}
	return out, nil
}

// pickSmall chooses the files to merge: per folder of the table, the small
// files of the smallest size tier that holds at least CompactMinFiles, in
// publication order, up to four times CompactSmallBytes; none for a folder
// without such a tier. Tiers (a factor of four apart) keep a file from being
// rewritten with every few loads: files merge with files of their size, so
// each byte is rewritten about once per tier, and a folder holds at most
// CompactMinFiles small files per tier.
func (s *Sink) pickSmall(m manifest) [][]fileEntry {
	byDir := map[string]map[int][]fileEntry{}
	var dirs []string
	for _, f := range m.Files {
		if f.Bytes >= s.opts.CompactSmallBytes {
			continue
		}
		d := path.Dir(f.Name)
		if _, ok := byDir[d]; !ok {
			dirs = append(dirs, d)
			byDir[d] = map[int][]fileEntry{}
		}
		t := sizeTier(f.Bytes)
		byDir[d][t] = append(byDir[d][t], f)
	}
	var out [][]fileEntry
	for _, d := range dirs {
		for _, t := range slices.Sorted(maps.Keys(byDir[d])) {
			small := byDir[d][t]
			if len(small) < s.opts.CompactMinFiles {
				continue
			}
			// Merge in publication order, so that a merged file keeps loads in order.
			slices.SortStableFunc(small, func(a, b fileEntry) int { return cmp.Compare(a.FirstSeq, b.FirstSeq) })
			budget := 4 * s.opts.CompactSmallBytes
			var total int64
			n := 0
			for n < len(small) && (n < 2 || total+small[n].Bytes <= budget) {
				total += small[n].Bytes
				n++
			}
			out = append(out, small[:n])
			break
		}
	}
	return out
}

// sizeTier is a file's size tier: 0 below 16 KiB, then one more for each
// factor of four.
func sizeTier(bytes int64) int {
	t := 0
	for b := bytes; b >= 16<<10; b >>= 2 {
		t++
	}
	return t
}
