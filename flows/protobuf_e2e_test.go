package flows_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bufbuild/protocompile"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/sluicehq/sluice/consumer/devkafka"
)

const commonProto = `syntax = "proto3";
package shop;
message Money { int64 cents = 1; string currency = 2; }
`

const ordersProtoV1 = `syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "shop/common.proto";
enum Status { NEW = 0; PAID = 1; }
message Order {
  message Item { string sku = 1; int64 qty = 2; }
  int64 id = 1;
  string customer = 2;
  google.protobuf.Timestamp at = 3;
  repeated Item items = 4;
  Status status = 5;
  int64 seq = 6;
  Money total = 7;
}
`

// ordersProtoV2 adds a field with presence.
var ordersProtoV2 = strings.Replace(ordersProtoV1, "  Money total = 7;\n", "  Money total = 7;\n  optional string note = 8;\n", 1)

// protoSchema registers a .proto that imports shop/common.proto, and
// compiles it as a producer would.
func protoSchema(t *testing.T, reg *devkafka.Registry, subject, text string) (int, protoreflect.MessageDescriptor) {
	t.Helper()
	if _, err := reg.Register("shop/common.proto", sr.Schema{Schema: commonProto, Type: sr.TypeProtobuf}); err != nil {
		t.Fatal(err)
	}
	id, err := reg.Register(subject, sr.Schema{Schema: text, Type: sr.TypeProtobuf,
		References: []sr.SchemaReference{{Name: "shop/common.proto", Subject: "shop/common.proto", Version: 1}}})
	if err != nil {
		t.Fatalf("register %s: %v", subject, err)
	}
	c := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
		Accessor: protocompile.SourceAccessorFromMap(map[string]string{"orders.proto": text, "shop/common.proto": commonProto}),
	})}
	fds, err := c.Compile(context.Background(), "orders.proto")
	if err != nil {
		t.Fatal(err)
	}
	return id, fds[0].Messages().ByName("Order")
}

// protoOrder encodes an order with the real Protobuf library, in the
// registry's wire format (schema id, message index 0).
func protoOrder(t *testing.T, id int, md protoreflect.MessageDescriptor, oid int64, customer string, seq int64, skus []string, note ...string) []byte {
	t.Helper()
	m := dynamicpb.NewMessage(md)
	f := md.Fields()
	m.Set(f.ByName("id"), protoreflect.ValueOfInt64(oid))
	m.Set(f.ByName("customer"), protoreflect.ValueOfString(customer))
	m.Set(f.ByName("at"), protoreflect.ValueOfMessage(timestamppb.New(time.Date(2026, 3, 1, 12, 0, int(seq), 0, time.UTC)).ProtoReflect()))
	items := m.Mutable(f.ByName("items")).List()
	for i, sku := range skus {
		it := dynamicpb.NewMessage(md.Messages().ByName("Item"))
		it.Set(it.Descriptor().Fields().ByName("sku"), protoreflect.ValueOfString(sku))
		it.Set(it.Descriptor().Fields().ByName("qty"), protoreflect.ValueOfInt64(int64(i+1)))
		items.Append(protoreflect.ValueOfMessage(it))
	}
	m.Set(f.ByName("status"), protoreflect.ValueOfEnum(1))
	m.Set(f.ByName("seq"), protoreflect.ValueOfInt64(seq))
	total := m.Mutable(f.ByName("total")).Message()
	total.Set(total.Descriptor().Fields().ByName("cents"), protoreflect.ValueOfInt64(oid*100))
	total.Set(total.Descriptor().Fields().ByName("currency"), protoreflect.ValueOfString("EUR"))
	if len(note) > 0 {
		m.Set(f.ByName("note"), protoreflect.ValueOfString(note[0]))
	}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var h sr.ConfluentHeader
	out, _ := h.AppendEncode(nil, id, []int{0})
	return append(out, b...)
}

