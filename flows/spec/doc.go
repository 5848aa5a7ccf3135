// Package spec owns the pipeline spec: the YAML file a user writes
// (sluice.yaml), decoded into typed structs, with ${VAR} expanded from the
// environment, checked against every rule that needs no I/O, and with each
// target table's schema resolved from its declaration or its flows.
//
// Every problem found carries the line (and column) it comes from, and all of
// them are reported at once: one mistake never hides the next.
//
// The package reads the spec file and nothing else: it opens no connection,
// reads no data file, Parquet schema or checkpoint, and runs no flow. Rules
// that need a source's data (for example the schema of Parquet files without
// declared columns) are left to the runner. It describes every flow kind the
// spec knows; which kinds a run supports is the runner's decision.
package spec
