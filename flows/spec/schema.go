package spec

import (
	"slices"
	"strings"

	"github.com/sluicehq/sluice/flows/batch"
)

// targets resolves every table's schema and checks the rules between the
// flows that share a table.
func (c *checker) targets() {
	for ti := range c.p.Tables {
		c.target(ti)
	}
}

// target resolves table ti's schema.
func (c *checker) target(ti int) {
	t := &c.p.Tables[ti]
	t.Schema, t.CDC, t.Keys, t.SCDType = batch.Schema{}, false, nil, 0
	tpath := indexPath("tables", ti)
	if !identifier.MatchString(t.Name) || strings.HasPrefix(t.Name, reservedPrefix) || c.p.Table(t.Name) != t {
		return // a bad name or a duplicate, reported already
	}
	var flows []int
	written := false
	for i := range c.p.Flows {
		switch f := &c.p.Flows[i]; {
		case f.Target != t.Name:
		case f.Kind == KindAppend || f.Kind == KindAutoCDC || f.Kind == KindAutoCDCFromSnapshot:
			flows = append(flows, i)
			written = true
		default:
			written = true // by a flow of no valid kind, reported already
		}
	}
	if len(flows) == 0 {
		if written {
			return
		}
		if len(t.Columns) == 0 {
			c.add(tpath+".columns", "no flow writes table %s and it declares no columns", t.Name)
		} else {
			t.Schema = columnsSchema(t.Columns)
		}
		c.tableKeys(ti, t)
		return
	}
	first := &c.p.Flows[flows[0]]
	mixed := false
	for _, i := range flows[1:] {
		if f := &c.p.Flows[i]; f.IsCDC() != first.IsCDC() {
			app, cdc := first, f
			if f.Kind == KindAppend {
				app, cdc = f, first
			}
			c.add(indexPath("flows", i)+".target", "append flow %s and %s flow %s may not write the same table %s", app.Name, cdc.Kind, cdc.Name, t.Name)
			mixed = true
		}
	}
	switch {
	case mixed:
	case first.IsCDC():
		c.cdcTarget(ti, t, flows)
	default:
		c.appendTarget(ti, t, flows)
	}
	c.tableKeys(ti, t)
}

// tableKeys checks order_by and partition_by against the resolved schema.
func (c *checker) tableKeys(ti int, t *Table) {
	if len(t.Schema.Columns) == 0 {
		return
	}
	path := indexPath("tables", ti)
	c.unknownColumns(path+".order_by", t.OrderBy, t.Schema, "table columns")
	c.unknownColumns(path+".partition_by", t.PartitionBy, t.Schema, "table columns")
}

// sourceColumnPath returns the path of a flow's declared source column, or
// of its source when the column is not declared there.
func sourceColumnPath(i int, f *Flow, name string) string {
	sp := indexPath("flows", i) + ".source." + f.Source.Name()
	for j, col := range f.Source.Columns() {
		if col.Name == name {
			return indexPath(sp+".columns", j)
		}
	}
	return sp
}

// tableColumnPath returns the path of a table's declared column, or of its
// columns key when it has no such column.
func tableColumnPath(ti int, t *Table, name string) string {
	for j, col := range t.Columns {
		if col.Name == name {
			return indexPath(indexPath("tables", ti)+".columns", j)
		}
	}
	return indexPath("tables", ti) + ".columns"
}

// union merges the schemas of several flows in order of first appearance: a
// column some flow lacks becomes nullable; a type conflict is a problem.
// Flows whose columns only their data tells (Parquet) take no part; it
// reports false when no flow's columns are known.
func (c *checker) union(flows []int, schemaOf func(f *Flow) (batch.Schema, bool)) (batch.Schema, bool) {
	var out batch.Schema
	from := map[string]*Flow{}
	n := 0
	for _, i := range flows {
		f := &c.p.Flows[i]
		s, known := schemaOf(f)
		if !known {
			continue
		}
		n++
		for _, col := range s.Columns {
			k := out.Index(col.Name)
			switch {
			case k < 0:
				if n > 1 {
					col.Nullable = true
				}
				out.Columns = append(out.Columns, col)
				from[col.Name] = f
			case out.Columns[k].Type.Kind == batch.KindInvalid || col.Type.Kind == batch.KindInvalid:
			case out.Columns[k].Type != col.Type:
				c.add(sourceColumnPath(i, f, col.Name), "column %s is %s here but %s in flow %s, which writes the same table", col.Name, col.Type, out.Columns[k].Type, from[col.Name].Name)
			default:
				out.Columns[k].Nullable = out.Columns[k].Nullable || col.Nullable
			}
		}
		for k := range out.Columns {
			if s.Index(out.Columns[k].Name) < 0 {
				out.Columns[k].Nullable = true
			}
		}
	}
	return out, n > 0
}

