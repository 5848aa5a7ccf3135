package naming

import (
	"regexp"
	"testing"

	"pgregory.net/rapid"
)

func TestSnakeCase(t *testing.T) {
	for in, want := range map[string]string{
		"userName":        "user_name",
		"User Name":       "user_name",
		"  User Name ":    "user_name",
		"user_name":       "user_name",
		"UserID":          "user_id",
		"HTTPServer":      "http_server",
		"order-id":        "order_id",
		"price+tax":       "pricextax",
		"e@mail":          "eamail",
		"a|b":             "alb",
		"1st":             "_1st",
		"total_":          "totalx",
		"a__b":            "a_b",
		"caf\u00e9":       "cafx",
		"weird.name/with": "weird_name_with",
		"":                "x",
		"_":               "x",
		"_id":             "_id",
	} {
		if got := SnakeCase(in); got != want {
			t.Errorf("SnakeCase(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestSnakeCaseHolds checks that any name becomes an identifier, and that
// snake_case is a fixed point: normalizing twice changes nothing.
func TestSnakeCaseHolds(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		name := rapid.String().Draw(t, "name")
		s := SnakeCase(name)
		if !identifier.MatchString(s) {
			t.Fatalf("SnakeCase(%q) = %q, not an identifier", name, s)
		}
		if again := SnakeCase(s); again != s {
			t.Fatalf("SnakeCase(%q) = %q, but SnakeCase of that is %q", name, s, again)
		}
	})
}

// identifier is the rule of a name every destination holds (flows/spec's).
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
