package backfill

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/decode"
)

// File formats.
const (
	FormatParquet = "parquet"
	FormatJSONL   = "jsonl" // one JSON object per line
)

// FieldFilePath is the metadata column filled with the Name of the file a
// row came from.
const FieldFilePath = "_file_path"

// FormatOf returns the format a path's extension implies: parquet for
// .parquet, jsonl for .jsonl, .ndjson and .json; "" otherwise.
func FormatOf(p string) string {
	switch strings.ToLower(path.Ext(p)) {
	case ".parquet":
		return FormatParquet
	case ".jsonl", ".ndjson", ".json":
		return FormatJSONL
	}
	return ""
}

// Defaults of ReadOptions.
const (
	DefaultMaxRows      = 100_000
	DefaultMaxBytes     = 32 << 20
	DefaultMaxLineBytes = 16 << 20
)

// ReadOptions tune a Reader.
type ReadOptions struct {
	// Start resumes a read: the Next of the last chunk an earlier read of the
	// file committed; 0 reads from the beginning.
	Start int64
	// MaxRows bounds the rows (JSONL: the lines) of a chunk; default
	// DefaultMaxRows.
	MaxRows int
	// MaxBytes bounds the bytes of lines in a JSONL chunk; default
	// DefaultMaxBytes. (A Parquet chunk is bounded by MaxRows.)
	MaxBytes int64
	// MaxLineBytes is the longest JSONL line read; a longer one is an
	// undecodable dead letter. Default DefaultMaxLineBytes.
	MaxLineBytes int
	// Hive is the typed Hive columns of the source (HiveTypes). A wanted
	// column named here is filled from the file's Hive segment, not from the
	// file's content.
	Hive batch.Schema
	// Units names the unit of JSONL timestamp columns that hold integers
	// (decode.Units); Parquet files type their own.
	Units decode.Units
	// Paths names the nested fields JSONL columns take (decode.Paths).
	Paths decode.Paths
	// Children, for a Parquet table typed by its files, gives the child
	// tables its lists fill (by the part of their names after <table>__,
	// each with its columns, the link columns among them): each chunk's
	// child rows are in Chunk.Children, and a wanted batch.IDColumn is
	// the rows' ids. A bad element makes its row a dead letter.
	Children map[string]batch.Schema
	// Lines makes a JSONL read return its lines undecoded, in
	// Chunk.Records, for a caller that decodes them itself (a table typed
	// by its lines); the schema and Hive are then not used.
	Lines bool
	// Names, when set, gives the column name of each of a Parquet file's
	// own column names (names from the data, normalized): wanted columns
	// are looked up by it, per file. Two of a file's columns with one name
	// are a FileError.
	Names func(field string) string
}

