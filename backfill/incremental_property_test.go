package backfill

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/flows/batch"
)

var propertyTypes = []batch.Type{batch.Int64, batch.Float64, batch.Date, batch.Timestamp, batch.Decimal(12, 2)}

// genCursor draws a cursor value of type t from a small range, so that
// draws often meet the window's bounds.
func genCursor(t *rapid.T, typ batch.Type, label string) Value {
	v := Value{Type: typ}
	switch typ.Kind {
	case batch.KindFloat64:
		v.Float = float64(rapid.IntRange(-2000, 2000).Draw(t, label)) / 4
	case batch.KindTimestamp:
		v.Int = rapid.Int64Range(-5e9, 5e9).Draw(t, label) // µs: about ±1.4 h
	case batch.KindDecimal:
		v.Dec = batch.Dec128FromInt64(rapid.Int64Range(-100000, 100000).Draw(t, label))
	default:
		v.Int = rapid.Int64Range(-1000, 1000).Draw(t, label)
	}
	return v
}

func genLag(t *rapid.T, typ batch.Type) float64 {
	switch typ.Kind {
	case batch.KindTimestamp:
		return float64(rapid.IntRange(0, 4000).Draw(t, "lag")) / 2 // seconds
	case batch.KindDecimal:
		return float64(rapid.IntRange(0, 4000).Draw(t, "lag")) / 8
	}
	return float64(rapid.IntRange(0, 2000).Draw(t, "lag")) / 4
}

// TestIncrementalProperties: Next never moves last_value backwards; the
// window with lag contains the window without it (rows and partitions);
// the lagged bound never passes initial_value; the stored last_value is in
// the next window when it is not before initial_value.
func TestIncrementalProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		typ := rapid.SampledFrom(propertyTypes).Draw(t, "type")
		isMin := rapid.Bool().Draw(t, "min")
		inc := Incremental{Cursor: "c", Type: typ, Func: fn(isMin), Lag: genLag(t, typ)}
		if rapid.Bool().Draw(t, "has initial") {
			v := genCursor(t, typ, "initial")
			inc.Initial = &v
		}
		var state *CursorState
		if rapid.Bool().Draw(t, "has state") {
			v := genCursor(t, typ, "last")
			state = &CursorState{LastValue: &v}
		}
		seen := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) Value { return genCursor(t, typ, "seen") }), 0, 5).Draw(t, "seen")

		next := inc.Next(state, seen)
		if state != nil {
			c := next.LastValue.Compare(*state.LastValue)
			if (c < 0 && !isMin) || (c > 0 && isMin) {
				t.Fatalf("Next moved last_value back: %v -> %v (%s)", state.LastValue, next.LastValue, inc.Func)
			}
		}

		lagged, _, err := inc.Window(state)
		if err != nil {
			t.Fatal(err)
		}
		plain := inc
		plain.Lag = 0
		unlagged, _, err := plain.Window(state)
		if err != nil {
			t.Fatal(err)
		}
		for range 8 {
			v := genCursor(t, typ, "probe")
			if unlagged.Contains(v) && !lagged.Contains(v) {
				t.Fatalf("%v is in the window without lag [%v, %v] but not in the lagged one [%v, %v]", v, unlagged.Start, unlagged.End, lagged.Start, lagged.End)
			}
			if inc.Initial != nil && lagged.Contains(v) && beyond(*inc.Initial, v, isMin) {
				t.Fatalf("%v passes initial_value %v", v, inc.Initial)
			}
			lo, hi := v, genCursor(t, typ, "hi")
			if hi.Compare(lo) < 0 {
				lo, hi = hi, lo
			}
			if unlagged.TouchesPartition(lo, hi) && !lagged.TouchesPartition(lo, hi) {
				t.Fatalf("partition [%v, %v] touches the window without lag, not the lagged one", lo, hi)
			}
		}
		if inc.Initial != nil {
			if b := lagBound(lagged, isMin); b == nil || beyond(*inc.Initial, *b, isMin) {
				t.Fatalf("lagged bound %v passes initial_value %v", b, inc.Initial)
			}
		}
		if state != nil && (inc.Initial == nil || !beyond(*inc.Initial, *state.LastValue, isMin)) && !lagged.Contains(*state.LastValue) {
			t.Fatalf("stored last_value %v is outside the next window [%v, %v]", state.LastValue, lagged.Start, lagged.End)
		}
	})
}

// TestCursorStateTextProperty: the stored text reads back as the same value.
func TestCursorStateTextProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		typ := rapid.SampledFrom(propertyTypes).Draw(t, "type")
		v := genCursor(t, typ, "v")
		text, tt := CursorState{LastValue: &v}.Text()
		back, err := ParseCursorState(text, tt)
		if err != nil || back.LastValue == nil || back.LastValue.Type != typ || back.LastValue.Compare(v) != 0 {
			t.Fatalf("%v stored as %q %q reads back as %v, %v", v, text, tt, back.LastValue, err)
		}
	})
}
