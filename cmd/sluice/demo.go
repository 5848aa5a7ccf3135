package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/consumer"
	"github.com/sluicehq/sluice/consumer/devkafka"
	"github.com/sluicehq/sluice/flows"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/render"
	"github.com/sluicehq/sluice/flows/sample"
	"github.com/sluicehq/sluice/flows/spec"
)

func newDemo(g *globals) *cobra.Command {
	var (
		messages   int
		partitions int32
		dir        string
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "The whole thing on embedded defaults: a broker, an orders stream, an append pipeline into local Parquet tables",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if messages < 1 || partitions < 1 {
				return usageErr("--messages and --partitions must be positive")
			}
			return g.demo(cmd.Context(), messages, partitions, dir)
		},
	}
	cmd.Flags().IntVar(&messages, "messages", 300_000, "orders to produce")
	cmd.Flags().Int32Var(&partitions, "partitions", 4, "partitions of the orders topic")
	cmd.Flags().StringVar(&dir, "dir", "", "folder for the spec and the tables (default a new temporary folder)")
	return cmd
}

func (g *globals) demo(ctx context.Context, messages int, partitions int32, dir string) error {
	if g.logLevel == "info" {
		g.logLevel = "warn" // the demo prints its own story
	}
	log, err := g.logger()
	if err != nil {
		return err
	}
	if dir == "" {
		if dir, err = os.MkdirTemp("", "sluice-demo-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	out := g.stdout
	step := func(format string, args ...any) { fmt.Fprintf(out, "==> "+format+"\n", args...) }

	broker, err := devkafka.Start(devkafka.Config{Addr: "127.0.0.1:0", Topics: map[string]int32{"orders": partitions}, Logger: log})
	if err != nil {
		return err
	}
	defer broker.Close()
	step("embedded Kafka broker on %s, topic orders with %d partitions", broker.Addr(), partitions)

	bad := sample.Malformed()
	msgs := make([]consumer.Message, 0, messages+len(bad))
	rng := rand.New(rand.NewPCG(42, 7))
	every := messages / (len(bad) + 1)
	var size int
	for i := range messages {
		v := sample.Order(rng, i)
		size += len(v)
		msgs = append(msgs, consumer.Message{Key: []byte(strconv.Itoa(i % 1000)), Value: v, Partition: -1})
		if j := i/every - 1; i%every == 0 && j >= 0 && j < len(bad) {
			msgs = append(msgs, consumer.Message{Key: []byte("bad"), Value: bad[j].Value, Partition: -1})
		}
	}
	start := time.Now()
	if err := consumer.Produce(ctx, []string{broker.Addr()}, "orders", msgs); err != nil {
		return err
	}
	step("produced %d order events (%.1f MB) and %d malformed messages in %s", messages, float64(size)/1e6, len(bad), since(start))

	specPath := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(specPath, fmt.Appendf(nil, sample.Spec, broker.Addr(), "./data"), 0o644); err != nil {
		return err
	}
	p, err := spec.Load(specPath)
	if err != nil {
		return err
	}
	step("pipeline spec written to %s", specPath)

	sink, err := flows.OpenSink(ctx, p, log)
	if err != nil {
		return err
	}
	defer sink.Close()
	start = time.Now()
	if err := flows.Execute(ctx, p, sink, flows.Options{Mode: flows.ModeUpdate, Logger: log}); err != nil {
		return err
	}
	elapsed := time.Since(start)

	orders, err := sink.Scan(ctx, "orders")
	if err != nil {
		return err
	}
	dls, err := sink.Scan(ctx, batch.DeadLettersTable)
	if err != nil {
		return err
	}
	loads, err := sink.Ledger(ctx)
	if err != nil {
		return err
	}
	step("sluice update loaded %d rows into orders in %d loads in %s (%.0f messages/s); %d dead letters",
		orders.Len(), len(loads.Loads), elapsed.Round(time.Millisecond), float64(messages+len(bad))/elapsed.Seconds(), dls.Len())

	fmt.Fprintln(out, "\nThe first orders:")
	render.Sort(orders, []int{0})
	orders.Truncate(min(5, orders.Len()))
	if err := render.Write(out, orders, "table"); err != nil {
		return err
	}
	fmt.Fprintln(out, "\nThe dead letters (each with its partition/offset, the reason and the raw message):")
	dlView := dls.Select("source", "position", "reason", "error")
	render.Sort(dlView, []int{0, 1})
	if err := render.Write(out, dlView, "table"); err != nil {
		return err
	}

	self := "sluice"
	if exe, err := os.Executable(); err == nil && !isTemp(exe) {
		self = exe
	}
	fmt.Fprintf(out, `
The tables are plain Parquet files, readable by any Parquet reader:
  ls %[1]s/data/orders/
  %[2]s show -f %[3]s orders --format jsonl | head
  %[2]s show -f %[3]s _sluice_dead_letters
  %[2]s show -f %[3]s _sluice_loads
  duckdb -c "select status, count(*), sum(amount) from '%[1]s/data/orders/*.parquet' group by 1"
The demo's broker stopped with it; remove %[1]s when done.
`, dir, self, specPath)
	return nil
}

func isTemp(path string) bool {
	rel, err := filepath.Rel(os.TempDir(), path)
	return err == nil && !filepath.IsAbs(rel) && len(rel) > 0 && rel[0] != '.'
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }
