package backfill

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
)

// CursorError is a cursor value that is not a value of the cursor's type.
// The row holding it is a dead letter with reason batch.ReasonBadCursor;
// the error names the value and the type, the caller adds the column.
type CursorError struct {
	Text string     // the value as read
	Type batch.Type // the cursor's type
	Want string     // what the type accepts
}

func (e *CursorError) Error() string {
	return fmt.Sprintf("cursor value %q is not a %s: want %s", e.Text, e.Type, e.Want)
}

// Reason returns the dead-letter reason, batch.ReasonBadCursor.
func (e *CursorError) Reason() string { return batch.ReasonBadCursor }

func cursorKind(k batch.Kind) bool {
	switch k {
	case batch.KindInt64, batch.KindFloat64, batch.KindDecimal, batch.KindTimestamp, batch.KindDate, batch.KindString:
		return true
	}
	return false
}

func numericKind(k batch.Kind) bool {
	return k == batch.KindInt64 || k == batch.KindFloat64 || k == batch.KindDecimal
}

// ResolveCursorType returns the cursor's type: the declared type (the
// incremental `type` key) when given, else the type initialValue's format
// declares, else the data's (the cursor column's type in the source), in
// that order. A string initialValue declares a date when it is YYYY-MM-DD
// or YYYYMMDD, and a timestamp when it carries a time (2024-01-01T10:00Z,
// 2024-01-01 10:00:00, 2024-01-01T10) or names a month (2026-01), an ISO
// week (2026-W01, 2026-W01-3) or an ordinal day (2026-032). Other texts
// (numbers) declare nothing and the data decides; without data an integer
// is int64 and another number float64. One exception resolves an
// ambiguity the spec's text cannot: eight digits that are a valid YYYYMMDD
// stay a number when the data is numeric. These rules type the cursor
// only: Hive values and snapshot versions are typed by HiveTypes and
// PlanSnapshots. The initialValue must parse as the result.
func ResolveCursorType(declared *batch.Type, initialValue string, data *batch.Type) (batch.Type, error) {
	check := func(t batch.Type) (batch.Type, error) {
		if !cursorKind(t.Kind) {
			return batch.Type{}, fmt.Errorf("backfill: a cursor is int64, float64, decimal, timestamp, date or string, not %s", t)
		}
		if initialValue != "" {
			if _, err := ParseCursor(initialValue, t, time.UTC); err != nil {
				return batch.Type{}, fmt.Errorf("backfill: initial_value: %w", err)
			}
		}
		return t, nil
	}
	hasData := data != nil && data.Kind != batch.KindInvalid
	if declared != nil && declared.Kind != batch.KindInvalid {
		return check(*declared)
	}
	if initialValue != "" {
		s := strings.TrimSpace(initialValue)
		switch {
		case hasData && numericKind(data.Kind) && len(s) == 8 && allDigits(s):
			return check(*data)
		case dateShape(s):
			return check(batch.Date)
		case timestampShape(s):
			return check(batch.Timestamp)
		case hasData:
			return check(*data)
		}
		if _, err := strconv.ParseInt(s, 10, 64); err == nil {
			return batch.Int64, nil
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsNaN(f) {
			return batch.Float64, nil
		}
		return batch.Type{}, fmt.Errorf("backfill: initial_value %q is not a number, date or timestamp: declare the cursor's type", initialValue)
	}
	if hasData {
		return check(*data)
	}
	return batch.Type{}, fmt.Errorf("backfill: the cursor's type is unknown: declare it, or give initial_value")
}

// dateShape reports whether s is a date: YYYY-MM-DD or YYYYMMDD.
func dateShape(s string) bool {
	_, ok := parseDay(s)
	return ok
}

// timestampShape reports whether s is a timestamp by the cursor's rules.
func timestampShape(s string) bool {
	_, ok := parseInstant(s, time.UTC)
	return ok
}

// parseDay parses YYYY-MM-DD or YYYYMMDD into days since the epoch.
func parseDay(s string) (int64, bool) {
	if d, ok := parseDate(s); ok {
		return d, true
	}
	if len(s) != 8 || !allDigits(s) {
		return 0, false
	}
	t, err := time.Parse("20060102", s)
	if err != nil {
		return 0, false
	}
	return int64(batch.DateFromTime(t)), true
}

func allDigits(s string) bool {
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// Layouts of a timestamp with a zone, and of one without (wall time in the
// pipeline's timezone). Parsing accepts a fraction after the seconds.
var (
	zonedLayouts = []string{"2006-01-02T15:04:05Z07:00", "2006-01-02T15:04:05Z0700", "2006-01-02T15:04Z07:00"}
	wallLayouts  = []string{"2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02T15", "2006-01", "2006-002"}
)

// parseInstant parses a timestamp text other than a bare date: a date with
// a time (T or a space between them; with a zone, or without one and then
// in tz), a month YYYY-MM, an ISO week YYYY-Www[-D] or an ordinal day
// YYYY-DDD (their first instant in tz).
func parseInstant(s string, tz *time.Location) (time.Time, bool) {
	if len(s) > 10 && (s[10] == ' ' || s[10] == 't') {
		s = s[:10] + "T" + s[11:]
	}
	for _, l := range zonedLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t, true
		}
	}
	for _, l := range wallLayouts {
		if t, err := time.ParseInLocation(l, s, tz); err == nil {
			return t, true
		}
	}
	return parseISOWeek(s, tz)
}

