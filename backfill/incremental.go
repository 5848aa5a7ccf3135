package backfill

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
)

// Values of Incremental.Func; "" means LastValueMax.
const (
	LastValueMax = "max"
	LastValueMin = "min"
)

// Incremental is the cursor of an incremental `files` flow: the rules that
// pick, on each run, the rows (and through Hive values, the partitions) to
// read, and how the stored last_value moves. The rules are dlt's
// (dlt.sources.incremental with lag), except where noted.
//
// The window. With Func max the window is [Start, End): Start is the stored
// last_value minus Lag, or Initial on the first run; End is the end_value,
// excluded. With Func min the cursor shrinks and the window is mirrored:
// (end_value, last_value + Lag], the end_value excluded, the lagged value
// included. A missing bound is unbounded. The lagged value never passes
// Initial: with max it is at least Initial, with min at most Initial
// (unlike dlt, a stored last_value beyond Initial the other way, left from
// before initial_value was changed, is clamped too: rows before
// initial_value are never loaded).
//
// Lag. Lag is in the cursor type's units: seconds for a timestamp, days for
// a date, the cursor's own units for int64, float64 and decimal cursors. It
// applies only when there is a stored last_value and no End: the first run
// reads from Initial, and with End set the flow is a bounded, stateless
// range load (Window reports the lag as ignored, Next returns the state
// unchanged). The
// result keeps the cursor's type: an int64 cursor moves by whole units (the
// integers within Lag of the last value: floor(Lag)), a float64 by Lag, a
// decimal by Lag at its scale (floor), a timestamp by Lag rounded to the
// microsecond. A date cursor moves by whole days, rounding a fractional lag
// up, so that the day holding the lagged instant is covered in full (dlt
// rounds it down with min).
//
// Dates. A date cursor takes the day of a timestamp value in TZ (the
// pipeline's timezone; nil is UTC). Its window is whole days: with max it
// starts at the first instant of its first day, with min it ends at the
// last instant of its last day; TouchesPartition expands days to instants
// the same way when a timestamp cursor meets date partitions.
//
// The stored last_value only moves forward (Next): with max it is the
// greatest of the stored value and the values read, with min the least.
//
// Rows. A row's cursor is read as the cursor's type by CursorAt (or
// ParseCursor for text); one that is not a value of the type is a
// *CursorError, and the row a dead letter with reason
// batch.ReasonBadCursor. docs/incremental.md has a worked example.
type Incremental struct {
	Cursor  string         // the cursor column
	Type    batch.Type     // the cursor's type, see ResolveCursorType
	Initial *Value         // initial_value; nil: none
	End     *Value         // end_value; nil: none
	Func    string         // last_value_func: LastValueMax ("" too) or LastValueMin
	Lag     float64        // in the type's units; 0: none
	TZ      *time.Location // the pipeline's timezone for dates; nil: UTC
}

// NewIncremental builds an Incremental from the spec's text: initial and end
// are cursor values of type t (ParseCursor), lag is read by ParseLag. The
// result is validated.
func NewIncremental(cursor string, t batch.Type, initial, end, fn, lag string, tz *time.Location) (Incremental, error) {
	inc := Incremental{Cursor: cursor, Type: t, Func: fn, TZ: tz}
	for _, b := range []struct {
		key, text string
		dst       **Value
	}{{"initial_value", initial, &inc.Initial}, {"end_value", end, &inc.End}} {
		if b.text == "" {
			continue
		}
		v, err := ParseCursor(b.text, t, tz)
		if err != nil {
			return Incremental{}, fmt.Errorf("backfill: incremental cursor %s: %s: %w", cursor, b.key, err)
		}
		*b.dst = &v
	}
	l, err := ParseLag(lag, t)
	if err != nil {
		return Incremental{}, fmt.Errorf("backfill: incremental cursor %s: %w", cursor, err)
	}
	inc.Lag = l
	if err := inc.Validate(); err != nil {
		return Incremental{}, err
	}
	return inc, nil
}

// Validate checks the cursor's rules: a known Func (a lag with any other
// last_value_func is an error, where dlt only warns), a cursor type that
// orders, a finite non-negative Lag on a type that has units, Initial and
// End of the cursor's type, and End only with Initial and not before it
// (after it with min).
func (inc Incremental) Validate() error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("backfill: incremental cursor %s: %s", inc.Cursor, fmt.Sprintf(format, args...))
	}
	switch inc.Func {
	case "", LastValueMax, LastValueMin:
	default:
		if inc.Lag != 0 {
			return fail("lag needs last_value_func max or min, not %q", inc.Func)
		}
		return fail("unknown last_value_func %q: max or min", inc.Func)
	}
	if !cursorKind(inc.Type.Kind) {
		return fail("a cursor is int64, float64, decimal, timestamp, date or string, not %s", inc.Type)
	}
	switch {
	case math.IsNaN(inc.Lag) || math.IsInf(inc.Lag, 0) || inc.Lag < 0:
		return fail("lag %v: want a finite, non-negative number", inc.Lag)
	case inc.Lag > 0 && inc.Type.Kind == batch.KindString:
		return fail("lag needs a numeric, date or timestamp cursor, not string")
	}
	for _, b := range []struct {
		key string
		v   *Value
	}{{"initial_value", inc.Initial}, {"end_value", inc.End}} {
		switch {
		case b.v == nil:
		case b.v.Null:
			return fail("%s is NULL", b.key)
		case b.v.Type != inc.Type:
			return fail("%s %s is a %s, the cursor is a %s", b.key, b.v, b.v.Type, inc.Type)
		}
	}
	if inc.End != nil {
		if inc.Initial == nil {
			return fail("end_value needs initial_value")
		}
		if c := inc.End.Compare(*inc.Initial); (c < 0 && !inc.isMin()) || (c > 0 && inc.isMin()) {
			word := "before"
			if inc.isMin() {
				word = "after"
			}
			return fail("end_value %s is %s initial_value %s", inc.End, word, inc.Initial)
		}
	}
	return nil
}

