package batch

import "fmt"

// Batch is a columnar batch: one vector per schema column, all of one length.
type Batch struct {
	Schema  Schema
	Vectors []*Vector
}

// New returns an empty batch of the schema with room for capacity rows.
func New(s Schema, capacity int) *Batch {
	b := &Batch{Schema: s, Vectors: make([]*Vector, len(s.Columns))}
	for i, c := range s.Columns {
		b.Vectors[i] = NewVector(c.Type, capacity)
	}
	return b
}

// Len returns the number of rows.
func (b *Batch) Len() int {
	if b == nil || len(b.Vectors) == 0 {
		return 0
	}
	return b.Vectors[0].Len()
}

// Column returns the vector of the named column, or nil.
func (b *Batch) Column(name string) *Vector {
	if i := b.Schema.Index(name); i >= 0 {
		return b.Vectors[i]
	}
	return nil
}

// Truncate drops rows from n on in every column.
func (b *Batch) Truncate(n int) {
	for _, v := range b.Vectors {
		v.Truncate(n)
	}
}

// AppendBatch appends every row of src, a batch of the same schema.
func (b *Batch) AppendBatch(src *Batch) {
	for c, v := range b.Vectors {
		v.AppendVector(src.Vectors[c])
	}
}

// AppendRow appends row i of src, which must have the same schema.
func (b *Batch) AppendRow(src *Batch, i int) {
	for c, v := range b.Vectors {
		v.AppendFrom(src.Vectors[c], i)
	}
}

// Row returns row i as Go values (see Vector.Value), for display and tests.
func (b *Batch) Row(i int) []any {
	out := make([]any, len(b.Vectors))
	for c, v := range b.Vectors {
		out[c] = v.Value(i)
	}
	return out
}

// Check verifies that every vector matches its column and all have one
// length; sinks call it before writing.
func (b *Batch) Check() error {
	if len(b.Vectors) != len(b.Schema.Columns) {
		return fmt.Errorf("batch: %d vectors for %d columns", len(b.Vectors), len(b.Schema.Columns))
	}
	n := b.Len()
	for i, v := range b.Vectors {
		c := b.Schema.Columns[i]
		if v.Type != c.Type {
			return fmt.Errorf("batch: column %s holds %v, want %v", c.Name, v.Type, c.Type)
		}
		if v.Len() != n {
			return fmt.Errorf("batch: column %s has %d rows, want %d", c.Name, v.Len(), n)
		}
		if v.Nulls != nil && len(v.Nulls) != n {
			return fmt.Errorf("batch: column %s has %d null flags, want %d", c.Name, len(v.Nulls), n)
		}
		if !c.Nullable && v.HasNulls() {
			return fmt.Errorf("batch: column %s is not nullable but holds a null", c.Name)
		}
		if c.Type.Kind == KindArray {
			end := 0
			if n > 0 {
				end = int(v.Ends[n-1])
			}
			if end != v.Elems.Len() || v.Elems.HasNulls() {
				return fmt.Errorf("batch: column %s has %d elements where its rows end at %d, or a null element", c.Name, v.Elems.Len(), end)
			}
		}
	}
	return nil
}

// Select returns the named columns of b, in that order, sharing their
// vectors; names b lacks are left out.
func (b *Batch) Select(names ...string) *Batch {
	out := &Batch{}
	for _, n := range names {
		if i := b.Schema.Index(n); i >= 0 {
			out.Schema.Columns = append(out.Schema.Columns, b.Schema.Columns[i])
			out.Vectors = append(out.Vectors, b.Vectors[i])
		}
	}
	return out
}
