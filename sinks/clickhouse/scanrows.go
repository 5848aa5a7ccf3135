package clickhouse

import (
	"context"
	"fmt"
	"strconv"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
)

var _ sinks.RowScanner = (*Sink)(nil)

// scanRowsBatch is how many rows each batch ScanRows hands over holds at
// most.
const scanRowsBatch = 8 << 10

// ScanRows implements sinks.RowScanner: one query, read as the server
// streams it. opts.Where goes into the query's WHERE as far as it
// translates (whereSQL), and opts.Limit into a LIMIT when the WHERE is the
// whole filter; a scan that fn stops cancels the query rather than reading
// it to its end.
func (s *Sink) ScanRows(ctx context.Context, table string, opts sinks.RowScan, fn func(*batch.Batch) error) error {
	if table == batch.LoadsTable {
		b, err := s.scanLoads(ctx)
		if err != nil {
			return err
		}
		if err := fn(batch.New(b.Schema, 0)); err != nil {
			return err
		}
		return fn(b)
	}
	src, err := s.scanSource(ctx, table)
	if err != nil {
		return err
	}
	q, exact := src.query, opts.Where == ""
	if opts.Where != "" {
		var cond string
		if cond, exact = whereSQL(opts.Where, src.cols); cond != "" {
			if src.where {
				q += " AND " + cond
			} else {
				q += " WHERE " + cond
			}
		}
	}
	if opts.Limit > 0 && exact {
		q += " LIMIT " + strconv.Itoa(opts.Limit)
	}
	schema := batch.Schema{Columns: make([]batch.Column, len(src.cols))}
	readers := make([]reader, len(src.cols))
	dests := make([]any, len(src.cols))
	for i, c := range src.cols {
		schema.Columns[i] = c.Column
		readers[i] = newReader(c)
		dests[i] = readers[i].dest
	}
	if err := fn(batch.New(schema, 0)); err != nil {
		return err
	}
	qctx, cancel := context.WithCancel(ctx)
	rows, err := s.conn.Query(qctx, q, src.args...)
	if chsql.Gone(err) {
		cancel()
		return fmt.Errorf("clickhouse: scan %s: %w", table, sinks.ErrUnknownTable)
	}
	if err != nil {
		cancel()
		return fmt.Errorf("clickhouse: scan %s: %w", table, err)
	}
	defer rows.Close()
	defer cancel() // before Close, which would otherwise read the rest
	size := scanRowsBatch
	if opts.Limit > 0 {
		size = min(size, opts.Limit)
	}
	out := batch.New(schema, size)
	for rows.Next() {
		if err := rows.Scan(dests...); err != nil {
			return fmt.Errorf("clickhouse: scan %s: %w", table, err)
		}
		for i, r := range readers {
			r.push(out.Vectors[i])
		}
		if out.Len() >= size {
			if err := fn(out); err != nil {
				return err
			}
			out.Truncate(0)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("clickhouse: scan %s: %w", table, err)
	}
	if out.Len() > 0 {
		return fn(out)
	}
	return nil
}

var _ sinks.RowCounter = (*Sink)(nil)

// CountRows implements sinks.RowCounter: a table's count(), sluice's own
// tables' rows of the pipeline, and
// nothing for _sluice_loads and CDC targets (their view would be read).
func (s *Sink) CountRows(ctx context.Context, table string) (int64, bool, error) {
	if table == batch.LoadsTable {
		return 0, false, nil
	}
	src, err := s.scanSource(ctx, table)
	if err != nil {
		return 0, false, err
	}
	if src.cdc {
		return 0, false, nil
	}
	var n uint64
	if src.where {
		n, err = s.queryUint(ctx, "SELECT count() FROM "+s.table(table)+" WHERE pipeline = ?", src.args...)
	} else {
		// Answered from the parts' metadata (a trivial count) by servers
		// since 19.x; older ones read the table's smallest column.
		n, err = s.queryUint(ctx, "SELECT count() FROM "+s.table(table))
	}
	if chsql.Gone(err) {
		return 0, false, fmt.Errorf("clickhouse: count %s: %w", table, sinks.ErrUnknownTable)
	}
	if err != nil {
		return 0, false, fmt.Errorf("clickhouse: count %s: %w", table, err)
	}
	return int64(n), true, nil
}