// TestProtobufFlows loads Protobuf messages of a schema registry, with a
// referenced schema, nested messages and a repeated field, into a table
// typed by its messages (with its child table) and into SCD1 and SCD2
// targets, through a new version of the schema mid-stream.
func TestProtobufFlows(t *testing.T) {
	broker := startBroker(t)
	reg := startRegistry(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		topic := "proto_orders_" + dname
		v1, md1 := protoSchema(t, reg, topic+"-value", ordersProtoV1)
		v2, md2 := protoSchema(t, reg, topic+"-value", ordersProtoV2)
		source := `
        topic: ` + topic + `
        format: protobuf
        schema_registry: {url: "` + reg.URL() + `"}`
		declared := source + `
        columns:
          - {name: id, type: int64}
          - {name: customer, type: string}
          - {name: at, type: timestamp}
          - {name: status, type: string}
          - {name: total__cents, type: int64, path: total.cents}
          - {name: note, type: string, nullable: true}
          - {name: seq, type: int64}`
		s := newStepper(t, broker.Addr(), dest(t), `tables:
  - name: orders
  - name: latest
  - name: history
flows:
  - name: orders
    target: orders
    kind: append
    source:
      kafka:`+source+`
  - name: latest
    target: latest
    kind: auto_cdc
    keys: [id]
    sequence_by: seq
    source:
      kafka:`+declared+`
  - name: history
    target: history
    kind: auto_cdc
    stored_as_scd_type: 2
    keys: [id]
    sequence_by: seq
    source:
      kafka:`+declared+`
`)
		s.produceKeyed(topic,
			nil, protoOrder(t, v1, md1, 1, "ann", 1, []string{"a", "b"}),
			nil, protoOrder(t, v1, md1, 2, "bob", 2, nil),
			nil, []byte{0, 0, 0, 0x27, 0x0f, 0, 8, 1}, // schema id 9999
		)
		s.update()
		s.produceKeyed(topic, nil, protoOrder(t, v2, md2, 1, "ann", 3, []string{"c"}, "gift"))
		s.update()
		if got, want := columnsOf(t, s, "orders"), []string{"id int64 nullable", "customer string nullable", "at timestamp nullable",
			"status string nullable", "seq int64 nullable", "total__cents int64 nullable", "total__currency string nullable"}; !hasPrefixColumns(got, want) {
			t.Errorf("orders columns %q, want %q first", got, want)
		}
		if got := columnsOf(t, s, "orders"); !slices.Contains(got, "note string nullable") {
			t.Errorf("orders columns %q lack note, the field version 2 adds", got)
		}
		if got, want := joined(t, s, "orders", "orders__items", "id"), []string{"1[0]: a,1", "1[0]: c,1", "1[1]: b,2"}; !slices.Equal(got, want) {
			t.Errorf("orders__items joined to orders %q, want %q", got, want)
		}
		if got, want := s.rows("latest"), []string{"1,ann,2026-03-01T12:00:03Z,PAID,100,gift,3", "2,bob,2026-03-01T12:00:02Z,PAID,200,∞,2"}; !slices.Equal(got, want) {
			t.Errorf("latest\n got %q\nwant %q", got, want)
		}
		if got, want := s.rows("history"), []string{"1,ann,2026-03-01T12:00:01Z,PAID,100,∞,1,1,3", "1,ann,2026-03-01T12:00:03Z,PAID,100,gift,3,3,∞",
			"2,bob,2026-03-01T12:00:02Z,PAID,200,∞,2,2,∞"}; !slices.Equal(got, want) {
			t.Errorf("history\n got %q\nwant %q", got, want)
		}
		for _, f := range []string{"orders", "latest", "history"} {
			dls := s.deadLetters(f)
			if len(dls) != 1 || !strings.HasPrefix(dls[0], "unknown_schema 0/2 ") {
				t.Errorf("flow %s: dead letters %q, want the message of schema id 9999 as unknown_schema at 0/2", f, dls)
			}
		}
	})
}
