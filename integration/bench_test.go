package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/sluicehq/sluice/consumer"
	"github.com/sluicehq/sluice/flows/sample"
)

// benchMessages is the size of the benchmark's topic; SLUICE_BENCH_MESSAGES
// overrides it.
func benchMessages() int {
	if v, err := strconv.Atoi(os.Getenv("SLUICE_BENCH_MESSAGES")); err == nil && v > 0 {
		return v
	}
	return 1_000_000
}

// benchPartitions is the partition count of the benchmarks' orders topic.
const benchPartitions = 4

// orderMessages returns n sample orders (about 200 bytes each), spread
// round-robin over the partitions so that order i lands in partition
// i%benchPartitions at offset i/benchPartitions, and their total size.
func orderMessages(n int) ([]consumer.Message, int64) {
	rng := rand.New(rand.NewPCG(1, 2))
	msgs := make([]consumer.Message, n)
	var size int64
	for i := range msgs {
		v := sample.Order(rng, i)
		size += int64(len(v))
		msgs[i] = consumer.Message{Key: []byte(strconv.Itoa(i)), Value: v, Partition: int32(i % benchPartitions)}
	}
	return msgs, size
}

// BenchmarkAppendLocal measures sluice's append throughput from the broker
// into the local destination against a consume-only baseline (sarama reading
// the same topic and discarding) measured in the same run, and reports the
// ratio. Run it with -benchtime 1x (make bench does).
func BenchmarkAppendLocal(b *testing.B) {
	n := benchMessages()
	broker := startBroker(b, map[string]int32{"orders": benchPartitions})
	msgs, size := orderMessages(n)
	produceMsgs(b, broker.Addr(), "orders", msgs)
	msgs = nil
	ctx := context.Background()

	for b.Loop() {
		start := time.Now()
		recs, bytes, err := consumer.ConsumeOnly(ctx, []string{broker.Addr()}, "orders")
		if err != nil {
			b.Fatal(err)
		}
		base := time.Since(start)
		if recs != int64(n) {
			b.Fatalf("consume-only read %d records, want %d", recs, n)
		}

		took, _ := loadTopic(ctx, b, fmt.Sprintf(sample.Spec, broker.Addr(), "./data"), n)

		baseRate, rate := float64(n)/base.Seconds(), float64(n)/took.Seconds()
		b.ReportMetric(baseRate, "consume_only_msgs/s")
		b.ReportMetric(rate, "sluice_msgs/s")
		b.ReportMetric(float64(size)/1e6/took.Seconds(), "sluice_MB/s")
		b.ReportMetric(rate/baseRate, "ratio")
		fmt.Printf("append into local, %d messages (%.0f bytes each): consume-only %.0f msg/s (%.1f MB/s, %s); sluice %.0f msg/s (%.1f MB/s, %s); ratio %.2f\n",
			n, float64(size)/float64(n), baseRate, float64(bytes)/1e6/base.Seconds(), base.Round(time.Millisecond),
			rate, float64(size)/1e6/took.Seconds(), took.Round(time.Millisecond), rate/baseRate)
	}
}

