package cdc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
)

// vkind is what a stored value holds. vAbsent is a null that ignore-null
// made "keep the previous value": it never reaches a target row.
type vkind uint8

const (
	vNull vkind = iota
	vAbsent
	vInt // int64, timestamp (µs), date (days)
	vFloat
	vBool
	vStr
	vBytes
	vDec
	_    // 8 is encDec64 in a key state's encoding
	vArr // s holds the elements (arrayValue)
)

// value is one cell of a stored event, comparable with ==, so that tracked
// columns and rows compare without reflection.
type value struct {
	k vkind
	i int64  // vInt; vFloat bits; vBool 0/1; vDec low 64 bits
	h int64  // vDec high 64 bits
	s string // vStr, vBytes, vArr
}

var null = value{k: vNull}

// kindOf is the kind a non-null value of a column of type t has.
func kindOf(t batch.Type) vkind {
	switch t.Kind {
	case batch.KindInt64, batch.KindTimestamp, batch.KindDate:
		return vInt
	case batch.KindFloat64:
		return vFloat
	case batch.KindBool:
		return vBool
	case batch.KindString:
		return vStr
	case batch.KindBytes:
		return vBytes
	case batch.KindDecimal:
		return vDec
	case batch.KindArray:
		return vArr
	}
	return vNull
}

// readValue returns row i of v. Strings and bytes still point into the
// batch; stored states copy them into their encoding (see newState).
func readValue(v *batch.Vector, i int) value {
	if v.IsNull(i) {
		return null
	}
	switch v.Type.Kind {
	case batch.KindInt64, batch.KindTimestamp, batch.KindDate:
		return value{k: vInt, i: v.Ints[i]}
	case batch.KindFloat64:
		return value{k: vFloat, i: int64(math.Float64bits(v.Floats[i]))}
	case batch.KindBool:
		if v.Bools[i] {
			return value{k: vBool, i: 1}
		}
		return value{k: vBool}
	case batch.KindString:
		return value{k: vStr, s: v.Strs[i]}
	case batch.KindBytes:
		b := v.Bytes[i]
		if len(b) == 0 {
			return value{k: vBytes}
		}
		return value{k: vBytes, s: unsafeString(b)}
	case batch.KindDecimal:
		d := v.Decs[i]
		return value{k: vDec, i: int64(d.Lo), h: d.Hi}
	case batch.KindArray:
		return arrayValue(v, i)
	}
	return null
}

// arrayValue encodes row i of an array vector: the number of elements, then
// each element (varint integers, 8-byte floats, 1-byte bools, 16-byte
// decimals, length-prefixed strings and bytes). Equal arrays encode equally.
func arrayValue(v *batch.Vector, i int) value {
	lo, hi := v.Array(i)
	e := v.Elems
	buf := binary.AppendUvarint(nil, uint64(hi-lo))
	for j := lo; j < hi; j++ {
		switch e.Type.Kind {
		case batch.KindInt64, batch.KindTimestamp, batch.KindDate:
			buf = binary.AppendVarint(buf, e.Ints[j])
		case batch.KindFloat64:
			buf = binary.LittleEndian.AppendUint64(buf, math.Float64bits(e.Floats[j]))
		case batch.KindBool:
			buf = append(buf, boolByte(e.Bools[j]))
		case batch.KindString:
			buf = binary.AppendUvarint(buf, uint64(len(e.Strs[j])))
			buf = append(buf, e.Strs[j]...)
		case batch.KindBytes:
			buf = binary.AppendUvarint(buf, uint64(len(e.Bytes[j])))
			buf = append(buf, e.Bytes[j]...)
		case batch.KindDecimal:
			buf = binary.LittleEndian.AppendUint64(buf, e.Decs[j].Lo)
			buf = binary.LittleEndian.AppendUint64(buf, uint64(e.Decs[j].Hi))
		}
	}
	return value{k: vArr, s: unsafeString(buf)}
}

