package main

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/render"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/destination"
)

func newShow(g *globals) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "show TABLE",
		Short: "Print the logical content of a table (a target, _sluice_loads, _sluice_dead_letters, _sluice_expectations or _sluice_version)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !slices.Contains(render.Formats, format) {
				return usageErr("--format %q: one of %s", format, strings.Join(render.Formats, ", "))
			}
			return g.show(cmd.Context(), args[0], format)
		},
	}
	cmd.Flags().StringVar(&format, "format", "table", "table, jsonl or csv")
	return cmd
}

func (g *globals) show(ctx context.Context, table, format string) error {
	p, err := g.loadSpec()
	if err != nil {
		return err
	}
	var sortBy []string
	cdcRoot := "" // a child table of this CDC target: its current rows only
	switch table {
	case batch.LoadsTable:
		sortBy = []string{"committed_at", "load_id"}
	case batch.DeadLettersTable:
		sortBy = []string{"at", "flow", "source", "position"}
	case batch.ExpectationsTable:
		sortBy = []string{"at", "flow", "expectation"}
	case batch.VersionTable:
		sortBy = []string{"version", "inserted_at"}
	default:
		t := p.Table(table)
		if root := p.ChildRoot(table); t == nil && root != nil {
			// A child table: by its record, its parent, its place.
			sortBy = []string{batch.RootIDColumn, batch.ParentIDColumn, batch.ListIdxColumn}
			if root.CDC {
				cdcRoot = root.Name
			}
			break
		}
		if t == nil {
			return usageErr("unknown table %q: not a table of the spec, %s, %s, %s or %s", table, batch.LoadsTable, batch.DeadLettersTable, batch.ExpectationsTable, batch.VersionTable)
		}
		sortBy = t.Schema.Names()
		if t.CDC {
			// By key, then (SCD type 2) __START_AT, then the rest.
			sortBy = append(append([]string(nil), t.Keys...), "__START_AT")
			for _, n := range t.Schema.Names() {
				if !slices.Contains(sortBy, n) {
					sortBy = append(sortBy, n)
				}
			}
		}
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
	b, err := sink.Scan(ctx, table)
	if errors.Is(err, sinks.ErrUnknownTable) {
		return usageErr("unknown table %q: it has no data yet (run sluice update first)", table)
	}
	if err != nil {
		return err
	}
	if cdcRoot != "" {
		if b, err = currentChildRows(ctx, sink, cdcRoot, b); err != nil {
			return err
		}
	}
	idx := make([]int, 0, len(sortBy))
	for _, name := range sortBy {
		if i := b.Schema.Index(name); i >= 0 {
			idx = append(idx, i)
		}
	}
	render.Sort(b, idx)
	return render.Write(g.stdout, b, format)
}

// currentChildRows returns the rows of a child table of a CDC target that
// belong to the target's rows now: those whose record's change the target
// shows (docs/schema.md#child-tables).
func currentChildRows(ctx context.Context, sink sinks.Sink, root string, b *batch.Batch) (*batch.Batch, error) {
	r, err := sink.Scan(ctx, root)
	if err != nil {
		return nil, err
	}
	ids := map[string]bool{}
	if v := r.Column(batch.IDColumn); v != nil {
		for i := range r.Len() {
			if !v.IsNull(i) {
				ids[v.Strs[i]] = true
			}
		}
	}
	roots := b.Column(batch.RootIDColumn)
	out := batch.New(b.Schema, b.Len())
	for i := range b.Len() {
		if roots != nil && !roots.IsNull(i) && ids[roots.Strs[i]] {
			out.AppendRow(b, i)
		}
	}
	return out, nil
}
