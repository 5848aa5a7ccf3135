package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/sluicehq/sluice/consumer"
)

// historyTable and onceFlows are what the events pipeline (eventsSpec)
// gains: two once-flows, hist reading the files under hist/ into a table of
// its own, history, and old_events reading old events from old/ into
// events, the live flow's target. onceFlows' argument: batch rows.
const (
	historyTable = `  - name: history
    columns:
` + backfillColumns
	onceFlows = `  - name: hist
    target: history
    kind: append
    once: true
    source: {files: {path: "hist/**", format: parquet}}
    batch: {rows: %[1]d}
  - name: old_events
    target: events
    kind: append
    once: true
    source: {files: {path: "old/*.parquet"}}
    batch: {rows: %[1]d}
`
)

// oldEvent is a row of old/, an event as the events table holds it.
type oldEvent struct {
	ID     int64     `parquet:"id"`
	Name   *string   `parquet:"name,optional"`
	Amount int64     `parquet:"amount,decimal(2:10)"`
	At     time.Time `parquet:"at,timestamp(microsecond)"`
}

// oldEventsFrom is the first id of the old events, above every produced one.
const oldEventsFrom = 1_000_000

// writeOldEvents writes files of rows old events each into dir/old, ids
// from oldEventsFrom on.
func writeOldEvents(t testing.TB, dir string, files, rows int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "old"), 0o755); err != nil {
		t.Fatal(err)
	}
	for f := range files {
		evs := make([]oldEvent, rows)
		for i := range evs {
			id := int64(oldEventsFrom + f*rows + i)
			name := "old-" + strconv.FormatInt(id, 10)
			evs[i] = oldEvent{ID: id, Name: &name, Amount: id % 10_000, At: backfillEpoch.Add(time.Duration(id) * time.Second)}
		}
		if err := parquet.WriteFile(filepath.Join(dir, "old", fmt.Sprintf("e-%02d.parquet", f)), evs); err != nil {
			t.Fatal(err)
		}
	}
}

// producer produces events with consecutive ids to a topic in the
// background, a few hundred every 50 ms, until stopped.
type producer struct {
	addr, topic string
	stopc       chan struct{}
	done        chan struct{}
	once        sync.Once
	mu          sync.Mutex
	next        int
	err         error
}

