package flows_test

import (
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// nestedChange is a change of an order with its items.
type nestedChange struct {
	key, seq int
	del      bool
	items    []nestedItem
}

type nestedItem struct {
	sku string
	qty int
}

func (c nestedChange) json() string {
	if c.del {
		return fmt.Sprintf(`{"order_id": %d, "seq": %d, "op": "D"}`, c.key, c.seq)
	}
	var items []string
	for _, it := range c.items {
		items = append(items, fmt.Sprintf(`{"sku": %q, "qty": %d}`, it.sku, it.qty))
	}
	return fmt.Sprintf(`{"order_id": %d, "seq": %d, "op": "U", "items": [%s]}`, c.key, c.seq, strings.Join(items, ", "))
}

// nestedOracle is what the child tables of SCD1 and SCD2 targets joined to
// their rows hold after the changes, whatever their order: SCD1 the items
// of each key's newest change when it is an upsert, SCD2 those of every
// upsert (each starts a version), as currentJoined renders them.
func nestedOracle(cs []nestedChange) (scd1, scd2 []string) {
	newest := map[int]nestedChange{}
	for _, c := range cs {
		if n, ok := newest[c.key]; !ok || c.seq > n.seq {
			newest[c.key] = c
		}
		if !c.del {
			for i, it := range c.items {
				scd2 = append(scd2, fmt.Sprintf("%d/%d[%d]: %s,%d", c.key, c.seq, i, it.sku, it.qty))
			}
		}
	}
	for _, c := range newest {
		if !c.del {
			for i, it := range c.items {
				scd1 = append(scd1, fmt.Sprintf("%d[%d]: %s,%d", c.key, i, it.sku, it.qty))
			}
		}
	}
	slices.Sort(scd1)
	slices.Sort(scd2)
	return scd1, scd2
}

// TestPropertyCDCChildTables: any order of the same nested changes, split
// into any batches (each an update), gives the same parent and child
// tables, those the oracle says.
func TestPropertyCDCChildTables(t *testing.T) {
	// Each check runs a pipeline: fewer than rapid's default (fewer still
	// under the race detector), unless the command line asks for a number.
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rapid.checks" })
	if !set {
		checks := "25"
		if raceOn {
			checks = "4"
		}
		if err := flag.Set("rapid.checks", checks); err != nil {
			t.Fatal(err)
		}
	}
	broker := startBroker(t)
	run := 0
	rapid.Check(t, func(rt *rapid.T) {
		run++
		var cs []nestedChange
		for key := 1; key <= 3; key++ {
			seqs := rapid.SliceOfNDistinct(rapid.IntRange(1, 20), 1, 4, rapid.ID[int]).Draw(rt, fmt.Sprintf("seqs%d", key))
			for _, seq := range seqs {
				c := nestedChange{key: key, seq: seq, del: rapid.IntRange(0, 4).Draw(rt, "del") == 0}
				for range rapid.IntRange(0, 3).Draw(rt, "items") {
					c.items = append(c.items, nestedItem{sku: rapid.SampledFrom([]string{"a", "b", "c"}).Draw(rt, "sku"), qty: rapid.IntRange(1, 9).Draw(rt, "qty")})
				}
				cs = append(cs, c)
			}
		}
		order := rapid.Permutation(cs).Draw(rt, "order")
		cuts := rapid.IntRange(1, 3).Draw(rt, "batches")
		topic := fmt.Sprintf("nested_prop_%d", run)
		s := newStepper(t, broker.Addr(), "  local: {path: "+t.TempDir()+"}", ordersHistorySpec(topic))
		for b := range cuts {
			var msgs []string
			for i := b * len(order) / cuts; i < (b+1)*len(order)/cuts; i++ {
				msgs = append(msgs, order[i].json())
			}
			if len(msgs) > 0 {
				s.produce(topic, msgs...)
				s.update()
			}
		}
		want1, want2 := nestedOracle(cs)
		got1 := currentJoined(t, s, "orders", "orders__items", "order_id")
		if !slices.Equal(got1, want1) {
			rt.Fatalf("SCD1 items %q, want %q", got1, want1)
		}
		got2 := currentJoined(t, s, "history", "history__items", "order_id", "__START_AT")
		if !slices.Equal(got2, want2) {
			rt.Fatalf("SCD2 items %q, want %q", got2, want2)
		}
	})
}
