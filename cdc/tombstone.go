package cdc

import (
	"slices"
	"strings"
)

// A tombstone (a Kafka message with a key and no value) carries no
// sequence: it deletes its key just after the key's newest sequence when
// it arrives, the newest among the key's state and the events of its batch
// that precede it in its partition (events of other partitions and flows
// count as preceding it). Just after S (justAfter) is greater than S and
// less than every sequence greater than S, so the tombstone wins the tie
// with the key's newest change, an event at S arriving later is older than
// it, and any newer event wins over it. On SCD type 2 the version it
// closes ends there, and __END_AT reads S. A tombstone of a key with no
// event changes nothing, and so does one delivered again: the key's state
// holds it, or an event that follows it in its partition.

// resolveTombstones gives the tombstones of a key's batch events (first
// in fresh: their sequence is empty) their sequence over the stored events
// old, drops those that change nothing, and returns the events in (seq,
// position) order again.
func (a *applyCtx) resolveTombstones(old, fresh []event) []event {
	t := 0
	for t < len(fresh) && fresh[t].tomb {
		t++
	}
	tombs := slices.Clone(fresh[:t]) // by position: their sequences tie
	rest := fresh[t:]
	kept := fresh[:0]
	for _, tb := range tombs {
		seq, applied := "", false
		for i := range old {
			if old[i].pos == tb.pos || follows(old[i].pos, tb.pos) {
				applied = true
				break
			}
			seq = max(seq, old[i].seq)
		}
		if applied {
			continue
		}
		for i := range rest {
			if !follows(rest[i].pos, tb.pos) {
				seq = max(seq, rest[i].seq)
			}
		}
		if len(kept) > 0 { // the tombstones before it: the last is the newest
			seq = max(seq, kept[len(kept)-1].seq)
		}
		if seq == "" {
			continue
		}
		tb.seq, tb.tomb = justAfter(a.p.seqTypes, seq), false
		kept = append(kept, tb)
	}
	out := append(kept, rest...) // rest starts at or after kept's end
	sortEvents(out)
	return out
}

// sortEvents sorts events by (seq, position).
func sortEvents(evs []event) {
	slices.SortFunc(evs, func(x, y event) int {
		if c := strings.Compare(x.seq, y.seq); c != 0 {
			return c
		}
		return x.pos.Compare(y.pos)
	})
}

// fromTombstone reports whether seq is the sequence a tombstone resolved
// to: only tombstones delete just after a sequence.
func (a *applyCtx) fromTombstone(seq string) bool {
	if !strings.HasSuffix(seq, afterMark) {
		return false
	}
	_, rest, err := splitOrdered(a.p.seqTypes, seq)
	return err == nil && rest == afterMark
}

// samePartition reports whether p and q are positions of one partition
// (or file) of one flow.
func samePartition(p, q Position) bool {
	return p.Flow == q.Flow && p.Topic == q.Topic && p.Partition == q.Partition && p.File == q.File
}

// follows reports whether p comes after q in q's partition.
func follows(p, q Position) bool {
	return samePartition(p, q) && p.Offset > q.Offset
}
