package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofrs/flock"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/sluicehq/sluice/checkpoint"
	checkpointlocal "github.com/sluicehq/sluice/checkpoint/local"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/local/fsys"
)

// Defaults of Options.
const (
	DefaultCompactMinFiles   = 16
	DefaultCompactSmallBytes = 64 << 20
	DefaultCompactInterval   = time.Minute
	DefaultKeepVersions      = time.Minute
)

// Options configure a local destination.
type Options struct {
	// Path is the destination folder, created when missing.
	Path string
	// Pipeline, when set, limits what Recover and Ledger return to the loads
	// of this pipeline (a destination may be shared), and names the pipeline
	// of loads whose LoadMeta leaves it empty.
	Pipeline string
	// Logger receives recovery, schema changes and compaction at Info and
	// background failures at Warn. Nil discards.
	Logger *slog.Logger
	// CompactMinFiles: a table is compacted when it has at least this many
	// files smaller than CompactSmallBytes. Default 16.
	CompactMinFiles int
	// CompactSmallBytes: files smaller than this are merged. Default 64 MiB.
	// One compaction merges the smallest such files up to four times this
	// size in all.
	CompactSmallBytes int64
	// CompactInterval is how often the background compaction checks every
	// table. 0 means the default, one minute; negative disables background
	// compaction (Compact still works).
	CompactInterval time.Duration
	// KeepVersions is how long a superseded version folder stays on disk, so
	// that a reader that resolved the table's symlink just before a switch can
	// still open its files. Default one minute; negative removes superseded
	// versions at once.
	KeepVersions time.Duration
	// BucketRows sizes the buckets of CDC targets: a target's rows are
	// spread by a hash of their key over a power-of-two number of buckets,
	// doubled (or more) when they average more than twice this many rows,
	// up to 4096. A load rewrites only the buckets its changes touch.
	// Default DefaultBucketRows (65536).
	BucketRows int
	// FS is the file system every file operation of the destination goes
	// through; nil means fsys.OS, the real one. Tests pass an fsys.Faulty to
	// fail a chosen operation. The flocks and the CDC targets' state.db
	// files (bbolt) bypass it (sinks/local/fsys/doc.go says why).
	FS fsys.FS
}

// Sink is a local destination: Parquet tables in a folder. It implements
// sinks.Sink; several Sinks, in one or several processes, may share a folder.
type Sink struct {
	opts Options
	log  *slog.Logger
	lay  layout
	disk fsys.FS // opts.FS, or fsys.OS

	sem  chan struct{} // the in-process half of the destination lock
	fl   *flock.Flock  // the cross-process half
	led  *ledger
	pubd int64 // every load up to this ledger seq is published; under the lock

	schemaMu sync.Mutex
	schemas  map[string]tableDef

	loadsMu sync.Mutex
	loads   map[*load]struct{} // loads begun and not finished

	leaseMu sync.Mutex
	leases  map[string]*lease // leases this Sink holds, by name
	// holders are the flocks marking this Sink's lease holders alive
	// (lease.go); under holdersMu, taken after leaseMu and the
	// destination lock.
	holdersMu sync.Mutex
	holders   map[string]*holderLock

	// compactAt is how many lines the ledger holds before a commit compacts
	// it (compactLedgerAt; tests lower it).
	compactAt int

	// gcLow is, per table, the oldest version that may remain on disk
	// (gcVersions); under the lock.
	gcLow map[string]int64

	// kicked wakes the background compaction for the tables in kicks.
	kicked chan struct{}
	kickMu sync.Mutex
	kicks  map[string]bool

	closed  atomic.Bool     // refuse new work
	closing atomic.Bool     // Close ran
	bg      context.Context // of the background goroutines; stop cancels it
	stop    context.CancelFunc
	wg      sync.WaitGroup

	// Committed loads' states still to apply (stateasync.go): by table,
	// in seq order, and the count of jobs by load; applying is set while
	// the goroutine applying them runs.
	statesMu    sync.Mutex
	queued      map[string][]stateJob
	queuedLoads map[string]int
	applying    bool
	// syncStates (tests) applies a load's states within its commit;
	// holdStates (tests) leaves them queued, with no goroutine applying
	// them, for the next publish or GetState.
	syncStates, holdStates bool
	// betweenStates (tests), when set, runs between two transactions of a
	// load's states (applyStates' between): no file operation marks that
	// moment, bbolt writes state.db itself.
	betweenStates func() error
}

var _ sinks.Sink = (*Sink)(nil)

