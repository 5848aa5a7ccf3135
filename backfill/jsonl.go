package backfill

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/decode"
)

// jsonlBuffer is the read buffer of a JSONL file; longer lines are gathered
// in a separate buffer up to MaxLineBytes.
const jsonlBuffer = 64 << 10

// payloadCap bounds the payload kept of a line longer than MaxLineBytes.
const payloadCap = 4 << 10

type jsonlReader struct {
	file   File
	f      *os.File
	r      *bufio.Reader
	opts   ReadOptions
	schema batch.Schema
	consts []*Value
	dec    *decode.JSON
	decIdx []int // per wanted column, its index in the decoder's schema; -1 for constants

	line    int64 // lines consumed
	offset  int64 // bytes consumed
	skipped int64 // bytes skipped on resume, reported by the first chunk
	long    []byte
	started bool
	done    bool
	err     error
}

func openJSONL(f File, schema batch.Schema, consts []*Value, opts ReadOptions) (Reader, error) {
	var ds batch.Schema
	idx := make([]int, len(schema.Columns))
	for i, c := range schema.Columns {
		idx[i] = -1
		if consts[i] == nil {
			idx[i] = len(ds.Columns)
			ds.Columns = append(ds.Columns, c)
		}
	}
	dec, err := decode.NewJSON(ds, opts.Units)
	if err != nil {
		return nil, fmt.Errorf("backfill: %w", err)
	}
	paths := decode.Paths{}
	for name, path := range opts.Paths {
		if ds.Index(name) >= 0 {
			paths[name] = path
		}
	}
	if err := dec.SetPaths(paths); err != nil {
		return nil, fmt.Errorf("backfill: %w", err)
	}
	osf, err := os.Open(f.Path)
	if err != nil {
		return nil, &FileError{File: f.Name, Err: err}
	}
	return &jsonlReader{
		file: f, f: osf, r: bufio.NewReaderSize(osf, jsonlBuffer), opts: opts,
		schema: schema, consts: consts, dec: dec, decIdx: idx,
	}, nil
}

func (r *jsonlReader) Close() error { return r.f.Close() }

func (r *jsonlReader) fail(err error) error {
	r.err = &FileError{File: r.file.Name, Err: err}
	return r.err
}

func (r *jsonlReader) Next(ctx context.Context) (*Chunk, error) {
	if r.err != nil {
		return nil, r.err
	}
	if r.done {
		return nil, io.EOF
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !r.started {
		r.started = true
		for r.line < r.opts.Start {
			_, n, _, err := r.readLine(false)
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, r.fail(err)
			}
			r.line++
			r.offset += n
		}
		r.skipped = r.offset
	}
	var out *batch.Batch
	if !r.opts.Lines {
		out = batch.New(r.dec.Schema(), min(r.opts.MaxRows, 1024))
	}
	// Under Lines, the chunk's lines back to back (a record keeps its part
	// of an outgrown buffer).
	var text []byte
	c := &Chunk{File: r.file.Name, RowGroup: -1, FirstRow: r.line, Skipped: r.skipped}
	r.skipped = 0
	start := r.offset
	var rows []int64
	contiguous := true
	for lines := 0; lines < r.opts.MaxRows && r.offset-start < r.opts.MaxBytes; lines++ {
		line, n, tooLong, err := r.readLine(true)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, r.fail(err)
		}
		r.line++
		r.offset += n
		lineNo := r.line // 1-based number of this line
		if tooLong {
			contiguous = false
			c.DeadLetters = append(c.DeadLetters, batch.DeadLetter{
				Source: r.file.Name, Position: strconv.FormatInt(lineNo, 10), Reason: batch.ReasonUndecodable,
				Error:   fmt.Sprintf("the line is longer than %d bytes", r.opts.MaxLineBytes),
				Payload: bytes.Clone(line),
			})
			continue
		}
		if len(bytes.TrimSpace(line)) == 0 {
			contiguous = false
			continue
		}
		if r.opts.Lines {
			at := len(text)
			text = append(text, line...)
			c.Records = append(c.Records, batch.Record{Topic: r.file.Name, Partition: batch.LinePartition, Offset: lineNo, Value: text[at:len(text):len(text)]})
			continue
		}
		rec := batch.Record{Topic: r.file.Name, Offset: lineNo, Value: line}
		if err := r.dec.Decode(&rec, out); err != nil {
			var de *decode.Error
			reason, msg := batch.ReasonUndecodable, err.Error()
			if errors.As(err, &de) {
				reason = de.Reason
			}
			contiguous = false
			c.DeadLetters = append(c.DeadLetters, batch.DeadLetter{
				Source: r.file.Name, Position: strconv.FormatInt(lineNo, 10), Reason: reason,
				Error: msg, Payload: bytes.Clone(line),
			})
			continue
		}
		rows = append(rows, lineNo-1)
	}
	if _, err := r.r.Peek(1); err == io.EOF {
		r.done = true
	} else if err != nil {
		return nil, r.fail(err)
	}
	c.Next, c.Bytes, c.Done = r.line, r.offset-start, r.done
	if r.opts.Lines {
		return c, nil
	}
	if !contiguous {
		c.Rows = rows
	}
	c.Batch = r.assemble(out)
	return c, nil
}

// assemble returns the batch of the wanted schema: the decoded columns and
// the constant ones.
func (r *jsonlReader) assemble(dec *batch.Batch) *batch.Batch {
	n := dec.Len()
	b := &batch.Batch{Schema: r.schema, Vectors: make([]*batch.Vector, len(r.schema.Columns))}
	for i, c := range r.schema.Columns {
		if r.decIdx[i] >= 0 {
			b.Vectors[i] = dec.Vectors[r.decIdx[i]]
			continue
		}
		v := batch.NewVector(c.Type, n)
		r.consts[i].AppendTo(v, n)
		b.Vectors[i] = v
	}
	return b
}

// readLine returns the next line without its line end and the bytes it
// took. A line longer than MaxLineBytes is consumed to its end and reported
// tooLong with its first bytes. When keep is false the content is not
// gathered (skipping on resume). The line is valid until the next call.
func (r *jsonlReader) readLine(keep bool) (line []byte, n int64, tooLong bool, err error) {
	r.long = r.long[:0]
	gather := func(part []byte) {
		if room := r.opts.MaxLineBytes + 2 - len(r.long); room > 0 {
			r.long = append(r.long, part[:min(room, len(part))]...)
		}
	}
	for {
		part, err := r.r.ReadSlice('\n')
		n += int64(len(part))
		if err == bufio.ErrBufferFull {
			if keep {
				gather(part)
			}
			continue
		}
		if err == io.EOF && n == 0 {
			return nil, 0, false, io.EOF
		}
		if err != nil && err != io.EOF {
			return nil, n, false, err
		}
		if !keep {
			return nil, n, false, nil
		}
		if len(r.long) == 0 && int64(len(part)) == n {
			line = part
		} else {
			gather(part)
			line = r.long
		}
		content := n
		if bytes.HasSuffix(part, []byte("\r\n")) {
			content -= 2
		} else if bytes.HasSuffix(part, []byte("\n")) {
			content--
		}
		if content > int64(r.opts.MaxLineBytes) {
			return line[:min(len(line), payloadCap)], n, true, nil
		}
		return trimEOL(line), n, false, nil
	}
}

func trimEOL(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r"))
}
