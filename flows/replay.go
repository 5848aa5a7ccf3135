package flows

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/backfill"
	"github.com/sluicehq/sluice/cdc"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/spec"
)

// A legacy SCD type 2 table is replayed as change events
// (docs/operations.md, "Migrating a legacy SCD type 2 table"): each of its
// rows is an upsert at its valid_from (the flow's sequence_by). With
// replay_valid_to, a row whose version ended without a successor also yields
// a delete at its valid_to: only when no legacy row of the same key starts
// at that valid_to, since the delete would otherwise win the SCD2 tie and
// erase the successor.

// replayHandler prepares the chunks of a flow with replay_valid_to.
type replayHandler struct {
	*cdcHandler
	validTo int                       // index of the replay_valid_to column in the rows read
	seq     int                       // index of the sequence column
	starts  map[versionStart]struct{} // every legacy (key, valid_from)
}

// versionStart is a legacy version's key (the engine's encoding) and start.
type versionStart struct{ key, seq string }

// newReplayHandler reads the key and sequence columns of every file the
// flow replays, for the successor check.
func (r *runner) newReplayHandler(ctx context.Context, f *spec.Flow, h batchHandler, rs readSchema, files []backfill.File) (*replayHandler, error) {
	ch, ok := h.(*cdcHandler)
	if !ok || len(f.SequenceBy) != 1 {
		return nil, fmt.Errorf("replay_valid_to needs an auto_cdc flow with one sequence_by column")
	}
	rh := &replayHandler{cdcHandler: ch, validTo: rs.wanted.Index(f.ReplayValidTo), seq: rs.wanted.Index(f.SequenceBy[0]), starts: map[versionStart]struct{}{}}
	var cols []batch.Column
	for _, k := range f.Keys {
		i := rs.wanted.Index(k)
		if i < 0 {
			return nil, fmt.Errorf("key column %s is not a column of the files read", k)
		}
		cols = append(cols, rs.wanted.Columns[i])
	}
	if rh.validTo < 0 || rh.seq < 0 {
		return nil, fmt.Errorf("replay_valid_to %s and sequence_by %s must be columns of the files read", f.ReplayValidTo, f.SequenceBy[0])
	}
	cols = append(cols, rs.wanted.Columns[rh.seq])
	only := batch.Schema{Columns: cols}
	var hive batch.Schema
	for _, c := range cols {
		if rs.inRead.Index(c.Name) >= 0 {
			hive.Columns = append(hive.Columns, c)
		}
	}
	for _, fl := range files {
		opts := backfill.ReadOptions{MaxRows: f.Batch.Rows, MaxBytes: f.Batch.Bytes, Hive: hive, Units: f.SourceUnits(r.p), Paths: f.SourcePaths(r.p), Names: r.namesOf(f)}
		err := backfill.ReadFile(ctx, fl, rs.format, only, opts, func(c *backfill.Chunk) error {
			seq := c.Batch.Vectors[len(cols)-1]
			for i := range c.Batch.Len() {
				if k, err := ch.engine.KeyOf(c.Batch, i); err == nil { // a null key is the replay's dead letter
					rh.starts[versionStart{k, fmt.Sprint(seq.Value(i))}] = struct{}{}
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return rh, nil
}

// prepareChunk turns each legacy row into an upsert at its valid_from and,
// when its version ended without a successor, a delete at its valid_to.
func (h *replayHandler) prepareChunk(ctx context.Context, ch *backfill.Chunk) (*prepared, error) {
	in := ch.Batch
	n := in.Len()
	out := batch.New(in.Schema, n*2)
	input := cdc.Input{Batch: out, Positions: make([]cdc.Position, 0, 2*n), Ops: make([]cdc.Op, 0, 2*n)}
	end := in.Vectors[h.validTo]
	for i := range n {
		pos := cdc.Position{Flow: h.flow.Name, File: ch.File, Offset: ch.Row(i)}
		out.AppendRow(in, i)
		input.Positions = append(input.Positions, pos)
		input.Ops = append(input.Ops, cdc.OpUpsert)
		if end.IsNull(i) {
			continue
		}
		k, err := h.engine.KeyOf(in, i)
		if err != nil {
			continue // a null key: the upsert is its dead letter
		}
		if _, succeeded := h.starts[versionStart{k, fmt.Sprint(end.Value(i))}]; succeeded {
			continue
		}
		// The delete: the row with its sequence set to its valid_to.
		out.AppendRow(in, i)
		seq := out.Vectors[h.seq]
		seq.Truncate(out.Len() - 1)
		seq.AppendFrom(end, i)
		input.Positions = append(input.Positions, pos)
		input.Ops = append(input.Ops, cdc.OpDelete)
	}
	return h.apply(ctx, cdcRecords{Input: input}, ch.DeadLetters, nil)
}