func (inc Incremental) isMin() bool { return inc.Func == LastValueMin }

func (inc Incremental) loc() *time.Location {
	if inc.TZ == nil {
		return time.UTC
	}
	return inc.TZ
}

// CursorState is what the checkpoint store keeps for a cursor: the last
// value read, nil before the first run that saw a value. Its JSON form is
// {"last_value": text, "type": type}, the text as Value.String spells it
// (read back exactly by ParseValue); Text and ParseCursorState give the
// same two strings for a store that keeps them as fields.
type CursorState struct {
	LastValue *Value
}

// Text returns the stored form: the last value's text and its type's
// spelling, both empty when there is none.
func (s CursorState) Text() (lastValue, typ string) {
	if s.LastValue == nil {
		return "", ""
	}
	return s.LastValue.String(), s.LastValue.Type.String()
}

// ParseCursorState reads the stored form back; an empty typ is no state.
func ParseCursorState(lastValue, typ string) (CursorState, error) {
	if typ == "" {
		return CursorState{}, nil
	}
	t, err := batch.ParseType(typ)
	if err != nil {
		return CursorState{}, fmt.Errorf("backfill: cursor state: %w", err)
	}
	v, err := ParseValue(lastValue, t)
	if err != nil {
		return CursorState{}, fmt.Errorf("backfill: cursor state: %w", err)
	}
	return CursorState{LastValue: &v}, nil
}

type cursorStateJSON struct {
	LastValue string `json:"last_value"`
	Type      string `json:"type"`
}

// MarshalJSON encodes the state as {"last_value": ..., "type": ...}.
func (s CursorState) MarshalJSON() ([]byte, error) {
	var j cursorStateJSON
	j.LastValue, j.Type = s.Text()
	return json.Marshal(j)
}

// UnmarshalJSON decodes what MarshalJSON wrote.
func (s *CursorState) UnmarshalJSON(b []byte) error {
	var j cursorStateJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return fmt.Errorf("backfill: cursor state: %w", err)
	}
	st, err := ParseCursorState(j.LastValue, j.Type)
	if err != nil {
		return err
	}
	*s = st
	return nil
}

// Window is the range of cursor values one run reads. Start is the lower
// bound and End the upper, whatever the direction; nil is unbounded. With
// last_value_func max, Start (the lagged last_value, or initial_value) is
// inclusive and End (end_value) exclusive: [Start, End). With min they swap
// roles: Start is end_value, exclusive, and End the lagged last_value,
// inclusive: (Start, End]. Lagged reports that lag moved the bound (it may
// then have been clamped back to initial_value).
type Window struct {
	Type                         batch.Type     // the cursor's type
	TZ                           *time.Location // for days and instants; nil: UTC
	Start, End                   *Value
	StartInclusive, EndInclusive bool
	Lagged                       bool
}

// Window returns the window of the run that follows state (nil or empty:
// the first run) and notes worth logging at Info (lag ignored because
// end_value is set, no lag on the first run, a bound clamped to
// initial_value). It fails when inc is not valid or the stored value is not
// of the cursor's type (the cursor's type changed since it was stored).
func (inc Incremental) Window(state *CursorState) (Window, []string, error) {
	if err := inc.Validate(); err != nil {
		return Window{}, nil, err
	}
	w := Window{Type: inc.Type, TZ: inc.loc()}
	var notes []string
	stored := state != nil && state.LastValue != nil
	var bound *Value
	switch {
	case inc.End != nil:
		if inc.Lag > 0 {
			notes = append(notes, fmt.Sprintf("lag ignored: end_value %s is set, the run loads the fixed range", inc.End))
		}
		if stored {
			notes = append(notes, fmt.Sprintf("stored last_value %s ignored: end_value %s is set", state.LastValue, inc.End))
		}
		bound = clone(inc.Initial)
	case !stored:
		if inc.Lag > 0 {
			notes = append(notes, "lag not applied: first run, no stored last_value")
		}
		bound = clone(inc.Initial)
	default:
		last := *state.LastValue
		if last.Null || last.Type != inc.Type {
			return Window{}, nil, fmt.Errorf("backfill: incremental cursor %s: stored last_value %s is a %s, the cursor is a %s: the cursor's type changed, a full refresh resets it",
				inc.Cursor, last, last.Type, inc.Type)
		}
		if inc.Lag > 0 {
			last = lagValue(last, inc.Lag, inc.isMin())
			w.Lagged = true
		}
		if inc.Initial != nil && beyond(*inc.Initial, last, inc.isMin()) {
			what := "stored last_value " + state.LastValue.String()
			if w.Lagged {
				what = "lagged last_value " + last.String()
			}
			notes = append(notes, fmt.Sprintf("%s clamped to initial_value %s", what, inc.Initial))
			last = *inc.Initial
		}
		bound = &last
	}
	if inc.isMin() {
		w.Start, w.End = clone(inc.End), bound
		w.EndInclusive = true
	} else {
		w.Start, w.End = bound, clone(inc.End)
		w.StartInclusive = true
	}
	return w, notes, nil
}

