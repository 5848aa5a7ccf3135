package flows

import (
	"hash/maphash"
	"math"
	"os"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/flows/batch"
)

func TestSpillRoundTrip(t *testing.T) {
	schema := batch.Schema{Columns: []batch.Column{
		{Name: "i", Type: batch.Int64, Nullable: true},
		{Name: "f", Type: batch.Float64, Nullable: true},
		{Name: "b", Type: batch.Bool, Nullable: true},
		{Name: "s", Type: batch.String, Nullable: true},
		{Name: "ts", Type: batch.Timestamp, Nullable: true},
		{Name: "d", Type: batch.Date, Nullable: true},
		{Name: "dec", Type: batch.Decimal(38, 4), Nullable: true},
		{Name: "by", Type: batch.Bytes, Nullable: true},
	}}
	in := batch.New(schema, 0)
	add := func(i int64, f float64, b bool, s string, dec batch.Dec128, by []byte) {
		in.Vectors[0].AppendInt(i)
		in.Vectors[1].AppendFloat(f)
		in.Vectors[2].AppendBool(b)
		in.Vectors[3].AppendString(s)
		in.Vectors[4].AppendInt(i * 1000)
		in.Vectors[5].AppendInt(-i)
		in.Vectors[6].AppendDecimal(dec)
		in.Vectors[7].AppendBytes(by)
	}
	add(0, 0, false, "", batch.Dec128{}, []byte{})
	add(math.MaxInt64, math.Inf(-1), true, "naïve ✓", batch.Dec128{Hi: -1, Lo: math.MaxUint64}, []byte{0, 1, 2})
	add(math.MinInt64, math.NaN(), false, string(make([]byte, 300)), batch.Dec128{Hi: math.MaxInt64, Lo: 7}, []byte("x"))
	for _, v := range in.Vectors {
		v.AppendNull()
	}
	add(42, 1.5, true, "last", batch.Dec128{Lo: 12345}, nil)

	tests := []struct {
		name  string
		parts int
	}{
		{name: "one part", parts: 1},
		{name: "rows over many parts", parts: 7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sp := newSpill(t.TempDir(), "rows", schema, tc.parts, maphash.MakeSeed())
			for i := range in.Len() {
				// The row number as the key: rows spread over the parts.
				if err := sp.add(string(rune('a'+i)), in, i, int64(100+i)); err != nil {
					t.Fatal(err)
				}
			}
			if err := sp.finish(); err != nil {
				t.Fatal(err)
			}
			if got := sp.rowsIn(0, tc.parts); got != int64(in.Len()) {
				t.Fatalf("%d rows spilled, want %d", got, in.Len())
			}
			out := batch.New(schema, 0)
			var ords []int64
			for p := range tc.parts {
				var err error
				if ords, err = sp.read(p, out, ords); err != nil {
					t.Fatal(err)
				}
			}
			if len(ords) != in.Len() || out.Len() != in.Len() {
				t.Fatalf("read %d rows (%d ordinals), want %d", out.Len(), len(ords), in.Len())
			}
			for j, ord := range ords {
				i := int(ord - 100)
				want, got := in.Row(i), out.Row(j)
				for c := range want {
					if !sameValue(want[c], got[c]) {
						t.Fatalf("row %d column %s: got %#v, want %#v", i, schema.Columns[c].Name, got[c], want[c])
					}
				}
			}
		})
	}
}

func TestSpillCorruptPart(t *testing.T) {
	schema := batch.Schema{Columns: []batch.Column{{Name: "s", Type: batch.String}}}
	in := batch.New(schema, 1)
	in.Vectors[0].AppendString("hello")
	sp := newSpill(t.TempDir(), "rows", schema, 1, maphash.MakeSeed())
	if err := sp.add("k", in, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := sp.finish(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(sp.path(0))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sp.path(0), data[:len(data)-2], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := sp.read(0, batch.New(schema, 0), nil); err == nil {
		t.Fatal("a cut part read without error")
	}
}

func sameValue(a, b any) bool {
	switch x := a.(type) {
	case float64:
		y, ok := b.(float64)
		return ok && (x == y || math.IsNaN(x) && math.IsNaN(y))
	case []byte:
		y, ok := b.([]byte)
		return ok && slices.Equal(x, y)
	}
	return a == b
}
