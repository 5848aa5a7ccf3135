package backfill

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
)

// rowJSON renders row i of b as a JSON object, the payload of a dead letter:
// int64 as integers, decimals as strings, bytes as base64, dates YYYY-MM-DD,
// timestamps RFC 3339 in UTC, NULL as null (the spellings of `sluice show`).
func rowJSON(b *batch.Batch, i int) []byte {
	out := []byte{'{'}
	for c, v := range b.Vectors {
		if c > 0 {
			out = append(out, ',')
		}
		out = appendJSONString(out, b.Schema.Columns[c].Name)
		out = append(out, ':')
		out = appendJSONValue(out, v, i)
	}
	return append(out, '}')
}

func appendJSONValue(out []byte, v *batch.Vector, i int) []byte {
	if v.IsNull(i) {
		return append(out, "null"...)
	}
	switch v.Type.Kind {
	case batch.KindInt64:
		return strconv.AppendInt(out, v.Ints[i], 10)
	case batch.KindFloat64:
		f := v.Floats[i]
		if math.IsNaN(f) || math.IsInf(f, 0) { // no JSON number
			return appendJSONString(out, strconv.FormatFloat(f, 'g', -1, 64))
		}
		return strconv.AppendFloat(out, f, 'g', -1, 64)
	case batch.KindBool:
		return strconv.AppendBool(out, v.Bools[i])
	case batch.KindString:
		return appendJSONString(out, v.Strs[i])
	case batch.KindBytes:
		return appendJSONString(out, base64.StdEncoding.EncodeToString(v.Bytes[i]))
	case batch.KindDate:
		return appendJSONString(out, batch.DateValue(v.Ints[i]).String())
	case batch.KindTimestamp:
		return appendJSONString(out, time.UnixMicro(v.Ints[i]).UTC().Format(time.RFC3339Nano))
	case batch.KindDecimal:
		return appendJSONString(out, batch.FormatDecimal(v.Decs[i], v.Type.Scale))
	case batch.KindArray:
		lo, hi := v.Array(i)
		out = append(out, '[')
		for j := lo; j < hi; j++ {
			if j > lo {
				out = append(out, ',')
			}
			out = appendJSONValue(out, v.Elems, j)
		}
		return append(out, ']')
	}
	return append(out, "null"...)
}

func appendJSONString(out []byte, s string) []byte {
	b, err := json.Marshal(s)
	if err != nil {
		panic("backfill: a string does not encode as JSON: " + err.Error())
	}
	return append(out, b...)
}
