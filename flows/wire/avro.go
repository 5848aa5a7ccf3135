package wire

import (
	"errors"
	"fmt"
	"math/big"
	"strconv"

	"github.com/hamba/avro/v2"
	"github.com/sluicehq/sluice/flows/batch"
)

// akind is what an Avro node reads, logical types included.
type akind uint8

const (
	aNull akind = iota
	aBool
	aInt
	aLong
	aFloat
	aDouble
	aBytes
	aString
	aRecord
	aEnum
	aArray
	aMap
	aUnion
	aFixed
	aDecimalBytes
	aDecimalFixed
	aVarDecimal // io.debezium.data.VariableScaleDecimal: {scale, value}
	aDate       // int days since the epoch
	aTimeMillis // int milliseconds after midnight
	aTimeMicros // long microseconds after midnight
	aTimeNanos  // long nanoseconds after midnight
	aTsMillis   // long milliseconds since the epoch
	aTsMicros
	aTsNanos
	aUUIDFixed
)

// anode is a compiled Avro schema: what to read and how to write it as
// JSON.
type anode struct {
	kind     akind
	names    []string // record: field names, quoted for JSON; enum: symbols
	kids     []*anode // record: fields; union: branches; array, map: items
	size     int      // fixed
	scale    int      // decimals
	prec     int      // decimals: the precision, 0 when not stated
	nullable bool     // a union of null and one other type
}

// avroCodec is the compiled writer schema of one schema id.
type avroCodec struct{ root *anode }

// compileAvro compiles an Avro schema text whose named references are
// refs (name -> schema text).
func compileAvro(text string, refs map[string]string) (*avroCodec, error) {
	cache := &avro.SchemaCache{}
	// References first, so that the schema may name their types; the
	// cache is per schema id, so two versions of a record do not meet.
	for pass := 0; pass < len(refs); pass++ {
		failed := 0
		for _, r := range refs {
			if _, err := avro.ParseWithCache(r, "", cache); err != nil {
				failed++
			}
		}
		if failed == 0 {
			break
		}
	}
	s, err := avro.ParseWithCache(text, "", cache)
	if err != nil {
		return nil, fmt.Errorf("invalid Avro schema: %w", err)
	}
	root, err := compileNode(s, map[string]*anode{})
	if err != nil {
		return nil, err
	}
	return &avroCodec{root: root}, nil
}

// propper is a schema with custom properties (Debezium's connect.name).
type propper interface{ Prop(string) any }

func connectName(s avro.Schema) string {
	if p, ok := s.(propper); ok {
		if n, ok := p.Prop("connect.name").(string); ok {
			return n
		}
	}
	return ""
}

