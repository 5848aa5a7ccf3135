package flows_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/consumer"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks/destination"
)

// TestCDCJoinedLoads: a CDC flow over four partitions whose batches are
// ready at once, in both destinations, in six updates. Batches
// of several partitions are joined into one load (its ledger row holds
// their positions), and the target holds each key's last change.
func TestCDCJoinedLoads(t *testing.T) {
	broker := startBroker(t)
	dests := destinations(t)
	for _, dname := range slices.Sorted(maps.Keys(dests)) {
		t.Run(dname, func(t *testing.T) {
			ctx := context.Background()
			topic := "joined_" + dname
			if err := consumer.CreateTopic(ctx, []string{broker.Addr()}, topic, 4); err != nil {
				t.Fatal(err)
			}
			flow := flowYAML("f", topic, fmt.Sprintf(f1Columns, ""), "    except_column_list: [op, seq]\n    stored_as_scd_type: 1\n    batch: {rows: 1000}\n")
			s := newStepper(t, broker.Addr(), dests[dname](t), "tables:\n  - name: t\nflows:"+flow)

			// Rounds of 100 events per partition, each an update: the four
			// partitions' batches (at their end offsets, well under
			// batch.rows) are ready at once, and the target takes two
			// at a time, so the later ones wait and join.
			rng := rand.New(rand.NewPCG(5, 6))
			type change struct {
				name string
				del  bool
			}
			last := map[int64]change{}
			seq := int64(0)
			for range 6 {
				var ms []consumer.Message
				for range 400 {
					id := rng.Int64N(300)
					c := change{name: fmt.Sprint("n", rng.IntN(5)), del: rng.IntN(8) == 0}
					v := U(id, c.name, seq)
					if c.del {
						v = D(id, seq)
					}
					last[id] = c // sequences grow: a key's last event is its newest
					ms = append(ms, consumer.Message{Value: []byte(v), Partition: int32(seq % 4)})
					seq++
				}
				if err := consumer.Produce(ctx, []string{broker.Addr()}, topic, ms); err != nil {
					t.Fatal(err)
				}
				s.update()
			}
			var want []string
			for _, id := range slices.Sorted(maps.Keys(last)) {
				if c := last[id]; !c.del {
					want = append(want, fmt.Sprintf("%d,%s", id, c.name))
				}
			}
			if rows := s.rows("t"); !slices.Equal(rows, want) {
				t.Fatalf("target: %d rows, want %d\n got %q\nwant %q", len(rows), len(want), rows, want)
			}
			sink, err := destination.Open(ctx, s.p, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer sink.Close()
			loads, err := sink.Scan(ctx, batch.LoadsTable)
			if err != nil {
				t.Fatal(err)
			}
			joined, total := 0, 0
			for i, f := range loads.Column("flow").Strs {
				if f != "f" {
					continue
				}
				total++
				if strings.Count(loads.Column("positions").Strs[i], `"partition"`) > 1 {
					joined++
				}
			}
			if joined == 0 {
				t.Fatalf("none of %d loads joined batches of several partitions", total)
			}
			t.Logf("%d of %d loads joined batches of several partitions", joined, total)
		})
	}
}