// startProducer starts producing ids from on; a producer not stopped
// stops when the test ends.
func startProducer(t testing.TB, addr, topic string, from int) *producer {
	p := &producer{addr: addr, topic: topic, next: from, stopc: make(chan struct{}), done: make(chan struct{})}
	t.Cleanup(func() { p.halt() })
	go func() {
		defer close(p.done)
		for {
			select {
			case <-p.stopc:
				return
			case <-time.After(50 * time.Millisecond):
			}
			p.mu.Lock()
			from := p.next
			p.mu.Unlock()
			msgs := make([]consumer.Message, 300)
			for i := range msgs {
				id := from + i
				msgs[i] = consumer.Message{Key: []byte(strconv.Itoa(id)), Value: event(id), Partition: -1}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := consumer.Produce(ctx, []string{p.addr}, p.topic, msgs)
			cancel()
			p.mu.Lock()
			if err != nil {
				p.err = err
				p.mu.Unlock()
				return
			}
			p.next = from + len(msgs)
			p.mu.Unlock()
		}
	}()
	return p
}

// halt stops producing and waits for the last write.
func (p *producer) halt() {
	p.once.Do(func() { close(p.stopc) })
	<-p.done
}

// stop stops producing and returns the number of events produced in all.
func (p *producer) stop(t testing.TB) int {
	t.Helper()
	p.halt()
	if p.err != nil {
		t.Fatalf("produce: %v", p.err)
	}
	return p.next
}

// ledgerFlows returns the flow of every committed load, in commit order
// (`sluice show` sorts _sluice_loads by committed_at).
func ledgerFlows(t testing.TB, spec string) []string {
	t.Helper()
	var out []string
	for _, l := range jsonl(t, mustSluice(t, "show", "-f", spec, "_sluice_loads", "--format", "jsonl").stdout) {
		flow, _ := l["flow"].(string)
		out = append(out, flow)
	}
	return out
}

// TestOnceFlowsAddedToRunningPipeline runs the events pipeline's live flow
// while events are produced, stops it, adds two once-flows of files (one
// into a table of its own, one into the live flow's target) and runs it
// again while still producing: the once-flows complete, their rows land
// exactly once, and the live flow loads new events all along. A third run
// reads no file again; at the end every event is in the target once.
func TestOnceFlowsAddedToRunningPipeline(t *testing.T) {
	t.Parallel()
	const histFiles, histRows, oldFiles, oldRows = 10, 3_000, 5, 1_000
	forEachDestination(t, func(t *testing.T, d destination) {
		b := startBroker(t, map[string]int32{"events": 3})
		produce(t, b.Addr(), "events", 0, 2_000)
		spec := writeSpec(t, d, b.Addr(), 2_000)
		dir := filepath.Dir(spec)
		runArgs := append([]string{"run", "-f", spec, "--log-level", "debug"}, fastArgs...)

		// The live flow alone, while events are produced.
		cmd, out := start(t, runArgs...)
		waitFor(t, 30*time.Second, "a first load", func() bool { return len(d.loads(t, spec)) > 0 })
		prod := startProducer(t, b.Addr(), "events", 2_000)
		time.Sleep(time.Second)
		stop(t, cmd, out)

		// Add the once-flows and run again, still producing.
		files := writeBackfillFiles(t, dir, "hist", histFiles, histRows, 1_000, histFiles/2)
		writeOldEvents(t, dir, oldFiles, oldRows)
		text, err := os.ReadFile(spec)
		if err != nil {
			t.Fatal(err)
		}
		// Small chunks locally, where loads are cheap, so that the
		// once-flows run long enough to overlap the live flow's loads.
		onceBatch := 250
		if d.name() == "clickhouse" {
			onceBatch = 1_000
		}
		grown := strings.Replace(string(text), "flows:\n", historyTable+"flows:\n", 1) + fmt.Sprintf(onceFlows, onceBatch)
		if err := os.WriteFile(spec, []byte(grown), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd, out = start(t, runArgs...)
		waitFor(t, 2*time.Minute, "complete once-flows", func() bool {
			return statusOf(t, spec, "hist").Once == "complete" && statusOf(t, spec, "old_events").Once == "complete"
		})
		// The live flow went on loading while the once-flows ran: some of
		// its loads were committed between their first and last loads.
		order := ledgerFlows(t, spec)
		once := func(f string) bool { return f != "events_in" }
		first, last := slices.IndexFunc(order, once), len(order)-1
		for last > 0 && !once(order[last]) {
			last--
		}
		if live := len(slices.DeleteFunc(slices.Clone(order[first:last+1]), once)); live == 0 {
			t.Errorf("the live flow committed no load while the once-flows ran (%d loads of theirs)", last+1-first)
		} else {
			t.Logf("the live flow committed %d loads among the once-flows' %d", live, last+1-live-first)
		}
		// All produced events land, while the run goes on.
		n := prod.stop(t)
		waitFor(t, time.Minute, "every event loaded", func() bool { return statusOf(t, spec, "events_in").Rows >= int64(n) })
		stop(t, cmd, out)
		checkLiveAndOld(t, d, spec, n, oldFiles*oldRows)
		checkBackfill(t, d, spec, "history", false, backfillRows(files, false))
		hist, old := statusOf(t, spec, "hist"), statusOf(t, spec, "old_events")
		if hist.FilesDone != histFiles || hist.Rows != histFiles*histRows || old.FilesDone != oldFiles || old.Rows != oldFiles*oldRows {
			t.Fatalf("status: hist %+v, old_events %+v; want all %d and %d files read", hist, old, histFiles, oldFiles)
		}

		// A third run reads no file again and loads the new events.
		cmd, out = start(t, runArgs...)
		waitFor(t, 30*time.Second, "partitions assigned", func() bool { return strings.Contains(out.String(), "partitions assigned") })
		produce(t, b.Addr(), "events", n, n+1_000)
		waitFor(t, time.Minute, "the new events loaded", func() bool { return statusOf(t, spec, "events_in").Rows >= int64(n+1_000) })
		stop(t, cmd, out)
		if log := out.String(); strings.Contains(log, "reading files") || strings.Count(log, "once-flow already complete") != 2 {
			t.Fatalf("the third run did not skip both complete once-flows:\n%s", tail(log, 4000))
		}
		if h, o := statusOf(t, spec, "hist"), statusOf(t, spec, "old_events"); h.Loads != hist.Loads || o.Loads != old.Loads {
			t.Fatalf("the third run committed loads of the once-flows: hist %d to %d, old_events %d to %d", hist.Loads, h.Loads, old.Loads, o.Loads)
		}
		checkLiveAndOld(t, d, spec, n+1_000, oldFiles*oldRows)
		checkNoLeftovers(t, d)
	})
}

// checkLiveAndOld fails unless the events target holds the produced events
// 0..n-1 and the old events of the files, each exactly once.
func checkLiveAndOld(t testing.TB, d destination, spec string, n, old int) {
	t.Helper()
	ids := d.ids(t, spec, "events", "id")
	split, _ := slices.BinarySearch(ids, oldEventsFrom)
	checkExactlyOnce(t, ids[:split], 0, n)
	checkExactlyOnce(t, ids[split:], oldEventsFrom, oldEventsFrom+old)
	checkCount(t, d, spec, int64(n+old))
	if dls := d.deadLetters(t, spec); len(dls) > 0 {
		t.Fatalf("%d dead letters, want none; first: %+v", len(dls), dls[0])
	}
}
