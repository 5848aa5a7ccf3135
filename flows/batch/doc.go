// Package batch is the vocabulary every part of sluice speaks: column types,
// schemas, the columnar batch, raw source records, dead letters and source
// positions.
//
// It is a leaf: it imports nothing of sluice's, so that sources, sinks, the
// CDC engine and the flow runner can all depend on it without cycles. It owns
// no I/O and no policy; it only describes data.
package batch
