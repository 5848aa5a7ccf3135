package integration

import (
	"bufio"
	"encoding/json"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/consumer"
)

func tableDir(specPath, table string) string {
	return filepath.Join(filepath.Dir(specPath), "data", table)
}

// loads returns the rows of _sluice_loads as decoded JSON objects.
func loads(t testing.TB, specPath string) []map[string]any {
	t.Helper()
	return jsonl(t, mustSluice(t, "show", "-f", specPath, "_sluice_loads", "--format", "jsonl").stdout)
}

func jsonl(t testing.TB, out string) []map[string]any {
	t.Helper()
	var rows []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("jsonl line %q: %v", sc.Text(), err)
		}
		rows = append(rows, m)
	}
	return rows
}

func TestUpdateWritesEachMessageOnce(t *testing.T) {
	t.Parallel()
	const n = 100_000
	b := startBroker(t, map[string]int32{"events": 3})
	produce(t, b.Addr(), "events", 0, n)
	spec := writeSpec(t, b.Addr(), 20_000)

	mustSluice(t, "update", "-f", spec)
	checkExactlyOnce(t, readIDs(t, tableDir(spec, "events"), "id"), 0, n)
	first := loads(t, spec)
	if len(first) == 0 {
		t.Fatal("no loads in the ledger")
	}
	var rows float64
	for _, l := range first {
		rows += l["rows"].(float64)
	}
	if rows != n {
		t.Fatalf("ledger counts %v rows, want %d", rows, n)
	}

	// Nothing new: a second update writes nothing.
	mustSluice(t, "update", "-f", spec)
	checkExactlyOnce(t, readIDs(t, tableDir(spec, "events"), "id"), 0, n)
	if again := loads(t, spec); len(again) != len(first) {
		t.Fatalf("second update committed %d new loads, want 0", len(again)-len(first))
	}

	// New messages: only they are written.
	produce(t, b.Addr(), "events", n, n+500)
	mustSluice(t, "update", "-f", spec)
	checkExactlyOnce(t, readIDs(t, tableDir(spec, "events"), "id"), 0, n+500)
}

func TestRunStoppedBySIGTERMLosesNothing(t *testing.T) {
	t.Parallel()
	const n = 40_000
	b := startBroker(t, map[string]int32{"events": 3})
	produce(t, b.Addr(), "events", 0, n/2)
	spec := writeSpec(t, b.Addr(), 2_000)

	cmd, out := start(t, append([]string{"run", "-f", spec}, fastArgs...)...)
	waitFor(t, 30*time.Second, "a first load", func() bool { return len(loads(t, spec)) > 0 })
	produce(t, b.Addr(), "events", n/2, n)
	time.Sleep(300 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after SIGTERM: %v\n%s", err, tail(out.String(), 4000))
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("run did not stop within 30s of SIGTERM\n%s", tail(out.String(), 4000))
	}

	// What the run committed is exactly what its ledger says it read.
	var ledgerRows float64
	for _, l := range loads(t, spec) {
		ledgerRows += l["rows"].(float64)
	}
	got := readIDs(t, tableDir(spec, "events"), "id")
	if float64(len(got)) != ledgerRows {
		t.Fatalf("table holds %d rows, ledger says %v", len(got), ledgerRows)
	}
	// And an update afterwards completes the rest, each message once.
	mustSluice(t, "update", "-f", spec)
	checkExactlyOnce(t, readIDs(t, tableDir(spec, "events"), "id"), 0, n)
}

