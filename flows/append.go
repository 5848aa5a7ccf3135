package flows

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/backfill"
	"github.com/sluicehq/sluice/consumer"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/decode"
	"github.com/sluicehq/sluice/flows/spec"
	"github.com/sluicehq/sluice/sinks"
)

// Append flows: each batch, of a Kafka partition or a file chunk, becomes
// rows appended to the target, its undecodable records dead letters of the
// same load.

// stampDeadLetters fills in what the decoders leave to the runner.
func (r *runner) stampDeadLetters(f *spec.Flow, dls []batch.DeadLetter) {
	now := time.Now().UTC()
	for i := range dls {
		dls[i].Pipeline, dls[i].Flow, dls[i].Target, dls[i].At = r.p.Pipeline, f.Name, f.Target, now
	}
}

// onErrorFail returns, when the flow says on_error: fail and dls holds a
// dead letter, the error that stops it (the dead letters stamped); else
// nil.
func (r *runner) onErrorFail(f *spec.Flow, dls []batch.DeadLetter) error {
	if len(dls) == 0 || f.OnError != spec.OnErrorFail {
		return nil
	}
	r.stampDeadLetters(f, dls)
	d := dls[0]
	return fmt.Errorf("record %s %s: %s (%s); on_error: fail, nothing of the batch committed",
		d.Source, d.Position, d.Error, d.Reason)
}

// appendHandler turns each batch into rows appended to the target.
type appendHandler struct {
	r     *runner
	flow  *spec.Flow
	rules *flowRules // nil when the flow has none
	pool  sync.Pool  // of *decode.JSON: a decoder is not safe for concurrent use
	// infers is set when the flow's columns come from its messages: the
	// decoders are of the columns inferred so far, a pooled one of older
	// columns is dropped.
	infers bool
	// wire rewrites messages of a schema registry's wire format as JSON
	// first; nil when they are JSON.
	wire *wireStep
	// hive names the columns of a table typed by the lines of its JSONL
	// files that the files' paths fill (Hive segments): no line fills
	// them. Set before each pass reads.
	hive []string
}

func (r *runner) newAppendHandler(f *spec.Flow) (*appendHandler, error) {
	target := r.p.Table(f.Target)
	if target == nil {
		return nil, fmt.Errorf("target %s is not a table of the spec", f.Target)
	}
	h := &appendHandler{r: r, flow: f, rules: newFlowRules(f, f.TypedByMessages(r.p)), infers: f.TypedByMessages(r.p)}
	var err error
	if h.wire, err = r.newWireStep(f); err != nil {
		return nil, err
	}
	if f.Source.Kafka != nil && !h.infers {
		proto, err := decode.NewJSON(f.SourceSchema(), f.SourceUnits(r.p))
		if err != nil {
			return nil, err
		}
		if err := proto.SetPaths(f.SourcePaths(r.p)); err != nil {
			return nil, err
		}
		proto.Govern(h.contract())
		h.pool.New = func() any { return proto.Clone() }
	}
	return h, nil
}

func (h *appendHandler) prepare(ctx context.Context, rb *consumer.RecordBatch) (*prepared, error) {
	if h.wire != nil {
		recs, dls, err := h.wire.records(ctx, rb.Records)
		if err != nil {
			return nil, err
		}
		return h.prepareRecords(ctx, recs, nil, dls)
	}
	return h.prepareRecords(ctx, rb.Records, nil, nil)
}

// prepareLines appends a chunk of the lines of JSONL files into a table
// typed by them: decoded as messages are, each row given the Hive columns
// of file (hive, typed) from its path.
func (h *appendHandler) prepareLines(ctx context.Context, ch *backfill.Chunk, file backfill.File, hive batch.Schema) (*prepared, error) {
	fill := func(out *batch.Batch) (*batch.Batch, error) {
		if len(h.hive) == 0 {
			return out, nil
		}
		s := h.r.sourceSchema(h.flow)
		full := &batch.Batch{Schema: batch.Schema{Columns: slices.Clone(out.Schema.Columns)}, Vectors: slices.Clone(out.Vectors)}
		for _, name := range h.hive {
			c := s.Columns[s.Index(name)]
			v, err := backfill.HiveValueOf(file, c)
			if err != nil {
				return nil, err
			}
			vec := batch.NewVector(c.Type, out.Len())
			v.AppendTo(vec, out.Len())
			full.Schema.Columns = append(full.Schema.Columns, c)
			full.Vectors = append(full.Vectors, vec)
		}
		return full, nil
	}
	return h.prepareRecords(ctx, ch.Records, fill, ch.DeadLetters)
}

