package flows

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/consumer"
	"github.com/sluicehq/sluice/flows/spec"
	"github.com/sluicehq/sluice/sinks"
)

// Errors of a refresh.
var (
	// ErrUnknownFlow is a --refresh naming a flow the spec lacks (a usage error).
	ErrUnknownFlow = errors.New("unknown flow")
	// ErrDataLoss refuses a refresh that would lose data: a Kafka source no
	// longer holds the first offset a flow consumed.
	ErrDataLoss = errors.New("a full refresh would lose data")
)

// refreshSet returns the tables a refresh empties and every flow that
// writes them (all of which replay from the start).
func refreshSet(p *spec.Pipeline, full bool, names []string) (tables, flows []string, err error) {
	if full {
		for i := range p.Flows {
			names = append(names, p.Flows[i].Name)
		}
	}
	for _, n := range names {
		f := p.Flow(n)
		if f == nil {
			return nil, nil, fmt.Errorf("--refresh %s: %w", n, ErrUnknownFlow)
		}
		if !slices.Contains(tables, f.Target) {
			tables = append(tables, f.Target)
		}
	}
	for i := range p.Flows {
		if f := &p.Flows[i]; slices.Contains(tables, f.Target) {
			flows = append(flows, f.Name)
		}
	}
	return tables, flows, nil
}

// refresh empties the targets of the refreshed flows, forgets their
// positions in the ledger and their checkpoints (once-flow completion,
// snapshot versions, cursors), so that every flow writing them replays its
// source from the start. It refuses, unless AllowDataLoss, when a Kafka
// source no longer holds the first offset one of those flows ever consumed.
func (r *runner) refresh(ctx context.Context) error {
	tables, flowNames, err := refreshSet(r.p, r.opts.FullRefresh, r.opts.Refresh)
	if err != nil || len(tables) == 0 {
		return err
	}
	var lost []string
	for _, name := range flowNames {
		f := r.p.Flow(name)
		if f.Source.Kafka == nil {
			continue
		}
		firsts, err := checkpoint.FirstOffsets(ctx, r.checkpoints, r.p.Pipeline, name)
		if err != nil {
			return err
		}
		if len(firsts) == 0 {
			continue
		}
		cfg, err := consumerBase(r.p, f)
		if err != nil {
			return err
		}
		starts, err := consumer.StartOffsets(ctx, cfg)
		if err != nil {
			return fmt.Errorf("flow %s: %w", name, err)
		}
		for _, fo := range firsts {
			if fo.Topic == cfg.Topic && starts[fo.Partition] > fo.Offset {
				lost = append(lost, fmt.Sprintf("flow %s: %s/%d starts at offset %d, the flow first read offset %d",
					name, fo.Topic, fo.Partition, starts[fo.Partition], fo.Offset))
			}
		}
	}
	if len(lost) > 0 {
		if !r.opts.AllowDataLoss {
			return fmt.Errorf("%w: retention dropped records the refresh would replay (%s); rerun with --allow-data-loss to refresh anyway",
				ErrDataLoss, strings.Join(lost, "; "))
		}
		r.log.Warn("refreshing although retention dropped records", "lost", strings.Join(lost, "; "))
	}
	resetter, ok := r.sink.(sinks.Resetter)
	if !ok {
		return errors.New("the destination cannot empty tables for a refresh")
	}
	// Child tables go with their tables (docs/schema.md#child-tables).
	r.dataMu.RLock()
	for _, name := range slices.Sorted(maps.Keys(r.children)) {
		if slices.Contains(tables, r.children[name].root) {
			tables = append(tables, name)
		}
	}
	r.dataMu.RUnlock()
	r.log.Info("refresh: emptying tables", "tables", tables, "flows", flowNames)
	if err := r.retry(ctx, "refresh", func(ctx context.Context) error { return resetter.Reset(ctx, tables, flowNames) }); err != nil {
		return err
	}
	for _, name := range flowNames {
		for _, kind := range []string{checkpoint.KindOnce, checkpoint.KindSnapshot, checkpoint.KindCursor, checkpoint.KindCutOver} {
			if err := r.checkpoints.Delete(ctx, checkpoint.Key{Pipeline: r.p.Pipeline, Kind: kind, Flow: name}); err != nil {
				return fmt.Errorf("refresh: checkpoints of %s: %w", name, err)
			}
		}
	}
	return nil
}

// ensure creates or checks the pipeline's tables. A table whose stored
// definition changed (sinks.ErrTableChanged) that this run's refresh
// empties is left for recreate, after the refresh; any other refusal is
// an error, which for a changed table names the refresh that would
// recreate it.
func (r *runner) ensure(ctx context.Context) (changed []string, err error) {
	all := r.tables()
	refreshed, _, _ := refreshSet(r.p, r.opts.FullRefresh, r.opts.Refresh)
	_, dropper := r.sink.(sinks.Dropper)
	err = r.sink.Ensure(ctx, all)
	if err == nil {
		return r.outdated(ctx, all, refreshed, dropper)
	}
	if !errors.Is(err, sinks.ErrTableChanged) {
		return nil, err
	}
	var keep []sinks.Table
	var refusals []string
	for _, t := range all {
		terr := r.sink.Ensure(ctx, []sinks.Table{t})
		switch {
		case terr == nil:
			keep = append(keep, t)
		case errors.Is(terr, sinks.ErrTableChanged) && dropper && slices.Contains(refreshed, t.Name):
			changed = append(changed, t.Name)
		case errors.Is(terr, sinks.ErrTableChanged):
			var names []string
			for _, f := range r.p.FlowsOf(t.Name) {
				names = append(names, f.Name)
			}
			refusals = append(refusals, fmt.Sprintf("%v; or run `sluice update --refresh %s` to empty the table and create it anew from the spec", terr, strings.Join(names, ",")))
		default:
			refusals = append(refusals, terr.Error())
		}
	}
	if len(refusals) > 0 {
		return nil, errors.New(strings.Join(refusals, "\n"))
	}
	if len(changed) > 0 {
		r.log.Info("tables whose definition changed are created anew after the refresh empties them", "tables", changed)
	}
	return changed, nil
}

// outdated returns the tables this run's refresh empties that the
// destination would create better now (sinks.Outdater): recreate makes
// them anew too.
func (r *runner) outdated(ctx context.Context, all []sinks.Table, refreshed []string, dropper bool) ([]string, error) {
	o, ok := r.sink.(sinks.Outdater)
	if !ok || !dropper || len(refreshed) == 0 {
		return nil, nil
	}
	var out []string
	for _, t := range all {
		if !slices.Contains(refreshed, t.Name) {
			continue
		}
		why, err := o.Outdated(ctx, t)
		if err != nil {
			return nil, err
		}
		if why != "" {
			r.log.Info("the refresh creates the table anew", "table", t.Name, "why", why)
			out = append(out, t.Name)
		}
	}
	return out, nil
}

// recreate drops the changed tables the refresh just emptied and creates
// them from the spec (the caller holds their leases).
func (r *runner) recreate(ctx context.Context, changed []string) error {
	if len(changed) == 0 {
		return nil
	}
	d := r.sink.(sinks.Dropper)
	for _, name := range changed {
		if err := r.retry(ctx, "drop "+name, func(ctx context.Context) error { return d.Drop(ctx, name) }); err != nil {
			return err
		}
		if err := r.retry(ctx, "create "+name, func(ctx context.Context) error { return r.sink.Ensure(ctx, Tables(r.p, name)) }); err != nil {
			return err
		}
	}
	return nil
}
