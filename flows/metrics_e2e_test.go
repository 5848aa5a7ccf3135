package flows_test

import (
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/flows"
	"github.com/sluicehq/sluice/metrics"
)

// samples reads a Set's /metrics as name{labels} -> value.
func samples(t *testing.T, m *metrics.Set) map[string]float64 {
	t.Helper()
	w := httptest.NewRecorder()
	m.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	out := map[string]float64{}
	for _, line := range strings.Split(w.Body.String(), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatal(line)
		}
		out[line[:i]] = v
	}
	return out
}

// TestFlowMetrics checks the metrics of files and CDC flows: records read,
// files remaining, the CDC state cache and the dead letters by reason.
func TestFlowMetrics(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		topic := "metrics_" + dname
		s := newStepper(t, broker.Addr(), dest(t), `tables:
  - name: raw
    columns:
      - {name: id, type: int64}
      - {name: name, type: string}
  - name: latest
flows:
  - name: bf
    target: raw
    kind: append
    source: {files: {path: "in/*.parquet"}}
    batch: {rows: 2}
  - name: cdc
    target: latest
    kind: auto_cdc
    keys: [id]
    sequence_by: seq
    source:
      kafka:
        topic: `+topic+`
        columns:
          - {name: id, type: int64}
          - {name: seq, type: int64}
`)
		for f := range 3 {
			writeParquet(t, filepath.Join(s.dir, "in", fmt.Sprintf("p%d.parquet", f)), []rawRow{{int64(2 * f), "a"}, {int64(2*f + 1), "b"}, {int64(9), "c"}})
		}
		s.produce(topic, `{"id":1,"seq":1}`, `{"id":2,"seq":2}`, `{"id":null,"seq":3}`, `{"id":"x","seq":4}`)
		m := metrics.New()
		s.updateWith(flows.Options{Metrics: m})
		got := samples(t, m)
		for series, want := range map[string]float64{
			`sluice_records_read_total{flow="bf",pipeline="once"}`:                                 9,
			`sluice_backfill_files_remaining{flow="bf",pipeline="once"}`:                           0,
			`sluice_rows_loaded_total{flow="bf",pipeline="once",table="raw"}`:                      9,
			`sluice_records_read_total{flow="cdc",pipeline="once"}`:                                4,
			`sluice_rows_loaded_total{flow="cdc",pipeline="once",table="latest"}`:                  2,
			`sluice_dead_letters_total{flow="cdc",pipeline="once",reason="missing_field"}`:         1,
			`sluice_dead_letters_total{flow="cdc",pipeline="once",reason="type_mismatch"}`:         1,
			`sluice_loads_total{flow="bf",outcome="committed",pipeline="once"}`:                    6,
			`sluice_load_duration_seconds_count{flow="bf",phase="publish",pipeline="once"}`:        6,
			`sluice_consumer_lag_records{flow="cdc",partition="0",pipeline="once",topic="` + topic: 0,
		} {
			if !strings.HasSuffix(series, "}") {
				series += `"}`
			}
			if v, ok := got[series]; !ok || v != want {
				t.Errorf("%s = %v (present %v), want %v", series, v, ok, want)
			}
		}
		if v := got[`sluice_cdc_state_cache_bytes{flow="cdc",pipeline="once"}`]; v <= 0 {
			t.Errorf("sluice_cdc_state_cache_bytes = %v, want the bytes of two keys' state", v)
		}
		if r := m.Ready(); !r.Ready {
			t.Errorf("not ready after a clean update: %v", r.NotReady)
		}
	})
}
