package integration

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/consumer"
)

// appendChangesSpec is a pipeline of one append flow of the changes topic
// into target raw. Arguments: pipeline, brokers, destination, batch rows.
const appendChangesSpec = `pipeline: %s
kafka:
  brokers: [%s]
  session_timeout: 2s
destination: %s
tables:
  - name: raw
    columns:
      - {name: id, type: int64}
      - {name: name, type: string, nullable: true}
      - {name: amount, type: int64, nullable: true}
      - {name: op, type: string, nullable: true}
      - {name: seq, type: int64}
flows:
  - name: raw_in
    target: raw
    kind: append
    source: {kafka: {topic: changes, format: json}}
    batch: {rows: %d, wait: 200ms}
`

// benchKeys is the number of keys of the CDC benchmarks' events, a tenth of
// their number unless SLUICE_BENCH_KEYS sets it.
func benchKeys(n int) int { return benchEnv("SLUICE_BENCH_KEYS", n/10) }

// benchOrders is the event orders the CDC benchmarks run, all three unless
// SLUICE_BENCH_ORDERS names one (shuffled, keyed or late).
func benchOrders() []string {
	switch o := os.Getenv("SLUICE_BENCH_ORDERS"); o {
	case "shuffled", "keyed", "late":
		return []string{o}
	}
	return []string{"shuffled", "keyed", "late"}
}

// BenchmarkCDCLocal measures the throughput of SCD type 1 and type 2 flows
// into the local destination against an append flow of the same messages,
// each a `sluice update` of its own into a fresh destination, and the peak
// RSS of each process. Run it with -benchtime 1x (make bench does).
func BenchmarkCDCLocal(b *testing.B) { benchCDC(b, "local") }

// BenchmarkCDCClickHouse is BenchmarkCDCLocal into ClickHouse; it needs
// SLUICE_CLICKHOUSE_ADDR.
func BenchmarkCDCClickHouse(b *testing.B) { benchCDC(b, "clickhouse") }

