package clickhouse

import (
	"bytes"
	"errors"
	"math"
	"math/big"
	"strings"
	"testing"

	chproto "github.com/ClickHouse/ch-go/proto"
	chcolumn "github.com/ClickHouse/clickhouse-go/v2/lib/column"

	"github.com/sluicehq/sluice/flows/batch"
)

func TestNativeDecimals(t *testing.T) {
	big38 := batch.Dec128FromBig(new(big.Int).Lsh(big.NewInt(-1), 100))
	cases := []struct {
		name     string
		col      batch.Column
		vals     []batch.Dec128 // zero value with null: NULL
		nulls    []bool
		want     []byte
		rangeErr bool
	}{
		{
			name: "decimal(9,2) in four bytes",
			col:  batch.Column{Name: "d", Type: batch.Decimal(9, 2)},
			vals: []batch.Dec128{batch.Dec128FromInt64(1), batch.Dec128FromInt64(-2)},
			want: []byte{1, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff},
		},
		{
			name:  "nullable decimal(12,2) in eight bytes after the null map",
			col:   batch.Column{Name: "d", Type: batch.Decimal(12, 2), Nullable: true},
			vals:  []batch.Dec128{batch.Dec128FromInt64(258), {}, batch.Dec128FromInt64(-1)},
			nulls: []bool{false, true, false},
			want: []byte{0, 1, 0,
				2, 1, 0, 0, 0, 0, 0, 0,
				0, 0, 0, 0, 0, 0, 0, 0,
				0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		},
		{
			name: "decimal(38,0) in sixteen bytes",
			col:  batch.Column{Name: "d", Type: batch.Decimal(38, 0)},
			vals: []batch.Dec128{big38},
			want: append(bytes.Repeat([]byte{0}, 12), 0xf0, 0xff, 0xff, 0xff),
		},
		{
			name:     "a value wider than four bytes",
			col:      batch.Column{Name: "d", Type: batch.Decimal(9, 0)},
			vals:     []batch.Dec128{batch.Dec128FromInt64(math.MaxInt32 + 1)},
			rangeErr: true,
		},
		{
			name:     "a value wider than eight bytes",
			col:      batch.Column{Name: "d", Type: batch.Decimal(18, 0)},
			vals:     []batch.Dec128{big38},
			rangeErr: true,
		},
		{
			name: "the narrowest values of each width",
			col:  batch.Column{Name: "d", Type: batch.Decimal(9, 0)},
			vals: []batch.Dec128{batch.Dec128FromInt64(math.MinInt32), batch.Dec128FromInt64(math.MaxInt32)},
			want: []byte{0, 0, 0, 0x80, 0xff, 0xff, 0xff, 0x7f},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := batch.NewVector(tc.col.Type, len(tc.vals))
			for i, d := range tc.vals {
				if tc.nulls != nil && tc.nulls[i] {
					v.AppendNull()
				} else {
					v.AppendDecimal(d)
				}
			}
			col := column{Column: tc.col, chType: chType(tc.col.Type, tc.col.Nullable, features{}), storage: storeDecimal}
			got, err := nativeDecimals("t", col, v)
			var re *RangeError
			if tc.rangeErr {
				if !errors.As(err, &re) || re.Row != 0 || re.Column != "d" {
					t.Fatalf("got %v, want a RangeError of row 0", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tc.want) {
				t.Fatalf("got % x\nwant % x", []byte(got), tc.want)
			}
		})
	}
}

func TestLiteral(t *testing.T) {
	for in, want := range map[string]string{
		"abc":     `'abc'`,
		`it's`:    `'it\'s'`,
		`back\sl`: `'back\\sl'`,
		`\'`:      `'\\\''`,
	} {
		if got := literal(in); got != want {
			t.Errorf("literal(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestPresize checks that a String column made room for takes its values
// as one that was not: the same rows, encoded the same.
func TestPresize(t *testing.T) {
	values := []string{"", "a", strings.Repeat("state", 100), "\x00\xff", strings.Repeat("x", 300)}
	total := 0
	for _, v := range values {
		total += len(v)
	}
	encode := func(n int) []byte {
		col, err := chcolumn.Type("String").Column("v", nil)
		if err != nil {
			t.Fatal(err)
		}
		presize(col, len(values), n)
		if col.Rows() != 0 {
			t.Fatalf("presize(%d) left %d rows", n, col.Rows())
		}
		if _, err := col.Append(values); err != nil {
			t.Fatal(err)
		}
		if col.Rows() != len(values) {
			t.Fatalf("presize(%d): %d rows, want %d", n, col.Rows(), len(values))
		}
		var buf chproto.Buffer
		col.Encode(&buf)
		return buf.Buf
	}
	want := encode(0)
	for _, n := range []int{total, total / 2, 10 * total} {
		if got := encode(n); !bytes.Equal(got, want) {
			t.Errorf("presize(%d): encoded %q, want %q", n, got, want)
		}
	}
}
