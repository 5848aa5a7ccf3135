package destination

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/sluicehq/sluice/flows/spec"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse"
	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
	"github.com/sluicehq/sluice/sinks/local"
)

// Open opens the pipeline's destination; log (nil discards) gets the
// sink's recovery, schema changes and background work. A relative local
// path is taken relative to the spec file's folder.
func Open(ctx context.Context, p *spec.Pipeline, log *slog.Logger) (sinks.Sink, error) {
	switch {
	case p.Destination.Local != nil:
		path := p.Path(p.Destination.Local.Path)
		return local.Open(ctx, local.Options{Path: path, Pipeline: p.Pipeline, Logger: log})
	case p.Destination.ClickHouse != nil:
		ch := p.Destination.ClickHouse
		tc, err := ch.TLS.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("clickhouse: %w", err)
		}
		settings := make(map[string]any, len(ch.Settings))
		for k, v := range ch.Settings {
			settings[k] = v
		}
		return clickhouse.Open(ctx, clickhouse.Options{
			Addr: ch.Addr, Database: ch.Database, Username: ch.Username, Password: ch.Password,
			TLS: tc, DialTimeout: ch.DialTimeout, ReadTimeout: ch.ReadTimeout, Settings: settings, Compression: ch.Compression,
			Cluster: ch.Cluster, ZooKeeper: ch.ZooKeeper, ZooKeeperPath: ch.ZooKeeperPath, ReplicaName: ch.ReplicaName,
			Pipeline: p.Pipeline, Logger: log,
		})
	}
	return nil, errors.New("spec has no destination")
}

// Opening classifies the errors of Open (a sinks.Classifier): worth
// trying again is a ClickHouse server that does not answer yet (refused,
// timed out, overloaded), not a refusal such as bad credentials or a bad
// setting. Opening a local destination is not retried.
type Opening struct{ Pipeline *spec.Pipeline }

// Retryable implements sinks.Classifier.
func (o Opening) Retryable(err error) bool {
	return o.Pipeline.Destination.ClickHouse != nil && chsql.Retryable(err)
}
