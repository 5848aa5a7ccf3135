package sinktest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
)

// CrashReset gives the reset suite a way to stop a reset as a crash would:
// crash resets tables and flows on s and stops right after the reset's
// commit point, leaving s dead (the suite opens another Sink on the same
// destination and calls Recover). RunReset's crash case needs it.
func CrashReset(crash func(t *testing.T, s sinks.Sink, tables, flows []string)) Option {
	return func(c *config) { c.crashReset = crash }
}

// RunReset runs the conformance suite of sinks.Resetter.
func RunReset(t *testing.T, newDestination Factory, opts ...Option) {
	c := newConfig(opts)
	tests := []suiteCase{
		{"append_target_emptied_and_positions_forgotten", testResetAppend},
		{"loads_after_reset_count", testResetThenLoad},
		{"cdc_target_rows_and_state_cleared", testResetCDC},
		{"reset_twice_is_harmless", func(t *testing.T, h *harness) { testResetTwice(t, h, c) }},
		{"dead_letters_once_after_reset_and_replay", testResetDeadLetters},
		{"crash_after_commit_point_rolls_forward", func(t *testing.T, h *harness) { testResetCrash(t, h, c) }},
	}
	if c.appendOnly {
		tests = slices.DeleteFunc(tests, func(tc suiteCase) bool { return tc.name == "cdc_target_rows_and_state_cleared" })
	}
	runCases(t, newDestination, tests)
}

var shipmentsTable = sinks.Table{Name: "shipments", Schema: ordersSchema}

func resetter(t *testing.T, s sinks.Sink) sinks.Resetter {
	t.Helper()
	r, ok := s.(sinks.Resetter)
	if !ok {
		t.Fatalf("%T does not implement sinks.Resetter", s)
	}
	return r
}

func reset(t *testing.T, s sinks.Sink, tables, flows []string) {
	t.Helper()
	if err := resetter(t, s).Reset(context.Background(), tables, flows); err != nil {
		t.Fatalf("Reset %v %v: %v", tables, flows, err)
	}
}

// mustCommit commits rows ids from..to-1 of table for flow, moving its
// position on topic "t" partition 0 from from to to.
func (h *harness) mustCommit(s sinks.Sink, flow, table string, from, to int) {
	h.t.Helper()
	start := int64(from)
	if from == 0 {
		start = -1
	}
	id, err := h.commit(s, flow, map[string]*batch.Batch{table: orders(from, to)}, sinks.Commit{
		From: batch.Positions{kafka("t", 0, start)},
		To:   batch.Positions{kafka("t", 0, int64(to))},
		Rows: int64(to - from),
	})
	if err != nil {
		h.t.Fatalf("Commit of load %s (%s, %s): %v", id, flow, table, err)
	}
}

// expectPosition checks a flow's ledger position on topic "t" partition 0;
// want < 0 means none.
func expectPosition(t *testing.T, l *batch.Ledger, what, flow string, want int64) {
	t.Helper()
	got, ok := sinks.LedgerHeads(l, flow).Kafka()[batch.TopicPartition{Topic: "t", Partition: 0}]
	switch {
	case want < 0 && ok:
		t.Errorf("%s: flow %s has ledger position %d, want none", what, flow, got)
	case want >= 0 && !ok:
		t.Errorf("%s: flow %s has no ledger position, want %d", what, flow, want)
	case want >= 0 && got != want:
		t.Errorf("%s: flow %s has ledger position %d, want %d", what, flow, got, want)
	}
	for _, ld := range l.Loads {
		if want < 0 && ld.Flow == flow {
			t.Errorf("%s: Ledger still returns load %s of flow %s", what, ld.LoadID, flow)
		}
	}
}

func expectIDs(t *testing.T, s sinks.Sink, table, what string, want []int64) {
	t.Helper()
	if got := ids(t, scan(t, s, table), "id"); !slices.Equal(got, want) {
		t.Fatalf("%s: %s holds ids %v, want %v", what, table, got, want)
	}
}

