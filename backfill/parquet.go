package backfill

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"os"

	"github.com/parquet-go/parquet-go"

	"github.com/sluicehq/sluice/flows/batch"
)

// parquetReadBuffer is the read buffer of each column chunk being read.
const parquetReadBuffer = 256 << 10

// openParquetFile opens and checks a Parquet file's footer. A file that is
// not Parquet, or truncated, is a *FileError.
func openParquetFile(f File) (pf *parquet.File, closeFile func(), err error) {
	osf, err := os.Open(f.Path)
	if err != nil {
		return nil, nil, &FileError{File: f.Name, Err: err}
	}
	defer func() {
		if p := recover(); p != nil {
			err = &FileError{File: f.Name, Err: fmt.Errorf("corrupt Parquet file: %v", p)}
		}
		if err != nil {
			osf.Close()
		}
	}()
	st, err := osf.Stat()
	if err != nil {
		return nil, nil, &FileError{File: f.Name, Err: err}
	}
	size := st.Size()
	// Check the magic and the footer length before parquet-go allocates a
	// footer buffer of whatever length a damaged file claims.
	var head, tail [8]byte
	if size < 12 {
		return nil, nil, &FileError{File: f.Name, Err: fmt.Errorf("not a Parquet file: %d bytes", size)}
	}
	if _, err := osf.ReadAt(head[:4], 0); err != nil {
		return nil, nil, &FileError{File: f.Name, Err: err}
	}
	if _, err := osf.ReadAt(tail[:], size-8); err != nil {
		return nil, nil, &FileError{File: f.Name, Err: err}
	}
	if string(head[:4]) != "PAR1" || string(tail[4:]) != "PAR1" {
		return nil, nil, &FileError{File: f.Name, Err: errors.New("not a Parquet file, or truncated: no PAR1 magic at its start and end")}
	}
	if footer := int64(binary.LittleEndian.Uint32(tail[:4])); footer > size-12 {
		return nil, nil, &FileError{File: f.Name, Err: fmt.Errorf("corrupt Parquet file: footer of %d bytes in a file of %d", footer, size)}
	}
	pf, err = parquet.OpenFile(osf, size, parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true),
		parquet.ReadBufferSize(parquetReadBuffer))
	if err != nil {
		return nil, nil, &FileError{File: f.Name, Err: fmt.Errorf("corrupt Parquet file: %w", err)}
	}
	return pf, func() { osf.Close() }, nil
}

type parquetReader struct {
	file      File
	pf        *parquet.File
	closeFile func()
	schema    batch.Schema
	consts    []*Value
	cols      []*pqCol    // per wanted column; nil for constants, missing columns and arrays
	arrays    []*arrayCol // per wanted column; nil but for an array read from a list
	opts      ReadOptions

	size    int64
	total   int64   // rows in the file
	rgStart []int64 // first row of each row group
	rg      int     // the row group whose pages are open; -1 before the first
	rgRow   int64   // next row within it
	next    int64   // next row of the file
	started bool
	done    bool
	err     error
	bad     []badRow
	lists   []*listReader // ReadOptions.Children: the file's lists
	idCol   int           // ReadOptions.Children: the index of batch.IDColumn in schema; -1 without
}

