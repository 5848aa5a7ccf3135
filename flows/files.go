package flows

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/backfill"
	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/decode"
	"github.com/sluicehq/sluice/flows/spec"
	"github.com/sluicehq/sluice/sinks"
)

// DefaultPollFiles is how often `run` looks for new files of a files or
// snapshots flow (Options.PollFiles).
const DefaultPollFiles = 10 * time.Second

// Fingerprint identifies a flow's definition: a once-flow whose definition
// changed after it completed is refused rather than silently skipped. Line
// numbers and files.parallel do not count.
func Fingerprint(f *spec.Flow) string {
	raw, err := json.Marshal(f)
	if err != nil {
		panic(fmt.Sprintf("flows: flow %s does not encode: %v", f.Name, err))
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		panic(fmt.Sprintf("flows: flow %s does not decode: %v", f.Name, err))
	}
	stripLines(v)
	canon, _ := json.Marshal(v) // maps encode with sorted keys
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:12])
}

func stripLines(v any) {
	switch x := v.(type) {
	case map[string]any:
		delete(x, "Line")
		delete(x, "Column")
		delete(x, "Parallel") // how many files are read at once changes no row
		for _, e := range x {
			stripLines(e)
		}
	case []any:
		for _, e := range x {
			stripLines(e)
		}
	}
}

// runFilesFlow loads the files of a files source, each exactly once: a
// file's progress (the next row to read, and whether it was read to the
// end) is in the ledger positions of the loads that read it, so a crash
// resumes after the last committed chunk. A once-flow reads the files it
// planned at its first start and then never again; another flow picks up
// new files on every run (and, in run mode, every Options.PollFiles).
func (r *runner) runFilesFlow(ctx context.Context, f *spec.Flow, h batchHandler) error {
	// One process reads a flow's files at a time.
	leaser, ok := r.sink.(sinks.Leaser)
	if !ok {
		return errors.New("the destination cannot lease file flows")
	}
	lease := "_sluice_files_" + f.Name
	for {
		k, err := r.holdLease(ctx, leaser, lease, "another process reads this flow's files; waiting")
		if err != nil {
			if ctx.Err() != nil {
				return nil // stopped while waiting
			}
			return err
		}
		lost, err := k.underLease(ctx, func(ctx context.Context) error { return r.filesPasses(ctx, f, h) })
		k.release(ctx)
		switch {
		case !lost:
			return err
		case r.opts.Mode == ModeUpdate:
			return errors.New("another process took this flow's files over while this update ran; run update again")
		case ctx.Err() != nil:
			return nil
		}
		r.log.Warn("lease of the flow's files lost: reading stopped; competing for it again", "flow", f.Name)
	}
}

// filesPasses reads the flow's files: once in update mode, and in run mode
// again every Options.PollFiles until a once-flow is done or ctx ends.
func (r *runner) filesPasses(ctx context.Context, f *spec.Flow, h batchHandler) error {
	if f.Incremental != nil {
		var sig string
		for {
			if err := r.incrementalPass(ctx, f, h, &sig); err != nil || r.opts.Mode == ModeUpdate {
				return err
			}
			if err := sleep(ctx, r.opts.PollFiles); err != nil {
				return nil
			}
		}
	}
	for {
		done, err := r.filesPass(ctx, f, h)
		if err != nil || r.opts.Mode == ModeUpdate || done {
			return err
		}
		if err := sleep(ctx, r.opts.PollFiles); err != nil {
			return nil
		}
	}
}

