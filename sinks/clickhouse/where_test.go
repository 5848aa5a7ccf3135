package clickhouse

import (
	"testing"

	"github.com/sluicehq/sluice/flows/batch"
)

func TestWhereSQL(t *testing.T) {
	cols := []column{
		{Column: batch.Column{Name: "id", Type: batch.Int64}, storage: storeInt64},
		{Column: batch.Column{Name: "name", Type: batch.String, Nullable: true}, storage: storeString},
		{Column: batch.Column{Name: "score", Type: batch.Float64}, storage: storeFloat64},
		{Column: batch.Column{Name: "ok", Type: batch.Bool}, storage: storeUInt8},
		{Column: batch.Column{Name: "amount", Type: batch.Decimal(10, 2)}, storage: storeDecimal},
	}
	cases := []struct {
		src, cond string
		exact     bool
	}{
		{"id > 5", "((`id` > 5))", true},
		{"id == -3 or id in [1, 2]", "(((`id` = -3) OR (`id` IN (1, 2))))", true},
		{"score >= 1 && ok", "((`score` >= 1)) AND ((`ok` = 1))", true},
		{"not (id != 2)", "((NOT (`id` != 2)))", true},
		// A nullable column: rows with a null pass, and the caller filters.
		{`name == "a'b"`, "((`name` = unhex('612762')) OR isNull(`name`))", false},
		// What does not translate is left out of the condition.
		{"id > 5 and amount > 1", "((`id` > 5))", false},
		{"id > 5 or amount > 1", "", false},
		{"id + 1 > 5", "", false},
		{"len(name) > 2", "", false},
		{"name == nil", "", false},
		{"id > 1.5", "", false},
		{"nope > 1", "", false},
		{"id >", "", false},
	}
	for _, tc := range cases {
		cond, exact := whereSQL(tc.src, cols)
		if cond != tc.cond || exact != tc.exact {
			t.Errorf("whereSQL(%q) = %q, %v; want %q, %v", tc.src, cond, exact, tc.cond, tc.exact)
		}
	}
}
