package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/sluicehq/sluice/consumer"
	"github.com/sluicehq/sluice/flows/sample"
)

func TestValidateListsEveryProblemWithItsLine(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	bad := `pipeline: Bad-Name
kafka:
  brokers: [127.0.0.1:9092]
destination:
  local: {path: ./data}
tables:
  - name: events
    columns:
      - {name: id, type: int65}
      - {name: note, type: string, colour: red}
flows:
  - name: in
    target: nowhere
    kind: append
    source: {kafka: {topic: events, format: json}}
`
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	res := sluice(t, "validate", "-f", path)
	if res.code != 2 {
		t.Fatalf("validate: exit %d, want 2\n%s", res.code, res.stderr)
	}
	for _, want := range []struct {
		line int
		word string
	}{{1, "pipeline"}, {9, "int65"}, {10, "colour"}, {13, "nowhere"}} {
		re := regexp.MustCompile(`:` + strconv.Itoa(want.line) + `:.*` + regexp.QuoteMeta(want.word))
		if !re.MatchString(res.stderr) {
			t.Errorf("no problem at line %d naming %q in:\n%s", want.line, want.word, res.stderr)
		}
	}

	// A valid spec of each destination validates (without reaching the
	// destination).
	for _, d := range []destination{localDest{}, &clickHouseDest{addr: "127.0.0.1:9000", db: "shop"}} {
		good := writeSpec(t, d, "127.0.0.1:9092", 100)
		if res := sluice(t, "validate", "-f", good); res.code != 0 {
			t.Fatalf("valid spec with destination %s: exit %d\n%s", d.yaml(), res.code, res.stderr)
		}
	}

	// Problems of a ClickHouse destination come with their lines too.
	chBad := `pipeline: it
kafka:
  brokers: [127.0.0.1:9092]
destination:
  clickhouse:
    addr: [no-port]
    database: shop
    read_timeout: -1s
tables:
  - name: events
    columns:
      - {name: id, type: int64}
flows:
  - name: in
    target: events
    kind: append
    source: {kafka: {topic: events, format: json}}
`
	if err := os.WriteFile(path, []byte(chBad), 0o644); err != nil {
		t.Fatal(err)
	}
	res = sluice(t, "validate", "-f", path)
	if res.code != 2 {
		t.Fatalf("validate of a bad clickhouse destination: exit %d, want 2\n%s", res.code, res.stderr)
	}
	for _, want := range []struct {
		line int
		word string
	}{{6, "addr"}, {8, "read_timeout"}} {
		re := regexp.MustCompile(`:` + strconv.Itoa(want.line) + `:.*` + regexp.QuoteMeta(want.word))
		if !re.MatchString(res.stderr) {
			t.Errorf("no problem at line %d naming %q in:\n%s", want.line, want.word, res.stderr)
		}
	}
}

// TestProfiles checks that --cpu-profile and --mem-profile write profiles
// (gzipped pprof) of a command.
func TestProfiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	spec := `pipeline: p
destination: {local: {path: ./data}}
tables:
  - name: t
    columns: [{name: id, type: int64}]
`
	if err := os.WriteFile(path, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	cpu, mem := filepath.Join(dir, "cpu.pprof"), filepath.Join(dir, "mem.pprof")
	peak, peakProf := filepath.Join(dir, "peak"), filepath.Join(dir, "peak.pprof")
	if res := sluice(t, "validate", "-f", path, "--cpu-profile", cpu, "--mem-profile", mem,
		"--heap-peak", peak, "--heap-peak-profile", peakProf); res.code != 0 {
		t.Fatalf("validate: exit %d\n%s", res.code, res.stderr)
	}
	data, err := os.ReadFile(peak)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := strconv.ParseUint(strings.TrimSuffix(string(data), "\n"), 10, 64); err != nil || n == 0 {
		t.Errorf("--heap-peak wrote %q, want a positive number of bytes", data)
	}
	for _, f := range []string{cpu, mem, peakProf} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) < 2 || data[0] != 0x1f || data[1] != 0x8b {
			t.Errorf("%s: %d bytes, not a gzipped profile", filepath.Base(f), len(data))
		}
	}
}

