package clickhouse

import (
	"context"
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
)

var _ sinks.KeyScanner = (*Sink)(nil)

// scanKeysRows is how many rows each batch ScanKeys hands over holds.
const scanKeysRows = 64 << 10

// ScanKeys implements sinks.KeyScanner for CDC targets: one query through
// the target's view (its logical content), read as the server streams it.
func (s *Sink) ScanKeys(ctx context.Context, table string, cols []string, whereNull string, fn func(*batch.Batch) error) error {
	ct, err := s.cdcInfo(ctx, table)
	if err != nil {
		return fmt.Errorf("clickhouse: scan keys of %s: %w", table, err)
	}
	if err := s.settle(ctx, table); err != nil {
		return err
	}
	byName := make(map[string]column, len(ct.info.columns))
	for _, c := range ct.info.columns {
		byName[c.Name] = c
	}
	picked := make([]column, len(cols))
	names := make([]string, len(cols))
	for i, name := range cols {
		c, ok := byName[name]
		if !ok {
			return fmt.Errorf("clickhouse: scan keys of %s: no column %s", table, name)
		}
		picked[i], names[i] = c, chsql.Quote(name)
	}
	q := "SELECT " + strings.Join(names, ", ") + " FROM " + s.table(ct.name)
	if whereNull != "" {
		if _, ok := byName[whereNull]; !ok {
			return fmt.Errorf("clickhouse: scan keys of %s: no column %s", table, whereNull)
		}
		q += " WHERE isNull(" + chsql.Quote(whereNull) + ")"
	}
	schema := batch.Schema{Columns: make([]batch.Column, len(picked))}
	readers := make([]reader, len(picked))
	dests := make([]any, len(picked))
	for i, c := range picked {
		schema.Columns[i] = c.Column
		readers[i] = newReader(c)
		dests[i] = readers[i].dest
	}
	rows, err := s.conn.Query(ctx, q)
	if chsql.Gone(err) {
		return fmt.Errorf("clickhouse: scan keys of %s: %w", table, sinks.ErrUnknownTable)
	}
	if err != nil {
		return fmt.Errorf("clickhouse: scan keys of %s: %w", table, err)
	}
	defer rows.Close()
	out := batch.New(schema, scanKeysRows)
	for rows.Next() {
		if err := rows.Scan(dests...); err != nil {
			return fmt.Errorf("clickhouse: scan keys of %s: %w", table, err)
		}
		for i, r := range readers {
			r.push(out.Vectors[i])
		}
		if out.Len() >= scanKeysRows {
			if err := fn(out); err != nil {
				return err
			}
			out = batch.New(schema, scanKeysRows)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("clickhouse: scan keys of %s: %w", table, err)
	}
	if out.Len() > 0 {
		return fn(out)
	}
	return nil
}
