package batch

import (
	"fmt"
	"testing"
)

// TestAppendBatch: rows keep their values and nulls whichever side has
// nulls.
func TestAppendBatch(t *testing.T) {
	s := Schema{Columns: []Column{{Name: "i", Type: Int64, Nullable: true}, {Name: "s", Type: String, Nullable: true}}}
	mk := func(rows ...[]any) *Batch {
		b := New(s, len(rows))
		for _, r := range rows {
			for c, v := range r {
				switch x := v.(type) {
				case nil:
					b.Vectors[c].AppendNull()
				case int:
					b.Vectors[c].AppendInt(int64(x))
				case string:
					b.Vectors[c].AppendString(x)
				}
			}
		}
		return b
	}
	dst := mk([]any{1, "a"}, []any{2, nil})
	dst.AppendBatch(mk([]any{nil, "c"}))
	dst.AppendBatch(mk([]any{4, "d"}, []any{5, "e"}))
	want := "[1 a] [2 <nil>] [<nil> c] [4 d] [5 e]"
	var got string
	for i := range dst.Len() {
		if i > 0 {
			got += " "
		}
		got += fmt.Sprint(dst.Row(i))
	}
	if got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	for c, v := range dst.Vectors {
		if v.Nulls != nil && len(v.Nulls) != v.Len() {
			t.Fatalf("column %d: %d null flags for %d rows", c, len(v.Nulls), v.Len())
		}
	}
}
