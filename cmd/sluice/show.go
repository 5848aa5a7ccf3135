package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/sluicehq/sluice/flows"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/render"
	"github.com/sluicehq/sluice/flows/rules"
	"github.com/sluicehq/sluice/flows/spec"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/destination"
)

// terminalLimit is show's --limit for the table format on a terminal,
// where a whole table is rarely what one wants to scroll through.
const terminalLimit = 20

func newShow(g *globals) *cobra.Command {
	var (
		format, where string
		limit         int
	)
	cmd := &cobra.Command{
		Use:   "show [TABLE]",
		Short: "Print the logical content of a table (a target, _sluice_loads, _sluice_dead_letters, _sluice_expectations or _sluice_version); without TABLE, list the tables",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !slices.Contains(render.Formats, format) {
				return usageErr("--format %q: one of %s", format, strings.Join(render.Formats, ", "))
			}
			if limit < 0 {
				return usageErr("--limit %d: a number of rows, 0 for all", limit)
			}
			if len(args) == 0 {
				if where != "" || cmd.Flags().Changed("limit") {
					return usageErr("--where and --limit need a TABLE")
				}
				return g.listTables(cmd.Context(), format)
			}
			if !cmd.Flags().Changed("limit") && format == "table" && isTerminal(g.stdout) {
				limit = terminalLimit
			}
			return g.show(cmd.Context(), args[0], format, limit, where)
		},
	}
	cmd.Flags().StringVar(&format, "format", "table", "table, jsonl or csv")
	cmd.Flags().IntVar(&limit, "limit", 0, fmt.Sprintf("print at most N rows, in the order the destination stores them, reading no further (0: every row, sorted; default %d for --format table on a terminal)", terminalLimit))
	cmd.Flags().StringVar(&where, "where", "", `print only the rows this expression is true for, in the dialect of a flow's where (columns are variables): 'amount > 100 and country == "DE"'`)
	return cmd
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(f.Fd()))
}

// errEnough ends a scan that has the rows it prints.
var errEnough = errors.New("enough rows")

func (g *globals) show(ctx context.Context, table, format string, limit int, where string) error {
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
	var ids map[string]bool
	if cdcRoot != "" {
		if ids, err = currentIDs(ctx, sink, cdcRoot); err != nil {
			return err
		}
	}

	// Rows are filtered and counted as they stream: with a limit, what is
	// held is the rows printed (and one more, to tell whether there are
	// more) and the piece the destination handed over last.
	want := 0
	if limit > 0 {
		want = limit + 1
	}
	var (
		out *batch.Batch
		rs  *rules.Rules
	)
	each := func(b *batch.Batch) error {
		if out == nil {
			out = batch.New(b.Schema, min(want, 1024))
			if where != "" {
				var err error
				if rs, err = rules.New(&spec.Flow{Name: "show", Where: where}, b.Schema, false); err != nil {
					return usageErr("--where: %s", strings.TrimPrefix(err.Error(), "where: "))
				}
			}
		}
		if ids != nil {
			b = currentChildRows(b, ids)
		}
		if rs != nil {
			res := rs.Apply(b, nil)
			if len(res.Rejects) > 0 {
				return usageErr("--where: %s", strings.TrimPrefix(res.Rejects[0].Msg, "where: "))
			}
			b = res.Batch
		}
		for i := range b.Len() {
			if want > 0 && out.Len() >= want {
				return errEnough
			}
			out.AppendRow(b, i)
		}
		if want > 0 && out.Len() >= want {
			return errEnough
		}
		return nil
	}
	opts := sinks.RowScan{Where: where}
	if ids == nil {
		opts.Limit = want
	}
	err = scanRows(ctx, sink, table, opts, each)
	if errors.Is(err, sinks.ErrUnknownTable) {
		return usageErr("unknown table %q: it has no data yet (run sluice update first)", table)
	}
	if err != nil && !errors.Is(err, errEnough) {
		return err
	}
	if out == nil { // a destination that handed over nothing, not even the columns
		out = batch.New(batch.Schema{}, 0)
	}
	more := limit > 0 && out.Len() > limit
	if more {
		out.Truncate(limit)
	}
	if limit == 0 {
		idx := make([]int, 0, len(sortBy))
		for _, name := range sortBy {
			if i := out.Schema.Index(name); i >= 0 {
				idx = append(idx, i)
			}
		}
		render.Sort(out, idx)
	}
	if err := render.Write(g.stdout, out, format); err != nil {
		return err
	}
	if more {
		fmt.Fprintf(g.stderr, "sluice: the first %d rows the destination holds; --limit 0 prints them all, sorted\n", limit)
	}
	return nil
}

