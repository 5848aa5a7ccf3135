package integration

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/sluicehq/sluice/consumer"
)

// nestedSpec is a pipeline of orders typed by their messages, whose items
// land in the child table orders__items, and in latest__items under the
// SCD1 target latest.
const nestedSpec = `pipeline: it
kafka:
  brokers: [%s]
  session_timeout: 2s
destination: %s
tables:
  - name: orders
  - name: latest
flows:
  - name: orders_in
    target: orders
    kind: append
    source: {kafka: {topic: orders}}
    batch: {rows: %[3]d, wait: 200ms}
  - name: latest_in
    target: latest
    kind: auto_cdc
    source: {kafka: {topic: orders}}
    keys: [order_id]
    sequence_by: seq
    batch: {rows: %[3]d, wait: 200ms}
`

// nestedOrder is order i: items i%3+1, item j of quantity j+1.
func nestedOrder(i int) []byte {
	b := fmt.Appendf(nil, `{"order_id": %d, "seq": %d, "items": [`, i, i)
	for j := range i%3 + 1 {
		if j > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `{"sku": "s%d", "qty": %d}`, j, j+1)
	}
	return append(b, "]}"...)
}

// TestNestedOrdersKilled kills `sluice run` during the loads of orders
// with items, in both destinations, then runs an update: every order is
// in orders once, and its items in orders__items once each, linked to it
// (joined back with SQL in ClickHouse, read with parquet-go locally).
func TestNestedOrdersKilled(t *testing.T) {
	t.Parallel()
	forEachDestination(t, func(t *testing.T, d destination) {
		const n, rounds = 30_000, 3
		b := startBroker(t, map[string]int32{"orders": 2})
		spec := writeSpecText(t, fmt.Sprintf(nestedSpec, b.Addr(), d.yaml(), 1_000))
		seed := uint64(time.Now().UnixNano())
		t.Logf("seed %d", seed)
		rng := rand.New(rand.NewPCG(seed, 3))
		msgs := make([]consumer.Message, n)
		items := 0
		for i := range msgs {
			msgs[i] = consumer.Message{Value: nestedOrder(i), Partition: int32(i % 2)}
			items += i%3 + 1
		}
		for round := range rounds {
			produceMsgs(t, b.Addr(), "orders", msgs[round*n/rounds:(round+1)*n/rounds])
			killed := killRunAfter(t, spec, time.Duration(300+rng.IntN(2500))*time.Millisecond)
			t.Logf("round %d: killed run %s after its start", round, killed.Round(time.Millisecond))
		}
		reapDeadMembers(t, b.Addr(), itGroup)
		mustSluice(t, append([]string{"update", "-f", spec}, fastArgs...)...)
		checkExactlyOnce(t, d.ids(t, spec, "orders", "order_id"), 0, n)

		// Each item once, under its order: (order, list index, quantity).
		var got [][3]int64
		switch d := d.(type) {
		case *clickHouseDest:
			d.query(t, func(rows driver.Rows) error {
				var r [3]int64
				if err := rows.Scan(&r[0], &r[1], &r[2]); err != nil {
					return err
				}
				got = append(got, r)
				return nil
			}, "SELECT order_id, _sluice_list_idx, qty FROM (SELECT _sluice_parent_id AS pid, _sluice_list_idx, qty FROM "+d.db+".orders__items)"+
				" ANY INNER JOIN (SELECT _sluice_id AS pid, order_id FROM "+d.db+".orders) USING pid")
		default:
			orders := map[string]int64{}
			ids, keys := readColumn(t, tableDir(spec, "orders"), "_sluice_id"), readColumn(t, tableDir(spec, "orders"), "order_id")
			for i := range ids {
				orders[ids[i].String()] = keys[i].Int64()
			}
			pids, idx, qty := readColumn(t, tableDir(spec, "orders__items"), "_sluice_parent_id"),
				readColumn(t, tableDir(spec, "orders__items"), "_sluice_list_idx"), readColumn(t, tableDir(spec, "orders__items"), "qty")
			for i := range pids {
				if o, ok := orders[pids[i].String()]; ok {
					got = append(got, [3]int64{o, idx[i].Int64(), qty[i].Int64()})
				}
			}
		}
		if len(got) != items {
			t.Fatalf("%d items joined to their orders, want %d", len(got), items)
		}
		if shown := jsonl(t, mustSluice(t, "show", "-f", spec, "orders__items", "--format", "jsonl").stdout); len(shown) != items {
			t.Errorf("show orders__items lists %d rows, want %d", len(shown), items)
		}
		if out := mustSluice(t, "status", "-f", spec).stdout; !strings.Contains(out, "orders_in child tables of orders:\n  orders__items, under orders") {
			t.Errorf("status does not list the child table:\n%s", out)
		}
		// The SCD1 target: every order once, and the items of its change
		// once each.
		if rows := jsonl(t, mustSluice(t, "show", "-f", spec, "latest", "--format", "jsonl").stdout); len(rows) != n {
			t.Errorf("latest has %d rows, want %d", len(rows), n)
		}
		seen := map[string]bool{}
		for _, r := range jsonl(t, mustSluice(t, "show", "-f", spec, "latest__items", "--format", "jsonl").stdout) {
			k := fmt.Sprint(r["_sluice_root_id"], "/", r["_sluice_list_idx"])
			if seen[k] {
				t.Fatalf("latest__items holds item %s twice", k)
			}
			seen[k] = true
		}
		if len(seen) != items {
			t.Errorf("latest__items holds %d items of its rows, want %d", len(seen), items)
		}
		slices.SortFunc(got, func(a, b [3]int64) int {
			if a[0] != b[0] {
				return int(a[0] - b[0])
			}
			return int(a[1] - b[1])
		})
		k := 0
		for i := range n {
			for j := range i%3 + 1 {
				if want := [3]int64{int64(i), int64(j), int64(j + 1)}; got[k] != want {
					t.Fatalf("item %d: %v, want %v (a duplicate or a gap)", k, got[k], want)
				}
				k++
			}
		}
	})
}
