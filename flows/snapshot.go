package flows

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/backfill"
	"github.com/sluicehq/sluice/cdc"
	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/spec"
)

// versionColumn carries a snapshot's version as the sequence of its rows.
const versionColumn = "__sluice_snapshot_version"

// ErrDuplicateKey refuses a snapshot holding a key twice: nothing of that
// snapshot is applied.
var ErrDuplicateKey = errors.New("snapshot holds a key twice")

// snapshotVersion is one snapshot to apply.
type snapshotVersion struct {
	text  string
	value backfill.Value
	files []backfill.File
}

// runSnapshotFlow applies the flow's snapshots newer than the last one it
// applied, in ascending version order, each as one load: for SCD type 1 a
// truncate at the version followed by an upsert at the version of every
// snapshot row; for SCD type 2 an upsert at the version of every present key
// and a delete at the version of every current key the snapshot lacks. Per
// key, the newer of the snapshot version and a CDC sequence wins.
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
// type of the CDC flows on the same target (the spec requires them to be
// equal).
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

// inferVersionType types a single version's text: int64 when it is an
// integer, date when YYYY-MM-DD, timestamp when RFC 3339, else string.
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

// applySnapshot applies one snapshot in one load, without holding the
// snapshot or the target in memory: its rows are spilled to disk by a hash
// of their key, and so are (SCD type 2) the target's current keys; then
// each bucket of parts goes through the engine on its own, and its output
// is staged into the one load, which commits the whole version at once
// (see snapshot_bucket.go).
func (r *runner) applySnapshot(ctx context.Context, f *spec.Flow, t *cdcTarget, v snapshotVersion) error {
	src, format, err := r.snapshotSource(f, v)
	if err != nil {
		return err
	}
	// The version is the sequence of every event of the snapshot.
	withVersion := batch.Schema{Columns: append(append([]batch.Column(nil), src.Columns...), batch.Column{Name: versionColumn, Type: v.value.Type})}
	cfg := cdc.Config{
		Pipeline: r.p.Pipeline, Flow: f.Name, Target: f.Target,
		Source: withVersion, Table: t.table.Schema,
		Keys: f.Keys, SequenceBy: []string{versionColumn}, ExceptColumnList: []string{versionColumn},
		SCDType: f.StoredAsSCDType, TrackHistoryColumnList: f.TrackHistoryColumnList,
		TrackHistoryExceptColumnList: f.TrackHistoryExceptColumnList,
		TombstoneRetention:           f.TombstoneRetention,
		Snapshot:                     true,
		FailOnError:                  true,
		Logger:                       r.log.With("flow", f.Name),
	}
	cfg = trackIDs(cfg)
	eng, err := cdc.New(cfg, t.cache)
	if err != nil {
		return err
	}
	a := &snapshotApply{r: r, flow: f, target: t, version: v, cfg: cfg, src: src, withVersion: withVersion, keyer: eng}
	defer a.cleanup()
	if err := a.spillSnapshot(ctx, format); err != nil {
		return err
	}

	// From reading the target's keys to the end of the load, the target is
	// this flow's: no other flow's batch applies or loads in between.
	return t.exclusive(ctx, func() error {
		defer t.cache.Reset() // the load's outputs are not kept to commit into it
		if f.StoredAsSCDType == 2 {
			if err := a.spillTargetKeys(ctx); err != nil {
				return err
			}
		}
		if a.kids != nil {
			if err := a.spillTargetIDs(ctx); err != nil {
				return err
			}
		}
		return a.load(ctx)
	})
}

// snapshotSource returns the columns a snapshot's files are read with,
// and their format.
func (r *runner) snapshotSource(f *spec.Flow, v snapshotVersion) (batch.Schema, string, error) {
	wanted := f.SourceSchema()
	if len(wanted.Columns) == 0 && len(v.files) > 0 {
		var err error
		if wanted, err = backfill.ParquetSchema(v.files[0].Path); err != nil {
			return batch.Schema{}, "", err
		}
	}
	if len(wanted.Columns) == 0 {
		return batch.Schema{}, "", errors.New("no files and no declared columns")
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
	return wanted, format, nil
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
			if len(cols) == 0 && f.DataTold(r.p) {
				return fmt.Errorf("table %s: flow %s has no ready snapshot yet to take its columns from: start sluice once the first is ready, or declare the columns", t.Name, f.Name)
			}
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
