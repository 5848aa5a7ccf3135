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
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/consumer"
	"github.com/sluicehq/sluice/flows"
	"github.com/sluicehq/sluice/flows/spec"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse"
	sinkdest "github.com/sluicehq/sluice/sinks/destination"
	"github.com/sluicehq/sluice/sinks/local"
)

// growthFlows is how many append flows (one topic each) the ledger
// benchmark's pipeline has: their loads commit side by side.
const growthFlows = 20

// ledgerLoads is the ledger benchmark's large size; SLUICE_BENCH_LOADS
// overrides it.
func ledgerLoads() int {
	if v, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_LOADS")); err == nil && v > 0 {
		return v
	}
	return 20_000
}

// ledgerSpec is growthFlows append flows of one-row loads into one table.
func ledgerSpec(addr, dest string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "pipeline: ledger\nkafka:\n  brokers: [%s]\n  session_timeout: 2s\ndestination: %s\ntables:\n  - name: t\n    columns:\n      - {name: id, type: int64}\nflows:\n", addr, dest)
	for i := range growthFlows {
		fmt.Fprintf(&b, "  - name: f%02d\n    target: t\n    kind: append\n    source: {kafka: {topic: t%02d, format: json}}\n    batch: {rows: 1, wait: 1ms}\n", i, i)
	}
	return b.String()
}

// timedSink times every load from Begin to the end of its Commit.
type timedSink interface {
	sinks.Sink
	durations() []time.Duration
}

type loadTimes struct {
	mu sync.Mutex
	d  []time.Duration
}

func (lt *loadTimes) add(d time.Duration) { lt.mu.Lock(); lt.d = append(lt.d, d); lt.mu.Unlock() }
func (lt *loadTimes) durations() []time.Duration {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return slices.Clone(lt.d)
}

type timedLoad struct {
	sinks.Load
	began time.Time
	lt    *loadTimes
}

func (l timedLoad) Commit(ctx context.Context, c sinks.Commit) error {
	err := l.Load.Commit(ctx, c)
	if err == nil {
		l.lt.add(time.Since(l.began))
	}
	return err
}

type timedLocal struct {
	*local.Sink
	*loadTimes
}

func (s timedLocal) Begin(ctx context.Context, meta sinks.LoadMeta) (sinks.Load, error) {
	began := time.Now()
	ld, err := s.Sink.Begin(ctx, meta)
	if err != nil {
		return nil, err
	}
	return timedLoad{ld, began, s.loadTimes}, nil
}

type timedClickHouse struct {
	*clickhouse.Sink
	*loadTimes
}

func (s timedClickHouse) Begin(ctx context.Context, meta sinks.LoadMeta) (sinks.Load, error) {
	began := time.Now()
	ld, err := s.Sink.Begin(ctx, meta)
	if err != nil {
		return nil, err
	}
	return timedLoad{ld, began, s.loadTimes}, nil
}

func timed(b testing.TB, s sinks.Sink) timedSink {
	switch s := s.(type) {
	case *local.Sink:
		return timedLocal{s, &loadTimes{}}
	case *clickhouse.Sink:
		return timedClickHouse{s, &loadTimes{}}
	}
	b.Fatalf("unexpected sink %T", s)
	return nil
}

// ledgerPipeline is one destination of the ledger benchmark with n loads
// committed.
type ledgerPipeline struct {
	b      *testing.B
	broker string
	p      *spec.Pipeline
	next   int // the next message id
	// Local: a folder beside the destination, and the file system's
	// metadata latency there before the burst (diskLatency).
	probe     string
	probeBase time.Duration
}