// scanRows streams a table through fn, all at once from a destination that
// cannot stream it (sinks.RowScanner).
func scanRows(ctx context.Context, sink sinks.Sink, table string, opts sinks.RowScan, fn func(*batch.Batch) error) error {
	if rs, ok := sink.(sinks.RowScanner); ok {
		return rs.ScanRows(ctx, table, opts, fn)
	}
	b, err := sink.Scan(ctx, table)
	if err != nil {
		return err
	}
	if err := fn(batch.New(b.Schema, 0)); err != nil {
		return err
	}
	return fn(b)
}

// currentIDs returns the record ids of a CDC target's rows now: the child
// rows of those records are the child table's current rows
// (docs/schema.md#child-tables).
func currentIDs(ctx context.Context, sink sinks.Sink, root string) (map[string]bool, error) {
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
	return ids, nil
}

// currentChildRows returns the rows of b, of a child table of a CDC
// target, whose record is among ids.
func currentChildRows(b *batch.Batch, ids map[string]bool) *batch.Batch {
	roots := b.Column(batch.RootIDColumn)
	out := batch.New(b.Schema, b.Len())
	for i := range b.Len() {
		if roots != nil && !roots.IsNull(i) && ids[roots.Strs[i]] {
			out.AppendRow(b, i)
		}
	}
	return out
}

// tablesSchema is the columns show prints the list of tables in.
var tablesSchema = batch.Schema{Columns: []batch.Column{
	{Name: "table", Type: batch.String},
	{Name: "kind", Type: batch.String},
	{Name: "rows", Type: batch.Int64, Nullable: true},
}}

// listTables prints the tables show can print: the spec's targets, their
// child tables, then sluice's own; with their rows when the destination
// counts them without reading them (NULL otherwise, and for a table not
// created yet).
func (g *globals) listTables(ctx context.Context, format string) error {
	p, _, sink, err := g.openPipeline(ctx, nil)
	if err != nil {
		return err
	}
	defer sink.Close()
	rep, err := flows.Status(ctx, p, sink, false)
	if err != nil {
		return err
	}
	children := map[string][]flows.ChildTable{}
	for _, f := range rep.Flows {
		for _, c := range f.ChildTables {
			if !slices.ContainsFunc(children[f.Target], func(x flows.ChildTable) bool { return x.Name == c.Name }) {
				children[f.Target] = append(children[f.Target], c)
			}
		}
	}
	out := batch.New(tablesSchema, len(p.Tables)+4)
	counter, _ := sink.(sinks.RowCounter)
	add := func(name, kind string) error {
		out.Vectors[0].AppendString(name)
		out.Vectors[1].AppendString(kind)
		if counter == nil {
			out.Vectors[2].AppendNull()
			return nil
		}
		n, ok, err := counter.CountRows(ctx, name)
		switch {
		case errors.Is(err, sinks.ErrUnknownTable) || err == nil && !ok:
			out.Vectors[2].AppendNull()
		case err != nil:
			return err
		default:
			out.Vectors[2].AppendInt(n)
		}
		return nil
	}
	for _, t := range p.Tables {
		kind := "append"
		if t.CDC {
			kind = fmt.Sprintf("cdc scd%d", max(t.SCDType, 1))
		}
		if err := add(t.Name, kind); err != nil {
			return err
		}
		for _, c := range children[t.Name] {
			if err := add(c.Name, "child of "+c.Parent); err != nil {
				return err
			}
		}
	}
	for _, name := range []string{batch.LoadsTable, batch.DeadLettersTable, batch.ExpectationsTable, batch.VersionTable} {
		if err := add(name, "sluice"); err != nil {
			return err
		}
	}
	return render.Write(g.stdout, out, format)
}
