package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
)

// Scan returns a table's logical content, which in ClickHouse is simply the
// table: only published loads are in it. _sluice_loads and
// _sluice_dead_letters are limited to Options.Pipeline when it is set.
func (s *Sink) Scan(ctx context.Context, table string) (*batch.Batch, error) {
	if table == batch.LoadsTable {
		return s.scanLoads(ctx)
	}
	src, err := s.scanSource(ctx, table)
	if err != nil {
		return nil, err
	}
	return s.read(ctx, table, src.cols, src.query, src.args...)
}

// scanQuery is the query of a table's logical content.
type scanQuery struct {
	cols  []column
	query string // SELECT cols FROM the table or its view, maybe with a WHERE
	args  []any
	where bool // query has a WHERE
	cdc   bool // a CDC target's view
}

// scanSource returns the query Scan reads a table with (not _sluice_loads).
func (s *Sink) scanSource(ctx context.Context, table string) (scanQuery, error) {
	if strings.HasPrefix(table, sluicePrefix) && !batch.IsOwnTable(table) {
		return scanQuery{}, fmt.Errorf("clickhouse: scan %s: %w", table, sinks.ErrUnknownTable)
	}
	if !chsql.ValidIdent(table) {
		return scanQuery{}, fmt.Errorf("clickhouse: scan %q: %w", table, sinks.ErrUnknownTable)
	}
	if ct := s.cachedCDC(table); ct != nil {
		return s.scanCDC(ct), nil
	}
	info, err := s.info(ctx, table)
	if errors.Is(err, sinks.ErrUnknownTable) {
		if ct, cerr := s.cdcInfo(ctx, table); cerr == nil {
			return s.scanCDC(ct), nil
		}
	}
	if err != nil {
		return scanQuery{}, err
	}
	cols := append(append([]column(nil), info.columns...), column{
		Column: batch.Column{Name: batch.LoadIDColumn, Type: batch.String}, chType: "String", storage: storeString})
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = chsql.Quote(c.Name)
	}
	q := scanQuery{cols: cols, query: "SELECT " + strings.Join(names, ", ") + " FROM " + s.table(table)}
	if batch.IsOwnTable(table) && s.opts.Pipeline != "" {
		q.query += " WHERE pipeline = ?"
		q.args = append(q.args, s.opts.Pipeline)
		q.where = true
	}
	return q, nil
}

// scanCDC returns the query of a CDC target's logical content: its view,
// which has the target's columns and no _sluice_ metadata (a row's load id
// says nothing once later loads replaced some of its columns).
func (s *Sink) scanCDC(ct *cdcTable) scanQuery {
	names := make([]string, len(ct.info.columns))
	for i, c := range ct.info.columns {
		names[i] = chsql.Quote(c.Name)
	}
	return scanQuery{cols: ct.info.columns, query: "SELECT " + strings.Join(names, ", ") + " FROM " + s.table(ct.name), cdc: true}
}

// read runs a query whose result columns are cols into a batch.
func (s *Sink) read(ctx context.Context, table string, cols []column, q string, args ...any) (*batch.Batch, error) {
	schema := batch.Schema{Columns: make([]batch.Column, len(cols))}
	readers := make([]reader, len(cols))
	dests := make([]any, len(cols))
	for i, c := range cols {
		schema.Columns[i] = c.Column
		readers[i] = newReader(c)
		dests[i] = readers[i].dest
	}
	out := batch.New(schema, 0)
	rows, err := s.conn.Query(ctx, q, args...)
	if chsql.Gone(err) {
		return nil, fmt.Errorf("clickhouse: scan %s: %w", table, sinks.ErrUnknownTable)
	}
	if err != nil {
		return nil, fmt.Errorf("clickhouse: scan %s: %w", table, err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := rows.Scan(dests...); err != nil {
			return nil, fmt.Errorf("clickhouse: scan %s: %w", table, err)
		}
		for i, r := range readers {
			r.push(out.Vectors[i])
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("clickhouse: scan %s: %w", table, err)
	}
	return out, nil
}

// scanLoads returns _sluice_loads as batch.LoadsSchema.
func (s *Sink) scanLoads(ctx context.Context) (*batch.Batch, error) {
	led, err := s.Ledger(ctx)
	if err != nil {
		return nil, err
	}
	b := batch.New(batch.LoadsSchema, len(led.Loads))
	for _, l := range led.Loads {
		b.Vectors[0].AppendString(l.LoadID)
		b.Vectors[1].AppendString(l.Pipeline)
		b.Vectors[2].AppendString(l.Flow)
		b.Vectors[3].AppendString(strings.Join(l.Targets, ","))
		b.Vectors[4].AppendString(l.Positions.Encode())
		b.Vectors[5].AppendInt(l.Rows)
		b.Vectors[6].AppendInt(l.DeadLetters)
		b.Vectors[7].AppendInt(l.Generation)
		b.Vectors[8].AppendInt(l.CommittedAt.UTC().Truncate(time.Microsecond).UnixMicro())
		b.Vectors[9].AppendString(l.SchemaHash)
	}
	return b, nil
}
