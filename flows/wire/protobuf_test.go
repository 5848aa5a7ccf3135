package wire

import (
	"context"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/sluicehq/sluice/flows/batch"
)

const shapes = `syntax = "proto3";
package s;
import "google/protobuf/wrappers.proto";
message A { int64 x = 1; }
message B {
  message C { string name = 1; map<string, int64> counts = 2; google.protobuf.Int64Value maybe = 3; optional bool flag = 4; uint64 big = 5; bytes raw = 6; double d = 7; }
  C c = 1;
}
`

// TestProtobufMessages resolves message indexes to nested types, writes
// maps, wrappers and presence, and refuses fields the writer schema does
// not declare.
func TestProtobufMessages(t *testing.T) {
	fake, reg := newRegistry(t)
	id := register(t, fake, "s", sr.Schema{Schema: shapes, Type: sr.TypeProtobuf})
	d := NewDecoder(reg, Protobuf, nil)
	var h sr.ConfluentHeader
	enc := func(idx []int, payload []byte) []byte {
		b, _ := h.AppendEncode(nil, id, idx)
		return append(b, payload...)
	}
	// B.C (indexes [1, 0]): name "n", counts {"k": 2}, big 2^64-1, raw 0x01.
	var c []byte
	c = protowire.AppendTag(c, 1, protowire.BytesType)
	c = protowire.AppendString(c, "n")
	var entry []byte
	entry = protowire.AppendTag(entry, 1, protowire.BytesType)
	entry = protowire.AppendString(entry, "k")
	entry = protowire.AppendTag(entry, 2, protowire.VarintType)
	entry = protowire.AppendVarint(entry, 2)
	c = protowire.AppendTag(c, 2, protowire.BytesType)
	c = protowire.AppendBytes(c, entry)
	c = protowire.AppendTag(c, 5, protowire.VarintType)
	c = protowire.AppendVarint(c, 1<<64-1)
	c = protowire.AppendTag(c, 6, protowire.BytesType)
	c = protowire.AppendBytes(c, []byte{1})
	got, dl := decodeOne(t, d, enc([]int{1, 0}, c))
	if dl != nil {
		t.Fatalf("dead letter %+v", dl)
	}
	if want := `{"name":"n","counts":{"k":2},"maybe":null,"flag":null,"big":18446744073709551615,"raw":"AQ==","d":0}`; got != want {
		t.Errorf("B.C\n got %s\nwant %s", got, want)
	}
	if got, dl = decodeOne(t, d, enc([]int{0}, protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 5))); dl != nil || got != `{"x":5}` {
		t.Errorf("A: %s %+v", got, dl)
	}
	unknown := protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 1)
	for _, tc := range []struct {
		name, msg string
		value     []byte
	}{
		{"unknown field", "fields its writer schema does not declare", enc([]int{0}, unknown)},
		{"bad index", "name no message", enc([]int{5}, nil)},
		{"bad data", "invalid Protobuf data", enc([]int{0}, []byte{0x0a, 0x05})},
	} {
		if _, dl := decodeOne(t, d, tc.value); dl == nil || dl.Reason != batch.ReasonUndecodable || !strings.Contains(dl.Error, tc.msg) {
			t.Errorf("%s: %+v, want a dead letter saying %q", tc.name, dl, tc.msg)
		}
	}
	res, err := d.Records(context.Background(), []batch.Record{{Value: enc([]int{1, 0}, c)}})
	if err != nil || len(res.Shapes) != 1 {
		t.Fatalf("shapes %v, %v", res.Shapes, err)
	}
	var fields []string
	for _, f := range res.Shapes[0].Fields() {
		fields = append(fields, strings.Join(f.Path, ".")+" "+f.Type.String())
	}
	if got, want := strings.Join(fields, ", "), "name string, maybe int64, flag bool, big int64, raw bytes, d float64"; got != want {
		t.Errorf("fields of B.C %q, want %q", got, want)
	}
}
