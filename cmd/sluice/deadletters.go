package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/flows"
	"github.com/sluicehq/sluice/flows/spec"
)

// dead-letters list and replay (docs/operations.md, "Replaying dead letters").

type deadLetterFlags struct {
	flow, reason, since string
	asJSON              bool
}

func (d *deadLetterFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&d.flow, "flow", "", "only the dead letters of this flow")
	cmd.Flags().StringVar(&d.reason, "reason", "", "only the dead letters of this reason (type_mismatch, expectation, ...)")
	cmd.Flags().StringVar(&d.since, "since", "", "only the dead letters written since this time: RFC 3339, or a duration ago (24h, 7d)")
	cmd.Flags().BoolVar(&d.asJSON, "json", false, "print JSON")
}

// filter checks the flags against the spec.
func (d *deadLetterFlags) filter(p *spec.Pipeline, now time.Time) (flows.DeadLetterFilter, error) {
	f := flows.DeadLetterFilter{Flow: d.flow, Reason: d.reason}
	if d.flow != "" && p.Flow(d.flow) == nil {
		return f, usageErr("--flow %q: not a flow of the spec", d.flow)
	}
	if d.since != "" {
		t, err := parseSince(d.since, now)
		if err != nil {
			return f, usageErr("--since %q: %v", d.since, err)
		}
		f.Since = t
	}
	return f, nil
}

// parseSince reads an RFC 3339 time, or a duration meaning that long ago
// (Go's syntax, plus d for days).
func parseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if days, ok := strings.CutSuffix(s, "d"); ok && err != nil {
		n, nerr := strconv.ParseFloat(days, 64)
		if nerr == nil {
			d, err = time.Duration(n*24*float64(time.Hour)), nil
		}
	}
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("want an RFC 3339 time or a duration such as 24h or 7d")
	}
	return now.Add(-d), nil
}

func newDeadLetters(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dead-letters",
		Short: "List the pending dead letters, or replay them with the spec as it is now",
	}
	cmd.AddCommand(newDeadLettersList(g), newDeadLettersReplay(g))
	return cmd
}

// deadLetterJSON is a pending dead letter as list --json prints it.
type deadLetterJSON struct {
	Flow     string `json:"flow"`
	Target   string `json:"target"`
	Source   string `json:"source"`
	Position string `json:"position"`
	Reason   string `json:"reason"`
	Error    string `json:"error"`
	Payload  []byte `json:"payload"` // base64
	At       string `json:"at"`
	LoadID   string `json:"load_id"`
}

func newDeadLettersList(g *globals) *cobra.Command {
	var d deadLetterFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "The dead letters not replayed yet: flow, source, position, reason, error and when",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			var filter flows.DeadLetterFilter
			p, _, sink, err := g.openPipeline(ctx, func(p *spec.Pipeline) (err error) {
				filter, err = d.filter(p, time.Now())
				return err
			})
			if err != nil {
				return err
			}
			defer sink.Close()
			dls, err := flows.PendingDeadLetters(ctx, p, sink, filter)
			if err != nil {
				return err
			}
			if d.asJSON {
				out := make([]deadLetterJSON, 0, len(dls))
				for _, x := range dls {
					out = append(out, deadLetterJSON{Flow: x.Flow, Target: x.Target, Source: x.Source, Position: x.Position,
						Reason: x.Reason, Error: x.Error, Payload: x.Payload, At: x.At.UTC().Format(time.RFC3339Nano), LoadID: x.LoadID})
				}
				enc := json.NewEncoder(g.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			tw := tabwriter.NewWriter(g.stdout, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "FLOW\tSOURCE\tPOSITION\tREASON\tERROR\tAT")
			for _, x := range dls {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", x.Flow, oneLine(x.Source), x.Position, x.Reason,
					oneLine(x.Error), x.At.UTC().Format(time.RFC3339))
			}
			tw.Flush()
			fmt.Fprintf(g.stdout, "(%d pending)\n", len(dls))
			return nil
		},
	}
	d.add(cmd)
	return cmd
}

func newDeadLettersReplay(g *globals) *cobra.Command {
	var (
		d        deadLetterFlags
		retryFor time.Duration
	)
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Decode the pending dead letters with the spec as it is now and load those that decode, at their original positions, exactly once",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			var filter flows.DeadLetterFilter
			p, log, sink, err := g.openPipeline(ctx, func(p *spec.Pipeline) (err error) {
				filter, err = d.filter(p, time.Now())
				return err
			})
			if err != nil {
				return err
			}
			defer sink.Close()
			rep, rerr := flows.ReplayDeadLetters(ctx, p, sink, flows.Options{Logger: log, RetryFor: retryFor,
				HeartbeatEvery: g.heartbeatEvery, HeartbeatTTL: g.heartbeatTTL, LeaseTTL: g.leaseTTL}, filter)
			if d.asJSON {
				enc := json.NewEncoder(g.stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
				return rerr
			}
			failing := 0
			for _, n := range rep.Failing {
				failing += n
			}
			fmt.Fprintf(g.stdout, "replayed %d, still failing %d\n", rep.Replayed, failing)
			for _, reason := range slices.Sorted(maps.Keys(rep.Failing)) {
				fmt.Fprintf(g.stdout, "  %s: %d\n", reason, rep.Failing[reason])
			}
			for _, why := range slices.Sorted(maps.Keys(rep.Skipped)) {
				fmt.Fprintf(g.stdout, "not tried (%s): %d\n", why, rep.Skipped[why])
			}
			return rerr
		},
	}
	d.add(cmd)
	cmd.Flags().DurationVar(&retryFor, "retry-for", flows.DefaultRetryFor, "give up on a destination still failing after this long")
	return cmd
}

// oneLine keeps a value on its row of the table.
var oneLine = strings.NewReplacer("\n", `\n`, "\r", `\r`, "\t", `\t`).Replace
