// Package destination opens the destination a pipeline's spec names: the
// one place that knows the concrete sinks (sinks/local, sinks/clickhouse),
// so that the runner (package flows) works on the sinks interfaces only. It
// turns the spec's destination settings into each sink's Options and does
// nothing else.
package destination
