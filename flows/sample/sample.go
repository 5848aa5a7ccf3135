// Package sample generates the realistic order stream that `sluice demo` and
// the benchmarks produce: JSON order events of about 200 bytes, with an
// optional handful of malformed messages. It is deterministic for a seed and
// does no I/O.
package sample

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"
)

// Spec is the pipeline spec of the orders demo (and of the append
// benchmarks). %s takes the broker address, then the destination path.
const Spec = specHead + "tables:\n" + ordersTable + "flows:\n" + ordersFlow

// DemoSpec is Spec with the customers of CustomerChanges besides: one
// topic of Debezium changes into an SCD type 1 target (customers) and an
// SCD type 2 target (customers_history).
const DemoSpec = specHead + "tables:\n" + ordersTable + customersTables + "flows:\n" + ordersFlow + customersFlows

const specHead = `pipeline: demo
kafka:
  brokers: [%s]
destination:
  local: {path: %s}
`

const ordersTable = `  - name: orders
    columns:
      - {name: order_id, type: int64}
      - {name: customer_id, type: string}
      - {name: amount, type: "decimal(12,2)"}
      - {name: currency, type: string}
      - {name: status, type: string}
      - {name: items, type: int64}
      - {name: country, type: string, nullable: true}
      - {name: created_at, type: timestamp}
      - {name: _kafka_partition, type: int64}
      - {name: _kafka_offset, type: int64}
`

const ordersFlow = `  - name: orders_stream
    target: orders
    kind: append
    source:
      kafka:
        topic: orders
        format: json
`

// CustomersTopic is the topic of CustomerChanges.
const CustomersTopic = "shop.public.customers"

const customersTables = `  - name: customers
  - name: customers_history
`

// The two flows read the same topic; each keeps the changes in the order
// of their commit time (unique here: a real source adds the log position,
// sequence_by: [_source_ts_ms, _source_lsn]).
const customersFlows = `  - name: customers_cdc
    target: customers
    kind: auto_cdc
` + customersSource + `    keys: [id]
    sequence_by: _source_ts_ms
    stored_as_scd_type: 1
  - name: customers_history_cdc
    target: customers_history
    kind: auto_cdc
` + customersSource + `    keys: [id]
    sequence_by: _source_ts_ms
    except_column_list: [_source_ts_ms]
    stored_as_scd_type: 2
`

const customersSource = `    source:
      kafka:
        topic: ` + CustomersTopic + `
        format: debezium
        columns:
          - {name: id, type: int64}
          - {name: name, type: string}
          - {name: email, type: string, nullable: true}
          - {name: tier, type: string}
          - {name: city, type: string, nullable: true}
          - {name: _source_ts_ms, type: timestamp}
`

var (
	currencies = []string{"EUR", "USD", "GBP", "CHF", "SEK"}
	statuses   = []string{"placed", "paid", "shipped", "delivered", "cancelled"}
	countries  = []string{"DE", "FR", "NL", "US", "GB", "SE", "CH", "ES", "IT", "PL"}
	epoch      = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
)

// Order returns the JSON of order i (order_id = i+1), about 200 bytes.
func Order(rng *rand.Rand, i int) []byte {
	buf := make([]byte, 0, 224)
	buf = append(buf, `{"order_id":`...)
	buf = strconv.AppendInt(buf, int64(i)+1, 10)
	buf = append(buf, `,"customer_id":"cust-`...)
	buf = append(buf, fmt.Sprintf("%06d", rng.IntN(200_000))...)
	buf = append(buf, `","amount":"`...)
	buf = strconv.AppendInt(buf, int64(rng.IntN(50_000)), 10)
	buf = append(buf, '.')
	buf = append(buf, fmt.Sprintf("%02d", rng.IntN(100))...)
	buf = append(buf, `","currency":"`...)
	buf = append(buf, currencies[rng.IntN(len(currencies))]...)
	buf = append(buf, `","status":"`...)
	buf = append(buf, statuses[rng.IntN(len(statuses))]...)
	buf = append(buf, `","items":`...)
	buf = strconv.AppendInt(buf, int64(1+rng.IntN(9)), 10)
	buf = append(buf, `,"country":`...)
	if rng.IntN(20) == 0 {
		buf = append(buf, "null"...)
	} else {
		buf = append(buf, '"')
		buf = append(buf, countries[rng.IntN(len(countries))]...)
		buf = append(buf, '"')
	}
	buf = append(buf, `,"created_at":"`...)
	buf = epoch.Add(time.Duration(i)*37*time.Millisecond).AppendFormat(buf, time.RFC3339Nano)
	buf = append(buf, `","channel":"web","note":"sample order for the sluice demo"}`...)
	return buf
}

