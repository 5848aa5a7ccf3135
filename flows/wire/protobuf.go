package wire

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/bufbuild/protocompile"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// protoCodec is the compiled .proto file of one schema id.
type protoCodec struct {
	file protoreflect.FileDescriptor
	msgs sync.Map // message indexes as text -> protoreflect.MessageDescriptor
}

// writerFile is the name the schema's own file is compiled under; the
// files it imports go by the names of its references.
const writerFile = "sluice-writer-schema.proto"

func compileProto(text string, refs map[string]string) (*protoCodec, error) {
	files := map[string]string{writerFile: text}
	maps.Copy(files, refs)
	c := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
		Accessor: protocompile.SourceAccessorFromMap(files),
	})}
	fds, err := c.Compile(context.Background(), writerFile)
	if err != nil {
		return nil, fmt.Errorf("invalid Protobuf schema: %w", err)
	}
	if fds[0].Messages().Len() == 0 {
		return nil, fmt.Errorf("the Protobuf schema declares no message")
	}
	return &protoCodec{file: fds[0]}, nil
}

// message resolves the message indexes of the wire format to the
// message type they name.
func (c *protoCodec) message(idx []int) (protoreflect.MessageDescriptor, error) {
	key := fmt.Sprint(idx)
	if md, ok := c.msgs.Load(key); ok {
		return md.(protoreflect.MessageDescriptor), nil
	}
	msgs := c.file.Messages()
	var md protoreflect.MessageDescriptor
	for _, i := range idx {
		if i < 0 || i >= msgs.Len() {
			return nil, undecodable("message indexes %v name no message of the schema", idx)
		}
		md = msgs.Get(i)
		msgs = md.Messages()
	}
	c.msgs.Store(key, md)
	return md, nil
}

var confluent sr.ConfluentHeader

// transcode reads the message indexes and the message, and appends it as
// JSON.
func (c *protoCodec) transcode(b, out []byte) ([]byte, protoreflect.MessageDescriptor, error) {
	idx, payload, err := confluent.DecodeIndex(b, 64)
	if err != nil {
		return out, nil, undecodable("invalid Protobuf message indexes: %v", err)
	}
	md, err := c.message(idx)
	if err != nil {
		return out, nil, err
	}
	m := dynamicpb.NewMessage(md)
	if err := proto.Unmarshal(payload, m); err != nil {
		return out, nil, undecodable("invalid Protobuf data for message %s: %v", md.FullName(), err)
	}
	if err := unknownFields(m); err != nil {
		return out, nil, err
	}
	return appendProto(out, m), md, nil
}

// unknownFields refuses a message with fields its writer schema does not
// declare: they would be lost.
func unknownFields(m protoreflect.Message) error {
	if len(m.GetUnknown()) > 0 {
		return undecodable("message %s has fields its writer schema does not declare", m.Descriptor().FullName())
	}
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind {
			return true
		}
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len() && err == nil; i++ {
				err = unknownFields(l.Get(i).Message())
			}
		case fd.IsMap():
			if fd.MapValue().Kind() == protoreflect.MessageKind {
				v.Map().Range(func(_ protoreflect.MapKey, v protoreflect.Value) bool {
					err = unknownFields(v.Message())
					return err == nil
				})
			}
		default:
			err = unknownFields(v.Message())
		}
		return err == nil
	})
	return err
}

// appendProto writes a message as a JSON object of its fields by their
// names in the schema. A field without presence (a proto3 scalar) has its
// default value when unset, as the wire format cannot tell; one with
// presence is null when unset.
func appendProto(out []byte, m protoreflect.Message) []byte {
	md := m.Descriptor()
	if wk, ok := appendWellKnown(out, m); ok {
		return wk
	}
	out = append(out, '{')
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if i > 0 {
			out = append(out, ',')
		}
		out = appendString(out, []byte(fd.Name()))
		out = append(out, ':')
		switch {
		case fd.IsList():
			l := m.Get(fd).List()
			out = append(out, '[')
			for j := 0; j < l.Len(); j++ {
				if j > 0 {
					out = append(out, ',')
				}
				out = appendProtoValue(out, fd, l.Get(j))
			}
			out = append(out, ']')
		case fd.IsMap():
			out = append(out, '{')
			first := true
			m.Get(fd).Map().Range(func(k protoreflect.MapKey, v protoreflect.Value) bool {
				if !first {
					out = append(out, ',')
				}
				first = false
				out = appendString(out, []byte(k.String()))
				out = append(out, ':')
				out = appendProtoValue(out, fd.MapValue(), v)
				return true
			})
			out = append(out, '}')
		case fd.HasPresence() && !m.Has(fd):
			out = append(out, "null"...)
		default:
			out = appendProtoValue(out, fd, m.Get(fd))
		}
	}
	return append(out, '}')
}

