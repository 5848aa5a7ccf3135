package batch

import (
	"testing"
	"time"
)

func TestParseType(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Type
		err  bool
	}{
		{in: "string", want: String},
		{in: "int64", want: Int64},
		{in: " Timestamp ", want: Timestamp},
		{in: "decimal(12,2)", want: Decimal(12, 2)},
		{in: "decimal( 38 , 0 )", want: Decimal(38, 0)},
		{in: "decimal(39,2)", err: true},
		{in: "decimal(5,6)", err: true},
		{in: "decimal(5)", err: true},
		{in: "int32", err: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseType(tc.in)
			if tc.err {
				if err == nil {
					t.Fatalf("ParseType(%q) = %v, want an error", tc.in, got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseType(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
			}
			if back, err := ParseType(got.String()); err != nil || back != got {
				t.Fatalf("round trip of %v: %v, %v", got, back, err)
			}
		})
	}
}

func TestDecimalExact(t *testing.T) {
	for _, tc := range []struct {
		in   string
		p, s int
		want string
		err  bool
	}{
		{in: "0.1", p: 10, s: 1, want: "0.1"},
		{in: "-12.5", p: 10, s: 2, want: "-12.50"},
		{in: "12345678901234567890.12", p: 38, s: 2, want: "12345678901234567890.12"},
		{in: "-99999999999999999999999999999999999999", p: 38, s: 0, want: "-99999999999999999999999999999999999999"},
		{in: "1e3", p: 6, s: 2, want: "1000.00"},
		{in: "0.001", p: 10, s: 2, err: true},
		{in: "1000", p: 3, s: 0, err: true},
		{in: "abc", p: 10, s: 2, err: true},
		{in: "1/2", p: 10, s: 2, err: true},
		{in: "0x10", p: 10, s: 2, err: true},
		{in: "1_0", p: 10, s: 2, err: true},
		{in: "1e99999", p: 10, s: 2, err: true},
		{in: ".", p: 10, s: 2, err: true},
		{in: "+.5", p: 10, s: 2, want: "0.50"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			d, err := ParseDecimal(tc.in, tc.p, tc.s)
			if tc.err {
				if err == nil {
					t.Fatalf("ParseDecimal(%q) = %v, want an error", tc.in, FormatDecimal(d, tc.s))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := FormatDecimal(d, tc.s); got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
			if Dec128FromBig(d.Big()) != d {
				t.Fatalf("big round trip of %s changed it", tc.want)
			}
		})
	}
	if Dec128FromInt64(-1).Cmp(Dec128FromInt64(1)) >= 0 || Dec128FromInt64(5).Cmp(Dec128FromInt64(5)) != 0 {
		t.Fatal("Cmp orders -1 and 1 wrongly")
	}
}

func TestVectorNullsAndTruncate(t *testing.T) {
	v := NewVector(String, 4)
	v.AppendString("a")
	v.AppendNull()
	v.AppendString("c")
	if v.Len() != 3 || !v.IsNull(1) || v.IsNull(0) || v.Value(2) != "c" || v.Value(1) != nil {
		t.Fatalf("vector %+v", v)
	}
	v.Truncate(1)
	if v.Len() != 1 || len(v.Nulls) != 1 || v.HasNulls() {
		t.Fatalf("after truncate %+v", v)
	}
	b := New(Schema{Columns: []Column{{Name: "s", Type: String}}}, 1)
	b.Vectors[0].AppendNull()
	if err := b.Check(); err == nil {
		t.Fatal("Check accepted a null in a non-nullable column")
	}
}

func TestDates(t *testing.T) {
	d := DateFromTime(time.Date(1969, 12, 31, 23, 0, 0, 0, time.UTC))
	if d != -1 || d.String() != "1969-12-31" {
		t.Fatalf("got %d %s", d, d)
	}
}

func TestLedgerPositions(t *testing.T) {
	led := &Ledger{Loads: []LoadRecord{
		{Flow: "a", Generation: 3, Positions: Positions{{Topic: "t", Partition: 0, Offset: 10}, {Topic: "t", Partition: 1, Offset: 4}}},
		{Flow: "a", Generation: 4, Positions: Positions{{Topic: "t", Partition: 0, Offset: 20}}},
		{Flow: "b", Positions: Positions{{Topic: "t", Partition: 0, Offset: 99}}},
	}}
	if g := led.Generation("a", TopicPartition{"t", 1}); g != 3 {
		t.Fatalf("generation %d, want 3", g)
	}
	enc := Positions{{Topic: "t", Partition: 1, Offset: 4}, {Topic: "t", Partition: 0, Offset: 2}}.Encode()
	if enc != `[{"topic":"t","partition":0,"offset":2},{"topic":"t","partition":1,"offset":4}]` {
		t.Fatalf("encode: %s", enc)
	}
	back, err := DecodePositions(enc)
	if err != nil || len(back) != 2 || back[1].Offset != 4 {
		t.Fatalf("decode: %v %v", back, err)
	}
}

func TestSelect(t *testing.T) {
	b := New(Schema{Columns: []Column{{Name: "a", Type: Int64}, {Name: "b", Type: String}}}, 1)
	b.Vectors[0].AppendInt(1)
	b.Vectors[1].AppendString("x")
	s := b.Select("b", "missing", "a")
	if got := s.Schema.Names(); len(got) != 2 || got[0] != "b" || got[1] != "a" || s.Row(0)[0] != "x" {
		t.Fatalf("Select: %v %v", got, s.Row(0))
	}
}
