package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
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
func benchKeys(n int) int {
	if v, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_KEYS")); err == nil && v > 0 {
		return v
	}
	return n / 10
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
// (SLUICE_BENCH_KEYS), shuffled over four partitions, then times the binary's
// update of them: appended as they are, then into an SCD type 1 target, then
// into an SCD type 2 target. Each target's content is checked afterwards
// (not timed): the append holds every message, and the CDC targets' current
// rows are those of each key's latest change.
func benchCDC(b *testing.B, kind string) {
	var addr string
	if kind == "clickhouse" {
		addr = clickHouseAddr(b)
	}
	n := benchMessages()
	keys := benchKeys(n)
	broker := startBroker(b, map[string]int32{changesTopic: benchPartitions})
	cs := changes(1, n, keys)
	msgs := changeMessages(1, cs, benchPartitions)
	var size int64
	for _, m := range msgs {
		size += int64(len(m.Value))
	}
	produceMsgs(b, broker.Addr(), changesTopic, msgs)
	msgs = nil
	want := currentRows(cs)
	cs = nil
	const batchRows = 100_000

	newDest := func() destination {
		if kind == "clickhouse" {
			return newClickHouseDest(b, addr)
		}
		return localDest{}
	}
	for b.Loop() {
		load := loadAverage()
		// Append: the same messages as they are.
		d := newDest()
		spec := writeSpecText(b, fmt.Sprintf(appendChangesSpec, "bench_append", broker.Addr(), d.yaml(), batchRows))
		appendRun := timedUpdate(b, spec)
		if rows, _ := d.count(b, spec, "raw", "id"); rows != int64(n) {
			b.Fatalf("append: %d rows, want %d", rows, n)
		}
		runs := []measured{appendRun}
		for _, scd := range []int{1, 2} {
			d := newDest()
			spec := writeCDCSpec(b, fmt.Sprintf("bench_scd%d", scd), d, broker.Addr(), scd, batchRows)
			run := timedUpdate(b, spec)
			rows := targetRows(b, d, spec, "t", targetColumns(scd))
			got := rows
			if scd == 2 {
				got = current(rows)
			}
			if len(got) != len(want) || strings.Join(got, "\n") != strings.Join(want, "\n") {
				b.Fatalf("SCD type %d: %d current rows, want %d from the events; first differences:\n%s", scd, len(got), len(want), diffRows(got, want, 10))
			}
			run.rows = len(rows)
			runs = append(runs, run)
		}

		fmt.Printf("CDC into %s, %d events over %d keys (%.0f bytes each), batches of %d rows; load average at the start %s:\n",
			kind, n, keys, float64(size)/float64(n), batchRows, load)
		for i, r := range runs {
			name := [...]string{"append", "scd1", "scd2"}[i]
			rate := float64(n) / r.took.Seconds()
			b.ReportMetric(rate, name+"_events/s")
			b.ReportMetric(float64(r.maxRSS)/(1<<20), name+"_peak_RSS_MiB")
			b.ReportMetric(r.cpu.Seconds(), name+"_cpu_s")
			line := fmt.Sprintf("  %-6s %9.0f events/s (%s, CPU %s), peak RSS %4d MiB", name, rate, r.took.Round(time.Millisecond), r.cpu.Round(10*time.Millisecond), r.maxRSS>>20)
			if i > 0 {
				ratio := appendRun.took.Seconds() / r.took.Seconds()
				b.ReportMetric(ratio, name+"_vs_append")
				line += fmt.Sprintf(", %.2f x append (CPU: %.2f), %d rows in the target", ratio, appendRun.cpu.Seconds()/r.cpu.Seconds(), r.rows)
			}
			fmt.Println(line)
		}
	}
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
	rows   int
}

// timedUpdate runs `sluice update` of the spec as a child process and
// returns its wall time and peak resident set size.
func timedUpdate(b *testing.B, spec string) measured {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "update", "-f", spec)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	if err != nil {
		b.Fatalf("sluice update -f %s: %v\n%s", spec, err, tail(out.String(), 4000))
	}
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if !ok {
		b.Fatalf("no resource usage for sluice update")
	}
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return measured{took: took, cpu: cpu, maxRSS: ru.Maxrss << 10} // Linux reports KiB
}
