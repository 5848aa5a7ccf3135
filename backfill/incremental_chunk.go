package backfill

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/flows/batch"
)

// Filter applies a run's window to a chunk of an incremental flow, in
// place. A row whose cursor is not a value of the cursor's type becomes a
// dead letter (reason batch.ReasonBadCursor, appended to c.DeadLetters), and
// so is a NULL cursor unless keepOutside; a
// row whose cursor lies outside w is dropped, unless keepOutside (a
// replace_partitions run writes whole partitions, the rows outside the
// window included). c.Rows follows the rows kept. Filter returns the
// cursors of the rows kept that lie inside w: the values Next takes.
func (inc Incremental) Filter(w Window, c *Chunk, keepOutside bool) ([]Value, error) {
	vec := c.Batch.Column(inc.Cursor)
	if vec == nil {
		return nil, fmt.Errorf("backfill: incremental cursor %s is not a column of the rows read", inc.Cursor)
	}
	n := c.Batch.Len()
	keep := make([]bool, n)
	rows := make([]int64, 0, n)
	seen := make([]Value, 0, n)
	dropped := false
	for i := range n {
		v, err := CursorAt(vec, i, inc.Type, inc.loc())
		if err == nil && v.Null && !keepOutside {
			err = &CursorError{Text: "NULL", Type: inc.Type, Want: "a value: a row without a cursor lies in no window"}
		}
		if err != nil {
			var ce *CursorError
			if !errors.As(err, &ce) {
				return nil, err
			}
			c.DeadLetters = append(c.DeadLetters, batch.DeadLetter{
				Source:   c.File,
				Position: fmt.Sprint(c.Row(i) + 1),
				Reason:   batch.ReasonBadCursor,
				Error:    fmt.Sprintf("field %q: %s", inc.Cursor, ce.Error()),
				Payload:  rowJSON(c.Batch, i),
			})
			dropped = true
			continue
		}
		in := w.Contains(v)
		if in {
			seen = append(seen, v)
		}
		if !in && !keepOutside {
			dropped = true
			continue
		}
		keep[i] = true
		rows = append(rows, c.Row(i))
	}
	if dropped {
		for _, v := range c.Batch.Vectors {
			filterVector(v, keep)
		}
		c.Rows = rows
	}
	return seen, nil
}
