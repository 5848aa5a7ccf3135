package integration

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/sinks/clickhouse/chtest"
)

// TestClickHouseKilledTenTimesThenUpdate kills `sluice run` with SIGKILL at
// ten random moments while it loads 200k messages into ClickHouse (during
// recovery, loads, commits and publications; see killRunAfter for the one
// window avoided); an update afterwards leaves each message in the target
// exactly once.
func TestClickHouseKilledTenTimesThenUpdate(t *testing.T) {
	t.Parallel()
	const n, rounds = 200_000, 10
	d := newClickHouseDest(t, clickHouseAddr(t))
	b := startBroker(t, map[string]int32{"events": 4})
	spec := writeSpec(t, d, b.Addr(), 4_000)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	produced := 0
	for round := range rounds {
		next := produced + n/rounds
		produce(t, b.Addr(), "events", produced, next)
		produced = next
		killed := killRunAfter(t, spec, time.Duration(200+rng.IntN(4000))*time.Millisecond)
		rows, _ := d.count(t, spec, "events", "id")
		t.Logf("round %d: killed %s after its start, %d produced, %d rows in the target", round, killed.Round(time.Millisecond), produced, rows)
	}
	reapDeadMembers(t, b.Addr(), itGroup)
	mustSluice(t, append([]string{"update", "-f", spec}, fastArgs...)...)

	var rows, distinct uint64
	d.queryRow(t, []any{&rows, &distinct}, "SELECT count(), uniqExact(id) FROM "+d.db+".events")
	if rows != n || distinct != n {
		t.Fatalf("events: count() %d, uniqExact(id) %d; want %d each", rows, distinct, n)
	}
	checkExactlyOnce(t, d.ids(t, spec, "events", "id"), 0, n)
	if got := sumRows(d.loads(t, spec)); got != n {
		t.Fatalf("the ledger counts %d rows, want %d", got, n)
	}
	checkLeftoversRecovered(t, d, spec)
}

// TestClickHouseServerRestartDuringRun kills the ClickHouse server (kill -9)
// while `sluice run` loads into it and starts it again on its data: the run
// waits without stopping, resumes, and the target holds each message once.
// The server is the test's own, so that other tests are not disturbed.
func TestClickHouseServerRestartDuringRun(t *testing.T) {
	t.Parallel()
	clickHouseAddr(t) // the same precondition as every ClickHouse test
	srv := startOwnServer(t)
	d := newClickHouseDest(t, srv.Addr)
	const chunk = 20_000
	b := startBroker(t, map[string]int32{"events": 3})
	produce(t, b.Addr(), "events", 0, chunk)
	spec := writeSpec(t, d, b.Addr(), 2_000)

	cmd, out := start(t, append([]string{"run", "-f", spec}, fastArgs...)...)
	waitFor(t, 30*time.Second, "a first load", func() bool { return len(d.loads(t, spec)) > 0 })
	produce(t, b.Addr(), "events", chunk, 2*chunk)
	time.Sleep(200 * time.Millisecond) // in the middle of loading the second chunk
	srv.Kill()
	killedAt := time.Now()
	produce(t, b.Addr(), "events", 2*chunk, 3*chunk)
	time.Sleep(3 * time.Second)
	if !running(cmd) {
		t.Fatalf("run stopped while the server was down\n%s", tail(out.String(), 4000))
	}
	srv.Start()
	t.Logf("server down for %s", time.Since(killedAt).Round(time.Millisecond))
	d.reconnect(t)
	produce(t, b.Addr(), "events", 3*chunk, 4*chunk)

	waitFor(t, 2*time.Minute, "complete target", func() bool {
		rows, _ := d.count(t, spec, "events", "id")
		return rows >= 4*chunk
	})
	if !strings.Contains(out.String(), "destination failing; retrying") {
		t.Errorf("the run logged no retry while the server was down:\n%s", tail(out.String(), 4000))
	}
	stop(t, cmd, out)
	checkExactlyOnce(t, d.ids(t, spec, "events", "id"), 0, 4*chunk)
	checkCount(t, d, spec, 4*chunk)
	if got := sumRows(d.loads(t, spec)); got != 4*chunk {
		t.Fatalf("the ledger counts %d rows, want %d", got, 4*chunk)
	}
	checkLeftoversRecovered(t, d, spec)
}

