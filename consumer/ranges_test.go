package consumer

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/flows/batch"
)

// TestRangesOfATransactionalTopic reads a range with an aborted
// transaction and markers at its end: only the committed records come,
// and nothing is pending once they are past.
func TestRangesOfATransactionalTopic(t *testing.T) {
	addr := startBroker(t, map[string]int32{"tx": 1})
	produceTx(t, addr, "tx", []txStep{{5, true}, {4, false}})
	cfg := testConfig(t, addr, "tx")
	ends, err := EndOffsets(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	end := ends[0]
	var got []int64
	err = ReadRanges(context.Background(), cfg, map[int32]Range{0: {From: 0, To: end}}, func(p int32, recs []batch.Record) error {
		for _, r := range recs {
			got = append(got, r.Offset)
		}
		return nil
	})
	if err != nil || len(got) != 5 || got[4] != 4 {
		t.Fatalf("read offsets %v (%v), want the 5 committed ones", got, err)
	}
	pending, err := Pending(context.Background(), cfg, map[int32]Range{0: {From: 5, To: end}})
	if err != nil || pending[0] {
		t.Errorf("after the committed records: pending %v (%v), want nothing: only markers and aborted records are left", pending, err)
	}
	if pending, err = Pending(context.Background(), cfg, map[int32]Range{0: {From: 3, To: end}}); err != nil || !pending[0] {
		t.Errorf("from offset 3: pending %v (%v), want records", pending, err)
	}
}
