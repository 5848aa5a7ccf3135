// Package flows runs a pipeline: it turns the spec (package flows/spec) into
// running flows, wires each flow's source to its sink, and drives the
// delivery protocol (decode, stage, commit by ledger row, then acknowledge the
// source). It owns the triggered (update) and continuous (run) modes, the
// heartbeat that keeps them from overlapping, and the retry policy around the
// destination.
//
// It knows nothing of the command line: cmd/sluice parses flags and hands it
// a spec, a sink and Options. Sources and sinks never import it.
package flows
