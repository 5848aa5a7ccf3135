package decode

import (
	"strconv"
	"unsafe"

	"github.com/valyala/fastjson"

	"github.com/sluicehq/sluice/flows/batch"
)

// Child tables (docs/schema.md#child-tables): in a table typed by its
// messages, a list inside max_nesting becomes the rows of a child table,
// <table>__<field> (deeper lists <table>__<field>__<field>), each row
// linked to its parent row by batch.ParentIDColumn, batch.ListIdxColumn
// and batch.RootIDColumn. A record's row and all its child rows are
// decoded together: a bad element makes the whole record a dead letter.
//
// A child table is decoded by a child decoder, an inferring decoder of
// its columns whose rows are the elements of the lists: an object's fields
// are its columns, another value is its column value (ValueColumn), a
// list in a list the rows of the child table value below it.

// ValueColumn is the column of a child table that holds the elements of a
// list that are not objects.
const ValueColumn = "value"

// tree is what a decoder and its child decoders share.
type tree struct {
	schemas map[string]batch.Schema // the child tables that exist, by suffix (SetChildren)
	all     []*JSON                 // the child decoders, in order of creation
	mark    []int                   // marks, reused
}

// pendingList is a list of the record being decoded, decoded into its
// child table once the record's row is.
type pendingList struct {
	name  string // its column name in the parent (items, customer__orders)
	path  string // its path in the parent's element (items, customer.orders)
	val   *fastjson.Value
	depth int // its nesting depth from the record
}

// link says where the row being decoded is, for its ids: hashed when a
// column first asks for one (linkID), so that a pass that only looks for
// columns, whose tables have no link columns yet, hashes none.
type link struct {
	rec    *batch.Record // a top row with an id: its record
	up     *JSON         // a child row: the decoder of its parent row, on that row
	idx    int64         // a child row: its index in its parent's list
	id     string        // once hashed
	hashed bool
}

// SetChildren gives an inferring decoder the child tables that exist, by
// the part of their name after <table>__ (items, items__tags), each with
// its columns. Call it before Clone.
func (d *JSON) SetChildren(schemas map[string]batch.Schema) {
	d.tree.schemas = schemas
}

// Children returns the child tables given by SetChildren.
func (d *JSON) Children() map[string]batch.Schema { return d.tree.schemas }

// ChildRows returns the rows decoded since the last call into each child
// table, by suffix, leaving out those with none.
func (d *JSON) ChildRows() map[string]*batch.Batch {
	var out map[string]*batch.Batch
	for _, c := range d.tree.all {
		n := c.rows.Len()
		if n > 0 {
			if out == nil {
				out = map[string]*batch.Batch{}
			}
			out[c.suffix] = c.rows
		}
		// The next batch is likely alike: room for as many rows, made when
		// its first row comes (a decoder of columns that change is
		// dropped before it decodes another batch).
		c.rows, c.expect = batch.New(c.schema, 0), n
	}
	return out
}

// presizeAt is how far into a batch DecodeAll estimates the size of the
// batch's child rows from those so far (1 record in presizeAt).
const presizeAt = 32

// presize makes room in each child table for the rows the batch's records
// give, estimated from the rows of the first done of its n records, at
// most maxRowsPerRecord a record: growing them a doubling at a time
// copies every row about twice.
func (t *tree) presize(done, n int) {
	const maxRowsPerRecord = 8
	for _, c := range t.all {
		m := c.rows.Len()
		want := min(m*n/done+m/8, maxRowsPerRecord*n)
		if m == 0 || len(c.rows.Vectors) == 0 || want <= room(c.rows.Vectors[0]) {
			continue
		}
		rows := batch.New(c.schema, want)
		rows.AppendBatch(c.rows)
		c.rows = rows
	}
}

// room is how many rows v has room for.
func room(v *batch.Vector) int {
	switch v.Type.Kind {
	case batch.KindInt64, batch.KindTimestamp, batch.KindDate:
		return cap(v.Ints)
	case batch.KindFloat64:
		return cap(v.Floats)
	case batch.KindBool:
		return cap(v.Bools)
	case batch.KindString:
		return cap(v.Strs)
	case batch.KindBytes:
		return cap(v.Bytes)
	case batch.KindDecimal:
		return cap(v.Decs)
	}
	return cap(v.Ends)
}

// FoundChildren returns, by suffix, the child tables the records decoded
// since the last call need and the decoder was not given (with the
// columns their elements need, maybe none), and the columns that the
// given ones lack, as Found does for the decoder's own table. The link
// columns are the caller's to add to a new child table.
func (d *JSON) FoundChildren() map[string]FoundChild {
	var out map[string]FoundChild
	for _, c := range d.tree.all {
		found := c.Found()
		if _, known := d.tree.schemas[c.suffix]; known && len(found) == 0 {
			continue
		}
		if out == nil {
			out = map[string]FoundChild{}
		}
		out[c.suffix] = FoundChild{Parent: c.parent, Columns: found}
	}
	return out
}

