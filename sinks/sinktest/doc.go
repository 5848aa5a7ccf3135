// Package sinktest is the conformance suite every sinks.Sink passes: the
// delivery protocol (a committed load appears once, an aborted or unfinished
// one never, a stale or replayed commit is refused, positions round-trip
// through the ledger), dead letters, exact values of every column type,
// schema evolution and heartbeats.
//
// A sink's tests call Run with a Factory that makes a fresh destination per
// subtest and returns a function opening a Sink on it; opening again must
// give a new Sink on the same data, as a restarted process would see it. The
// suite closes every Sink it opens. Options describe what a destination
// cannot store exactly (ClickHouse 18.16 keeps whole seconds, and dates and
// times from 1970 to 2106 only), so that one suite serves every sink.
//
// It owns no sink code and must not depend on any sink implementation: it
// speaks only the sinks interfaces and the flows/batch vocabulary.
package sinktest
