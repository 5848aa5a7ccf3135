package flows_test

import (
	"slices"
	"testing"

	"github.com/sluicehq/sluice/flows/batch"
)

// TestJSONInferenceWithRules checks that a table typed by its messages
// takes computed columns and a where filter, the computed columns staying
// after the columns of the messages as new fields arrive.
func TestJSONInferenceWithRules(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		topic := "infer_rules_" + dname
		s := newStepper(t, broker.Addr(), dest(t), `tables:
  - name: events
flows:
  - name: live
    target: events
    kind: append
    source: {kafka: {topic: `+topic+`}}
    computed_columns:
      - {name: double, type: int64, nullable: true, expr: "n * 2"}
    where: 'n != 3'
`)
		s.produce(topic, `{"n": 1}`, `{"n": 3}`)
		s.update()
		s.produce(topic, `{"n": 2, "x": "a"}`)
		s.update()
		if got, want := s.rows("events", batch.LoadIDColumn), []string{"1,∞,2", "2,a,4"}; !slices.Equal(got, want) {
			t.Fatalf("rows %q, want %q", got, want)
		}
	})
}
