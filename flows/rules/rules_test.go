package rules

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/spec"
)

func source() batch.Schema {
	return batch.Schema{Columns: []batch.Column{
		{Name: "id", Type: batch.Int64},
		{Name: "amount", Type: batch.Float64, Nullable: true},
		{Name: "country", Type: batch.String, Nullable: true},
	}}
}

func rows(t *testing.T, vals ...[3]any) *batch.Batch {
	t.Helper()
	b := batch.New(source(), len(vals))
	for _, r := range vals {
		b.Vectors[0].AppendInt(int64(r[0].(int)))
		if r[1] == nil {
			b.Vectors[1].AppendNull()
		} else {
			b.Vectors[1].AppendFloat(r[1].(float64))
		}
		if r[2] == nil {
			b.Vectors[2].AppendNull()
		} else {
			b.Vectors[2].AppendString(r[2].(string))
		}
	}
	return b
}

func TestApply(t *testing.T) {
	f := &spec.Flow{
		ComputedColumns: []spec.ComputedColumn{
			{Name: "cents", Type: batch.Int64, Nullable: true, Expr: "amount * 100"},
			{Name: "big", Type: batch.Bool, Nullable: true, Expr: "cents > 1000"},
		},
		Where: "id != 4",
		Expectations: []spec.Expectation{
			{Name: "positive", Expr: "amount > 0", OnViolation: spec.ViolationDrop},
			{Name: "known_country", Expr: "country != nil"},
		},
	}
	r, err := New(f, source(), false)
	if err != nil {
		t.Fatal(err)
	}
	in := rows(t,
		[3]any{1, 12.5, "NL"},  // kept: cents 1250, big
		[3]any{2, -1.0, "NL"},  // dropped: positive
		[3]any{3, nil, "NL"},   // kept: a null amount violates nothing
		[3]any{4, 1.0, "XX"},   // filtered
		[3]any{5, 2.0, nil},    // kept, known_country counted
		[3]any{6, 0.001, "NL"}, // a dead letter: 0.1 cents is not an int64
	)
	res := r.Apply(in, nil)
	if res.Failed != nil {
		t.Fatalf("failed: %+v", res.Failed)
	}
	var got []string
	for i := range res.Batch.Len() {
		var parts []string
		for _, v := range res.Batch.Row(i) {
			parts = append(parts, strings.TrimSpace(strings.ReplaceAll(fmtAny(v), "<nil>", "∅")))
		}
		got = append(got, strings.Join(parts, ","))
	}
	want := []string{"1,12.5,NL,1250,true", "3,∅,NL,∅,∅", "5,2,∅,200,false"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("rows %q, want %q", got, want)
	}
	if len(res.Rows) != 3 || res.Rows[1] != 2 || res.Filtered != 1 {
		t.Fatalf("rows %v, filtered %d", res.Rows, res.Filtered)
	}
	if res.Violated["positive"] != 1 || res.Violated["known_country"] != 1 {
		t.Fatalf("violations %v", res.Violated)
	}
	if len(res.Rejects) != 2 || res.Rejects[0].Row != 1 || res.Rejects[0].Reason != ReasonExpectation ||
		!strings.Contains(res.Rejects[0].Msg, "expectation positive violated: amount > 0") ||
		res.Rejects[1].Row != 5 || res.Rejects[1].Reason != ReasonExpression || !strings.Contains(res.Rejects[1].Msg, "computed column cents") {
		t.Fatalf("rejects %+v", res.Rejects)
	}
}

func TestFail(t *testing.T) {
	f := &spec.Flow{Expectations: []spec.Expectation{{Name: "id_small", Expr: "id < 3", OnViolation: spec.ViolationFail}}}
	r, err := New(f, source(), false)
	if err != nil {
		t.Fatal(err)
	}
	res := r.Apply(rows(t, [3]any{1, 1.0, "NL"}, [3]any{7, 1.0, "NL"}), nil)
	if res.Failed == nil || res.Failed.Row != 1 || !strings.Contains(res.Failed.Msg, "id_small") {
		t.Fatalf("failed %+v, want row 1 violating id_small", res.Failed)
	}
}

