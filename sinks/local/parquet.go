package local

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"sync"
	"unsafe"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/snappy"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
	"github.com/parquet-go/parquet-go/compress/zstd"
	"github.com/parquet-go/parquet-go/deprecated"
	"github.com/parquet-go/parquet-go/encoding"
	"github.com/parquet-go/parquet-go/format"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks/local/fsys"
)

// rowGroupRows bounds the rows of one row group: a Write of more rows is
// split, and consecutive Writes of one load share a row group until it holds
// this many rows. A variable for tests.
var rowGroupRows = 1 << 20

// Sizes of the files sluice writes.
const (
	// rowGroupBytes flushes a row group early when its buffered size grows
	// past this, so that wide rows do not hold much memory.
	rowGroupBytes = 128 << 20
	// valueChunk is how many values are converted at a time into the
	// reusable parquet.Value buffer of a column.
	valueChunk = 4096
)

// loadCodec compresses the files of loads: Snappy, produced by s2's fastest
// Snappy-compatible encoder, because loads are on the hot path.
var loadCodec compress.Codec = &fastSnappy{}

// compactCodec compresses the files compaction writes: Zstd, smaller, because
// compaction runs in the background.
var compactCodec compress.Codec = &zstd.Codec{Level: zstd.SpeedDefault}

// fastSnappy is the SNAPPY parquet codec with s2's faster Snappy encoder
// (the output is plain Snappy; any reader decodes it).
type fastSnappy struct{}

func (*fastSnappy) String() string                            { return "SNAPPY" }
func (*fastSnappy) CompressionCodec() format.CompressionCodec { return format.Snappy }

func (*fastSnappy) Encode(dst, src []byte) ([]byte, error) {
	n := s2.MaxEncodedLen(len(src))
	if n < 0 {
		return dst[:0], fmt.Errorf("snappy: page of %d bytes is too large", len(src))
	}
	if cap(dst) < n {
		dst = make([]byte, n)
	}
	return s2.EncodeSnappy(dst[:n], src), nil
}

func (*fastSnappy) Decode(dst, src []byte) ([]byte, error) {
	n, err := snappy.DecodedLen(src)
	if err != nil {
		return dst[:0], err
	}
	if cap(dst) < n {
		dst = make([]byte, n)
	}
	return snappy.Decode(dst[:n], src)
}

// decimalInt64 is the DECIMAL logical type over INT64. parquet.Decimal
// builds the same type but logs a warning for precisions below 10, which the
// format allows.
type decimalInt64 struct {
	parquet.Type
	dec format.DecimalType
}

func (t *decimalInt64) String() string { return t.dec.String() }

func (t *decimalInt64) LogicalType() *format.LogicalType {
	return &format.LogicalType{Value: &t.dec}
}

func (t *decimalInt64) ConvertedType() *deprecated.ConvertedType {
	ct := deprecated.Decimal
	return &ct
}

// orderedGroup is a parquet group whose fields keep the table's column order
// (parquet.Group sorts them by name).
type orderedGroup struct {
	parquet.Group
	fields []parquet.Field
}

func (g *orderedGroup) Fields() []parquet.Field { return g.fields }

func newOrderedGroup(names []string, nodes []parquet.Node) *orderedGroup {
	g := &orderedGroup{Group: parquet.Group{}}
	for i, n := range names {
		g.Group[n] = nodes[i]
	}
	byName := map[string]parquet.Field{}
	for _, f := range g.Group.Fields() {
		byName[f.Name()] = f
	}
	for _, n := range names {
		g.fields = append(g.fields, byName[n])
	}
	return g
}

