package backfill

import (
	"math"
	"math/big"

	"github.com/sluicehq/sluice/flows/batch"
)

// lagValue moves v by lag (> 0) in the type's units: back with max, forward
// with min. The result keeps v's type and saturates at the type's range.
//
//	int64      by floor(lag): the integers within lag of v
//	float64    by lag
//	decimal    by floor(lag * 10^scale) units of the last digit, within the precision
//	date       by ceil(lag) days: the day holding the lagged instant, in full
//	timestamp  by lag seconds, rounded to the microsecond
func lagValue(v Value, lag float64, isMin bool) Value {
	switch v.Type.Kind {
	case batch.KindInt64:
		v.Int = shift(v.Int, toInt64(math.Floor(lag)), isMin)
	case batch.KindFloat64:
		if isMin {
			v.Float += lag
		} else {
			v.Float -= lag
		}
	case batch.KindDate:
		v.Int = shift(v.Int, toInt64(math.Ceil(lag)), isMin)
	case batch.KindTimestamp:
		v.Int = shift(v.Int, toInt64(math.Round(lag*1e6)), isMin)
	case batch.KindDecimal:
		v.Dec = shiftDecimal(v.Dec, v.Type, lag, isMin)
	}
	return v
}

// toInt64 converts a non-negative whole float, saturating.
func toInt64(f float64) int64 {
	if f >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(f)
}

// shift returns x - n (x + n with min) for n >= 0, saturating.
func shift(x, n int64, isMin bool) int64 {
	if isMin {
		if x > math.MaxInt64-n {
			return math.MaxInt64
		}
		return x + n
	}
	if x < math.MinInt64+n {
		return math.MinInt64
	}
	return x - n
}

// shiftDecimal moves the unscaled d by floor(lag * 10^scale), keeping it
// within the type's precision.
func shiftDecimal(d batch.Dec128, t batch.Type, lag float64, isMin bool) batch.Dec128 {
	r := new(big.Rat).SetFloat64(lag)
	r.Mul(r, new(big.Rat).SetInt(bigPow10(t.Scale)))
	n := new(big.Int).Quo(r.Num(), r.Denom())
	x := d.Big()
	if isMin {
		x.Add(x, n)
	} else {
		x.Sub(x, n)
	}
	limit := bigPow10(t.Precision)
	limit.Sub(limit, big.NewInt(1))
	switch {
	case x.Cmp(limit) > 0:
		x = limit
	case x.Cmp(new(big.Int).Neg(limit)) < 0:
		x = limit.Neg(limit)
	}
	return batch.Dec128FromBig(x)
}

func bigPow10(n int) *big.Int {
	return new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(n)), nil)
}