// BenchmarkAppendClickHouse measures, on one broker and one server with the
// same orders, sluice's append throughput into ClickHouse against two
// references: a raw clickhouse-go columnar insert of the same rows (decoded
// beforehand, in batches of 100k rows), and ClickHouse's own Kafka table
// engine feeding a MergeTree table through a materialized view, with its
// default single consumer and with two. The Kafka engine's rows and
// duplicates are counted (count() against uniqExact(order_id)). Run it with
// -benchtime 1x (make bench does) and SLUICE_CLICKHOUSE_ADDR set.
func BenchmarkAppendClickHouse(b *testing.B) {
	addr := clickHouseAddr(b)
	n := benchMessages()
	broker := startBroker(b, map[string]int32{"orders": benchPartitions})
	msgs, size := orderMessages(n)
	produceMsgs(b, broker.Addr(), "orders", msgs)
	cols := decodeOrders(b, msgs)
	msgs = nil
	ctx := context.Background()
	mb := float64(size) / 1e6

	for b.Loop() {
		d := newClickHouseDest(b, addr)

		// sluice: the demo's pipeline with a ClickHouse destination.
		took := sluiceIntoClickHouse(ctx, b, d, broker.Addr())
		checkOrders(b, d, "orders", n)
		var loads uint64
		d.queryRow(b, []any{&loads}, "SELECT count() FROM "+d.db+"._sluice_loads")

		// The same rows inserted by clickhouse-go alone, into a table like
		// sluice's.
		rawTook := rawInsert(ctx, b, d, cols)
		checkOrders(b, d, "orders_raw", n)

		// ClickHouse consuming the topic itself.
		one := kafkaEngine(ctx, b, d, broker.Addr(), 1)
		two := kafkaEngine(ctx, b, d, broker.Addr(), 2)

		rate, rawRate := float64(n)/took.Seconds(), float64(n)/rawTook.Seconds()
		b.ReportMetric(rate, "sluice_msgs/s")
		b.ReportMetric(mb/took.Seconds(), "sluice_MB/s")
		b.ReportMetric(rawRate, "raw_insert_rows/s")
		b.ReportMetric(rate/rawRate, "ratio_vs_raw")
		fmt.Printf("append into clickhouse, %d messages (%.0f bytes each): sluice %.0f msg/s (%.1f MB/s, %s, %d loads); raw columnar insert %.0f rows/s (%s); sluice/raw %.2f\n",
			n, float64(size)/float64(n), rate, mb/took.Seconds(), took.Round(time.Millisecond), loads,
			rawRate, rawTook.Round(time.Millisecond), rate/rawRate)
		for _, k := range []kafkaResult{one, two} {
			unit := fmt.Sprintf("kafka_engine_%dc", k.consumers)
			if k.rows == 0 {
				b.Errorf("the Kafka engine with %d consumer(s) loaded no rows within %s: see the server's log", k.consumers, k.took)
				continue
			}
			// The rate counts each order once: duplicates are no progress.
			kRate := float64(k.distinct) / k.took.Seconds()
			b.ReportMetric(kRate, unit+"_distinct_rows/s")
			b.ReportMetric(float64(k.rows-k.distinct), unit+"_duplicates")
			b.ReportMetric(rate/kRate, "ratio_vs_"+unit)
			fmt.Printf("  kafka engine, %d consumer(s): %d rows (%d distinct, %d duplicates, %d missing) in %s (first rows after %s): %.0f distinct rows/s (%.1f MB/s); sluice/engine %.2f\n",
				k.consumers, k.rows, k.distinct, k.rows-k.distinct, int64(n)-k.distinct, k.took.Round(time.Millisecond), k.first.Round(time.Millisecond),
				kRate, mb*float64(k.distinct)/float64(n)/k.took.Seconds(), rate/kRate)
		}
	}
}

// sluiceIntoClickHouse runs the demo's pipeline, with the destination d, as
// an update in this process and returns how long it took.
func sluiceIntoClickHouse(ctx context.Context, b *testing.B, d *clickHouseDest, brokerAddr string) time.Duration {
	b.Helper()
	const local = "local: {path: %s}"
	if !strings.Contains(sample.Spec, local) {
		b.Fatalf("the demo's spec has no %q to replace:\n%s", local, sample.Spec)
	}
	text := fmt.Sprintf(strings.Replace(sample.Spec, local, "clickhouse: {addr: [%s], database: %s}", 1), brokerAddr, d.addr, d.db)
	took, sink := runUpdate(ctx, b, text)
	sink.Close()
	return took
}

// checkOrders fails unless the table holds order ids 1..n, once each.
func checkOrders(b *testing.B, d *clickHouseDest, table string, n int) {
	b.Helper()
	var rows, distinct uint64
	var lo, hi int64
	d.queryRow(b, []any{&rows, &distinct, &lo, &hi}, fmt.Sprintf("SELECT count(), uniqExact(order_id), min(order_id), max(order_id) FROM %s.%s", d.db, table))
	if rows != uint64(n) || distinct != uint64(n) || lo != 1 || hi != int64(n) {
		b.Fatalf("%s: %d rows, %d distinct order ids from %d to %d; want 1 to %d once each", table, rows, distinct, lo, hi, n)
	}
}

// orderColumns are the orders decoded into the columns of sluice's orders
// table, as clickhouse-go appends them.
type orderColumns struct {
	orderID, items, partition, offset []int64
	customer, currency, status        []string
	amount                            []decimal.Decimal
	country                           []*string
	createdAt                         []time.Time
}

