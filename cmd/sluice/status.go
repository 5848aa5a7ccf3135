package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/flows"
	"github.com/sluicehq/sluice/sinks/destination"
)

func newStatus(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Flows, their state and progress, consumer lag, dead letters",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.status(cmd.Context(), asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func (g *globals) status(ctx context.Context, asJSON bool) error {
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
		return err
	}
	defer sink.Close()
	reachCtx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	rep, err := flows.Status(reachCtx, p, sink, true)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(g.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	fmt.Fprintf(g.stdout, "pipeline %s: %d committed load(s)\n", rep.Pipeline, rep.LoadsTotal)
	if v := rep.Schema; v != nil {
		fmt.Fprintf(g.stdout, "schema version %d (%s) since %s\n", v.Version, v.Hash[:min(12, len(v.Hash))], v.InsertedAt.Format(time.RFC3339))
	}
	for _, hb := range rep.Processes {
		fmt.Fprintf(g.stdout, "  %s process pid %d on %s, heartbeat %s ago\n", hb.Kind, hb.PID, hb.Host, time.Since(hb.BeatAt).Round(time.Second))
	}
	tw := tabwriter.NewWriter(g.stdout, 2, 4, 2, ' ', 0)
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
		fmt.Fprintf(g.stdout, "\n%s partitions:\n", f.Name)
		tw := tabwriter.NewWriter(g.stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  TOPIC\tPARTITION\tPOSITION\tEND\tLAG")
		for _, pp := range f.Partitions {
			fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%s\n", pp.Topic, pp.Partition, orDash(pp.Position), orDash(pp.End), orDash(pp.Lag))
		}
		tw.Flush()
		if f.LagError != "" {
			fmt.Fprintf(g.stdout, "  lag unknown: %s\n", f.LagError)
		}
	}
	for _, f := range rep.Flows {
		if len(f.ChildTables) == 0 {
			continue
		}
		fmt.Fprintf(g.stdout, "\n%s child tables of %s:\n", f.Name, f.Target)
		for _, c := range f.ChildTables {
			fmt.Fprintf(g.stdout, "  %s, under %s\n", c.Name, c.Parent)
		}
	}
	for _, f := range rep.Flows {
		if len(f.Expectations) == 0 {
			continue
		}
		fmt.Fprintf(g.stdout, "\n%s expectations:\n", f.Name)
		tw := tabwriter.NewWriter(g.stdout, 2, 4, 2, ' ', 0)
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
		fmt.Fprintf(g.stdout, "\n%s cut-over: %d live changes came older than their key's replayed history (landed in history or ignored)\n", f.Name, f.CutOvers)
		tw := tabwriter.NewWriter(g.stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  KEY\tSEQUENCE\tREPLAYED BY")
		for _, k := range f.CutOverKeys {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", k.Key, k.Seq, k.ReplayFlow)
		}
		tw.Flush()
	}
	return nil
}

func orDash(v int64) string {
	if v < 0 {
		return "-"
	}
	return fmt.Sprint(v)
}
