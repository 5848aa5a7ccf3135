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
	"syscall"
	"time"
)

// File is one file a source reads.
type File struct {
	// Name is the file's path as the source spells it: relative to the base
	// folder with forward slashes (absolute when the pattern is). It is what
	// _file_path holds, what dead letters name and what the ledger keys
	// positions by, so moving the project folder changes nothing.
	Name string
	// Path is where the file is opened.
	Path    string
	Size    int64
	ModTime time.Time
	// Hive holds the file's Hive segments (`name=value` folders below the
	// pattern's literal root), outermost first.
	Hive []HiveValue
}

// HiveValue is one Hive segment of a file's folders: `year=2024` is
// {Name: "year", Text: "2024"}. Text is percent-unescaped (Hive and Spark
// escape special characters as %XX); an empty value or HiveNull is NULL.
type HiveValue struct {
	Name string
	Text string
}

// Null reports whether the segment holds a NULL.
func (h HiveValue) Null() bool { return h.Text == "" || h.Text == HiveNull }

// Plan lists the files matching pattern, sorted by Name. pattern uses
// forward slashes and is relative to base unless absolute. Each segment
// matches one path segment with the wildcards of path.Match (*, ?, [...],
// \ escapes); a segment ** matches any number of folders (zero included) and
// a trailing ** every file below. Wildcards never match names starting with
// "." or "_" (hidden files, _SUCCESS markers, _temporary folders); literal
// segments can. Only regular files are listed (symbolic links are followed,
// but ** does not descend into linked folders). A folder that does not exist
// lists no files.
//
// Hive segments are parsed from the folders below the pattern's literal
// root: its leading segments that hold neither a wildcard nor "=".
func Plan(base, pattern string) ([]File, error) {
	g, err := newGlob(base, pattern)
	if err != nil {
		return nil, err
	}
	found, err := g.run(false)
	if err != nil {
		return nil, err
	}
	files := make([]File, 0, len(found))
	for _, e := range found {
		hive, err := parseHive(e.segs[g.rootLen : len(e.segs)-1])
		if err != nil {
			return nil, fmt.Errorf("backfill: %s: %w", e.name, err)
		}
		files = append(files, File{Name: e.name, Path: e.path, Size: e.info.Size(), ModTime: e.info.ModTime(), Hive: hive})
	}
	return files, nil
}

// glob is a parsed pattern.
type glob struct {
	pattern string
	abs     bool
	segs    []string // cleaned pattern segments
	rootLen int      // leading literal segments without "="
	base    string
}

type match struct {
	name string   // slash path as the pattern spells it
	path string   // OS path
	segs []string // name's segments
	info fs.FileInfo
}

func newGlob(base, pattern string) (*glob, error) {
	if strings.TrimSpace(pattern) == "" {
		return nil, errors.New("backfill: empty path pattern")
	}
	g := &glob{pattern: pattern, abs: strings.HasPrefix(pattern, "/"), base: base}
	clean := path.Clean(pattern)
	if g.abs {
		clean = strings.TrimPrefix(clean, "/")
	}
	if clean == "." || clean == "" {
		return nil, fmt.Errorf("backfill: path pattern %q names no file", pattern)
	}
	g.segs = strings.Split(clean, "/")
	literal := true
	for i, s := range g.segs {
		if strings.Contains(s, "**") && s != "**" {
			return nil, fmt.Errorf("backfill: path pattern %q: ** must be a whole segment", pattern)
		}
		if _, err := path.Match(s, ""); err != nil {
			return nil, fmt.Errorf("backfill: path pattern %q: segment %q: %w", pattern, s, err)
		}
		if literal && i < len(g.segs)-1 && !hasMeta(s) && !strings.Contains(s, "=") {
			g.rootLen = i + 1
		} else {
			literal = false
		}
	}
	return g, nil
}

