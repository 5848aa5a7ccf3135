package backfill

import (
	"slices"
	"testing"

	"github.com/sluicehq/sluice/flows/batch"
)

func TestIncrementalFilter(t *testing.T) {
	date := batch.Type{Kind: batch.KindDate}
	inc := Incremental{Cursor: "d", Type: date, Initial: cursorPtr(t, "2024-03-03", date)}
	w, _, err := inc.Window(nil)
	if err != nil {
		t.Fatal(err)
	}
	chunk := func() *Chunk {
		s := batch.Schema{Columns: []batch.Column{
			{Name: "id", Type: batch.Type{Kind: batch.KindInt64}},
			{Name: "d", Type: batch.Type{Kind: batch.KindString}, Nullable: true},
		}}
		b := batch.New(s, 4)
		for i, d := range []string{"2024-03-01", "bad", "", "2024-03-05"} {
			b.Vectors[0].AppendInt(int64(i))
			if d == "" {
				b.Vectors[1].AppendNull()
			} else {
				b.Vectors[1].AppendString(d)
			}
		}
		return &Chunk{Batch: b, File: "f.parquet", FirstRow: 10}
	}
	for _, tc := range []struct {
		name        string
		keepOutside bool
		ids         []int64
		rows        []int64
		deadLetters []string // positions
	}{
		{name: "window only", ids: []int64{3}, rows: []int64{13}, deadLetters: []string{"12", "13"}},
		{name: "whole partitions", keepOutside: true, ids: []int64{0, 2, 3}, rows: []int64{10, 12, 13}, deadLetters: []string{"12"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := chunk()
			seen, err := inc.Filter(w, c, tc.keepOutside)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Batch.Vectors[0].Ints; !slices.Equal(got, tc.ids) {
				t.Errorf("ids kept = %v, want %v", got, tc.ids)
			}
			var rows []int64
			for i := range c.Batch.Len() {
				rows = append(rows, c.Row(i))
			}
			if !slices.Equal(rows, tc.rows) {
				t.Errorf("file rows = %v, want %v", rows, tc.rows)
			}
			var pos []string
			for _, d := range c.DeadLetters {
				if d.Reason != batch.ReasonBadCursor || d.Source != "f.parquet" {
					t.Errorf("dead letter %+v: want reason %s from f.parquet", d, batch.ReasonBadCursor)
				}
				pos = append(pos, d.Position)
			}
			if !slices.Equal(pos, tc.deadLetters) {
				t.Errorf("dead letters at %v, want %v", pos, tc.deadLetters)
			}
			if len(seen) != 1 || seen[0].Compare(cursor(t, "2024-03-05", date)) != 0 {
				t.Errorf("seen = %v, want [2024-03-05]", seen)
			}
		})
	}
	if _, err := (Incremental{Cursor: "missing", Type: date}).Filter(w, chunk(), false); err == nil {
		t.Error("a cursor that is not a column: no error")
	}
}
