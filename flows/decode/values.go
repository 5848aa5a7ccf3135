package decode

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/sluicehq/sluice/flows/batch"
)

// maxMillis is the largest epoch-milliseconds magnitude whose microseconds
// fit an int64.
const maxMillis = math.MaxInt64 / 1000

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// digits returns the index of the first non-digit at or after i.
func digits(s string, i int) int {
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	return i
}

// isJSONNumber reports whether s is a number as RFC 8259 writes it:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func isJSONNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		i = digits(s, i+1)
	default:
		return false
	}
	if i < len(s) && s[i] == '.' {
		j := digits(s, i+1)
		if j == i+1 {
			return false
		}
		i = j
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		j := digits(s, i)
		if j == i {
			return false
		}
		i = j
	}
	return i == len(s)
}

// isDecimalText reports whether s is decimal text a decimal column accepts
// in a JSON string: [+-]?(digits[.digits?]|.digits)([eE][+-]?digits)?
func isDecimalText(s string) bool {
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	start := i
	i = digits(s, i)
	n := i - start
	if i < len(s) && s[i] == '.' {
		j := digits(s, i+1)
		n += j - i - 1
		i = j
	}
	if n == 0 {
		return false
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		j := digits(s, i)
		if j == i {
			return false
		}
		i = j
	}
	return i == len(s)
}

// trimSpace drops ASCII white space around s.
func trimSpace(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t' || s[0] == '\n' || s[0] == '\r') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t' || s[len(s)-1] == '\n' || s[len(s)-1] == '\r') {
		s = s[:len(s)-1]
	}
	return s
}

// parseInt parses valid JSON number text as an exact int64. ok is false for
// a number with a fraction or an exponent; inRange is false for an integer
// that does not fit.
func parseInt(s string) (x int64, ok, inRange bool) {
	// Up to 18 digits, the common case, always fit: read them here.
	i, neg := 0, len(s) > 0 && s[0] == '-'
	if neg {
		i = 1
	}
	if n := len(s) - i; n > 0 && n <= 18 {
		for ; i < len(s) && s[i]-'0' <= 9; i++ {
			x = x*10 + int64(s[i]-'0')
		}
		if i == len(s) {
			if neg {
				x = -x
			}
			return x, true, true
		}
		x = 0
	}
	for i := 0; i < len(s); i++ {
		if s[i] == '.' || s[i] == 'e' || s[i] == 'E' {
			return 0, false, false
		}
	}
	x, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, true, false
	}
	return x, true, true
}

// parseFloat parses valid JSON number text; ok is false when it overflows
// float64.
func parseFloat(s string) (float64, bool) {
	x, err := strconv.ParseFloat(s, 64)
	if err != nil && (math.IsInf(x, 0) || !errors.Is(err, strconv.ErrRange)) {
		return 0, false
	}
	return x, true
}

// Limits that keep decimal parsing cheap on hostile input: big.Rat would
// otherwise compute 10^exponent for any exponent it is given.
const (
	maxDecimalText     = 1000
	maxDecimalExponent = 400
)

// parseDecimal parses decimal text already checked by isJSONNumber or
// isDecimalText into decimal(p,s), exactly. Plain text of at most 18
// significant digits takes a fast path; anything else goes through
// batch.ParseDecimal, whose rules the fast path follows (tested).
func parseDecimal(text string, p, s int) (batch.Dec128, error) {
	if x, ok := parseDecimalFast(text, p, s); ok {
		return x, nil
	}
	if len(text) > maxDecimalText {
		return batch.Dec128{}, fmt.Errorf("%q has more than %d characters", clip(text), maxDecimalText)
	}
	if exp, ok := decimalExponent(text); !ok || exp > maxDecimalExponent || exp < -maxDecimalExponent {
		return batch.Dec128{}, fmt.Errorf("%q does not fit decimal(%d,%d)", clip(text), p, s)
	}
	return batch.ParseDecimal(text, p, s)
}

// decimalExponent returns the exponent written in decimal text, 0 when none;
// ok is false when it does not fit an int.
func decimalExponent(text string) (int, bool) {
	for i := 0; i < len(text); i++ {
		if text[i] == 'e' || text[i] == 'E' {
			e, err := strconv.Atoi(text[i+1:])
			return e, err == nil
		}
	}
	return 0, true
}

var pow10 = func() [19]int64 {
	var p [19]int64
	p[0] = 1
	for i := 1; i < len(p); i++ {
		p[i] = p[i-1] * 10
	}
	return p
}()