func compileNode(s avro.Schema, named map[string]*anode) (*anode, error) {
	if r, ok := s.(*avro.RefSchema); ok {
		s = r.Schema()
	}
	if n, ok := s.(avro.NamedSchema); ok {
		if c := named[n.FullName()]; c != nil {
			return c, nil // a recursive type: the node being compiled
		}
	}
	cn := connectName(s)
	switch s := s.(type) {
	case *avro.NullSchema:
		return &anode{kind: aNull}, nil
	case *avro.PrimitiveSchema:
		var lt avro.LogicalType
		if l := s.Logical(); l != nil {
			lt = l.Type()
		}
		switch s.Type() {
		case avro.Null:
			return &anode{kind: aNull}, nil
		case avro.Boolean:
			return &anode{kind: aBool}, nil
		case avro.Int:
			switch {
			case lt == avro.Date || cn == "io.debezium.time.Date" || cn == "org.apache.kafka.connect.data.Date":
				return &anode{kind: aDate}, nil
			case lt == avro.TimeMillis || cn == "io.debezium.time.Time" || cn == "org.apache.kafka.connect.data.Time":
				return &anode{kind: aTimeMillis}, nil
			}
			return &anode{kind: aInt}, nil
		case avro.Long:
			switch {
			case lt == avro.TimestampMillis || lt == avro.LocalTimestampMillis || cn == "io.debezium.time.Timestamp" || cn == "org.apache.kafka.connect.data.Timestamp":
				return &anode{kind: aTsMillis}, nil
			case lt == avro.TimestampMicros || lt == avro.LocalTimestampMicros || cn == "io.debezium.time.MicroTimestamp":
				return &anode{kind: aTsMicros}, nil
			case lt == "timestamp-nanos" || lt == "local-timestamp-nanos" || cn == "io.debezium.time.NanoTimestamp":
				return &anode{kind: aTsNanos}, nil
			case lt == avro.TimeMicros || cn == "io.debezium.time.MicroTime":
				return &anode{kind: aTimeMicros}, nil
			case cn == "io.debezium.time.NanoTime":
				return &anode{kind: aTimeNanos}, nil
			}
			return &anode{kind: aLong}, nil
		case avro.Float:
			return &anode{kind: aFloat}, nil
		case avro.Double:
			return &anode{kind: aDouble}, nil
		case avro.Bytes:
			if d, ok := s.Logical().(*avro.DecimalLogicalSchema); ok {
				return &anode{kind: aDecimalBytes, scale: d.Scale(), prec: d.Precision()}, nil
			}
			return &anode{kind: aBytes}, nil
		case avro.String:
			return &anode{kind: aString}, nil // uuid and Debezium's zoned times are their text
		}
	case *avro.RecordSchema:
		n := &anode{kind: aRecord}
		named[s.FullName()] = n
		if cn == "io.debezium.data.VariableScaleDecimal" {
			n.kind = aVarDecimal
		}
		for _, f := range s.Fields() {
			k, err := compileNode(f.Type(), named)
			if err != nil {
				return nil, fmt.Errorf("field %s: %w", f.Name(), err)
			}
			n.names = append(n.names, f.Name())
			n.kids = append(n.kids, k)
		}
		if n.kind == aVarDecimal && (len(n.kids) != 2 || n.names[0] != "scale" || n.names[1] != "value") {
			n.kind = aRecord
		}
		return n, nil
	case *avro.EnumSchema:
		return &anode{kind: aEnum, names: s.Symbols()}, nil
	case *avro.ArraySchema:
		k, err := compileNode(s.Items(), named)
		if err != nil {
			return nil, err
		}
		return &anode{kind: aArray, kids: []*anode{k}}, nil
	case *avro.MapSchema:
		k, err := compileNode(s.Values(), named)
		if err != nil {
			return nil, err
		}
		return &anode{kind: aMap, kids: []*anode{k}}, nil
	case *avro.UnionSchema:
		n := &anode{kind: aUnion}
		nulls := 0
		for _, t := range s.Types() {
			k, err := compileNode(t, named)
			if err != nil {
				return nil, err
			}
			if k.kind == aNull {
				nulls++
			}
			n.kids = append(n.kids, k)
		}
		n.nullable = nulls == 1 && len(n.kids) == 2
		return n, nil
	case *avro.FixedSchema:
		n := &anode{kind: aFixed, size: s.Size()}
		if l, ok := s.Logical().(*avro.DecimalLogicalSchema); ok {
			n.kind, n.scale, n.prec = aDecimalFixed, l.Scale(), l.Precision()
		} else if s.Prop("logicalType") == string(avro.UUID) && s.Size() == 16 {
			// The library keeps uuid on fixed(16) as a property.
			n.kind = aUUIDFixed
		}
		return n, nil
	}
	return nil, fmt.Errorf("unsupported Avro schema %s", s.Type())
}

var errTrailing = errors.New("bytes left after the record: the message does not match its writer schema")

// transcode reads one value of the schema from r and appends it as JSON
// to out.
func (c *avroCodec) transcode(r *avro.Reader, data, out []byte) ([]byte, error) {
	r.Reset(data)
	r.Error = nil // Reset keeps the last message's end of input
	out = appendAvroLimit(r, c.root, out, len(data))
	if r.Error != nil {
		return out, fmt.Errorf("invalid Avro data for its writer schema: %w", r.Error)
	}
	if r.Peek(); r.Error == nil {
		return out, errTrailing
	}
	return out, nil
}