// prepareRecords appends records decoded as messages: fill, when set,
// completes the decoded rows; dls are dead letters the source found
// before (lines too long).
func (h *appendHandler) prepareRecords(ctx context.Context, records []batch.Record, fill func(*batch.Batch) (*batch.Batch, error), early []batch.DeadLetter) (*prepared, error) {
	out, kids, dls, discarded, err := h.decode(ctx, records)
	if err != nil {
		return nil, err
	}
	if fill != nil {
		if out, err = fill(out); err != nil {
			return nil, err
		}
	}
	h.r.stampDeadLetters(h.flow, early)
	h.r.stampDeadLetters(h.flow, dls)
	counts := h.r.count(nil, h.flow, ContractCount, spec.ContractDiscardRow, int64(len(discarded)))
	// No rows, no rules: the columns they name may not exist yet (a table
	// typed by its messages that has none of them).
	if h.rules != nil && out.Len() > 0 {
		// The decoded rows are the records that are neither dead letters
		// nor discarded, in order.
		recs := make([]int, 0, out.Len())
		j, k := 0, 0
		for i := range records {
			pos := records[i].Position()
			if j < len(dls) && dls[j].Position == pos {
				j++
				continue
			}
			if k < len(discarded) && discarded[k] == pos {
				k++
				continue
			}
			recs = append(recs, i)
		}
		res, err := h.rules.apply(h.r, out, nil, func(i int) batch.DeadLetter {
			rec := &records[recs[i]]
			return batch.DeadLetter{Source: rec.Topic, Position: rec.Position(), Payload: rec.Payload()}
		})
		if err != nil {
			return nil, err
		}
		if len(kids) > 0 && res.batch.Len() < out.Len() {
			kids = keepChildren(res.batch, kids)
		}
		out, dls = res.batch, append(dls, res.dls...)
		switch {
		case counts == nil:
			counts = res.counts
		case res.counts != nil:
			counts.AppendBatch(res.counts)
		}
	}
	dls = append(dls, early...)
	if err := h.r.onErrorFail(h.flow, dls); err != nil {
		return nil, err
	}
	return h.withChildren(h.appendRows(out, dls, counts))(kids)
}

// withChildren has a prepared load write the child rows of its rows too:
// a record's child rows are in the load of its row.
func (h *appendHandler) withChildren(p *prepared, err error) func(kids map[string]*batch.Batch) (*prepared, error) {
	return func(kids map[string]*batch.Batch) (*prepared, error) {
		if err != nil || len(kids) == 0 {
			return p, err
		}
		write := p.write
		p.write = func(ctx context.Context, ld sinks.Load) error {
			for _, suffix := range slices.Sorted(maps.Keys(kids)) {
				if err := h.r.writeRows(ctx, ld, h.flow.Target+"__"+suffix, kids[suffix]); err != nil {
					return err
				}
			}
			return write(ctx, ld)
		}
		return p, nil
	}
}

// keepChildren returns the child rows of the rows of root: those whose
// records a rule (where, an expectation) left out go with them.
func keepChildren(root *batch.Batch, kids map[string]*batch.Batch) map[string]*batch.Batch {
	ids := map[string]bool{}
	if v := root.Column(batch.IDColumn); v != nil {
		for i := range root.Len() {
			if id, ok := v.Value(i).(string); ok {
				ids[id] = true
			}
		}
	}
	out := map[string]*batch.Batch{}
	for suffix, b := range kids {
		kept := batch.New(b.Schema, b.Len())
		roots := b.Column(batch.RootIDColumn)
		for i := range b.Len() {
			if id, _ := roots.Value(i).(string); ids[id] {
				kept.AppendRow(b, i)
			}
		}
		if kept.Len() > 0 {
			out[suffix] = kept
		}
	}
	return out
}

