package spec

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse checks that Parse never panics, that an invalid spec always
// comes back as Problems, and that a valid one validates again unchanged.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yaml")
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, src := range []string{
		header + tableT + cdcFlow,
		header + tableT + appendFlow,
		header + tableT + cdcFlow + "    stored_as_scd_type: 2\n    track_history_column_list: [name]\n",
		header + "tables:\n  - name: t\n    columns: &c [{name: a, type: int64}]\nflows:\n  - &f {name: f, target: t, kind: append, source: {kafka: {topic: x, columns: *c}}}\n  - {<<: *f, name: g}\n",
		"pipeline: ${X}\ndestination: {local: {path: \"$${x}\"}}\n",
		"a: [b, {c: d}]\n",
		"",
	} {
		f.Add([]byte(src))
	}
	env := func(k string) (string, bool) {
		if k == "SET" {
			return "value", true
		}
		return "", false
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data, "fuzz.yaml", env)
		if err != nil {
			var ps Problems
			if !errors.As(err, &ps) || len(ps) == 0 {
				t.Fatalf("error is not Problems: %v", err)
			}
			if p != nil {
				t.Fatal("a pipeline returned with problems")
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("a parsed pipeline does not validate again: %v", err)
		}
	})
}
