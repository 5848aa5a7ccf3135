package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
)

var _ sinks.RowScanner = (*Sink)(nil)

// ScanRows implements sinks.RowScanner: it reads the current version's
// files in the manifest's order one row group at a time, handing fn each
// row group's rows, so that a caller that stops early reads only the row
// groups before it stopped. opts are left to the caller: the rows of a row
// group are read whole anyway.
func (s *Sink) ScanRows(ctx context.Context, table string, opts sinks.RowScan, fn func(*batch.Batch) error) error {
	if s.closed.Load() {
		return errClosed
	}
	if table == batch.LoadsTable {
		b, err := s.Scan(ctx, table)
		if err != nil {
			return err
		}
		if err := fn(batch.New(b.Schema, 0)); err != nil {
			return err
		}
		return fn(b)
	}
	if !tableName.MatchString(table) {
		return fmt.Errorf("local: scan %q: %w", table, sinks.ErrUnknownTable)
	}
	def, err := s.readTable(table)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("local: scan %s: %w", table, sinks.ErrUnknownTable)
	}
	if err != nil {
		return fmt.Errorf("local: scan %s: %w", table, err)
	}
	cols := append([]batch.Column{}, def.Schema.Columns...)
	if !def.cdc() {
		cols = append(cols, batch.Column{Name: batch.LoadIDColumn, Type: batch.String})
	}
	schema := batch.Schema{Columns: cols}
	// Opened first, a version's files stay readable when a later version
	// supersedes it; one removed before they were is read from the new one.
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		m, err := s.current(table)
		if errors.Is(err, errNoTable) {
			return fmt.Errorf("local: scan %s: %w", table, sinks.ErrUnknownTable)
		}
		if err == nil {
			files, oerr := s.openVersion(table, m)
			if oerr == nil {
				defer func() {
					for _, f := range files {
						f.Close()
					}
				}()
				buf := batch.New(schema, 0)
				if err := fn(buf); err != nil {
					return err
				}
				var fnErr error
				each := func() error {
					if err := ctx.Err(); err != nil {
						return err
					}
					fnErr = fn(buf)
					buf.Truncate(0)
					return fnErr
				}
				for _, f := range files {
					if err := readOpenFile(f, buf, each); err != nil {
						if fnErr != nil {
							return fnErr
						}
						return fmt.Errorf("local: scan %s: %w", table, err)
					}
				}
				return nil
			}
			err = oerr
		}
		if !errors.Is(err, fs.ErrNotExist) || attempt >= 10 {
			return fmt.Errorf("local: scan %s: %w", table, err)
		}
	}
}

var _ sinks.RowCounter = (*Sink)(nil)

// CountRows implements sinks.RowCounter from the current version's
// manifest, which counts each file's rows. _sluice_loads is not counted.
func (s *Sink) CountRows(ctx context.Context, table string) (int64, bool, error) {
	if s.closed.Load() {
		return 0, false, errClosed
	}
	if table == batch.LoadsTable {
		return 0, false, nil
	}
	if !tableName.MatchString(table) {
		return 0, false, fmt.Errorf("local: count %q: %w", table, sinks.ErrUnknownTable)
	}
	m, err := s.current(table)
	if errors.Is(err, errNoTable) {
		return 0, false, fmt.Errorf("local: count %s: %w", table, sinks.ErrUnknownTable)
	}
	if err != nil {
		return 0, false, fmt.Errorf("local: count %s: %w", table, err)
	}
	var n int64
	for _, fe := range m.Files {
		n += fe.Rows
	}
	return n, true, nil
}
