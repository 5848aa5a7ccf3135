package sinks

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/flows/batch"
)

func kpos(o int64) batch.Position { return batch.Position{Topic: "t", Offset: o} }

func fpos(rg int64, done bool) batch.Position {
	return batch.Position{File: "a", RowGroup: rg, Done: done}
}

func TestContinues(t *testing.T) {
	tests := []struct {
		name   string
		from   batch.Position
		head   batch.Position
		exists bool
		want   bool
	}{
		{"first load of a partition", kpos(-1), batch.Position{}, false, true},
		{"offset without a ledger position", kpos(5), batch.Position{}, false, false},
		{"no position but the ledger has one", kpos(-1), kpos(10), true, false},
		{"continues", kpos(10), kpos(10), true, true},
		{"behind", kpos(5), kpos(10), true, false},
		{"ahead", kpos(11), kpos(10), true, false},
		{"first rows of a file", fpos(0, false), batch.Position{}, false, true},
		{"file row without a ledger position", fpos(3, false), batch.Position{}, false, false},
		{"file from its start but the ledger has it", fpos(0, false), fpos(3, false), true, false},
		{"file continues", fpos(3, false), fpos(3, false), true, true},
		{"file behind", fpos(1, false), fpos(3, false), true, false},
		{"file already done", fpos(3, false), fpos(3, true), true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Continues(tc.from, tc.head, tc.exists); got != tc.want {
				t.Errorf("Continues = %v, want %v", got, tc.want)
			}
		})
	}
	if !Ahead(fpos(0, true), fpos(9, false)) || Ahead(kpos(3), kpos(4)) || Ahead(kpos(4), kpos(4)) {
		t.Error("Ahead orders positions wrongly")
	}
}

func TestHeadsStaleAndReached(t *testing.T) {
	h := Heads{}
	h.Advance(batch.Positions{kpos(10), fpos(3, false)})
	h.Advance(batch.Positions{kpos(7)}) // behind: the head stays
	if got := h.Stale(batch.Positions{kpos(10), fpos(3, false)}); len(got) != 0 {
		t.Errorf("continuing load stale: %v", got)
	}
	stale := h.Stale(batch.Positions{kpos(10), fpos(0, false), {Topic: "t", Partition: 1, Offset: -1}})
	if len(stale) != 1 || stale[0] != "f/a starts at row 0 (done false) but the ledger is at row 3 (done false)" {
		t.Errorf("stale = %q, want the file slot only", stale)
	}
	if !h.Reached(batch.Positions{kpos(10), fpos(3, false)}) || h.Reached(batch.Positions{kpos(11)}) ||
		h.Reached(batch.Positions{{File: "b", Done: true}}) {
		t.Error("Reached is wrong")
	}
	if got := h.Kafka(); got[batch.TopicPartition{Topic: "t"}] != 10 || len(got) != 1 {
		t.Errorf("Kafka = %v", got)
	}
	if got := h.Files(); got["a"] != fpos(3, false) || len(got) != 1 {
		t.Errorf("Files = %v", got)
	}
}

// TestChainCommitsEachPositionOnce: whatever loads are offered, in any
// order, the rule accepts at most one load continuing a slot from a given
// position, and the accepted loads of a slot form one chain from its start.
func TestChainCommitsEachPositionOnce(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		type offer struct{ from, to batch.Position }
		slotPos := func(t *rapid.T, label string, file bool) batch.Position {
			if file {
				return batch.Position{File: "f", RowGroup: rapid.Int64Range(0, 4).Draw(t, label+"_row"), Done: rapid.Bool().Draw(t, label+"_done")}
			}
			return batch.Position{Topic: "t", Offset: rapid.Int64Range(-1, 4).Draw(t, label+"_off")}
		}
		file := rapid.Bool().Draw(t, "file")
		n := rapid.IntRange(1, 30).Draw(t, "offers")
		h := Heads{}
		var accepted []offer
		for range n {
			from := slotPos(t, "from", file)
			to := slotPos(t, "to", file)
			if !Ahead(to, from) {
				continue // a load reaches past where it started
			}
			if len(h.Stale(batch.Positions{from})) == 0 {
				accepted = append(accepted, offer{from, to})
				h.Advance(batch.Positions{to})
			}
		}
		seen := map[batch.Position]bool{}
		for i, a := range accepted {
			if seen[a.from] {
				t.Fatalf("two accepted loads continue from %v: %v", a.from, accepted)
			}
			seen[a.from] = true
			if i == 0 && !NoPosition(a.from) {
				t.Fatalf("first accepted load starts at %v, not at the start", a.from)
			}
			if i > 0 && !Continues(a.from, accepted[i-1].to, true) {
				t.Fatalf("load %d starts at %v, the previous one reached %v", i, a.from, accepted[i-1].to)
			}
		}
		if len(accepted) > 0 && !h.Reached(batch.Positions{accepted[len(accepted)-1].to}) {
			t.Fatal("the heads are not where the last accepted load reached")
		}
	})
}

func TestLedgerHeads(t *testing.T) {
	led := &batch.Ledger{Loads: []batch.LoadRecord{
		{Flow: "a", Positions: batch.Positions{{Topic: "t", Partition: 0, Offset: 10}, {Topic: "t", Partition: 1, Offset: 4}}},
		{Flow: "a", Positions: batch.Positions{{Topic: "t", Partition: 0, Offset: 20}}},
		{Flow: "b", Positions: batch.Positions{{Topic: "t", Partition: 0, Offset: 99}}},
		{Flow: "a", Positions: batch.Positions{{File: "a.parquet", RowGroup: 100}}},
		{Flow: "a", Positions: batch.Positions{{File: "a.parquet", RowGroup: 250, Done: true}}},
		{Flow: "a", Positions: batch.Positions{{File: "b.parquet", RowGroup: 10}}},
		{Flow: "other", Positions: batch.Positions{{File: "c.parquet", RowGroup: 5, Done: true}}},
	}}
	h := LedgerHeads(led, "a")
	got := h.Kafka()
	if len(got) != 2 || got[batch.TopicPartition{Topic: "t", Partition: 0}] != 20 || got[batch.TopicPartition{Topic: "t", Partition: 1}] != 4 {
		t.Errorf("Kafka heads %v", got)
	}
	files := h.Files()
	if len(files) != 2 || files["a.parquet"].RowGroup != 250 || !files["a.parquet"].Done || files["b.parquet"].RowGroup != 10 || files["b.parquet"].Done {
		t.Errorf("file heads %+v", files)
	}
}