// beyond reports whether initial lies past v in the window's direction: v
// is before initial with max, after it with min.
func beyond(initial, v Value, isMin bool) bool {
	c := v.Compare(initial)
	return (c < 0 && !isMin) || (c > 0 && isMin)
}

func clone(v *Value) *Value {
	if v == nil {
		return nil
	}
	c := *v
	return &c
}

// Contains reports whether a row whose cursor is v is read. v is a cursor
// value (ParseCursor, CursorAt); a value of another type is converted first
// (CoerceCursor) and is outside when it does not convert. NULL and a float
// NaN are outside.
func (w Window) Contains(v Value) bool {
	if v.Null {
		return false
	}
	if v.Type != w.Type {
		c, err := CoerceCursor(v, w.Type, w.TZ)
		if err != nil || c.Null {
			return false
		}
		v = c
	}
	if isNaN(v) {
		return false
	}
	if w.Start != nil {
		if c := v.Compare(*w.Start); c < 0 || (c == 0 && !w.StartInclusive) {
			return false
		}
	}
	if w.End != nil {
		if c := v.Compare(*w.End); c > 0 || (c == 0 && !w.EndInclusive) {
			return false
		}
	}
	return true
}

// Empty reports whether no value can lie in the window (a bounded range
// whose end_value equals its initial_value, for example).
func (w Window) Empty() bool {
	if w.Start == nil || w.End == nil {
		return false
	}
	c := w.Start.Compare(*w.End)
	return c > 0 || (c == 0 && !(w.StartInclusive && w.EndInclusive))
}

// TouchesPartition reports whether any row of a partition whose cursor
// values lie in [lo, hi] can fall in the window, so that a partition for
// which it is false need not be read. lo and hi may be of another type than
// the cursor and are widened to it: a date becomes its first instant (lo)
// or its last (hi) in the window's timezone for a timestamp cursor, a
// timestamp its day for a date cursor, a float the integers around it for
// an int64 cursor, text is parsed as a cursor value. A daily partition
// date=2024-03-07 is lo = hi = that date. A NULL bound, or one that does
// not convert, is unbounded on its side (the partition is read).
func (w Window) TouchesPartition(lo, hi Value) bool {
	if w.Empty() {
		return false
	}
	l, okL := w.widen(lo, false)
	h, okH := w.widen(hi, true)
	if okH && w.Start != nil {
		if c := h.Compare(*w.Start); c < 0 || (c == 0 && !w.StartInclusive) {
			return false
		}
	}
	if okL && w.End != nil {
		if c := l.Compare(*w.End); c > 0 || (c == 0 && !w.EndInclusive) {
			return false
		}
	}
	if okL && okH && l.Compare(h) > 0 {
		return false
	}
	return true
}

// Next returns the state to store after a run that read rows whose cursors
// are seen (the rows it loaded: inside the window). The last value only
// moves forward: it is the greatest (min: least) of the stored value, or
// Initial when there is none, and the seen values. NULLs and NaNs are
// skipped, other
// types converted (CoerceCursor) and skipped when they do not convert, as
// is a stored value of another type (Window refuses it). With End set the
// range load is stateless: state is returned unchanged.
func (inc Incremental) Next(state *CursorState, seen []Value) CursorState {
	if inc.End != nil {
		if state == nil {
			return CursorState{}
		}
		return CursorState{LastValue: clone(state.LastValue)}
	}
	var best *Value
	if state != nil && state.LastValue != nil && !state.LastValue.Null && state.LastValue.Type == inc.Type {
		best = clone(state.LastValue)
	} else if inc.Initial != nil {
		best = clone(inc.Initial)
	}
	for _, v := range seen {
		if v.Null {
			continue
		}
		if v.Type != inc.Type {
			c, err := CoerceCursor(v, inc.Type, inc.TZ)
			if err != nil || c.Null {
				continue
			}
			v = c
		}
		if isNaN(v) {
			continue
		}
		if best == nil {
			best = &Value{}
			*best = v
			continue
		}
		if c := v.Compare(*best); (c > 0 && !inc.isMin()) || (c < 0 && inc.isMin()) {
			*best = v
		}
	}
	return CursorState{LastValue: best}
}
