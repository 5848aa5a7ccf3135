package backfill

import (
	"fmt"

	"github.com/sluicehq/sluice/flows/batch"
)

// HiveTypes returns the Hive columns of files, in the order their segments
// first appear (outermost folder first, files in order). A column declared
// in declared (the source's columns) takes the declared type and
// nullability, and every value must parse as it. Otherwise it is int64 when
// every value is an integer, date when every value is YYYY-MM-DD, else
// string; it is nullable when a value is NULL (empty or HiveNull) or some
// file has no such segment. A declared non-nullable column that some file
// leaves NULL is an error naming the file.
func HiveTypes(files []File, declared batch.Schema) (batch.Schema, error) {
	var names []string
	texts := map[string][]string{}
	nulls := map[string]bool{}
	for _, f := range files {
		for _, h := range f.Hive {
			if _, ok := texts[h.Name]; !ok {
				names = append(names, h.Name)
				texts[h.Name] = nil
			}
			if h.Null() {
				nulls[h.Name] = true
				continue
			}
			texts[h.Name] = append(texts[h.Name], h.Text)
		}
	}
	var out batch.Schema
	for _, name := range names {
		col := batch.Column{Name: name}
		if i := declared.Index(name); i >= 0 {
			col = declared.Columns[i]
			for _, f := range files {
				h, ok := hiveValue(f, name)
				if !ok || h.Null() {
					if !col.Nullable {
						return batch.Schema{}, fmt.Errorf("backfill: %s: hive column %s is NULL here but not nullable", f.Name, name)
					}
					continue
				}
				if _, err := ParseValue(h.Text, col.Type); err != nil {
					return batch.Schema{}, fmt.Errorf("backfill: %s: hive column %s: %w", f.Name, name, err)
				}
			}
		} else {
			col.Type = inferType(texts[name], batch.Int64, batch.Date)
			col.Nullable = nulls[name]
			for _, f := range files {
				if _, ok := hiveValue(f, name); !ok {
					col.Nullable = true
					break
				}
			}
		}
		out.Columns = append(out.Columns, col)
	}
	return out, nil
}

func hiveValue(f File, name string) (HiveValue, bool) {
	for _, h := range f.Hive {
		if h.Name == name {
			return h, true
		}
	}
	return HiveValue{}, false
}

// HiveValueOf returns the typed value of Hive column c for file f: NULL when
// the file has no such segment or its value is NULL, which c must allow.
func HiveValueOf(f File, c batch.Column) (Value, error) {
	h, ok := hiveValue(f, c.Name)
	if !ok || h.Null() {
		if !c.Nullable {
			return Value{}, fmt.Errorf("hive column %s is NULL here but not nullable", c.Name)
		}
		return NullValue(c.Type), nil
	}
	v, err := ParseValue(h.Text, c.Type)
	if err != nil {
		return Value{}, fmt.Errorf("hive column %s: %w", c.Name, err)
	}
	return v, nil
}
