package integration

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/consumer"
)

// freeAddr returns a local address no one listens on now.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// get fetches a URL, returning its status and body (0 when nothing
// answers).
func get(url string) (int, string) {
	cl := http.Client{Timeout: 5 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// scrape reads /metrics and sums the samples of each metric whose labels
// contain every one of match ("flow=\"events_in\"", ...), by metric name.
func scrape(t testing.TB, addr string, match ...string) map[string]float64 {
	t.Helper()
	code, body := get("http://" + addr + "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		series, val := line[:i], line[i+1:]
		ok := true
		for _, m := range match {
			ok = ok && strings.Contains(series, m)
		}
		if !ok {
			continue
		}
		name := series
		if j := strings.IndexByte(series, '{'); j >= 0 {
			name = series[:j]
			if k := strings.Index(series, `phase="`); k >= 0 {
				name += ":" + series[k+7:k+7+strings.IndexByte(series[k+7:], '"')]
			}
			if k := strings.Index(series, `reason="`); k >= 0 {
				name += ":" + series[k+8:k+8+strings.IndexByte(series[k+8:], '"')]
			}
			if k := strings.Index(series, `outcome="`); k >= 0 {
				name += ":" + series[k+9:k+9+strings.IndexByte(series[k+9:], '"')]
			}
		}
		f, err := strconv.ParseFloat(val, 64)
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		out[name] += f
	}
	return out
}

// TestMetricsAndReadiness scrapes a run's /metrics while it loads events
// and dead letters into ClickHouse, and watches /readyz turn 503 while the
// server is down and 200 once it is back.
func TestMetricsAndReadiness(t *testing.T) {
	t.Parallel()
	clickHouseAddr(t)
	srv := startOwnServer(t)
	d := newClickHouseDest(t, srv.Addr)
	b := startBroker(t, map[string]int32{"events": 3})
	const n = 6000
	produce(t, b.Addr(), "events", 0, n)
	produceMsgs(t, b.Addr(), "events", []consumer.Message{{Value: []byte("not json"), Partition: 0}, {Value: []byte(`{"id":"x"}`), Partition: 1}})
	spec := writeSpec(t, d, b.Addr(), 100)
	addr := freeAddr(t)
	started := float64(time.Now().Unix())
	cmd, out := start(t, append([]string{"run", "-f", spec, "--metrics-addr", addr}, fastArgs...)...)
	waitFor(t, 30*time.Second, "/healthz", func() bool { c, _ := get("http://" + addr + "/healthz"); return c == http.StatusOK })

	maxLag := 0.0
	waitFor(t, time.Minute, "every event loaded", func() bool {
		m := scrape(t, addr, `flow="events_in"`)
		maxLag = max(maxLag, m["sluice_consumer_lag_records"])
		return m["sluice_rows_loaded_total"] == n
	})
	if maxLag == 0 {
		t.Error("sluice_consumer_lag_records never rose above 0 while the backlog loaded")
	}
	m := scrape(t, addr, `pipeline="it"`, `flow="events_in"`)
	for name, want := range map[string]float64{
		"sluice_records_read_total":               n + 2,
		"sluice_dead_letters_total:undecodable":   1,
		"sluice_dead_letters_total:type_mismatch": 1,
		"sluice_consumer_lag_records":             0,
	} {
		if m[name] != want {
			t.Errorf("%s = %v, want %v", name, m[name], want)
		}
	}
	for _, name := range []string{"sluice_loads_total:committed", "sluice_load_duration_seconds_count:write",
		"sluice_load_duration_seconds_count:commit", "sluice_load_duration_seconds_count:publish"} {
		if m[name] < 1 {
			t.Errorf("%s = %v, want at least one load", name, m[name])
		}
	}
	if at := m["sluice_last_commit_timestamp_seconds"]; at < started || at > float64(time.Now().Unix()+1) {
		t.Errorf("sluice_last_commit_timestamp_seconds = %v, want a time since %v", at, started)
	}
	all := scrape(t, addr)
	if all["go_goroutines"] == 0 || all["process_cpu_seconds_total"] == 0 {
		t.Error("no Go runtime or process metrics")
	}
	if c, body := get("http://" + addr + "/readyz"); c != http.StatusOK || !strings.Contains(body, `"ready":true`) {
		t.Errorf("/readyz: %d %s", c, body)
	}

	// A new batch arrives while the server is down: the loads retry, and
	// readiness says so.
	srv.Kill()
	produce(t, b.Addr(), "events", n, n+500)
	waitFor(t, time.Minute, "/readyz 503", func() bool { c, _ := get("http://" + addr + "/readyz"); return c == http.StatusServiceUnavailable })
	_, body := get("http://" + addr + "/readyz")
	var r struct {
		Ready    bool
		NotReady []string `json:"not_ready"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil || r.Ready || len(r.NotReady) == 0 || !strings.Contains(strings.Join(r.NotReady, "\n"), "destination") {
		t.Errorf("/readyz body %s (%v): want what is not ready, the destination named", body, err)
	}
	if got := scrape(t, addr, `component="destination"`)["sluice_destination_retries_total"]; got < 1 {
		t.Errorf("sluice_destination_retries_total = %v while the server is down", got)
	}
	srv.Start()
	d.reconnect(t)
	waitFor(t, 2*time.Minute, "/readyz 200 again", func() bool { c, _ := get("http://" + addr + "/readyz"); return c == http.StatusOK })
	waitFor(t, time.Minute, "the new batch", func() bool {
		return scrape(t, addr, `flow="events_in"`)["sluice_rows_loaded_total"] == n+500
	})
	if !strings.Contains(out.String(), "destination recovered") {
		t.Errorf("no log line says the destination recovered:\n%s", tail(out.String(), 3000))
	}
	stop(t, cmd, out)
	checkExactlyOnce(t, d.ids(t, spec, "events", "id"), 0, n+500)
	if c, _ := get("http://" + addr + "/healthz"); c != 0 {
		t.Errorf("/healthz answers %d after the run stopped", c)
	}
}
