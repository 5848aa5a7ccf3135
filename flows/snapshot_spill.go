package flows

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"unsafe"

	"github.com/sluicehq/sluice/flows/batch"
)

// A spill spreads rows over part files on disk by a hash of their encoded
// key, so that the rows of one key, whichever file or scan they came from,
// are all in one part. A snapshot spills its rows into one spill and the
// target's current keys into another of the same parts; then each bucket
// of parts is read back and applied on its own.
//
// A part file is a sequence of records: uvarint ordinal (the row's number
// in the snapshot), then per column a null byte (1: null, then nothing)
// or 0 and the value: varint for int64, timestamp and date; 8 bytes
// little-endian for float64; one byte for bool; uvarint length and bytes
// for string and bytes; varint Hi and uvarint Lo for decimals.
type spill struct {
	dir    string
	name   string // prefix of the part files
	schema batch.Schema
	seed   maphash.Seed
	parts  []*spillPart
	buf    []byte
	rows   int64
}

type spillPart struct {
	f    *os.File
	w    *bufio.Writer
	rows int64
}

// spillBuffer is the write buffer of each open part.
const spillBuffer = 32 << 10

func newSpill(dir, name string, schema batch.Schema, parts int, seed maphash.Seed) *spill {
	return &spill{dir: dir, name: name, schema: schema, seed: seed, parts: make([]*spillPart, parts)}
}

// partOf returns the part of an encoded key.
func (s *spill) partOf(key string) int {
	return int(maphash.String(s.seed, key) % uint64(len(s.parts)))
}

func (s *spill) path(part int) string {
	return filepath.Join(s.dir, s.name+"-"+strconv.Itoa(part))
}

// add appends row i of b (whose vectors follow the spill's schema) with
// its ordinal to the part of key.
func (s *spill) add(key string, b *batch.Batch, i int, ord int64) error {
	n := s.partOf(key)
	p := s.parts[n]
	if p == nil {
		f, err := os.OpenFile(s.path(n), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return fmt.Errorf("spill: %w", err)
		}
		p = &spillPart{f: f, w: bufio.NewWriterSize(f, spillBuffer)}
		s.parts[n] = p
	}
	buf := binary.AppendUvarint(s.buf[:0], uint64(ord))
	for c := range s.schema.Columns {
		buf = appendSpilled(buf, b.Vectors[c], i)
	}
	s.buf = buf
	if _, err := p.w.Write(buf); err != nil {
		return fmt.Errorf("spill: %w", err)
	}
	p.rows++
	s.rows++
	return nil
}

// finish flushes and closes every part file.
func (s *spill) finish() error {
	var errs []error
	for _, p := range s.parts {
		if p == nil || p.f == nil {
			continue
		}
		if err := p.w.Flush(); err != nil {
			errs = append(errs, err)
		}
		if err := p.f.Close(); err != nil {
			errs = append(errs, err)
		}
		p.f, p.w = nil, nil
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("spill: %w", err)
	}
	return nil
}

// rowsIn returns the rows spilled into parts [from, to).
func (s *spill) rowsIn(from, to int) int64 {
	var n int64
	for _, p := range s.parts[from:to] {
		if p != nil {
			n += p.rows
		}
	}
	return n
}

// read appends the rows of a finished part to the first vectors of out
// (which follow the spill's schema) and returns their ordinals appended to
// ords.
func (s *spill) read(part int, out *batch.Batch, ords []int64) ([]int64, error) {
	p := s.parts[part]
	if p == nil || p.rows == 0 {
		return ords, nil
	}
	data, err := os.ReadFile(s.path(part))
	if err != nil {
		return ords, fmt.Errorf("spill: %w", err)
	}
	d := spillDecoder{data: data}
	for range p.rows {
		ords = append(ords, int64(d.uvarint()))
		for c := range s.schema.Columns {
			d.value(out.Vectors[c])
		}
		if d.bad {
			return ords, fmt.Errorf("spill: %s is corrupt", s.path(part))
		}
	}
	if d.off != len(data) {
		return ords, fmt.Errorf("spill: %s has %d bytes more than its rows", s.path(part), len(data)-d.off)
	}
	return ords, nil
}

