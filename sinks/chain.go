package sinks

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/sluicehq/sluice/flows/batch"
)

// The chain rule, shared by every destination and by whatever works out
// heads from a ledger. Each Kafka partition and each file a flow reads is a
// slot. The committed loads of a flow that reached a slot form its chain,
// and the furthest position among them is the slot's head. A load that
// names a slot in Commit.From continues the chain only when its From is the
// head (or says "no position" and the slot has none); a commit that does
// not continue every slot it names is stale and is refused with ErrStale.
// Hence no two loads of a flow ever continue a slot from the same position,
// whether the slot is a Kafka partition or a file, and a batch read twice
// (a retry, a replay after a restart, a partition taken over) is committed
// at most once. See docs/operations.md, "Delivery".

// Slot names the slot of a position: "k/<topic>/<partition>" for a Kafka
// partition, "f/<file>" for a file (or another file-like source, such as a
// snapshot version). Destinations store these names; they do not change.
func Slot(p batch.Position) string {
	if p.Topic != "" {
		return "k/" + p.Topic + "/" + strconv.FormatInt(int64(p.Partition), 10)
	}
	return "f/" + p.File
}

// Ahead reports whether position a is further along its slot than b: a
// greater next offset, or for a file read to its end against one that is
// not, else a greater next row.
func Ahead(a, b batch.Position) bool {
	if a.Topic != "" {
		return a.Offset > b.Offset
	}
	if a.Done != b.Done {
		return a.Done
	}
	return a.RowGroup > b.RowGroup
}

// NoPosition reports whether a From position says that its slot had no
// position when the load started: a negative Kafka offset, or a file at its
// first row and not read to its end.
func NoPosition(p batch.Position) bool {
	if p.Topic != "" {
		return p.Offset < 0
	}
	return p.RowGroup == 0 && !p.Done
}

// Continues reports whether a load starting at from continues a slot whose
// head is head (exists false: no committed load reached the slot).
func Continues(from, head batch.Position, exists bool) bool {
	if !exists {
		return NoPosition(from)
	}
	if from.Topic != "" {
		return from.Offset == head.Offset
	}
	return from.RowGroup == head.RowGroup && from.Done == head.Done
}

// Heads maps each slot a flow's committed loads reached to its head.
type Heads map[string]batch.Position

// Advance takes the positions a committed load reached into the heads.
func (h Heads) Advance(to batch.Positions) {
	for _, p := range to {
		k := Slot(p)
		if cur, ok := h[k]; !ok || Ahead(p, cur) {
			h[k] = p
		}
	}
}

// Stale describes, one per slot in slot order, the slots of from that a
// load starting there does not continue; none when it continues them all.
func (h Heads) Stale(from batch.Positions) []string {
	var out []string
	for _, p := range from {
		head, ok := h[Slot(p)]
		if Continues(p, head, ok) {
			continue
		}
		at := "no position"
		if ok {
			at = Describe(head)
		}
		out = append(out, fmt.Sprintf("%s starts at %s but the ledger is at %s", Slot(p), Describe(p), at))
	}
	slices.Sort(out)
	return out
}

// Reached reports whether every slot of to has its head exactly at to: the
// load that reached to, or one equal to it, is committed.
func (h Heads) Reached(to batch.Positions) bool {
	for _, p := range to {
		head, ok := h[Slot(p)]
		if !ok || Ahead(p, head) || Ahead(head, p) {
			return false
		}
	}
	return true
}

// Kafka returns the next offset to read of every Kafka partition in the
// heads.
func (h Heads) Kafka() map[batch.TopicPartition]int64 {
	out := map[batch.TopicPartition]int64{}
	for _, p := range h {
		if p.Topic != "" {
			out[batch.TopicPartition{Topic: p.Topic, Partition: p.Partition}] = p.Offset
		}
	}
	return out
}

// Files returns the head of every file in the heads, by file name.
func (h Heads) Files() map[string]batch.Position {
	out := map[string]batch.Position{}
	for _, p := range h {
		if p.Topic == "" {
			out[p.File] = p
		}
	}
	return out
}

// Describe renders a position for an error or a log line.
func Describe(p batch.Position) string {
	if p.Topic != "" {
		return fmt.Sprintf("offset %d", p.Offset)
	}
	return fmt.Sprintf("row %d (done %v)", p.RowGroup, p.Done)
}

// LedgerHeads works out the heads of one flow's slots from a ledger.
func LedgerHeads(l *batch.Ledger, flow string) Heads {
	h := Heads{}
	for i := range l.Loads {
		if l.Loads[i].Flow == flow {
			h.Advance(l.Loads[i].Positions)
		}
	}
	return h
}
