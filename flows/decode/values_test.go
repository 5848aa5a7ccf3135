package decode

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestParseInt checks parseInt, whose quick path reads up to 18 digits,
// against strconv on integers of every length around the int64 limits,
// and on what is no integer.
func TestParseInt(t *testing.T) {
	want := func(s string) (int64, bool, bool) {
		if strings.ContainsAny(s, ".eE") {
			return 0, false, false
		}
		x, err := strconv.ParseInt(s, 10, 64)
		return x, true, err == nil
	}
	cases := []string{"", "-", "0", "-0", "7", "-7", "007", "+5", "1.5", "1e3", "-2E2", "12a", "9223372036854775807",
		"9223372036854775808", "-9223372036854775808", "-9223372036854775809", "999999999999999999", "-999999999999999999",
		"1000000000000000000", "99999999999999999999"}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 5000 {
		var b strings.Builder
		if rng.IntN(2) == 0 {
			b.WriteByte('-')
		}
		for range 1 + rng.IntN(21) {
			b.WriteByte(byte('0' + rng.IntN(10)))
		}
		cases = append(cases, b.String())
	}
	for _, s := range cases {
		x, ok, inRange := parseInt(s)
		wx, wok, win := want(s)
		if ok != wok || inRange != win || (inRange && x != wx) {
			t.Fatalf("parseInt(%q) = %d, %v, %v; want %d, %v, %v", s, x, ok, inRange, wx, wok, win)
		}
	}
}

// TestValidUTF8 checks validUTF8 against utf8.Valid around its quick
// path's 16 bytes.
func TestValidUTF8(t *testing.T) {
	for _, s := range []string{"", "a", "sku-000123", "caf\xe9", "café", strings.Repeat("a", 16), strings.Repeat("a", 15) + "\xff",
		strings.Repeat("a", 16) + "\xff", strings.Repeat("é", 8), strings.Repeat("a", 17)} {
		if got, want := validUTF8([]byte(s)), utf8.ValidString(s); got != want {
			t.Errorf("validUTF8(%q) = %v, want %v", s, got, want)
		}
	}
}
