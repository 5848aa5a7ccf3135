package batch

import (
	"fmt"
	"math/big"
	"strings"
)

// Dec128 is the unscaled value of a decimal as a 128-bit two's complement
// integer. A decimal(P,S) value v is Dec128 / 10^S.
type Dec128 struct {
	Hi int64
	Lo uint64
}

var (
	two64   = new(big.Int).Lsh(big.NewInt(1), 64)
	maxDecs = func() []*big.Int {
		out := make([]*big.Int, MaxDecimalPrecision+1)
		for p := range out {
			out[p] = new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(p)), nil)
		}
		return out
	}()
)

// Dec128FromBig converts an integer that fits in 128 bits.
func Dec128FromBig(v *big.Int) Dec128 {
	m := new(big.Int).Set(v)
	if m.Sign() < 0 {
		m.Add(m, new(big.Int).Lsh(big.NewInt(1), 128))
	}
	lo := new(big.Int).And(m, new(big.Int).Sub(two64, big.NewInt(1)))
	hi := new(big.Int).Rsh(m, 64)
	return Dec128{Hi: int64(hi.Uint64()), Lo: lo.Uint64()}
}

// Dec128FromInt64 converts an int64.
func Dec128FromInt64(v int64) Dec128 {
	if v < 0 {
		return Dec128{Hi: -1, Lo: uint64(v)}
	}
	return Dec128{Lo: uint64(v)}
}

// Big returns the value as a big.Int.
func (d Dec128) Big() *big.Int {
	v := new(big.Int).SetInt64(d.Hi)
	v.Mul(v, two64)
	return v.Add(v, new(big.Int).SetUint64(d.Lo))
}

// Cmp compares two unscaled values of the same scale.
func (d Dec128) Cmp(o Dec128) int {
	switch {
	case d.Hi < o.Hi:
		return -1
	case d.Hi > o.Hi:
		return 1
	case d.Lo < o.Lo:
		return -1
	case d.Lo > o.Lo:
		return 1
	}
	return 0
}

// ParseDecimal parses decimal text ("-12.50", "1e3", "7") exactly, without
// going through float64, into the unscaled value of decimal(p,s). A value
// with more fractional digits than s, or more than p digits in all, is an
// error: sluice never rounds silently.
func ParseDecimal(text string, p, s int) (Dec128, error) {
	text = strings.TrimSpace(text)
	if !plainDecimal(text) {
		return Dec128{}, fmt.Errorf("%q is not a decimal number", text)
	}
	r, ok := new(big.Rat).SetString(text)
	if !ok {
		return Dec128{}, fmt.Errorf("%q is not a decimal number", text)
	}
	r.Mul(r, new(big.Rat).SetInt(maxDecs[s]))
	if !r.IsInt() {
		return Dec128{}, fmt.Errorf("%q has more than %d fractional digits", text, s)
	}
	v := r.Num()
	if new(big.Int).Abs(v).Cmp(maxDecs[p]) >= 0 {
		return Dec128{}, fmt.Errorf("%q does not fit decimal(%d,%d)", text, p, s)
	}
	return Dec128FromBig(v), nil
}

// FormatDecimal renders the unscaled value with scale s: "-12.50".
func FormatDecimal(d Dec128, s int) string {
	v := d.Big()
	neg := v.Sign() < 0
	digits := new(big.Int).Abs(v).String()
	if s > 0 {
		if len(digits) <= s {
			digits = strings.Repeat("0", s-len(digits)+1) + digits
		}
		digits = digits[:len(digits)-s] + "." + digits[len(digits)-s:]
	}
	if neg {
		return "-" + digits
	}
	return digits
}

// plainDecimal reports whether s is decimal text: an optional sign, digits
// with at most one point, and an optional exponent of at most three digits.
// It keeps out what big.Rat would also take (fractions like 1/2, 0x10, 1_0)
// and exponents that would make it compute enormous numbers.
func plainDecimal(s string) bool {
	i, n := 0, len(s)
	if n > 1000 {
		return false
	}
	if i < n && (s[i] == '+' || s[i] == '-') {
		i++
	}
	digits, point := 0, false
	for ; i < n; i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			digits++
		case c == '.' && !point:
			point = true
		default:
			goto exp
		}
	}
exp:
	if digits == 0 {
		return false
	}
	if i == n {
		return true
	}
	if s[i] != 'e' && s[i] != 'E' {
		return false
	}
	i++
	if i < n && (s[i] == '+' || s[i] == '-') {
		i++
	}
	expDigits := n - i
	if expDigits < 1 || expDigits > 3 {
		return false
	}
	for ; i < n; i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
