package flows

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/backfill"
	"github.com/sluicehq/sluice/cdc"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/decode"
	"github.com/sluicehq/sluice/flows/naming"
	"github.com/sluicehq/sluice/flows/spec"
	"github.com/sluicehq/sluice/sinks"
)

// Tables whose columns come from the data (docs/schema.md): a Parquet
// source that declares no columns, into a target that declares none, is
// typed by the schemas its files carry, their union over the files, and
// the target's schema is resolved from it as from declared columns.

// resolveFromData types the pipeline's data-told flows from the files they
// would read now, and those of JSON messages from their target's columns
// in the destination.
func (r *runner) resolveFromData(ctx context.Context) error {
	r.inferred = map[string]batch.Schema{}
	r.children = map[string]childTable{}
	for i := range r.p.Flows {
		f := &r.p.Flows[i]
		if !f.TypedByMessages(r.p) {
			continue
		}
		stored, err := r.storedColumns(ctx, f.Target)
		if err != nil {
			return err
		}
		r.inferred[f.Name] = sourceColumns(f, stored)
	}
	return r.p.ResolveFromData(r.dataSchema)
}

// storedColumns returns a table's columns in the destination, none when
// it does not exist yet.
func (r *runner) storedColumns(ctx context.Context, table string) (batch.Schema, error) {
	var stored batch.Schema
	err := r.retry(ctx, "read the columns of "+table, func(ctx context.Context) error {
		var err error
		stored, err = r.sink.Columns(ctx, table)
		if errors.Is(err, sinks.ErrUnknownTable) {
			stored, err = batch.Schema{}, nil
		}
		return err
	})
	return stored, err
}

// sourceColumns are the columns of table t a flow's messages fill: all
// but those it computes, and an SCD2 target's version columns.
func sourceColumns(f *spec.Flow, t batch.Schema) batch.Schema {
	out := batch.Schema{}
	for _, c := range t.Columns {
		if f.IsCDC() && (c.Name == cdc.StartAtColumn || c.Name == cdc.EndAtColumn) {
			continue
		}
		if !slices.ContainsFunc(f.ComputedColumns, func(cc spec.ComputedColumn) bool { return cc.Name == c.Name }) {
			out.Columns = append(out.Columns, c)
		}
	}
	return out
}

// evolve adds to a flow that infers its columns from JSON messages the
// columns its messages were found to need, and to its target, before the
// load that first carries them writes: the table's columns as the
// destination has them now (another process may have added some, and
// every column this one added is there), then those it lacks. On failure
// nothing changed.
func (r *runner) evolve(ctx context.Context, f *spec.Flow, found []batch.Column, kids map[string]decode.FoundChild) error {
	r.dataMu.Lock()
	defer r.dataMu.Unlock()
	stored, err := r.storedColumns(ctx, f.Target)
	if err != nil {
		return err
	}
	was, wasKids := r.inferred[f.Name], maps.Clone(r.children)
	next, added := addColumns(sourceColumns(f, stored), found)
	r.inferred[f.Name] = next
	undo := func() {
		r.inferred[f.Name], r.children = was, wasKids
		_ = r.p.ResolveFromData(r.dataSchema, f.Target)
	}
	names := []string{f.Target}
	for _, suffix := range slices.Sorted(maps.Keys(kids)) {
		name := f.Target + "__" + suffix
		have, err := r.storedColumns(ctx, name)
		if err != nil {
			undo()
			return err
		}
		if len(have.Columns) == 0 {
			have = linkColumns()
		}
		cols, more := addColumns(have, kids[suffix].Columns)
		parent := f.Target
		if p := kids[suffix].Parent; p != "" {
			parent += "__" + p
		}
		r.children[name] = childTable{root: f.Target, parent: parent, schema: cols}
		names = append(names, name)
		added = append(added, more...)
	}
	if err := r.p.ResolveFromData(r.dataSchema, f.Target); err != nil {
		undo()
		return err
	}
	err = r.retry(ctx, "add columns to "+f.Target, func(ctx context.Context) error {
		return r.sink.Ensure(ctx, r.tables(names...))
	})
	if err != nil {
		undo()
		return err
	}
	r.schemaChanged()
	if len(added) > 0 {
		r.log.Info("columns added from the messages", "table", f.Target, "flow", f.Name, "columns", added)
	}
	return nil
}

// addColumns adds to s the columns of found it lacks, and names them.
func addColumns(s batch.Schema, found []batch.Column) (batch.Schema, []string) {
	var added []string
	for _, c := range found {
		if s.Index(c.Name) < 0 {
			s.Columns = append(s.Columns, c)
			added = append(added, c.Name+" "+c.Type.String())
		}
	}
	return s, added
}