// decode decodes a batch's records. When the flow infers its columns and
// some records have fields that are no columns yet, it adds them
// (runner.evolve) and decodes the batch again with them.
//
// It returns the decoded rows, the dead letters, and the positions of the
// records the schema contract discarded.
//
// It returns the decoded rows, the rows of their child tables by the part
// of their names after <table>__, the dead letters, and the positions of
// the records the schema contract discarded.
func (h *appendHandler) decode(ctx context.Context, recs []batch.Record) (*batch.Batch, map[string]*batch.Batch, []batch.DeadLetter, []string, error) {
	for try := 0; ; try++ {
		dec, err := h.decoder()
		if err != nil {
			return nil, nil, nil, nil, err
		}
		if h.infers && h.wire != nil {
			dec.SetTypes(h.wire.hints())
		}
		out := batch.New(dec.Schema(), len(recs))
		dls := dec.DecodeAll(recs, out, nil)
		discarded := dec.Discarded()
		if !h.infers {
			h.pool.Put(dec)
			return out, nil, dls, discarded, nil
		}
		found, kids, foundKids := dec.Found(), dec.ChildRows(), dec.FoundChildren()
		renamed := dec.Renamed()
		h.pool.Put(dec)
		h.r.noteNames(h.flow, renamed)
		if len(found) == 0 && len(foundKids) == 0 && len(out.Schema.Columns) == 0 && len(recs) > len(dls)+len(discarded) {
			// A batch of no columns has no length: its rows would be lost.
			return out, nil, h.valueless(recs, dls), discarded, nil
		}
		if len(found) == 0 && len(foundKids) == 0 {
			return out, kids, dls, discarded, nil
		}
		if try == 2 {
			// Each pass adds every column the batch lacks: a third means
			// the columns the destination reports do not hold.
			return nil, nil, nil, nil, fmt.Errorf("flow %s: the columns of table %s (or its child tables %v) did not take the batch's fields %v",
				h.flow.Name, h.flow.Target, slices.Sorted(maps.Keys(foundKids)), batch.Schema{Columns: found}.Names())
		}
		if err := h.r.evolve(ctx, h.flow, found, foundKids); err != nil {
			return nil, nil, nil, nil, err
		}
	}
}

// ContractCount is the expectation name of the records a schema contract
// of discard_row left out, in _sluice_expectations.
const ContractCount = "(schema_contract)"

// contract is the flow's schema contract as its decoders apply it.
func (h *appendHandler) contract() decode.Contract { return decodeContract(h.r.p, h.flow) }

// decodeContract is a flow's schema contract as decoders apply it.
func decodeContract(p *spec.Pipeline, f *spec.Flow) decode.Contract {
	c := f.Contract(p)
	return decode.Contract{Columns: c.Columns, DataType: c.DataType}
}

// valueless adds to dls the records that decoded into no column: before a
// table typed by its messages has columns, a message without a field that
// has a value makes no row it could hold.
func (h *appendHandler) valueless(recs []batch.Record, dls []batch.DeadLetter) []batch.DeadLetter {
	bad := map[string]bool{}
	for _, d := range dls {
		bad[d.Position] = true
	}
	for i := range recs {
		if rec := &recs[i]; !bad[rec.Position()] {
			dls = append(dls, batch.DeadLetter{Source: rec.Topic, Position: rec.Position(), Reason: batch.ReasonMissingField,
				Error: "the message has no field with a value, and table " + h.flow.Target + " has no columns yet", Payload: rec.Payload()})
		}
	}
	return dls
}

// decoder returns a decoder of the flow's current source columns.
func (h *appendHandler) decoder() (*decode.JSON, error) {
	if !h.infers {
		return h.pool.Get().(*decode.JSON), nil
	}
	return h.r.inferringDecoder(&h.pool, h.flow, h.hive)
}