func hasMeta(s string) bool { return strings.ContainsAny(s, `*?[\`) }

func hidden(name string) bool { return strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") }

// run matches the pattern: regular files, or folders when dirs is set.
func (g *glob) run(dirs bool) ([]match, error) {
	start := g.base
	if g.abs {
		start = string(filepath.Separator)
	} else if start == "" {
		start = "."
	}
	w := walker{dirs: dirs, seen: map[string]bool{}}
	if err := w.walk(start, nil, g.segs); err != nil {
		return nil, fmt.Errorf("backfill: list %q: %w", g.pattern, err)
	}
	sort.Slice(w.out, func(i, j int) bool { return w.out[i].name < w.out[j].name })
	for i := range w.out {
		if g.abs {
			w.out[i].name = "/" + w.out[i].name
		}
	}
	return w.out, nil
}

type walker struct {
	dirs bool
	seen map[string]bool
	out  []match
}

func (w *walker) add(p string, segs []string, info fs.FileInfo) {
	name := strings.Join(segs, "/")
	if w.seen[name] {
		return
	}
	w.seen[name] = true
	w.out = append(w.out, match{name: name, path: p, segs: append([]string(nil), segs...), info: info})
}

// wanted reports whether info is what the walk lists.
func (w *walker) wanted(info fs.FileInfo) bool {
	if w.dirs {
		return info.IsDir()
	}
	return info.Mode().IsRegular()
}

func (w *walker) walk(dir string, at []string, segs []string) error {
	seg, last := segs[0], len(segs) == 1
	if seg == "**" {
		if last {
			segs = []string{"**", "*"}
			if w.dirs {
				segs = []string{"*"}
			}
			return w.walk(dir, at, segs)
		}
		if err := w.walk(dir, at, segs[1:]); err != nil {
			return err
		}
		entries, err := readDir(dir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if e.IsDir() && !hidden(e.Name()) {
				if err := w.walk(filepath.Join(dir, e.Name()), append(at, e.Name()), segs); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if !hasMeta(seg) {
		return w.step(filepath.Join(dir, seg), append(at, seg), segs[1:])
	}
	entries, err := readDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if hidden(e.Name()) {
			continue
		}
		if ok, _ := path.Match(seg, e.Name()); !ok {
			continue
		}
		if err := w.step(filepath.Join(dir, e.Name()), append(at, e.Name()), segs[1:]); err != nil {
			return err
		}
	}
	return nil
}

// step visits p, which matched a segment; rest are the segments after it.
func (w *walker) step(p string, at []string, rest []string) error {
	info, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(rest) == 0 {
		if w.wanted(info) {
			w.add(p, at, info)
		}
		return nil
	}
	if !info.IsDir() {
		return nil
	}
	return w.walk(p, at, rest)
}

func readDir(dir string) ([]fs.DirEntry, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil, nil
	}
	return entries, err
}

// parseHive parses the Hive segments among folder names.
func parseHive(dirs []string) ([]HiveValue, error) {
	var out []HiveValue
	for _, d := range dirs {
		h, ok := ParseHiveSegment(d)
		if !ok {
			continue
		}
		for _, o := range out {
			if o.Name == h.Name {
				return nil, fmt.Errorf("hive segment %s appears twice", h.Name)
			}
		}
		out = append(out, h)
	}
	return out, nil
}

// ParseHiveSegment parses one folder name as a Hive segment `name=value`.
// The name must be an identifier ([A-Za-z_][A-Za-z0-9_]*); the value is
// everything after the first "=", percent-unescaped where it holds valid
// %XX escapes (kept as written otherwise).
func ParseHiveSegment(seg string) (HiveValue, bool) {
	name, value, ok := strings.Cut(seg, "=")
	if !ok || !identifier(name) {
		return HiveValue{}, false
	}
	return HiveValue{Name: name, Text: unescape(value)}, true
}

func identifier(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range []byte(s) {
		switch {
		case c == '_', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// unescape decodes %XX escapes; text with an invalid escape is kept as is.
func unescape(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			out = append(out, s[i])
			continue
		}
		if i+2 >= len(s) {
			return s
		}
		hi, ok1 := unhex(s[i+1])
		lo, ok2 := unhex(s[i+2])
		if !ok1 || !ok2 {
			return s
		}
		out = append(out, hi<<4|lo)
		i += 2
	}
	return string(out)
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
