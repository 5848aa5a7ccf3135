package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
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
	"github.com/sluicehq/sluice/sinks/destination"
)

func newDemo(g *globals) *cobra.Command {
	var (
		messages   int
		customers  int
		partitions int32
		dir        string
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "The whole thing on embedded defaults: a broker, an orders stream and a change stream, a pipeline into local Parquet tables",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if messages < 1 || customers < 1 || partitions < 1 {
				return usageErr("--messages, --customers and --partitions must be positive")
			}
			return g.demo(cmd.Context(), messages, customers, partitions, dir)
		},
	}
	cmd.Flags().IntVar(&messages, "messages", 300_000, "orders to produce")
	cmd.Flags().IntVar(&customers, "customers", 20_000, "customers whose changes to produce")
	cmd.Flags().Int32Var(&partitions, "partitions", 4, "partitions of each topic")
	cmd.Flags().StringVar(&dir, "dir", "", "folder for the spec and the tables (default a new temporary folder)")
	return cmd
}

func (g *globals) demo(ctx context.Context, messages, customers int, partitions int32, dir string) error {
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

	broker, err := devkafka.Start(devkafka.Config{Addr: "127.0.0.1:0", Topics: map[string]int32{"orders": partitions, sample.CustomersTopic: partitions}, Logger: log})
	if err != nil {
		return err
	}
	defer broker.Close()
	step("embedded Kafka broker on %s, topics orders and %s with %d partitions each", broker.Addr(), sample.CustomersTopic, partitions)

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

	changes, outcome := sample.CustomerChanges(customers, int(partitions))
	cmsgs := make([]consumer.Message, len(changes))
	tombstones := 0
	for i, c := range changes {
		cmsgs[i] = consumer.Message{Key: c.Key, Value: c.Value, Partition: c.Partition}
		if c.Value == nil {
			tombstones++
		}
	}
	if err := consumer.Produce(ctx, []string{broker.Addr()}, sample.CustomersTopic, cmsgs); err != nil {
		return err
	}
	step("produced %d changes of %d customers as Debezium writes them from PostgreSQL (%d deletes, each followed by its tombstone), spread over the partitions: %d arrive in their partition after a newer change of their customer",
		len(changes)-tombstones, customers, tombstones, outcome.Late)

	specPath := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(specPath, fmt.Appendf(nil, sample.DemoSpec, broker.Addr(), "./data"), 0o644); err != nil {
		return err
	}
	p, err := spec.Load(specPath)
	if err != nil {
		return err
	}
	step("pipeline spec written to %s", specPath)

	sink, err := destination.Open(ctx, p, log)
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
	ordersLoads := 0
	for _, ld := range loads.Loads {
		if slices.Contains(ld.Targets, "orders") {
			ordersLoads++
		}
	}
	current, err := sink.Scan(ctx, "customers")
	if err != nil {
		return err
	}
	history, err := sink.Scan(ctx, "customers_history")
	if err != nil {
		return err
	}
	step("sluice update, in %s (%.0f messages/s), loaded %d rows into orders in %d loads (%d dead letters), and applied the changes: customers holds %d rows (SCD type 1: one per customer not deleted), customers_history %d versions (SCD type 2)",
		elapsed.Round(time.Millisecond), float64(messages+len(bad)+len(changes))/elapsed.Seconds(), orders.Len(), ordersLoads, dls.Len(), current.Len(), history.Len())

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
	if err := showCustomer(out, current, history); err != nil {
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
  %[2]s show -f %[3]s customers_history | head
  %[2]s show -f %[3]s _sluice_dead_letters
  %[2]s show -f %[3]s _sluice_loads
  duckdb -c "select status, count(*), sum(amount) from '%[1]s/data/orders/*.parquet' group by 1"
The demo's broker stopped with it; remove %[1]s when done.
`, dir, self, specPath)
	return nil
}

// showCustomer prints the versions of the customer not deleted with the
// most of them (the lowest id among those) and its current row.
func showCustomer(out io.Writer, current, history *batch.Batch) error {
	ids := history.Column("id")
	if ids == nil || current.Column("id") == nil || history.Len() == 0 {
		return nil
	}
	live := map[int64]bool{}
	for _, id := range current.Column("id").Ints {
		live[id] = true
	}
	versions := map[int64]int{}
	var pick int64
	for _, id := range ids.Ints {
		if !live[id] {
			continue
		}
		versions[id]++
		if versions[id] > versions[pick] || versions[id] == versions[pick] && id < pick {
			pick = id
		}
	}
	only := func(b *batch.Batch) *batch.Batch {
		sel := batch.New(b.Schema, 0)
		for i, id := range b.Column("id").Ints {
			if id == pick {
				sel.AppendRow(b, i)
			}
		}
		return sel
	}
	h := only(history)
	render.Sort(h, []int{h.Schema.Index("__START_AT")})
	fmt.Fprintf(out, "\nThe versions of customer %d in customers_history, whatever order its changes arrived in:\n", pick)
	if err := render.Write(out, h, "table"); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nIts row in customers:\n")
	return render.Write(out, only(current), "table")
}

func isTemp(path string) bool {
	rel, err := filepath.Rel(os.TempDir(), path)
	return err == nil && !filepath.IsAbs(rel) && len(rel) > 0 && rel[0] != '.'
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }
