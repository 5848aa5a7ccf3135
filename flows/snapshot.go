package flows

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/backfill"
	"github.com/sluicehq/sluice/cdc"
	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/spec"
	"github.com/sluicehq/sluice/sinks"
)

// versionColumn carries a snapshot's version as the sequence of its rows.
const versionColumn = "__sluice_snapshot_version"

// ErrDuplicateKey refuses a snapshot holding a key twice (SN2).
var ErrDuplicateKey = errors.New("snapshot holds a key twice")

// snapshotVersion is one snapshot to apply.
type snapshotVersion struct {
	text  string
	value backfill.Value
	files []backfill.File
}

// runSnapshotFlow applies the flow's snapshots newer than the last one it
// applied, in ascending version order, each as one load (SN1–SN4): for SCD
// type 1 a truncate at the version followed by an upsert at the version of
// every snapshot row; for SCD type 2 an upsert at the version of every
// present key and a delete at the version of every current key the snapshot
// lacks. Per key, the newer of the snapshot version and a CDC sequence wins.
func (r *runner) runSnapshotFlow(ctx context.Context, f *spec.Flow, t *cdcTarget) error {
	log := r.log.With("flow", f.Name)
	for {
		if err := r.snapshotPass(ctx, f, t, log); err != nil || r.opts.Mode == ModeUpdate {
			return err
		}
		if err := sleep(ctx, r.opts.PollFiles); err != nil {
			return nil
		}
	}
}

func (r *runner) snapshotPass(ctx context.Context, f *spec.Flow, t *cdcTarget, log interface {
	Info(string, ...any)
}) error {
	vtype := r.versionType(f)
	var versions []snapshotVersion
	switch {
	case f.Source.Snapshots != nil:
		var declared *batch.Type
		if vtype.Kind != batch.KindInvalid {
			declared = &vtype
		}
		planned, err := backfill.PlanSnapshots(r.p.Dir, f.Source.Snapshots.Path, declared)
		if err != nil {
			return err
		}
		for _, v := range planned {
			if !v.Ready {
				log.Info("snapshot not ready (no _SUCCESS yet)", "version", v.Text)
				continue
			}
			versions = append(versions, snapshotVersion{text: v.Text, value: v.Value, files: v.Files})
		}
	default:
		if vtype.Kind == batch.KindInvalid {
			vtype = inferVersionType(f.SnapshotVersion)
		}
		val, err := backfill.ParseValue(f.SnapshotVersion, vtype)
		if err != nil {
			return fmt.Errorf("snapshot_version %q: %w", f.SnapshotVersion, err)
		}
		files, err := backfill.Plan(r.p.Dir, f.Source.Files.Path)
		if err != nil {
			return err
		}
		versions = []snapshotVersion{{text: f.SnapshotVersion, value: val, files: files}}
	}

	st, _, err := checkpoint.GetSnapshot(ctx, r.checkpoints, r.p.Pipeline, f.Name)
	if err != nil {
		return err
	}
	var last *backfill.Value
	if st.Last != "" && len(versions) > 0 {
		v, err := backfill.ParseValue(st.Last, versions[0].value.Type)
		if err != nil {
			return fmt.Errorf("last applied snapshot %q: %w", st.Last, err)
		}
		last = &v
	}
	for _, v := range versions {
		if last != nil && v.value.Compare(*last) <= 0 {
			if !st.Has(v.text) {
				log.Info("snapshot skipped: not newer than the last applied one", "version", v.text, "last", st.Last)
			}
			continue
		}
		if err := r.applySnapshot(ctx, f, t, v); err != nil {
			return fmt.Errorf("snapshot %s: %w", v.text, err)
		}
		if _, err := checkpoint.AddSnapshotVersion(ctx, r.checkpoints, r.p.Pipeline, f.Name, v.text); err != nil {
			return err
		}
		log.Info("snapshot applied", "version", v.text)
		vv := v.value
		last = &vv
	}
	return nil
}

// versionType is the declared snapshot_version_type, else the sequence
// type of the CDC flows on the same target (U1 makes them equal).
func (r *runner) versionType(f *spec.Flow) batch.Type {
	if f.SnapshotVersionType.Kind != batch.KindInvalid {
		return f.SnapshotVersionType
	}
	for i := range r.p.Flows {
		o := &r.p.Flows[i]
		if o.Target == f.Target && o.Kind == spec.KindAutoCDC && len(o.SequenceBy) == 1 {
			if c := o.SourceSchema().Index(o.SequenceBy[0]); c >= 0 {
				return o.SourceSchema().Columns[c].Type
			}
		}
	}
	return batch.Type{}
}

// inferVersionType types a single version's text as DESIGN.md says.
func inferVersionType(text string) batch.Type {
	if _, err := strconv.ParseInt(text, 10, 64); err == nil {
		return batch.Int64
	}
	if _, err := time.Parse(time.DateOnly, text); err == nil {
		return batch.Date
	}
	if _, err := time.Parse(time.RFC3339Nano, text); err == nil {
		return batch.Timestamp
	}
	return batch.String
}

// applySnapshot reads one snapshot whole and applies it in one load.
func (r *runner) applySnapshot(ctx context.Context, f *spec.Flow, t *cdcTarget, v snapshotVersion) error {
	rows, err := r.readSnapshot(f, v)
	if err != nil {
		return err
	}
	src := rows.Schema
	// The version is the sequence of every event of the snapshot.
	withVersion := batch.Schema{Columns: append(append([]batch.Column(nil), src.Columns...), batch.Column{Name: versionColumn, Type: v.value.Type})}
	scd2 := f.StoredAsSCDType == 2
	cfg := cdc.Config{
		Pipeline: r.p.Pipeline, Flow: f.Name, Target: f.Target,
		Source: withVersion, Table: t.table.Schema,
		Keys: f.Keys, SequenceBy: []string{versionColumn}, ExceptColumnList: []string{versionColumn},
		SCDType: f.StoredAsSCDType, TrackHistoryColumnList: f.TrackHistoryColumnList,
		TrackHistoryExceptColumnList: f.TrackHistoryExceptColumnList,
		TombstoneRetention:           f.TombstoneRetention,
		FailOnError:                  true,
		Logger:                       r.log.With("flow", f.Name),
	}
	eng, err := cdc.New(cfg, t.cache)
	if err != nil {
		return err
	}

	// SN2: a key twice means nothing of the snapshot applies.
	seen := make(map[string]bool, rows.Len())
	for i := range rows.Len() {
		k, err := eng.KeyOf(rows, i)
		if err != nil {
			return err
		}
		if seen[k] {
			return fmt.Errorf("%w (row %d): nothing of it applied", ErrDuplicateKey, i+1)
		}
		seen[k] = true
	}

	in := cdc.Input{Batch: batch.New(withVersion, rows.Len()+1)}
	addRow := func(from *batch.Batch, i int, op cdc.Op) {
		for c := range src.Columns {
			if from == nil {
				in.Batch.Vectors[c].AppendNull()
			} else {
				in.Batch.Vectors[c].AppendFrom(from.Column(src.Columns[c].Name), i)
			}
		}
		v.value.AppendTo(in.Batch.Vectors[len(src.Columns)], 1)
		in.Ops = append(in.Ops, op)
		in.Positions = append(in.Positions, cdc.Position{Flow: f.Name, File: v.text, Offset: int64(len(in.Positions))})
	}
	if !scd2 {
		addRow(nil, 0, cdc.OpTruncate)
	} else {
		// Every current key the snapshot lacks is deleted at the version.
		cur, err := r.sink.Scan(ctx, f.Target)
		if err != nil && !errors.Is(err, sinks.ErrUnknownTable) {
			return err
		}
		if cur != nil {
			end := cur.Column(cdc.EndAtColumn)
			for i := range cur.Len() {
				if end != nil && !end.IsNull(i) {
					continue
				}
				k, err := eng.KeyOf(cur, i)
				if err != nil {
					return err
				}
				if !seen[k] {
					addRow(keysOnly(cur, f.Keys, src), i, cdc.OpDelete)
				}
			}
		}
	}
	for i := range rows.Len() {
		addRow(rows, i, cdc.OpUpsert)
	}
	in.Now = time.Now()

	h := &cdcHandler{r: r, flow: f, target: t, cfg: cfg, engine: eng}
	p, err := h.apply(ctx, in, nil)
	if err != nil {
		return err
	}
	c := sinks.Commit{To: batch.Positions{{File: "snapshot:" + v.text, Done: true}}, Rows: p.rows}
	_, err = r.loadPrepared(ctx, f, 0, p, c)
	if p.done != nil {
		p.done(err == nil)
	}
	if p.unlock != nil {
		p.unlock()
	}
	return err
}

