// Package decode turns raw source records into columnar batches of a fixed
// schema: JSON messages (one object per message) with the Kafka metadata
// fields and _file_path filled from the record, and Debezium change
// envelopes (with or without the converter's schema part) into rows and
// their CDC operations, with the envelope fields _op, _ts_ms and
// _source_<field>.
//
// It owns the decoding rules of the spec (what each column type takes,
// documented on the JSON and Debezium types; docs/cdc.md describes both
// formats for users) and the reason codes a record that does not decode is
// dead-lettered with.
// It does no I/O, keeps no state between batches beyond reusable buffers,
// and never decides what happens to a failed record: it reports dead letters
// and leaves writing them, or failing the flow, to the caller.
package decode