// filesPass loads every file of the flow not yet read to its end. done is
// true when a once-flow has nothing left to do, ever.
func (r *runner) filesPass(ctx context.Context, f *spec.Flow, h batchHandler) (done bool, err error) {
	log := r.log.With("flow", f.Name)
	src := f.Source.Files
	files, err := backfill.Plan(r.p.Dir, src.Path)
	if err != nil {
		return false, err
	}
	if len(files) > 0 {
		if err := r.ensureFromData(ctx, f); err != nil {
			return false, err
		}
	}
	if f.Once {
		fp := Fingerprint(f)
		st, _, err := checkpoint.GetOnce(ctx, r.checkpoints, r.p.Pipeline, f.Name)
		if err != nil {
			return false, err
		}
		switch {
		case !st.StartedAt.IsZero() && st.Fingerprint != fp:
			return false, fmt.Errorf("once-flow %s changed since it first ran (%s): run `sluice update --refresh %s` to run it again from the start",
				f.Name, st.StartedAt.UTC().Format(time.RFC3339), f.Name)
		case st.Complete:
			log.Debug("once-flow already complete", "completed_at", st.CompletedAt)
			return true, nil
		}
		names := make([]string, len(files))
		for i, fl := range files {
			names[i] = fl.Name
		}
		st, err = checkpoint.BeginOnce(ctx, r.checkpoints, r.p.Pipeline, f.Name, fp, names, time.Now())
		if err != nil {
			return false, err
		}
		files = slices.DeleteFunc(files, func(fl backfill.File) bool { return !slices.Contains(st.Files, fl.Name) })
		if len(files) < len(st.Files) {
			return false, fmt.Errorf("once-flow %s: %d of the %d files it planned at its first start are gone", f.Name, len(st.Files)-len(files), len(st.Files))
		}
	}

	slots := make(batch.Positions, len(files))
	for i, fl := range files {
		slots[i] = batch.Position{File: fl.Name}
	}
	heads, err := r.heads(ctx, f.Name, slots)
	if err != nil {
		return false, err
	}
	pos := heads.Files()
	todo := slices.DeleteFunc(slices.Clone(files), func(fl backfill.File) bool { return pos[fl.Name].Done })

	rs, err := r.filesSchema(f, files, len(todo) > 0)
	if err != nil {
		return false, err
	}
	if rs.lines && len(todo) > 0 {
		if err := r.typeHiveColumns(ctx, f, h, rs.hive); err != nil {
			return false, err
		}
	}
	if changed, err := r.evolveFromFiles(ctx, f, todo, rs.wanted); err != nil {
		return false, err
	} else if changed {
		if rs, err = r.filesSchema(f, files, true); err != nil {
			return false, err
		}
	}
	if f.ReplayValidTo != "" && len(todo) > 0 {
		// Every planned file, read or not: a successor may be in any.
		if h, err = r.newReplayHandler(ctx, f, h, rs, files); err != nil {
			return false, err
		}
	}
	if len(todo) > 0 {
		log.Info("reading files", "files", len(todo), "of", len(files), "once", f.Once)
	}
	progress := backfill.NewProgress(todo)
	stop := r.showProgress(progress, f)
	defer stop()
	fl := &fileLoader{f: f, h: h, rs: rs, start: make(map[string]int64, len(todo)), slot: func(name string) string { return name },
		progress: progress}
	r.opts.Metrics.FilesRemaining(r.p.Pipeline, f.Name, len(todo))
	for _, file := range todo {
		fl.start[file.Name] = pos[file.Name].RowGroup
	}
	if err := r.loadFiles(ctx, fl, todo); err != nil {
		return false, err
	}
	if len(todo) > 0 {
		log.Info("files read", "files", len(todo), "rows", fl.rows)
	}
	if f.Once {
		if _, err := checkpoint.CompleteOnce(ctx, r.checkpoints, r.p.Pipeline, f.Name, time.Now()); err != nil {
			return false, err
		}
		log.Info("once-flow complete")
		return true, nil
	}
	return false, nil
}

// fileLoader loads the files of one pass of a files flow, chunk by chunk:
// Parallel files (the source's parallel) are read at once, and each chunk
// is one load whose positions, under the file's slot, say how far its file
// was read.
type fileLoader struct {
	f  *spec.Flow
	h  batchHandler
	rs readSchema
	// start gives each file's resume row; slot names a file's slot (the
	// file, or for an incremental run file@run).
	start map[string]int64
	slot  func(file string) string
	// filter, when set, changes each chunk before it is prepared.
	filter   func(*backfill.Chunk) error
	progress *backfill.Progress
	rows     int64 // rows committed
	left     int   // files not read to their end; under the loads' lock
}

// loadFiles loads files with fl.
//
// An append flow runs up to filesLoadsInFlight(f) loads at once, of
// chunks of different slots: the chunks of one slot load one after the
// other, in order, each committing its rows with its positions, so a crash
// still resumes every file after its last committed chunk. While one load
// waits for the destination the next chunk is converted and sent. Other
// flows (CDC) load one chunk at a time.
func (r *runner) loadFiles(ctx context.Context, fl *fileLoader, files []backfill.File) error {
	f, h := fl.f, fl.h
	ls := &fileLoads{from: maps.Clone(fl.start), busy: map[string]bool{}}
	byName := make(map[string]backfill.File, len(files))
	for _, file := range files {
		byName[file.Name] = file
	}
	ls.idle = sync.NewCond(&ls.mu)
	inFlight := 1
	if _, ok := h.(*appendHandler); ok {
		inFlight = filesLoadsInFlight(f)
	}
	// load loads one prepared chunk and records its progress.
	load := func(ctx context.Context, ch *backfill.Chunk, p *prepared, slot string, from int64) error {
		c := sinks.Commit{
			From: batch.Positions{{File: slot, RowGroup: from}},
			To:   batch.Positions{{File: slot, RowGroup: ch.Next, Done: ch.Done}},
		}
		if err := r.commitLoad(ctx, f, 0, p, c); err != nil {
			return fmt.Errorf("file %s: %w", ch.File, err)
		}
		r.log.Debug("file chunk committed", "flow", f.Name, "file", ch.File, "next", ch.Next, "done", ch.Done)
		ls.mu.Lock()
		fl.rows += p.rows
		r.opts.Metrics.RecordsRead(r.p.Pipeline, f.Name, int(ch.Next-ls.from[ch.File]))
		ls.from[ch.File] = ch.Next
		if ch.Done {
			fl.left--
			r.opts.Metrics.FilesRemaining(r.p.Pipeline, f.Name, max(fl.left, 0))
		}
		ls.mu.Unlock()
		return nil
	}
	fl.left = len(files)
	err := backfill.ReadFiles(ctx, files, backfill.ReadFilesOptions{
		Parallel: f.Source.Files.Parallel,
		Open: func(_ context.Context, file backfill.File) (backfill.Reader, error) {
			return fl.rs.open(f, file, fl.start[file.Name])
		},
		Progress: fl.progress,
		Log:      r.log.With("flow", f.Name),
	}, func(rctx context.Context, ch *backfill.Chunk) error {
		if fl.filter != nil {
			if err := fl.filter(ch); err != nil {
				return fmt.Errorf("file %s: %w", ch.File, err)
			}
		}
		var p *prepared
		var err error
		if fl.rs.lines {
			p, err = h.(*appendHandler).prepareLines(rctx, ch, byName[ch.File], fl.rs.hive)
		} else {
			p, err = h.prepareChunk(rctx, ch)
		}
		if err != nil {
			return fmt.Errorf("file %s: %w", ch.File, err)
		}
		slot := fl.slot(ch.File)
		if inFlight <= 1 {
			return load(rctx, ch, p, slot, ls.from[ch.File])
		}
		// Wait for a free load and for the previous chunk of the slot.
		ls.mu.Lock()
		for ls.err == nil && (ls.running >= inFlight || ls.busy[slot]) {
			ls.idle.Wait()
		}
		if ls.err != nil {
			ls.mu.Unlock()
			return ls.err
		}
		ls.running++
		ls.busy[slot] = true
		from := ls.from[ch.File]
		ls.mu.Unlock()
		ls.wg.Go(func() {
			// The flow's context, not the reader's: a load under way
			// finishes (and commits) when reading stops for another reason.
			err := load(ctx, ch, p, slot, from)
			ls.mu.Lock()
			if err != nil && ls.err == nil {
				ls.err = err
			}
			ls.running--
			delete(ls.busy, slot)
			ls.idle.Broadcast()
			ls.mu.Unlock()
		})
		return nil
	})
	ls.wg.Wait()
	if ls.err != nil {
		return ls.err // the first load that failed; reading stopped for it
	}
	return err
}

// fileLoads are the loads of loadFiles under way.
type fileLoads struct {
	mu      sync.Mutex
	idle    *sync.Cond       // signalled whenever a load ends
	wg      sync.WaitGroup   // the loads under way
	running int              // loads under way
	busy    map[string]bool  // slots with a load under way
	from    map[string]int64 // each file's committed row
	err     error            // the first load that failed
}