func TestNoRules(t *testing.T) {
	if r, err := New(&spec.Flow{}, source(), false); r != nil || err != nil {
		t.Fatalf("New without rules = %v, %v; want nil", r, err)
	}
}

func fmtAny(v any) string {
	switch x := v.(type) {
	case nil:
		return "∅"
	case float64:
		return strconvF(x)
	}
	return strings.TrimSpace(strings.Trim(fmtSprint(v), "[]"))
}

// TestWhereNull checks that a filter that is null for a row (a comparison
// with a null value) leaves the row out, as SQL's WHERE does.
func TestWhereNull(t *testing.T) {
	r, err := New(&spec.Flow{Where: `country != "XX"`}, source(), false)
	if err != nil {
		t.Fatal(err)
	}
	res := r.Apply(rows(t, [3]any{1, 1.0, nil}, [3]any{2, 1.0, "NL"}, [3]any{3, 1.0, "XX"}), nil)
	if len(res.Rows) != 1 || res.Rows[0] != 1 || res.Filtered != 2 {
		t.Fatalf("kept rows %v, filtered %d; want row 1 only, 2 filtered", res.Rows, res.Filtered)
	}
}

// TestPass checks that rows marked to pass (a CDC flow's deletes) meet no
// filter or expectation and get null where their computed columns fail.
func TestPass(t *testing.T) {
	f := &spec.Flow{
		ComputedColumns: []spec.ComputedColumn{{Name: "cents", Type: batch.Int64, Expr: "amount * 100"}},
		Where:           `country == "NL"`,
		Expectations:    []spec.Expectation{{Name: "positive", Expr: "amount > 0", OnViolation: spec.ViolationFail}},
	}
	r, err := New(f, source(), false)
	if err != nil {
		t.Fatal(err)
	}
	res := r.Apply(rows(t, [3]any{1, nil, nil}, [3]any{2, -1.0, "XX"}), []bool{true, true})
	if res.Failed != nil || len(res.Rejects) != 0 || res.Filtered != 0 || len(res.Rows) != 2 {
		t.Fatalf("passing rows: failed %+v, rejects %+v, filtered %d, kept %v", res.Failed, res.Rejects, res.Filtered, res.Rows)
	}
	if !res.Batch.Vectors[3].IsNull(0) || res.Batch.Vectors[3].Ints[1] != -100 {
		t.Fatalf("computed cents %v", res.Batch.Vectors[3])
	}
}

// TestLenient checks that, for a table typed by its messages, a name that
// is no column yet is NULL: a comparison with it is null (a where leaves
// the row out, an expectation violates nothing), a test for nil is true,
// a computed column over it is null; without lenient it is an error.
func TestLenient(t *testing.T) {
	f := &spec.Flow{
		Where:           `score == nil || score > 1`,
		Expectations:    []spec.Expectation{{Name: "tiered", Expr: `tier != "gold"`, OnViolation: spec.ViolationDrop}},
		ComputedColumns: []spec.ComputedColumn{{Name: "twice", Type: batch.Int64, Nullable: true, Expr: "len(note) * 2"}},
	}
	if _, err := New(f, source(), false); err == nil || !strings.Contains(err.Error(), "unknown name") {
		t.Fatalf("New, not lenient: %v, want an unknown name", err)
	}
	r, err := New(f, source(), true)
	if err != nil {
		t.Fatal(err)
	}
	res := r.Apply(rows(t, [3]any{1, 1.0, "NL"}, [3]any{2, 1.0, "NL"}), nil)
	if len(res.Rows) != 2 || res.Filtered != 0 || len(res.Rejects) != 0 || res.Violated["tiered"] != 0 {
		t.Fatalf("rows %v, filtered %d, rejects %v, violated %v; want both rows kept", res.Rows, res.Filtered, res.Rejects, res.Violated)
	}
	only := &spec.Flow{Where: `score > 1`}
	if r, err := New(only, source(), true); err != nil || r.Apply(rows(t, [3]any{1, 1.0, "NL"}), nil).Filtered != 1 {
		t.Fatalf("where over a name that is no column: %v, want the row filtered (null)", err)
	}
	if v := res.Batch.Column("twice").Value(0); v != nil {
		t.Fatalf("twice %v, want null", v)
	}
}
