// Package cdc is the AUTO CDC apply engine: given a batch of a flow's
// decoded change records and the committed state of the keys they touch, it
// returns the target rows to write and remove, the keys' new state, the
// dead letters and the table-wide truncate barrier. It implements the change
// rules of docs/cdc.md and the flow keys of docs/spec.md (SCD type 1 and 2,
// ordering, ties, deletes and tombstones, truncates, column selection,
// ignore-null, track history).
//
// It is pure logic. It reads state only through the StateStore interface
// that sinks implement (with Cache, a memory-bounded LRU, in front), never
// writes anything, never reads the clock (Input.Now is the processing
// time), and imports nothing of sluice's but flows/batch. It does not load
// rows, commit, or decide retries: the runner hands the Output to a sink
// load, and after the load commits records it in the Cache.
//
// # Events and positions
//
// Each record of a batch is an event: a key (Config.Keys), a sequence
// (Config.SequenceBy, compared left to right), values, and an operation
// (apply_as_truncates first, then apply_as_deletes, else upsert; or
// Input.Ops). A null key or sequence makes a dead letter (null_key,
// null_sequence), as does an expression that fails on non-null values
// (expression_error); under on_error: fail Apply returns an *EventError
// instead and nothing of the batch applies. An expression that fails on a
// null value is null, which counts as false (op == "D" with a null op is an
// upsert). Expressions are compiled once against the environment
// flows/spec checks them with; col == "lit", col != "lit" and
// col in [...] over string columns are evaluated on the whole column.
//
// Keys and sequences are held in an order-preserving binary encoding
// (bytewise order is value order; see value.go), so that they compare
// exactly and serve as map keys. Every event carries its Position (flow,
// topic, partition, offset, or file and row): it breaks ties and, being the
// same on every delivery, makes a replay a no-op.
//
// # What a batch computes
//
// The result always equals applying all events ever seen for the target
// one at a time in (sequence, position) order, whatever the arrival
// order, the split into batches, redeliveries or restarts; the property
// tests check exactly that against a plain oracle. SCD type 1 applies the
// events literally (scd1.go: an upsert at a tombstone's sequence revives
// the key, a delete must be strictly newer than the row). SCD type 2 first
// keeps one event per key and sequence (a delete beats an upsert, the
// greater position wins among upserts and leaves no trace), then builds the
// versions (scd2.go). A truncate is a delete at its sequence of every key.
//
// # State
//
// The target plus hidden state is the state of record. KeyState holds, per
// key, the events that can still matter for events yet to come:
//
//   - SCD type 1 without ignore-null: the upsert the row shows, or the
//     newest delete (the tombstone).
//   - SCD type 1 with ignore-null: the newest upsert, the newest upsert to
//     set each column, the deletes, and the first upsert at a sequence that
//     also has a delete.
//   - SCD type 1, either way: the newest delete a Kafka tombstone gave per
//     source partition, until the retention, so that the tombstone
//     delivered again finds it (tombstone.go).
//   - SCD type 2: every reduced event, since a late event inside a coalesced
//     version shows, for the earlier part, the member just before it.
//
// TableState holds the truncates. States are immutable once returned;
// MarshalBinary names the columns a state's values follow, so a state
// survives columns being added or removed. An Output's states and the
// Cache hold only that encoding (compact, and free of pointers for the
// garbage collector); an engine decodes a state when it reads it, and a new
// state copies the encoding of the leading events it shares with the stored
// one.
//
// tombstone_retention bounds the state in processing time. A delete older
// than it is forgotten (SCD type 1, with the upserts it cut off; SCD type 2,
// a tombstone that closes no version), and so are SCD type 2 members that
// are neither the first nor the last of their version (their ignored nulls
// folded into the next member). Forgetting never changes a row; an event
// arriving later than the retention is then placed as if the forgotten
// events never existed (an older upsert re-creates a deleted row; a
// late SCD type 2 split ends at the next remembered member). Truncates
// are never forgotten (a truncate is a delete of every key, and key states
// are cleaned only when their key is touched). Expire
// forgets for keys that get no events.
//
// Exactness has one more limit, to keep SCD type 1 state bounded with
// ignore-null: a delete or truncate that arrives after the state dropped an
// upsert at exactly its sequence (with a lesser position, and superseded in
// every column it set) is taken to come first at that sequence, so it
// removes the row and the values carried before it. Without ignore-null,
// and whenever no key has an upsert and a delete (or truncate) at one
// sequence, the result is exact.
//
// # Applying an Output
//
// Rows are identified by the key (SCD type 1) or the key and __START_AT
// (SCD type 2); Rows.Keys and Rows.Seqs carry both in the ordered encoding.
// A sink applies an Output in one load: when Output.Table has a new newest
// truncate, it removes every row whose sequence is below it; then it
// removes the identities in Deletes (some may already be gone by the
// truncate) and writes Upserts, each replacing the row of its identity; it
// stores States (nil: remove) and Table. All of it is idempotent, and a
// replayed batch yields an empty Output. With ClickHouse's
// ReplacingMergeTree, Upserts are new versions and Deletes deleted markers
// of their identities. When Output.Refresh is set (a truncate older than
// rows it cannot remove, under ignore-null), the runner passes the keys of
// the rows at or above the newest truncate to Engine.Refresh and loads that
// Output too.
//
// Several flows may write one target: give each its own Engine with the
// target's schema as Config.Table and one shared Cache, and apply their
// batches one at a time: an Apply must follow the commit (and
// Cache.Commit) or abort of the target's previous Output. After an unknown
// outcome, a full refresh, or a lost lease, Reset the Cache.
//
// # Intervals
//
// SCD type 2 rows carry __START_AT and __END_AT typed like the sequence;
// for a list sequence both are strings holding a JSON array of the values
// (int64 as numbers, timestamps RFC 3339, dates YYYY-MM-DD, strings and
// decimals as strings), the form flows/spec resolves today.
package cdc