// zeroSize reports whether a value of n can take no bytes (null, an empty
// record): only then may a block count exceed the message's size.
func zeroSize(n *anode) bool {
	switch n.kind {
	case aNull:
		return true
	case aRecord:
		for _, k := range n.kids {
			if !zeroSize(k) {
				return false
			}
		}
		return true
	case aFixed:
		return n.size == 0
	}
	return false
}

// appendAvroLimit is appendAvro in a message of limit bytes.
func appendAvroLimit(r *avro.Reader, n *anode, out []byte, limit int) []byte {
	if r.Error != nil {
		return out
	}
	switch n.kind {
	case aNull:
		return append(out, "null"...)
	case aBool:
		return strconv.AppendBool(out, r.ReadBool())
	case aInt:
		return strconv.AppendInt(out, int64(r.ReadInt()), 10)
	case aLong:
		return strconv.AppendInt(out, r.ReadLong(), 10)
	case aFloat:
		return appendFloat(out, float64(r.ReadFloat()), 32)
	case aDouble:
		return appendFloat(out, r.ReadDouble(), 64)
	case aBytes:
		return appendBase64(out, r.ReadBytes())
	case aString:
		return appendString(out, r.ReadBytes())
	case aRecord:
		out = append(out, '{')
		for i, k := range n.kids {
			if i > 0 {
				out = append(out, ',')
			}
			out = appendString(out, []byte(n.names[i]))
			out = append(out, ':')
			out = appendAvroLimit(r, k, out, limit)
		}
		return append(out, '}')
	case aEnum:
		i := r.ReadInt()
		if i < 0 || int(i) >= len(n.names) {
			r.ReportError("enum", fmt.Sprintf("symbol index %d out of range", i))
			return out
		}
		return appendString(out, []byte(n.names[i]))
	case aArray, aMap:
		open, end := byte('['), byte(']')
		if n.kind == aMap {
			open, end = '{', '}'
		}
		out = append(out, open)
		first := true
		// The library's block callbacks go on through a block's count
		// after an error: a corrupt count would run for ever.
		for r.Error == nil {
			count, _ := r.ReadBlockHeader()
			if count == 0 || r.Error != nil {
				break
			}
			if count > int64(limit) && !zeroSize(n.kids[0]) {
				r.ReportError("block", fmt.Sprintf("a block of %d items in a message of %d bytes", count, limit))
				break
			}
			for ; count > 0 && r.Error == nil; count-- {
				if !first {
					out = append(out, ',')
				}
				first = false
				if n.kind == aMap {
					out = appendString(out, r.ReadBytes())
					out = append(out, ':')
				}
				out = appendAvroLimit(r, n.kids[0], out, limit)
			}
		}
		return append(out, end)
	case aUnion:
		i := r.ReadLong()
		if i < 0 || int(i) >= len(n.kids) {
			r.ReportError("union", fmt.Sprintf("branch index %d out of range", i))
			return out
		}
		return appendAvroLimit(r, n.kids[i], out, limit)
	case aFixed:
		b := make([]byte, n.size)
		r.Read(b)
		return appendBase64(out, b)
	case aDecimalBytes:
		return appendDecimal(out, r.ReadBytes(), n.scale)
	case aDecimalFixed:
		b := make([]byte, n.size)
		r.Read(b)
		return appendDecimal(out, b, n.scale)
	case aVarDecimal:
		scale := r.ReadInt()
		return appendDecimal(out, r.ReadBytes(), int(scale))
	case aDate:
		return appendDate(out, int64(r.ReadInt()))
	case aTimeMillis:
		return appendTimeOfDay(out, int64(r.ReadInt())*1_000_000)
	case aTimeMicros:
		return appendTimeOfDay(out, r.ReadLong()*1000)
	case aTimeNanos:
		return appendTimeOfDay(out, r.ReadLong())
	case aTsMillis:
		return appendTimestamp(out, r.ReadLong(), 1_000_000)
	case aTsMicros:
		return appendTimestamp(out, r.ReadLong(), 1000)
	case aTsNanos:
		return appendTimestamp(out, r.ReadLong(), 1)
	case aUUIDFixed:
		b := make([]byte, 16)
		r.Read(b)
		return appendUUID(out, b)
	}
	r.ReportError("schema", "unknown node")
	return out
}

