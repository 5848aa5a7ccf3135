package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/parquet-go/parquet-go"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/local/fsys"
)

var _ sinks.KeyScanner = (*Sink)(nil)

// ScanKeys implements sinks.KeyScanner: it reads the current version's
// files one row group at a time, only the columns asked for (and where's),
// and hands fn each row group's rows that pass. A row group whose
// statistics show that none of its rows passes is not read.
func (s *Sink) ScanKeys(ctx context.Context, table string, cols []string, where sinks.KeyFilter, fn func(*batch.Batch) error) error {
	if s.closed.Load() {
		return errClosed
	}
	if !tableName.MatchString(table) {
		return fmt.Errorf("local: scan keys of %q: %w", table, sinks.ErrUnknownTable)
	}
	def, err := s.readTable(table)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("local: scan keys of %s: %w", table, sinks.ErrUnknownTable)
	}
	if err != nil {
		return fmt.Errorf("local: scan keys of %s: %w", table, err)
	}
	read := batch.Schema{}
	for _, name := range cols {
		i := def.Schema.Index(name)
		if i < 0 {
			return fmt.Errorf("local: scan keys of %s: no column %s", table, name)
		}
		read.Columns = append(read.Columns, def.Schema.Columns[i])
	}
	filterAt := -1
	if where.Column != "" {
		if filterAt = read.Index(where.Column); filterAt < 0 {
			i := def.Schema.Index(where.Column)
			if i < 0 {
				return fmt.Errorf("local: scan keys of %s: no column %s", table, where.Column)
			}
			filterAt = len(read.Columns)
			read.Columns = append(read.Columns, def.Schema.Columns[i])
		}
		if a := where.After; a != nil && (a.Len() != 1 || a.IsNull(0) || a.Type.Kind != read.Columns[filterAt].Type.Kind) {
			return fmt.Errorf("local: scan keys of %s: a filter on %s needs one value of type %v", table, where.Column, read.Columns[filterAt].Type)
		}
	}
	out := batch.Schema{Columns: read.Columns[:len(cols)]}
	// A version folder may be removed under a slow reader once superseded
	// for KeepVersions: the files are opened first, and a version that went
	// away before they were is read again from the new one.
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		m, err := s.current(table)
		if errors.Is(err, errNoTable) {
			return fmt.Errorf("local: scan keys of %s: %w", table, sinks.ErrUnknownTable)
		}
		var files []fsys.File
		if err == nil {
			files, err = s.openVersion(table, m)
		}
		if err == nil {
			var fnErr error
			err = scanFiles(ctx, files, read, out, filterAt, where, func(b *batch.Batch) error {
				fnErr = fn(b)
				return fnErr
			})
			for _, f := range files {
				f.Close()
			}
			switch {
			case fnErr != nil:
				return fnErr
			case err != nil:
				return fmt.Errorf("local: scan keys of %s: %w", table, err)
			}
			return nil
		}
		if !errors.Is(err, fs.ErrNotExist) || attempt >= 10 {
			return fmt.Errorf("local: scan keys of %s: %w", table, err)
		}
	}
}

// openVersion opens every data file of a version; the caller closes them.
func (s *Sink) openVersion(table string, m manifest) ([]fsys.File, error) {
	dir := s.lay.versionDir(table, m.Version)
	files := make([]fsys.File, 0, len(m.Files))
	for _, fe := range m.Files {
		f, err := s.disk.Open(filepath.Join(dir, fe.Name))
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// scanFiles reads the columns of read from each file a row group at a
// time and passes fn the columns of out (a prefix of read) of the rows
// whose column filterAt passes where (every row when filterAt < 0).
func scanFiles(ctx context.Context, files []fsys.File, read, out batch.Schema, filterAt int, where sinks.KeyFilter, fn func(*batch.Batch) error) error {
	buf := batch.New(read, 0)
	each := func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := buf.Len()
		res := batch.New(out, n)
		for i := range n {
			if filterAt >= 0 && !where.Pass(buf.Vectors[filterAt], i) {
				continue
			}
			for c, v := range res.Vectors {
				v.AppendFrom(buf.Vectors[c], i)
			}
		}
		buf.Truncate(0)
		if res.Len() == 0 {
			return nil
		}
		return fn(res)
	}
	var skip func(parquet.RowGroup, []int) bool
	if filterAt >= 0 {
		skip = skipper(read.Columns[filterAt], filterAt, where)
	}
	for _, f := range files {
		if err := readOpenFileSkipping(f, buf, skip, each); err != nil {
			return err
		}
	}
	return nil
}

// skipper returns what tells, for readOpenFileSkipping, the row groups
// none of whose rows passes where, a filter on column col (read at index
// at): those whose statistics show no null and a maximum not after
// where.After. It returns nil when statistics cannot tell.
func skipper(col batch.Column, at int, where sinks.KeyFilter) func(parquet.RowGroup, []int) bool {
	if where.After == nil || !boundedKind(col.Type) {
		return nil
	}
	top := batch.NewVector(col.Type, 1)
	return func(rg parquet.RowGroup, leaf []int) bool {
		if leaf[at] < 0 {
			return false // missing from the file: null
		}
		cc, ok := rg.ColumnChunks()[leaf[at]].(interface {
			Bounds() (min, max parquet.Value, ok bool)
			NullCount() int64
		})
		if !ok || cc.NullCount() > 0 {
			return false
		}
		_, hi, ok := cc.Bounds()
		if !ok {
			return false
		}
		top.Truncate(0)
		if appendParquet(col.Type, top, hi) != nil || top.Len() != 1 {
			return false
		}
		return sinks.CompareAt(top, 0, where.After, 0) <= 0
	}
}

// boundedKind reports whether the row-group statistics of a column of type
// t order as its values do: physical integers and byte strings (a decimal
// of 16 fixed bytes is two's complement, which unsigned bytes misorder).
func boundedKind(t batch.Type) bool {
	switch t.Kind {
	case batch.KindInt64, batch.KindTimestamp, batch.KindDate, batch.KindString, batch.KindBytes:
		return true
	case batch.KindDecimal:
		return t.Precision <= 18
	}
	return false
}
