package clickhouse

import (
	"context"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
)

var _ sinks.KeyScanner = (*Sink)(nil)

// scanKeysRows is how many rows each batch ScanKeys hands over holds.
const scanKeysRows = 64 << 10

// ScanKeys implements sinks.KeyScanner for CDC targets: one query through
// the target's view (its logical content), read as the server streams it.
func (s *Sink) ScanKeys(ctx context.Context, table string, cols []string, where sinks.KeyFilter, fn func(*batch.Batch) error) error {
	if ss, err := s.cdcServer(ctx, table); err != nil || ss != nil {
		if err != nil {
			return err
		}
		return ss.ScanKeys(ctx, table, cols, where, fn)
	}
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
	if where.Column != "" {
		c, ok := byName[where.Column]
		if !ok {
			return fmt.Errorf("clickhouse: scan keys of %s: no column %s", table, where.Column)
		}
		if cond := filterSQL(c, where); cond != "" {
			q += " WHERE " + cond
		}
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

// filterSQL returns the condition of a key scan's filter on column c, or ""
// when it cannot be written for the column's storage or the value (the
// rows are then all read, and the caller checks them: see sinks.KeyFilter).
func filterSQL(c column, f sinks.KeyFilter) string {
	name := chsql.Quote(c.Name)
	if f.After == nil {
		return "isNull(" + name + ")"
	}
	if lit := afterLiteral(c, f.After); lit != "" {
		return "isNull(" + name + ") OR " + name + " > " + lit
	}
	return ""
}

// Value ranges every server version stores (before 22.8, DateTime64 and
// Date32 reach 1925-01-01..2283-11-11), in days and microseconds.
const (
	minWideDay   = -16436 // 1925-01-01
	maxWideDay   = 114635 // 2283-11-11
	minWideMicro = minWideDay * secondsPerDay * 1e6
	maxWideMicro = (maxWideDay + 1) * secondsPerDay * 1e6
)

// afterLiteral returns row 0 of v as an SQL value of column c's storage,
// or "" when the column stores another kind or the value is outside the
// storage's range.
func afterLiteral(c column, v *batch.Vector) string {
	if v.Len() != 1 || v.IsNull(0) || v.Type.Kind != c.Type.Kind {
		return ""
	}
	switch c.storage {
	case storeInt64, storeMicros:
		return strconv.FormatInt(v.Ints[0], 10)
	case storeDateTime64:
		if x := v.Ints[0]; x >= minWideMicro && x < maxWideMicro {
			return "toDateTime64('" + time.UnixMicro(x).UTC().Format("2006-01-02 15:04:05.000000") + "', 6, 'UTC')"
		}
	case storeDateTime:
		// Whole seconds: a value with a fraction lies above its second.
		if sec := floorDiv(v.Ints[0], 1e6); sec >= 0 && sec <= math.MaxUint32 {
			return "toDateTime(" + strconv.FormatInt(sec, 10) + ")"
		}
	case storeDate, storeDate32:
		lo, hi, fn := int64(0), int64(math.MaxUint16), "toDate"
		if c.storage == storeDate32 {
			lo, hi, fn = minWideDay, maxWideDay, "toDate32"
		}
		if d := v.Ints[0]; d >= lo && d <= hi {
			return fn + "('" + time.Unix(d*secondsPerDay, 0).UTC().Format(time.DateOnly) + "')"
		}
	case storeDecimal:
		return "toDecimal128('" + batch.FormatDecimal(v.Decs[0], c.Type.Scale) + "', " + strconv.Itoa(c.Type.Scale) + ")"
	case storeString:
		if v.Type.Kind == batch.KindBytes {
			return "unhex('" + hex.EncodeToString(v.Bytes[0]) + "')"
		}
		return "unhex('" + hex.EncodeToString([]byte(v.Strs[0])) + "')"
	}
	return ""
}