// benchCDC produces 1M change events (SLUICE_BENCH_MESSAGES) over 100k keys
// (SLUICE_BENCH_KEYS) in three orders, each to a broker of its own:
//
//   - keyed: as a CDC source writes them, each key's events in order in the
//     partition its key hashes to;
//   - late: keyed, but a tenth of the events arrive late, each by up to
//     10,000 messages of its partition;
//   - shuffled: the worst case, every key's events out of order and spread
//     over the four partitions, so that nearly every batch changes the
//     history of nearly every key.
//
// For each order it times the binary's update of them: appended as they
// are, then into an SCD type 1 target, then into an SCD type 2 target
// (whose state_cache SLUICE_BENCH_STATE_CACHE sets, e.g. 32MiB). Each
// target's content is checked afterwards (not timed): the append holds
// every message, and the CDC targets' current rows are those of each key's
// latest change.
func benchCDC(b *testing.B, kind string) {
	var addr string
	if kind == "clickhouse" {
		addr = clickHouseAddr(b)
	}
	n := benchMessages()
	keys := benchKeys(n)
	cs := changes(1, n, keys)
	want := currentRows(cs)
	type source struct {
		order  string
		broker string
		size   int64
	}
	var sources []source
	for _, order := range benchOrders() {
		var msgs []consumer.Message
		switch order {
		case "shuffled":
			msgs = changeMessages(1, cs, benchPartitions)
		case "keyed":
			msgs = keyedMessages(cs, benchPartitions)
		case "late":
			msgs = lateMessages(keyedMessages(cs, benchPartitions), benchPartitions, lateWindow)
		}
		src := source{order: order, broker: startBroker(b, map[string]int32{changesTopic: benchPartitions}).Addr()}
		for _, m := range msgs {
			src.size += int64(len(m.Value))
		}
		produceMsgs(b, src.broker, changesTopic, msgs)
		sources = append(sources, src)
	}
	cs = nil
	batchRows := benchEnv("SLUICE_BENCH_BATCH_ROWS", 100_000)

	newDest := func() destination {
		if kind == "clickhouse" {
			return newClickHouseDest(b, addr)
		}
		return localDest{}
	}
	for b.Loop() {
		for _, src := range sources {
			load := loadAverage()
			// Append: the same messages as they are.
			d := newDest()
			spec := writeSpecText(b, fmt.Sprintf(appendChangesSpec, "bench_"+src.order+"_append", src.broker, d.yaml(), batchRows))
			appendRun := timedUpdate(b, spec)
			if rows, _ := d.count(b, spec, "raw", "id"); rows != int64(n) {
				b.Fatalf("append: %d rows, want %d", rows, n)
			}
			removeSpecDir(b, spec)
			runs := []measured{appendRun}
			for _, scd := range []int{1, 2} {
				d := newDest()
				text := cdcSpecText(fmt.Sprintf("bench_%s_scd%d", src.order, scd), d, src.broker, scd, batchRows)
				if c := os.Getenv("SLUICE_BENCH_STATE_CACHE"); c != "" {
					text = strings.Replace(text, "  - name: t\n", "  - name: t\n    state_cache: "+c+"\n", 1)
				}
				spec := writeSpecText(b, text)
				run := timedUpdate(b, spec)
				rows := targetRows(b, d, spec, "t", targetColumns(scd))
				got := rows
				if scd == 2 {
					got = current(rows)
				}
				if len(got) != len(want) || strings.Join(got, "\n") != strings.Join(want, "\n") {
					b.Fatalf("%s, SCD type %d: %d current rows, want %d from the events; first differences:\n%s", src.order, scd, len(got), len(want), diffRows(got, want, 10))
				}
				run.rows = len(rows)
				runs = append(runs, run)
				removeSpecDir(b, spec)
			}

			fmt.Printf("CDC into %s, %d events over %d keys, %s (%.0f bytes each), batches of %d rows; load average at the start %s:\n",
				kind, n, keys, src.order, float64(src.size)/float64(n), batchRows, load)
			for i, r := range runs {
				name := src.order + "_" + [...]string{"append", "scd1", "scd2"}[i]
				rate := float64(n) / r.took.Seconds()
				b.ReportMetric(rate, name+"_events/s")
				b.ReportMetric(float64(r.maxRSS)/(1<<20), name+"_peak_RSS_MiB")
				b.ReportMetric(r.cpu.Seconds(), name+"_cpu_s")
				b.ReportMetric(float64(r.anonRSS)/(1<<20), name+"_peak_anon_MiB")
				b.ReportMetric(float64(r.liveHeap)/(1<<20), name+"_peak_live_heap_MiB")
				line := fmt.Sprintf("  %-15s %9.0f events/s (%s, CPU %s), peak RSS %4d MiB (anon %d, file %d), live heap %d MiB",
					name, rate, r.took.Round(time.Millisecond), r.cpu.Round(10*time.Millisecond), r.maxRSS>>20, r.anonRSS>>20, r.fileRSS>>20, r.liveHeap>>20)
				if i > 0 {
					ratio := appendRun.took.Seconds() / r.took.Seconds()
					b.ReportMetric(ratio, name+"_vs_append")
					line += fmt.Sprintf(", %.2f x append (CPU: %.2f), %d rows in the target", ratio, appendRun.cpu.Seconds()/r.cpu.Seconds(), r.rows)
				}
				fmt.Println(line)
			}
		}
	}
}

// removeSpecDir removes a measured run's folder (its spec, and a local
// destination's tables beside it) once its checks are done, so that with
// -benchtime Nx the files a run leaves, still being written back to disk,
// do not slow the runs after it.
func removeSpecDir(b *testing.B, spec string) {
	b.Helper()
	if err := os.RemoveAll(filepath.Dir(spec)); err != nil {
		b.Fatal(err)
	}
}

// lateWindow is how many messages of its partition a late event of the
// late order arrives after its place, at most.
const lateWindow = 10_000

// lateMessages delays a tenth of the messages of each partition, each by
// up to window messages of its partition: a key's events in order but for
// some that arrive late (a producer's retry, a source that reconnected),
// placed in recent history. Deterministic.
func lateMessages(msgs []consumer.Message, partitions, window int) []consumer.Message {
	rng := rand.New(rand.NewPCG(3, 9))
	type placed struct {
		at int
		m  consumer.Message
	}
	parts := make([][]placed, partitions)
	for _, m := range msgs {
		p := &parts[m.Partition]
		at := len(*p)
		if rng.IntN(10) == 0 {
			at += 1 + rng.IntN(window)
		}
		*p = append(*p, placed{at, m})
	}
	out := make([]consumer.Message, 0, len(msgs))
	for _, p := range parts {
		slices.SortStableFunc(p, func(a, b placed) int { return cmp.Compare(a.at, b.at) })
		for _, x := range p {
			out = append(out, x.m)
		}
	}
	return out
}

