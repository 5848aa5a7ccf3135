package cdc

import (
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
)

var exprSource = batch.Schema{Columns: []batch.Column{
	{Name: "id", Type: batch.Int64},
	{Name: "op", Type: batch.String, Nullable: true},
	{Name: "amount", Type: batch.Decimal(10, 2), Nullable: true},
	{Name: "at", Type: batch.Timestamp, Nullable: true},
	{Name: "seq", Type: batch.Int64},
}}

func TestExpressions(t *testing.T) {
	at := time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)
	b := mkBatch(exprSource, [][]any{
		{1, "D", "10.50", at, 1},
		{2, nil, nil, nil, 2},
		{3, "X", "-1.00", at.Add(time.Hour), 3},
		{4, "", "0.00", nil, 4},
	})
	pos := []Position{
		{Flow: "f", Topic: "a", Partition: 0, Offset: 10},
		{Flow: "f", Topic: "a", Partition: 2, Offset: 11},
		{Flow: "f", Topic: "b", Partition: 2, Offset: 12},
		{Flow: "f", Topic: "b", Partition: 1, Offset: 13},
	}
	meta := []RecordMeta{{Key: []byte("k")}, {}, {Timestamp: at}, {}}
	for _, tc := range []struct {
		name string
		src  string
		fast bool
		want []bool
	}{
		{name: "equal", src: `op == "D"`, fast: true, want: []bool{true, false, false, false}},
		{name: "equal reversed", src: `"D" == op`, fast: true, want: []bool{true, false, false, false}},
		{name: "equal in the VM", src: `(op == "D") == true`, want: []bool{true, false, false, false}},
		{name: "not equal: null is null", src: `op != "D"`, fast: true, want: []bool{false, false, true, true}},
		{name: "not equal in the VM", src: `(op != "D") == true`, want: []bool{false, false, true, true}},
		{name: "in", src: `op in ["D", "X"]`, fast: true, want: []bool{true, false, true, false}},
		{name: "in in the VM", src: `(op in ["D", "X"]) == true`, want: []bool{true, false, true, false}},
		{name: "null test", src: `op == nil`, want: []bool{false, true, false, false}},
		{name: "decimal as float", src: `amount > 10.0`, want: []bool{true, false, false, false}},
		{name: "timestamp", src: `at > date("2024-05-01T00:30:00Z")`, want: []bool{false, false, true, false}},
		{name: "kafka fields", src: `_kafka_topic == "b" && _kafka_partition == 2 && _kafka_offset >= 12`, want: []bool{false, false, true, false}},
		{name: "kafka key", src: `_kafka_key != nil`, want: []bool{true, false, false, false}},
		{name: "kafka timestamp", src: `_kafka_timestamp != nil`, want: []bool{false, false, true, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x, err := compileExpression(tc.src, exprSource, true, false)
			if err != nil {
				t.Fatal(err)
			}
			if (x.fast != nil) != tc.fast {
				t.Fatalf("fast form %v, want %v", x.fast != nil, tc.fast)
			}
			got := make([]bool, b.Len())
			errs := map[int]error{}
			x.eval(b, pos, meta, got, errs)
			if len(errs) > 0 || !slices.Equal(got, tc.want) {
				t.Fatalf("eval = %v (errors %v), want %v", got, errs, tc.want)
			}
		})
	}

	x, err := compileExpression(`_file_path endsWith ".del"`, exprSource, false, false)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]bool, 2)
	x.eval(mkBatch(exprSource, [][]any{{1, nil, nil, nil, 1}, {2, nil, nil, nil, 2}}), []Position{{File: "a.del"}, {File: "b.jsonl"}}, nil, got, map[int]error{})
	if !slices.Equal(got, []bool{true, false}) {
		t.Fatalf("_file_path: %v", got)
	}
	if _, err := compileExpression(`_kafka_offset > 1`, exprSource, false, false); err == nil {
		t.Fatal("a files source accepted _kafka_offset")
	}
}

func TestClassify(t *testing.T) {
	c := Config{
		Pipeline: "p", Flow: "f", Target: "t", Kafka: true, Source: exprSource,
		Keys: []string{"id"}, SequenceBy: []string{"seq"},
		ApplyAsDeletes:   `op == "D" || int(op) > 0`,
		ApplyAsTruncates: `op == "T"`,
	}
	h := newHarness(t, c)
	f := &feed{h: h, flow: "f"}
	out := f.batch(
		[]any{1, "a", nil, nil, 1},    // int("a") fails: a dead letter
		[]any{2, "T", nil, nil, 2},    // truncate, evaluated first
		[]any{3, "D", nil, nil, 3},    // delete
		[]any{4, nil, nil, nil, 4},    // null op: an upsert
		[]any{5, "7", nil, nil, 5},    // int("7") > 0: delete
		[]any{6, "0", "1.00", at0, 6}, // upsert
	)
	if out.Stats.Upserts != 2 || out.Stats.Deletes != 2 || out.Stats.Truncates != 1 || out.Stats.DeadLetters != 1 {
		t.Fatalf("stats %+v", out.Stats)
	}
	if dl := out.DeadLetters[0]; dl.Reason != ReasonExpression || dl.Position != "0/0" {
		t.Fatalf("dead letter %+v", dl)
	}

	// Operations given by the source replace the expressions.
	e := h.engines["f"]
	out, err := e.Apply(t.Context(), Input{
		Batch:     mkBatch(exprSource, [][]any{{9, "D", nil, nil, 9}}),
		Positions: []Position{{Flow: "f", Topic: "t", Offset: 100}},
		Ops:       []Op{OpUpsert},
		Now:       h.now,
	})
	if err != nil || out.Stats.Upserts != 1 || out.Upserts.Len() != 1 {
		t.Fatalf("Ops: %v, stats %+v", err, out.Stats)
	}
}

var at0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
