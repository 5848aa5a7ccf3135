package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/flows"
	"github.com/sluicehq/sluice/sinks/destination"
)

func newStatus(g *globals) *cobra.Command {
	var (
		asJSON   bool
		watch    bool
		interval time.Duration
	)
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Flows, their state and progress, consumer lag, dead letters",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if interval <= 0 {
				return usageErr("--interval %s: a positive duration", interval)
			}
			if !watch && cmd.Flags().Changed("interval") {
				return usageErr("--interval needs --watch")
			}
			return g.status(cmd.Context(), asJSON, watch, interval)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (with --watch: one object a line per refresh)")
	cmd.Flags().BoolVar(&watch, "watch", false, "print the status again every --interval until interrupted")
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "how often --watch refreshes")
	return cmd
}

func (g *globals) status(ctx context.Context, asJSON, watch bool, interval time.Duration) error {
	p, err := g.loadSpec()
	if err != nil {
		return err
	}
	log, err := g.logger()
	if err != nil {
		return err
	}
	sink, err := destination.Open(ctx, p, log)
	if err != nil {
		if watch && ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer sink.Close()
	report := func(w io.Writer) error {
		reachCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		rep, err := flows.Status(reachCtx, p, sink, true)
		if err != nil {
			return err
		}
		if asJSON {
			enc := json.NewEncoder(w)
			if !watch {
				enc.SetIndent("", "  ")
			}
			return enc.Encode(rep)
		}
		printStatus(w, rep)
		return nil
	}
	if !watch {
		return report(g.stdout)
	}
	// Each refresh is written whole: on a terminal over the last one, else
	// as a block of its own under a line with its time.
	clear := isTerminal(g.stdout) && !asJSON
	var buf bytes.Buffer
	for {
		buf.Reset()
		if !asJSON {
			if clear {
				buf.WriteString("\x1b[H\x1b[2J")
			}
			fmt.Fprintf(&buf, "sluice status at %s (every %s; Ctrl-C stops)\n", time.Now().UTC().Format(time.RFC3339), interval)
		}
		if err := report(&buf); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// A watch outlives a destination or a broker that fails for a
			// while: it says so and tries again.
			if asJSON {
				buf.Reset()
				enc := json.NewEncoder(&buf)
				_ = enc.Encode(map[string]string{"error": err.Error(), "at": time.Now().UTC().Format(time.RFC3339)})
			} else {
				fmt.Fprintf(&buf, "status failed: %v\n", err)
			}
		}
		if !asJSON && !clear {
			buf.WriteString("\n")
		}
		if _, err := g.stdout.Write(buf.Bytes()); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

// printStatus prints a status report as text.
func printStatus(w io.Writer, rep *flows.Report) {
	fmt.Fprintf(w, "pipeline %s: %d committed load(s)\n", rep.Pipeline, rep.LoadsTotal)
	if v := rep.Schema; v != nil {
		fmt.Fprintf(w, "schema version %d (%s) since %s\n", v.Version, v.Hash[:min(12, len(v.Hash))], v.InsertedAt.Format(time.RFC3339))
	}
	for _, hb := range rep.Processes {
		fmt.Fprintf(w, "  %s process pid %d on %s, heartbeat %s ago\n", hb.Kind, hb.PID, hb.Host, time.Since(hb.BeatAt).Round(time.Second))
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nFLOW\tKIND\tTARGET\tSOURCE\tLOADS\tROWS\tDEAD LETTERS\tLAST LOAD\tSTATE")
	for _, f := range rep.Flows {
		last := "-"
		if f.LastLoadAt != nil {
			last = f.LastLoadAt.UTC().Format(time.RFC3339)
		}
		state := "-"
		switch {
		case f.Once != "":
			state = "once: " + f.Once
		case len(f.Snapshots) > 0:
			state = "snapshots: " + strings.Join(f.Snapshots, ",")
		case f.Cursor != "":
			state = fmt.Sprintf("cursor: %s after %d runs", f.Cursor, f.Runs)
		}
		if f.FilesDone > 0 {
			state += fmt.Sprintf(" (%d files read)", f.FilesDone)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", f.Name, f.Kind, f.Target, f.Source, f.Loads, f.Rows, f.DeadLetters, last, state)
	}
	tw.Flush()
	for _, f := range rep.Flows {
		if len(f.Partitions) == 0 && f.LagError == "" {
			continue
		}
		fmt.Fprintf(w, "\n%s partitions:\n", f.Name)
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  TOPIC\tPARTITION\tPOSITION\tEND\tLAG")
		for _, pp := range f.Partitions {
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\n", pp.Topic, pp.Partition, orDash(pp.Position), orDash(pp.End), orDash(pp.Lag))
		}
		tw.Flush()
		if f.LagError != "" {
			fmt.Fprintf(w, "  lag unknown: %s\n", f.LagError)
		}
	}
	for _, f := range rep.Flows {
		if len(f.ChildTables) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s child tables of %s:\n", f.Name, f.Target)
		for _, c := range f.ChildTables {
			fmt.Fprintf(w, "  %s, under %s\n", c.Name, c.Parent)
		}
	}
	for _, f := range rep.Flows {
		if len(f.Expectations) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s expectations:\n", f.Name)
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  EXPECTATION\tON VIOLATION\tRECORDS")
		for _, e := range f.Expectations {
			name := e.Expectation
			if e.Action == "filtered" {
				name = "(where)"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%d\n", name, e.Action, e.Rows)
		}
		tw.Flush()
	}
	for _, f := range rep.Flows {
		if f.CutOvers == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s cut-over: %d live changes came older than their key's replayed history (landed in history or ignored)\n", f.Name, f.CutOvers)
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  KEY\tSEQUENCE\tREPLAYED BY")
		for _, k := range f.CutOverKeys {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", k.Key, k.Seq, k.ReplayFlow)
		}
		tw.Flush()
	}
}

func orDash(v int64) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprint(v)
}