// Open opens (creating when missing) the destination at opts.Path and starts
// background compaction. It reads the ledger but recovers nothing: call
// Recover before relying on the tables (a commit also publishes any committed
// load that a crashed writer left unpublished).
func Open(ctx context.Context, opts Options) (*Sink, error) {
	if opts.Path == "" {
		return nil, errors.New("local: no path")
	}
	if opts.CompactMinFiles <= 0 {
		opts.CompactMinFiles = DefaultCompactMinFiles
	}
	if opts.CompactMinFiles < 2 {
		opts.CompactMinFiles = 2
	}
	if opts.CompactSmallBytes <= 0 {
		opts.CompactSmallBytes = DefaultCompactSmallBytes
	}
	if opts.CompactInterval == 0 {
		opts.CompactInterval = DefaultCompactInterval
	}
	if opts.KeepVersions == 0 {
		opts.KeepVersions = DefaultKeepVersions
	}
	if opts.BucketRows <= 0 {
		opts.BucketRows = DefaultBucketRows
	}
	disk := opts.FS
	if disk == nil {
		disk = fsys.OS{}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Sink{
		opts:      opts,
		log:       log.With("sink", "local", "path", opts.Path),
		lay:       layout{root: opts.Path},
		disk:      disk,
		sem:       make(chan struct{}, 1),
		schemas:   map[string]tableDef{},
		loads:     map[*load]struct{}{},
		leases:    map[string]*lease{},
		holders:   map[string]*holderLock{},
		compactAt: compactLedgerAt,
		kicked:    make(chan struct{}, 1),
		kicks:     map[string]bool{},
		gcLow:     map[string]int64{},
	}
	for _, dir := range []string{s.lay.root, s.lay.state(), s.lay.tmp(), s.lay.staging(), s.lay.tables()} {
		if err := disk.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("local: open: %w", err)
		}
	}
	if err := disk.SyncDir(s.lay.root); err != nil {
		return nil, fmt.Errorf("local: open: %w", err)
	}
	s.fl = flock.New(s.lay.lockFile())
	led, err := openLedger(disk, s.lay)
	if err == nil {
		err = disk.SyncDir(s.lay.state())
	}
	if err != nil {
		return nil, fmt.Errorf("local: open: %w", err)
	}
	led.mu.Lock()
	err = led.refresh(false)
	led.mu.Unlock()
	if err != nil {
		led.close()
		return nil, fmt.Errorf("local: open: %w", err)
	}
	s.led = led
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	s.bg, s.stop = bg, stop
	if opts.CompactInterval > 0 {
		s.wg.Add(1)
		go s.compactLoop(bg)
	}
	return s, nil
}

// Close stops background compaction and aborts the loads that were begun
// and neither committed nor aborted; it must not run while a load is in use.
func (s *Sink) Close() error {
	if !s.closing.CompareAndSwap(false, true) {
		return nil
	}
	// States still queued are applied now rather than left to recovery.
	if unlock, err := s.lock(context.Background()); err == nil {
		if err := s.applyQueued(""); err != nil {
			s.log.Warn("applying committed states failed; recovery applies them", "err", err)
		}
		unlock()
	}
	s.closed.Store(true)
	s.stop()
	s.wg.Wait()
	s.loadsMu.Lock()
	open := make([]*load, 0, len(s.loads))
	for l := range s.loads {
		open = append(open, l)
	}
	s.loadsMu.Unlock()
	for _, l := range open {
		l.discard()
	}
	s.releaseLeases()
	return s.led.close()
}

var errClosed = errors.New("local: sink is closed")

// lock takes the destination lock: a mutex within the process and an
// exclusive flock on _sluice/lock across processes. Ledger appends,
// publishing, compaction swaps, schema changes and recovery hold it.
func (s *Sink) lock(ctx context.Context) (unlock func(), err error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("lock: %w", ctx.Err())
	}
	ok, err := s.fl.TryLock()
	if err == nil && !ok {
		ok, err = s.fl.TryLockContext(ctx, 2*time.Millisecond)
	}
	if err != nil || !ok {
		<-s.sem
		if err == nil {
			err = errors.New("not acquired")
		}
		return nil, fmt.Errorf("lock %s: %w", s.lay.lockFile(), err)
	}
	return func() {
		if err := s.fl.Unlock(); err != nil {
			s.log.Warn("unlock failed", "err", err)
		}
		<-s.sem
	}, nil
}

// Retryable reports whether an operation that failed with err may succeed
// when tried again: filesystem errors (a full disk, an I/O error, a lock not
// obtained) are; a stale load, a schema mismatch or a closed sink are not.
func (s *Sink) Retryable(err error) bool {
	if err == nil || errors.Is(err, sinks.ErrStale) || errors.Is(err, errClosed) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if errors.Is(err, bolterrors.ErrTimeout) {
		return true // a state file's lock held by a publish elsewhere
	}
	return fsys.Failed(err)
}

// Ledger returns the committed loads in commit order (of Options.Pipeline
// when set), without recovering anything.
func (s *Sink) Ledger(ctx context.Context) (*batch.Ledger, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	s.led.mu.Lock()
	defer s.led.mu.Unlock()
	if err := s.led.refresh(false); err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	led, err := s.led.records(s.opts.Pipeline)
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	return led, nil
}

// Heads returns the heads of a flow's slots (of the slots named; every
// slot the flow reached when nil), from the ledger in memory after reading
// the lines appended since.
func (s *Sink) Heads(ctx context.Context, pipeline, flow string, slots []string) (sinks.Heads, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	s.led.mu.Lock()
	defer s.led.mu.Unlock()
	if err := s.led.refresh(false); err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	return s.led.flowHeads(pipeline, flow, slots), nil
}

// Unpublished implements sinks.Settler: the committed loads whose staging
// folder is still there (publication removes it).
func (s *Sink) Unpublished(ctx context.Context) (int, error) {
	if s.closed.Load() {
		return 0, errClosed
	}
	s.led.mu.Lock()
	err := s.led.refresh(false)
	ids := make([]string, len(s.led.entries))
	for i := range s.led.entries {
		ids[i] = s.led.entries[i].LoadID
	}
	s.led.mu.Unlock()
	if err != nil {
		return 0, fmt.Errorf("local: %w", err)
	}
	staged, err := s.disk.ReadDir(s.lay.staging())
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, nil
		}
		return 0, fmt.Errorf("local: %w", err)
	}
	present := make(map[string]bool, len(staged))
	for _, e := range staged {
		present[e.Name()] = true
	}
	n := 0
	for _, id := range ids {
		if present[fsName(id)] {
			n++
		}
	}
	return n, nil
}

// Totals returns, per flow of pipeline, the counts of its committed loads
// that moved its positions since its last reset.
func (s *Sink) Totals(ctx context.Context, pipeline string) (map[string]sinks.FlowTotals, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	s.led.mu.Lock()
	defer s.led.mu.Unlock()
	if err := s.led.refresh(false); err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	return s.led.flowTotals(pipeline), nil
}

// OpenCheckpoints opens the checkpoint store in the destination's _sluice
// folder, on the Sink's file system (sinks.CheckpointKeeper).
func (s *Sink) OpenCheckpoints(ctx context.Context, log *slog.Logger) (checkpoint.Store, error) {
	return checkpointlocal.Open(s.opts.Path, checkpointlocal.Options{FS: s.disk})
}

// Scan returns the logical content of a table as of its current version:
// its columns (NULL in rows loaded before a column was added), then, for an
// append target, _sluice_load_id. A CDC target has no _sluice_ columns: its
// rows are its logical content, one per key (SCD type 1) or version (SCD
// type 2). For _sluice_loads it returns the ledger with batch.LoadsSchema.
func (s *Sink) Scan(ctx context.Context, table string) (*batch.Batch, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	if table == batch.LoadsTable {
		s.led.mu.Lock()
		defer s.led.mu.Unlock()
		if err := s.led.refresh(false); err != nil {
			return nil, fmt.Errorf("local: scan %s: %w", table, err)
		}
		b, err := s.led.loadsBatch()
		if err != nil {
			return nil, fmt.Errorf("local: scan %s: %w", table, err)
		}
		return b, nil
	}
	if !tableName.MatchString(table) {
		return nil, fmt.Errorf("local: scan %q: %w", table, sinks.ErrUnknownTable)
	}
	def, err := s.readTable(table)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("local: scan %s: %w", table, sinks.ErrUnknownTable)
	}
	if err != nil {
		return nil, fmt.Errorf("local: scan %s: %w", table, err)
	}
	cols := append([]batch.Column{}, def.Schema.Columns...)
	if !def.cdc() {
		cols = append(cols, batch.Column{Name: batch.LoadIDColumn, Type: batch.String})
	}
	out := batch.Schema{Columns: cols}
	// A version folder may be removed under a slow reader once superseded
	// for KeepVersions; start again from the new version then.
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		m, err := s.current(table)
		if errors.Is(err, errNoTable) {
			return nil, fmt.Errorf("local: scan %s: %w", table, sinks.ErrUnknownTable)
		}
		var b *batch.Batch
		if err == nil {
			b, err = s.scanVersion(table, m, out)
		}
		if err == nil {
			return b, nil
		}
		if !errors.Is(err, fs.ErrNotExist) || attempt >= 10 {
			return nil, fmt.Errorf("local: scan %s: %w", table, err)
		}
	}
}

// scanVersion reads the files of one version. It opens them all first: once
// open, a file stays readable even if its version folder is removed.
func (s *Sink) scanVersion(table string, m manifest, schema batch.Schema) (*batch.Batch, error) {
	dir := s.lay.versionDir(table, m.Version)
	files := make([]fsys.File, 0, len(m.Files))
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	var rows int64
	for _, fe := range m.Files {
		f, err := s.disk.Open(filepath.Join(dir, fe.Name))
		if err != nil {
			return nil, err
		}
		files = append(files, f)
		rows += fe.Rows
	}
	b := batch.New(schema, int(rows))
	for _, f := range files {
		if err := readOpenFile(f, b, nil); err != nil {
			return nil, err
		}
	}
	return b, nil
}