// TestClickHouseTwoRunsOneGroup runs two `sluice run` processes of one
// pipeline (one consumer group) and stops one while both load, which hands
// its partitions to the other: each message lands once.
func TestClickHouseTwoRunsOneGroup(t *testing.T) {
	t.Parallel()
	addr := clickHouseAddr(t)
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
	}{
		{"stopped", syscall.SIGTERM},
		{"killed", syscall.SIGKILL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := newClickHouseDest(t, addr)
			b := startBroker(t, map[string]int32{"events": 4})
			spec := writeSpec(t, d, b.Addr(), 1_000)
			produced := 0
			more := func(k int) {
				produce(t, b.Addr(), "events", produced, produced+k)
				produced += k
			}
			more(5_000)
			args := append([]string{"run", "-f", spec, "--log-level", "debug"}, fastArgs...)
			first, firstOut := start(t, args...)
			second, secondOut := start(t, args...)

			// Feed both until each has committed loads of its own.
			waitFor(t, time.Minute, "loads committed by both runs", func() bool {
				if produced < 150_000 {
					more(1_000)
				}
				return strings.Contains(firstOut.String(), "load committed") &&
					strings.Contains(secondOut.String(), "load committed")
			})
			assigned := strings.Count(secondOut.String(), "partitions assigned")
			if err := first.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			if tc.sig == syscall.SIGTERM {
				stop(t, first, firstOut)
			} else {
				first.Wait()
			}
			t.Logf("first run %s after %d messages produced", tc.name, produced)
			for range 20 {
				more(2_000)
				time.Sleep(100 * time.Millisecond)
			}

			// Wait for the ledger rather than the target: a load that the
			// killed run committed but did not publish stays invisible
			// while the survivor idles (its maintenance runs only before a
			// load begins); the update below publishes it.
			waitFor(t, time.Minute, "complete ledger", func() bool {
				return sumRows(d.loads(t, spec)) >= int64(produced)
			})
			if got := strings.Count(secondOut.String(), "partitions assigned"); got <= assigned {
				t.Errorf("the second run was not assigned partitions again after the first stopped:\n%s", tail(secondOut.String(), 4000))
			}
			stop(t, second, secondOut)
			// An update afterwards finds nothing to load, and cleans what a
			// killed run left.
			mustSluice(t, append([]string{"update", "-f", spec}, fastArgs...)...)
			checkExactlyOnce(t, d.ids(t, spec, "events", "id"), 0, produced)
			checkCount(t, d, spec, int64(produced))
			if got := sumRows(d.loads(t, spec)); got != int64(produced) {
				t.Fatalf("the ledger counts %d rows, want %d", got, produced)
			}
			if tc.sig == syscall.SIGTERM {
				checkNoLeftovers(t, d)
			} else {
				checkLeftoversRecovered(t, d, spec)
			}
		})
	}
}

// stop sends SIGTERM to a run and fails unless it exits 0 within 30 s.
func stop(t testing.TB, cmd *exec.Cmd, out *syncBuffer) {
	t.Helper()
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
}

// running reports whether the process runs (an exited one that was not
// waited for yet does not).
func running(cmd *exec.Cmd) bool {
	if cmd.ProcessState != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	i := bytes.LastIndexByte(stat, ')')
	return i > 0 && i+2 < len(stat) && stat[i+2] != 'Z'
}

func startOwnServer(t testing.TB) *chtest.Server { t.Helper(); return chtest.StartServer(t) }
