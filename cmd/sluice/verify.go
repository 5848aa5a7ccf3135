package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/flows"
)

func newVerify(g *globals) *cobra.Command {
	var o flows.VerifyOptions
	var format string
	cmd := &cobra.Command{
		Use:   "verify TABLE --day COLUMN",
		Short: "Compare a target's rows per day (count, and the max of --max) with its source read again; exit 1 when a day differs",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Table = args[0]
			if format != "text" && format != "json" {
				return usageErr("--format %q: text or json", format)
			}
			if o.Day == "" {
				return usageErr("--day: required, the column that gives each row's day")
			}
			for _, d := range []struct{ flag, v string }{{"--from", o.From}, {"--to", o.To}} {
				if _, err := time.Parse(time.DateOnly, d.v); d.v != "" && err != nil {
					return usageErr("%s %q: a day, YYYY-MM-DD", d.flag, d.v)
				}
			}
			p, _, sink, err := g.openPipeline(cmd.Context(), nil)
			if err != nil {
				return err
			}
			defer sink.Close()
			rep, err := flows.Verify(cmd.Context(), p, sink, o)
			if errors.Is(err, flows.ErrUnknownFlow) {
				return &exitError{code: exitUsage, err: err}
			}
			if err != nil {
				return err
			}
			if format == "json" {
				enc := json.NewEncoder(g.stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else {
				printVerify(g, rep)
			}
			if rep.Differ > 0 {
				return &exitError{code: exitFail, err: fmt.Errorf("verify: %d day(s) of %s differ from its source", rep.Differ, rep.Table)}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&o.Day, "day", "", "the column that gives each row's day (timestamp, date or string)")
	cmd.Flags().StringVar(&o.Max, "max", "", "also compare the maximum of this column per day")
	cmd.Flags().StringVar(&o.From, "from", "", "the first day compared (YYYY-MM-DD)")
	cmd.Flags().StringVar(&o.To, "to", "", "the last day compared (YYYY-MM-DD)")
	cmd.Flags().StringVar(&format, "format", "text", "text or json")
	return cmd
}

func printVerify(g *globals, rep *flows.VerifyReport) {
	fmt.Fprintf(g.stdout, "table %s against flow %s, by %s: %d day(s), %d differ\n", rep.Table, rep.Flow, rep.Day, len(rep.Days), rep.Differ)
	if rep.Differ == 0 {
		return
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	head := "DAY\tTARGET ROWS\tSOURCE ROWS"
	if rep.Max != "" {
		head += "\tTARGET MAX(" + rep.Max + ")\tSOURCE MAX(" + rep.Max + ")"
	}
	fmt.Fprintln(tw, head)
	for _, d := range rep.Days {
		if d.Equal {
			continue
		}
		line := fmt.Sprintf("%s\t%d\t%d", d.Day, d.TargetRows, d.SourceRows)
		if rep.Max != "" {
			line += "\t" + d.TargetMax + "\t" + d.SourceMax
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
}
