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

// twoRunsDefaultSpec is twoRunsSpec with Kafka's default session timeout
// (10 s), which stock brokers' group.min.session.timeout.ms (6 s) does not
// let users shorten much: a CDC target's flows read its partitions without
// a group, so taking a lease over does not wait for the old holder's
// session to expire (docs/operations.md, "Several processes").
var twoRunsDefaultSpec = strings.Replace(twoRunsSpec, "  session_timeout: 2s\n", "", 1)

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

// tookLease returns when the process first took the lease of target t at
// or after since, if it did.
func (p *runProc) tookLease(since time.Time) (time.Time, bool) {
	n, at := p.linesAt(since, `msg="lease taken"`, " table=t")
	return at, n > 0
}

// resumedAt returns when the process committed its first load of flow
// since it took the CDC target's lease after since. A load it finished
// under a lease it lost before (one another process committed meanwhile)
// does not count.
func (p *runProc) resumedAt(flow string, since time.Time) (time.Time, bool) {
	taken, ok := p.tookLease(since)
	if !ok {
		return time.Time{}, false
	}
	n, first := p.commitsAt(flow, taken)
	return first, n > 0
}

// commits counts the loads of a flow the process committed (their log
// lines) since a moment.
func (p *runProc) commits(flow string, since time.Time) int {
	n, _ := p.commitsAt(flow, since)
	return n
}

// commitsAt is commits, with the time of the first of them.
func (p *runProc) commitsAt(flow string, since time.Time) (n int, first time.Time) {
	// The runner's line, with the partitions; the destination's has none.
	return p.linesAt(since, `msg="load committed"`, "flow="+flow+" ", "topic=")
}

// linesAt counts the process's log lines since a moment that hold every
// one of parts, and returns the time of the first.
func (p *runProc) linesAt(since time.Time, parts ...string) (n int, first time.Time) {
	for _, line := range strings.Split(p.out.String(), "\n") {
		if slices.ContainsFunc(parts, func(part string) bool { return !strings.Contains(line, part) }) {
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

// takeoverBound is how soon after its lease holder was killed another
// process must load a CDC target again when the lease is free at once (the
// local destination: a dead holder's flock is gone). When the lease must
// expire first (a paused holder; a killed one in ClickHouse, which cannot
// tell it died), the bound is the lease's TTL more: the lease expires up to
// 3 s after the fault. Within it, the new holder reads every partition as
// soon as it took the lease (no group session to wait for), within
// loadAllowance less, and its first load commits. A destination slowed by a
// loaded machine may take longer than loadAllowance for that one load: its
// commit then only has to follow (the figures are logged).
const (
	takeoverBound = 5 * time.Second
	loadAllowance = 2 * time.Second
	leaseTTL      = 3 * time.Second // flows.DefaultLeaseTTL
)

// TestTwoRunsThroughPausesAndKills runs two `sluice run` processes of one
// pipeline (an SCD type 1 flow and an append flow of one topic) while
// change events keep arriving, and faults the one holding the CDC target's
// lease, several times: paused with SIGSTOP past its lease and resumed, or
// killed with SIGKILL (and a new process started), with Kafka's default
// session timeout. After each fault the other process must load the CDC
// target again within takeoverBound (the time is logged and recorded in
// docs/operations.md); the resumed process
// must not stall its partitions. At the end every partition is caught up:
// the append target holds each message once and the CDC target each key's
// latest change. A process without the lease loads the append flow's
// partitions it was given.
func TestTwoRunsThroughPausesAndKills(t *testing.T) {
	t.Parallel()
	forEachDestination(t, func(t *testing.T, d destination) {
		b := startBroker(t, map[string]int32{changesTopic: 4})
		if strings.Contains(twoRunsDefaultSpec, "session_timeout") {
			t.Fatal("twoRunsDefaultSpec sets a session timeout")
		}
		spec := writeSpecText(t, fmt.Sprintf(twoRunsDefaultSpec, "tworuns", b.Addr(), d.yaml()))
		seed := uint64(time.Now().UnixNano())
		t.Logf("seed %d", seed)
		const n, keys = 12_000, 2_000
		cs := changes(seed, n, keys)
		msgs := changeMessages(seed, cs, 4)

		// The events arrive all along: 240 a second for about 50 s.
		produced := trickle(t, b.Addr(), msgs)

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
			var first time.Time
			waitFor(t, 30*time.Second, "CDC loads of the other process after the fault", func() bool {
				var ok bool
				first, ok = other.resumedAt("t_cdc", at)
				return ok
			})
			resumed := first.Sub(at)
			resumes = append(resumes, resumed)
			taken, _ := other.tookLease(at)
			_, assigned := other.linesAt(taken, `msg="consumer: partitions assigned"`, "flow=t_cdc ")
			reading := assigned.Sub(at)
			kind := map[bool]string{true: "paused", false: "killed"}[pause]
			t.Logf("round %d: %s %s; %s took the lease %s later, read the CDC flow's partitions %s later and loaded the CDC target again %s later",
				round, kind, h.name, other.name, round10(taken.Sub(at)), round10(reading), round10(resumed))
			bound := takeoverBound
			if _, local := d.(localDest); pause || !local {
				bound += leaseTTL
			}
			switch {
			case assigned.IsZero() || reading > bound-loadAllowance:
				t.Errorf("round %d: %s read the CDC flow's partitions only %s after the fault, want within %s", round, other.name, round10(reading), bound-loadAllowance)
			case resumed > bound && resumed-reading <= loadAllowance:
				t.Errorf("round %d: CDC loads resumed only %s after the fault, want within %s", round, round10(resumed), bound)
			case resumed > bound:
				t.Logf("round %d: past %s, but the destination took %s for the first load", round, bound, round10(resumed-reading))
			}
			if pause {
				// Past its lease (3 s), within its Kafka session (10 s):
				// its append flow's partitions stay its own.
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

		// Every message once, every key at its latest change.
		produced()
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

func round10(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }

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
		// The signal stops the process asynchronously: until it has,
		// it may still take the lock.
		waitFor(t, 5*time.Second, p.name+" stopped", func() bool { return stopped(p.pid) })
		if free() {
			return at
		}
		p.signal(t, syscall.SIGCONT)
		time.Sleep(time.Duration(20+attempt*7%50) * time.Millisecond)
	}
	t.Fatalf("%s held the destination lock at each of 50 pauses", p.name)
	return time.Time{}
}

// stopped reports whether process pid is stopped by a signal (state T in
// /proc/<pid>/stat).
func stopped(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// "pid (comm) state ...", comm as the process named itself.
	i := strings.LastIndex(string(stat), ") ")
	return i >= 0 && strings.HasPrefix(string(stat[i+2:]), "T")
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

// trickle produces msgs to the changes topic in steps of 24 every 100 ms
// (240 a second) in the background; the returned func waits until all are
// produced. The test's end stops it.
func trickle(t testing.TB, brokers string, msgs []consumer.Message) (wait func()) {
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	var produced sync.WaitGroup
	produced.Go(func() {
		for i := 0; i < len(msgs) && ctx.Err() == nil; i += 24 {
			if err := consumer.Produce(ctx, []string{brokers}, changesTopic, msgs[i:min(i+24, len(msgs))]); err != nil && ctx.Err() == nil {
				t.Errorf("produce: %v", err)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	return produced.Wait
}