// appendDecimal writes a two's-complement big-endian unscaled value at
// scale as decimal text, exactly.
func appendDecimal(out, b []byte, scale int) []byte {
	if len(b) > 0 && len(b) <= 8 && scale >= 0 && scale <= 18 {
		// Most decimals fit an int64: no big.Int on the hot path.
		x := int64(int8(b[0]))
		for _, c := range b[1:] {
			x = x<<8 | int64(c)
		}
		return appendScaled(out, x, scale)
	}
	var v big.Int
	v.SetBytes(b)
	if len(b) > 0 && b[0]&0x80 != 0 {
		v.Sub(&v, new(big.Int).Lsh(big.NewInt(1), uint(len(b)*8)))
	}
	return strconv.AppendQuote(out, scaled(&v, scale))
}

// appendScaled writes x·10^-scale as a quoted decimal text.
func appendScaled(out []byte, x int64, scale int) []byte {
	out = append(out, '"')
	if x < 0 {
		out = append(out, '-')
	}
	var digits [24]byte
	d := strconv.AppendUint(digits[:0], absInt64(x), 10)
	if scale == 0 {
		out = append(out, d...)
		return append(out, '"')
	}
	if len(d) <= scale {
		out = append(out, '0', '.')
		for range scale - len(d) {
			out = append(out, '0')
		}
		out = append(out, d...)
		return append(out, '"')
	}
	out = append(out, d[:len(d)-scale]...)
	out = append(out, '.')
	out = append(out, d[len(d)-scale:]...)
	return append(out, '"')
}

func absInt64(x int64) uint64 {
	if x < 0 {
		return uint64(-(x + 1)) + 1
	}
	return uint64(x)
}

// scaled is the text of v·10^-scale.
func scaled(v *big.Int, scale int) string {
	s := v.String()
	if scale <= 0 {
		if v.Sign() == 0 {
			return "0"
		}
		for range -scale {
			s += "0"
		}
		return s
	}
	neg := s[0] == '-'
	if neg {
		s = s[1:]
	}
	for len(s) <= scale {
		s = "0" + s
	}
	s = s[:len(s)-scale] + "." + s[len(s)-scale:]
	if neg {
		s = "-" + s
	}
	return s
}

// avroFields lists the columns a record schema implies (Field), for
// tables typed by their messages.
func avroFields(n *anode, path []string, out []Field, seen map[*anode]bool) []Field {
	if n.kind != aRecord || seen[n] {
		return out
	}
	seen[n] = true
	defer delete(seen, n)
	for i, k := range n.kids {
		p := append(path[:len(path):len(path)], n.names[i])
		if k.kind == aUnion && k.nullable {
			k = k.kids[0]
			if k.kind == aNull {
				k = n.kids[i].kids[1]
			}
		}
		if k.kind == aRecord {
			out = avroFields(k, p, out, seen)
			continue
		}
		if t, ok := avroType(k); ok {
			out = append(out, Field{Path: p, Type: t})
		}
	}
	return out
}

// avroType is the column type of a scalar node.
func avroType(n *anode) (batch.Type, bool) {
	switch n.kind {
	case aBool:
		return batch.Bool, true
	case aInt, aLong:
		return batch.Int64, true
	case aFloat, aDouble:
		return batch.Float64, true
	case aBytes, aFixed:
		return batch.Bytes, true
	case aString, aEnum, aUUIDFixed, aTimeMillis, aTimeMicros, aTimeNanos:
		return batch.String, true
	case aDecimalBytes, aDecimalFixed:
		p := n.prec
		if p <= 0 || p > 38 || n.scale < 0 || n.scale > p {
			return batch.Type{}, false
		}
		return batch.Decimal(p, n.scale), true
	case aDate:
		return batch.Date, true
	case aTsMillis, aTsMicros, aTsNanos:
		return batch.Timestamp, true
	}
	return batch.Type{}, false
}