func decodeOrders(b *testing.B, msgs []consumer.Message) *orderColumns {
	b.Helper()
	c := &orderColumns{}
	for i, m := range msgs {
		var o struct {
			OrderID    int64   `json:"order_id"`
			CustomerID string  `json:"customer_id"`
			Amount     string  `json:"amount"`
			Currency   string  `json:"currency"`
			Status     string  `json:"status"`
			Items      int64   `json:"items"`
			Country    *string `json:"country"`
			CreatedAt  string  `json:"created_at"`
		}
		if err := json.Unmarshal(m.Value, &o); err != nil {
			b.Fatalf("order %d: %v", i, err)
		}
		amount, err := decimal.NewFromString(o.Amount)
		if err != nil {
			b.Fatalf("order %d: %v", i, err)
		}
		at, err := time.Parse(time.RFC3339Nano, o.CreatedAt)
		if err != nil {
			b.Fatalf("order %d: %v", i, err)
		}
		c.orderID = append(c.orderID, o.OrderID)
		c.customer = append(c.customer, o.CustomerID)
		c.amount = append(c.amount, amount)
		c.currency = append(c.currency, o.Currency)
		c.status = append(c.status, o.Status)
		c.items = append(c.items, o.Items)
		c.country = append(c.country, o.Country)
		c.createdAt = append(c.createdAt, at)
		c.partition = append(c.partition, int64(m.Partition))
		c.offset = append(c.offset, int64(i/benchPartitions))
	}
	return c
}

// rawInsert creates orders_raw like sluice's orders table and inserts the
// rows with clickhouse-go's columnar batches of 100k rows; it returns the
// time of the inserts.
func rawInsert(ctx context.Context, b *testing.B, d *clickHouseDest, c *orderColumns) time.Duration {
	b.Helper()
	if err := d.conn.Exec(ctx, fmt.Sprintf("CREATE TABLE %s.orders_raw AS %s.orders", d.db, d.db)); err != nil {
		b.Fatal(err)
	}
	const batchRows = 100_000
	n := len(c.orderID)
	loadIDs := make([]string, batchRows)
	// A timestamp is what sluice's table holds: DateTime64, or on servers
	// without it Int64 microseconds (docs/clickhouse.md, "Column types").
	var tsType string
	d.queryRow(b, []any{&tsType}, fmt.Sprintf("SELECT type FROM system.columns WHERE database = '%s' AND table = 'orders_raw' AND name = 'created_at'", d.db))
	var createdAt any = c.createdAt
	if tsType == "Int64" {
		us := make([]int64, n)
		for i, t := range c.createdAt {
			us[i] = t.UnixMicro()
		}
		createdAt = us
	}
	start := time.Now()
	for lo := 0; lo < n; lo += batchRows {
		hi := min(lo+batchRows, n)
		for i := range loadIDs[:hi-lo] {
			loadIDs[i] = "raw-" + strconv.Itoa(lo/batchRows)
		}
		bt, err := d.conn.PrepareBatch(ctx, fmt.Sprintf("INSERT INTO %s.orders_raw (order_id, customer_id, amount, currency, status, items, country, created_at, _kafka_partition, _kafka_offset, _sluice_load_id)", d.db))
		if err != nil {
			b.Fatal(err)
		}
		for i, col := range []any{c.orderID[lo:hi], c.customer[lo:hi], c.amount[lo:hi], c.currency[lo:hi], c.status[lo:hi],
			c.items[lo:hi], c.country[lo:hi], sliceOf(createdAt, lo, hi), c.partition[lo:hi], c.offset[lo:hi], loadIDs[:hi-lo]} {
			if err := bt.Column(i).Append(col); err != nil {
				b.Fatalf("column %d: %v", i, err)
			}
		}
		if err := bt.Send(); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start)
}

// sliceOf returns v[lo:hi] of a []time.Time or []int64.
func sliceOf(v any, lo, hi int) any {
	switch v := v.(type) {
	case []time.Time:
		return v[lo:hi]
	case []int64:
		return v[lo:hi]
	}
	panic(fmt.Sprintf("sliceOf %T", v))
}