// parquetNode returns the parquet leaf of a column type: see doc.go for the
// mapping.
func parquetNode(c batch.Column) parquet.Node {
	if c.Type.Kind == batch.KindArray {
		// A required LIST of required elements: arrays are never null.
		return parquet.List(parquetNode(batch.Column{Name: c.Name, Type: c.Type.ElemType()}))
	}
	var n parquet.Node
	switch t := c.Type; t.Kind {
	case batch.KindString:
		n = parquet.String()
	case batch.KindInt64:
		n = parquet.Leaf(parquet.Int64Type)
	case batch.KindFloat64:
		n = parquet.Leaf(parquet.DoubleType)
	case batch.KindBool:
		n = parquet.Leaf(parquet.BooleanType)
	case batch.KindTimestamp:
		n = parquet.TimestampAdjusted(parquet.Microsecond, true)
	case batch.KindDate:
		n = parquet.Date()
	case batch.KindDecimal:
		if t.Precision <= 18 {
			n = parquet.Leaf(&decimalInt64{
				Type: parquet.Int64Type,
				dec:  format.DecimalType{Scale: int32(t.Scale), Precision: int32(t.Precision)},
			})
		} else {
			n = parquet.Decimal(t.Scale, t.Precision, parquet.FixedLenByteArrayType(16))
		}
	case batch.KindBytes:
		n = parquet.Leaf(parquet.ByteArrayType)
	default:
		panic(fmt.Sprintf("local: column %s has invalid type %v", c.Name, c.Type))
	}
	if c.Nullable {
		n = parquet.Optional(n)
	}
	return n
}

// fileSchema returns the parquet schema of a table's files: its columns,
// then _sluice_load_id when withLoadID (append targets).
func fileSchema(s batch.Schema, withLoadID bool) *parquet.Schema {
	names := make([]string, 0, len(s.Columns)+1)
	nodes := make([]parquet.Node, 0, len(s.Columns)+1)
	for _, c := range s.Columns {
		names = append(names, c.Name)
		nodes = append(nodes, parquetNode(c))
	}
	if withLoadID {
		names = append(names, batch.LoadIDColumn)
		nodes = append(nodes, parquet.String())
	}
	return parquet.NewSchema("sluice", newOrderedGroup(names, nodes))
}

// fileWriter writes one Parquet file column by column. It is not safe for
// concurrent use.
type fileWriter struct {
	f         fsys.File
	buf       *bufio.Writer // from writeBufs, between w and f
	w         *parquet.GenericWriter[any]
	cols      []*parquet.ColumnWriter
	schema    batch.Schema
	loadID    string
	loadCol   bool  // the file has a _sluice_load_id column holding loadID
	rows      int64 // rows written
	rgRows    int   // rows in the current row group
	flushed   int64 // file size estimate at the last row group's end
	vals      []parquet.Value
	loadIDs   []parquet.Value // values of loadIDsOf, up to valueChunk
	loadIDsOf string
	fixed     []byte          // scratch for 16-byte decimals
	elems     []parquet.Value // scratch for arrays' elements
}

// createFile creates path and returns a writer of schema's files whose
// _sluice_load_id column holds loadID.
func createFile(disk fsys.FS, path string, schema batch.Schema, loadID string, codec compress.Codec) (*fileWriter, error) {
	return newFileWriter(disk, path, schema, loadID, true, codec)
}

// createPlainFile creates path and returns a writer of files with the
// columns of schema only: a CDC target's data files and staged upserts.
func createPlainFile(disk fsys.FS, path string, schema batch.Schema, codec compress.Codec) (*fileWriter, error) {
	return newFileWriter(disk, path, schema, "", false, codec)
}