// newLedgerPipeline commits n one-row loads, spread over the flows, into a
// fresh destination d, from a broker of its own.
func newLedgerPipeline(b *testing.B, d destination, n int) *ledgerPipeline {
	topics := map[string]int32{}
	for i := range growthFlows {
		topics[fmt.Sprintf("t%02d", i)] = 1
	}
	broker := startBroker(b, topics).Addr()
	dir := b.TempDir()
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, []byte(ledgerSpec(broker, d.yaml())), 0o644); err != nil {
		b.Fatal(err)
	}
	p, err := spec.Load(path)
	if err != nil {
		b.Fatal(err)
	}
	lp := &ledgerPipeline{b: b, broker: broker, p: p}
	if _, ok := d.(localDest); ok {
		lp.probe = filepath.Join(dir, "probe")
		lp.probeBase = diskLatency(b, lp.probe)
	}
	lp.produce(n, growthFlows)
	start := time.Now()
	lp.update(nil)
	b.Logf("%s: %d loads committed in %s", d.name(), n, time.Since(start).Round(time.Millisecond))
	if _, ok := d.(localDest); ok {
		// A pipeline that ran for a while keeps superseded versions for
		// KeepVersions (a minute) only: the burst above leaves them all.
		time.Sleep(local.DefaultKeepVersions + 5*time.Second)
	}
	if ch, ok := d.(*clickHouseDest); ok {
		// A pipeline that ran for a while has its parts merged: the burst
		// above leaves them to the server's background merges.
		settleMerges(b, ch)
	}
	return lp
}

