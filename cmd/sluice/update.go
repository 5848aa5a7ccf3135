package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/flows"
	"github.com/sluicehq/sluice/flows/spec"
	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/destination"
)

func newUpdate(g *globals) *cobra.Command {
	var (
		retryFor      time.Duration
		fullRefresh   bool
		refresh       []string
		allowDataLoss bool
		expire        bool
		dev           bool
		metricsAddr   string
	)
	cmd := &cobra.Command{
		Use:   "update",
		Short: "Process everything available when it starts, commit, exit 0",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			err := g.execute(cmd, dev, metricsAddr, flows.Options{Mode: flows.ModeUpdate, RetryFor: retryFor,
				FullRefresh: fullRefresh, Refresh: refresh, AllowDataLoss: allowDataLoss, Expire: expire, Progress: g.errOut(),
				Summary: func(s []flows.FlowSummary) { printSummary(cmd.OutOrStdout(), s) }})
			if errors.Is(err, flows.ErrUnknownFlow) {
				return &exitError{code: exitUsage, err: err}
			}
			return err
		},
	}
	cmd.Flags().DurationVar(&retryFor, "retry-for", flows.DefaultRetryFor, "give up on a destination still failing after this long")
	cmd.Flags().BoolVar(&fullRefresh, "full-refresh", false, "empty every target and replay every flow from the start")
	cmd.Flags().StringSliceVar(&refresh, "refresh", nil, "empty the targets of these flows (FLOW[,FLOW]) and replay every flow writing them from the start")
	cmd.Flags().BoolVar(&allowDataLoss, "allow-data-loss", false, "refresh even when a Kafka source no longer holds a flow's first offset")
	cmd.Flags().BoolVar(&dev, "dev", false, devUsage)
	cmd.Flags().StringVar(&metricsAddr, "metrics-addr", "", metricsUsage)
	cmd.Flags().BoolVar(&expire, "expire", false, "then go over every CDC target's key states and forget what tombstone_retention let expire, and compact ClickHouse CDC targets whose removal markers pass a tenth of their rows, as run does periodically")
	return cmd
}

// metricsUsage is the --metrics-addr flag's help.
const metricsUsage = "serve /metrics, /healthz and /readyz on this address (host:port), overriding the spec's metrics.listen"

// devUsage is the --dev flag's help.
const devUsage = "write into a fresh dataset of this run's own: the ClickHouse database <database>_<UTC time>, or the folder <path>_<UTC time> beside the local destination"

func newRun(g *globals) *cobra.Command {
	var (
		dev         bool
		metricsAddr string
		logEvery    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run continuously until SIGINT/SIGTERM, then drain, commit and exit 0",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if logEvery == 0 {
				logEvery = -1 // --log-every 0: never
			}
			return g.execute(cmd, dev, metricsAddr, flows.Options{Mode: flows.ModeRun, Progress: g.errOut(), LogEvery: logEvery})
		},
	}
	cmd.Flags().BoolVar(&dev, "dev", false, devUsage)
	cmd.Flags().StringVar(&metricsAddr, "metrics-addr", "", metricsUsage)
	cmd.Flags().DurationVar(&logEvery, "log-every", flows.DefaultLogEvery, "log what each flow committed this often (0: never)")
	return cmd
}

// printSummary prints what each flow committed, one line per flow: what
// an update ends with on stdout.
func printSummary(w io.Writer, s []flows.FlowSummary) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FLOW\tTARGET\tLOADS\tROWS\tDEAD LETTERS\tLAG\tELAPSED")
	for _, f := range s {
		lag := "-"
		if f.Lag >= 0 {
			lag = strconv.FormatInt(f.Lag, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\n", f.Flow, f.Target, f.Loads, f.Rows, f.DeadLetters, lag, f.Elapsed.Round(time.Millisecond))
	}
	tw.Flush()
}

func (g *globals) execute(cmd *cobra.Command, dev bool, metricsAddr string, opts flows.Options) error {
	ctx := cmd.Context()
	log, err := g.logger()
	if err != nil {
		return err
	}
	p, err := g.loadSpec()
	if err != nil {
		return err
	}
	if dev {
		fmt.Fprintf(cmd.OutOrStdout(), "dev mode: writing into %s\n", p.DevDataset(time.Now()))
	}
	if metricsAddr == "" && p.Metrics != nil {
		metricsAddr = p.Metrics.Listen
	}
	if metricsAddr != "" {
		// Served before anything connects: /healthz answers, and /readyz
		// says what it waits for, while the destination is still down.
		opts.Metrics = metrics.New()
		srv, err := metrics.Serve(metricsAddr, opts.Metrics)
		if err != nil {
			return fmt.Errorf("metrics: listen on %s: %w", metricsAddr, err)
		}
		defer srv.Close()
		log.Info("serving metrics", "addr", srv.Addr(), "paths", "/metrics /healthz /readyz")
	}
	sink, err := openDestination(ctx, p, log, opts)
	if err != nil {
		return err
	}
	defer sink.Close()
	opts.Logger = log
	opts.HeartbeatEvery, opts.HeartbeatTTL, opts.LeaseTTL = g.heartbeatEvery, g.heartbeatTTL, g.leaseTTL
	err = flows.Execute(ctx, p, sink, opts)
	if opts.Mode == flows.ModeRun && errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil
	}
	return err
}

// openDestination opens the pipeline's destination, waiting for one that
// does not answer yet as a destination failing mid-run is waited for (the
// runner's retries: run until stopped, update for --retry-for). A signal
// ends the wait at once.
func openDestination(ctx context.Context, p *spec.Pipeline, log *slog.Logger, opts flows.Options) (sinks.Sink, error) {
	opts.Logger = log
	var sink sinks.Sink
	err := flows.Retry(ctx, p, opts, "open the destination", destination.Opening{Pipeline: p}, func(ctx context.Context) error {
		// The sink outlives the signal: a drain after SIGTERM still
		// commits. Each attempt is bounded by the destination's dial
		// timeout, and ends when the signal comes.
		octx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		defer cancel()
		defer context.AfterFunc(ctx, cancel)()
		var err error
		sink, err = destination.Open(octx, p, log)
		if err != nil && ctx.Err() != nil {
			return fmt.Errorf("%w while connecting to the destination: %w", ctx.Err(), err)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return sink, nil
}
