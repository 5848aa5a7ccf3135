package flows_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/flows/batch"
)

// TestCDCTypedByMessages loads auto_cdc flows whose target and source
// declare no columns: the messages type the target, a field that arrives
// later adds a column to it mid-run, and the keys and sequence are typed by
// the first messages that carry them.
func TestCDCTypedByMessages(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		topic := "cdc_infer_" + dname
		s := newStepper(t, broker.Addr(), dest(t), `tables:
  - name: latest
  - name: history
flows:
  - name: scd1
    target: latest
    kind: auto_cdc
    source: {kafka: {topic: `+topic+`}}
    keys: [id]
    sequence_by: seq
    apply_as_deletes: 'op == "D"'
  - name: scd2
    target: history
    kind: auto_cdc
    source: {kafka: {topic: `+topic+`}}
    keys: [id]
    sequence_by: seq
    stored_as_scd_type: 2
`)
		s.produce(topic, `{"name": "nobody"}`)
		s.update()
		s.produce(topic,
			`{"name": "nobody"}`,
			`{"id": 1, "seq": 1, "name": "a"}`,
			`{"id": 2, "seq": 1, "name": "b"}`,
		)
		s.update()
		s.produce(topic,
			`{"id": 1, "seq": 3, "name": "a3", "city": "Oslo"}`,
			`{"id": 1, "seq": 2, "name": "a2"}`,
			`{"id": 2, "seq": 2, "op": "D"}`,
			`{"id": "three", "seq": 1}`,
		)
		s.update()
		if got, want := s.rows("latest"), []string{"a3,1,3,Oslo,∞"}; !slices.Equal(got, want) {
			t.Fatalf("latest %q, want %q", got, want)
		}
		if got, want := columnsOf(t, s, "latest"), []string{"name string nullable", "id int64", "seq int64 nullable", "city string nullable", "op string nullable"}; !slices.Equal(got, want) {
			t.Fatalf("latest columns %q, want %q", got, want)
		}
		// The scd2 flow has no apply_as_deletes: op "D" is a value.
		want := []string{"a,1,1,∞,∞,1,2", "a2,1,2,∞,∞,2,3", "a3,1,3,Oslo,∞,3,∞", "b,2,1,∞,∞,1,2", "∞,2,2,∞,D,2,∞"}
		if got := s.rows("history"); !slices.Equal(got, want) {
			t.Fatalf("history %q, want %q", got, want)
		}
		// Nested objects become columns, a list a child table.
		s.produce(topic, `{"id": 2, "seq": 5, "addr": {"zip": "1000"}, "tags": ["x", "y"]}`)
		s.update()
		if got, want := s.rows("latest", batch.IDColumn), []string{"a3,1,3,Oslo,∞,∞", "∞,2,5,∞,∞,1000"}; !slices.Equal(got, want) {
			t.Fatalf("latest after nested %q, want %q", got, want)
		}
		if got, want := currentJoined(t, s, "latest", "latest__tags", "id"), []string{"2[0]: x", "2[1]: y"}; !slices.Equal(got, want) {
			t.Fatalf("latest's tags %q, want %q", got, want)
		}
		bad := s.rows(batch.DeadLettersTable, "at", "payload", "pipeline", "target", "source", batch.LoadIDColumn)
		wantBad := []string{
			`scd1,0/0,missing_field,field "id": missing, and it is a key or the sequence of flow scd1 (no message has had it yet)`,
			`scd1,0/1,null_key,key column id is null`,
			`scd1,0/7,type_mismatch,field "id": "three" is not an int64`,
			`scd2,0/0,missing_field,field "id": missing, and it is a key or the sequence of flow scd2 (no message has had it yet)`,
			`scd2,0/1,null_key,key column id is null`,
			`scd2,0/7,type_mismatch,field "id": "three" is not an int64`,
		}
		if !slices.Equal(bad, wantBad) {
			t.Fatalf("dead letters\n%s\nwant\n%s", strings.Join(bad, "\n"), strings.Join(wantBad, "\n"))
		}
	})
}
