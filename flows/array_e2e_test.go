package flows_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/flows/batch"
)

// TestArrayColumns loads JSON lists into declared array(T) columns of an
// append target and of SCD1 and SCD2 targets: every element is checked as a
// value of T, and a record with one bad element, a null element or a
// missing list is a dead letter naming the element, while the rest load.
func TestArrayColumns(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		topic, changes := "arrays_"+dname, "array_changes_"+dname
		s := newStepper(t, broker.Addr(), dest(t), `tables:
  - name: tagged
  - name: latest
  - name: history
flows:
  - name: live
    target: tagged
    kind: append
    source:
      kafka:
        topic: `+topic+`
        format: json
        columns:
          - {name: id, type: int64}
          - {name: tags, type: "array(string)"}
          - {name: qty, type: array(int64)}
          - {name: at, type: array(timestamp)}
          - {name: price, type: "array(decimal(10,2))"}
    computed_columns:
      - {name: n_tags, type: int64, expr: "len(tags)"}
      - {name: doubled, type: array(int64), expr: "map(qty, # * 2)"}
  - name: scd1
    target: latest
    kind: auto_cdc
    source:
      kafka:
        topic: `+changes+`
        format: json
        columns:
          - {name: id, type: int64}
          - {name: seq, type: int64}
          - {name: tags, type: array(string)}
    keys: [id]
    sequence_by: seq
  - name: scd2
    target: history
    kind: auto_cdc
    source:
      kafka:
        topic: `+changes+`
        format: json
        columns:
          - {name: id, type: int64}
          - {name: seq, type: int64}
          - {name: tags, type: array(string)}
    keys: [id]
    sequence_by: seq
    stored_as_scd_type: 2
`)
		s.produce(topic,
			`{"id": 1, "tags": ["a", "b"], "qty": [1, 2, 3], "at": ["2024-01-01T00:00:00Z"], "price": ["1.50", 2]}`,
			`{"id": 2, "tags": [], "qty": [], "at": [], "price": []}`,
			`{"id": 3, "tags": ["a"], "qty": [1, "x"], "at": [], "price": []}`,
			`{"id": 4, "tags": ["a", null], "qty": [], "at": [], "price": []}`,
			`{"id": 5, "qty": [], "at": [], "price": []}`,
			`{"id": 6, "tags": "a", "qty": [], "at": [], "price": []}`,
			`{"id": 7, "tags": ["ok"], "qty": [], "at": [1704067200000], "price": []}`,
			`{"id": 8, "tags": ["caf\u00e9", "`+"\xff"+`"], "qty": [], "at": [], "price": []}`,
			`{"id": 9, "tags": [], "qty": [], "at": [], "price": ["1.555"]}`,
		)
		// The SCD2 history of key 1 gets a late version in between.
		s.produce(changes,
			`{"id": 1, "seq": 10, "tags": ["x"]}`,
			`{"id": 1, "seq": 30, "tags": ["x", "y", "z"]}`,
			`{"id": 2, "seq": 10, "tags": []}`,
		)
		s.update()
		s.produce(changes, `{"id": 1, "seq": 20, "tags": ["x", "y"]}`, `{"id": 2, "seq": 20, "tags": ["q", 1]}`)
		s.update()

		want := []string{
			"1,[a b],[1 2 3],[2024-01-01 00:00:00 +0000 UTC],[1.50 2.00],2,[2 4 6]",
			"2,[],[],[],[],0,[]",
			"7,[ok],[],[2024-01-01 00:00:00 +0000 UTC],[],1,[]",
		}
		if got := s.rows("tagged", batch.LoadIDColumn); !slices.Equal(got, want) {
			t.Fatalf("tagged %q, want %q", got, want)
		}
		if got, want := s.rows("latest"), []string{"1,30,[x y z]", "2,10,[]"}; !slices.Equal(got, want) {
			t.Fatalf("latest %q, want %q", got, want)
		}
		if got, want := s.rows("history"), []string{"1,10,[x],10,20", "1,20,[x y],20,30", "1,30,[x y z],30,∞", "2,10,[],10,∞"}; !slices.Equal(got, want) {
			t.Fatalf("history %q, want %q", got, want)
		}
		bad := s.rows(batch.DeadLettersTable, "at", "payload", "pipeline", "target", "source", batch.LoadIDColumn)
		wantBad := []string{
			`live,0/2,type_mismatch,field "qty[1]": "x" is not an int64`,
			`live,0/3,type_mismatch,field "tags[1]": null, and the elements of array(string) are never null`,
			`live,0/4,missing_field,field "tags": missing, and the column is not nullable`,
			`live,0/5,type_mismatch,field "tags": "a" is not a JSON array, as array(string) is`,
			`live,0/7,invalid_utf8,field "tags[1]": "\xff" is not valid UTF-8 (declare the column bytes to keep any bytes)`,
			`live,0/8,type_mismatch,field "price[0]": "1.555" has more than 2 fractional digits`,
			`scd1,0/4,type_mismatch,field "tags[1]": 1 is not a string`,
			`scd2,0/4,type_mismatch,field "tags[1]": 1 is not a string`,
		}
		if !slices.Equal(bad, wantBad) {
			t.Fatalf("dead letters\n%s\nwant\n%s", strings.Join(bad, "\n"), strings.Join(wantBad, "\n"))
		}
	})
}