func TestKilledRunsThenUpdateGiveEachMessageOnce(t *testing.T) {
	t.Parallel()
	const n = 60_000
	b := startBroker(t, map[string]int32{"events": 3})
	spec := writeSpec(t, b.Addr(), 1_500)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	produced := 0
	for round := range 5 {
		next := produced + n/5
		produce(t, b.Addr(), "events", produced, next)
		produced = next
		cmd, _ := start(t, append([]string{"run", "-f", spec, "--log-level", "warn"}, fastArgs...)...)
		time.Sleep(time.Duration(300+rng.IntN(2500)) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		cmd.Wait()
		t.Logf("round %d: killed run after producing %d", round, produced)
	}
	mustSluice(t, append([]string{"update", "-f", spec}, fastArgs...)...)
	checkExactlyOnce(t, readIDs(t, tableDir(spec, "events"), "id"), 0, n)
}

func TestUpdateRefusedWhileRunAlive(t *testing.T) {
	t.Parallel()
	b := startBroker(t, map[string]int32{"events": 1})
	produce(t, b.Addr(), "events", 0, 10)
	spec := writeSpec(t, b.Addr(), 100)
	cmd, out := start(t, append([]string{"run", "-f", spec}, fastArgs...)...)
	waitFor(t, 30*time.Second, "a first load", func() bool { return len(loads(t, spec)) > 0 })

	res := sluice(t, append([]string{"update", "-f", spec}, fastArgs...)...)
	if res.code != 1 || !strings.Contains(res.stderr, "alive") {
		t.Fatalf("update during run: exit %d, stderr %q; want exit 1 saying a run is alive", res.code, res.stderr)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("run: %v\n%s", err, tail(out.String(), 3000))
	}
	// Once the run is gone, update runs.
	mustSluice(t, append([]string{"update", "-f", spec}, fastArgs...)...)
	checkExactlyOnce(t, readIDs(t, tableDir(spec, "events"), "id"), 0, 10)
}

func TestBadRecordsGoToDeadLettersAndTheBatchLands(t *testing.T) {
	t.Parallel()
	b := startBroker(t, map[string]int32{"events": 1})
	msgs := []consumer.Message{
		{Value: event(1), Partition: 0},
		{Value: []byte(`{"id": 2, "name": "broken`), Partition: 0},
		{Value: []byte(`{"id": "three", "name": "x"}`), Partition: 0},
		{Value: []byte(`{"name": "no id"}`), Partition: 0},
		{Value: []byte(`{"id": 5, "amount": "1.234"}`), Partition: 0},
		{Value: []byte(`{"id": 6, "at": "not a time"}`), Partition: 0},
		{Value: event(7), Partition: 0},
	}
	produceMsgs(t, b.Addr(), "events", msgs)
	spec := writeSpec(t, b.Addr(), 1000)
	mustSluice(t, "update", "-f", spec)

	if got := readIDs(t, tableDir(spec, "events"), "id"); len(got) != 2 || got[0] != 1 || got[1] != 7 {
		t.Fatalf("target ids %v, want [1 7]", got)
	}
	dls := jsonl(t, mustSluice(t, "show", "-f", spec, "_sluice_dead_letters", "--format", "jsonl").stdout)
	want := map[string]struct{ reason, field string }{
		"0/1": {"undecodable", ""},
		"0/2": {"type_mismatch", "id"},
		"0/3": {"missing_field", "id"},
		"0/4": {"type_mismatch", "amount"},
		"0/5": {"type_mismatch", "at"},
	}
	if len(dls) != len(want) {
		t.Fatalf("%d dead letters, want %d: %v", len(dls), len(want), dls)
	}
	for _, d := range dls {
		pos, _ := d["position"].(string)
		w, ok := want[pos]
		if !ok {
			t.Fatalf("unexpected dead letter at %q: %v", pos, d)
		}
		if d["reason"] != w.reason {
			t.Errorf("%s: reason %v, want %s", pos, d["reason"], w.reason)
		}
		if w.field != "" && !strings.Contains(d["error"].(string), w.field) {
			t.Errorf("%s: error %q does not name field %q", pos, d["error"], w.field)
		}
		if d["source"] != "events" || d["flow"] != "events_in" || d["target"] != "events" || d["pipeline"] != "it" {
			t.Errorf("%s: wrong provenance %v", pos, d)
		}
		if d["payload"] == nil {
			t.Errorf("%s: payload missing", pos)
		}
	}
	// The dead letters came in the same load as the batch's rows.
	ls := loads(t, spec)
	if len(ls) != 1 || ls[0]["rows"].(float64) != 2 || ls[0]["dead_letters"].(float64) != 5 {
		t.Fatalf("loads %v, want one load of 2 rows and 5 dead letters", ls)
	}
}

func waitFor(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %s", what, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