func newFileWriter(disk fsys.FS, path string, schema batch.Schema, loadID string, loadCol bool, codec compress.Codec) (*fileWriter, error) {
	f, err := disk.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	opts := []parquet.WriterOption{
		fileSchema(schema, loadCol),
		parquet.Compression(codec),
		parquet.WriteBufferSize(0), // buf instead
		parquet.CreatedBy("sluice", "", ""),
		// The column index holds every page's min and max: the same
		// bounds again in each page's header cost a second pass over its
		// values (a tenth of writing a child table), and readers that
		// prune pages read them from the index.
		parquet.DataPageStatistics(false),
	}
	// Min/max statistics of FIXED_LEN_BYTE_ARRAY decimals would compare the
	// bytes unsigned, which orders negative values wrongly; leave them out
	// rather than mislead a reader's pruning. Those of the row ids
	// (_sluice_id, _sluice_parent_id, _sluice_root_id) are hashes: any page
	// spans about their whole range, which prunes nothing, and comparing
	// every id twice a page cost a third of writing a child table.
	for _, c := range schema.Columns {
		skip := c.Name == batch.IDColumn || c.Name == batch.ParentIDColumn || c.Name == batch.RootIDColumn
		if t := c.Type.Scalar(); t.Kind == batch.KindDecimal && t.Precision > 18 {
			skip = true
		}
		if skip {
			path := []string{c.Name}
			if c.Type.Kind == batch.KindArray {
				path = append(path, "list", "element")
			}
			opts = append(opts, parquet.SkipPageBounds(path...), parquet.SkipPageStatistics(path...))
		}
	}
	buf := writeBufs.Get().(*bufio.Writer)
	buf.Reset(f)
	w := parquet.NewGenericWriter[any](buf, opts...)
	return &fileWriter{
		f:       f,
		buf:     buf,
		w:       w,
		cols:    w.ColumnWriters(),
		schema:  schema,
		loadID:  loadID,
		loadCol: loadCol,
		vals:    make([]parquet.Value, valueChunk),
	}, nil
}

// write appends the rows of b, whose schema must be the file's.
func (fw *fileWriter) write(b *batch.Batch) error {
	n := b.Len()
	for off := 0; off < n; {
		end := min(n, off+rowGroupRows-fw.rgRows)
		for c, v := range b.Vectors {
			if err := fw.writeColumn(c, fw.schema.Columns[c], v, off, end); err != nil {
				return fmt.Errorf("column %s: %w", fw.schema.Columns[c].Name, err)
			}
		}
		if fw.loadCol {
			if err := fw.writeLoadIDs(end - off); err != nil {
				return fmt.Errorf("column %s: %w", batch.LoadIDColumn, err)
			}
		}
		fw.rows += int64(end - off)
		fw.rgRows += end - off
		off = end
		if fw.rgRows >= rowGroupRows {
			if err := fw.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// endWrite ends a Write call: the row group is flushed when it is large.
func (fw *fileWriter) endWrite() error {
	if fw.rgRows > 0 && fw.bufferedBytes() >= rowGroupBytes {
		return fw.flush()
	}
	return nil
}

// bufferedBytes estimates the size of the current row group.
func (fw *fileWriter) bufferedBytes() int64 { return fw.w.Size() - fw.flushed }

func (fw *fileWriter) flush() error {
	if fw.rgRows == 0 {
		return nil
	}
	if err := fw.w.Flush(); err != nil {
		return err
	}
	fw.rgRows = 0
	fw.flushed = fw.w.Size()
	return nil
}

// close ends the file and syncs it to disk; it returns the file's size.
func (fw *fileWriter) close() (int64, error) { return fw.closeTo(nil) }

// closeTo ends the file and returns its size; sy syncs and closes it (nil:
// it is synced and closed before closeTo returns).
func (fw *fileWriter) closeTo(sy *fileSyncer) (int64, error) {
	err := fw.w.Close()
	if err == nil {
		err = fw.buf.Flush()
	}
	fw.release()
	var size int64
	if err == nil {
		var st fs.FileInfo
		if st, err = fw.f.Stat(); err == nil {
			size = st.Size()
		}
	}
	if err != nil {
		fw.f.Close()
		return size, err
	}
	return size, sy.syncClose(fw.f)
}

// discard closes the file without finishing it.
func (fw *fileWriter) discard() {
	fw.release()
	fw.f.Close()
}

// writeBufs holds the write buffers of files being written: a load writes
// many files, and a buffer of its own for each would be garbage to collect.
var writeBufs = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 1<<20) }}

// release returns the write buffer to writeBufs; the file takes no more
// writes.
func (fw *fileWriter) release() {
	if fw.buf != nil {
		fw.buf.Reset(nil)
		writeBufs.Put(fw.buf)
		fw.buf = nil
	}
}

func strBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