// childTable is a child table of a table typed by its messages.
type childTable struct {
	root   string // the table typed by the messages
	parent string // the table of its parent rows
	schema batch.Schema
}

// linkColumns are the first columns of a child table: its row's links.
func linkColumns() batch.Schema {
	return batch.Schema{Columns: []batch.Column{
		{Name: batch.RootIDColumn, Type: batch.String},
		{Name: batch.ParentIDColumn, Type: batch.String},
		{Name: batch.ListIdxColumn, Type: batch.Int64},
		{Name: batch.IDColumn, Type: batch.String},
	}}
}

// tables is Tables with the child tables of the pipeline's tables; the
// caller holds dataMu.
func (r *runner) tables(names ...string) []sinks.Table {
	out := Tables(r.p, names...)
	for _, name := range slices.Sorted(maps.Keys(r.children)) {
		if len(names) == 0 || slices.Contains(names, name) {
			out = append(out, sinks.Table{Name: name, Schema: r.children[name].schema})
		}
	}
	return out
}

// family returns table and its child tables; the caller holds dataMu.
func (r *runner) family(table string) []string {
	out := []string{table}
	for _, name := range slices.Sorted(maps.Keys(r.children)) {
		if r.children[name].root == table {
			out = append(out, name)
		}
	}
	return out
}

// childSchemas returns the child tables of table, by the part of their
// names after <table>__, for its decoders.
func (r *runner) childSchemas(table string) map[string]batch.Schema {
	r.dataMu.RLock()
	defer r.dataMu.RUnlock()
	out := map[string]batch.Schema{}
	for name, c := range r.children {
		if c.root == table {
			out[strings.TrimPrefix(name, table+"__")] = c.schema
		}
	}
	return out
}

// writeRows writes rows of a target projected onto its columns as they are
// when written: a table typed by its data may have gained columns since
// the rows were decoded (they are NULL in them).
func (r *runner) writeRows(ctx context.Context, ld sinks.Load, table string, b *batch.Batch) error {
	r.dataMu.RLock()
	defer r.dataMu.RUnlock()
	if c, ok := r.children[table]; ok {
		return ld.Write(ctx, table, Project(b, c.schema))
	}
	return ld.Write(ctx, table, Project(b, r.p.Table(table).Schema))
}

// dataSchema is the union of the schemas of the files a data-told flow
// reads now, with the Hive columns of a files source; empty when it has no
// file yet.
func (r *runner) dataSchema(f *spec.Flow) (batch.Schema, error) {
	if f.InfersJSON() {
		return r.inferred[f.Name], nil
	}
	var files []backfill.File
	hive := false
	switch {
	case f.Source.Files != nil:
		var err error
		if files, err = backfill.Plan(r.p.Dir, f.Source.Files.Path); err != nil {
			return batch.Schema{}, err
		}
		hive = true
	case f.Source.Snapshots != nil:
		versions, err := backfill.PlanSnapshots(r.p.Dir, f.Source.Snapshots.Path, nil)
		if err != nil {
			return batch.Schema{}, err
		}
		for _, v := range versions {
			if v.Ready {
				files = append(files, v.Files...)
			}
		}
	}
	s, renamed, kids, err := unionFileSchemas(files, r.dataNames())
	if err != nil {
		return batch.Schema{}, err
	}
	if len(kids) > 0 {
		if !f.HasChildren(r.p) {
			return batch.Schema{}, fmt.Errorf("the files have lists (%s), whose child tables belong to tables typed by their data: declare the source's columns to leave them out",
				strings.Join(slices.Sorted(maps.Keys(kids)), ", "))
		}
		r.noteFileChildren(f.Target, kids)
		if s.Index(batch.IDColumn) < 0 {
			s.Columns = append(s.Columns, batch.Column{Name: batch.IDColumn, Type: batch.String, Nullable: true})
		}
	}
	if !hive || len(s.Columns) == 0 {
		return s, nil
	}
	h, err := backfill.HiveTypes(files, s)
	if err != nil {
		return batch.Schema{}, err
	}
	for _, c := range h.Columns {
		switch {
		case s.Index(c.Name) < 0:
			s.Columns = append(s.Columns, c)
		case renamed[c.Name] != "":
			return batch.Schema{}, fmt.Errorf("column %s of the files becomes %s, the name of a Hive segment of their path: rename one, or set naming: direct", renamed[c.Name], c.Name)
		}
	}
	return s, nil
}

