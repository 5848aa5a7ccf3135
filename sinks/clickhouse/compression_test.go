package clickhouse

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
)

func TestCompressionDefault(t *testing.T) {
	for _, c := range []struct {
		addr []string
		want string
	}{
		{nil, CompressionNone}, // 127.0.0.1:9000
		{[]string{"127.0.0.1:9000"}, CompressionNone},
		{[]string{"127.0.0.2:9000", "[::1]:9000", "localhost:9000", "LOCALHOST:9440"}, CompressionNone},
		{[]string{"localhost:9000", "ch.internal:9000"}, CompressionLZ4},
		{[]string{"10.0.0.5:9000"}, CompressionLZ4},
		{[]string{"[2001:db8::1]:9000"}, CompressionLZ4},
	} {
		o := Options{Addr: c.addr}
		o.withDefaults()
		if o.Compression != c.want {
			t.Errorf("addr %v: compression %q, want %q", c.addr, o.Compression, c.want)
		}
		o = Options{Addr: c.addr, Compression: CompressionZSTD}
		if o.withDefaults(); o.Compression != CompressionZSTD {
			t.Errorf("addr %v: a chosen compression became %q", c.addr, o.Compression)
		}
	}
	for method, want := range map[string]*clickhouse.Compression{
		CompressionLZ4:  {Method: clickhouse.CompressionLZ4},
		CompressionZSTD: {Method: clickhouse.CompressionZSTD},
		CompressionNone: nil,
	} {
		got, err := compression(method)
		if err != nil || (got == nil) != (want == nil) || (got != nil && got.Method != want.Method) {
			t.Errorf("compression(%q) = %v, %v; want %v", method, got, err, want)
		}
	}
	if _, err := Open(context.Background(), Options{Compression: "gzip"}); err == nil || !strings.Contains(err.Error(), `compression "gzip"`) {
		t.Errorf("Open with compression gzip: %v, want an error naming it", err)
	}
}

// TestCompressionRoundTrip loads and reads back rows the server receives
// compressed each way: the server must take every method sluice offers.
func TestCompressionRoundTrip(t *testing.T) {
	addr := serverAddr(t)
	schema := batch.Schema{Columns: []batch.Column{{Name: "id", Type: batch.Int64}, {Name: "note", Type: batch.String}}}
	const n = 20000
	for _, method := range []string{CompressionLZ4, CompressionZSTD, CompressionNone} {
		t.Run(method, func(t *testing.T) {
			s := openSink(t, addr, newDatabase(t, addr), func(o *Options) { o.Compression = method })
			ctx := context.Background()
			if err := s.Ensure(ctx, []sinks.Table{{Name: "notes", Schema: schema}}); err != nil {
				t.Fatal(err)
			}
			b := batch.New(schema, n)
			for i := range n {
				b.Vectors[0].AppendInt(int64(i))
				b.Vectors[1].AppendString(fmt.Sprintf("note %d %s", i, strings.Repeat("x", i%50)))
			}
			ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: "load-" + method, Pipeline: "p", Flow: "f", Targets: []string{"notes"}, Generation: 1})
			if err != nil {
				t.Fatal(err)
			}
			if err := ld.Write(ctx, "notes", b); err != nil {
				t.Fatal(err)
			}
			if err := ld.Commit(ctx, sinks.Commit{From: batch.Positions{{Topic: "t", Offset: -1}}, To: batch.Positions{{Topic: "t", Offset: n}}, Rows: n}); err != nil {
				t.Fatal(err)
			}
			got, err := s.Scan(ctx, "notes")
			if err != nil {
				t.Fatal(err)
			}
			if got.Len() != n {
				t.Fatalf("%d rows, want %d", got.Len(), n)
			}
			for i := range n {
				id := got.Column("id").Ints[i]
				if want := fmt.Sprintf("note %d %s", id, strings.Repeat("x", int(id)%50)); got.Column("note").Strs[i] != want {
					t.Fatalf("row %d: note %q, want %q", id, got.Column("note").Strs[i], want)
				}
			}
		})
	}
}