func testResetAppend(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, ordersTable, shipmentsTable)
	h.mustCommit(s, "a", "orders", 0, 5)
	h.mustCommit(s, "b", "orders", 0, 3)
	h.mustCommit(s, "a", "orders", 5, 8)
	h.mustCommit(s, "c", "shipments", 0, 4)

	reset(t, s, []string{"orders"}, []string{"a", "b"})

	expectIDs(t, s, "orders", "after the reset", []int64{})
	expectIDs(t, s, "shipments", "after the reset of another table", seq(0, 4))
	for _, l := range []*batch.Ledger{ledger(t, s), ledger(t, h.sink()), recoverLedger(t, h.sink())} {
		expectPosition(t, l, "after the reset", "a", -1)
		expectPosition(t, l, "after the reset", "b", -1)
		expectPosition(t, l, "after the reset", "c", 4)
	}
	// The table keeps its schema: Ensure of the same table still passes.
	ensure(t, s, ordersTable)
	if _, err := s.Scan(context.Background(), batch.LoadsTable); err != nil {
		t.Fatalf("Scan %s after a reset: %v", batch.LoadsTable, err)
	}
}

func testResetThenLoad(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, ordersTable)
	h.mustCommit(s, "a", "orders", 0, 5)
	reset(t, s, []string{"orders"}, []string{"a"})
	// The flow starts over from the beginning of its source.
	h.mustCommit(s, "a", "orders", 0, 2)
	expectIDs(t, s, "orders", "a load after the reset", seq(0, 2))
	h.mustCommit(s, "a", "orders", 2, 6)
	expectIDs(t, s, "orders", "two loads after the reset", seq(0, 6))
	for _, l := range []*batch.Ledger{ledger(t, s), recoverLedger(t, h.sink())} {
		expectPosition(t, l, "loads after the reset", "a", 6)
		if n := len(l.Loads); n != 2 {
			t.Errorf("Ledger returns %d loads, want the 2 committed after the reset", n)
		}
	}
	// A load continuing from the positions the reset forgot is stale.
	_, err := h.commit(s, "a", map[string]*batch.Batch{"orders": orders(100, 101)}, sinks.Commit{
		From: batch.Positions{kafka("t", 0, 5)},
		To:   batch.Positions{kafka("t", 0, 6)},
	})
	if err == nil {
		t.Fatalf("a load continuing from a position the reset forgot was committed")
	}
	expectIDs(t, s, "orders", "after a stale load", seq(0, 6))
}

func testResetCDC(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, scd1Table, scd2Table)
	h.mustCDC(s, "f",
		upsert1(scd1Table.Name, r1{1, "a", 10, 1}, r1{2, "b", 20, 1}),
		upsert2(scd2Table.Name, r2{id: 1, name: "a", start: 1}),
		putState(scd1Table.Name, sinks.StateEntry{Key: encKey(1), Value: []byte("s1")},
			sinks.StateEntry{Key: encKey(2), Value: []byte("tomb")}, sinks.StateEntry{Key: "", Value: []byte("table")}))
	expectState(t, s, scd1Table.Name, "before the reset", []string{encKey(1), encKey(2), ""},
		map[string][]byte{encKey(1): []byte("s1"), encKey(2): []byte("tomb"), "": []byte("table")})

	reset(t, s, []string{scd1Table.Name, scd2Table.Name}, []string{"f"})

	for _, r := range []sinks.Sink{s, h.sink()} {
		expectContent(t, r, scd1Table, "after the reset")
		expectContent(t, r, scd2Table, "after the reset")
		expectState(t, r, scd1Table.Name, "after the reset", []string{encKey(1), encKey(2), ""}, nil)
	}
	if _, ok := sinks.LedgerHeads(ledger(t, s), "f").Kafka()[batch.TopicPartition{Topic: "cdc", Partition: 0}]; ok {
		t.Fatalf("flow f keeps a ledger position after the reset")
	}
	// The flow starts over: a new load applies to the empty target.
	h.mustCDC(s, "f",
		upsert1(scd1Table.Name, r1{3, "c", 30, 2}),
		putState(scd1Table.Name, sinks.StateEntry{Key: encKey(3), Value: []byte("s3")}))
	expectContent(t, s, scd1Table, "a load after the reset", "3|c|30")
	expectState(t, s, scd1Table.Name, "a load after the reset", []string{encKey(1), encKey(3), ""},
		map[string][]byte{encKey(3): []byte("s3")})
	if off := sinks.LedgerHeads(ledger(t, s), "f").Kafka()[batch.TopicPartition{Topic: "cdc", Partition: 0}]; off != 1 {
		t.Fatalf("flow f is at %d after one load since the reset, want 1", off)
	}
}

