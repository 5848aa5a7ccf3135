package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/consumer"
	"github.com/sluicehq/sluice/consumer/devkafka"
	"github.com/sluicehq/sluice/sinks/clickhouse/chtest"
)

// binary is the sluice binary built once for the package's tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-it-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "sluice")
	build := exec.Command("go", "build", "-o", binary, "../cmd/sluice")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build sluice:", err)
		os.Exit(1)
	}
	code := m.Run()
	chtest.StopSharedCluster()
	os.RemoveAll(dir)
	os.Exit(code)
}

// startBroker starts an in-process broker with the given topics.
func startBroker(t testing.TB, topics map[string]int32) *devkafka.Broker {
	t.Helper()
	b, err := devkafka.Start(devkafka.Config{Addr: "127.0.0.1:0", Topics: topics, MinSessionTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatalf("start broker: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// event returns the JSON of test event id.
func event(id int) []byte {
	return fmt.Appendf(nil, `{"id":%d,"name":"n-%d","amount":"%d.%02d","at":"2026-03-01T10:00:%02d.5Z","ignored":[1,2,3]}`,
		id, id, id%1000, id%100, id%60)
}

// produce writes events from..to-1 (ids) to topic, spread over partitions.
func produce(t testing.TB, addr, topic string, from, to int) {
	t.Helper()
	msgs := make([]consumer.Message, 0, to-from)
	for id := from; id < to; id++ {
		msgs = append(msgs, consumer.Message{Key: []byte(strconv.Itoa(id)), Value: event(id), Partition: -1})
	}
	produceMsgs(t, addr, topic, msgs)
}

func produceMsgs(t testing.TB, addr, topic string, msgs []consumer.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := consumer.Produce(ctx, []string{addr}, topic, msgs); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

const eventsSpec = `pipeline: it
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
    batch: {rows: %d, wait: 200ms}
`

// writeSpec writes the events pipeline from the broker into the destination
// into a new folder and returns the spec's path.
func writeSpec(t testing.TB, d destination, addr string, batchRows int) string {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, fmt.Appendf(nil, eventsSpec, addr, d.yaml(), batchRows), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// result is a finished sluice process.
type result struct {
	code           int
	stdout, stderr string
}

// sluice runs the binary to completion with a timeout.
func sluice(t testing.TB, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
	default:
		t.Fatalf("sluice %s: %v", strings.Join(args, " "), err)
	}
	return res
}

// mustSluice runs the binary and fails the test unless it exits 0.
func mustSluice(t testing.TB, args ...string) result {
	t.Helper()
	res := sluice(t, args...)
	if res.code != 0 {
		t.Fatalf("sluice %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), res.code, res.stdout, tail(res.stderr, 4000))
	}
	return res
}

// fastArgs shorten heartbeats so that a killed process never holds up the
// next one for long.
var fastArgs = []string{"--heartbeat-every", "200ms", "--heartbeat-ttl", "1s"}

// start starts the binary; its stdout and stderr go to the returned buffer.
// A process still running when the test ends is killed, and the output of
// each is logged when the test failed.
func start(t testing.TB, args ...string) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	out := &syncBuffer{}
	cmd.Stderr = out
	cmd.Stdout = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		if t.Failed() {
			t.Logf("output of sluice %s (pid %d):\n%s", strings.Join(args, " "), cmd.Process.Pid, tail(out.String(), 8000))
		}
	})
	return cmd, out
}

// syncBuffer is a buffer a running process writes to while the test reads
// it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