func (fw *fileWriter) writeLoadIDs(n int) error {
	cw := fw.cols[len(fw.cols)-1]
	// Filled once for each load id (compaction writes several to a file):
	// filling a chunk again for each write stored a pointer a row, a write
	// barrier each while the collector runs.
	if fw.loadIDsOf != fw.loadID {
		fw.loadIDs, fw.loadIDsOf = fw.loadIDs[:0], fw.loadID
	}
	if want := min(n, valueChunk); len(fw.loadIDs) < want {
		id := parquet.ByteArrayValue(strBytes(fw.loadID))
		for len(fw.loadIDs) < want {
			fw.loadIDs = append(fw.loadIDs, id)
		}
	}
	for n > 0 {
		k := min(n, len(fw.loadIDs))
		if _, err := cw.WriteRowValues(fw.loadIDs[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// writeColumn converts rows [from, to) of v into parquet values, a chunk at a
// time, and hands them to the column's writer.
func (fw *fileWriter) writeColumn(ci int, col batch.Column, v *batch.Vector, from, to int) error {
	if col.Type.Kind == batch.KindArray {
		return fw.writeArrays(ci, col, v, from, to)
	}
	cw := fw.cols[ci]
	def := 0
	if col.Nullable {
		def = 1
	}
	for off := from; off < to; off += len(fw.vals) {
		end := min(to, off+len(fw.vals))
		vs := fw.vals[:end-off]
		if err := fw.convert(col.Type, v, off, vs); err != nil {
			return err
		}
		if def > 0 {
			nulls := v.Nulls
			for i := range vs {
				if nulls != nil && nulls[off+i] {
					vs[i] = parquet.Value{}
				} else {
					// In place: assigning a whole Value writes its pointer,
					// which costs a write barrier while the collector runs.
					vs[i].SetDefinitionLevel(1)
					vs[i].SetColumnIndex(ci)
				}
			}
		}
		if _, err := cw.WriteRowValues(vs); err != nil {
			return err
		}
	}
	return nil
}

// writeArrays writes rows [from, to) of an array vector as a LIST column: a
// row's first element at repetition level 0, the others at 1, an empty
// row as one null at definition level 0. Rows go to the column writer
// whole, a few thousand values at a time.
func (fw *fileWriter) writeArrays(ci int, col batch.Column, v *batch.Vector, from, to int) error {
	cw := fw.cols[ci]
	for r := from; r < to; {
		end, n := r, 0 // rows [r, end) make n values
		for end < to {
			lo, hi := v.Array(end)
			k := max(hi-lo, 1)
			if n > 0 && n+k > len(fw.vals) {
				break
			}
			n += k
			end++
		}
		lo, _ := v.Array(r)
		_, hi := v.Array(end - 1)
		if cap(fw.elems) < hi-lo {
			fw.elems = make([]parquet.Value, hi-lo)
		}
		elems := fw.elems[:hi-lo]
		if err := fw.convert(col.Type.ElemType(), v.Elems, lo, elems); err != nil {
			return err
		}
		vs := make([]parquet.Value, 0, n)
		for row := r; row < end; row++ {
			a, b := v.Array(row)
			if a == b {
				vs = append(vs, parquet.Value{}.Level(0, 0, ci))
				continue
			}
			for j := a; j < b; j++ {
				rep := 1
				if j == a {
					rep = 0
				}
				vs = append(vs, elems[j-lo].Level(rep, 1, ci))
			}
		}
		if _, err := cw.WriteRowValues(vs); err != nil {
			return err
		}
		r = end
	}
	return nil
}

// convert sets vs to the parquet values of rows [off, off+len(vs)) of v, a
// vector of type t, without levels.
func (fw *fileWriter) convert(t batch.Type, v *batch.Vector, off int, vs []parquet.Value) error {
	end := off + len(vs)
	switch t.Kind {
	case batch.KindInt64, batch.KindTimestamp:
		for i, x := range v.Ints[off:end] {
			vs[i] = parquet.Int64Value(x)
		}
	case batch.KindDate:
		for i, x := range v.Ints[off:end] {
			if x < math.MinInt32 || x > math.MaxInt32 {
				return fmt.Errorf("date %d days from 1970-01-01 is out of range", x)
			}
			vs[i] = parquet.Int32Value(int32(x))
		}
	case batch.KindFloat64:
		for i, x := range v.Floats[off:end] {
			vs[i] = parquet.DoubleValue(x)
		}
	case batch.KindBool:
		for i, x := range v.Bools[off:end] {
			vs[i] = parquet.BooleanValue(x)
		}
	case batch.KindString:
		for i, x := range v.Strs[off:end] {
			vs[i] = parquet.ByteArrayValue(strBytes(x))
		}
	case batch.KindBytes:
		for i, x := range v.Bytes[off:end] {
			if x == nil {
				x = []byte{}
			}
			vs[i] = parquet.ByteArrayValue(x)
		}
	case batch.KindDecimal:
		if t.Precision <= 18 {
			for i, x := range v.Decs[off:end] {
				if !fitsInt64(x) {
					return fmt.Errorf("decimal %s does not fit decimal(%d,%d)",
						batch.FormatDecimal(x, t.Scale), t.Precision, t.Scale)
				}
				vs[i] = parquet.Int64Value(int64(x.Lo))
			}
		} else {
			if cap(fw.fixed) < 16*len(vs) {
				fw.fixed = make([]byte, 16*max(len(vs), len(fw.vals)))
			}
			for i, x := range v.Decs[off:end] {
				b := fw.fixed[16*i : 16*i+16]
				binary.BigEndian.PutUint64(b[:8], uint64(x.Hi))
				binary.BigEndian.PutUint64(b[8:], x.Lo)
				vs[i] = parquet.FixedLenByteArrayValue(b)
			}
		}
	}
	return nil
}

func fitsInt64(d batch.Dec128) bool {
	return (d.Hi == 0 && d.Lo <= math.MaxInt64) || (d.Hi == -1 && d.Lo > math.MaxInt64)
}

// readFile appends the rows of a Parquet file to out, whose schema is a
// table's columns then _sluice_load_id. Columns the file lacks are NULL
// (columns added to the table after the file was written). When each is set,
// it is called after every row group (it may empty out).
func readFile(disk fsys.FS, path string, out *batch.Batch, each func() error) error {
	f, err := disk.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return readOpenFile(f, out, each)
}

// readOpenFile is readFile of an open file.
func readOpenFile(f fsys.File, out *batch.Batch, each func() error) error {
	return readOpenFileSkipping(f, out, nil, each)
}

// readOpenFileSkipping is readOpenFile that does not read the row groups
// skip, when not nil, reports true for; leaf has per column of out its
// index in the file, -1 when the file lacks it.
func readOpenFileSkipping(f fsys.File, out *batch.Batch, skip func(rg parquet.RowGroup, leaf []int) bool, each func() error) error {
	path := f.Name()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	pf, err := parquet.OpenFile(f, st.Size(), parquet.SkipBloomFilters(true), parquet.SkipPageIndex(true),
		parquet.ReadBufferSize(1<<20))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	leaf := make([]int, len(out.Schema.Columns)) // file column index, -1 when missing
	for i, c := range out.Schema.Columns {
		leaf[i] = -1
		pc := pf.Root().Column(c.Name)
		if pc != nil && c.Type.Kind == batch.KindArray {
			pc = listElement(pc)
		}
		if pc == nil {
			if !c.Nullable {
				return fmt.Errorf("%s: no column %s", path, c.Name)
			}
			continue
		}
		if err := checkColumn(pc, c); err != nil {
			return fmt.Errorf("%s: column %s: %w", path, c.Name, err)
		}
		leaf[i] = pc.Index()
	}
	vals := make([]parquet.Value, valueChunk)
	for _, rg := range pf.RowGroups() {
		if skip != nil && skip(rg, leaf) {
			continue
		}
		n := rg.NumRows()
		start := out.Len()
		chunks := rg.ColumnChunks()
		for i, c := range out.Schema.Columns {
			v := out.Vectors[i]
			if leaf[i] < 0 {
				for range n {
					v.AppendNull()
				}
				continue
			}
			if err := readChunk(chunks[leaf[i]], c, v, vals); err != nil {
				return fmt.Errorf("%s: column %s: %w", path, c.Name, err)
			}
			if got := int64(v.Len() - start); got != n {
				return fmt.Errorf("%s: column %s has %d values for %d rows", path, c.Name, got, n)
			}
		}
		if each != nil {
			if err := each(); err != nil {
				return err
			}
		}
	}
	return nil
}

// listElement returns the element leaf of a LIST column as parquetNode
// writes it, or nil.
func listElement(pc *parquet.Column) *parquet.Column {
	if l := pc.Column("list"); l != nil && l.Repeated() {
		if e := l.Column("element"); e != nil && e.Leaf() {
			return e
		}
	}
	return nil
}

// checkColumn verifies that a file's column stores the table column's type;
// for an array, pc is the element's leaf.
func checkColumn(pc *parquet.Column, c batch.Column) error {
	if c.Type.Kind == batch.KindArray {
		if !pc.Leaf() || pc.Optional() || pc.MaxRepetitionLevel() != 1 || pc.MaxDefinitionLevel() != 1 {
			return errors.New("not a LIST of required elements")
		}
		return checkType(pc, c.Type.ElemType())
	}
	if !pc.Leaf() || pc.Repeated() {
		return errors.New("not a flat column")
	}
	return checkType(pc, c.Type)
}

// checkType verifies that a leaf stores values of a scalar type.
func checkType(pc *parquet.Column, t batch.Type) error {
	kind := pc.Type().Kind()
	want := parquet.Int64
	switch t.Kind {
	case batch.KindString, batch.KindBytes:
		want = parquet.ByteArray
	case batch.KindFloat64:
		want = parquet.Double
	case batch.KindBool:
		want = parquet.Boolean
	case batch.KindDate:
		want = parquet.Int32
	case batch.KindDecimal:
		if t.Precision > 18 {
			want = parquet.FixedLenByteArray
			if pc.Type().Length() != 16 {
				return fmt.Errorf("decimal stored in %d bytes, want 16", pc.Type().Length())
			}
		}
		var dec *format.DecimalType
		if lt := pc.Type().LogicalType(); lt != nil {
			dec, _ = lt.Value.(*format.DecimalType)
		}
		if dec == nil || int(dec.Scale) != t.Scale {
			return fmt.Errorf("stored as %v, want %v", pc.Type(), t)
		}
	}
	if kind != want {
		return fmt.Errorf("stored as %v, want %v", kind, want)
	}
	return nil
}

func readChunk(cc parquet.ColumnChunk, c batch.Column, v *batch.Vector, vals []parquet.Value) error {
	pages := cc.Pages()
	defer pages.Close()
	open := false // an array row is open
	for {
		p, err := pages.ReadPage()
		if err == io.EOF {
			if open {
				v.EndArray()
			}
			return nil
		}
		if err != nil {
			return err
		}
		switch {
		case c.Type.Kind == batch.KindArray:
			err = readArrayPage(p, c, v, vals, &open)
		case !readPageData(p, c, v):
			err = readPage(p, c, v, vals)
		}
		parquet.Release(p)
		if err != nil {
			return err
		}
	}
}

// readPageData appends the rows of p to v straight from the page's decoded
// buffer, without a parquet.Value per value: the path of the files this
// package writes. It returns false, having appended nothing, for the pages
// it leaves to readPage: dictionary-encoded or repeated ones, booleans and
// 16-byte decimals. The strings of a page share one allocation.
func readPageData(p parquet.Page, c batch.Column, v *batch.Vector) bool {
	if p.Dictionary() != nil || len(p.RepetitionLevels()) > 0 {
		return false
	}
	defs := p.DefinitionLevels() // per row, 0 for NULL; none for a required column
	rows := int(p.NumRows())
	if defs != nil && len(defs) != rows {
		return false
	}
	nulls := 0
	for _, d := range defs {
		if d == 0 {
			nulls++
		}
	}
	data := p.Data()
	var ints []int64
	var ints32 []int32
	var floats []float64
	var bytes []byte
	var offsets []uint32
	switch kind := data.Kind(); {
	case kind == encoding.Int64 && (c.Type.Kind == batch.KindInt64 || c.Type.Kind == batch.KindTimestamp ||
		(c.Type.Kind == batch.KindDecimal && c.Type.Precision <= 18)):
		ints = data.Int64()
		if len(ints) != rows-nulls {
			return false
		}
	case kind == encoding.Int32 && c.Type.Kind == batch.KindDate:
		ints32 = data.Int32()
		if len(ints32) != rows-nulls {
			return false
		}
	case kind == encoding.Double && c.Type.Kind == batch.KindFloat64:
		floats = data.Double()
		if len(floats) != rows-nulls {
			return false
		}
	case kind == encoding.ByteArray && (c.Type.Kind == batch.KindString || c.Type.Kind == batch.KindBytes):
		bytes, offsets = data.ByteArray()
		if len(offsets) != rows-nulls+1 {
			return false
		}
	default:
		return false
	}
	var all string // the page's strings
	if c.Type.Kind == batch.KindString {
		all = string(bytes[offsets[0]:offsets[len(offsets)-1]])
	}
	j := 0 // the next value of the page
	for i := range rows {
		if defs != nil && defs[i] == 0 {
			v.AppendNull()
			continue
		}
		switch c.Type.Kind {
		case batch.KindInt64, batch.KindTimestamp:
			v.AppendInt(ints[j])
		case batch.KindDecimal:
			v.AppendDecimal(batch.Dec128FromInt64(ints[j]))
		case batch.KindDate:
			v.AppendInt(int64(ints32[j]))
		case batch.KindFloat64:
			v.AppendFloat(floats[j])
		case batch.KindString:
			v.AppendString(all[offsets[j]-offsets[0] : offsets[j+1]-offsets[0]])
		case batch.KindBytes:
			v.AppendBytes(append([]byte{}, bytes[offsets[j]:offsets[j+1]]...))
		}
		j++
	}
	return true
}

func readPage(p parquet.Page, c batch.Column, v *batch.Vector, vals []parquet.Value) error {
	r := p.Values()
	for {
		n, err := r.ReadValues(vals)
		for _, x := range vals[:n] {
			if x.IsNull() {
				v.AppendNull()
				continue
			}
			if e := appendParquet(c.Type, v, x); e != nil {
				return e
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// readArrayPage appends the rows of a page of a LIST column (as
// writeArrays writes them) to an array vector. open says that the last row
// read is still open: its elements may go on in the next page.
func readArrayPage(p parquet.Page, c batch.Column, v *batch.Vector, vals []parquet.Value, open *bool) error {
	r := p.Values()
	et := c.Type.ElemType()
	for {
		n, err := r.ReadValues(vals)
		for _, x := range vals[:n] {
			if x.RepetitionLevel() == 0 {
				if *open {
					v.EndArray()
				}
				*open = true
			}
			if x.DefinitionLevel() == 0 {
				continue // an empty list
			}
			if e := appendParquet(et, v.Elems, x); e != nil {
				return e
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// appendParquet appends a parquet value, not null, to a vector of type t.
func appendParquet(t batch.Type, v *batch.Vector, x parquet.Value) error {
	switch t.Kind {
	case batch.KindInt64, batch.KindTimestamp:
		v.AppendInt(x.Int64())
	case batch.KindDate:
		v.AppendInt(int64(x.Int32()))
	case batch.KindFloat64:
		v.AppendFloat(x.Double())
	case batch.KindBool:
		v.AppendBool(x.Boolean())
	case batch.KindString:
		v.AppendString(string(x.ByteArray()))
	case batch.KindBytes:
		v.AppendBytes(append([]byte{}, x.ByteArray()...))
	case batch.KindDecimal:
		if t.Precision <= 18 {
			v.AppendDecimal(batch.Dec128FromInt64(x.Int64()))
			break
		}
		b := x.ByteArray()
		if len(b) != 16 {
			return fmt.Errorf("decimal of %d bytes, want 16", len(b))
		}
		v.AppendDecimal(batch.Dec128{
			Hi: int64(binary.BigEndian.Uint64(b[:8])),
			Lo: binary.BigEndian.Uint64(b[8:]),
		})
	}
	return nil
}

// filterFile writes the rows of the append-table file at path for which
// drop is false to a new file out (compressed as compacted files are), each
// with its _sluice_load_id; it returns the new file's entry (no name) and
// the rows dropped. When none is dropped, out is removed.
func filterFile(disk fsys.FS, def tableDef, path, out string, drop func(b *batch.Batch, i int) bool) (fileEntry, int64, error) {
	fw, err := createFile(disk, out, def.Schema, "", compactCodec)
	if err != nil {
		return fileEntry{}, 0, err
	}
	rows, dropped, err := copyRows(disk, fw, path, drop)
	if err != nil {
		fw.discard()
		return fileEntry{}, 0, err
	}
	if dropped == 0 {
		fw.discard()
		return fileEntry{}, 0, nil
	}
	size, err := fw.close()
	if err != nil {
		return fileEntry{}, 0, err
	}
	return fileEntry{Rows: rows, Bytes: size}, dropped, nil
}

// copyFile writes every row of the file at path to fw, a row group at a
// time; rows keep their _sluice_load_id. It is how compaction merges files.
func copyFile(disk fsys.FS, fw *fileWriter, path string) (int64, error) {
	rows, _, err := copyRows(disk, fw, path, nil)
	return rows, err
}

// copyRows is copyFile without the rows for which drop (when set) is true;
// it returns the rows written and the rows dropped.
func copyRows(disk fsys.FS, fw *fileWriter, path string, drop func(b *batch.Batch, i int) bool) (rows, dropped int64, err error) {
	s := batch.Schema{Columns: append(append([]batch.Column{}, fw.schema.Columns...),
		batch.Column{Name: batch.LoadIDColumn, Type: batch.String})}
	b := batch.New(s, 0)
	err = readFile(disk, path, b, func() error {
		chunk := b
		if drop != nil {
			var keep []int
			for i := range b.Len() {
				if !drop(b, i) {
					keep = append(keep, i)
				}
			}
			dropped += int64(b.Len() - len(keep))
			if len(keep) < b.Len() {
				chunk = take(b, keep)
			}
		}
		ids := chunk.Vectors[len(chunk.Vectors)-1].Strs
		data := &batch.Batch{Schema: fw.schema, Vectors: chunk.Vectors[:len(chunk.Vectors)-1]}
		// Rows of one load share a load id; write each run of equal ids.
		n := len(ids)
		for i := 0; i < n; {
			j := i + 1
			for j < n && ids[j] == ids[i] {
				j++
			}
			fw.loadID = ids[i]
			if err := fw.write(slice(data, i, j)); err != nil {
				return err
			}
			i = j
		}
		rows += int64(n)
		b.Truncate(0)
		return fw.endWrite()
	})
	return rows, dropped, err
}

// slice returns rows [i, j) of b, sharing its memory.
func slice(b *batch.Batch, i, j int) *batch.Batch {
	if i == 0 && j == b.Len() {
		return b
	}
	out := &batch.Batch{Schema: b.Schema, Vectors: make([]*batch.Vector, len(b.Vectors))}
	for c, v := range b.Vectors {
		if v.Type.Kind == batch.KindArray {
			// Its rows' ends count from the first row's elements: a copy.
			w := batch.NewVector(v.Type, j-i)
			for r := i; r < j; r++ {
				w.AppendFrom(v, r)
			}
			out.Vectors[c] = w
			continue
		}
		w := &batch.Vector{Type: v.Type}
		if v.Nulls != nil {
			w.Nulls = v.Nulls[i:j]
		}
		switch v.Type.Kind {
		case batch.KindInt64, batch.KindTimestamp, batch.KindDate:
			w.Ints = v.Ints[i:j]
		case batch.KindFloat64:
			w.Floats = v.Floats[i:j]
		case batch.KindBool:
			w.Bools = v.Bools[i:j]
		case batch.KindString:
			w.Strs = v.Strs[i:j]
		case batch.KindBytes:
			w.Bytes = v.Bytes[i:j]
		case batch.KindDecimal:
			w.Decs = v.Decs[i:j]
		}
		out.Vectors[c] = w
	}
	return out
}