// filesLoadsInFlight is how many loads an append flow of files runs at
// once: as many as files are read at once, at most maxFilesLoadsInFlight.
func filesLoadsInFlight(f *spec.Flow) int {
	n := f.Source.Files.Parallel
	if n <= 0 {
		n = runtime.GOMAXPROCS(0)
	}
	return min(n, maxFilesLoadsInFlight)
}

// maxFilesLoadsInFlight bounds the loads of one files flow under way: each
// holds a chunk and its encoded rows in memory.
const maxFilesLoadsInFlight = 2

// readSchema is how a files flow reads its files.
type readSchema struct {
	format string
	wanted batch.Schema        // the columns read
	hive   batch.Schema        // the Hive columns of the files, typed
	inRead batch.Schema        // those of them read
	units  decode.Units        // of its JSONL timestamp columns
	paths  decode.Paths        // of its JSONL columns that take nested fields
	names  func(string) string // a data-told flow's column names from its files' (nil: as they are)
	// lines is set for JSONL files of a table typed by its lines: they are
	// read undecoded, and decoded as messages are (appendHandler).
	lines bool
	// children are the child tables of a Parquet table typed by its
	// files, by the part of their names after <table>__.
	children map[string]batch.Schema
}

// filesSchema works out the columns a files flow reads: the source's
// declared ones; else, for an append flow, the target's declared ones; else
// the first Parquet file's. reading says whether any file is to be read.
func (r *runner) filesSchema(f *spec.Flow, files []backfill.File, reading bool) (readSchema, error) {
	src := f.Source.Files
	rs := readSchema{format: src.Format, units: f.SourceUnits(r.p), paths: f.SourcePaths(r.p), names: r.namesOf(f)}
	if rs.format == "" {
		rs.format = backfill.FormatOf(src.Path)
	}
	if f.TypedByMessages(r.p) {
		rs.lines = true
		var err error
		rs.hive, err = backfill.HiveTypes(files, r.sourceSchema(f))
		for i := range rs.hive.Columns {
			rs.hive.Columns[i].Nullable = true // as every inferred column
		}
		return rs, err
	}
	rs.wanted = r.sourceSchema(f)
	if f.HasChildren(r.p) {
		if kids := r.childSchemas(f.Target); len(kids) > 0 {
			rs.children = kids
		}
	}
	if len(rs.wanted.Columns) == 0 && f.Kind == spec.KindAppend {
		rs.wanted = sourceColumns(f, r.tableSchema(f.Target))
	}
	if len(rs.wanted.Columns) == 0 && len(files) > 0 && rs.format == backfill.FormatParquet {
		var err error
		if rs.wanted, err = backfill.ParquetSchema(files[0].Path); err != nil {
			return rs, err
		}
	}
	if len(rs.wanted.Columns) == 0 && reading {
		return rs, fmt.Errorf("files source %s: declare its columns (or the target's)", src.Path)
	}
	var err error
	if rs.hive, err = backfill.HiveTypes(files, rs.wanted); err != nil {
		return rs, err
	}
	for _, c := range rs.hive.Columns {
		if rs.wanted.Index(c.Name) >= 0 {
			rs.inRead.Columns = append(rs.inRead.Columns, c)
		}
	}
	return rs, nil
}

// open opens a file to read from row start.
func (rs readSchema) open(f *spec.Flow, fl backfill.File, start int64) (backfill.Reader, error) {
	return backfill.Open(fl, rs.format, rs.wanted, backfill.ReadOptions{Start: start, MaxRows: f.Batch.Rows, MaxBytes: f.Batch.Bytes, Hive: rs.inRead, Units: rs.units, Paths: rs.paths, Names: rs.names, Lines: rs.lines, Children: rs.children})
}

// showProgress shows a flow's file progress (Options.Progress) until stop.
func (r *runner) showProgress(p *backfill.Progress, f *spec.Flow) (stop func()) {
	w := r.opts.Progress
	if w == nil {
		w = io.Discard
	}
	return p.Bar(w, r.log.With("flow", f.Name))
}
