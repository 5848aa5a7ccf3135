package sinks

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
)

// TableKind says what a target holds.
type TableKind int

const (
	// KindAppend: every row of every committed load, once.
	KindAppend TableKind = iota
	// KindSCD1: one row per live key (identity: the key).
	KindSCD1
	// KindSCD2: one row per version (identity: the key and __START_AT).
	KindSCD2
)

// String names the kind as sluice's schemas spell it: append, scd1, scd2.
func (k TableKind) String() string {
	switch k {
	case KindAppend:
		return "append"
	case KindSCD1:
		return "scd1"
	case KindSCD2:
		return "scd2"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Errors of leases; match them with errors.Is.
var (
	// ErrLeaseHeld is returned when another process holds a CDC target's
	// lease.
	ErrLeaseHeld = errors.New("another process holds the lease of this table")
	// ErrLeaseLost refuses a commit, or a renewal, of a writer whose lease
	// another holder took over since (the lease's generation moved on):
	// what it staged is discarded. It is not retryable; the writer competes
	// for the lease again.
	ErrLeaseLost = errors.New("the lease of this table was taken over by another holder")
)

// CDCLoad is a load that can also change rows of CDC targets. A sink that
// holds CDC targets returns loads implementing it from Begin. Within one load
// the sink applies, for each table: TruncateBelow, then Remove, then Upsert,
// then the states, whatever order the calls came in; applying the same load
// twice (a replay after a crash) gives the same table.
//
// Identities are opaque strings from the CDC engine (an order-preserving
// encoding): keys[i] is row i's key, seqs[i] its sequence (for SCD type 1 the
// sequence of the change it shows, for SCD type 2 its __START_AT). A row's
// identity is its key for KindSCD1 and (key, seq) for KindSCD2. Sequences
// compare bytewise.
type CDCLoad interface {
	Load
	// Upsert stages rows that replace the rows of the same identity. The
	// sink may keep rows, keys and seqs until the load ends, reading them
	// only; the caller leaves them unchanged until then.
	Upsert(ctx context.Context, table string, rows *batch.Batch, keys, seqs []string) error
	// Remove stages the removal of rows by identity; rows holds them as
	// they were (the target's schema), for destinations that delete by
	// writing a marker row.
	Remove(ctx context.Context, table string, rows *batch.Batch, keys, seqs []string) error
	// TruncateBelow stages the removal of every row whose sequence is below
	// seq (an SCD type 1 truncate).
	TruncateBelow(ctx context.Context, table string, seq string) error
	// PutState stages hidden state of a CDC target: per key (a nil Value
	// removes the key's state), and under the key "" the table's own state.
	PutState(ctx context.Context, table string, entries []StateEntry) error
}

// StateEntry is one piece of hidden CDC state.
type StateEntry struct {
	Key   string // "" is the table's own state
	Value []byte // nil removes; read only (it may share the caller's memory)
}

// StateReader reads the hidden state of committed loads.
type StateReader interface {
	// GetState returns the state of each key that has one, as of every
	// load committed before the call (a load committing meanwhile may show
	// or not).
	GetState(ctx context.Context, table string, keys []string) (map[string][]byte, error)
}

// KeyStateProber is a StateReader that can tell, with one cheap read, that
// a CDC target has no key state: the engine's cache then knows that every
// state is one it was given, and a new target's loads read none back.
type KeyStateProber interface {
	// HasKeyStates reports whether any key of table has a state (the
	// table's own state aside; a removed key may count), as of every load
	// committed before the call.
	HasKeyStates(ctx context.Context, table string) (bool, error)
}

// Leaser keeps CDC targets to one writer at a time: a lease in the
// destination, renewed while the writer runs, and fenced by a generation
// that moves on whenever another holder takes it over: a commit of a CDC
// target by a Sink that took its lease is refused with ErrLeaseLost once
// the generation it took moved on, whether or not the lease expired by a
// clock.
type Leaser interface {
	// AcquireLease takes or renews the lease of table for holder until ttl
	// from now. ErrLeaseHeld when another holder has it and is alive (its
	// lease not expired); ErrLeaseLost when this Sink held it for holder
	// and another holder took it over since (the next call competes
	// afresh).
	AcquireLease(ctx context.Context, table, holder string, ttl time.Duration) error
	// ReleaseLease gives the lease up if holder has it.
	ReleaseLease(ctx context.Context, table, holder string) error
}