// fits checks that a flow's columns fit a table's declared columns: each of
// them exists with the same type (nullable only where the table's column is,
// unless exempt), and every table column the flow lacks is nullable.
func (c *checker) fits(ti int, t *Table, f *Flow, s batch.Schema, skip, exempt []string) {
	decl := columnsSchema(t.Columns)
	for _, col := range s.Columns {
		k := decl.Index(col.Name)
		switch {
		case k < 0:
			c.add(indexPath("tables", ti)+".columns", "table %s does not declare column %s (%s) of flow %s", t.Name, col.Name, col.Type, f.Name)
		case decl.Columns[k].Type.Kind == batch.KindInvalid || col.Type.Kind == batch.KindInvalid:
		case decl.Columns[k].Type != col.Type:
			c.add(tableColumnPath(ti, t, col.Name), "column %s is %s here but %s in flow %s", col.Name, decl.Columns[k].Type, col.Type, f.Name)
		case col.Nullable && !decl.Columns[k].Nullable && !slices.Contains(exempt, col.Name):
			c.add(tableColumnPath(ti, t, col.Name), "column %s is nullable in flow %s: declare it nullable here", col.Name, f.Name)
		}
	}
	for _, col := range decl.Columns {
		if s.Index(col.Name) < 0 && !col.Nullable && !slices.Contains(skip, col.Name) {
			c.add(tableColumnPath(ti, t, col.Name), "flow %s has no column %s: declare it nullable here", f.Name, col.Name)
		}
	}
}

func (c *checker) appendTarget(ti int, t *Table, flows []int) {
	if c.written(indexPath("tables", ti)+".state_cache", t.StateCache, nil) {
		c.add(indexPath("tables", ti)+".state_cache", "state_cache applies to CDC targets only; no auto_cdc or auto_cdc_from_snapshot flow writes %s", t.Name)
	}
	if len(t.Columns) > 0 {
		t.Schema = columnsSchema(t.Columns)
		for _, i := range flows {
			f := &c.p.Flows[i]
			if len(f.Source.Columns()) == 0 {
				continue // it decodes the table's columns, or Parquet's
			}
			c.fits(ti, t, f, f.RecordSchema(), nil, nil)
		}
		return
	}
	t.Schema, _ = c.union(flows, schemaOf)
}

