package integration

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/consumer/devkafka"
)

// TestStartWithBrokerDown starts run before its broker: it waits, retrying,
// and loads everything once the broker is up; a SIGTERM during the wait
// ends it at once.
func TestStartWithBrokerDown(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	d := newDestination(t, "local")
	spec := writeSpec(t, d, addr, 100)

	cmd, out := start(t, append([]string{"run", "-f", spec}, fastArgs...)...)
	waitFor(t, 20*time.Second, "a retry log line", func() bool { return strings.Contains(out.String(), "broker failing; retrying") })
	if !running(cmd) {
		t.Fatalf("run exited with the broker down:\n%s", tail(out.String(), 3000))
	}
	b, err := devkafka.Start(devkafka.Config{Addr: addr, Topics: map[string]int32{"events": 2}, MinSessionTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	produce(t, addr, "events", 0, 500)
	waitFor(t, time.Minute, "every event", func() bool { rows, _ := d.count(t, spec, "events", "id"); return rows >= 500 })
	stop(t, cmd, out)
	checkExactlyOnce(t, d.ids(t, spec, "events", "id"), 0, 500)

	// A signal while waiting for a broker that is down ends the run within
	// two seconds.
	spec2 := writeSpec(t, newDestination(t, "local"), freeAddr(t), 100)
	cmd, out = start(t, append([]string{"run", "-f", spec2}, fastArgs...)...)
	waitFor(t, 20*time.Second, "a retry log line", func() bool { return strings.Contains(out.String(), "broker failing; retrying") })
	signalled := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	if took := time.Since(signalled); took > 2*time.Second || err != nil {
		t.Errorf("run took %s to stop after SIGTERM while waiting for the broker (%v):\n%s", took, err, tail(out.String(), 3000))
	}
}

// TestStartWithClickHouseDown starts run and update before their server:
// run waits and loads everything once it is up; update gives up after
// --retry-for, saying so.
func TestStartWithClickHouseDown(t *testing.T) {
	t.Parallel()
	clickHouseAddr(t)
	srv := startOwnServer(t)
	d := newClickHouseDest(t, srv.Addr)
	b := startBroker(t, map[string]int32{"events": 2})
	produce(t, b.Addr(), "events", 0, 500)
	spec := writeSpec(t, d, b.Addr(), 100)
	srv.Kill()

	began := time.Now()
	res := sluice(t, "update", "-f", spec, "--retry-for", "2s")
	if took := time.Since(began); res.code != 1 || took < 2*time.Second || !strings.Contains(res.stderr, "still failing after 2s") {
		t.Errorf("update with the server down: exit %d after %s, want 1 after --retry-for 2s saying so:\n%s", res.code, took, tail(res.stderr, 2000))
	}

	cmd, out := start(t, append([]string{"run", "-f", spec}, fastArgs...)...)
	waitFor(t, 20*time.Second, "a retry log line", func() bool { return strings.Contains(out.String(), "destination failing; retrying") })
	if !running(cmd) {
		t.Fatalf("run exited with the server down:\n%s", tail(out.String(), 3000))
	}
	srv.Start()
	d.reconnect(t)
	waitFor(t, 2*time.Minute, "every event", func() bool { rows, _ := d.count(t, spec, "events", "id"); return rows >= 500 })
	if !strings.Contains(out.String(), "destination recovered") {
		t.Errorf("no log line says the destination recovered")
	}
	stop(t, cmd, out)
	checkExactlyOnce(t, d.ids(t, spec, "events", "id"), 0, 500)
}
