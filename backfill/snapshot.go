package backfill

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sluicehq/sluice/flows/batch"
)

// VersionPlaceholder is the path segment of a snapshots source that names
// the snapshot version.
const VersionPlaceholder = "{version}"

// SuccessMarker is the file whose presence makes a snapshot version folder
// ready: a snapshot still being written is never applied.
const SuccessMarker = "_SUCCESS"

// SnapshotVersion is one snapshot of a snapshots source.
type SnapshotVersion struct {
	Text  string // the folder name
	Value Value  // the typed version
	Ready bool   // the folder holds _SUCCESS
	Dir   string // the folder's Name (as File.Name spells paths)
	Files []File // the snapshot's files, sorted; Hive segments below the version folder
}

// PlanSnapshots lists the versions of a snapshots source, ascending by typed
// version. Exactly one whole segment of pattern is {version} and it must name
// a folder (a segment follows it); the segments before it may hold wildcards,
// and what follows is a files pattern inside each version folder.
//
// Versions are typed by declared when given (int64, date, timestamp, string
// or decimal(P,S); a folder name that does not parse is an error), else
// int64 when every name is an integer, date when every one is YYYY-MM-DD,
// timestamp when every one is RFC 3339, else string (compared bytewise).
// Folder names starting with "." or "_" are not versions. Two folders with
// equal typed versions ("7" and "07") are an error. Every version is
// returned; only those with Ready set may be applied.
func PlanSnapshots(base, pattern string, declared *batch.Type) ([]SnapshotVersion, error) {
	segs := strings.Split(pattern, "/")
	at := -1
	for i, s := range segs {
		if s == VersionPlaceholder {
			if at >= 0 {
				return nil, fmt.Errorf("backfill: snapshots path %q has %s twice", pattern, VersionPlaceholder)
			}
			at = i
		} else if strings.Contains(s, VersionPlaceholder) {
			return nil, fmt.Errorf("backfill: snapshots path %q: %s must be a whole segment", pattern, VersionPlaceholder)
		}
	}
	switch {
	case at < 0:
		return nil, fmt.Errorf("backfill: snapshots path %q has no %s segment", pattern, VersionPlaceholder)
	case at == len(segs)-1:
		return nil, fmt.Errorf("backfill: snapshots path %q: %s must name a folder, with the files' pattern after it", pattern, VersionPlaceholder)
	}
	if declared != nil {
		switch declared.Kind {
		case batch.KindInt64, batch.KindDate, batch.KindTimestamp, batch.KindString, batch.KindDecimal:
		default:
			return nil, fmt.Errorf("backfill: snapshot version type %v: want int64, date, timestamp, string or decimal(P,S)", *declared)
		}
	}
	prefix := strings.Join(append(segs[:at:at], "*"), "/")
	rest := strings.Join(segs[at+1:], "/")
	if path.IsAbs(rest) || rest == "" {
		return nil, fmt.Errorf("backfill: snapshots path %q: nothing after %s", pattern, VersionPlaceholder)
	}
	g, err := newGlob(base, prefix)
	if err != nil {
		return nil, err
	}
	dirs, err := g.run(true)
	if err != nil {
		return nil, err
	}
	texts := make([]string, len(dirs))
	for i, d := range dirs {
		texts[i] = d.segs[len(d.segs)-1]
	}
	typ := inferType(texts, batch.Int64, batch.Date, batch.Timestamp)
	if declared != nil {
		typ = *declared
	}
	out := make([]SnapshotVersion, 0, len(dirs))
	for i, d := range dirs {
		v, err := ParseValue(texts[i], typ)
		if err != nil {
			return nil, fmt.Errorf("backfill: snapshot version folder %s: %w", d.name, err)
		}
		st, err := os.Stat(filepath.Join(d.path, SuccessMarker))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("backfill: snapshot version folder %s: %w", d.name, err)
		}
		ready := err == nil && st.Mode().IsRegular()
		files, err := Plan(d.path, rest)
		if err != nil {
			return nil, fmt.Errorf("backfill: snapshot version folder %s: %w", d.name, err)
		}
		for j := range files {
			files[j].Name = d.name + "/" + files[j].Name
		}
		out = append(out, SnapshotVersion{Text: texts[i], Value: v, Ready: ready, Dir: d.name, Files: files})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Value.Compare(out[j].Value) < 0 })
	for i := 1; i < len(out); i++ {
		if out[i-1].Value.Compare(out[i].Value) == 0 {
			return nil, fmt.Errorf("backfill: snapshot version folders %s and %s hold the same version %s", out[i-1].Dir, out[i].Dir, out[i].Value)
		}
	}
	return out, nil
}