// parseISOWeek parses YYYY-Www or YYYY-Www-D (D 1 = Monday .. 7) into the
// first instant of that day (Monday for a week) in tz.
func parseISOWeek(s string, tz *time.Location) (time.Time, bool) {
	if (len(s) != 8 && len(s) != 10) || s[4] != '-' || s[5] != 'W' || !allDigits(s[:4]) || !allDigits(s[6:8]) {
		return time.Time{}, false
	}
	day := 1
	if len(s) == 10 {
		if s[8] != '-' || s[9] < '1' || s[9] > '7' {
			return time.Time{}, false
		}
		day = int(s[9] - '0')
	}
	year, _ := strconv.Atoi(s[:4])
	week, _ := strconv.Atoi(s[6:8])
	// The ISO year has 53 weeks when 28 December falls in week 53.
	if _, last := time.Date(year, 12, 28, 0, 0, 0, 0, time.UTC).ISOWeek(); week < 1 || week > last {
		return time.Time{}, false
	}
	jan4 := time.Date(year, 1, 4, 0, 0, 0, 0, time.UTC)
	monday := jan4.AddDate(0, 0, -((int(jan4.Weekday()) + 6) % 7))
	d := monday.AddDate(0, 0, (week-1)*7+day-1)
	return time.Date(d.Year(), d.Month(), d.Day(), 0, 0, 0, 0, tz), true
}

// dayIn returns the day of t in tz, as days since the epoch.
func dayIn(t time.Time, tz *time.Location) int64 {
	y, m, d := t.In(tz).Date()
	return int64(batch.DateFromTime(time.Date(y, m, d, 0, 0, 0, 0, time.UTC)))
}

// dayStart returns the first instant of day (days since the epoch) in tz,
// in µs since the epoch.
func dayStart(day int64, tz *time.Location) int64 {
	y, m, d := batch.DateValue(day).Time().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, tz).UnixMicro()
}

// dayEnd returns the last instant (µs) of day in tz.
func dayEnd(day int64, tz *time.Location) int64 {
	return dayStart(day+1, tz) - 1
}

func orUTC(tz *time.Location) *time.Location {
	if tz == nil {
		return time.UTC
	}
	return tz
}

