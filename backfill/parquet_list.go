package backfill

import (
	"fmt"
	"strconv"

	"github.com/parquet-go/parquet-go"

	"github.com/sluicehq/sluice/flows/batch"
)

// Lists of a table typed by its files (ReadOptions.Children,
// docs/schema.md#child-tables): each element of a list column is a row of
// its child table, linked to its row by batch.ParentIDColumn,
// batch.ListIdxColumn and batch.RootIDColumn; the row's batch.IDColumn is
// derived from the file's name and the row's number, so that a resumed
// or repeated read gives the same ids.

// listReader reads one list column of a file, a row group at a time.
type listReader struct {
	suffix  string       // the child table's name after <table>__
	path    string       // the list's path in the file, for messages
	schema  batch.Schema // the child table's wanted columns
	slotDef byte         // the definition level at which a slot holds an element
	leaves  []*pqCol     // per column of schema, its element leaf; nil for a link column or one the file lacks

	// The row group read.
	vals  []*batch.Vector // per column of schema, the values of every slot
	defs  []byte          // per slot, its definition level
	start []int           // per row of the row group, its first slot; one more at the end
	bad   map[int]badRow  // per slot, the first value that does not fit its column
}

// newListReader returns the reader of list l of a file into the child
// table of schema s.
func newListReader(l pqLeaf, s batch.Schema, names func(string) string) (*listReader, error) {
	leaves, err := elementLeaves(l, names)
	if err != nil {
		return nil, err
	}
	lr := &listReader{suffix: l.name, path: l.path, schema: s, leaves: make([]*pqCol, len(s.Columns)),
		slotDef: byte(l.col.Columns()[0].MaxDefinitionLevel())}
	for i, c := range s.Columns {
		if batch.IsLinkColumn(c.Name) {
			continue
		}
		for _, e := range leaves {
			if e.name != c.Name {
				continue
			}
			t := columnType(e.col)
			if !convertible(t.typ, c.Type) {
				return nil, fmt.Errorf("field %s of its elements is %v in the file (Parquet %s), which does not load into %v", e.path, t.typ, t.desc, c.Type)
			}
			lr.leaves[i] = newPQCol(c, e.col, t)
			lr.leaves[i].slots = true
		}
	}
	return lr, nil
}

// open reads the row group's slots of every leaf.
func (lr *listReader) open(chunks []parquet.ColumnChunk, rows int64) error {
	lr.vals, lr.defs, lr.start, lr.bad = make([]*batch.Vector, len(lr.schema.Columns)), nil, nil, nil
	var reps []byte
	for i, col := range lr.leaves {
		if col == nil {
			continue
		}
		if col.leaf >= len(chunks) {
			return fmt.Errorf("corrupt Parquet file: no column chunk %d", col.leaf)
		}
		col.open(chunks[col.leaf].Pages())
		col.reps, col.defs = col.reps[:0], col.defs[:0]
		n := int(chunks[col.leaf].NumValues())
		v := batch.NewVector(col.want.Type, n)
		var bad []badRow
		if err := col.read(v, n, &bad); err != nil {
			return err
		}
		lr.vals[i] = v
		for _, b := range bad {
			if _, seen := lr.bad[b.row]; !seen {
				if lr.bad == nil {
					lr.bad = map[int]badRow{}
				}
				lr.bad[b.row] = b
			}
		}
		if reps == nil {
			reps, lr.defs = col.reps, col.defs
			continue
		}
		if len(col.reps) != len(reps) {
			return fmt.Errorf("corrupt Parquet file: the fields of the elements of %s hold %d and %d values", lr.path, len(reps), len(col.reps))
		}
		// A field's slot is an element where any field's is: the deepest
		// definition level says whether the element exists.
		for s, d := range col.defs {
			lr.defs[s] = max(lr.defs[s], d)
		}
	}
	if reps == nil {
		return fmt.Errorf("list %s: none of the child table's columns is in the file", lr.path)
	}
	for s, r := range reps {
		if r == 0 {
			lr.start = append(lr.start, s)
		}
	}
	if int64(len(lr.start)) != rows {
		return fmt.Errorf("corrupt Parquet file: list %s holds %d rows, its row group %d", lr.path, len(lr.start), rows)
	}
	lr.start = append(lr.start, len(reps))
	return nil
}

// emit appends to out the elements of rows [from, from+k) of the row
// group, rows firstRow.. of the batch, their parents' ids in ids. A value
// that does not fit its column makes its row bad, by its path.
func (lr *listReader) emit(out *listRows, from, k, firstRow int, ids []string, bad *[]badRow) {
	for r := range k {
		parent := ids[firstRow+r]
		idx := 0
		for s := lr.start[from+r]; s < lr.start[from+r+1]; s++ {
			if lr.defs[s] < lr.slotDef {
				continue // a null or empty list: no element
			}
			if b, ok := lr.bad[s]; ok {
				field := lr.path + "[" + strconv.Itoa(idx) + "]"
				if b.field != "value" {
					field += "." + b.field
				}
				*bad = append(*bad, badRow{row: firstRow + r, field: field, reason: b.reason, msg: b.msg})
			}
			for i, c := range lr.schema.Columns {
				v := out.batch.Vectors[i]
				switch {
				case c.Name == batch.RootIDColumn, c.Name == batch.ParentIDColumn:
					v.AppendString(parent)
				case c.Name == batch.ListIdxColumn:
					v.AppendInt(int64(idx))
				case c.Name == batch.IDColumn:
					v.AppendString(hashID(parent, lr.suffix, strconv.Itoa(idx)))
				case lr.vals[i] == nil:
					v.AppendNull()
				default:
					v.AppendFrom(lr.vals[i], s)
				}
			}
			out.parents = append(out.parents, firstRow+r)
			idx++
		}
	}
}

// listRows are the child rows of a chunk and the batch row of each one's
// parent.
type listRows struct {
	batch   *batch.Batch
	parents []int
}

// keep returns the child rows whose parents are not dropped.
func (lr *listRows) keep(dropped map[int]bool) *batch.Batch {
	if len(dropped) == 0 {
		return lr.batch
	}
	out := batch.New(lr.batch.Schema, lr.batch.Len())
	for i, p := range lr.parents {
		if !dropped[p] {
			out.AppendRow(lr.batch, i)
		}
	}
	return out
}

// rowID is the _sluice_id of row (from 0) of a file.
func rowID(file string, row int64) string {
	return hashID(file, strconv.FormatInt(row, 10))
}

// hashID is the id of the key of parts (batch.AppendLinkID).
func hashID(parts ...string) string {
	var key []byte
	for i, p := range parts {
		if i > 0 {
			key = append(key, 0)
		}
		key = append(key, p...)
	}
	return string(batch.AppendLinkID(nil, key))
}
