package integration

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A replay of dead letters killed with SIGKILL while it loads them, then
// run again: each dead letter lands in the target exactly once, and none is
// pending at the end.

const replayKillSpec = `pipeline: dlkill
kafka:
  brokers: [%s]
  session_timeout: 2s
destination: %s
tables:
  - name: events
    columns:
      - {name: id, type: int64}
      - {name: name, type: string, nullable: true}
      - {name: amount, type: "decimal(10,2)", nullable: true}
      - {name: at, type: timestamp, nullable: true}
flows:
  - name: events_in
    target: events
    kind: append
    source: {kafka: {topic: events, format: json}}
    batch: {rows: 10, wait: 200ms}
%s
`

func TestDeadLettersReplayKilledLoadsEachOnce(t *testing.T) {
	forEachDestination(t, func(t *testing.T, d destination) {
		const n = 600
		b := startBroker(t, map[string]int32{"events": 2})
		produce(t, b.Addr(), "events", 0, n)
		// Every event breaks the first spec's expectation.
		spec := writeSpecText(t, fmt.Sprintf(replayKillSpec, b.Addr(), d.yaml(),
			"    expectations:\n      - {name: negative, expr: \"id < 0\", on_violation: drop}"))
		mustSluice(t, append([]string{"update", "-f", spec}, fastArgs...)...)
		if ids := d.ids(t, spec, "events", "id"); len(ids) != 0 {
			t.Fatalf("%d rows before the replay, want 0", len(ids))
		}
		if got := pendingCount(t, spec); got != n {
			t.Fatalf("%d dead letters pending, want %d", got, n)
		}
		// The fix: no such expectation.
		if err := os.WriteFile(spec, fmt.Appendf(nil, replayKillSpec, b.Addr(), d.yaml(), ""), 0o644); err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
		for kill := range 3 {
			before := len(d.loads(t, spec))
			cmd, out := start(t, append([]string{"dead-letters", "replay", "-f", spec}, fastArgs...)...)
			waitFor(t, time.Minute, "a replay load", func() bool {
				return len(d.loads(t, spec)) > before || cmd.ProcessState != nil || strings.Contains(out.String(), "replayed ")
			})
			time.Sleep(time.Duration(rng.IntN(150)) * time.Millisecond)
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			cmd.Wait()
			ids := d.ids(t, spec, "events", "id")
			seen := map[int64]bool{}
			for _, id := range ids {
				if seen[id] {
					t.Fatalf("kill %d: id %d loaded twice", kill+1, id)
				}
				seen[id] = true
			}
			t.Logf("kill %d: %d of %d replayed", kill+1, len(ids), n)
		}
		res := mustSluice(t, append([]string{"dead-letters", "replay", "-f", spec}, fastArgs...)...)
		if !strings.HasPrefix(res.stdout, "replayed ") || !strings.Contains(res.stdout, "still failing 0") {
			t.Fatalf("replay output: %q", res.stdout)
		}
		checkExactlyOnce(t, d.ids(t, spec, "events", "id"), 0, n)
		if got := pendingCount(t, spec); got != 0 {
			t.Fatalf("%d dead letters pending after the replay, want 0", got)
		}
		// Once more: nothing to do, nothing loaded.
		res = mustSluice(t, append([]string{"dead-letters", "replay", "-f", spec}, fastArgs...)...)
		if !strings.HasPrefix(res.stdout, "replayed 0, still failing 0") {
			t.Fatalf("second replay output: %q", res.stdout)
		}
		checkExactlyOnce(t, d.ids(t, spec, "events", "id"), 0, n)
		// The flow's positions did not move: an update reads nothing again.
		mustSluice(t, append([]string{"update", "-f", spec}, fastArgs...)...)
		checkExactlyOnce(t, d.ids(t, spec, "events", "id"), 0, n)
	})
}

// pendingCount counts the pending dead letters dead-letters list reports.
func pendingCount(t testing.TB, spec string) int {
	t.Helper()
	res := mustSluice(t, "dead-letters", "list", "--json", "-f", spec)
	var dls []map[string]any
	if err := json.Unmarshal([]byte(res.stdout), &dls); err != nil {
		t.Fatalf("dead-letters list --json: %v\n%s", err, res.stdout)
	}
	return len(dls)
}