// ParseCursor parses text as a cursor value of type t; tz (nil: UTC) is the
// pipeline's timezone. An int64 is a base-10 integer and a float64 a
// number other than NaN; a decimal is parsed exactly. A timestamp is RFC
// 3339 or any of the timestamp forms of ResolveCursorType (without a zone:
// wall time in tz), or a date (its first instant in tz). A date is
// YYYY-MM-DD or YYYYMMDD, or a timestamp form whose day in tz is taken. A
// string is the text itself. Surrounding spaces are ignored except in a
// string. The error is a *CursorError: the row is a dead letter with reason
// batch.ReasonBadCursor.
func ParseCursor(text string, t batch.Type, tz *time.Location) (Value, error) {
	tz = orUTC(tz)
	v := Value{Type: t}
	s := strings.TrimSpace(text)
	bad := func(want string) (Value, error) {
		return Value{}, &CursorError{Text: text, Type: t, Want: want}
	}
	switch t.Kind {
	case batch.KindString:
		v.Str = text
	case batch.KindInt64:
		x, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return bad("a base-10 integer")
		}
		v.Int = x
	case batch.KindFloat64:
		x, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(x) {
			return bad("a number")
		}
		v.Float = x
	case batch.KindDecimal:
		d, err := batch.ParseDecimal(s, t.Precision, t.Scale)
		if err != nil {
			return bad(fmt.Sprintf("a number of at most %d digits, %d after the point", t.Precision, t.Scale))
		}
		v.Dec = d
	case batch.KindDate:
		if d, ok := parseDay(s); ok {
			v.Int = d
		} else if ts, ok := parseInstant(s, tz); ok {
			v.Int = dayIn(ts, tz)
		} else {
			return bad("YYYY-MM-DD, YYYYMMDD or a timestamp")
		}
	case batch.KindTimestamp:
		if d, ok := parseDay(s); ok {
			v.Int = dayStart(d, tz)
		} else if ts, ok := parseInstant(s, tz); ok {
			v.Int = ts.UnixMicro()
		} else {
			return bad("RFC 3339 (2024-01-05T10:00:00Z) or a date")
		}
	default:
		return bad("a value of an ordered cursor type")
	}
	return v, nil
}

// ParseLag reads the spec's lag for a cursor of type t, in the type's units
// (see Incremental.Lag): for a timestamp a number of seconds or a duration
// (90s, 1h30m, 7d), for a date a number of days (3 or 3d), for int64,
// float64 and decimal a number. "" is no lag. A negative lag is an error.
func ParseLag(text string, t batch.Type) (float64, error) {
	s := strings.TrimSpace(text)
	if s == "" {
		return 0, nil
	}
	bad := func(want string) (float64, error) {
		return 0, fmt.Errorf("lag %q: want %s", text, want)
	}
	number := func(s string) (float64, bool) {
		x, err := strconv.ParseFloat(s, 64)
		return x, err == nil && x >= 0 && !math.IsInf(x, 0) && !math.IsNaN(x)
	}
	switch t.Kind {
	case batch.KindTimestamp:
		if x, ok := number(s); ok {
			return x, nil
		}
		if days, ok := strings.CutSuffix(s, "d"); ok {
			if x, ok := number(days); ok {
				return x * 86400, nil
			}
		}
		if d, err := time.ParseDuration(s); err == nil && d >= 0 {
			return d.Seconds(), nil
		}
		return bad("seconds or a duration such as 1h or 2d for a timestamp cursor")
	case batch.KindDate:
		if x, ok := number(strings.TrimSuffix(s, "d")); ok {
			return x, nil
		}
		return bad("a number of days such as 3d for a date cursor")
	case batch.KindInt64, batch.KindFloat64, batch.KindDecimal:
		if x, ok := number(s); ok {
			return x, nil
		}
		return bad(fmt.Sprintf("a non-negative number for a %s cursor", t))
	}
	return bad(fmt.Sprintf("no lag: a %s cursor has no units", t))
}