func appendProtoValue(out []byte, fd protoreflect.FieldDescriptor, v protoreflect.Value) []byte {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return strconv.AppendBool(out, v.Bool())
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return appendString(out, []byte(ev.Name()))
		}
		return strconv.AppendInt(out, int64(v.Enum()), 10)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return strconv.AppendInt(out, v.Int(), 10)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return strconv.AppendUint(out, v.Uint(), 10)
	case protoreflect.FloatKind:
		return appendFloat(out, v.Float(), 32)
	case protoreflect.DoubleKind:
		return appendFloat(out, v.Float(), 64)
	case protoreflect.StringKind:
		return appendString(out, []byte(v.String()))
	case protoreflect.BytesKind:
		return appendBase64(out, v.Bytes())
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return appendProto(out, v.Message())
	}
	return append(out, "null"...)
}

// appendWellKnown writes the well-known types as the values they stand
// for: Timestamp as an RFC 3339 timestamp, the wrappers as their value,
// Struct, Value and ListValue as the JSON they hold, Duration as seconds
// text ("1.5s").
func appendWellKnown(out []byte, m protoreflect.Message) ([]byte, bool) {
	md := m.Descriptor()
	switch md.FullName() {
	case "google.protobuf.Timestamp":
		f := md.Fields()
		secs, nanos := m.Get(f.ByName("seconds")).Int(), m.Get(f.ByName("nanos")).Int()
		out = append(out, '"')
		out = time.Unix(secs, nanos).UTC().AppendFormat(out, time.RFC3339Nano)
		return append(out, '"'), true
	case "google.protobuf.DoubleValue", "google.protobuf.FloatValue", "google.protobuf.Int64Value",
		"google.protobuf.UInt64Value", "google.protobuf.Int32Value", "google.protobuf.UInt32Value",
		"google.protobuf.BoolValue", "google.protobuf.StringValue", "google.protobuf.BytesValue":
		fd := md.Fields().ByName("value")
		return appendProtoValue(out, fd, m.Get(fd)), true
	case "google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue", "google.protobuf.Duration":
		b, err := protojson.Marshal(m.Interface())
		if err != nil {
			return append(out, "null"...), true
		}
		return append(out, b...), true
	}
	return out, false
}

// protoFields lists the scalar fields of a message type (Field).
func protoFields(md protoreflect.MessageDescriptor, path []string, out []Field, depth int) []Field {
	if depth > 32 {
		return out
	}
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if fd.IsList() || fd.IsMap() {
			continue
		}
		p := append(path[:len(path):len(path)], string(fd.Name()))
		if t, ok := protoType(fd); ok {
			out = append(out, Field{Path: p, Type: t})
		} else if fd.Kind() == protoreflect.MessageKind {
			out = protoFields(fd.Message(), p, out, depth+1)
		}
	}
	return out
}

// protoType is the column type of a scalar field (a well-known scalar
// message included).
func protoType(fd protoreflect.FieldDescriptor) (batch.Type, bool) {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return batch.Bool, true
	case protoreflect.EnumKind, protoreflect.StringKind:
		return batch.String, true
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return batch.Int64, true
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		return batch.Float64, true
	case protoreflect.BytesKind:
		return batch.Bytes, true
	case protoreflect.MessageKind:
		switch fd.Message().FullName() {
		case "google.protobuf.Timestamp":
			return batch.Timestamp, true
		case "google.protobuf.DoubleValue", "google.protobuf.FloatValue":
			return batch.Float64, true
		case "google.protobuf.Int64Value", "google.protobuf.UInt64Value", "google.protobuf.Int32Value", "google.protobuf.UInt32Value":
			return batch.Int64, true
		case "google.protobuf.BoolValue":
			return batch.Bool, true
		case "google.protobuf.StringValue", "google.protobuf.Duration":
			return batch.String, true
		case "google.protobuf.BytesValue":
			return batch.Bytes, true
		}
	}
	return batch.Type{}, false
}
