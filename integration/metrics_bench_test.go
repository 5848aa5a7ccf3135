package integration

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/flows"
	"github.com/sluicehq/sluice/flows/sample"
	"github.com/sluicehq/sluice/flows/spec"
	"github.com/sluicehq/sluice/metrics"
	sinkdest "github.com/sluicehq/sluice/sinks/destination"
)

// BenchmarkAppendMetrics measures the demo's append into the local
// destination with metrics recorded and /metrics scraped every second
// against the same without metrics, in the same run (alternating, median
// of three each), and reports the ratio (the aim: within 3%). Run it with
// -benchtime 1x (make bench does).
func BenchmarkAppendMetrics(b *testing.B) {
	n := benchMessages()
	broker := startBroker(b, map[string]int32{"orders": benchPartitions})
	msgs, _ := orderMessages(n)
	produceMsgs(b, broker.Addr(), "orders", msgs)
	msgs = nil
	ctx := context.Background()
	run := func(withMetrics bool) time.Duration {
		path := filepath.Join(b.TempDir(), "sluice.yaml")
		if err := os.WriteFile(path, fmt.Appendf(nil, sample.Spec, broker.Addr(), "./data"), 0o644); err != nil {
			b.Fatal(err)
		}
		p, err := spec.Load(path)
		if err != nil {
			b.Fatal(err)
		}
		sink, err := sinkdest.Open(ctx, p, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer sink.Close()
		opts := flows.Options{Mode: flows.ModeUpdate}
		stop := func() {}
		if withMetrics {
			opts.Metrics = metrics.New()
			srv := httptest.NewServer(opts.Metrics.Handler())
			done := make(chan struct{})
			go func() {
				tick := time.NewTicker(time.Second)
				defer tick.Stop()
				for {
					select {
					case <-done:
						return
					case <-tick.C:
						if resp, err := srv.Client().Get(srv.URL + "/metrics"); err == nil {
							_, _ = io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
						}
					}
				}
			}()
			stop = func() { close(done); srv.Close() }
		}
		start := time.Now()
		err = flows.Execute(ctx, p, sink, opts)
		took := time.Since(start)
		stop()
		if err != nil {
			b.Fatal(err)
		}
		return took
	}
	for b.Loop() {
		run(false) // a process's first run is slower, whatever it runs
		var plain, measured []time.Duration
		for range 3 {
			plain = append(plain, run(false))
			measured = append(measured, run(true))
		}
		slices.Sort(plain)
		slices.Sort(measured)
		pr, mr := float64(n)/plain[1].Seconds(), float64(n)/measured[1].Seconds()
		b.ReportMetric(pr, "plain_msgs/s")
		b.ReportMetric(mr, "metrics_msgs/s")
		b.ReportMetric(mr/pr, "ratio")
		fmt.Printf("append into local, %d messages: without metrics %.0f msg/s (%v); with metrics scraped every second %.0f msg/s (%v); ratio %.3f\n",
			n, pr, roundAll(plain), mr, roundAll(measured), mr/pr)
	}
}
