package flows

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/backfill"
	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/spec"
	"github.com/sluicehq/sluice/sinks"
)

// replaceLoadBytes bounds the source bytes of the partitions one
// replace_partitions load rebuilds (a partition is never split), unless the
// flow sets batch.bytes.
const replaceLoadBytes = 256 << 20

// An incremental files flow reads, on each run, the rows of the window its
// stored cursor gives (backfill.Incremental) and then stores the cursor the
// run reached. A run's loads record their progress in ledger positions named
// after the run (file@run, the run being the count of runs completed), so a
// run that stopped midway resumes where it stopped and the next run reads its
// window again from the start. The stored cursor moves only when the run
// completed: a crash before leaves it, and the run, to be finished.
//
// The target deduplicates the overlap of windows: an auto_cdc target by its
// keys and sequences; an append target with write: replace_partitions by
// swapping in every partition the window touches, rebuilt from all its rows;
// a plain append target (no lag) reads the rows past the stored last_value
// only (the window's bound excluded, so a row at last_value is not loaded
// twice).
//
// When the cursor is a Hive column of the files, a file whose value lies
// outside the window is not opened. A bounded range (end_value) is read once
// per file: its runs keep the same name.

// incrementalOf builds the flow's cursor rules, typing the cursor by the
// declared type, else initial_value's form, else the column read.
func (r *runner) incrementalOf(f *spec.Flow, rs readSchema) (backfill.Incremental, error) {
	in := f.Incremental
	var declared, data *batch.Type
	if in.Type.Kind != batch.KindInvalid {
		declared = &in.Type
	}
	if i := rs.wanted.Index(in.Cursor); i >= 0 {
		data = &rs.wanted.Columns[i].Type
	} else if i := rs.hive.Index(in.Cursor); i >= 0 {
		data = &rs.hive.Columns[i].Type
	} else {
		return backfill.Incremental{}, fmt.Errorf("incremental cursor %s is not a column of the files read (columns: %s)", in.Cursor, strings.Join(rs.wanted.Names(), ", "))
	}
	t, err := backfill.ResolveCursorType(declared, in.InitialValue, data)
	if err != nil {
		return backfill.Incremental{}, err
	}
	return backfill.NewIncremental(in.Cursor, t, in.InitialValue, in.EndValue, in.LastValueFunc, in.Lag, r.p.Location)
}

// incrementalRun is one run of an incremental files flow.
type incrementalRun struct {
	r        *runner
	f        *spec.Flow
	h        batchHandler
	rs       readSchema
	inc      backfill.Incremental
	w        backfill.Window
	run      int64                // the runs completed before this one
	next     backfill.CursorState // the cursor so far
	pos      map[string]batch.Position
	progress *backfill.Progress
	rows     int64
}

func (ir *incrementalRun) posName(file string) string { return fmt.Sprintf("%s@%d", file, ir.run) }

// see folds cursor values read into the run's cursor.
func (ir *incrementalRun) see(seen []backfill.Value) {
	if len(seen) > 0 {
		ir.next = ir.inc.Next(&ir.next, seen)
	}
}

// incrementalPass runs the flow once. sig, when not nil, is the signature
// of the files and cursor of the last pass that completed; the pass is
// skipped when they did not change, and sig is updated after a pass.
func (r *runner) incrementalPass(ctx context.Context, f *spec.Flow, h batchHandler, sig *string) error {
	log := r.log.With("flow", f.Name)
	files, err := backfill.Plan(r.p.Dir, f.Source.Files.Path)
	if err != nil {
		return err
	}
	stored, rev, err := checkpoint.GetCursor(ctx, r.checkpoints, r.p.Pipeline, f.Name)
	if err != nil {
		return err
	}
	now := passSignature(files, stored)
	if sig != nil && *sig == now {
		return nil
	}
	rs, err := r.filesSchema(f, files, len(files) > 0)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return nil
	}
	inc, err := r.incrementalOf(f, rs)
	if err != nil {
		return err
	}
	st, err := backfill.ParseCursorState(stored.LastValue, stored.Type)
	if err != nil {
		return err
	}
	w, notes, err := inc.Window(&st)
	if err != nil {
		return err
	}
	for _, n := range notes {
		log.Info(n)
	}
	replace := f.Write == spec.WriteReplacePartitions
	if f.Kind == spec.KindAppend && !replace && st.LastValue != nil && inc.End == nil {
		// Rows at the stored last_value were loaded by the run that stored it.
		if inc.Func == backfill.LastValueMin {
			w.EndInclusive = false
		} else {
			w.StartInclusive = false
		}
	}
	ir := &incrementalRun{r: r, f: f, h: h, rs: rs, inc: inc, w: w, run: stored.Runs, next: st}
	slots := make(batch.Positions, len(files))
	for i, fl := range files {
		slots[i] = batch.Position{File: ir.posName(fl.Name)}
	}
	heads, err := r.heads(ctx, f.Name, slots)
	if err != nil {
		return err
	}
	ir.pos = heads.Files()
	log.Info("incremental run", "run", ir.run+1, "window", windowText(w), "files", len(files))
	if replace {
		err = ir.replacePartitions(ctx, files)
	} else {
		err = ir.readWindow(ctx, files)
	}
	if err != nil {
		return err
	}

	done := checkpoint.CursorState{Runs: ir.run + 1}
	if inc.End != nil {
		done.Runs = ir.run // a bounded range is read once
	}
	done.LastValue, done.Type = ir.next.Text()
	if err := checkpoint.PutCursor(ctx, r.checkpoints, r.p.Pipeline, f.Name, done, rev); err != nil {
		return fmt.Errorf("store the cursor: %w", err)
	}
	log.Info("incremental run complete", "rows", ir.rows, "last_value", done.LastValue)
	if sig != nil {
		*sig = passSignature(files, done)
	}
	return nil
}

// passSignature identifies the files and cursor a pass starts from.
func passSignature(files []backfill.File, st checkpoint.CursorState) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%s|%d\n", st.LastValue, st.Type, st.Runs)
	for _, fl := range files {
		fmt.Fprintf(&b, "%s|%d|%d\n", fl.Name, fl.Size, fl.ModTime.UnixNano())
	}
	return b.String()
}

func windowText(w backfill.Window) string {
	lo, hi := "(-inf", "+inf)"
	if w.Start != nil {
		lo = "(" + w.Start.String()
		if w.StartInclusive {
			lo = "[" + w.Start.String()
		}
	}
	if w.End != nil {
		hi = w.End.String() + ")"
		if w.EndInclusive {
			hi = w.End.String() + "]"
		}
	}
	return lo + ", " + hi
}

// touches reports whether a file may hold rows of the window: false only
// when the cursor is a Hive column whose value lies outside it.
func (ir *incrementalRun) touches(fl backfill.File) (bool, error) {
	i := ir.rs.hive.Index(ir.inc.Cursor)
	if i < 0 {
		return true, nil
	}
	v, err := backfill.HiveValueOf(fl, ir.rs.hive.Columns[i])
	if err != nil {
		return false, fmt.Errorf("file %s: %w", fl.Name, err)
	}
	return ir.w.TouchesPartition(v, v), nil
}

// readWindow loads the rows of the window, file by file and chunk by chunk,
// resuming after the last committed chunk of this run.
func (ir *incrementalRun) readWindow(ctx context.Context, files []backfill.File) error {
	var todo []backfill.File
	for _, fl := range files {
		ok, err := ir.touches(fl)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if p, read := ir.pos[ir.posName(fl.Name)]; read {
			// Read, in part or in full, before this process: its cursors
			// count towards the run's last_value.
			if err := ir.scanCursor(ctx, fl, ir.see); err != nil {
				return err
			}
			if p.Done {
				continue
			}
		}
		todo = append(todo, fl)
	}
	ir.progress = backfill.NewProgress(todo)
	stop := ir.r.showProgress(ir.progress, ir.f)
	defer stop()
	filter := func(ch *backfill.Chunk) error {
		seen, err := ir.inc.Filter(ir.w, ch, false)
		ir.see(seen)
		return err
	}
	fl := &fileLoader{f: ir.f, h: ir.h, rs: ir.rs, start: make(map[string]int64, len(todo)), slot: ir.posName,
		filter: filter, progress: ir.progress}
	for _, file := range todo {
		fl.start[file.Name] = ir.pos[ir.posName(file.Name)].RowGroup
	}
	err := ir.r.loadFiles(ctx, fl, todo)
	ir.rows += fl.rows
	return err
}

// scanCursor reads a file's cursor column only, and passes the values in
// the window to fold.
func (ir *incrementalRun) scanCursor(ctx context.Context, fl backfill.File, fold func([]backfill.Value)) error {
	var schema, hive batch.Schema
	if i := ir.rs.wanted.Index(ir.inc.Cursor); i >= 0 {
		schema.Columns = []batch.Column{ir.rs.wanted.Columns[i]}
	}
	if i := ir.rs.inRead.Index(ir.inc.Cursor); i >= 0 {
		hive.Columns = []batch.Column{ir.rs.inRead.Columns[i]}
	}
	if len(schema.Columns) == 0 {
		// A Hive cursor not among the columns read: one value per file.
		i := ir.rs.hive.Index(ir.inc.Cursor)
		v, err := backfill.HiveValueOf(fl, ir.rs.hive.Columns[i])
		if err != nil {
			return fmt.Errorf("file %s: %w", fl.Name, err)
		}
		if ir.w.Contains(v) {
			fold([]backfill.Value{v})
		}
		return nil
	}
	opts := backfill.ReadOptions{MaxRows: ir.f.Batch.Rows, MaxBytes: ir.f.Batch.Bytes, Hive: hive, Units: ir.f.SourceUnits(ir.r.p), Paths: ir.f.SourcePaths(ir.r.p), Names: ir.r.namesOf(ir.f)}
	return backfill.ReadFile(ctx, fl, ir.rs.format, schema, opts, func(ch *backfill.Chunk) error {
		seen, err := ir.inc.Filter(ir.w, ch, true)
		if err != nil {
			return fmt.Errorf("file %s: %w", fl.Name, err)
		}
		fold(seen)
		return nil
	})
}

// partition is one partition of a replace_partitions target and the source
// files that rebuild it.
type partition struct {
	key    string
	values []backfill.Value
	files  []backfill.File
	bytes  int64
}

// replacePartitions rebuilds every partition of the target the window
// touches from all the rows of its files, and swaps it in.
func (ir *incrementalRun) replacePartitions(ctx context.Context, files []backfill.File) error {
	target := ir.r.p.Table(ir.f.Target)
	if target == nil || len(target.PartitionBy) == 0 {
		return fmt.Errorf("write: replace_partitions needs a target with partition_by; %s has none", ir.f.Target)
	}
	var cols []batch.Column
	for _, name := range target.PartitionBy {
		i := target.Schema.Index(name)
		if i < 0 || ir.rs.hive.Index(name) < 0 {
			return fmt.Errorf("write: replace_partitions: partition_by column %s of %s is not a Hive folder of the source's files (%s=<value>/)", name, ir.f.Target, name)
		}
		if ir.rs.inRead.Index(name) < 0 {
			return fmt.Errorf("write: replace_partitions: partition_by column %s is not among the source's columns: declare it there (its values come from the %s=<value>/ folders)", name, name)
		}
		cols = append(cols, target.Schema.Columns[i])
	}

	// Group the files by partition, in the order they come.
	byKey := map[string]*partition{}
	var parts []*partition
	for _, fl := range files {
		var vals []backfill.Value
		var key strings.Builder
		for _, c := range cols {
			v, err := backfill.HiveValueOf(fl, c)
			if err != nil {
				return fmt.Errorf("file %s: %w", fl.Name, err)
			}
			vals = append(vals, v)
			if v.Null {
				key.WriteString("\x00null")
			} else {
				key.WriteString(v.String())
			}
			key.WriteByte(0)
		}
		p := byKey[key.String()]
		if p == nil {
			p = &partition{key: key.String(), values: vals}
			byKey[p.key] = p
			parts = append(parts, p)
		}
		p.files = append(p.files, fl)
		p.bytes += fl.Size
	}

	// The partitions the window touches, less those this run swapped in
	// before it stopped.
	hiveCursor := ir.rs.hive.Index(ir.inc.Cursor) >= 0
	var todo []*partition
	var todoFiles []backfill.File
	for _, p := range parts {
		touched, done := false, true
		for _, fl := range p.files {
			ok, err := ir.touches(fl)
			if err != nil {
				return err
			}
			touched = touched || ok
			done = done && ir.pos[ir.posName(fl.Name)].Done
		}
		if !touched {
			continue
		}
		if done || !hiveCursor {
			// Read the cursors: a partition swapped in before this process
			// counts towards the run's last_value; with the cursor in the
			// rows, only they tell whether the window touches it.
			acc, n := ir.next, 0
			for _, fl := range p.files {
				err := ir.scanCursor(ctx, fl, func(seen []backfill.Value) {
					n += len(seen)
					if len(seen) > 0 {
						acc = ir.inc.Next(&acc, seen)
					}
				})
				if err != nil {
					return err
				}
			}
			if done {
				ir.next = acc
				continue
			}
			if n == 0 {
				continue
			}
		}
		todo = append(todo, p)
		todoFiles = append(todoFiles, p.files...)
	}
	ir.progress = backfill.NewProgress(todoFiles)
	stop := ir.r.showProgress(ir.progress, ir.f)
	defer stop()
	limit := int64(replaceLoadBytes)
	if ir.f.Batch.Bytes > 0 {
		limit = ir.f.Batch.Bytes
	}
	for len(todo) > 0 {
		n, size := 0, int64(0)
		for n < len(todo) && (n == 0 || size+todo[n].bytes <= limit) {
			size += todo[n].bytes
			n++
		}
		if err := ir.replaceLoad(ctx, target.Name, cols, todo[:n]); err != nil {
			return err
		}
		todo = todo[n:]
	}
	return nil
}

// replaceLoad rebuilds partitions in one load and swaps them in on commit.
func (ir *incrementalRun) replaceLoad(ctx context.Context, table string, cols []batch.Column, parts []*partition) error {
	keys := batch.New(batch.Schema{Columns: cols}, len(parts))
	var to batch.Positions
	for _, p := range parts {
		for i, v := range p.values {
			appendValue(keys.Vectors[i], v)
		}
		for _, fl := range p.files {
			to = append(to, batch.Position{File: ir.posName(fl.Name), Done: true})
		}
	}
	var acc backfill.CursorState
	p := &prepared{}
	p.write = func(ctx context.Context, ld sinks.Load) error {
		p.rows, p.deadLetters, acc = 0, 0, ir.next
		return ir.writePartitions(ctx, ld, table, keys, parts, &p.rows, &p.deadLetters, &acc)
	}
	// Each file continues from where this run's loads left it: a file
	// swapped in with its partition, then joined by a new file of the
	// partition, is read again with it.
	from := make(batch.Positions, len(to))
	for i, t := range to {
		from[i] = batch.Position{File: t.File}
		if h, ok := ir.pos[t.File]; ok {
			from[i] = h
		}
	}
	if err := ir.r.commitLoad(ctx, ir.f, 0, p, sinks.Commit{From: from, To: to}); err != nil {
		return err
	}
	ir.next = acc
	ir.rows += p.rows
	return nil
}

func (ir *incrementalRun) writePartitions(ctx context.Context, ld sinks.Load, table string, keys *batch.Batch, parts []*partition,
	rows, deadLetters *int64, acc *backfill.CursorState) error {
	pl, ok := ld.(sinks.PartitionLoad)
	if !ok {
		return errors.New("the destination cannot replace partitions")
	}
	if err := pl.ReplacePartitions(ctx, table, keys); err != nil {
		return err
	}
	for _, p := range parts {
		for _, fl := range p.files {
			rd, err := ir.rs.open(ir.f, fl, 0)
			if err != nil {
				return err
			}
			err = ir.writeFile(ctx, ld, rd, rows, deadLetters, acc)
			rd.Close()
			if err != nil {
				return fmt.Errorf("file %s: %w", fl.Name, err)
			}
		}
	}
	return nil
}

func (ir *incrementalRun) writeFile(ctx context.Context, ld sinks.Load, rd backfill.Reader,
	rows, deadLetters *int64, acc *backfill.CursorState) error {
	return backfill.Each(ctx, rd, func(ch *backfill.Chunk) error {
		s, err := ir.inc.Filter(ir.w, ch, true)
		if err != nil {
			return err
		}
		if len(s) > 0 {
			*acc = ir.inc.Next(acc, s)
		}
		p, err := ir.h.prepareChunk(ctx, ch)
		if err != nil {
			return err
		}
		if err := p.write(ctx, ld); err != nil {
			return err
		}
		*rows += p.rows
		*deadLetters += p.deadLetters
		ir.progress.Add(ch) // counted again if the load is retried
		return nil
	})
}

// appendValue appends a partition value to a vector of its type.
func appendValue(v *batch.Vector, x backfill.Value) {
	if x.Null {
		v.AppendNull()
		return
	}
	switch v.Type.Kind {
	case batch.KindInt64, batch.KindDate, batch.KindTimestamp:
		v.AppendInt(x.Int)
	case batch.KindFloat64:
		v.AppendFloat(x.Float)
	case batch.KindBool:
		v.AppendBool(x.Bool)
	case batch.KindString:
		v.AppendString(x.Str)
	case batch.KindBytes:
		v.AppendBytes([]byte(x.Str))
	case batch.KindDecimal:
		v.AppendDecimal(x.Dec)
	}
}
