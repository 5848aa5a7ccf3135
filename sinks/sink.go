package sinks

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/checkpoint"

	"github.com/sluicehq/sluice/flows/batch"
)

// Errors a sink returns; match them with errors.Is.
var (
	// ErrStale refuses a commit whose load does not continue from the
	// positions in the ledger: another writer committed those partitions
	// since this load started, so publishing it would duplicate rows.
	ErrStale = errors.New("stale load: the ledger moved past its starting positions")
	// ErrUnknownTable is returned by Scan for a table that does not exist.
	ErrUnknownTable = errors.New("unknown table")
)

// Classifier tells whether an operation that failed with err may succeed
// when tried again (a server down or overloaded, a disk full, a lock not
// obtained in time), as opposed to a refusal that another attempt cannot
// change (ErrStale, a schema mismatch, a value out of range). Destinations
// and checkpoint stores implement it, each with its one classifier; the
// runner retries what it calls retryable.
type Classifier interface {
	Retryable(err error) bool
}

// CheckpointKeeper is a destination that keeps the pipeline's checkpoint
// store beside its tables (the destination is the state of record).
type CheckpointKeeper interface {
	// OpenCheckpoints opens the store; log (nil discards) gets its lock
	// takeovers. The caller closes it.
	OpenCheckpoints(ctx context.Context, log *slog.Logger) (checkpoint.Store, error)
}

// Table describes a target table as the spec resolves it.
type Table struct {
	Name        string
	Schema      batch.Schema // declared columns, without _sluice_ metadata columns
	OrderBy     []string     // may be empty
	PartitionBy []string     // may be empty
	Kind        TableKind    // KindAppend unless a CDC flow writes the table
	Keys        []string     // CDC targets: the key columns
}

// LoadMeta identifies a load and its writer.
type LoadMeta struct {
	LoadID     string // unique; sinks put it in every row as _sluice_load_id
	Pipeline   string
	Flow       string
	Targets    []string
	Generation int64 // consumer group generation of the writer, 0 when none
	// Slots are the slots (Slot) the load will continue, when known at
	// Begin: a destination spread over shards places a load by its first.
	Slots []string
}

// Commit is what a load's ledger row records besides its meta.
type Commit struct {
	// From are the positions the load continues from (the ledger positions
	// its reads started at). A Kafka position with Offset < 0 means the
	// partition had no ledger position when the load started.
	From batch.Positions
	// To are the positions the load reached: the next offset to read.
	To          batch.Positions
	Rows        int64 // target rows written
	DeadLetters int64
	// SchemaHash is the version_hash of the pipeline's schema the load was
	// written under (_sluice_version); empty when unknown.
	SchemaHash string
}

// Sink is a destination.
type Sink interface {
	// Ensure creates the tables and sluice's own tables when missing, and
	// checks that existing ones have the declared columns.
	Ensure(ctx context.Context, tables []Table) error
	// Recover rolls committed loads forward and removes uncommitted ones.
	Recover(ctx context.Context) error
	// Heads returns the heads of a flow's slots (chain.go) as of every load
	// committed before the call, forgetting the loads committed before the
	// flow's last reset: of the slots named (Slot's names), or when slots
	// is nil of every slot the destination keeps a head of. Its cost grows
	// with the slots, not with the loads ever committed.
	Heads(ctx context.Context, pipeline, flow string, slots []string) (Heads, error)
	// Totals sums, per flow of the pipeline, the committed loads that moved
	// its positions since its last reset. Its cost grows with the flows and
	// slots, not with the loads ever committed.
	Totals(ctx context.Context, pipeline string) (map[string]FlowTotals, error)
	// Ledger reads every committed load in commit order without recovering
	// anything: safe while other processes write the same destination. It
	// reads the whole ledger (lineage, _sluice_loads): not for hot paths.
	Ledger(ctx context.Context) (*batch.Ledger, error)
	// Columns returns the columns of a table as it is now (without its
	// _sluice_ metadata columns): ErrUnknownTable when missing.
	Columns(ctx context.Context, table string) (batch.Schema, error)
	// Begin starts a load.
	Begin(ctx context.Context, meta LoadMeta) (Load, error)
	// Scan returns the logical content of a table: its declared columns,
	// then its _sluice_ metadata columns (for _sluice_loads, batch.LoadsSchema).
	// Rows come in no particular order. ErrUnknownTable when missing.
	Scan(ctx context.Context, table string) (*batch.Batch, error)
	// Beat writes or renews a heartbeat.
	Beat(ctx context.Context, hb Heartbeat) error
	// Heartbeats returns the pipeline's heartbeats that have not expired.
	Heartbeats(ctx context.Context, pipeline string, now time.Time) ([]Heartbeat, error)
	// EndBeat removes a heartbeat (a clean exit).
	EndBeat(ctx context.Context, pipeline, id string) error
	Close() error
}

// Load is one atomic unit of writing, possibly over several tables.
type Load interface {
	// Write stages rows for a table (a target or _sluice_dead_letters). The
	// batch's schema must be the table's declared schema; the sink adds
	// _sluice_load_id. Write may be called several times per table.
	Write(ctx context.Context, table string, b *batch.Batch) error
	// Commit writes the load's ledger row (the commit point), then publishes
	// it. ErrStale when the ledger no longer matches c.From; the load is then
	// discarded. After a crash between commit and publish, Recover publishes.
	Commit(ctx context.Context, c Commit) error
	// Abort discards a load that was not committed.
	Abort(ctx context.Context) error
}

// Phased is a load that tells, after Commit, how much of Commit's time
// went to publishing it after its commit point (sluice_load_duration_seconds).
type Phased interface {
	PublishTime() time.Duration
}

// Settler is a destination that tells whether every committed load is
// visible: a load is committed at its ledger row and visible once
// published, which its writer does at once after, or the next Recover
// when the writer died in between.
type Settler interface {
	// Unpublished counts the committed loads not published yet.
	Unpublished(ctx context.Context) (int, error)
}

// FlowTotals are the counts of a flow's committed loads.
type FlowTotals struct {
	Loads       int64
	Rows        int64
	DeadLetters int64
	LastAt      time.Time // when the last of them committed
}

// Heartbeat marks a live sluice process of a pipeline.
type Heartbeat struct {
	Pipeline string
	ID       string // unique per process
	Kind     string // "run" or "update"
	Host     string
	PID      int
	BeatAt   time.Time
	Expires  time.Time
}

// PublishOrder sorts the tables a load publishes so that a child table
// (<table>__<field>, docs/schema.md#child-tables) comes before its parent:
// a parent row becomes visible only once its child rows are.
func PublishOrder(tables []string) {
	slices.SortFunc(tables, func(a, b string) int { return strings.Compare(b, a) })
}