func (o *ReadOptions) defaults() {
	if o.MaxRows <= 0 {
		o.MaxRows = DefaultMaxRows
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxLineBytes <= 0 {
		o.MaxLineBytes = DefaultMaxLineBytes
	}
}

// A Reader reads one file in chunks. It is not safe for concurrent use.
type Reader interface {
	// Next returns the next chunk, or io.EOF after the chunk that has Done
	// set. An error other than io.EOF or the context's is a *FileError; the
	// reader returns it again on every later call.
	Next(ctx context.Context) (*Chunk, error)
	Close() error
}

// Chunk is a part of a file, decoded into a batch of the wanted schema.
//
// A read yields at least one chunk, and its last chunk has Done set (a file
// with no rows, or a read resumed at the file's end, yields one empty
// chunk). Rows are numbered from 0 in file order: a Parquet file's rows, a
// JSONL file's lines (blank lines included).
type Chunk struct {
	Batch *batch.Batch
	// Records holds the chunk's lines instead of Batch when the read was
	// of ReadOptions.Lines (blank and too long lines left out), each a
	// batch.Record of the file's name, batch.LinePartition and its line
	// number.
	Records []batch.Record
	// Children holds the chunk's child rows under ReadOptions.Children,
	// by child table, those of dead-lettered rows left out.
	Children map[string]*batch.Batch
	File     string // the File's Name
	// RowGroup is the Parquet row group of the chunk's first row (chunks may
	// span row groups); -1 for JSONL.
	RowGroup int64
	// FirstRow is the number of rows of the file before the chunk.
	FirstRow int64
	// Next is the resume point after this chunk: FirstRow plus the rows the
	// chunk consumed (loaded, dead-lettered or blank). Store it with the
	// load that commits the chunk (batch.Position.RowGroup) and pass it as
	// ReadOptions.Start to go on after it. It counts rows, not chunks, so a
	// resumed read with other MaxRows still starts at the right row.
	Next int64
	// Rows holds the file row of each batch row when they are not
	// FirstRow, FirstRow+1, ... (rows became dead letters, or blank lines
	// were skipped); nil when they are.
	Rows []int64
	// DeadLetters are the chunk's rows that could not be loaded (Source,
	// Position, Reason, Error and Payload set; Position is the row number
	// counted from 1, the line number for JSONL). The caller fills
	// Pipeline, Flow, Target and At.
	DeadLetters []batch.DeadLetter
	// Bytes is the part of the file the chunk accounts for; the Bytes of a
	// whole read add up to the file's size (Parquet: apportioned by rows).
	Bytes int64
	// Skipped is the bytes a resumed read skipped, on its first chunk.
	Skipped int64
	// Done is set on the file's last chunk.
	Done bool
}

// Row returns the file row (from 0) of batch row i.
func (c *Chunk) Row(i int) int64 {
	if c.Rows != nil {
		return c.Rows[i]
	}
	return c.FirstRow + int64(i)
}

// FileError is a file that cannot be read: corrupt or truncated, or not of
// the wanted schema. A run stops on it without committing the file.
type FileError struct {
	File   string // the File's Name
	Column string // the column concerned, when one is
	Err    error
}

func (e *FileError) Error() string {
	if e.Column != "" {
		return fmt.Sprintf("backfill: file %s: column %s: %v", e.File, e.Column, e.Err)
	}
	return fmt.Sprintf("backfill: file %s: %v", e.File, e.Err)
}

func (e *FileError) Unwrap() error { return e.Err }

// Open returns a reader of f in format (FormatParquet or FormatJSONL) that
// fills batches of schema: the source's columns, Hive columns (named in
// opts.Hive) and _file_path, in any order. Parquet columns are matched by
// name; see the package documentation for the type mapping. A schema the
// file cannot give (a non-nullable column it lacks, a type that does not
// convert) or a corrupt file is a *FileError, returned here or by Next.
func Open(f File, format string, schema batch.Schema, opts ReadOptions) (Reader, error) {
	opts.defaults()
	for i, c := range schema.Columns {
		if strings.HasPrefix(c.Name, "_kafka_") {
			return nil, fmt.Errorf("backfill: column %s: Kafka metadata is not available from files", c.Name)
		}
		if c.Name == FieldFilePath && c.Type != batch.String {
			return nil, fmt.Errorf("backfill: column %s is string, declared %v", c.Name, c.Type)
		}
		if schema.Index(c.Name) != i {
			return nil, fmt.Errorf("backfill: column %s declared twice", c.Name)
		}
	}
	consts, err := constants(f, schema, opts.Hive)
	if err != nil {
		return nil, err
	}
	switch format {
	case FormatParquet:
		return openParquet(f, schema, consts, opts)
	case FormatJSONL:
		return openJSONL(f, schema, consts, opts)
	}
	return nil, fmt.Errorf("backfill: unknown format %q: parquet or jsonl", format)
}

// constants returns, per wanted column, the value filling every row (Hive
// columns, _file_path), or nil for a column read from the file.
func constants(f File, schema batch.Schema, hive batch.Schema) ([]*Value, error) {
	out := make([]*Value, len(schema.Columns))
	for i, c := range schema.Columns {
		if c.Name == FieldFilePath {
			out[i] = &Value{Type: batch.String, Str: f.Name}
			continue
		}
		if hive.Index(c.Name) < 0 {
			continue
		}
		v, err := HiveValueOf(f, c)
		if err != nil {
			return nil, &FileError{File: f.Name, Column: c.Name, Err: err}
		}
		out[i] = &v
	}
	return out, nil
}

// badRow is a row of a chunk that becomes a dead letter.
type badRow struct {
	row    int // row of the chunk's batch
	field  string
	reason string
	msg    string
}

// dropRows removes the bad rows from b (first error per row wins) and
// returns their dead letters, in row order, and the file rows of the rows
// kept. fileRow maps a batch row to its file row (from 0).
func dropRows(b *batch.Batch, bad []badRow, file string, fileRow func(int) int64) ([]batch.DeadLetter, []int64) {
	n := b.Len()
	reason := make([]*badRow, n)
	for i := range bad {
		if reason[bad[i].row] == nil {
			reason[bad[i].row] = &bad[i]
		}
	}
	var dls []batch.DeadLetter
	keep := make([]bool, n)
	rows := make([]int64, 0, n)
	for i := range n {
		r := reason[i]
		if r == nil {
			keep[i] = true
			rows = append(rows, fileRow(i))
			continue
		}
		msg := r.msg
		if r.field != "" {
			msg = fmt.Sprintf("field %q: %s", r.field, r.msg)
		}
		dls = append(dls, batch.DeadLetter{
			Source:   file,
			Position: fmt.Sprint(fileRow(i) + 1),
			Reason:   r.reason,
			Error:    msg,
			Payload:  rowJSON(b, i),
		})
	}
	for _, v := range b.Vectors {
		filterVector(v, keep)
	}
	return dls, rows
}

// filterVector keeps the rows of v whose keep flag is set, in place.
func filterVector(v *batch.Vector, keep []bool) {
	if v.Type.Kind == batch.KindArray {
		var rows []int
		for i, k := range keep {
			if k {
				rows = append(rows, i)
			}
		}
		*v = *v.Take(rows)
		return
	}
	j := 0
	for i, k := range keep {
		if !k {
			continue
		}
		if v.Nulls != nil {
			v.Nulls[j] = v.Nulls[i]
		}
		switch v.Type.Kind {
		case batch.KindInt64, batch.KindTimestamp, batch.KindDate:
			v.Ints[j] = v.Ints[i]
		case batch.KindFloat64:
			v.Floats[j] = v.Floats[i]
		case batch.KindBool:
			v.Bools[j] = v.Bools[i]
		case batch.KindString:
			v.Strs[j] = v.Strs[i]
		case batch.KindBytes:
			v.Bytes[j] = v.Bytes[i]
		case batch.KindDecimal:
			v.Decs[j] = v.Decs[i]
		}
		j++
	}
	v.Truncate(j)
}

// Each hands every chunk of r to fn, in order, until r ends (nil), r fails
// or fn returns an error (that error).
func Each(ctx context.Context, r Reader, fn func(*Chunk) error) error {
	for {
		c, err := r.Next(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(c); err != nil {
			return err
		}
	}
}

// ReadFile opens f (Open), hands every chunk to fn (Each) and closes it.
func ReadFile(ctx context.Context, f File, format string, schema batch.Schema, opts ReadOptions, fn func(*Chunk) error) error {
	r, err := Open(f, format, schema, opts)
	if err != nil {
		return err
	}
	defer r.Close()
	return Each(ctx, r, fn)
}
