package local

import (
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sluicehq/sluice/sinks/local/fsys"
)

// errCrash is what every file operation of a Sink returns once its
// simulated process died.
var errCrash = errors.New("simulated crash")

// kill abandons s as the kernel would a dead process: its flocks are
// released and its goroutines stop, and nothing is cleaned up.
func (s *Sink) kill() {
	s.closed.Store(true)
	s.stop()
	s.loadsMu.Lock()
	for l := range s.loads {
		l.release()
	}
	s.loads = map[*load]struct{}{}
	s.loadsMu.Unlock()
	s.releaseLeases()
}

// faulty returns the fsys.Faulty of a Sink that openTest opened.
func faulty(t testing.TB, s *Sink) *fsys.Faulty {
	t.Helper()
	f, ok := s.disk.(*fsys.Faulty)
	if !ok {
		t.Fatalf("the Sink's file system is a %T, not an fsys.Faulty", s.disk)
	}
	return f
}

// A moment is a point of the commit protocol (doc.go), as the file
// operation that marks it: an operation op on a path (relative to the
// destination folder) that path accepts; with after, the moment just after
// that operation.
type moment struct {
	op    fsys.Op
	path  func(rel string) bool
	after bool
	torn  bool // a crash there tears the write: half its bytes are written
}

func is(rel string) func(string) bool { return func(p string) bool { return p == rel } }
func hasPrefix(pre string) func(string) bool {
	return func(p string) bool { return strings.HasPrefix(p, pre) }
}
func hasSuffix(suf string) func(string) bool {
	return func(p string) bool { return strings.HasSuffix(p, suf) }
}

var (
	// afterStaging: a load's files and folder are synced, the destination
	// lock not taken yet (the fsync of _sluice/staging ends staging).
	afterStaging = moment{op: fsys.OpSyncDir, path: is("_sluice/staging"), after: true}
	// inLedgerAppend: the ledger line half written.
	inLedgerAppend = moment{op: fsys.OpWrite, path: is("_sluice/ledger.jsonl"), torn: true}
	// afterLedgerAppend: past the commit point (the ledger's fsync),
	// nothing published.
	afterLedgerAppend = moment{op: fsys.OpSync, path: is("_sluice/ledger.jsonl"), after: true}
	// beforeSwap: a table's new version folder and manifest written and
	// synced, its symlink not swapped (a swap starts with a new symlink in
	// _sluice/tmp).
	beforeSwap = moment{op: fsys.OpSymlink, path: hasPrefix("_sluice/tmp/link-")}
	// afterSwap: a table's symlink swapped and the destination folder
	// synced.
	afterSwap = moment{op: fsys.OpSyncDir, path: is("."), after: true}
	// beforeStates: a CDC load's rows published, its states not applied
	// (applying them starts by reading the staged states).
	beforeStates = moment{op: fsys.OpReadFile, path: hasSuffix(".cdc.st")}
	// afterStates: its states applied: bbolt's transactions follow the
	// read of the staged states without another file operation.
	afterStates = moment{op: fsys.OpReadFile, path: hasSuffix(".cdc.st"), after: true}
	// compactMerged: a compaction's merged files written and synced, the
	// fsync of its staging folder next, the destination lock not taken yet
	// (for when).
	compactMerged = moment{op: fsys.OpSyncDir, path: hasPrefix("_sluice/staging/compact-")}
)

func (m moment) matches(root string, op fsys.Op, path string) bool {
	if op != m.op {
		return false
	}
	rel, err := filepath.Rel(root, path)
	return err == nil && m.path(filepath.ToSlash(rel))
}

// crasher is a simulated crash: a fault callback that fails the nth
// operation at its moment (counting from when it is armed) and every
// operation after it with errCrash, as the operations of a dead process
// never happen.
type crasher struct {
	root string
	at   moment
	nth  int

	mu   sync.Mutex
	seen int
	dead bool
}

// crash arms s to die the nth time it reaches moment at. The test then
// abandons s with kill, as the process is dead.
func crash(t testing.TB, s *Sink, at moment, nth int) *crasher {
	c := &crasher{root: s.opts.Path, at: at, nth: nth}
	faulty(t, s).Set(c.fail)
	return c
}

func (c *crasher) fail(op fsys.Op, path string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return errCrash
	}
	if !c.at.matches(c.root, op, path) {
		return nil
	}
	if c.seen++; c.seen < c.nth {
		return nil
	}
	c.dead = true
	switch {
	case c.at.after:
		return nil
	case c.at.torn:
		return fsys.Torn(errCrash)
	}
	return errCrash
}

// die kills the process now: every operation from now on fails.
func (c *crasher) die() {
	c.mu.Lock()
	c.dead = true
	c.mu.Unlock()
}

// died reports whether the crash happened.
func (c *crasher) died() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dead
}

// expectCrash fails the test unless the crash happened and err (what the
// crashed call returned) says so.
func expectCrash(t testing.TB, c *crasher, what string, err error) {
	t.Helper()
	if !c.died() {
		t.Fatalf("%s: %v, and the crash point was not reached", what, err)
	}
	if !errors.Is(err, errCrash) {
		t.Fatalf("%s: %v, want the simulated crash", what, err)
	}
}

// when arms s to run action the nth time it reaches moment at, once, just
// before its operation (also for a moment after it), which then succeeds:
// a test's move at a chosen point of the protocol. The action's own
// operations go through s too.
func when(t testing.TB, s *Sink, at moment, nth int, action func()) {
	root := s.opts.Path
	var mu sync.Mutex
	seen, done := 0, false
	faulty(t, s).Set(func(op fsys.Op, path string) error {
		if !at.matches(root, op, path) {
			return nil
		}
		mu.Lock()
		seen++
		run := !done && seen >= nth
		done = done || run
		mu.Unlock()
		if run {
			action()
		}
		return nil
	})
}
