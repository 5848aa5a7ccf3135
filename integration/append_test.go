package integration

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/consumer"
)

func TestUpdateWritesEachMessageOnce(t *testing.T) {
	t.Parallel()
	forEachDestination(t, func(t *testing.T, d destination) {
		const n = 100_000
		b := startBroker(t, map[string]int32{"events": 3})
		produce(t, b.Addr(), "events", 0, n)
		spec := writeSpec(t, d, b.Addr(), 20_000)

		mustSluice(t, "update", "-f", spec)
		checkExactlyOnce(t, d.ids(t, spec, "events", "id"), 0, n)
		checkCount(t, d, spec, n)
		first := d.loads(t, spec)
		if len(first) == 0 {
			t.Fatal("no loads in the ledger")
		}
		if rows := sumRows(first); rows != n {
			t.Fatalf("ledger counts %v rows, want %d", rows, n)
		}
		checkNoLeftovers(t, d)

		// Nothing new: a second update writes nothing.
		mustSluice(t, "update", "-f", spec)
		checkExactlyOnce(t, d.ids(t, spec, "events", "id"), 0, n)
		if again := d.loads(t, spec); len(again) != len(first) {
			t.Fatalf("second update committed %d new loads, want 0", len(again)-len(first))
		}

		// New messages: only they are written.
		produce(t, b.Addr(), "events", n, n+500)
		mustSluice(t, "update", "-f", spec)
		checkExactlyOnce(t, d.ids(t, spec, "events", "id"), 0, n+500)
		checkCount(t, d, spec, n+500)
		checkNoLeftovers(t, d)
	})
}

func TestRunStoppedBySIGTERMLosesNothing(t *testing.T) {
	t.Parallel()
	forEachDestination(t, func(t *testing.T, d destination) {
		const n = 40_000
		b := startBroker(t, map[string]int32{"events": 3})
		produce(t, b.Addr(), "events", 0, n/2)
		spec := writeSpec(t, d, b.Addr(), 2_000)

		cmd, out := start(t, append([]string{"run", "-f", spec}, fastArgs...)...)
		waitFor(t, 30*time.Second, "a first load", func() bool { return len(d.loads(t, spec)) > 0 })
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
		ledgerRows := sumRows(d.loads(t, spec))
		got := d.ids(t, spec, "events", "id")
		if int64(len(got)) != ledgerRows {
			t.Fatalf("table holds %d rows, ledger says %v", len(got), ledgerRows)
		}
		checkNoLeftovers(t, d)
		// And an update afterwards completes the rest, each message once.
		mustSluice(t, "update", "-f", spec)
		checkExactlyOnce(t, d.ids(t, spec, "events", "id"), 0, n)
		checkCount(t, d, spec, n)
	})
}

func TestKilledRunsThenUpdateGiveEachMessageOnce(t *testing.T) {
	t.Parallel()
	forEachDestination(t, func(t *testing.T, d destination) {
		const n = 60_000
		b := startBroker(t, map[string]int32{"events": 3})
		spec := writeSpec(t, d, b.Addr(), 1_500)
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
		produced := 0
		for round := range 5 {
			next := produced + n/5
			produce(t, b.Addr(), "events", produced, next)
			produced = next
			killed := killRunAfter(t, spec, time.Duration(300+rng.IntN(2500))*time.Millisecond)
			t.Logf("round %d: killed run %s after its start, after producing %d", round, killed.Round(time.Millisecond), produced)
		}
		reapDeadMembers(t, b.Addr(), itGroup)
		mustSluice(t, append([]string{"update", "-f", spec}, fastArgs...)...)
		checkExactlyOnce(t, d.ids(t, spec, "events", "id"), 0, n)
		checkCount(t, d, spec, n)
		checkLeftoversRecovered(t, d, spec)
	})
}

func TestUpdateRefusedWhileRunAlive(t *testing.T) {
	t.Parallel()
	forEachDestination(t, func(t *testing.T, d destination) {
		b := startBroker(t, map[string]int32{"events": 1})
		produce(t, b.Addr(), "events", 0, 10)
		spec := writeSpec(t, d, b.Addr(), 100)
		cmd, out := start(t, append([]string{"run", "-f", spec}, fastArgs...)...)
		waitFor(t, 30*time.Second, "a first load", func() bool { return len(d.loads(t, spec)) > 0 })

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
		checkExactlyOnce(t, d.ids(t, spec, "events", "id"), 0, 10)
	})
}