// keysOnly returns a batch of the source schema's shape holding the key
// columns of the target's rows (other columns null) for delete events.
func keysOnly(cur *batch.Batch, keys []string, src batch.Schema) *batch.Batch {
	out := &batch.Batch{Schema: src, Vectors: make([]*batch.Vector, len(src.Columns))}
	n := cur.Len()
	for c, col := range src.Columns {
		if v := cur.Column(col.Name); v != nil && slices.Contains(keys, col.Name) {
			out.Vectors[c] = v
			continue
		}
		v := batch.NewVector(col.Type, n)
		for range n {
			v.AppendNull()
		}
		out.Vectors[c] = v
	}
	return out
}

// readSnapshot reads every file of a snapshot into one batch.
func (r *runner) readSnapshot(f *spec.Flow, v snapshotVersion) (*batch.Batch, error) {
	wanted := f.SourceSchema()
	if len(wanted.Columns) == 0 && len(v.files) > 0 {
		var err error
		if wanted, err = backfill.ParquetSchema(v.files[0].Path); err != nil {
			return nil, err
		}
	}
	if len(wanted.Columns) == 0 {
		return nil, errors.New("no files and no declared columns")
	}
	format := ""
	switch {
	case f.Source.Snapshots != nil:
		format = f.Source.Snapshots.Format
		if format == "" {
			format = backfill.FormatOf(f.Source.Snapshots.Path)
		}
	default:
		format = f.Source.Files.Format
		if format == "" {
			format = backfill.FormatOf(f.Source.Files.Path)
		}
	}
	out := batch.New(wanted, 0)
	for _, fl := range v.files {
		rd, err := backfill.Open(fl, format, wanted, backfill.ReadOptions{})
		if err != nil {
			return nil, err
		}
		for {
			ch, err := rd.Next(context.Background())
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				rd.Close()
				return nil, err
			}
			if len(ch.DeadLetters) > 0 {
				rd.Close()
				d := ch.DeadLetters[0]
				return nil, fmt.Errorf("file %s row %s: %s: a snapshot applies whole or not at all", d.Source, d.Position, d.Error)
			}
			for i := range ch.Batch.Len() {
				out.AppendRow(ch.Batch, i)
			}
		}
		rd.Close()
	}
	return out, nil
}

// resolveSnapshotSchemas gives an SCD type 2 target that only snapshot
// flows write the schema the spec could not: the snapshot's columns plus
// __START_AT and __END_AT typed like the versions, read off the snapshot
// folders when no type is declared.
func (r *runner) resolveSnapshotSchemas() error {
	for i := range r.p.Tables {
		t := &r.p.Tables[i]
		if len(t.Schema.Columns) > 0 || !t.CDC {
			continue
		}
		for _, f := range r.p.FlowsOf(t.Name) {
			if f.Kind != spec.KindAutoCDCFromSnapshot {
				continue
			}
			cols := f.SourceSchema().Columns
			if len(cols) == 0 {
				return fmt.Errorf("table %s: declare the columns of flow %s's snapshots", t.Name, f.Name)
			}
			vt := r.versionType(f)
			if vt.Kind == batch.KindInvalid {
				switch {
				case f.Source.Snapshots != nil:
					planned, err := backfill.PlanSnapshots(r.p.Dir, f.Source.Snapshots.Path, nil)
					if err != nil {
						return err
					}
					if len(planned) == 0 {
						return fmt.Errorf("table %s: no snapshot yet to type __START_AT by: set snapshot_version_type on flow %s", t.Name, f.Name)
					}
					vt = planned[0].Value.Type
				default:
					vt = inferVersionType(f.SnapshotVersion)
				}
			}
			t.Schema = batch.Schema{Columns: append([]batch.Column(nil), cols...)}
			if f.StoredAsSCDType == 2 {
				t.Schema.Columns = append(t.Schema.Columns,
					batch.Column{Name: cdc.StartAtColumn, Type: vt, Nullable: true},
					batch.Column{Name: cdc.EndAtColumn, Type: vt, Nullable: true})
			}
			break
		}
	}
	return nil
}
