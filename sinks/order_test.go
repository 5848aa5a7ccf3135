package sinks

import (
	"slices"
	"testing"
)

// TestPublishOrder checks that every child table is published before
// its parent.
func TestPublishOrder(t *testing.T) {
	tables := []string{"orders", "_sluice_dead_letters", "orders__items__tags", "events", "orders__items"}
	PublishOrder(tables)
	pos := func(name string) int { return slices.Index(tables, name) }
	if !(pos("orders__items__tags") < pos("orders__items") && pos("orders__items") < pos("orders")) {
		t.Fatalf("order %v: a child table comes after its parent", tables)
	}
}