// parseDecimalFast parses [+-]?digits[.digits] with at most 18 significant
// digits after scaling; ok is false for anything else (including every
// error, which the slow path then reports).
func parseDecimalFast(text string, p, s int) (batch.Dec128, bool) {
	i, neg := 0, false
	if i < len(text) && (text[i] == '+' || text[i] == '-') {
		neg = text[i] == '-'
		i++
	}
	for i < len(text) && text[i] == '0' {
		i++
	}
	intStart := i
	i = digits(text, i)
	intPart := text[intStart:i]
	frac := ""
	if i < len(text) && text[i] == '.' {
		j := digits(text, i+1)
		frac = text[i+1 : j]
		i = j
	}
	if i != len(text) || len(intPart)+s > 18 {
		return batch.Dec128{}, false
	}
	if len(frac) > s {
		for k := s; k < len(frac); k++ {
			if frac[k] != '0' {
				return batch.Dec128{}, false
			}
		}
		frac = frac[:s]
	}
	var v int64
	for k := 0; k < len(intPart); k++ {
		v = v*10 + int64(intPart[k]-'0')
	}
	for k := 0; k < len(frac); k++ {
		v = v*10 + int64(frac[k]-'0')
	}
	v *= pow10[s-len(frac)]
	if p < len(pow10) && v >= pow10[p] {
		return batch.Dec128{}, false
	}
	if neg {
		v = -v
	}
	return batch.Dec128FromInt64(v), true
}

// atoiN parses exactly n ASCII digits at s[i:].
func atoiN(s string, i, n int) (int, bool) {
	if i+n > len(s) {
		return 0, false
	}
	x := 0
	for k := i; k < i+n; k++ {
		if !isDigit(s[k]) {
			return 0, false
		}
		x = x*10 + int(s[k]-'0')
	}
	return x, true
}

// parseYMD parses YYYY-MM-DD at the start of s into days since the epoch.
func parseYMD(s string) (int64, bool) {
	y, ok1 := atoiN(s, 0, 4)
	m, ok2 := atoiN(s, 5, 2)
	d, ok3 := atoiN(s, 8, 2)
	if !ok1 || !ok2 || !ok3 || s[4] != '-' || s[7] != '-' {
		return 0, false
	}
	if m < 1 || m > 12 || d < 1 || d > daysIn(y, m) {
		return 0, false
	}
	return daysFromCivil(int64(y), int64(m), int64(d)), true
}

// parseDate parses YYYY-MM-DD into days since the Unix epoch.
func parseDate(s string) (int64, bool) {
	if len(s) != 10 {
		return 0, false
	}
	return parseYMD(s)
}

// parseTimestamp parses an RFC 3339 timestamp (T, t or a space between
// date and time, any number of fractional digits, Z or a ±hh:mm offset)
// into microseconds since the Unix epoch in UTC, truncating the fraction.
func parseTimestamp(s string) (int64, bool) {
	if len(s) < len("2006-01-02T15:04:05Z") {
		return 0, false
	}
	days, ok := parseYMD(s)
	if !ok || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') {
		return 0, false
	}
	h, ok1 := atoiN(s, 11, 2)
	mi, ok2 := atoiN(s, 14, 2)
	sec, ok3 := atoiN(s, 17, 2)
	if !ok1 || !ok2 || !ok3 || s[13] != ':' || s[16] != ':' || h > 23 || mi > 59 || sec > 59 {
		return 0, false
	}
	i := 19
	var us int64
	if s[i] == '.' {
		j := digits(s, i+1)
		if j == i+1 {
			return 0, false
		}
		for k := i + 1; k < i+7; k++ {
			us *= 10
			if k < j {
				us += int64(s[k] - '0')
			}
		}
		i = j
	}
	var off int64
	switch {
	case i == len(s)-1 && (s[i] == 'Z' || s[i] == 'z'):
	case i == len(s)-6 && (s[i] == '+' || s[i] == '-') && s[i+3] == ':':
		oh, ok1 := atoiN(s, i+1, 2)
		om, ok2 := atoiN(s, i+4, 2)
		if !ok1 || !ok2 || oh > 23 || om > 59 {
			return 0, false
		}
		off = int64(oh*3600 + om*60)
		if s[i] == '-' {
			off = -off
		}
	default:
		return 0, false
	}
	secs := days*86400 + int64(h*3600+mi*60+sec) - off
	return secs*1_000_000 + us, true
}

func isLeap(y int) bool { return y%4 == 0 && (y%100 != 0 || y%400 == 0) }

func daysIn(y, m int) int {
	switch m {
	case 2:
		if isLeap(y) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// daysFromCivil returns the days since 1970-01-01 of a proleptic Gregorian
// date (Howard Hinnant's algorithm).
func daysFromCivil(y, m, d int64) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	if y < 0 && y%400 != 0 {
		era--
	}
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}

// validUTF8 is utf8.Valid, answered in a loop of its own for a short
// ASCII string (most strings of a record), which the general check takes
// several times as long over.
func validUTF8(b []byte) bool {
	if len(b) > 16 {
		return utf8.Valid(b)
	}
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return utf8.Valid(b)
		}
	}
	return true
}
