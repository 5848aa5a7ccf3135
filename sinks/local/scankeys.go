package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/local/fsys"
)

var _ sinks.KeyScanner = (*Sink)(nil)

// ScanKeys implements sinks.KeyScanner: it reads the current version's
// files one row group at a time, only the columns asked for (and
// whereNull's), and hands fn each row group's rows that pass.
func (s *Sink) ScanKeys(ctx context.Context, table string, cols []string, whereNull string, fn func(*batch.Batch) error) error {
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
	nullAt := -1
	if whereNull != "" {
		if nullAt = read.Index(whereNull); nullAt < 0 {
			i := def.Schema.Index(whereNull)
			if i < 0 {
				return fmt.Errorf("local: scan keys of %s: no column %s", table, whereNull)
			}
			nullAt = len(read.Columns)
			read.Columns = append(read.Columns, def.Schema.Columns[i])
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
			err = scanFiles(ctx, files, read, out, nullAt, func(b *batch.Batch) error {
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
// whose column nullAt is null (every row when nullAt < 0).
func scanFiles(ctx context.Context, files []fsys.File, read, out batch.Schema, nullAt int, fn func(*batch.Batch) error) error {
	buf := batch.New(read, 0)
	each := func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := buf.Len()
		res := batch.New(out, n)
		for i := range n {
			if nullAt >= 0 && !buf.Vectors[nullAt].IsNull(i) {
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
	for _, f := range files {
		if err := readOpenFile(f, buf, each); err != nil {
			return err
		}
	}
	return nil
}
