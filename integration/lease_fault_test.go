package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/sluicehq/sluice/consumer"
)

// twoRunsSpec is a pipeline of an SCD type 1 flow and an append flow of
// the same change events (the append target keeps each message's Kafka
// partition and offset, so that a message loaded twice shows). Arguments:
// pipeline, brokers, destination.
const twoRunsSpec = `pipeline: %s
kafka:
  brokers: [%s]
  session_timeout: 2s
destination: %s
tables:
  - name: t
  - name: raw
    columns:
      - {name: id, type: int64}
      - {name: seq, type: int64}
      - {name: _kafka_partition, type: int64}
      - {name: _kafka_offset, type: int64}
flows:
  - name: t_cdc
    target: t
    kind: auto_cdc
    source:
      kafka:
        topic: changes
        format: json
        columns:
          - {name: id, type: int64}
          - {name: name, type: string, nullable: true}
          - {name: amount, type: int64, nullable: true}
          - {name: op, type: string, nullable: true}
          - {name: seq, type: int64}
    keys: [id]
    sequence_by: seq
    apply_as_deletes: 'op == "D"'
    except_column_list: [op, seq]
    stored_as_scd_type: 1
    batch: {rows: 300, wait: 100ms}
  - name: raw_in
    target: raw
    kind: append
    source: {kafka: {topic: changes, format: json}}
    batch: {rows: 300, wait: 100ms}
`

// runProc is a `sluice run` of the two-runs pipeline and its output.
type runProc struct {
	name string
	cmd  interface{ Wait() error }
	pid  int
	out  *syncBuffer
}

func (p *runProc) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := syscall.Kill(p.pid, sig); err != nil {
		t.Fatalf("signal %v to %s: %v", sig, p.name, err)
	}
}

// holds reports whether the process holds the lease of target t: it took
// it and did not lose it since.
func (p *runProc) holds() bool {
	s := p.out.String()
	taken := strings.LastIndex(s, `msg="lease taken"`)
	lost := max(strings.LastIndex(s, `msg="lease lost to another process"`), strings.LastIndex(s, `msg="lease of the table lost`))
	return taken >= 0 && taken > lost && strings.Contains(s[taken:min(len(s), taken+200)], "table=t")
}

// commits counts the loads of a flow the process committed (their log
// lines) since a moment.
func (p *runProc) commits(flow string, since time.Time) int {
	n, _ := p.commitsAt(flow, since)
	return n
}

// commitsAt is commits, with the time of the first of them.
func (p *runProc) commitsAt(flow string, since time.Time) (n int, first time.Time) {
	for _, line := range strings.Split(p.out.String(), "\n") {
		if !strings.Contains(line, `msg="load committed"`) || !strings.Contains(line, "flow="+flow+" ") || !strings.Contains(line, "topic=") {
			continue
		}
		stamp, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
		if at, err := time.Parse(time.RFC3339Nano, stamp); err == nil && !at.Before(since) {
			if n == 0 {
				first = at
			}
			n++
		}
	}
	return n, first
}