// settleMerges waits, at most a minute, until no merge of the database runs
// for a second.
func settleMerges(b *testing.B, d *clickHouseDest) {
	deadline := time.Now().Add(time.Minute)
	quiet := 0
	for quiet < 10 && time.Now().Before(deadline) {
		var n uint64
		d.queryRow(b, []any{&n}, "SELECT count() FROM system.merges WHERE database = ?", d.db)
		if n == 0 {
			quiet++
		} else {
			quiet = 0
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// produce sends n messages, one per flow in turn (of the first flows
// only when flows is below growthFlows).
func (lp *ledgerPipeline) produce(n, flows int) {
	by := map[int][]consumer.Message{}
	for i := range n {
		id := lp.next + i
		by[id%flows] = append(by[id%flows], consumer.Message{Value: fmt.Appendf(nil, `{"id": %d}`, id)})
	}
	lp.next += n
	for f, msgs := range by {
		produceMsgs(lp.b, lp.broker, fmt.Sprintf("t%02d", f), msgs)
	}
}

// update runs one update; wrap, when set, wraps its sink.
func (lp *ledgerPipeline) update(wrap func(sinks.Sink) sinks.Sink) time.Duration {
	ctx := context.Background()
	sink, err := sinkdest.Open(ctx, lp.p, nil)
	if err != nil {
		lp.b.Fatal(err)
	}
	defer sink.Close()
	if wrap != nil {
		sink = wrap(sink)
	}
	start := time.Now()
	if err := flows.Execute(ctx, lp.p, sink, flows.Options{Mode: flows.ModeUpdate, HeartbeatEvery: 200 * time.Millisecond, HeartbeatTTL: time.Second}); err != nil {
		lp.b.Fatal(err)
	}
	return time.Since(start)
}

// status runs flows.Status without Kafka (the destination's part).
func (lp *ledgerPipeline) status() time.Duration {
	ctx := context.Background()
	sink, err := sinkdest.Open(ctx, lp.p, nil)
	if err != nil {
		lp.b.Fatal(err)
	}
	defer sink.Close()
	start := time.Now()
	rep, err := flows.Status(ctx, lp.p, sink, false)
	if err != nil {
		lp.b.Fatal(err)
	}
	took := time.Since(start)
	if rep.LoadsTotal != lp.next {
		lp.b.Fatalf("status counts %d loads, want %d", rep.LoadsTotal, lp.next)
	}
	return took
}

func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// ledgerFigures are the benchmark's measurements of one pipeline.
type ledgerFigures struct {
	idle, status, load time.Duration
}

func (lp *ledgerPipeline) measure() ledgerFigures {
	var f ledgerFigures
	var idle, status []time.Duration
	for range 3 {
		idle = append(idle, lp.update(nil))
		status = append(status, lp.status())
	}
	f.idle, f.status = median(idle), median(status)
	lp.settleDisk()
	// 40 one-row loads more, one after the other in one flow, each timed
	// from Begin to its commit's end.
	lp.produce(40, 1)
	var ts timedSink
	lp.update(func(s sinks.Sink) sinks.Sink { ts = timed(lp.b, s); return ts })
	loads := ts.durations()
	if len(loads) != 40 {
		lp.b.Fatalf("%d loads timed, want 40", len(loads))
	}
	f.load = median(loads)
	return f
}

// BenchmarkLedgerGrowth measures what a pipeline's history costs: on a
// destination holding SLUICE_BENCH_LOADS (20,000) committed one-row loads
// against one holding 20, both made in the same run, the time of an idle
// update (nothing to load; the median of three), of status (the
// destination's part, without Kafka; the median of three) and of a one-row
// load (from Begin to the end of its commit; the median of 40 loads after
// them, one after the other in one flow). The history comes from 20 append
// flows of one topic each, committing side by side. It reports the ratios, which stay near 1 when nothing reads
// the whole ledger or grows with the loads before. Run with -benchtime 1x.
func BenchmarkLedgerGrowth(b *testing.B) {
	n := ledgerLoads()
	for _, kind := range destinations {
		b.Run(kind, func(b *testing.B) {
			for b.Loop() {
				small := newLedgerPipeline(b, newDestination(b, kind), 20).measure()
				large := newLedgerPipeline(b, newDestination(b, kind), n).measure()
				b.ReportMetric(large.idle.Seconds()/small.idle.Seconds(), "idle_update_ratio")
				b.ReportMetric(large.status.Seconds()/small.status.Seconds(), "status_ratio")
				b.ReportMetric(large.load.Seconds()/small.load.Seconds(), "load_ratio")
				fmt.Printf("ledger growth, %s, %d loads against 20: idle update %s against %s (%.2f), status %s against %s (%.2f), one-row load %s against %s (%.2f)\n",
					kind, n, large.idle.Round(time.Millisecond), small.idle.Round(time.Millisecond), large.idle.Seconds()/small.idle.Seconds(),
					large.status.Round(100*time.Microsecond), small.status.Round(100*time.Microsecond), large.status.Seconds()/small.status.Seconds(),
					large.load.Round(10*time.Microsecond), small.load.Round(10*time.Microsecond), large.load.Seconds()/small.load.Seconds())
			}
		})
	}
}

// diskLatency times what a commit asks of the file system's metadata, a
// folder created, a symlink in it and the folder synced, then removed: the
// median of 15.
func diskLatency(b *testing.B, dir string) time.Duration {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	var ds []time.Duration
	for i := range 15 {
		start := time.Now()
		sub := filepath.Join(dir, fmt.Sprintf("p%d", i))
		if err := os.Mkdir(sub, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.Symlink("x", filepath.Join(sub, "l")); err != nil {
			b.Fatal(err)
		}
		f, err := os.Open(sub)
		if err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		f.Close()
		ds = append(ds, time.Since(start))
		if err := os.RemoveAll(sub); err != nil {
			b.Fatal(err)
		}
	}
	return median(ds)
}

// settleDisk waits, at most three minutes, until the file system's metadata
// latency beside a local destination is back within 1.5 times what it was
// before the burst. Removing what the burst left (expired versions) queues
// work in the file system (on a disk mounted with discard, the trims of
// every freed block) that slows each mkdir, symlink and fsync for a while
// after: that is the disk's, not the cost of the history to a load.
func (lp *ledgerPipeline) settleDisk() {
	if lp.probe == "" {
		return
	}
	syscall.Sync()
	start := time.Now()
	var now time.Duration
	for time.Since(start) < 3*time.Minute {
		if now = diskLatency(lp.b, lp.probe); now <= lp.probeBase*3/2 {
			break
		}
		time.Sleep(time.Second)
	}
	lp.b.Logf("disk metadata latency %s (before the burst %s), after %s", now, lp.probeBase, time.Since(start).Round(time.Second))
}