// FoundChild is a child table FoundChildren reports: the suffix of its
// parent ("" for the decoder's own table) and the columns it lacks.
type FoundChild struct {
	Parent  string
	Columns []batch.Column
}

// addList notes a list of the record, at path (column name name), depth
// levels down.
func (d *JSON) addList(name, path string, val *fastjson.Value, depth int) *Error {
	if len(val.GetArray()) == 0 {
		return nil
	}
	d.lists = append(d.lists, pendingList{name: name, path: path, val: val, depth: depth})
	return nil
}

// linkID returns the _sluice_id of the row being decoded, "" for a row
// without one (a top row of a record without lists, when the table has
// no _sluice_id column).
func (d *JSON) linkID() string {
	if !d.link.hashed {
		d.link.hashed = true
		switch {
		case d.link.up != nil:
			d.link.id = d.childID(d.link.up.linkID(), int(d.link.idx))
		case d.link.rec != nil:
			d.link.id = d.rowID(d.link.rec)
		}
	}
	return d.link.id
}

// rootID returns the _sluice_id of the top row of the record being decoded.
func (d *JSON) rootID() string {
	if d.link.up != nil {
		return d.link.up.rootID()
	}
	return d.linkID()
}

// rowID is the _sluice_id of the row of a record: derived from its
// position, so that a replay or a retried load gives the same id.
func (d *JSON) rowID(rec *batch.Record) string {
	b := append(d.num[:0], rec.Topic...)
	b = append(b, 0)
	b = strconv.AppendInt(b, int64(rec.Partition), 10)
	b = append(b, 0)
	b = strconv.AppendInt(b, rec.Offset, 10)
	d.num = b
	return d.hashID(b)
}

// childID is the _sluice_id of element idx of a list of the row parent.
func (d *JSON) childID(parent string, idx int) string {
	b := append(d.num[:0], parent...)
	b = append(b, 0)
	b = append(b, d.suffix...)
	b = append(b, 0)
	b = strconv.AppendInt(b, int64(idx), 10)
	d.num = b
	return d.hashID(b)
}

// hashID is the id of key (batch.AppendLinkID), in the decoder's arena.
func (d *JSON) hashID(key []byte) string {
	const n = 22 // 16 bytes in unpadded base64
	b := batch.AppendLinkID(d.arena.alloc(n)[:0], key)
	return unsafe.String(&b[0], len(b))
}

// decodeLists decodes the lists of the row just decoded (d.link) into
// their child tables. The caller rolls the child rows back on an error.
func (d *JSON) decodeLists(rec *batch.Record) *Error {
	for _, l := range d.lists {
		c, e := d.child(l)
		if e != nil {
			return e
		}
		if c == nil {
			continue // the schema contract leaves this list out
		}
		if d.suffix == "" && !d.hasID {
			// A table with child tables has row ids.
			d.found = appendFound(d.found, &d.foundAt, batch.Column{Name: batch.IDColumn, Type: batch.String, Nullable: true})
		}
		for idx, elem := range l.val.GetArray() {
			if e := c.element(rec, elem, d, l, idx); e != nil {
				return e
			}
		}
	}
	return nil
}

// child returns the child decoder of list l, nil when the schema contract
// leaves a new child table out.
func (d *JSON) child(l pendingList) (*JSON, *Error) {
	suffix := l.name
	if d.suffix != "" {
		suffix = d.suffix + "__" + l.name
	}
	for _, c := range d.tree.all {
		if c.suffix == suffix {
			if c.parent != d.suffix {
				// Two paths name one table (a.b as a list in an object, and
				// as a list in each item of the list a).
				return nil, &Error{Reason: batch.ReasonTypeMismatch, Field: d.prefixed(l.path),
					Msg: "is a list whose child table is also that of a list at another path: rename one"}
			}
			return c, nil
		}
	}
	s, known := d.tree.schemas[suffix]
	if !known {
		switch d.contract.Columns {
		case Freeze:
			return nil, &Error{Reason: batch.ReasonSchemaContract, Field: d.prefixed(l.path), Msg: "is a list, which needs a new child table (schema_contract columns: freeze)"}
		case DiscardRow:
			return nil, &Error{Reason: reasonDiscarded, Field: l.path}
		case DiscardValue:
			return nil, nil
		}
	}
	c, err := NewInferring(s, d.names)
	if err != nil {
		return nil, &Error{Reason: batch.ReasonTypeMismatch, Field: d.prefixed(l.path), Msg: err.Error()}
	}
	c.plan.contract, c.plan.maxNesting = d.contract, d.maxNesting
	if !known {
		c.plan.contract.Columns = Evolve // a new table's first rows give it its columns
	}
	c.tree, c.suffix, c.parent, c.base = d.tree, suffix, d.suffix, l.depth
	c.rows = batch.New(s, 0)
	d.tree.all = append(d.tree.all, c)
	return c, nil
}