// appendArray appends the array arrayValue encoded to an array vector.
func appendArray(dst *batch.Vector, s string) {
	r := reader{buf: s}
	e := dst.Elems
	for n := r.uvarint(); n > 0 && r.err == nil; n-- {
		switch e.Type.Kind {
		case batch.KindInt64, batch.KindTimestamp, batch.KindDate:
			e.AppendInt(r.varint())
		case batch.KindFloat64:
			e.AppendFloat(math.Float64frombits(r.fixed64()))
		case batch.KindBool:
			e.AppendBool(r.byte() != 0)
		case batch.KindString:
			e.AppendString(r.string())
		case batch.KindBytes:
			e.AppendBytes([]byte(r.string()))
		case batch.KindDecimal:
			lo := r.fixed64()
			e.AppendDecimal(batch.Dec128{Lo: lo, Hi: int64(r.fixed64())})
		}
	}
	if r.err != nil {
		// Only arrayValue writes these encodings; a short one is a bug.
		panic("cdc: malformed array value")
	}
	dst.EndArray()
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// appendValue appends x to a vector of the matching kind; null and absent
// append a null.
func appendValue(dst *batch.Vector, x value) {
	switch x.k {
	case vNull, vAbsent:
		dst.AppendNull()
	case vInt:
		dst.AppendInt(x.i)
	case vFloat:
		dst.AppendFloat(math.Float64frombits(uint64(x.i)))
	case vBool:
		dst.AppendBool(x.i != 0)
	case vStr:
		dst.AppendString(x.s)
	case vBytes:
		dst.AppendBytes([]byte(x.s))
	case vDec:
		dst.AppendDecimal(batch.Dec128{Hi: x.h, Lo: uint64(x.i)})
	case vArr:
		appendArray(dst, x.s)
	}
}

// Order-preserving encodings. A key or a sequence is encoded column by
// column so that bytes.Compare on two encodings orders them like the values,
// left to right. Neither holds nulls: a null key or sequence is a dead letter.
//
//	int64, timestamp, date  8 bytes big-endian, sign bit flipped
//	decimal                 16 bytes: high half sign-flipped, then low half
//	float64                 8 bytes: IEEE bits, all flipped when negative, else the sign bit
//	bool                    1 byte
//	string, bytes           the bytes with 0x00 escaped as 0x00 0xFF, then 0x00 0x01
//
// An encoding is never empty.

// appendOrdered appends the encoding of row i of v.
func appendOrdered(buf []byte, v *batch.Vector, i int) []byte {
	switch v.Type.Kind {
	case batch.KindInt64, batch.KindTimestamp, batch.KindDate:
		return binary.BigEndian.AppendUint64(buf, uint64(v.Ints[i])^(1<<63))
	case batch.KindFloat64:
		f := v.Floats[i]
		if f == 0 {
			f = 0 // -0 and +0 are one key
		}
		if f != f {
			f = math.NaN()
		}
		bits := math.Float64bits(f)
		if bits&(1<<63) != 0 {
			bits = ^bits
		} else {
			bits ^= 1 << 63
		}
		return binary.BigEndian.AppendUint64(buf, bits)
	case batch.KindBool:
		if v.Bools[i] {
			return append(buf, 1)
		}
		return append(buf, 0)
	case batch.KindString:
		return appendEscaped(buf, v.Strs[i])
	case batch.KindBytes:
		return appendEscaped(buf, unsafeString(v.Bytes[i]))
	case batch.KindDecimal:
		d := v.Decs[i]
		buf = binary.BigEndian.AppendUint64(buf, uint64(d.Hi)^(1<<63))
		return binary.BigEndian.AppendUint64(buf, d.Lo)
	}
	panic(fmt.Sprintf("cdc: no ordered encoding for %v", v.Type))
}

func appendEscaped(buf []byte, s string) []byte {
	for {
		j := strings.IndexByte(s, 0)
		if j < 0 {
			buf = append(buf, s...)
			break
		}
		buf = append(buf, s[:j]...)
		buf = append(buf, 0, 0xFF)
		s = s[j+1:]
	}
	return append(buf, 0, 1)
}

// decodeOrdered splits an encoded sequence back into values of types ts.
// The instant just after a sequence (justAfter) reads as the sequence.
func decodeOrdered(ts []batch.Type, enc string) ([]value, error) {
	out, rest, err := splitOrdered(ts, enc)
	if err != nil {
		return nil, err
	}
	if rest != "" && rest != afterMark {
		return nil, errShortEncoding
	}
	return out, nil
}

// afterMark ends the encoding of the instant just after a sequence: the
// least byte string greater than the sequence's encoding, and less than
// every greater sequence's.
const afterMark = "\x00"

// justAfter returns the encoding of the instant just after the encoded
// sequence seq, which may itself be such an instant.
func justAfter(ts []batch.Type, seq string) string {
	if _, rest, err := splitOrdered(ts, seq); err == nil && rest == afterMark {
		return seq
	}
	return seq + afterMark
}

// splitOrdered decodes the values of types ts at the start of enc and
// returns what follows them.
func splitOrdered(ts []batch.Type, enc string) ([]value, string, error) {
	out := make([]value, len(ts))
	for j, t := range ts {
		switch t.Kind {
		case batch.KindInt64, batch.KindTimestamp, batch.KindDate:
			if len(enc) < 8 {
				return nil, "", errShortEncoding
			}
			out[j] = value{k: vInt, i: int64(binary.BigEndian.Uint64([]byte(enc[:8])) ^ (1 << 63))}
			enc = enc[8:]
		case batch.KindDecimal:
			if len(enc) < 16 {
				return nil, "", errShortEncoding
			}
			hi := int64(binary.BigEndian.Uint64([]byte(enc[:8])) ^ (1 << 63))
			lo := binary.BigEndian.Uint64([]byte(enc[8:16]))
			out[j] = value{k: vDec, i: int64(lo), h: hi}
			enc = enc[16:]
		case batch.KindString:
			var sb strings.Builder
			for {
				k := strings.IndexByte(enc, 0)
				if k < 0 || k+1 >= len(enc) {
					return nil, "", errShortEncoding
				}
				sb.WriteString(enc[:k])
				if enc[k+1] == 1 {
					enc = enc[k+2:]
					break
				}
				sb.WriteByte(0)
				enc = enc[k+2:]
			}
			out[j] = value{k: vStr, s: sb.String()}
		default:
			return nil, "", fmt.Errorf("%v is not a sequence type", t)
		}
	}
	return out, enc, nil
}

var errShortEncoding = errors.New("malformed sequence encoding")

// sequenceJSON renders sequence values as a JSON array, the form a list
// sequence takes in __START_AT and __END_AT: int64 as numbers, timestamps
// RFC 3339 in UTC, dates YYYY-MM-DD, strings and decimals as strings.
func sequenceJSON(ts []batch.Type, vs []value) string {
	var sb strings.Builder
	sb.WriteByte('[')
	for j, t := range ts {
		if j > 0 {
			sb.WriteByte(',')
		}
		writeJSONValue(&sb, t, vs[j])
	}
	sb.WriteByte(']')
	return sb.String()
}

// writeJSONValue writes one value as `sluice show --format jsonl` does
// (docs/operations.md).
func writeJSONValue(sb *strings.Builder, t batch.Type, v value) {
	if v.k == vNull || v.k == vAbsent {
		sb.WriteString("null")
		return
	}
	switch t.Kind {
	case batch.KindInt64:
		sb.WriteString(strconv.FormatInt(v.i, 10))
	case batch.KindTimestamp:
		sb.WriteString(strconv.Quote(time.UnixMicro(v.i).UTC().Format(time.RFC3339Nano)))
	case batch.KindDate:
		sb.WriteString(strconv.Quote(batch.DateValue(v.i).String()))
	case batch.KindFloat64:
		f := math.Float64frombits(uint64(v.i))
		if math.IsInf(f, 0) || math.IsNaN(f) {
			sb.WriteString(strconv.Quote(strconv.FormatFloat(f, 'g', -1, 64)))
		} else {
			sb.WriteString(strconv.FormatFloat(f, 'g', -1, 64))
		}
	case batch.KindBool:
		sb.WriteString(strconv.FormatBool(v.i != 0))
	case batch.KindString:
		writeJSONString(sb, v.s)
	case batch.KindBytes:
		sb.WriteByte('"')
		sb.WriteString(base64Std(v.s))
		sb.WriteByte('"')
	case batch.KindDecimal:
		sb.WriteString(strconv.Quote(batch.FormatDecimal(batch.Dec128{Hi: v.h, Lo: uint64(v.i)}, t.Scale)))
	case batch.KindArray:
		vec := batch.NewVector(t, 1)
		appendArray(vec, v.s)
		sb.WriteByte('[')
		for j := range vec.Elems.Len() {
			if j > 0 {
				sb.WriteByte(',')
			}
			writeJSONValue(sb, vec.Elems.Type, readValue(vec.Elems, j))
		}
		sb.WriteByte(']')
	default:
		sb.WriteString("null")
	}
}
