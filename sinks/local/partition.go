package local

import (
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/sluicehq/sluice/flows/batch"
)

// hiveNull is the folder value of a NULL (or empty string) partition value,
// as Hive, Spark and DuckDB write it.
const hiveNull = "__HIVE_DEFAULT_PARTITION__"

// maxSegment bounds the length of one col=value folder name (file systems
// allow 255 bytes).
const maxSegment = 250

// partitioner splits a batch of a partitioned table by the values of its
// partition_by columns. The columns stay in the files too, with their exact
// values: the folder names are for readers that prune by path.
type partitioner struct {
	cols  []int    // indexes of the partition columns in the schema
	names []string // their escaped names
	buf   []byte
	index map[string]int
}

func newPartitioner(s batch.Schema, by []string) (*partitioner, error) {
	p := &partitioner{index: map[string]int{}}
	for _, name := range by {
		i := s.Index(name)
		if i < 0 {
			return nil, fmt.Errorf("partition_by column %s is not a column of the table", name)
		}
		p.cols = append(p.cols, i)
		p.names = append(p.names, string(hiveEscape(nil, []byte(name), false)))
	}
	return p, nil
}

// split returns the folder of each partition in b, in order of first
// appearance, and the rows of each.
func (p *partitioner) split(b *batch.Batch) (dirs []string, rows [][]int, err error) {
	clear(p.index)
	for r := range b.Len() {
		p.buf = p.buf[:0]
		for k, c := range p.cols {
			if k > 0 {
				p.buf = append(p.buf, '/')
			}
			start := len(p.buf)
			p.buf = append(p.buf, p.names[k]...)
			p.buf = append(p.buf, '=')
			p.buf = appendPartValue(p.buf, b.Vectors[c], r)
			if len(p.buf)-start > maxSegment {
				return nil, nil, fmt.Errorf("row %d: partition folder %.40q... is longer than %d bytes",
					r, p.buf[start:], maxSegment)
			}
		}
		i, ok := p.index[string(p.buf)]
		if !ok {
			i = len(dirs)
			dir := string(p.buf)
			p.index[dir] = i
			dirs = append(dirs, dir)
			rows = append(rows, nil)
		}
		rows[i] = append(rows[i], r)
	}
	return dirs, rows, nil
}

// appendPartValue appends the Hive folder spelling of row r of v.
func appendPartValue(dst []byte, v *batch.Vector, r int) []byte {
	if v.IsNull(r) {
		return append(dst, hiveNull...)
	}
	switch v.Type.Kind {
	case batch.KindString:
		if v.Strs[r] == "" {
			return append(dst, hiveNull...)
		}
		return hiveEscape(dst, strBytes(v.Strs[r]), false)
	case batch.KindBytes:
		if len(v.Bytes[r]) == 0 {
			return append(dst, hiveNull...)
		}
		return hiveEscape(dst, v.Bytes[r], true)
	case batch.KindInt64:
		return strconv.AppendInt(dst, v.Ints[r], 10)
	case batch.KindFloat64:
		return hiveEscape(dst, strconv.AppendFloat(nil, v.Floats[r], 'g', -1, 64), false)
	case batch.KindBool:
		return strconv.AppendBool(dst, v.Bools[r])
	case batch.KindDate:
		return batch.DateValue(v.Ints[r]).Time().AppendFormat(dst, time.DateOnly)
	case batch.KindTimestamp:
		ts := time.UnixMicro(v.Ints[r]).UTC().AppendFormat(nil, "2006-01-02 15:04:05.999999")
		return hiveEscape(dst, ts, false)
	case batch.KindDecimal:
		return append(dst, batch.FormatDecimal(v.Decs[r], v.Type.Scale)...)
	}
	return dst
}

// hiveEscape appends s with the characters Hive escapes in path names
// written %XX; with binary, every byte outside printable ASCII too (else
// valid UTF-8 stays as is).
func hiveEscape(dst, s []byte, binary bool) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf && !binary {
			r, n := utf8.DecodeRune(s[i:])
			if r != utf8.RuneError || n > 1 {
				dst = append(dst, s[i:i+n]...)
				i += n
				continue
			}
		}
		switch {
		case c < 0x20, c >= 0x7F, c == '"', c == '#', c == '%', c == '\'', c == '*', c == '/', c == ':',
			c == '=', c == '?', c == '\\', c == '{', c == '[', c == ']', c == '^':
			dst = append(dst, '%', hex[c>>4], hex[c&15])
		default:
			dst = append(dst, c)
		}
		i++
	}
	return dst
}

// take returns the given rows of b as a new batch (string and byte values
// are shared, not copied).
func take(b *batch.Batch, rows []int) *batch.Batch {
	out := &batch.Batch{Schema: b.Schema, Vectors: make([]*batch.Vector, len(b.Vectors))}
	for c, v := range b.Vectors {
		out.Vectors[c] = v.Take(rows)
	}
	return out
}

func gather[T any](src []T, rows []int) []T {
	out := make([]T, len(rows))
	for i, r := range rows {
		out[i] = src[r]
	}
	return out
}
