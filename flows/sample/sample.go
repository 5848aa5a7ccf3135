// Package sample generates the realistic order stream that `sluice demo` and
// the benchmarks produce: JSON order events of about 200 bytes, with an
// optional handful of malformed messages. It is deterministic for a seed and
// does no I/O.
package sample

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"
)

// Spec is the pipeline spec of the orders demo. %s takes the broker address,
// then the destination path.
const Spec = `pipeline: demo
kafka:
  brokers: [%s]
destination:
  local: {path: %s}
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
      - {name: _kafka_partition, type: int64}
      - {name: _kafka_offset, type: int64}
flows:
  - name: orders_stream
    target: orders
    kind: append
    source:
      kafka:
        topic: orders
        format: json
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
