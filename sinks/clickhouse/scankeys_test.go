package clickhouse

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
)

// one returns a vector of type t holding x.
func one(t batch.Type, x any) *batch.Vector {
	v := batch.NewVector(t, 1)
	switch x := x.(type) {
	case int64:
		v.AppendInt(x)
	case time.Time:
		if t.Kind == batch.KindDate {
			v.AppendInt(floorDiv(x.Unix(), secondsPerDay))
		} else {
			v.AppendInt(x.UnixMicro())
		}
	case string:
		switch t.Kind {
		case batch.KindDecimal:
			d, err := batch.ParseDecimal(x, t.Precision, t.Scale)
			if err != nil {
				panic(err)
			}
			v.AppendDecimal(d)
		case batch.KindBytes:
			v.AppendBytes([]byte(x))
		default:
			v.AppendString(x)
		}
	}
	return v
}

// TestFilterSQL: a key scan's filter on __END_AT is a WHERE clause of its
// query, in the column's storage; a column it cannot be written for has none.
func TestFilterSQL(t *testing.T) {
	end := func(typ, comment string) column {
		c, err := parseColumn("__END_AT", typ, comment)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	at := func(v *batch.Vector) sinks.KeyFilter { return sinks.KeyFilter{Column: "__END_AT", After: v} }
	ts := time.Date(2024, 1, 2, 3, 4, 5, 6000, time.UTC)
	for _, tc := range []struct {
		col  column
		f    sinks.KeyFilter
		want string
	}{
		{end("Nullable(Int64)", ""), sinks.KeyFilter{Column: "__END_AT"}, "isNull(`__END_AT`)"},
		{end("Nullable(Int64)", ""), at(one(batch.Int64, int64(-6))), "isNull(`__END_AT`) OR `__END_AT` > -6"},
		{end("Nullable(DateTime64(6, 'UTC'))", ""), at(one(batch.Timestamp, ts)), "isNull(`__END_AT`) OR `__END_AT` > toDateTime64('2024-01-02 03:04:05.000006', 6, 'UTC')"},
		{end("Nullable(DateTime('UTC'))", ""), at(one(batch.Timestamp, ts)), "isNull(`__END_AT`) OR `__END_AT` > toDateTime(1704164645)"},
		{end("Nullable(Int64)", timestampComment), at(one(batch.Timestamp, ts)), fmt.Sprintf("isNull(`__END_AT`) OR `__END_AT` > %d", ts.UnixMicro())},
		{end("Nullable(Date32)", ""), at(one(batch.Date, ts)), "isNull(`__END_AT`) OR `__END_AT` > toDate32('2024-01-02')"},
		{end("Nullable(Date)", ""), at(one(batch.Date, ts)), "isNull(`__END_AT`) OR `__END_AT` > toDate('2024-01-02')"},
		{end("Nullable(Decimal(12, 2))", ""), at(one(batch.Decimal(12, 2), "-1.5")), "isNull(`__END_AT`) OR `__END_AT` > toDecimal128('-1.50', 2)"},
		{end("Nullable(String)", ""), at(one(batch.String, "it's")), "isNull(`__END_AT`) OR `__END_AT` > unhex('69742773')"},
		// Outside what the column stores, or another kind: no condition.
		{end("Nullable(Date)", ""), at(one(batch.Date, time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC))), ""},
		{end("Nullable(Int64)", ""), at(one(batch.String, "x")), ""},
	} {
		if got := filterSQL(tc.col, tc.f); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.col.chType, got, tc.want)
		}
	}
}

// TestFilterSQLOnServer runs each filter's condition over a column of its
// type: it selects exactly the rows KeyFilter.Pass selects.
func TestFilterSQLOnServer(t *testing.T) {
	addr := serverAddr(t)
	db := newDatabase(t, addr)
	s := openSink(t, addr, db)
	ctx := context.Background()
	ts := func(s string) time.Time {
		x, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	type tcase struct {
		typ, comment string
		values       []string // SQL, cast to the column's type
		after        *batch.Vector
		want         int64
	}
	cases := []tcase{
		{"Int64", "", []string{"-5", "0", "7", "NULL"}, one(batch.Int64, int64(0)), 2},
		{"DateTime('UTC')", "", []string{"'2024-01-01 00:00:00'", "'2024-01-01 00:00:01'", "NULL"}, one(batch.Timestamp, ts("2024-01-01T00:00:00.5Z")), 2},
		{"Int64", timestampComment, []string{"10", "20", "NULL"}, one(batch.Timestamp, time.UnixMicro(15)), 2},
		{"Date", "", []string{"'2024-01-01'", "'2024-01-03'", "NULL"}, one(batch.Date, ts("2024-01-02T00:00:00Z")), 2},
		{"Decimal(12, 2)", "", []string{"'-1.50'", "'2.25'", "'2.24'", "NULL"}, one(batch.Decimal(12, 2), "2.24"), 2},
		{"String", "", []string{"'a'", `'b\0'`, `'it\'s'`, "'b'", "NULL"}, one(batch.String, "b"), 3},
		{"String", bytesComment, []string{"'a'", "unhex('ff00')", "NULL"}, one(batch.Bytes, "\xff"), 2},
	}
	if s.feat.dateTime64 {
		cases = append(cases, tcase{"DateTime64(6, 'UTC')", "", []string{"'2024-01-01 00:00:00.000000'", "'2024-01-01 00:00:00.000002'", "'1930-01-01 00:00:00'", "NULL"},
			one(batch.Timestamp, ts("2024-01-01T00:00:00.000001Z")), 2})
	}
	if s.feat.date32 {
		cases = append(cases, tcase{"Date32", "", []string{"'1950-01-01'", "'2024-01-03'", "NULL"}, one(batch.Date, ts("2000-01-01T00:00:00Z")), 2})
	}
	if err := s.conn.Exec(ctx, "CREATE DATABASE IF NOT EXISTS `"+db+"`"); err != nil {
		t.Fatal(err)
	}
	for i, tc := range cases {
		c, err := parseColumn("__END_AT", "Nullable("+tc.typ+")", tc.comment)
		if err != nil {
			t.Fatal(err)
		}
		cond := filterSQL(c, sinks.KeyFilter{Column: "__END_AT", After: tc.after})
		if !strings.Contains(cond, " > ") {
			t.Fatalf("%s: condition %q compares nothing", tc.typ, cond)
		}
		table := s.table(fmt.Sprintf("filter_%d", i))
		if err := s.conn.Exec(ctx, "CREATE TABLE "+table+" (`__END_AT` Nullable("+tc.typ+")) ENGINE = Memory"); err != nil {
			t.Fatal(err)
		}
		for _, v := range tc.values {
			if err := s.conn.Exec(ctx, "INSERT INTO "+table+" SELECT CAST("+v+" AS Nullable("+tc.typ+"))"); err != nil {
				t.Fatalf("%s: %s: %v", tc.typ, v, err)
			}
		}
		rows, err := s.conn.Query(ctx, "SELECT count() FROM "+table+" WHERE "+cond)
		if err != nil {
			t.Fatalf("%s: %s: %v", tc.typ, cond, err)
		}
		var n uint64
		for rows.Next() {
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
		}
		rows.Close()
		if int64(n) != tc.want {
			t.Errorf("%s: %s selects %d rows, want %d", tc.typ, cond, n, tc.want)
		}
	}
}