func appendSpilled(buf []byte, v *batch.Vector, i int) []byte {
	if v.IsNull(i) {
		return append(buf, 1)
	}
	buf = append(buf, 0)
	switch v.Type.Kind {
	case batch.KindInt64, batch.KindTimestamp, batch.KindDate:
		return binary.AppendVarint(buf, v.Ints[i])
	case batch.KindFloat64:
		return binary.LittleEndian.AppendUint64(buf, math.Float64bits(v.Floats[i]))
	case batch.KindBool:
		if v.Bools[i] {
			return append(buf, 1)
		}
		return append(buf, 0)
	case batch.KindString:
		buf = binary.AppendUvarint(buf, uint64(len(v.Strs[i])))
		return append(buf, v.Strs[i]...)
	case batch.KindBytes:
		buf = binary.AppendUvarint(buf, uint64(len(v.Bytes[i])))
		return append(buf, v.Bytes[i]...)
	case batch.KindDecimal:
		buf = binary.AppendVarint(buf, v.Decs[i].Hi)
		return binary.AppendUvarint(buf, v.Decs[i].Lo)
	case batch.KindArray:
		lo, hi := v.Array(i)
		buf = binary.AppendUvarint(buf, uint64(hi-lo))
		for j := lo; j < hi; j++ {
			buf = appendSpilled(buf, v.Elems, j)
		}
		return buf
	}
	panic(fmt.Sprintf("spill: column of invalid type %v", v.Type))
}

// spillDecoder reads the records of a part file. Strings and bytes it
// returns share the file's bytes, which are never written again.
type spillDecoder struct {
	data []byte
	off  int
	bad  bool
}

func (d *spillDecoder) uvarint() uint64 {
	x, n := binary.Uvarint(d.data[d.off:])
	if n <= 0 {
		d.bad, d.off = true, len(d.data)
		return 0
	}
	d.off += n
	return x
}

func (d *spillDecoder) varint() int64 {
	x, n := binary.Varint(d.data[d.off:])
	if n <= 0 {
		d.bad, d.off = true, len(d.data)
		return 0
	}
	d.off += n
	return x
}

func (d *spillDecoder) take(n int) []byte {
	if n < 0 || d.off+n > len(d.data) {
		d.bad, d.off = true, len(d.data)
		return nil
	}
	b := d.data[d.off : d.off+n : d.off+n]
	d.off += n
	return b
}

func (d *spillDecoder) value(v *batch.Vector) {
	flag := d.take(1)
	if d.bad || flag[0] == 1 {
		v.AppendNull()
		return
	}
	switch v.Type.Kind {
	case batch.KindInt64, batch.KindTimestamp, batch.KindDate:
		v.AppendInt(d.varint())
	case batch.KindFloat64:
		if b := d.take(8); b != nil {
			v.AppendFloat(math.Float64frombits(binary.LittleEndian.Uint64(b)))
		} else {
			v.AppendNull()
		}
	case batch.KindBool:
		if b := d.take(1); b != nil {
			v.AppendBool(b[0] == 1)
		} else {
			v.AppendNull()
		}
	case batch.KindString:
		b := d.take(int(d.uvarint()))
		if len(b) == 0 {
			v.AppendString("")
			return
		}
		v.AppendString(unsafe.String(&b[0], len(b)))
	case batch.KindBytes:
		b := d.take(int(d.uvarint()))
		if b == nil {
			b = []byte{}
		}
		v.AppendBytes(b)
	case batch.KindDecimal:
		hi := d.varint()
		v.AppendDecimal(batch.Dec128{Hi: hi, Lo: d.uvarint()})
	case batch.KindArray:
		for n := d.uvarint(); n > 0 && !d.bad; n-- {
			d.value(v.Elems)
		}
		v.EndArray()
	}
}