// keyedMessages orders events as a CDC source writes them: each key's
// events in sequence order, in the partition its key hashes to, the key
// as the message key.
func keyedMessages(cs []change, partitions int) []consumer.Message {
	sorted := slices.Clone(cs)
	slices.SortStableFunc(sorted, func(a, b change) int { return cmp.Compare(a.seq, b.seq) })
	msgs := make([]consumer.Message, len(sorted))
	for i, c := range sorted {
		msgs[i] = consumer.Message{Key: strconv.AppendInt(nil, c.id, 10), Value: c.json(), Partition: int32(c.id % int64(partitions))}
	}
	return msgs
}

// loadAverage returns the machine's load averages over 1, 5 and 15
// minutes, or "unknown": the CDC benchmarks print it, since a busy machine
// slows every run.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(data)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

// measured is one timed sluice process.
type measured struct {
	took   time.Duration
	cpu    time.Duration // user and system: less sensitive than took to a busy machine
	maxRSS int64         // bytes
	// The peaks of the anonymous and the file-backed part of the RSS.
	anonRSS, fileRSS int64
	// The peak of the live heap (what a collection found reachable): what
	// sluice holds, without the room the collector leaves to grow.
	liveHeap int64
	rows     int
}

// timedUpdate runs `sluice update` of the spec as a child process and
// returns its wall time, peak resident set size and peak live heap. With
// SLUICE_BENCH_PROFILE_DIR set, the process writes its CPU and heap
// profiles there, named after the spec's pipeline: NAME.pprof (CPU),
// NAME.mem.pprof (allocations) and NAME.peak.pprof (the heap at its peak).
func timedUpdate(b *testing.B, spec string) measured {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	livePeak := filepath.Join(b.TempDir(), "heap-peak")
	args := []string{"update", "-f", spec, "--heap-peak", livePeak}
	if dir := os.Getenv("SLUICE_BENCH_PROFILE_DIR"); dir != "" {
		text, err := os.ReadFile(spec)
		if err != nil {
			b.Fatal(err)
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(string(text), "pipeline: "), "\n")
		args = append(args, "--cpu-profile", filepath.Join(dir, name+".pprof"), "--mem-profile", filepath.Join(dir, name+".mem.pprof"),
			"--heap-peak-profile", filepath.Join(dir, name+".peak.pprof"))
	}
	cmd := exec.CommandContext(ctx, binary, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	peak := watchPeakRSS(cmd.Process.Pid)
	err := cmd.Wait()
	took := time.Since(start)
	maxRSS, anon, file := peak()
	if err != nil {
		b.Fatalf("sluice update -f %s: %v\n%s", spec, err, tail(out.String(), 4000))
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		b.Fatalf("no resource usage for sluice update")
	}
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	text, err := os.ReadFile(livePeak)
	if err != nil {
		b.Fatalf("sluice update -f %s: no live heap peak: %v", spec, err)
	}
	live, err := strconv.ParseInt(strings.TrimSpace(string(text)), 10, 64)
	if err != nil {
		b.Fatalf("sluice update -f %s: live heap peak %q: %v", spec, text, err)
	}
	return measured{took: took, cpu: cpu, maxRSS: maxRSS, anonRSS: anon, fileRSS: file, liveHeap: live}
}

// watchPeakRSS follows the peak resident set size (VmHWM, in bytes) of a
// running process until the returned function is called, which returns
// it, and the peaks of its anonymous memory (the heap and stacks) and of
// its file-backed pages (such as a memory-mapped state file, which the
// kernel can drop) as sampled every 10 ms. The rusage of a child is no good
// for it: Go starts a child sharing the parent's memory until exec, and
// Linux counts the parent's peak as the child's, so a test process holding
// a large broker would hide the child's own figure.
func watchPeakRSS(pid int) func() (peak, anon, file int64) {
	var peak, anon, file int64
	fields := map[string]*int64{"VmHWM": &peak, "RssAnon": &anon, "RssFile": &file}
	read := func() {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			return
		}
		for line := range strings.Lines(string(data)) {
			name, v, _ := strings.Cut(line, ":")
			if p := fields[name]; p != nil {
				if kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64); err == nil {
					*p = max(*p, kib<<10)
				}
			}
		}
	}
	read()
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				read()
			}
		}
	}()
	return func() (int64, int64, int64) {
		close(stop)
		<-done
		return peak, anon, file
	}
}