// Malformed returns bad messages of the kinds a real stream carries, each
// with the dead-letter reason it must produce.
func Malformed() []struct {
	Value  []byte
	Reason string
} {
	return []struct {
		Value  []byte
		Reason string
	}{
		{[]byte(`{"order_id": 1, "customer_id": "cust-1", "amount": "12.00", "currency": "EUR"`), "undecodable"},
		{[]byte(`not json at all`), "undecodable"},
		{[]byte(`{"order_id":"abc","customer_id":"cust-2","amount":"1.00","currency":"EUR","status":"paid","items":1,"created_at":"2026-01-01T00:00:00Z"}`), "type_mismatch"},
		{[]byte(`{"order_id":7,"customer_id":"cust-3","amount":"1.005","currency":"EUR","status":"paid","items":1,"created_at":"2026-01-01T00:00:00Z"}`), "type_mismatch"},
		{[]byte(`{"order_id":8,"customer_id":"cust-4","amount":"3.50","currency":"EUR","status":"paid","items":1}`), "missing_field"},
		{[]byte(`{"order_id":9,"customer_id":"cust-5","amount":"3.50","currency":"EUR","status":"paid","items":1,"created_at":"yesterday"}`), "type_mismatch"},
	}
}

// Change is a message of CustomerChanges: Value nil is a tombstone.
type Change struct {
	Key, Value []byte
	Partition  int32
}

// Customer is a customer's row as CustomerChanges leaves it; "" is NULL
// for Email and City.
type Customer struct {
	ID                      int64
	Name, Email, Tier, City string
}

// CustomerOutcome is what the changes of CustomerChanges leave: the
// customers that were not deleted, the versions an SCD type 2 target of
// them holds (one per create and update: every update changes a column),
// and how many changes arrive in their partition after a newer change of
// the same customer.
type CustomerOutcome struct {
	Left     map[int64]Customer
	Versions int
	Late     int
}

var (
	tiers      = []string{"bronze", "silver", "gold", "platinum"}
	cities     = []string{"Lyon", "Porto", "Gdansk", "Malmö", "Leipzig", "Bologna", "Utrecht", "Ghent"}
	firstNames = []string{"Ada", "Bruno", "Chiara", "Dmitri", "Elif", "Farid", "Greta", "Hugo", "Ines", "Jonas"}
	domains    = []string{"example.com", "example.org", "example.net"}
)