// inferringDecoder returns a decoder of the current source columns of a
// flow typed by its messages (less the Hive columns hive, which no field
// may fill), from pool when the one there is of those columns.
func (r *runner) inferringDecoder(pool *sync.Pool, f *spec.Flow, hive []string) (*decode.JSON, error) {
	s := r.sourceSchema(f)
	if len(hive) > 0 {
		s.Columns = slices.DeleteFunc(slices.Clone(s.Columns), func(c batch.Column) bool { return slices.Contains(hive, c.Name) })
	}
	kids := r.childSchemas(f.Target)
	if d, _ := pool.Get().(*decode.JSON); d != nil && d.Schema().Equal(s) && d.Reserves(hive) && sameSchemas(d.Children(), kids) {
		return d, nil
	}
	d, err := decode.NewInferring(s, r.dataNames())
	if err != nil {
		return nil, err
	}
	d.SetChildren(kids)
	d.SetMaxNesting(f.Nesting())
	d.Reserve(hive, func(name string) string {
		return "is also a Hive segment of the file's path, which fills column " + name + ": rename the field or the segment"
	})
	c := decodeContract(r.p, f)
	if len(s.Columns) == 0 {
		// A contract governs the changes of a table: its first messages
		// give it its columns.
		c.Columns = decode.Evolve
	}
	d.Govern(c)
	return d, nil
}

// prepareChunk appends a chunk of a file source.
func (h *appendHandler) prepareChunk(_ context.Context, ch *backfill.Chunk) (*prepared, error) {
	dls := ch.DeadLetters
	h.r.stampDeadLetters(h.flow, dls)
	out, kids := ch.Batch, ch.Children
	var counts *batch.Batch
	if h.rules != nil && out.Len() > 0 {
		res, err := h.rules.apply(h.r, out, nil, rowDeadLetter(out, ch.File, ch.Row))
		if err != nil {
			return nil, err
		}
		if len(kids) > 0 && res.batch.Len() < out.Len() {
			kids = keepChildren(res.batch, kids)
		}
		out, counts, dls = res.batch, res.counts, append(dls, res.dls...)
	}
	if err := h.r.onErrorFail(h.flow, dls); err != nil {
		return nil, err
	}
	return h.withChildren(h.appendRows(out, dls, counts))(kids)
}

func (h *appendHandler) appendRows(out *batch.Batch, dls []batch.DeadLetter, counts *batch.Batch) (*prepared, error) {
	if len(h.r.tableSchema(h.flow.Target).Columns) == 0 && out.Len() > 0 {
		// Never projected away: a table is typed before its rows arrive.
		return nil, fmt.Errorf("target %s has no columns yet for the %d rows read: declare its columns", h.flow.Target, out.Len())
	}
	return &prepared{
		rows:        int64(out.Len()),
		deadLetters: int64(len(dls)),
		write: func(ctx context.Context, ld sinks.Load) error {
			if out.Len() > 0 {
				if err := h.r.writeRows(ctx, ld, h.flow.Target, out); err != nil {
					return err
				}
			}
			if counts != nil {
				if err := ld.Write(ctx, batch.ExpectationsTable, counts); err != nil {
					return err
				}
			}
			return writeDeadLetters(ctx, ld, dls)
		},
	}, nil
}

func writeDeadLetters(ctx context.Context, ld sinks.Load, dls []batch.DeadLetter) error {
	if len(dls) == 0 {
		return nil
	}
	countDeadLetters(ctx, dls)
	return ld.Write(ctx, batch.DeadLettersTable, batch.DeadLetterBatch(dls))
}

// Project returns a batch of the target schema holding b's columns: columns
// of the target that b lacks are all NULL (the spec only allows that for
// nullable columns). Vectors are shared, not copied.
func Project(b *batch.Batch, target batch.Schema) *batch.Batch {
	if b.Schema.Equal(target) {
		return b
	}
	n := b.Len()
	out := &batch.Batch{Schema: target, Vectors: make([]*batch.Vector, len(target.Columns))}
	for i, c := range target.Columns {
		if v := b.Column(c.Name); v != nil {
			out.Vectors[i] = v
			continue
		}
		v := batch.NewVector(c.Type, n)
		for range n {
			v.AppendNull()
		}
		out.Vectors[i] = v
	}
	return out
}

// sameSchemas reports whether two sets of child tables are the same.
func sameSchemas(a, b map[string]batch.Schema) bool {
	return maps.EqualFunc(a, b, func(x, y batch.Schema) bool { return x.Equal(y) })
}