func (c *checker) cdcTarget(ti int, t *Table, flows []int) {
	first := &c.p.Flows[flows[0]]
	t.CDC = true
	t.Keys = first.Keys
	t.SCDType = first.StoredAsSCDType
	if t.SCDType == 0 {
		t.SCDType = DefaultSCDType
	}
	var snap *Flow
	var seq []batch.Type // of the first auto_cdc flow whose sequence type is known
	var seqFlow *Flow
	for _, i := range flows {
		f := &c.p.Flows[i]
		if f.Kind == KindAutoCDCFromSnapshot && snap == nil {
			snap = f
		}
		if f.Kind == KindAutoCDC && seq == nil {
			s, _ := schemaOf(f)
			if st, ok := sequenceType(f, s); ok {
				seq, seqFlow = st, f
			}
		}
	}
	for _, i := range flows[1:] {
		f := &c.p.Flows[i]
		path := indexPath("flows", i)
		scd := f.StoredAsSCDType
		if scd == 0 {
			scd = DefaultSCDType
		}
		if scd != t.SCDType {
			c.add(path+".stored_as_scd_type", "flow %s stores table %s as SCD type %d, this flow as type %d", first.Name, t.Name, t.SCDType, scd)
		}
		if len(first.Keys) > 0 && len(f.Keys) > 0 && !sameKeys(first.Keys, f.Keys, first.Kind == KindAutoCDCFromSnapshot || f.Kind == KindAutoCDCFromSnapshot) {
			c.add(path+".keys", "keys [%s] differ from flow %s's keys [%s] on the same table %s", strings.Join(f.Keys, ", "), first.Name, strings.Join(first.Keys, ", "), t.Name)
		}
		if f.Kind == KindAutoCDCFromSnapshot && f != snap {
			c.add(path+".kind", "table %s already has a snapshot flow, %s: at most one per table", t.Name, snap.Name)
		}
		if f.Kind == KindAutoCDC && f != seqFlow && seq != nil {
			s, _ := schemaOf(f)
			if st, ok := sequenceType(f, s); ok && !slices.Equal(st, seq) {
				c.add(path+".sequence_by", "sequence type %s differs from flow %s's %s on the same table %s", typesString(st), seqFlow.Name, typesString(seq), t.Name)
			}
		}
	}
	if snap != nil {
		for _, i := range flows {
			f := &c.p.Flows[i]
			if f.Kind != KindAutoCDC {
				continue
			}
			path := indexPath("flows", i)
			for _, key := range []string{"ignore_null_updates", "ignore_null_updates_column_list", "ignore_null_updates_except_column_list"} {
				if (key == "ignore_null_updates" && f.IgnoreNullUpdates) || (key != "ignore_null_updates" && c.fwritten(i, f, key)) {
					c.add(path+"."+key, "no ignore-null on a flow that shares table %s with snapshot flow %s", t.Name, snap.Name)
				}
			}
		}
		if vt, ok := versionType(snap); ok && seq != nil {
			si := slices.IndexFunc(flows, func(i int) bool { return &c.p.Flows[i] == snap })
			path := indexPath("flows", flows[si])
			if !c.p.pos.has(path+".snapshot_version_type") && c.p.pos.has(path+".snapshot_version") {
				path += ".snapshot_version"
			} else {
				path += ".snapshot_version_type"
			}
			if len(seq) != 1 || seq[0] != vt {
				c.add(path, "snapshot version type %s differs from the sequence type %s of flow %s on the same table %s", vt, typesString(seq), seqFlow.Name, t.Name)
			}
		}
	}

	// The interval columns of SCD type 2: typed like the sequence, or the
	// snapshot version; a list sequence is held as JSON text.
	var interval *batch.Type
	switch {
	case t.SCDType != 2:
	case seq != nil && len(seq) == 1:
		interval = &seq[0]
	case seq != nil:
		text := batch.String
		interval = &text
	case snap != nil:
		if vt, ok := versionType(snap); ok {
			interval = &vt
		}
	}
	intervalKnown := t.SCDType != 2 || interval != nil

	keysNonNull := func(s batch.Schema) batch.Schema {
		out := batch.Schema{Columns: slices.Clone(s.Columns)}
		for k := range out.Columns {
			if slices.Contains(t.Keys, out.Columns[k].Name) {
				out.Columns[k].Nullable = false
			}
		}
		return out
	}
	selectedOf := func(f *Flow) (batch.Schema, bool) {
		s, known := schemaOf(f)
		return keysNonNull(selected(f, s)), known
	}

	if len(t.Columns) > 0 {
		var schema batch.Schema
		for _, col := range t.Columns {
			schema.Columns = append(schema.Columns, col.Batch())
		}
		for _, i := range flows {
			f := &c.p.Flows[i]
			if len(f.Source.Columns()) == 0 && len(f.ExceptColumnList) == 0 && len(f.ColumnList) == 0 {
				continue // it decodes the table's columns, or Parquet's
			}
			if s, known := selectedOf(f); known {
				c.fits(ti, t, f, s, []string{StartAtColumn, EndAtColumn}, f.Keys)
			}
		}
		if t.SCDType == 2 {
			for _, name := range []string{StartAtColumn, EndAtColumn} {
				k := schema.Index(name)
				switch {
				case k < 0 && interval != nil:
					schema.Columns = append(schema.Columns, batch.Column{Name: name, Type: *interval, Nullable: true})
				case k < 0:
				case interval != nil && schema.Columns[k].Type != *interval && schema.Columns[k].Type.Kind != batch.KindInvalid:
					c.add(tableColumnPath(ti, t, name), "column %s is %s here but the sequence is %s", name, schema.Columns[k].Type, *interval)
				case !schema.Columns[k].Nullable:
					c.add(tableColumnPath(ti, t, name), "column %s must be nullable", name)
				}
			}
		} else {
			for _, name := range []string{StartAtColumn, EndAtColumn} {
				if schema.Index(name) >= 0 {
					c.add(tableColumnPath(ti, t, name), "column %s belongs to SCD type 2 tables; this table is SCD type 1", name)
				}
			}
		}
		if intervalKnown {
			t.Schema = schema
		}
		return
	}
	schema, known := c.union(flows, selectedOf)
	if !known || !intervalKnown {
		return
	}
	if interval != nil {
		schema.Columns = append(schema.Columns,
			batch.Column{Name: StartAtColumn, Type: *interval, Nullable: true},
			batch.Column{Name: EndAtColumn, Type: *interval, Nullable: true})
	}
	t.Schema = schema
}

// sameKeys compares two key lists in order; fold compares the names
// case-insensitively (a snapshot flow's keys).
func sameKeys(a, b []string, fold bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] && !(fold && strings.EqualFold(a[i], b[i])) {
			return false
		}
	}
	return true
}