func openParquet(f File, schema batch.Schema, consts []*Value, opts ReadOptions) (_ Reader, err error) {
	pf, closeFile, err := openParquetFile(f)
	if err != nil {
		return nil, err
	}
	defer func() {
		if p := recover(); p != nil {
			err = &FileError{File: f.Name, Err: fmt.Errorf("corrupt Parquet file: %v", p)}
		}
		if err != nil {
			closeFile()
		}
	}()
	r := &parquetReader{file: f, pf: pf, closeFile: closeFile, schema: schema, consts: consts, opts: opts,
		cols: make([]*pqCol, len(schema.Columns)), arrays: make([]*arrayCol, len(schema.Columns)), size: pf.Size(), rg: -1}
	byName := map[string]pqLeaf{}
	for _, l := range parquetLeaves(pf.Root(), opts.Names) {
		if other, dup := byName[l.name]; dup {
			return nil, &FileError{File: f.Name, Column: l.name, Err: fmt.Errorf("columns %q and %q of the file both become %s: rename one, or set naming: direct", other.path, l.path, l.name)}
		}
		byName[l.name] = l
		if _, ok := opts.Children[l.name]; ok && l.list != nil {
			lrs, err := newListReaders(l, opts.Children, opts.Names)
			if err != nil {
				return nil, &FileError{File: f.Name, Column: l.path, Err: err}
			}
			r.lists = append(r.lists, lrs...)
		}
	}
	r.idCol = -1
	if opts.Children != nil {
		r.idCol = schema.Index(batch.IDColumn)
	}
	for i, c := range schema.Columns {
		if consts[i] != nil || i == r.idCol {
			continue
		}
		pc := byName[c.Name].col
		if pc == nil {
			// A group of the column's name: its fields are columns of their
			// own, and the group is refused below.
			pc = pf.Root().Column(c.Name)
		}
		if pc == nil {
			if !c.Nullable {
				return nil, &FileError{File: f.Name, Column: c.Name, Err: errors.New("missing from the file, and the column is not nullable")}
			}
			continue
		}
		if c.Type.Kind == batch.KindArray {
			a, err := newArrayCol(c, byName[c.Name])
			if err != nil {
				return nil, &FileError{File: f.Name, Column: c.Name, Err: err}
			}
			r.arrays[i] = a
			continue
		}
		t := columnType(pc)
		if t.err != "" {
			return nil, &FileError{File: f.Name, Column: c.Name, Err: errors.New(t.err)}
		}
		if !convertible(t.typ, c.Type) {
			return nil, &FileError{File: f.Name, Column: c.Name, Err: fmt.Errorf("is %v in the file (Parquet %s), which does not load into %v", t.typ, t.desc, c.Type)}
		}
		r.cols[i] = newPQCol(c, pc, t)
	}
	for _, rg := range pf.RowGroups() {
		r.rgStart = append(r.rgStart, r.total)
		r.total += rg.NumRows()
	}
	if r.total != pf.NumRows() {
		return nil, &FileError{File: f.Name, Err: fmt.Errorf("corrupt Parquet file: row groups hold %d rows, the footer says %d", r.total, pf.NumRows())}
	}
	return r, nil
}

func (r *parquetReader) Close() error {
	for _, c := range r.cols {
		if c != nil {
			c.closePages()
		}
	}
	for _, a := range r.arrays {
		if a != nil {
			a.close()
		}
	}
	for _, lr := range r.lists {
		lr.close()
	}
	r.closeFile()
	return nil
}

func (r *parquetReader) fail(column string, err error) error {
	r.err = &FileError{File: r.file.Name, Column: column, Err: err}
	return r.err
}