// noteFileChildren records the child tables the lists of a table typed
// by its files fill (by the part of their names after <table>__), with
// the columns they had before and those the files add; the caller holds
// dataMu or is alone.
func (r *runner) noteFileChildren(table string, kids map[string]backfill.ChildTable) {
	for suffix, kid := range kids {
		name := table + "__" + suffix
		have := r.children[name].schema
		if len(have.Columns) == 0 {
			have = linkColumns()
		}
		have, _ = addColumns(have, kid.Schema.Columns)
		parent := table
		if kid.Parent != "" {
			parent += "__" + kid.Parent
		}
		r.children[name] = childTable{root: table, parent: parent, schema: have}
	}
}

// dataNames is how names from the data become column names under the
// pipeline's naming (docs/schema.md#names); nil keeps them.
func (r *runner) dataNames() func(string) string {
	if r.p.Naming == spec.NamingDirect {
		return nil
	}
	return naming.SnakeCase
}

// namesOf returns how a data-told flow's files name its columns (each
// file by its own names, normalized): nil for any other flow, or with
// naming: direct.
func (r *runner) namesOf(f *spec.Flow) func(string) string {
	if !f.DataTold(r.p) {
		return nil
	}
	return r.dataNames()
}

// unionFileSchemas merges the Parquet schemas of files in order of first
// appearance, each file's column names given by names (nil: as they are):
// a column some file lacks is nullable, as is one nullable in any file; a
// column whose type differs between two files is an error naming both, as
// are two columns of one file with the same name. renamed gives, for a
// column whose name differs from a file's, that name.
func unionFileSchemas(files []backfill.File, names func(string) string) (out batch.Schema, renamed map[string]string, kids map[string]backfill.ChildTable, err error) {
	from := map[string]string{} // column → the file that first had it
	renamed = map[string]string{}
	for i, fl := range files {
		s, paths, lists, err := backfill.ParquetTables(fl.Path, names)
		if err != nil {
			return batch.Schema{}, nil, nil, err
		}
		for suffix, ks := range lists {
			if kids == nil {
				kids = map[string]backfill.ChildTable{}
			}
			have, known := kids[suffix]
			if known && have.Parent != ks.Parent {
				return batch.Schema{}, nil, nil, fmt.Errorf("list %s of %s is inside another list than in an earlier file: make the files agree", suffix, fl.Name)
			}
			for _, c := range ks.Schema.Columns {
				if k := have.Schema.Index(c.Name); k >= 0 && have.Schema.Columns[k].Type != c.Type {
					return batch.Schema{}, nil, nil, fmt.Errorf("field %s of the elements of list %s is %s in %s but %s in an earlier file: declare the source's columns, or make the files agree",
						c.Name, suffix, c.Type, fl.Name, have.Schema.Columns[k].Type)
				}
			}
			have.Parent = ks.Parent
			have.Schema, _ = addColumns(have.Schema, ks.Schema.Columns)
			kids[suffix] = have
		}
		raw := map[string]string{}
		for j, c := range s.Columns {
			if other, dup := raw[c.Name]; dup {
				how := "under naming: snake_case: rename one, or set naming: direct"
				if names == nil {
					how = "(a nested field's column is named by its path): rename one"
				}
				return batch.Schema{}, nil, nil, fmt.Errorf("%s: columns %q and %q both become %s %s", fl.Name, other, paths[j], c.Name, how)
			}
			raw[c.Name] = paths[j]
			if c.Name != paths[j] {
				renamed[c.Name] = paths[j]
			}
		}
		for _, c := range s.Columns {
			k := out.Index(c.Name)
			switch {
			case k < 0:
				c.Nullable = c.Nullable || i > 0
				out.Columns = append(out.Columns, c)
				from[c.Name] = fl.Name
			case out.Columns[k].Type != c.Type:
				return batch.Schema{}, nil, nil, fmt.Errorf("column %s is %s in %s but %s in %s: declare the source's columns, or make the files agree",
					c.Name, c.Type, fl.Name, out.Columns[k].Type, from[c.Name])
			default:
				out.Columns[k].Nullable = out.Columns[k].Nullable || c.Nullable
			}
		}
		for k := range out.Columns {
			if s.Index(out.Columns[k].Name) < 0 {
				out.Columns[k].Nullable = true
			}
		}
	}
	return out, renamed, kids, nil
}

// sourceSchema returns a flow's SourceSchema, which ensureFromData may set
// meanwhile for a data-told flow.
func (r *runner) sourceSchema(f *spec.Flow) batch.Schema {
	r.dataMu.RLock()
	defer r.dataMu.RUnlock()
	return f.SourceSchema()
}