// TestTwoRunsThroughPausesAndKills runs two `sluice run` processes of one
// pipeline (an SCD type 1 flow and an append flow of one topic) while
// change events keep arriving, and faults the one holding the CDC target's
// lease, several times: paused with SIGSTOP past its lease and resumed, or
// killed with SIGKILL (and a new process started). After each fault the
// other process must load the CDC target again within a few seconds (the
// time is logged and recorded in docs/operations.md); the resumed process
// must not stall its partitions. At the end every partition is caught up:
// the append target holds each message once and the CDC target each key's
// latest change. A process without the lease loads the append flow's
// partitions it was given.
func TestTwoRunsThroughPausesAndKills(t *testing.T) {
	t.Parallel()
	forEachDestination(t, func(t *testing.T, d destination) {
		b := startBroker(t, map[string]int32{changesTopic: 4})
		spec := writeSpecText(t, fmt.Sprintf(twoRunsSpec, "tworuns", b.Addr(), d.yaml()))
		seed := uint64(time.Now().UnixNano())
		t.Logf("seed %d", seed)
		const n, keys = 12_000, 2_000
		cs := changes(seed, n, keys)
		msgs := changeMessages(seed, cs, 4)

		// The events arrive all along: 240 a second for about 50 s.
		ctx, stopProducing := context.WithCancel(context.Background())
		defer stopProducing()
		var produced sync.WaitGroup
		produced.Go(func() {
			for i := 0; i < len(msgs) && ctx.Err() == nil; i += 24 {
				if err := consumer.Produce(ctx, []string{b.Addr()}, changesTopic, msgs[i:min(i+24, len(msgs))]); err != nil && ctx.Err() == nil {
					t.Errorf("produce: %v", err)
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		})

		args := append([]string{"run", "-f", spec, "--log-level", "debug"}, fastArgs...)
		started := 0
		startRun := func() *runProc {
			started++
			cmd, out := start(t, args...)
			p := &runProc{name: fmt.Sprintf("run %d", started), cmd: cmd, pid: cmd.Process.Pid, out: out}
			waitFor(t, time.Minute, p.name+"'s partitions", func() bool { return strings.Contains(out.String(), "partitions assigned") })
			return p
		}
		procs := []*runProc{startRun(), startRun()}
		holder := func() (*runProc, *runProc) {
			for i, p := range procs {
				if p.holds() {
					return p, procs[1-i]
				}
			}
			return nil, nil
		}
		var h, other *runProc
		waitFor(t, 30*time.Second, "a lease holder", func() bool { h, other = holder(); return h != nil })
		waitFor(t, 30*time.Second, "append loads of the process without the lease", func() bool { return other.commits("raw_in", time.Time{}) > 0 })
		if other.commits("t_cdc", time.Time{}) > 0 {
			t.Errorf("%s committed CDC loads without the lease", other.name)
		}

		rng := rand.New(rand.NewPCG(seed, 3))
		var resumes []time.Duration
		for round := range 4 {
			h, other = holder()
			if h == nil {
				waitFor(t, 30*time.Second, "a lease holder", func() bool { h, other = holder(); return h != nil })
			}
			pause := round%2 == 0
			time.Sleep(time.Duration(rng.IntN(1000)) * time.Millisecond)
			at := time.Now()
			if pause {
				if _, ok := d.(localDest); ok {
					at = pauseOutsideLock(t, h, filepath.Join(filepath.Dir(spec), "data", "_sluice", "lock"))
				} else {
					h.signal(t, syscall.SIGSTOP)
				}
			} else {
				h.signal(t, syscall.SIGKILL)
				h.cmd.Wait()
			}
			waitFor(t, 30*time.Second, "CDC loads of the other process after the fault", func() bool { return other.commits("t_cdc", at) > 0 })
			_, first := other.commitsAt("t_cdc", at)
			resumed := first.Sub(at)
			resumes = append(resumes, resumed)
			kind := map[bool]string{true: "paused", false: "killed"}[pause]
			t.Logf("round %d: %s %s; %s loaded the CDC target again %s later", round, kind, h.name, other.name, resumed.Round(10*time.Millisecond))
			if pause {
				// Past its lease (3 s) and its Kafka session (2 s).
				time.Sleep(time.Until(at.Add(6 * time.Second)))
				h.signal(t, syscall.SIGCONT)
				waitFor(t, 30*time.Second, h.name+" giving the lease up", func() bool { return !h.holds() })
			} else {
				for i, p := range procs {
					if p == h {
						procs[i] = startRun()
					}
				}
			}
		}
		t.Logf("CDC loads resumed %v after the faults", resumes)
		for i, r := range resumes {
			// Generous: a stall is what fails here; the figures are recorded.
			if r > 15*time.Second {
				t.Errorf("round %d: CDC loads resumed only %s after the fault", i, r)
			}
		}

		// Every message once, every key at its latest change.
		produced.Wait()
		want := currentRows(cs)
		waitFor(t, 2*time.Minute, "both targets caught up", func() bool {
			rows, distinct := rawCounts(t, d, spec)
			return rows >= n && distinct == n && slices.Equal(targetRows(t, d, spec, "t", targetColumns(1)), want)
		})
		for _, p := range procs {
			p.signal(t, syscall.SIGTERM)
		}
		for _, p := range procs {
			p.cmd.Wait()
		}
		if rows, distinct := rawCounts(t, d, spec); rows != n || distinct != n {
			t.Errorf("append target: %d rows, %d distinct messages, want %d once each", rows, distinct, n)
		}
		if got := targetRows(t, d, spec, "t", targetColumns(1)); !slices.Equal(got, want) {
			t.Errorf("CDC target: %d rows, want %d; first differences:\n%s", len(got), len(want), diffRows(got, want, 10))
		}
	})
}

// pauseOutsideLock stops p with SIGSTOP at a moment it does not hold the
// local destination's lock (the flock on lockPath): a process paused within
// the milliseconds a commit holds it holds up every writer until it resumes
// (docs/local.md, "Limits"). It returns when the pause began.
func pauseOutsideLock(t testing.TB, p *runProc, lockPath string) time.Time {
	t.Helper()
	f, err := os.Open(lockPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	free := func() bool {
		// Another, running process holds the lock for milliseconds at a time.
		for range 20 {
			if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
				syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				return true
			}
			time.Sleep(10 * time.Millisecond)
		}
		return false
	}
	for attempt := 0; attempt < 50; attempt++ {
		at := time.Now()
		p.signal(t, syscall.SIGSTOP)
		if free() {
			return at
		}
		p.signal(t, syscall.SIGCONT)
		time.Sleep(time.Duration(20+attempt*7%50) * time.Millisecond)
	}
	t.Fatalf("%s held the destination lock at each of 50 pauses", p.name)
	return time.Time{}
}

// rawCounts returns the rows of the append target raw and how many
// distinct messages (partition, offset) they hold.
func rawCounts(t testing.TB, d destination, spec string) (rows, distinct int) {
	t.Helper()
	switch d := d.(type) {
	case localDest:
		parts := readColumn(t, tableDir(spec, "raw"), "_kafka_partition")
		offs := readColumn(t, tableDir(spec, "raw"), "_kafka_offset")
		seen := map[[2]int64]bool{}
		for i := range parts {
			seen[[2]int64{parts[i].Int64(), offs[i].Int64()}] = true
		}
		return len(parts), len(seen)
	case *clickHouseDest:
		var r, u uint64
		d.query(t, func(rs driver.Rows) error { return rs.Scan(&r, &u) },
			fmt.Sprintf("SELECT count(), uniqExact(_kafka_partition, _kafka_offset) FROM %s.raw", d.db))
		return int(r), int(u)
	}
	t.Fatalf("unknown destination %T", d)
	return 0, 0
}