// CustomerChanges returns the change events of n customers of a shop's
// PostgreSQL table as Debezium writes them (JSON without the schema part,
// the message key {"id": N}): each customer created, then updated one to
// four times (its tier, city or email), and one in ten deleted at the end,
// the delete (with only the key in before, as PostgreSQL's default replica
// identity sends it) followed by its tombstone. Customers' changes
// interleave in commit order (source.ts_ms, unique); each goes to a
// random partition, and a tenth arrive late in their partition (by up to
// 1,000 messages), so a customer's changes come out of order. The same n
// and partitions give the same changes.
func CustomerChanges(n, partitions int) ([]Change, CustomerOutcome) {
	rng := rand.New(rand.NewPCG(42, 8))
	type event struct {
		at  float64 // commit time, in arbitrary units
		op  byte
		row Customer
	}
	var events []event
	out := CustomerOutcome{Left: make(map[int64]Customer, n)}
	for i := range n {
		id := int64(i) + 1
		name := firstNames[rng.IntN(len(firstNames))] + " " + string(rune('A'+rng.IntN(26))) + "."
		c := Customer{ID: id, Name: name, Tier: tiers[0], City: cities[rng.IntN(len(cities))]}
		if rng.IntN(5) > 0 {
			c.Email = fmt.Sprintf("customer%d@%s", id, domains[rng.IntN(len(domains))])
		}
		at := rng.Float64() * float64(n)
		events = append(events, event{at: at, op: 'c', row: c})
		updates := 1 + rng.IntN(4)
		out.Versions += 1 + updates
		for range updates {
			switch rng.IntN(3) {
			case 0:
				c.Tier = tiers[(slices.Index(tiers, c.Tier)+1)%len(tiers)]
			case 1:
				if c.City == "" {
					c.City = cities[rng.IntN(len(cities))]
				} else if rng.IntN(4) == 0 {
					c.City = ""
				} else {
					c.City = cities[(slices.Index(cities, c.City)+1+rng.IntN(len(cities)-1))%len(cities)]
				}
			default:
				for old := c.Email; c.Email == old; {
					c.Email = fmt.Sprintf("customer%d.%d@%s", id, rng.IntN(1000), domains[rng.IntN(len(domains))])
				}
			}
			at += 1 + rng.Float64()*float64(n)/100
			events = append(events, event{at: at, op: 'u', row: c})
		}
		if rng.IntN(10) == 0 {
			events = append(events, event{at: at + 1 + rng.Float64()*float64(n)/100, op: 'd', row: Customer{ID: id}})
		} else {
			out.Left[id] = c
		}
	}
	slices.SortStableFunc(events, func(a, b event) int { return cmp.Compare(a.at, b.at) })

	// Commit order, then a partition each, then a tenth late.
	type placed struct {
		pos int
		ts  int64
		id  int64
		msg []Change
	}
	parts := make([][]placed, partitions)
	start := epoch.UnixMilli()
	for i, e := range events {
		ts := start + int64(i)*250
		key := fmt.Appendf(nil, `{"id":%d}`, e.row.ID)
		p := int32(rng.IntN(partitions))
		msg := []Change{{Key: key, Value: debezium(e.op, e.row, ts, int64(i)), Partition: p}}
		if e.op == 'd' { // its tombstone follows
			msg = append(msg, Change{Key: key, Partition: p})
		}
		pos := len(parts[p])
		if rng.IntN(10) == 0 {
			pos += 1 + rng.IntN(1000)
		}
		parts[p] = append(parts[p], placed{pos, ts, e.row.ID, msg})
	}
	var msgs []Change
	for _, part := range parts {
		slices.SortStableFunc(part, func(a, b placed) int { return cmp.Compare(a.pos, b.pos) })
		newest := map[int64]int64{}
		for _, x := range part {
			if x.ts < newest[x.id] {
				out.Late++
			}
			newest[x.id] = max(newest[x.id], x.ts)
			msgs = append(msgs, x.msg...)
		}
	}
	return msgs, out
}

// debezium returns the change event of op ('c', 'u' or 'd') on row,
// committed at ts (epoch milliseconds) at log position lsn.
func debezium(op byte, row Customer, ts, lsn int64) []byte {
	nullable := func(s string) string {
		if s == "" {
			return "null"
		}
		return strconv.Quote(s)
	}
	after := fmt.Sprintf(`{"id":%d,"name":%q,"email":%s,"tier":%q,"city":%s}`, row.ID, row.Name, nullable(row.Email), row.Tier, nullable(row.City))
	before := "null"
	if op == 'd' {
		before, after = fmt.Sprintf(`{"id":%d}`, row.ID), "null"
	}
	return fmt.Appendf(nil, `{"before":%s,"after":%s,"source":{"version":"2.7.3.Final","connector":"postgresql","name":"shop","ts_ms":%d,"db":"shop","schema":"public","table":"customers","lsn":%d},"op":"%c","ts_ms":%d}`,
		before, after, ts, 24000000+lsn*56, op, ts+40)
}
