package flows

import (
	"context"
	"slices"

	"github.com/sluicehq/sluice/cdc"
	"github.com/sluicehq/sluice/consumer"
	"github.com/sluicehq/sluice/flows/batch"
)

// The batches of a CDC flow's partitions load one after the other (see
// cdcorder.go). Batches that become ready while the target's previous
// loads are under way, and so would wait anyway, are joined into one load
// as long as the joined load stays within the flow's batch.rows and
// batch.bytes: a busy target then makes fewer, larger loads, each with
// its fixed costs (staging, a ledger row, a publication, for SCD type 2 a
// key's state written once rather than once per batch). The load's ledger
// row carries the positions of every partition it holds.

// joinedLoad is the load a flow's ready batches join until it takes its
// place ahead (takeAhead); its first batch's Process leads it.
type joinedLoad struct {
	batches     []*joinedBatch
	rows, bytes int
	generation  int32
}

// joinedBatch is one partition's batch in a joined load.
type joinedBatch struct {
	rb     *consumer.RecordBatch
	in     cdcRecords
	dls    []batch.DeadLetter
	counts *batch.Batch
	done   chan struct{} // closed when the load ended, err set
	err    error
}

// join adds b to the load forming, or starts one; lead is true for the
// load's first batch.
func (h *cdcHandler) join(b *joinedBatch) (jl *joinedLoad, lead bool) {
	h.gmu.Lock()
	defer h.gmu.Unlock()
	n, size := b.rb.Records, b.rb.Bytes
	if jl := h.open; jl != nil && jl.generation == b.rb.Generation &&
		(h.flow.Batch.Rows <= 0 || jl.rows+len(n) <= h.flow.Batch.Rows) &&
		(h.flow.Batch.Bytes <= 0 || int64(jl.bytes+size) <= h.flow.Batch.Bytes) {
		jl.batches = append(jl.batches, b)
		jl.rows += len(n)
		jl.bytes += size
		return jl, false
	}
	jl = &joinedLoad{batches: []*joinedBatch{b}, rows: len(n), bytes: size, generation: b.rb.Generation}
	h.open = jl
	return jl, true
}

// seal closes jl to more batches.
func (h *cdcHandler) seal(jl *joinedLoad) {
	h.gmu.Lock()
	defer h.gmu.Unlock()
	if h.open == jl {
		h.open = nil
	}
}

// processJoined loads a batch of a CDC flow's partition, joined with the
// batches of other partitions ready meanwhile. The batch that starts a
// load leads it; the others wait for its outcome, which is theirs.
func (kf *kafkaFlow) processJoined(ctx context.Context, h *cdcHandler, rb *consumer.RecordBatch) error {
	in, dls, err := h.decode(ctx, rb)
	if err != nil {
		return err
	}
	in, dls, counts, rerr := h.applyRules(in, dls)
	if rerr != nil {
		return rerr
	}
	if err := h.r.onErrorFail(h.flow, dls); err != nil {
		return err
	}
	b := &joinedBatch{rb: rb, in: in, dls: dls, counts: counts, done: make(chan struct{})}
	jl, lead := h.join(b)
	if !lead {
		// Whatever ctx says, the leader may be loading this batch: the
		// partition is not given up before the load ended.
		<-b.done
		return b.err
	}
	err = kf.lead(ctx, h, jl)
	for _, o := range jl.batches[1:] {
		o.err = err
		close(o.done)
	}
	return err
}

// lead waits for the target to take one more batch, while other batches
// join, then applies and loads them all.
func (kf *kafkaFlow) lead(ctx context.Context, h *cdcHandler, jl *joinedLoad) error {
	err := h.target.takeAhead(ctx)
	h.seal(jl)
	if err != nil {
		return err
	}
	in, dls, counts := jl.batches[0].in, jl.batches[0].dls, jl.batches[0].counts
	rbs := []*consumer.RecordBatch{jl.batches[0].rb}
	if len(jl.batches) > 1 {
		in, dls, counts, rbs = mergeJoined(jl.batches)
		kf.log.Debug("batches joined into one load", "partitions", len(rbs), "rows", jl.rows)
	}
	p, err := h.applyAhead(ctx, in, dls, counts)
	if err != nil {
		return err
	}
	return kf.load(ctx, p, rbs)
}

// mergeChildren adds the child rows src to dst, table by table; a child
// table's rows decoded before it gained columns have NULL in them.
func mergeChildren(dst, src map[string]*batch.Batch) map[string]*batch.Batch {
	for suffix, b := range src {
		if dst == nil {
			dst = map[string]*batch.Batch{}
		}
		have := dst[suffix]
		switch {
		case have == nil:
			have = batch.New(b.Schema, b.Len())
		case len(b.Schema.Columns) > len(have.Schema.Columns):
			have = Project(have, b.Schema)
		}
		have.AppendBatch(Project(b, have.Schema))
		dst[suffix] = have
	}
	return dst
}

// mergeAbsent adds to dst, the Input.Absent of a merged input of n rows,
// the cells of src, whose rows start at row at.
func mergeAbsent(dst, src [][]bool, at, n int) [][]bool {
	if dst == nil {
		dst = make([][]bool, len(src))
	}
	for c, col := range src {
		if col == nil {
			continue
		}
		if dst[c] == nil {
			dst[c] = make([]bool, n)
		}
		copy(dst[c][at:], col)
	}
	return dst
}

// mergeJoined returns the batches as one engine input, in order. Batches
// of a target typed by its messages may have been decoded before it gained
// columns: each goes over the widest one's columns (columns are only
// added), NULL where it lacks them.
func mergeJoined(bs []*joinedBatch) (cdcRecords, []batch.DeadLetter, *batch.Batch, []*consumer.RecordBatch) {
	n := 0
	schema := bs[0].in.Batch.Schema
	for _, b := range bs {
		n += b.in.Batch.Len()
		if s := b.in.Batch.Schema; len(s.Columns) > len(schema.Columns) {
			schema = s
		}
	}
	first := bs[0].in
	out := cdcRecords{Input: cdc.Input{
		Batch:     batch.New(schema, n),
		Positions: make([]cdc.Position, 0, n),
		Meta:      make([]cdc.RecordMeta, 0, n),
		Payloads:  make([][]byte, 0, n),
	}}
	if first.Ops != nil {
		out.Ops = make([]cdc.Op, 0, n)
	}
	var dls []batch.DeadLetter
	var counts *batch.Batch
	rbs := make([]*consumer.RecordBatch, len(bs))
	for i, b := range bs {
		if b.in.Absent != nil {
			out.Absent = mergeAbsent(out.Absent, b.in.Absent, out.Batch.Len(), n)
		}
		if b.in.Tombstones != nil {
			if out.Tombstones == nil {
				out.Tombstones = make([]bool, n)
			}
			copy(out.Tombstones[out.Batch.Len():], b.in.Tombstones)
		}
		out.Batch.AppendBatch(Project(b.in.Batch, schema))
		out.Positions = append(out.Positions, b.in.Positions...)
		out.Meta = append(out.Meta, b.in.Meta...)
		out.Payloads = append(out.Payloads, b.in.Payloads...)
		if out.Ops != nil {
			out.Ops = append(out.Ops, b.in.Ops...)
		}
		out.kids = mergeChildren(out.kids, b.in.kids)
		dls = append(dls, b.dls...)
		if b.counts != nil {
			if counts == nil {
				counts = batch.New(batch.ExpectationsSchema, b.counts.Len())
			}
			counts.AppendBatch(b.counts)
		}
		rbs[i] = b.rb
	}
	return out, slices.Clip(dls), counts, rbs
}