// CoerceCursor converts v, read from a column of another type, to a cursor
// value of type t: text is parsed (ParseCursor), a timestamp becomes its day
// in tz for a date cursor and a date its first instant in tz for a
// timestamp cursor, an int64 a float64, a float64 an int64 when it is a
// whole number in range; other pairs go through the value's text. NULL
// stays NULL. The error is a *CursorError.
func CoerceCursor(v Value, t batch.Type, tz *time.Location) (Value, error) {
	tz = orUTC(tz)
	if v.Null {
		return NullValue(t), nil
	}
	if v.Type == t {
		return v, nil
	}
	out := Value{Type: t}
	switch from, to := v.Type.Kind, t.Kind; {
	case from == batch.KindString || from == batch.KindBytes:
		return ParseCursor(v.Str, t, tz)
	case to == batch.KindString:
		out.Str = v.String()
	case from == batch.KindTimestamp && to == batch.KindDate:
		out.Int = dayIn(time.UnixMicro(v.Int), tz)
	case from == batch.KindDate && to == batch.KindTimestamp:
		out.Int = dayStart(v.Int, tz)
	case from == batch.KindInt64 && to == batch.KindFloat64:
		out.Float = float64(v.Int)
	case from == batch.KindFloat64 && to == batch.KindInt64:
		if v.Float != math.Trunc(v.Float) || v.Float < -(1<<63) || v.Float >= 1<<63 {
			return Value{}, &CursorError{Text: v.String(), Type: t, Want: "a whole number"}
		}
		out.Int = int64(v.Float)
	case from == batch.KindBool:
		return Value{}, &CursorError{Text: v.String(), Type: t, Want: "a value of the cursor's type"}
	default:
		return ParseCursor(v.String(), t, tz)
	}
	return out, nil
}

// CursorAt returns row i of vec as a cursor value of type t (CoerceCursor
// when the column has another type). A float NaN is a *CursorError.
func CursorAt(vec *batch.Vector, i int, t batch.Type, tz *time.Location) (Value, error) {
	if vec.IsNull(i) {
		return NullValue(t), nil
	}
	v := ValueAt(vec, i)
	if isNaN(v) {
		return Value{}, &CursorError{Text: "NaN", Type: t, Want: "a number"}
	}
	return CoerceCursor(v, t, tz)
}

func isNaN(v Value) bool { return v.Type.Kind == batch.KindFloat64 && math.IsNaN(v.Float) }

// widen converts a partition bound to the window's type, widening it: the
// smallest cursor value a row of the partition can hold for lo, the
// greatest for hi. ok is false when the bound is NULL or does not convert
// (unbounded on its side).
func (w Window) widen(b Value, hi bool) (Value, bool) {
	tz := orUTC(w.TZ)
	if b.Null || isNaN(b) {
		return Value{}, false
	}
	if b.Type == w.Type {
		return b, true
	}
	out := Value{Type: w.Type}
	switch from, to := b.Type.Kind, w.Type.Kind; {
	case from == batch.KindDate && to == batch.KindTimestamp:
		out.Int = dayStart(b.Int, tz)
		if hi {
			out.Int = dayEnd(b.Int, tz)
		}
	case from == batch.KindInt64 && to == batch.KindFloat64:
		// float64 rounds large integers: step outwards past the bound.
		f := float64(b.Int)
		if f > -(1<<63) && f < 1<<63 {
			if !hi && int64(f) > b.Int {
				f = math.Nextafter(f, math.Inf(-1))
			} else if hi && int64(f) < b.Int {
				f = math.Nextafter(f, math.Inf(1))
			}
		}
		out.Float = f
	case from == batch.KindFloat64 && to == batch.KindInt64:
		f := math.Floor(b.Float)
		if hi {
			f = math.Ceil(b.Float)
		}
		switch {
		case f < -(1 << 63):
			out.Int = math.MinInt64
		case f >= 1<<63:
			out.Int = math.MaxInt64
		default:
			out.Int = int64(f)
		}
	case (from == batch.KindString || from == batch.KindBytes) && to == batch.KindTimestamp:
		s := strings.TrimSpace(b.Str)
		if d, ok := parseDay(s); ok {
			out.Int = dayStart(d, tz)
			if hi {
				out.Int = dayEnd(d, tz)
			}
			return out, true
		}
		v, err := ParseCursor(b.Str, w.Type, tz)
		return v, err == nil
	default:
		v, err := CoerceCursor(b, w.Type, tz)
		return v, err == nil && !v.Null
	}
	return out, true
}