func TestBadRecordsGoToDeadLettersAndTheBatchLands(t *testing.T) {
	t.Parallel()
	forEachDestination(t, func(t *testing.T, d destination) {
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
		spec := writeSpec(t, d, b.Addr(), 1000)
		mustSluice(t, "update", "-f", spec)

		if got := d.ids(t, spec, "events", "id"); len(got) != 2 || got[0] != 1 || got[1] != 7 {
			t.Fatalf("target ids %v, want [1 7]", got)
		}
		dls := d.deadLetters(t, spec)
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
		for _, dl := range dls {
			w, ok := want[dl.position]
			if !ok {
				t.Fatalf("unexpected dead letter at %q: %+v", dl.position, dl)
			}
			if dl.reason != w.reason {
				t.Errorf("%s: reason %v, want %s", dl.position, dl.reason, w.reason)
			}
			if w.field != "" && !strings.Contains(dl.err, w.field) {
				t.Errorf("%s: error %q does not name field %q", dl.position, dl.err, w.field)
			}
			if dl.source != "events" || dl.flow != "events_in" || dl.target != "events" || dl.pipeline != "it" {
				t.Errorf("%s: wrong provenance %+v", dl.position, dl)
			}
			if !dl.payload {
				t.Errorf("%s: payload missing", dl.position)
			}
		}
		// sluice show lists the same dead letters.
		if shown := jsonl(t, mustSluice(t, "show", "-f", spec, "_sluice_dead_letters", "--format", "jsonl").stdout); len(shown) != len(dls) {
			t.Errorf("show lists %d dead letters, the destination holds %d", len(shown), len(dls))
		}
		// The first load wrote the pipeline's first schema version.
		vs := jsonl(t, mustSluice(t, "show", "-f", spec, "_sluice_version", "--format", "jsonl").stdout)
		if len(vs) != 1 || fmt.Sprint(vs[0]["version"]) != "1" || !strings.Contains(fmt.Sprint(vs[0]["schema"]), `"name":"events"`) {
			t.Errorf("show _sluice_version: %v, want version 1 with table events", vs)
		}
		if out := mustSluice(t, "status", "-f", spec).stdout; !strings.Contains(out, "schema version 1 (") {
			t.Errorf("status does not show the schema version:\n%s", out)
		}
		// The dead letters came in the same load as the batch's rows.
		ls := d.loads(t, spec)
		if len(ls) != 1 || ls[0].rows != 2 || ls[0].deadLetters != 5 {
			t.Fatalf("loads %+v, want one load of 2 rows and 5 dead letters", ls)
		}
	})
}

// checkCount fails unless the events target holds n rows of n distinct ids.
func checkCount(t testing.TB, d destination, spec string, n int64) {
	t.Helper()
	if rows, distinct := d.count(t, spec, "events", "id"); rows != n || distinct != n {
		t.Fatalf("events: count %d, distinct ids %d; want %d each", rows, distinct, n)
	}
}

// checkNoLeftovers fails when a ClickHouse database still holds staging
// tables, load markers or locks once every process stopped.
func checkNoLeftovers(t testing.TB, d destination) {
	t.Helper()
	if ch, ok := d.(*clickHouseDest); ok {
		if left := ch.leftovers(t); len(left) > 0 {
			t.Fatalf("objects of the delivery protocol left in %s: %v", ch.db, left)
		}
	}
}

// checkLeftoversRecovered is checkNoLeftovers after failures (killed
// processes, a killed server). An object whose owner is unknown, such as a
// staging table whose CREATE's answer was lost with the server, or one whose
// load's marker was dropped just before its process was killed, is removed
// by recovery only once it is older than the grace period (30 s): then the
// test waits past it and runs an update, whose recovery must remove
// everything. The target's content is checked before, so a leftover here
// never held rows that count.
func checkLeftoversRecovered(t testing.TB, d destination, spec string) {
	t.Helper()
	ch, ok := d.(*clickHouseDest)
	if !ok {
		return
	}
	left := ch.leftovers(t)
	if len(left) == 0 {
		return
	}
	t.Logf("objects left after the failures, waiting out the grace period: %v", left)
	time.Sleep(31 * time.Second)
	mustSluice(t, append([]string{"update", "-f", spec}, fastArgs...)...)
	checkNoLeftovers(t, d)
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