// recordSchema returns a flow's RecordSchema (see sourceSchema).
func (r *runner) recordSchema(f *spec.Flow) batch.Schema {
	r.dataMu.RLock()
	defer r.dataMu.RUnlock()
	return f.RecordSchema()
}

// tableSchema returns a target's resolved schema.
func (r *runner) tableSchema(name string) batch.Schema {
	r.dataMu.RLock()
	defer r.dataMu.RUnlock()
	if t := r.p.Table(name); t != nil {
		return t.Schema
	}
	return batch.Schema{}
}

// ensureFromData types and creates the target of a data-told files flow
// that had no files when the run started, once its first files arrived.
func (r *runner) ensureFromData(ctx context.Context, f *spec.Flow) error {
	if !f.DataTold(r.p) || len(r.tableSchema(f.Target).Columns) > 0 {
		return nil
	}
	r.dataMu.Lock()
	defer r.dataMu.Unlock()
	if len(r.p.Table(f.Target).Schema.Columns) > 0 {
		return nil
	}
	if err := r.p.ResolveFromData(r.dataSchema, f.Target); err != nil {
		return err
	}
	if len(r.p.Table(f.Target).Schema.Columns) == 0 {
		return nil // no file yet
	}
	r.log.Info("table typed by its first files", "table", f.Target, "flow", f.Name)
	err := r.retry(ctx, "ensure table "+f.Target, func(ctx context.Context) error {
		return r.sink.Ensure(ctx, r.tables(r.family(f.Target)...))
	})
	if err == nil {
		r.schemaChanged()
	}
	return err
}

// evolveFromFiles adds to the table of a data-told Parquet files flow the
// columns of the files to read that it was not typed with (files that
// arrived since): the table is typed again from its files as they are now
// and gains them before any of those files is read, so that no value of
// them is lost. A CDC target refuses such files instead: a restart types
// it again (docs/schema.md). It reports whether the table changed.
func (r *runner) evolveFromFiles(ctx context.Context, f *spec.Flow, todo []backfill.File, wanted batch.Schema) (bool, error) {
	if !f.DataTold(r.p) || f.InfersJSON() || len(todo) == 0 {
		return false, nil
	}
	s, _, kids, err := unionFileSchemas(todo, r.dataNames())
	if err != nil {
		return false, err
	}
	var added []string
	for _, c := range s.Columns {
		if wanted.Index(c.Name) < 0 {
			if f.Kind != spec.KindAppend {
				return false, fmt.Errorf("a file arrived since the start with column %s (%s), which table %s was not typed with: restart sluice to add it; nothing of the file was read",
					c.Name, c.Type, f.Target)
			}
			added = append(added, c.Name+" "+c.Type.String())
		}
	}
	if len(kids) > 0 && wanted.Index(batch.IDColumn) < 0 && f.Kind == spec.KindAppend {
		added = append(added, batch.IDColumn)
	}
	r.dataMu.RLock()
	for suffix, ks := range kids {
		have := r.children[f.Target+"__"+suffix].schema
		for _, c := range ks.Schema.Columns {
			if have.Index(c.Name) < 0 {
				added = append(added, f.Target+"__"+suffix+"."+c.Name+" "+c.Type.String())
			}
		}
	}
	r.dataMu.RUnlock()
	if len(added) == 0 {
		return false, nil
	}
	r.dataMu.Lock()
	defer r.dataMu.Unlock()
	if err := r.p.ResolveFromData(r.dataSchema, f.Target); err != nil {
		return false, err
	}
	err = r.retry(ctx, "add columns to "+f.Target, func(ctx context.Context) error {
		return r.sink.Ensure(ctx, r.tables(r.family(f.Target)...))
	})
	if err != nil {
		return false, err
	}
	r.schemaChanged()
	r.log.Info("columns added from the files", "table", f.Target, "flow", f.Name, "columns", added)
	return true, nil
}

// typeHiveColumns adds to a table typed by the lines of its JSONL files
// the Hive columns of the files about to be read that it lacks, before
// their first load, and has h fill them from the files' paths.
func (r *runner) typeHiveColumns(ctx context.Context, f *spec.Flow, h batchHandler, hive batch.Schema) error {
	have := r.sourceSchema(f)
	var missing []batch.Column
	for _, c := range hive.Columns {
		if have.Index(c.Name) < 0 {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		if err := r.evolve(ctx, f, missing, nil); err != nil {
			return err
		}
	}
	h.(*appendHandler).hive = hive.Names()
	return nil
}
