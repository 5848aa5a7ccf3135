package wire

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/hamba/avro/v2"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Schema is one writer schema of the registry, compiled.
type Schema struct {
	ID    int
	Type  sr.SchemaType
	avro  *avroCodec
	proto *protoCodec
}

// Field is a scalar field of a schema's records: the path of field names
// to it through nested records, and the column type its values take.
type Field struct {
	Path []string
	Type batch.Type
}

// Shape is the type of a message's record: a schema id, and of a
// Protobuf schema the message type the message's indexes name.
type Shape struct {
	Key    string // the schema id, and the Protobuf message's full name
	schema *Schema
	md     protoreflect.MessageDescriptor
}

// Fields lists the scalar fields the shape's records have, through nested
// records (not through lists and maps), with the column type each implies:
// the columns of a table typed by its messages come from them
// (docs/formats.md#tables-typed-by-a-writer-schema).
func (s Shape) Fields() []Field {
	switch {
	case s.schema.avro != nil:
		return avroFields(s.schema.avro.root, nil, nil, map[*anode]bool{})
	case s.md != nil:
		return protoFields(s.md, nil, nil, 0)
	}
	return nil
}

// compile compiles a registry schema; refs are the texts of the schemas it
// references by the names it references them with.
func compile(id int, raw sr.Schema, refs map[string]string) (*Schema, error) {
	s := &Schema{ID: id, Type: raw.Type}
	var err error
	switch raw.Type {
	case sr.TypeAvro:
		s.avro, err = compileAvro(raw.Schema, refs)
	case sr.TypeProtobuf:
		s.proto, err = compileProto(raw.Schema, refs)
	case sr.TypeJSON:
		// JSON Schema: the payload is the JSON text itself.
	default:
		err = fmt.Errorf("unknown schema type %q", raw.Type)
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Format is what a Decoder expects of the messages it reads.
type Format uint8

const (
	// Avro: every value is framed (magic byte 0, the schema id) and its
	// schema is Avro.
	Avro Format = iota + 1
	// Protobuf: every value is framed, with message indexes, and its
	// schema is Protobuf.
	Protobuf
	// Framed: a framed value is decoded by the type its schema has, any
	// other is left as it is (JSON): Debezium topics of either converter.
	Framed
)

func (f Format) String() string {
	switch f {
	case Avro:
		return "avro"
	case Protobuf:
		return "protobuf"
	}
	return "debezium"
}

// ReasonUnknownSchema is the dead-letter reason of a message whose schema
// id the registry does not have.
const ReasonUnknownSchema = "unknown_schema"

// Guard runs op, the fetch of a schema, retrying it while the registry is
// unavailable as the caller's policy says (Classifier tells which errors).
type Guard func(ctx context.Context, what string, op func(context.Context) error) error

// Decoder rewrites messages in the Confluent wire format as the JSON text
// package decode reads. Not safe for concurrent use; the Registry it reads
// is.
type Decoder struct {
	reg    *Registry
	format Format
	guard  Guard
	r      *avro.Reader
	// KeyText makes a framed key whose record is a string (an Avro
	// "string" key schema) its text, unquoted: the source's key_format
	// string names the key column's value by its text.
	KeyText bool
}

// NewDecoder returns a decoder of format f reading schemas from reg; guard
// (nil: none) retries registry outages.
func NewDecoder(reg *Registry, f Format, guard Guard) *Decoder {
	if guard == nil {
		guard = func(ctx context.Context, _ string, op func(context.Context) error) error { return op(ctx) }
	}
	return &Decoder{reg: reg, format: f, guard: guard, r: avro.NewReader(nil, 0, avro.WithReaderConfig(readerConfig))}
}

// readerConfig lifts the library's 1 MiB bound on one string or bytes
// value: the message's own size bounds it.
var readerConfig = avro.Config{MaxByteSliceSize: math.MaxInt32}.Freeze()

// Result is a batch of records rewritten by Records.
type Result struct {
	// Records are the records that decoded, in order: Value (and Key,
	// when framed) as JSON text, Raw the message's own bytes.
	Records []batch.Record
	// DeadLetters are those that did not, with the message's bytes.
	DeadLetters []batch.DeadLetter
	// Shapes are the types of the records' values, each once.
	Shapes []Shape
}

// Records decodes recs. The error is a registry that could not be asked
// (after the guard's retries); a message it cannot decode is a dead
// letter.
func (d *Decoder) Records(ctx context.Context, recs []batch.Record) (Result, error) {
	res := Result{Records: make([]batch.Record, 0, len(recs))}
	size := 0
	for i := range recs {
		size += 3*len(recs[i].Value) + 2*len(recs[i].Key) + 16 // Avro grows about 2.6 times as JSON
	}
	buf := make([]byte, 0, size)
	seen := map[int]*Schema{}
	failed := map[int]error{}
	schema := func(id int) (*Schema, error) {
		if s := seen[id]; s != nil {
			return s, nil
		}
		if err := failed[id]; err != nil {
			return nil, err
		}
		var s *Schema
		err := d.guard(ctx, fmt.Sprintf("fetch schema id %d", id), func(ctx context.Context) error {
			var err error
			s, err = d.reg.Schema(ctx, id)
			return err
		})
		if err != nil {
			failed[id] = err
			return nil, err
		}
		seen[id] = s
		return s, nil
	}
	for i := range recs {
		rec := recs[i]
		out := rec
		var err error
		start := len(buf)
		if rec.Value != nil && (d.format != Framed || framed(rec.Value)) {
			var sh Shape
			buf, sh, err = d.value(rec.Value, buf, schema)
			if err == nil {
				out.Value, out.Raw = buf[start:len(buf):len(buf)], rec.Value
				if !slices.ContainsFunc(res.Shapes, func(x Shape) bool { return x.Key == sh.Key }) {
					res.Shapes = append(res.Shapes, sh)
				}
			}
		}
		if err == nil && framed(rec.Key) {
			// A key that looks framed may be none (a long key of the
			// Kafka serializer starts with 0 too): one that does not decode
			// stays as it is, for what needs the key to judge.
			start = len(buf)
			var kerr error
			if buf, _, kerr = d.decode(rec.Key, buf, schema, true); kerr == nil {
				out.Key = buf[start:len(buf):len(buf)]
				if d.KeyText && len(out.Key) > 0 && out.Key[0] == '"' {
					var text string
					if json.Unmarshal(out.Key, &text) == nil {
						out.Key = []byte(text)
					}
				}
			} else if !isRecordError(kerr) {
				err = kerr // the registry could not be asked
			} else {
				buf = buf[:start]
			}
		}
		if err != nil {
			if !isRecordError(err) {
				return Result{}, err
			}
			res.DeadLetters = append(res.DeadLetters, deadLetter(&rec, err))
			buf = buf[:start]
			continue
		}
		res.Records = append(res.Records, out)
	}
	return res, nil
}

// recordError is a message that does not decode: a dead letter.
type recordError struct {
	reason string
	err    error
}

func (e *recordError) Error() string { return e.err.Error() }
func (e *recordError) Unwrap() error { return e.err }

func undecodable(format string, a ...any) error {
	return &recordError{reason: batch.ReasonUndecodable, err: fmt.Errorf(format, a...)}
}

// isRecordError reports whether err is the fault of one message rather
// than of the registry.
func isRecordError(err error) bool {
	var re *recordError
	var se *SchemaError
	return errors.As(err, &re) || errors.As(err, &se) || errors.Is(err, ErrUnknownSchema)
}

func deadLetter(rec *batch.Record, err error) batch.DeadLetter {
	d := batch.DeadLetter{Source: rec.Topic, Position: rec.Position(), Reason: batch.ReasonUndecodable, Error: err.Error(), Payload: rec.Payload()}
	var re *recordError
	if errors.Is(err, ErrUnknownSchema) {
		d.Reason = ReasonUnknownSchema
	} else if errors.As(err, &re) {
		d.Reason = re.reason
	}
	return d
}

// framed reports whether b starts as the Confluent wire format does.
func framed(b []byte) bool { return len(b) >= 5 && b[0] == 0 }

// value decodes a message value under the decoder's format.
func (d *Decoder) value(v, out []byte, schema func(int) (*Schema, error)) ([]byte, Shape, error) {
	if !framed(v) {
		return out, Shape{}, undecodable("the message is not in the Schema Registry wire format (a 0 byte, then a 4-byte schema id), as format %s reads", d.format)
	}
	return d.decode(v, out, schema, false)
}

// decode decodes one framed message (a value, or a key when key).
func (d *Decoder) decode(b, out []byte, schema func(int) (*Schema, error), key bool) ([]byte, Shape, error) {
	id := int(binary.BigEndian.Uint32(b[1:5]))
	s, err := schema(id)
	if err != nil {
		return out, Shape{}, err
	}
	sh := Shape{Key: strconv.Itoa(id), schema: s}
	payload := b[5:]
	switch {
	case !key && d.format == Avro && s.Type != sr.TypeAvro, !key && d.format == Protobuf && s.Type != sr.TypeProtobuf:
		return out, sh, undecodable("schema id %d is %s, and the flow reads format %s", id, typeName(s.Type), d.format)
	}
	switch s.Type {
	case sr.TypeAvro:
		out, err = s.avro.transcode(d.r, payload, out)
	case sr.TypeProtobuf:
		out, sh.md, err = s.proto.transcode(payload, out)
		if sh.md != nil {
			sh.Key += ":" + string(sh.md.FullName())
		}
	default:
		out = append(out, payload...)
	}
	if err != nil {
		var re *recordError
		if !errors.As(err, &re) {
			err = undecodable("schema id %d: %v", id, err)
		}
		return out, sh, err
	}
	return out, sh, nil
}

func typeName(t sr.SchemaType) string {
	switch t {
	case sr.TypeAvro:
		return "Avro"
	case sr.TypeProtobuf:
		return "Protobuf"
	}
	return "JSON Schema"
}
