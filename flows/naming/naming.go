// Package naming normalizes names that come from data (inferred and
// evolved columns) into names every destination holds, by the rules of
// docs/schema.md: snake_case by default, direct to keep them as they are.
package naming

import (
	"regexp"
	"strings"
)

var (
	nonAlnum    = regexp.MustCompile(`[^a-zA-Z0-9_]+`)
	breakWord   = regexp.MustCompile(`([^_])([A-Z][a-z]+)`)
	breakCase   = regexp.MustCompile(`([a-z0-9])([A-Z])`)
	underscores = regexp.MustCompile(`__+`)
	reduce      = strings.NewReplacer("+", "x", "-", "_", "*", "x", "@", "a", "|", "l")
)

// SnakeCase returns name in snake_case: `userName` and `User Name` become
// `user_name`; a character that is not a letter, digit or underscore
// becomes `_` (`+` and `*` become `x`, `@` `a`, `|` `l`); a leading digit
// gets a `_` before it; trailing underscores become `x`; runs of
// underscores become one. Surrounding white space is dropped.
func SnakeCase(name string) string {
	s := strings.TrimSpace(name)
	s = reduce.Replace(s)
	s = nonAlnum.ReplaceAllString(s, "_")
	s = breakWord.ReplaceAllString(s, "${1}_${2}")
	s = strings.ToLower(breakCase.ReplaceAllString(s, "${1}_${2}"))
	if s != "" && s[0] >= '0' && s[0] <= '9' {
		s = "_" + s
	}
	trimmed := strings.TrimRight(s, "_")
	s = trimmed + strings.Repeat("x", len(s)-len(trimmed))
	s = underscores.ReplaceAllString(s, "_")
	if s == "" {
		return "x" // as an all-underscore name becomes
	}
	return s
}