// commitWithDeadLetters commits rows from..to-1 of table for flow (as
// mustCommit) with one dead letter per position in dls, of the flow.
func (h *harness) commitWithDeadLetters(s sinks.Sink, flow, table string, from, to int, dls ...string) {
	h.t.Helper()
	start := int64(from)
	if from == 0 {
		start = -1
	}
	var letters []batch.DeadLetter
	for _, p := range dls {
		letters = append(letters, batch.DeadLetter{Pipeline: Pipeline, Flow: flow, Target: table, Source: "t", Position: p,
			Reason: batch.ReasonUndecodable, Error: "message is not JSON", Payload: []byte("{" + p), At: time.Unix(1700000000, 0).UTC()})
	}
	writes := map[string]*batch.Batch{table: orders(from, to)}
	if len(letters) > 0 {
		writes[batch.DeadLettersTable] = batch.DeadLetterBatch(letters)
	}
	if _, err := h.commit(s, flow, writes, sinks.Commit{
		From: batch.Positions{kafka("t", 0, start)}, To: batch.Positions{kafka("t", 0, int64(to))},
		Rows: int64(to - from), DeadLetters: int64(len(letters)),
	}); err != nil {
		h.t.Fatalf("Commit of %s into %s: %v", flow, table, err)
	}
}

// expectDeadLetters checks the dead letters of each flow (their positions,
// sorted) and that the ledger's counts of the flows' loads agree.
func expectDeadLetters(t *testing.T, s sinks.Sink, what string, want map[string][]string) {
	t.Helper()
	b := scan(t, s, batch.DeadLettersTable)
	got := map[string][]string{}
	flows, positions := b.Column("flow"), b.Column("position")
	for i := range b.Len() {
		got[flows.Strs[i]] = append(got[flows.Strs[i]], positions.Strs[i])
	}
	for f := range got {
		slices.Sort(got[f])
	}
	counts := map[string]int64{}
	for _, ld := range ledger(t, s).Loads {
		counts[ld.Flow] += ld.DeadLetters
	}
	for f, w := range want {
		if !slices.Equal(got[f], w) {
			t.Errorf("%s: dead letters of flow %s at %q, want %q", what, f, got[f], w)
		}
		if counts[f] != int64(len(w)) {
			t.Errorf("%s: the ledger counts %d dead letters of flow %s, the table holds %d", what, counts[f], f, len(got[f]))
		}
	}
	for f := range got {
		if _, ok := want[f]; !ok {
			t.Errorf("%s: unexpected dead letters of flow %s: %q", what, f, got[f])
		}
	}
}

// testResetDeadLetters: a reset forgets its flows' loads, so it removes
// their dead letters too; the flows' replay writes them again. Each dead
// letter is then in _sluice_dead_letters once, and the ledger's counts say
// the same. Other flows' dead letters stay.
func testResetDeadLetters(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, ordersTable, shipmentsTable)
	h.commitWithDeadLetters(s, "a", "orders", 0, 5, "0/1", "0/3")
	h.commitWithDeadLetters(s, "a", "orders", 5, 8, "0/6")
	h.commitWithDeadLetters(s, "c", "shipments", 0, 4, "0/2")
	expectDeadLetters(t, s, "before the reset", map[string][]string{"a": {"0/1", "0/3", "0/6"}, "c": {"0/2"}})

	reset(t, s, []string{"orders"}, []string{"a"})
	for i, r := range []sinks.Sink{s, h.sink()} {
		expectDeadLetters(t, r, fmt.Sprintf("after the reset (sink %d)", i), map[string][]string{"c": {"0/2"}})
	}
	// The replay writes them again, once.
	h.commitWithDeadLetters(s, "a", "orders", 0, 5, "0/1", "0/3")
	h.commitWithDeadLetters(s, "a", "orders", 5, 8, "0/6")
	reset(t, s, []string{"shipments"}, []string{"c"}) // another flow's reset leaves them
	h.commitWithDeadLetters(s, "c", "shipments", 0, 4, "0/2")
	r := h.sink()
	recoverLedger(t, r)
	expectDeadLetters(t, r, "after the replay", map[string][]string{"a": {"0/1", "0/3", "0/6"}, "c": {"0/2"}})
}

