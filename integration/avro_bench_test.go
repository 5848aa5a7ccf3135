package integration

import (
	"context"
	enc "encoding/binary"
	"encoding/json"
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/sluicehq/sluice/consumer"
	"github.com/sluicehq/sluice/consumer/devkafka"
	"github.com/sluicehq/sluice/flows/sample"
)

// avroBenchSpec loads a topic of orders into the demo's orders table:
// %s the broker, the destination, the topic and its format lines.
const avroBenchSpec = `pipeline: demo
kafka:
  brokers: [%s]
destination: %s
tables:
  - name: orders
    columns:
      - {name: order_id, type: int64}
      - {name: customer_id, type: string}
      - {name: amount, type: "decimal(12,2)"}
      - {name: currency, type: string}
      - {name: status, type: string}
      - {name: items, type: int64}
      - {name: country, type: string, nullable: true}
      - {name: created_at, type: timestamp}
      - {name: channel, type: string}
      - {name: note, type: string}
flows:
  - name: orders_stream
    target: orders
    kind: append
    source: {kafka: {topic: %s%s}}
`

// ordersAvro is the writer schema of the Avro orders: the demo's fields,
// with their logical types.
const ordersAvro = `{"type":"record","name":"Order","namespace":"demo","fields":[
 {"name":"order_id","type":"long"},
 {"name":"customer_id","type":"string"},
 {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":12,"scale":2}},
 {"name":"currency","type":"string"},
 {"name":"status","type":"string"},
 {"name":"items","type":"long"},
 {"name":"country","type":["null","string"]},
 {"name":"created_at","type":{"type":"long","logicalType":"timestamp-micros"}},
 {"name":"channel","type":"string"},
 {"name":"note","type":"string"}]}`

// avroOrders returns n sample orders as JSON and the same orders in Avro
// (the registry's wire format, schema id), spread over benchPartitions
// partitions.
func avroOrders(b *testing.B, n, id int) (js, av []consumer.Message) {
	s, err := avro.Parse(ordersAvro)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	js, av = make([]consumer.Message, n), make([]consumer.Message, n)
	hdr := enc.BigEndian.AppendUint32([]byte{0}, uint32(id))
	for i := range js {
		v := sample.Order(rng, i)
		js[i] = consumer.Message{Key: []byte(strconv.Itoa(i)), Value: v, Partition: int32(i % benchPartitions)}
		var o map[string]any
		if err := json.Unmarshal(v, &o); err != nil {
			b.Fatal(err)
		}
		amount, _ := new(big.Rat).SetString(o["amount"].(string))
		at, err := time.Parse(time.RFC3339Nano, o["created_at"].(string))
		if err != nil {
			b.Fatal(err)
		}
		o["amount"], o["created_at"] = amount, at
		o["order_id"], o["items"] = int64(o["order_id"].(float64)), int64(o["items"].(float64))
		if c, ok := o["country"].(string); ok {
			o["country"] = map[string]any{"string": c}
		}
		body, err := avro.Marshal(s, o)
		if err != nil {
			b.Fatal(err)
		}
		av[i] = consumer.Message{Key: js[i].Key, Value: append(slices.Clone(hdr), body...), Partition: js[i].Partition}
	}
	return js, av
}

// BenchmarkAvroLocal measures Avro orders of a schema registry (decoded
// and loaded into the demo's declared orders table) against the same
// orders in JSON, in the same run, in orders per second, into the local
// destination. Run it with -benchtime 1x (make bench does).
func BenchmarkAvroLocal(b *testing.B) { benchAvro(b, "local") }

// BenchmarkAvroClickHouse is BenchmarkAvroLocal into ClickHouse.
func BenchmarkAvroClickHouse(b *testing.B) { benchAvro(b, "clickhouse") }

func benchAvro(b *testing.B, kind string) {
	addr := ""
	if kind == "clickhouse" {
		addr = clickHouseAddr(b)
	}
	reg, err := devkafka.StartRegistry("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer reg.Close()
	id, err := reg.Register("avro-value", sr.Schema{Schema: ordersAvro, Type: sr.TypeAvro})
	if err != nil {
		b.Fatal(err)
	}
	n := benchMessages() / 5
	broker := startBroker(b, map[string]int32{"json": benchPartitions, "avro": benchPartitions})
	js, av := avroOrders(b, n, id)
	jsBytes, avBytes := 0, 0
	for i := range js {
		jsBytes, avBytes = jsBytes+len(js[i].Value), avBytes+len(av[i].Value)
	}
	produceMsgs(b, broker.Addr(), "json", js)
	produceMsgs(b, broker.Addr(), "avro", av)
	js, av = nil, nil
	ctx := context.Background()
	run := func(topic string) time.Duration {
		dest := "{local: {path: ./data}}"
		if kind == "clickhouse" {
			dest = newClickHouseDest(b, addr).yaml()
		}
		format := ""
		if topic == "avro" {
			format = `, format: avro, schema_registry: {url: "` + reg.URL() + `"}`
		}
		took, _ := loadTopic(ctx, b, fmt.Sprintf(avroBenchSpec, broker.Addr(), dest, topic, format), n)
		return took
	}
	for b.Loop() {
		run("json") // a process's first run is slower, whatever it runs
		var jsRuns, avRuns []time.Duration
		for range inferenceRounds {
			jsRuns = append(jsRuns, run("json"))
			avRuns = append(avRuns, run("avro"))
		}
		slices.Sort(jsRuns)
		slices.Sort(avRuns)
		jr := float64(n) / jsRuns[len(jsRuns)/2].Seconds()
		ar := float64(n) / avRuns[len(avRuns)/2].Seconds()
		b.ReportMetric(jr, "json_orders/s")
		b.ReportMetric(ar, "avro_orders/s")
		b.ReportMetric(ar/jr, "ratio")
		fmt.Printf("into %s, %d orders: json %.0f orders/s (%d bytes each, %v); avro %.0f orders/s (%d bytes each, %v); ratio %.2f\n",
			kind, n, jr, jsBytes/n, roundAll(jsRuns), ar, avBytes/n, roundAll(avRuns), ar/jr)
	}
}