func (r *parquetReader) Next(ctx context.Context) (c *Chunk, err error) {
	if r.err != nil {
		return nil, r.err
	}
	if r.done {
		return nil, io.EOF
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	defer func() {
		if p := recover(); p != nil {
			c, err = nil, r.fail("", fmt.Errorf("corrupt Parquet file: %v", p))
		}
	}()
	c = &Chunk{File: r.file.Name}
	if !r.started {
		r.started = true
		r.next = min(max(r.opts.Start, 0), r.total)
		c.Skipped = r.bytesAt(r.next)
		if err := r.seek(r.next); err != nil {
			return nil, err
		}
	}
	n := int(min(int64(r.opts.MaxRows), r.total-r.next))
	c.FirstRow, c.RowGroup = r.next, int64(r.rgOf(r.next))
	b := batch.New(r.schema, n)
	r.bad = r.bad[:0]
	var ids []string // with lists: the rows' ids
	kids := map[string]*listRows{}
	if len(r.lists) > 0 || r.idCol >= 0 {
		ids = make([]string, n)
		for i := range ids {
			ids[i] = rowID(r.file.Name, r.next+int64(i))
		}
		for _, lr := range r.lists {
			kids[lr.node.suffix] = &listRows{batch: batch.New(lr.schema, n)}
		}
	}
	for filled := 0; filled < n; {
		if r.rg < 0 || r.rgRow == r.rgRows(r.rg) {
			if err := r.openRowGroup(r.rg + 1); err != nil {
				return nil, err
			}
			continue
		}
		k := int(min(int64(n-filled), r.rgRows(r.rg)-r.rgRow))
		for _, lr := range r.lists {
			lr.emit(kids[lr.node.suffix], int(r.rgRow), k, filled, ids, &r.bad)
		}
		for i, col := range r.cols {
			v := b.Vectors[i]
			switch {
			case i == r.idCol:
				for j := range k {
					v.AppendString(ids[filled+j])
				}
			case col != nil:
				if err := col.read(v, k, &r.bad); err != nil {
					return nil, r.fail(col.name, fmt.Errorf("row group %d: %w", r.rg, err))
				}
			case r.arrays[i] != nil:
				r.arrays[i].read(v, k, &r.bad)
			case r.consts[i] == nil: // a nullable column the file lacks
				for range k {
					v.AppendNull()
				}
			}
		}
		r.rgRow += int64(k)
		filled += k
	}
	for i, v := range r.consts {
		if v != nil {
			v.AppendTo(b.Vectors[i], n)
		}
	}
	for i, col := range r.schema.Columns {
		if col.Nullable || b.Vectors[i].Nulls == nil {
			continue
		}
		for row, null := range b.Vectors[i].Nulls {
			if null {
				r.bad = append(r.bad, badRow{row: row, field: col.Name, reason: batch.ReasonMissingField, msg: "null, and the column is not nullable"})
			}
		}
	}
	dropped := map[int]bool{}
	for _, bad := range r.bad {
		dropped[bad.row] = true
	}
	for suffix, k := range kids {
		if kb := k.keep(dropped); kb.Len() > 0 {
			if c.Children == nil {
				c.Children = map[string]*batch.Batch{}
			}
			c.Children[suffix] = kb
		}
	}
	if len(r.bad) > 0 {
		first := r.next
		c.DeadLetters, c.Rows = dropRows(b, r.bad, r.file.Name, func(i int) int64 { return first + int64(i) })
	}
	c.Batch = b
	start := r.bytesAt(r.next)
	r.next += int64(n)
	c.Next = r.next
	end := r.bytesAt(r.next)
	if r.next == r.total {
		r.done, c.Done = true, true
		end = r.size
	}
	c.Bytes = end - start
	return c, nil
}

// bytesAt apportions the file's size to its first row rows (an empty
// file's size goes to its one chunk, see Next).
func (r *parquetReader) bytesAt(row int64) int64 {
	switch {
	case r.total == 0:
		return 0
	case row >= r.total:
		return r.size
	}
	hi, lo := bits.Mul64(uint64(r.size), uint64(row))
	q, _ := bits.Div64(hi, lo, uint64(r.total))
	return int64(q)
}

func (r *parquetReader) rgRows(i int) int64 {
	return r.pf.RowGroups()[i].NumRows()
}

// rgOf returns the row group holding row (len(row groups) past the end).
func (r *parquetReader) rgOf(row int64) int {
	for i, start := range r.rgStart {
		if row < start+r.rgRows(i) {
			return i
		}
	}
	return len(r.rgStart)
}

// seek positions the reader at a row of the file.
func (r *parquetReader) seek(row int64) error {
	if row >= r.total {
		return nil
	}
	if err := r.openRowGroup(r.rgOf(row)); err != nil {
		return err
	}
	skip := row - r.rgStart[r.rg]
	for _, col := range r.cols {
		if col != nil {
			if err := col.skip(int(skip)); err != nil {
				return r.fail(col.name, fmt.Errorf("row group %d: %w", r.rg, err))
			}
		}
	}
	for _, a := range r.arrays {
		if a != nil {
			a.skip(int(skip))
		}
	}
	r.rgRow = skip
	return nil
}

func (r *parquetReader) openRowGroup(i int) error {
	if i >= len(r.rgStart) {
		return r.fail("", fmt.Errorf("corrupt Parquet file: no row group %d", i))
	}
	chunks := r.pf.RowGroups()[i].ColumnChunks()
	for _, col := range r.cols {
		if col == nil {
			continue
		}
		if col.leaf >= len(chunks) {
			return r.fail(col.name, fmt.Errorf("corrupt Parquet file: row group %d has no column chunk %d", i, col.leaf))
		}
		col.open(chunks[col.leaf].Pages())
	}
	for _, lr := range r.lists {
		if err := lr.open(chunks, r.rgRows(i)); err != nil {
			return r.fail(lr.node.path, fmt.Errorf("row group %d: %w", i, err))
		}
	}
	for _, a := range r.arrays {
		if a != nil {
			if err := a.open(chunks, r.rgRows(i)); err != nil {
				return r.fail(a.name, fmt.Errorf("row group %d: %w", i, err))
			}
		}
	}
	r.rg, r.rgRow = i, 0
	return nil
}