// kafkaResult is what ClickHouse's Kafka engine loaded.
type kafkaResult struct {
	consumers      int
	rows, distinct int64
	first, took    time.Duration // to the first row seen, to the last growth
}

// kafkaEngine has ClickHouse consume the orders topic with its Kafka table
// engine (a fresh consumer group reading from the start) and a materialized
// view into a MergeTree table like sluice's, and waits until the table stops
// growing. took runs from the view's creation to the last growth seen.
// 18.16's Kafka engine has no _partition and _offset virtual columns, so the
// view writes 0 into _kafka_partition and _kafka_offset.
func kafkaEngine(ctx context.Context, b *testing.B, d *clickHouseDest, brokerAddr string, consumers int) kafkaResult {
	b.Helper()
	target := fmt.Sprintf("%s.orders_kafka_%dc", d.db, consumers)
	queue := fmt.Sprintf("%s.orders_queue_%dc", d.db, consumers)
	view := fmt.Sprintf("%s.orders_view_%dc", d.db, consumers)
	for _, q := range []string{
		fmt.Sprintf("CREATE TABLE %s AS %s.orders", target, d.db),
		fmt.Sprintf(`CREATE TABLE %s (
	order_id Int64, customer_id String, amount String, currency String, status String, items Int64,
	country Nullable(String), created_at String, channel String, note String
) ENGINE = Kafka SETTINGS kafka_broker_list = '%s', kafka_topic_list = 'orders',
	kafka_group_name = '%s_%dc', kafka_format = 'JSONEachRow', kafka_num_consumers = %d`,
			queue, brokerAddr, d.db, consumers, consumers),
	} {
		if err := d.conn.Exec(ctx, q); err != nil {
			b.Fatalf("%s: %v", q, err)
		}
	}
	// created_at as sluice's table holds it: DateTime64, or Int64
	// microseconds on a server without it (whole seconds here: 18.16 parses
	// no fraction).
	createdAt := "parseDateTimeBestEffort(created_at)"
	var tsType string
	d.queryRow(b, []any{&tsType}, fmt.Sprintf("SELECT type FROM system.columns WHERE database = '%s' AND table = 'orders' AND name = 'created_at'", d.db))
	if tsType == "Int64" {
		createdAt = "toInt64(toUnixTimestamp(parseDateTimeBestEffort(created_at))) * 1000000"
	}
	start := time.Now()
	mv := fmt.Sprintf(`CREATE MATERIALIZED VIEW %s TO %s AS SELECT
	order_id, customer_id, CAST(amount AS Decimal(12, 2)) AS amount, currency, status, items, country,
	%s AS created_at, toInt64(0) AS _kafka_partition, toInt64(0) AS _kafka_offset,
	'' AS _sluice_load_id
FROM %s`, view, target, createdAt, queue)
	if err := d.conn.Exec(ctx, mv); err != nil {
		b.Fatalf("%s: %v", mv, err)
	}

	// Poll until the count has not grown for quiet (the engine flushes
	// every 7.5 s by default when its blocks do not fill), or the limit.
	const quiet, limit = 10 * time.Second, 10 * time.Minute
	var rows uint64
	var first time.Duration
	lastGrowth := start
	for time.Since(start) < limit {
		time.Sleep(100 * time.Millisecond)
		var now uint64
		d.queryRow(b, []any{&now}, "SELECT count() FROM "+target)
		if now != rows {
			if rows == 0 {
				first = time.Since(start)
			}
			rows, lastGrowth = now, time.Now()
			continue
		}
		if rows > 0 && time.Since(lastGrowth) > quiet {
			break
		}
	}
	res := kafkaResult{consumers: consumers, first: first, took: lastGrowth.Sub(start)}
	if rows == 0 {
		res.took = time.Since(start)
	}
	// Stop consuming before the next measurement.
	for _, q := range []string{"DROP TABLE " + view, "DROP TABLE " + queue} {
		if err := d.conn.Exec(ctx, q); err != nil {
			b.Fatalf("%s: %v", q, err)
		}
	}
	var n, distinct uint64
	d.queryRow(b, []any{&n, &distinct}, "SELECT count(), uniqExact(order_id) FROM "+target)
	res.rows, res.distinct = int64(n), int64(distinct)
	return res
}
