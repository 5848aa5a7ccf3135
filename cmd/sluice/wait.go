package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/flows"
)

// exitBehind is a wait that timed out with flows still behind.
const exitBehind = 3

func newWait(g *globals) *cobra.Command {
	var (
		only     []string
		interval time.Duration
		timeout  time.Duration
		format   string
	)
	cmd := &cobra.Command{
		Use:   "wait",
		Short: "Wait until the flows committed what their sources held when the wait started (for downstream jobs); exit 3 on --timeout",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "text" && format != "json" {
				return usageErr("--format %q: text or json", format)
			}
			p, _, sink, err := g.openPipeline(cmd.Context(), nil)
			if err != nil {
				return err
			}
			defer sink.Close()
			rep, err := flows.Wait(cmd.Context(), p, sink, flows.WaitOptions{Flows: only, Interval: interval, Timeout: timeout})
			if errors.Is(err, flows.ErrUnknownFlow) {
				return &exitError{code: exitUsage, err: err}
			}
			if rep != nil {
				printWait(g, rep, format)
			}
			if errors.Is(err, flows.ErrWaitTimeout) {
				return &exitError{code: exitBehind, err: fmt.Errorf("wait: %w after %s", err, timeout)}
			}
			return err
		},
	}
	cmd.Flags().StringSliceVar(&only, "flow", nil, "wait for these flows only (FLOW[,FLOW]; default every flow)")
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "how often to look")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "give up after this long, exit 3 (0: wait until interrupted)")
	cmd.Flags().StringVar(&format, "format", "text", "text or json")
	return cmd
}

func printWait(g *globals, rep *flows.WaitReport, format string) {
	if format == "json" {
		enc := json.NewEncoder(g.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
		return
	}
	if rep.CaughtUp {
		fmt.Fprintf(g.stdout, "caught up after %s: %d flow(s)\n", rep.Waited, len(rep.Flows))
		return
	}
	fmt.Fprintf(g.stdout, "still behind after %s:\n", rep.Waited)
	if rep.Unpublished > 0 {
		fmt.Fprintf(g.stdout, "  %d committed load(s) not published yet\n", rep.Unpublished)
	}
	for _, f := range rep.Flows {
		if !f.CaughtUp {
			fmt.Fprintf(g.stdout, "  %s: %s\n", f.Flow, strings.Join(f.Behind, "; "))
		}
	}
}