func TestShowFormatsAndUnknownTable(t *testing.T) {
	t.Parallel()
	forEachDestination(t, func(t *testing.T, d destination) {
		b := startBroker(t, map[string]int32{"events": 1})
		produce(t, b.Addr(), "events", 1, 3)
		spec := writeSpec(t, d, b.Addr(), 100)
		mustSluice(t, "update", "-f", spec)

		// A timestamp shows as the destination stores it, with its
		// fraction of a second.
		at := stored(t, d, spec, "2026-03-01T10:00:01.5Z")
		got := mustSluice(t, "show", "-f", spec, "events", "--format", "jsonl").stdout
		rows := jsonl(t, got)
		if len(rows) != 2 {
			t.Fatalf("jsonl rows: %d, want 2\n%s", len(rows), got)
		}
		first := strings.SplitN(got, "\n", 2)[0]
		wantPrefix := `{"id":1,"name":"n-1","amount":"1.01","at":"` + at + `","_sluice_load_id":`
		if !strings.HasPrefix(first, wantPrefix) {
			t.Fatalf("first jsonl row\n%s\nwant prefix\n%s", first, wantPrefix)
		}

		csv := mustSluice(t, "show", "-f", spec, "events", "--format", "csv").stdout
		lines := strings.Split(strings.TrimSpace(csv), "\n")
		if lines[0] != "id,name,amount,at,_sluice_load_id" || !strings.HasPrefix(lines[1], "1,n-1,1.01,"+at+",") || len(lines) != 3 {
			t.Fatalf("csv:\n%s", csv)
		}
		table := mustSluice(t, "show", "-f", spec, "events").stdout
		if !strings.Contains(table, "n-2") || !strings.Contains(table, "amount") {
			t.Fatalf("table format:\n%s", table)
		}
		// What show prints is what the destination holds.
		if ids := d.ids(t, spec, "events", "id"); len(ids) != 2 || ids[0] != 1 || ids[1] != 2 {
			t.Fatalf("destination holds ids %v, want [1 2]", ids)
		}

		if res := sluice(t, "show", "-f", spec, "nope"); res.code != 2 {
			t.Fatalf("show of an unknown table: exit %d, want 2", res.code)
		}
		if res := sluice(t, "show", "-f", spec, "events", "--format", "xml"); res.code != 2 {
			t.Fatalf("show with an unknown format: exit %d, want 2", res.code)
		}
	})
}

// stored returns an RFC 3339 time of the events table's at column as the
// destination keeps it.
func stored(t testing.TB, d destination, spec, rfc3339 string) string {
	t.Helper()
	ts, err := time.Parse(time.RFC3339Nano, rfc3339)
	if err != nil {
		t.Fatal(err)
	}
	return ts.Truncate(d.precision(t, spec, "events", "at")).Format(time.RFC3339Nano)
}

func TestDemoRuns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const customers = 3000
	res := mustSluice(t, "demo", "--messages", "20000", "--customers", strconv.Itoa(customers), "--dir", dir)
	_, outcome := sample.CustomerChanges(customers, 4)
	for _, want := range []string{"loaded 20000 rows into orders", "6 dead letters", "undecodable", "missing_field", "type_mismatch",
		fmt.Sprintf("customers holds %d rows", len(outcome.Left)), fmt.Sprintf("customers_history %d versions", outcome.Versions),
		fmt.Sprintf("%d arrive in their partition after a newer change", outcome.Late)} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("demo output lacks %q:\n%s", want, res.stdout)
		}
	}
	ids := readIDs(t, filepath.Join(dir, "data", "orders"), "order_id")
	checkExactlyOnce(t, ids, 1, 20001)

	// The SCD type 1 target holds each customer not deleted, as its last
	// change left it, whatever order the changes arrived in.
	if outcome.Late == 0 || len(outcome.Left) == customers {
		t.Fatalf("the changes have %d late and no delete: nothing to show", outcome.Late)
	}
	table := filepath.Join(dir, "data", "customers")
	cols := map[string][]parquet.Value{}
	for _, c := range []string{"id", "name", "email", "tier", "city"} {
		cols[c] = readColumn(t, table, c)
	}
	text := func(v parquet.Value) string {
		if v.IsNull() {
			return ""
		}
		return v.String()
	}
	got := map[int64]sample.Customer{}
	for i, id := range cols["id"] {
		got[id.Int64()] = sample.Customer{ID: id.Int64(), Name: text(cols["name"][i]), Email: text(cols["email"][i]), Tier: text(cols["tier"][i]), City: text(cols["city"][i])}
	}
	if len(cols["id"]) != len(got) || !maps.Equal(got, outcome.Left) {
		t.Errorf("customers holds %d rows (%d keys), want %d customers as their last change left them", len(cols["id"]), len(got), len(outcome.Left))
		for id, c := range outcome.Left {
			if got[id] != c {
				t.Fatalf("customer %d: got %+v, want %+v", id, got[id], c)
			}
		}
	}
	if n := len(readColumn(t, filepath.Join(dir, "data", "customers_history"), "id")); n != outcome.Versions {
		t.Errorf("customers_history holds %d versions, want %d", n, outcome.Versions)
	}
}

// TestDevMode checks that update --dev writes into a fresh dataset of its
// own, named on stdout, and leaves the spec's destination alone.
func TestDevMode(t *testing.T) {
	t.Parallel()
	forEachDestination(t, func(t *testing.T, d destination) {
		b := startBroker(t, map[string]int32{"events": 1})
		produce(t, b.Addr(), "events", 1, 6)
		spec := writeSpec(t, d, b.Addr(), 100)
		res := mustSluice(t, "update", "--dev", "-f", spec)
		first, _, _ := strings.Cut(res.stdout, "\n")
		_, dataset, ok := strings.Cut(strings.TrimSpace(first), "dev mode: writing into ")
		if !ok || dataset == "" {
			t.Fatalf("stdout %q does not name the dev dataset", res.stdout)
		}
		switch d := d.(type) {
		case localDest:
			if !strings.HasPrefix(dataset, "data_") {
				t.Fatalf("dev dataset %q, want data_<time>", dataset)
			}
			ids := readIDs(t, filepath.Join(filepath.Dir(spec), dataset, "events"), "id")
			checkExactlyOnce(t, ids, 1, 6)
			if _, err := os.Stat(filepath.Join(filepath.Dir(spec), "data")); !os.IsNotExist(err) {
				t.Fatalf("the spec's destination folder: %v, want none", err)
			}
		case *clickHouseDest:
			if !strings.HasPrefix(dataset, d.db+"_") {
				t.Fatalf("dev dataset %q, want %s_<time>", dataset, d.db)
			}
			var n uint64
			d.queryRow(t, []any{&n}, "SELECT count() FROM "+dataset+".events")
			if n != 5 {
				t.Fatalf("%s.events holds %d rows, want 5", dataset, n)
			}
			d.queryRow(t, []any{&n}, "SELECT count() FROM system.tables WHERE database = ? AND name = 'events'", d.db)
			if n != 0 {
				t.Fatalf("the spec's database has an events table")
			}
			t.Cleanup(func() { d.conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+dataset) })
		}
	})
}

// TestStaticBuildVersion builds sluice as the release does (no cgo: one
// static binary for any Linux image) and runs `version`.
func TestStaticBuildVersion(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "sluice")
	build := exec.Command("go", "build", "-buildvcs=auto", "-trimpath", "-o", bin, "../cmd/sluice")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if v := string(out); !strings.HasPrefix(v, "sluice ") || !strings.Contains(v, "(commit ") || !strings.Contains(v, runtime.Version()) {
		t.Errorf("version printed %q", v)
	}
}

// TestUpdateSummaryAndRunLog checks what people read: update ends with a
// line per flow on stdout, and run logs what it committed periodically,
// with readable values.
func TestUpdateSummaryAndRunLog(t *testing.T) {
	t.Parallel()
	d := newDestination(t, "local")
	b := startBroker(t, map[string]int32{"events": 2})
	produce(t, b.Addr(), "events", 0, 300)
	produceMsgs(t, b.Addr(), "events", []consumer.Message{{Value: []byte("oops"), Partition: 0}})
	spec := writeSpec(t, d, b.Addr(), 100)
	res := mustSluice(t, "update", "-f", spec, "--log-format", "json")
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "FLOW") || !regexp.MustCompile(`^events_in\s+events\s+\d+\s+300\s+1\s+0\s+\S+$`).MatchString(lines[1]) {
		t.Errorf("update's summary:\n%s", res.stdout)
	}
	if strings.Contains(res.stderr, "map[") || regexp.MustCompile(`"elapsed":\d`).MatchString(res.stderr) {
		t.Errorf("log values are not readable (Go maps, integer durations):\n%s", tail(res.stderr, 3000))
	}
	produce(t, b.Addr(), "events", 300, 400)
	cmd, out := start(t, append([]string{"run", "-f", spec, "--log-every", "300ms"}, fastArgs...)...)
	waitFor(t, 30*time.Second, "a loads-committed line", func() bool {
		return regexp.MustCompile(`msg="loads committed".* flow=events_in loads=\d+ rows=\d+ dead_letters=0 last=300ms lag=\d+`).MatchString(out.String())
	})
	stop(t, cmd, out)
}

// TestWait waits for a pipeline to catch up: at once after an update,
// exit 3 naming the partition behind when messages came since, and 0 once
// a run loaded them.
func TestWait(t *testing.T) {
	t.Parallel()
	forEachDestination(t, func(t *testing.T, d destination) {
		b := startBroker(t, map[string]int32{"events": 2})
		produce(t, b.Addr(), "events", 0, 200)
		spec := writeSpec(t, d, b.Addr(), 100)
		mustSluice(t, "update", "-f", spec)
		if res := mustSluice(t, "wait", "-f", spec, "--timeout", "5s"); !strings.HasPrefix(res.stdout, "caught up after ") {
			t.Errorf("wait after update: %q", res.stdout)
		}
		produce(t, b.Addr(), "events", 200, 300)
		res := sluice(t, "wait", "-f", spec, "--timeout", "1s", "--interval", "200ms", "--format", "json")
		var rep struct {
			CaughtUp bool `json:"caught_up"`
			Flows    []struct {
				Flow   string
				Behind []string
			}
		}
		if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil || res.code != 3 || rep.CaughtUp || len(rep.Flows) != 1 ||
			!strings.Contains(strings.Join(rep.Flows[0].Behind, ";"), "partition events/") {
			t.Errorf("wait with 100 new messages: exit %d, %+v (%v)\n%s", res.code, rep, err, res.stderr)
		}
		cmd, out := start(t, append([]string{"run", "-f", spec}, fastArgs...)...)
		if res := sluice(t, "wait", "-f", spec, "--timeout", "1m", "--interval", "200ms"); res.code != 0 {
			t.Errorf("wait during a run: exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
		if rows, _ := d.count(t, spec, "events", "id"); rows != 300 {
			t.Errorf("wait returned with %d of 300 rows loaded", rows)
		}
		stop(t, cmd, out)
		if res := sluice(t, "wait", "-f", spec, "--flow", "nope"); res.code != 2 {
			t.Errorf("wait --flow nope: exit %d, want 2", res.code)
		}
	})
}

// TestDevKafkaSchemaRegistry serves the in-memory schema registry beside
// the dev broker: a schema registered over its REST API is served by id.
func TestDevKafkaSchemaRegistry(t *testing.T) {
	t.Parallel()
	cmd, out := start(t, "dev-kafka", "--addr", "127.0.0.1:0", "--schema-registry", "127.0.0.1:0")
	var url string
	waitFor(t, 20*time.Second, "the registry's address", func() bool {
		m := regexp.MustCompile(`schema registry \(in memory\) at (http://\S+)`).FindStringSubmatch(out.String())
		if m != nil {
			url = m[1]
		}
		return m != nil
	})
	body := `{"schema": "{\"type\":\"record\",\"name\":\"R\",\"fields\":[{\"name\":\"id\",\"type\":\"long\"}]}"}`
	resp, err := http.Post(url+"/subjects/orders-value/versions", "application/vnd.schemaregistry.v1+json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var reg struct{ ID int }
	if err := json.NewDecoder(resp.Body).Decode(&reg); err != nil || resp.StatusCode != http.StatusOK || reg.ID == 0 {
		t.Fatalf("register: %d %+v %v", resp.StatusCode, reg, err)
	}
	resp.Body.Close()
	code, got := get(fmt.Sprintf("%s/schemas/ids/%d", url, reg.ID))
	if code != http.StatusOK || !strings.Contains(got, `\"name\":\"R\"`) {
		t.Errorf("GET /schemas/ids/%d: %d %s", reg.ID, code, got)
	}
	stop(t, cmd, out)
}