func testResetTwice(t *testing.T, h *harness, c config) {
	s := h.sink()
	tables, flows := []string{"orders"}, []string{"a"}
	if c.appendOnly {
		ensure(t, s, ordersTable)
		h.mustCommit(s, "a", "orders", 0, 5)
	} else {
		ensure(t, s, ordersTable, scd1Table)
		h.mustCommit(s, "a", "orders", 0, 5)
		h.mustCDC(s, "f", upsert1(scd1Table.Name, r1{1, "a", 10, 1}),
			putState(scd1Table.Name, sinks.StateEntry{Key: encKey(1), Value: []byte("s1")}))
		tables, flows = append(tables, scd1Table.Name), append(flows, "f")
	}
	reset(t, s, tables, flows)
	reset(t, s, tables, flows)
	reset(t, h.sink(), tables, flows)
	expectIDs(t, s, "orders", "after three resets", []int64{})
	if !c.appendOnly {
		expectContent(t, s, scd1Table, "after three resets")
		expectState(t, s, scd1Table.Name, "after three resets", []string{encKey(1)}, nil)
	}
	expectPosition(t, ledger(t, s), "after three resets", "a", -1)
	h.mustCommit(s, "a", "orders", 0, 3)
	expectIDs(t, s, "orders", "a load after three resets", seq(0, 3))
	expectPosition(t, recoverLedger(t, h.sink()), "a load after three resets", "a", 3)
}

func testResetCrash(t *testing.T, h *harness, c config) {
	if c.crashReset == nil {
		t.Fatalf("RunReset needs the CrashReset option to simulate a crash after a reset's commit point")
	}
	s := h.sink()
	tables, flows := []string{"orders"}, []string{"a"}
	if c.appendOnly {
		ensure(t, s, ordersTable, shipmentsTable)
	} else {
		ensure(t, s, ordersTable, shipmentsTable, scd1Table)
	}
	h.commitWithDeadLetters(s, "a", "orders", 0, 5, "0/2")
	h.commitWithDeadLetters(s, "c", "shipments", 0, 4, "0/3")
	if !c.appendOnly {
		h.mustCDC(s, "f", upsert1(scd1Table.Name, r1{1, "a", 10, 1}),
			putState(scd1Table.Name, sinks.StateEntry{Key: encKey(1), Value: []byte("s1")}))
		tables, flows = append(tables, scd1Table.Name), append(flows, "f")
	}

	c.crashReset(t, s, tables, flows)

	r := h.sink()
	// The commit point passed: the ledger forgot the positions even before
	// recovery.
	expectPosition(t, ledger(t, r), "after the crash", "a", -1)
	l := recoverLedger(t, r)
	expectPosition(t, l, "after the crash and Recover", "a", -1)
	expectPosition(t, l, "after the crash and Recover", "c", 4)
	if _, ok := sinks.LedgerHeads(l, "f").Kafka()[batch.TopicPartition{Topic: "cdc", Partition: 0}]; ok {
		t.Errorf("flow f keeps a ledger position after the crash and Recover")
	}
	expectIDs(t, r, "orders", "after the crash and Recover", []int64{})
	expectIDs(t, r, "shipments", "after the crash and Recover", seq(0, 4))
	if !c.appendOnly {
		expectContent(t, r, scd1Table, "after the crash and Recover")
		expectState(t, r, scd1Table.Name, "after the crash and Recover", []string{encKey(1)}, nil)
	}
	expectDeadLetters(t, r, "after the crash and Recover", map[string][]string{"c": {"0/3"}})
	h.mustCommit(r, "a", "orders", 0, 2)
	expectIDs(t, r, "orders", "a load after the recovered reset", seq(0, 2))
}
