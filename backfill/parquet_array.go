package backfill

import (
	"fmt"
	"strconv"

	"github.com/parquet-go/parquet-go"

	"github.com/sluicehq/sluice/flows/batch"
)

// arrayCol reads a Parquet LIST of scalars into a declared array(T) column,
// a row group at a time. An array is never null, nor is any of its
// elements: a null list or a null element makes its row bad, by the
// element's path (tags[2]), as a value that does not fit T does.
type arrayCol struct {
	name    string
	elem    *pqCol // the element's leaf, read by level slot
	listDef byte   // the definition level at which the list is not null
	slotDef byte   // ... at which a slot holds an element, null or not
	elemDef byte   // ... at which the element is not null

	// The row group read.
	vals  *batch.Vector  // the value of every slot (null where it holds none)
	defs  []byte         // per slot, its definition level
	start []int          // per row of the row group, its first slot; one more at the end
	bad   map[int]badRow // per slot, why its value does not fit T
	row   int            // the row group's next row
}

// newArrayCol returns the reader of list l of a file into column c, an
// array.
func newArrayCol(c batch.Column, l pqLeaf) (*arrayCol, error) {
	if l.list == nil {
		return nil, fmt.Errorf("is not a Parquet LIST, which %v reads", c.Type)
	}
	if !l.list.Leaf() {
		return nil, fmt.Errorf("is a list of groups, and %v holds scalars: leave the column undeclared for a child table (docs/schema.md#child-tables)", c.Type)
	}
	t := columnType(l.list)
	if t.err != "" {
		return nil, fmt.Errorf("its elements: %s", t.err)
	}
	et := c.Type.ElemType()
	if !convertible(t.typ, et) {
		return nil, fmt.Errorf("its elements are %v in the file (Parquet %s), which do not load into %v", t.typ, t.desc, et)
	}
	elem := newPQCol(batch.Column{Name: c.Name, Type: et, Nullable: true}, l.list, t)
	elem.slots = true
	return &arrayCol{
		name:    c.Name,
		elem:    elem,
		listDef: byte(l.col.MaxDefinitionLevel()),
		slotDef: byte(l.col.Columns()[0].MaxDefinitionLevel()),
		elemDef: byte(l.list.MaxDefinitionLevel()),
	}, nil
}

// open reads the slots of a row group of rows rows.
func (a *arrayCol) open(chunks []parquet.ColumnChunk, rows int64) error {
	col := a.elem
	if col.leaf >= len(chunks) {
		return fmt.Errorf("corrupt Parquet file: no column chunk %d", col.leaf)
	}
	col.open(chunks[col.leaf].Pages())
	col.reps, col.defs = col.reps[:0], col.defs[:0]
	n := int(chunks[col.leaf].NumValues())
	a.vals = batch.NewVector(col.want.Type, n)
	var bad []badRow
	if err := col.read(a.vals, n, &bad); err != nil {
		return err
	}
	a.bad = nil
	for _, b := range bad {
		if a.bad == nil {
			a.bad = map[int]badRow{}
		}
		a.bad[b.row] = b
	}
	a.defs, a.start, a.row = col.defs, a.start[:0], 0
	for s, r := range col.reps {
		if r == 0 {
			a.start = append(a.start, s)
		}
	}
	if int64(len(a.start)) != rows {
		return fmt.Errorf("corrupt Parquet file: list %s holds %d rows, its row group %d", a.name, len(a.start), rows)
	}
	a.start = append(a.start, len(col.reps))
	return nil
}

// read appends the next k rows of the row group to v; the rows that cannot
// be stored exactly are recorded in bad (by their row in v).
func (a *arrayCol) read(v *batch.Vector, k int, bad *[]badRow) {
	for range k {
		row := v.Len()
		first := v.Elems.Len()
		var why *badRow
		for s := a.start[a.row]; s < a.start[a.row+1] && why == nil; s++ {
			idx := s - a.start[a.row]
			field := a.name + "[" + strconv.Itoa(idx) + "]"
			switch d := a.defs[s]; {
			case d < a.listDef:
				why = &badRow{row: row, field: a.name, reason: batch.ReasonMissingField, msg: "null, and an array is never null"}
			case d < a.slotDef:
				// an empty list
			case d < a.elemDef:
				why = &badRow{row: row, field: field, reason: batch.ReasonTypeMismatch, msg: "null, and the elements of " + batch.ArrayOf(a.vals.Type).String() + " are never null"}
			default:
				if b, ok := a.bad[s]; ok {
					why = &badRow{row: row, field: field, reason: b.reason, msg: b.msg}
					break
				}
				v.Elems.AppendFrom(a.vals, s)
			}
		}
		if why != nil {
			v.Elems.Truncate(first)
			*bad = append(*bad, *why)
		}
		v.EndArray()
		a.row++
	}
}

// skip passes over k rows.
func (a *arrayCol) skip(k int) { a.row += k }

func (a *arrayCol) close() { a.elem.closePages() }