// TestArrayColumnsFromParquet reads Parquet LIST columns into declared
// array columns: lists of scalars, converted as top-level values are, a
// null element or a value that does not fit a dead letter by its path.
func TestArrayColumnsFromParquet(t *testing.T) {
	type row struct {
		ID     int64     `parquet:"id"`
		Tags   []string  `parquet:"tags,list"`
		Scores []*int64  `parquet:"scores,list,optional"`
		Days   []float64 `parquet:"days,list"`
	}
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		s := newStepper(t, broker.Addr(), dest(t), `tables:
  - name: raw
    columns:
      - {name: id, type: int64}
      - {name: tags, type: array(string)}
      - {name: scores, type: "array(decimal(21,2))"}
      - {name: days, type: array(float64)}
flows:
  - name: bf
    target: raw
    kind: append
    source: {files: {path: "in/*.parquet"}}
`)
		one, two := int64(1), int64(2)
		writeParquet(t, filepath.Join(s.dir, "in", "a.parquet"), []row{
			{ID: 1, Tags: []string{"a", "b"}, Scores: []*int64{&one, &two}, Days: []float64{0.5}},
			{ID: 2, Scores: []*int64{}},
			{ID: 3, Tags: []string{"c"}, Scores: []*int64{&one, nil}},
			{ID: 4, Tags: []string{"ok", "caf\xe9"}, Scores: []*int64{}},
			{ID: 5},
		})
		s.update()
		if got, want := s.rows("raw", batch.LoadIDColumn), []string{"1,[a b],[1.00 2.00],[0.5]", "2,[],[],[]"}; !slices.Equal(got, want) {
			t.Fatalf("rows %q, want %q", got, want)
		}
		bad := s.rows(batch.DeadLettersTable, "at", "payload", "pipeline", "target", "flow", batch.LoadIDColumn)
		wantBad := []string{
			`in/a.parquet,3,type_mismatch,field "scores[1]": null, and the elements of array(decimal(21,2)) are never null`,
			`in/a.parquet,4,invalid_utf8,field "tags[1]": "caf\xe9" is not valid UTF-8 (declare the column bytes to keep any bytes)`,
			`in/a.parquet,5,missing_field,field "scores": null, and an array is never null`,
		}
		if !slices.Equal(bad, wantBad) {
			t.Fatalf("dead letters\n%s\nwant\n%s", strings.Join(bad, "\n"), strings.Join(wantBad, "\n"))
		}
	})
}