// elementPath is the path of the element d is decoding, items[3]; ""
// for a top decoder. Built only for messages.
func (d *JSON) elementPath() string {
	if d.at.parent == nil {
		return ""
	}
	return d.at.parent.prefixed(d.at.path) + "[" + strconv.Itoa(d.at.idx) + "]"
}

// prefixed is path under the element d is decoding.
func (d *JSON) prefixed(path string) string {
	prefix := d.elementPath()
	switch {
	case prefix == "":
		return path
	case path == "":
		return prefix
	}
	return prefix + "." + path
}

// element decodes element idx of list l of parent's row into a row of
// c's table, and then its own lists.
func (c *JSON) element(rec *batch.Record, elem *fastjson.Value, parent *JSON, l pendingList, idx int) *Error {
	c.at.parent, c.at.path, c.at.idx = parent, l.path, idx
	c.link = link{up: parent, idx: int64(idx)}
	c.lists = c.lists[:0]
	if c.expect > 0 && c.rows.Len() == 0 {
		c.rows, c.expect = batch.New(c.schema, c.expect), 0
	}
	var e *Error
	switch elem.Type() {
	case fastjson.TypeObject:
		obj, _ := elem.Object()
		if c.settled(rec, obj) {
			return nil
		}
		clear(c.vals)
		e = c.visitInferring(obj)
	default:
		clear(c.vals)
		clear(c.keys)
		clear(c.text)
		if elem.Type() == fastjson.TypeArray && c.base+1 <= c.maxNesting {
			e = c.addList(ValueColumn, "", elem, c.base+1)
		} else {
			e = c.leaf(ValueColumn, "", elem, elem.Type() == fastjson.TypeArray)
		}
	}
	if e == nil {
		n := c.rows.Len()
		for moves := 0; ; moves++ {
			var retry bool
			retry, e = c.columns(rec, c.rows, moves < len(c.cols))
			if e != nil || retry {
				c.rows.Truncate(n)
			}
			if !retry {
				break
			}
		}
	}
	if e != nil {
		if elem.Type() != fastjson.TypeObject && (e.Field == "" || e.Field == ValueColumn) || e.Field == "" {
			e.Field = c.elementPath()
		} else {
			e.Field = c.elementPath() + "." + e.Field
		}
		return e
	}
	if len(c.lists) > 0 {
		return c.decodeLists(rec)
	}
	return nil
}

// settled decodes an object element into a row of c's table in one
// visit, each value straight into its column, when the element is like
// the one before: every field at the position the hints have for it,
// naming a column, with a scalar value its column takes; the missing
// columns are NULL. That is the common case once the table's columns are
// settled, and it checks every value as field does. For anything else
// (a new field, fields in another order, a repeated field, a nested
// object or list, a value that does not fit) it leaves c.rows as it was
// and returns false: element then decodes the object field by field,
// which gives that case its columns, its variant or its error.
func (c *JSON) settled(rec *batch.Record, obj *fastjson.Object) bool {
	n := c.rows.Len()
	if obj.Len() > len(c.hints) || obj.Len() == 0 || c.hints[0].col < 0 {
		return false // a table without the columns yet: no visit for nothing
	}
	if len(c.filled) != len(c.cols) {
		c.filled = make([]bool, len(c.cols))
	}
	filled := c.filled
	clear(filled)
	ok, pos := true, 0
	obj.Visit(func(key []byte, val *fastjson.Value) {
		if !ok {
			return
		}
		h := &c.hints[pos]
		pos++
		i := h.col
		if i < 0 || h.found > 0 || filled[i] || h.key != string(key) {
			ok = false
			return
		}
		if vt := val.Type(); vt == fastjson.TypeObject || vt == fastjson.TypeArray {
			ok = false
			return
		}
		if c.field(&c.cols[i], val, c.rows.Vectors[i]) != nil {
			ok = false
			return
		}
		filled[i] = true
	})
	for i := 0; ok && i < len(c.cols); i++ {
		if filled[i] {
			continue
		}
		col, vec := &c.cols[i], c.rows.Vectors[i]
		switch col.origin {
		case fromJSON:
			ok = c.null(col, vec, "missing") == nil
		// A child row and its parent always have ids (meta).
		case fromID:
			vec.AppendString(c.linkID())
		case fromParentID:
			vec.AppendString(c.link.up.linkID())
		case fromRootID:
			vec.AppendString(c.rootID())
		case fromListIdx:
			vec.AppendInt(c.link.idx)
		default:
			ok = c.meta(col, rec, vec) == nil
		}
	}
	if !ok {
		c.rows.Truncate(n)
	}
	return ok
}

// marks returns the number of rows of each child table, for rollback;
// valid until the next call.
func (t *tree) marks() []int {
	t.mark = t.mark[:0]
	for _, c := range t.all {
		t.mark = append(t.mark, c.rows.Len())
	}
	return t.mark
}

// rollback takes the child rows back to marks; tables created since hold
// only rows of the record rolled back.
func (t *tree) rollback(m []int) {
	for i, c := range t.all {
		n := 0
		if i < len(m) {
			n = m[i]
		}
		c.rows.Truncate(n)
	}
}
