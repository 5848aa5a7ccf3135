// Package wire reads messages in the Confluent Schema Registry wire format
// (a 0 byte, a 4-byte big-endian schema id, for Protobuf the message
// indexes, then the Avro or Protobuf binary) and rewrites each as the JSON
// text package decode reads, its logical types written as the values they
// stand for (docs/formats.md#how-values-map): one set of decoding rules,
// type checks and dead-letter reasons serves every format.
//
// Writer schemas come from the registry by id (Registry), compiled once
// and kept: an id names one schema for good. A message whose schema id
// the registry does not have is a dead letter with reason unknown_schema;
// a registry that cannot be asked is an error for the caller to retry
// (Classifier).
package wire
