package backfill

import (
	"errors"
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
// or repeated read gives the same ids. A list inside an element (a list
// of lists, or a list field of a struct) is the child table of the
// element's table, as a JSON list in a list is: <table>__<field>__value,
// or <table>__<field>__<subfield>.

// ChildTable is the child table of a list of a Parquet file, as
// ParquetTables returns it.
type ChildTable struct {
	// Parent is the part after <table>__ of the table of its parent rows,
	// "" for the table's own.
	Parent string
	// Schema holds the element's columns, without the link columns.
	Schema batch.Schema
}

// listNode is a list of a Parquet file and the lists inside its element.
type listNode struct {
	suffix  string   // the child table's name after <table>__
	parent  string   // the parent's suffix, "" for a list of the row
	path    string   // a list of the row: its path in the file
	field   string   // a list inside an element: its path within the element ("" for a list of lists)
	rep     byte     // its repetition level: 1 for a list of the row
	slotDef byte     // the definition level at which a slot holds an element
	leaves  []pqLeaf // the element's scalar columns: value, or a struct's fields by path
	kids    []*listNode
}

// listNodes returns the list l of a file and every list inside it, each
// before those inside its elements.
func listNodes(l pqLeaf, names func(string) string) ([]*listNode, error) {
	var out []*listNode
	if _, err := addListNode(&out, l.col, l.list, l.name, "", l.path, "", names); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, n := range out {
		if seen[n.suffix] {
			return nil, fmt.Errorf("two of its lists become the child table %s: rename one", n.suffix)
		}
		seen[n.suffix] = true
	}
	return out, nil
}

func addListNode(out *[]*listNode, group, elem *parquet.Column, suffix, parent, path, field string, names func(string) string) (*listNode, error) {
	slots := group.Columns()[0]
	n := &listNode{suffix: suffix, parent: parent, path: path, field: field,
		rep: byte(slots.MaxRepetitionLevel()), slotDef: byte(slots.MaxDefinitionLevel())}
	*out = append(*out, n)
	at := func(f string) string {
		if field == "" && parent == "" {
			return path + "." + f
		}
		return f
	}
	kid := func(group, elem *parquet.Column, suffix, field string) error {
		k, err := addListNode(out, group, elem, suffix, n.suffix, path, field, names)
		if err == nil {
			n.kids = append(n.kids, k)
		}
		return err
	}
	switch {
	case elem.Leaf():
		if t := columnType(elem); t.err != "" {
			return nil, fmt.Errorf("its elements: %s", t.err)
		}
		n.leaves = []pqLeaf{{name: "value", path: path, col: elem}}
	case listElement(elem) != nil:
		if err := kid(elem, listElement(elem), suffix+"__value", ""); err != nil {
			return nil, err
		}
	case isStruct(elem):
		for _, e := range parquetLeaves(elem, names) {
			switch {
			case e.list != nil:
				if err := kid(e.col, e.list, suffix+"__"+e.name, e.path); err != nil {
					return nil, err
				}
			case !e.col.Leaf() || e.col.Repeated():
				return nil, fmt.Errorf("field %s of its elements is a map or a repeated field outside a LIST, which has no child table; declare the source's columns to leave it out", at(e.path))
			default:
				if t := columnType(e.col); t.err != "" {
					return nil, fmt.Errorf("field %s of its elements: %s", at(e.path), t.err)
				}
				n.leaves = append(n.leaves, e)
			}
		}
	default:
		return nil, errors.New("a list of maps has no child table; declare the source's columns to leave it out")
	}
	return n, nil
}

// columns returns the columns of the node's child table, without the
// link columns.
func (n *listNode) columns() []batch.Column {
	cols := make([]batch.Column, len(n.leaves))
	for i, e := range n.leaves {
		cols[i] = batch.Column{Name: e.name, Type: columnType(e.col).typ, Nullable: true}
	}
	return cols
}

// firstLeaf returns a leaf of the node or of a list inside it.
func (n *listNode) firstLeaf() *parquet.Column {
	if len(n.leaves) > 0 {
		return n.leaves[0].col
	}
	for _, k := range n.kids {
		if c := k.firstLeaf(); c != nil {
			return c
		}
	}
	return nil
}

// listReader reads one list of a file, a row group at a time.
type listReader struct {
	node   *listNode
	parent *listReader // the reader of the enclosing list, nil for a list of the row
	schema batch.Schema
	leaves []*pqCol // per column of schema, its element leaf; nil for a link column or one the file lacks
	levels *pqCol   // without such a leaf, a leaf further down whose levels give the elements

	// The row group read.
	vals  []*batch.Vector // per column of schema, the values of every slot
	elems []listElem      // every element, in order
	start []int           // per row of the row group, its first element; one more at the end
	bad   map[int]badRow  // per slot, the first value that does not fit its column

	// The chunk emitted last: the ids of elements [lo, lo+len(ids)).
	lo  int
	ids []string
}

// listElem is an element of a list in a row group.
type listElem struct {
	row    int32 // the row of the row group
	parent int32 // the element of the enclosing list holding it; the row for a list of the row
	idx    int32 // its index in its list
	slot   int32 // its slot in the values of its leaves
}

// newListReaders returns the readers of list l of a file and of the lists
// inside its elements, each before those inside it, into the child tables
// of kids (by suffix); a list without a child table there is not read,
// nor the lists inside it.
func newListReaders(l pqLeaf, kids map[string]batch.Schema, names func(string) string) ([]*listReader, error) {
	nodes, err := listNodes(l, names)
	if err != nil {
		return nil, err
	}
	bySuffix := map[string]*listReader{}
	var out []*listReader
	for _, n := range nodes {
		s, ok := kids[n.suffix]
		if !ok {
			continue
		}
		parent := bySuffix[n.parent]
		if n.parent != "" && parent == nil {
			continue
		}
		lr, err := newListReader(n, parent, s)
		if err != nil {
			return nil, err
		}
		bySuffix[n.suffix] = lr
		out = append(out, lr)
	}
	return out, nil
}

func newListReader(n *listNode, parent *listReader, s batch.Schema) (*listReader, error) {
	lr := &listReader{node: n, parent: parent, schema: s, leaves: make([]*pqCol, len(s.Columns))}
	found := false
	for i, c := range s.Columns {
		if batch.IsLinkColumn(c.Name) {
			continue
		}
		for _, e := range n.leaves {
			if e.name != c.Name {
				continue
			}
			t := columnType(e.col)
			if !convertible(t.typ, c.Type) {
				return nil, fmt.Errorf("field %s of its elements is %v in the file (Parquet %s), which does not load into %v", e.path, t.typ, t.desc, c.Type)
			}
			lr.leaves[i] = newPQCol(c, e.col, t)
			lr.leaves[i].slots = true
			found = true
		}
	}
	if !found {
		leaf := n.firstLeaf()
		if leaf == nil {
			return nil, fmt.Errorf("list %s: none of the child table's columns is in the file", n.suffix)
		}
		t := columnType(leaf)
		lr.levels = newPQCol(batch.Column{Name: "value", Type: t.typ, Nullable: true}, leaf, t)
		lr.levels.slots = true
	}
	return lr, nil
}

func (lr *listReader) close() {
	for _, c := range lr.leaves {
		if c != nil {
			c.closePages()
		}
	}
	if lr.levels != nil {
		lr.levels.closePages()
	}
}

// open reads the row group's slots of every leaf and works out its
// elements.
func (lr *listReader) open(chunks []parquet.ColumnChunk, rows int64) error {
	lr.vals, lr.bad = make([]*batch.Vector, len(lr.schema.Columns)), nil
	var reps, defs []byte
	readCol := func(col *pqCol) (*batch.Vector, []badRow, error) {
		if col.leaf >= len(chunks) {
			return nil, nil, fmt.Errorf("corrupt Parquet file: no column chunk %d", col.leaf)
		}
		col.open(chunks[col.leaf].Pages())
		col.reps, col.defs = col.reps[:0], col.defs[:0]
		n := int(chunks[col.leaf].NumValues())
		v := batch.NewVector(col.want.Type, n)
		var bad []badRow
		err := col.read(v, n, &bad)
		return v, bad, err
	}
	for i, col := range lr.leaves {
		if col == nil {
			continue
		}
		v, bad, err := readCol(col)
		if err != nil {
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
			reps, defs = col.reps, col.defs
			continue
		}
		if len(col.reps) != len(reps) {
			return fmt.Errorf("corrupt Parquet file: the fields of the elements of %s hold %d and %d values", lr.node.suffix, len(reps), len(col.reps))
		}
	}
	if reps == nil {
		if _, _, err := readCol(lr.levels); err != nil {
			return err
		}
		reps, defs = lr.levels.reps, lr.levels.defs
	}
	// An entry of repetition level r starts an element of every list at
	// level r or deeper that its definition level reaches: the next one
	// of its list at level r, the first of a new list deeper down.
	j := lr.node.rep
	var parentDef byte
	if lr.parent != nil {
		parentDef = lr.parent.node.slotDef
	}
	lr.elems, lr.start = lr.elems[:0], lr.start[:0]
	row, parent, idx := int32(-1), int32(-1), int32(0)
	for s, r := range reps {
		d := defs[s]
		if r == 0 {
			row++
			lr.start = append(lr.start, len(lr.elems))
		}
		if r < j && d >= parentDef {
			parent++
		}
		if r <= j && d >= lr.node.slotDef {
			if r < j {
				idx = 0
			} else {
				idx++
			}
			lr.elems = append(lr.elems, listElem{row: row, parent: parent, idx: idx, slot: int32(s)})
		}
	}
	if int64(len(lr.start)) != rows {
		return fmt.Errorf("corrupt Parquet file: list %s holds %d rows, its row group %d", lr.node.suffix, len(lr.start), rows)
	}
	lr.start = append(lr.start, len(lr.elems))
	return nil
}

// emit appends to out the elements of rows [from, from+k) of the row
// group, rows firstRow.. of the batch, their rows' ids in ids (the
// enclosing list's reader emitted the same rows before). A value that
// does not fit its column makes its row bad, by its path.
func (lr *listReader) emit(out *listRows, from, k, firstRow int, ids []string, bad *[]badRow) {
	lo, hi := lr.start[from], lr.start[from+k]
	lr.lo, lr.ids = lo, lr.ids[:0]
	var key []byte
	var text [22]byte
	suffix := lr.node.suffix
	for e := lo; e < hi; e++ {
		el := &lr.elems[e]
		root := firstRow + int(el.row) - from
		var parent string
		if lr.parent == nil {
			parent = ids[root]
		} else {
			parent = lr.parent.ids[int(el.parent)-lr.parent.lo]
		}
		key = append(key[:0], parent...)
		key = append(key, 0)
		key = append(key, suffix...)
		key = append(key, 0)
		key = strconv.AppendInt(key, int64(el.idx), 10)
		id := string(batch.AppendLinkID(text[:0], key))
		lr.ids = append(lr.ids, id)
		s := int(el.slot)
		if b, ok := lr.bad[s]; ok {
			field := lr.path(e)
			if b.field != "value" {
				field += "." + b.field
			}
			*bad = append(*bad, badRow{row: root, field: field, reason: b.reason, msg: b.msg})
		}
		for i, c := range lr.schema.Columns {
			v := out.batch.Vectors[i]
			switch {
			case c.Name == batch.RootIDColumn:
				v.AppendString(ids[root])
			case c.Name == batch.ParentIDColumn:
				v.AppendString(parent)
			case c.Name == batch.ListIdxColumn:
				v.AppendInt(int64(el.idx))
			case c.Name == batch.IDColumn:
				v.AppendString(id)
			case lr.vals[i] == nil:
				v.AppendNull()
			default:
				v.AppendFrom(lr.vals[i], s)
			}
		}
		out.parents = append(out.parents, root)
	}
}

// path is the path of element e for messages: items[1], items[1].tags[0],
// matrix[1][0].
func (lr *listReader) path(e int) string {
	el := lr.elems[e]
	p := lr.node.path
	if lr.parent != nil {
		p = lr.parent.path(int(el.parent))
		if lr.node.field != "" {
			p += "." + lr.node.field
		}
	}
	return p + "[" + strconv.Itoa(int(el.idx)) + "]"
}

// listRows are the child rows of a chunk and the batch row of each one's
// root.
type listRows struct {
	batch   *batch.Batch
	parents []int
}

// keep returns the child rows whose roots are not dropped.
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
