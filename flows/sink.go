package flows

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/sluicehq/sluice/flows/spec"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/local"
)

// OpenSink opens the pipeline's destination. A relative local path is taken
// relative to the spec file's folder.
func OpenSink(ctx context.Context, p *spec.Pipeline, log *slog.Logger) (sinks.Sink, error) {
	switch {
	case p.Destination.Local != nil:
		path := p.Path(p.Destination.Local.Path)
		return local.Open(ctx, local.Options{Path: path, Pipeline: p.Pipeline, Logger: log})
	case p.Destination.ClickHouse != nil:
		return nil, fmt.Errorf("destination clickhouse is not supported by this version of sluice")
	}
	return nil, fmt.Errorf("spec has no destination")
}
