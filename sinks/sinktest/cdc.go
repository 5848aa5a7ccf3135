package sinktest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
)

// RunCDC runs the conformance suite of CDC targets: a sink that holds SCD
// targets returns sinks.CDCLoad from Begin and implements
// sinks.StateReader and sinks.Leaser. The suite builds the engine's output
// by hand (keys and sequences are opaque strings that order bytewise), so it
// tests the sink alone: SCD type 1 upsert, replace and remove, SCD type 2
// versions identified by (key, __START_AT), TruncateBelow, the order in
// which a load applies its parts, hidden state through GetState, replayed
// and unfinished loads, the lease, and dead letters in the same load.
//
// Scan of a CDC target must return its declared columns only (no _sluice_
// columns): the logical content.
func RunCDC(t *testing.T, newDestination Factory, opts ...Option) {
	tests := []suiteCase{
		{"capabilities", testCDCCapabilities},
		{"scd1_upsert_replace_remove", testSCD1},
		{"scd1_load_applies_remove_before_upsert", testSCD1Order},
		{"scd1_many_rows", testSCD1Many},
		{"scd2_versions", testSCD2},
		{"truncate_below", testTruncateBelow},
		{"states_round_trip", testStates},
		{"states_many_keys", testStatesMany},
		{"key_state_probe", testKeyStateProbe},
		{"replayed_load_changes_nothing", testCDCReplay},
		{"uncommitted_load_leaves_nothing", testCDCUncommitted},
		{"aborted_load_leaves_nothing", testCDCAbort},
		{"one_load_several_targets", testCDCSeveralTargets},
		{"dead_letters_in_same_load", testCDCDeadLetters},
		{"lease_excludes_second_holder", testLease},
		{"lease_taken_over_fences_its_old_holder", testLeaseFenced},
		{"ensure_adds_nullable_column", testCDCEnsureAdd},
	}
	runCases(t, newDestination, tests)
}

// The SCD type 1 target: one row per key.
var scd1Schema = batch.Schema{Columns: []batch.Column{
	{Name: "id", Type: batch.Int64},
	{Name: "name", Type: batch.String, Nullable: true},
	{Name: "score", Type: batch.Int64, Nullable: true},
}}

var scd1Table = sinks.Table{Name: "customers", Schema: scd1Schema, Kind: sinks.KindSCD1, Keys: []string{"id"}}

// The SCD type 2 target: one row per version, __START_AT and __END_AT typed
// like an int64 sequence.
var scd2Schema = batch.Schema{Columns: []batch.Column{
	{Name: "id", Type: batch.Int64},
	{Name: "name", Type: batch.String, Nullable: true},
	{Name: "__START_AT", Type: batch.Int64},
	{Name: "__END_AT", Type: batch.Int64, Nullable: true},
}}

var scd2Table = sinks.Table{Name: "customers_history", Schema: scd2Schema, Kind: sinks.KindSCD2, Keys: []string{"id"}}

// encKey and encSeq stand for the engine's order-preserving encodings: any
// strings that order bytewise like the values do.
func encKey(id int64) string  { return fmt.Sprintf("k\x00%08d", id) }
func encSeq(seq int64) string { return fmt.Sprintf("s\x01%08d", seq) }

// r1 is an SCD type 1 row: name "" is NULL, score < 0 is NULL; seq is the
// sequence of the change it shows.
type r1 struct {
	id    int64
	name  string
	score int64
	seq   int64
}

// rows1 returns SCD type 1 rows with their identities.
func rows1(rs ...r1) (*batch.Batch, []string, []string) {
	b := batch.New(scd1Schema, len(rs))
	keys := make([]string, 0, len(rs))
	seqs := make([]string, 0, len(rs))
	for _, r := range rs {
		b.Vectors[0].AppendInt(r.id)
		if r.name == "" {
			b.Vectors[1].AppendNull()
		} else {
			b.Vectors[1].AppendString(r.name)
		}
		if r.score < 0 {
			b.Vectors[2].AppendNull()
		} else {
			b.Vectors[2].AppendInt(r.score)
		}
		keys = append(keys, encKey(r.id))
		seqs = append(seqs, encSeq(r.seq))
	}
	return b, keys, seqs
}

// r2 is an SCD type 2 version: end 0 is NULL (current).
type r2 struct {
	id         int64
	name       string
	start, end int64
}

// rows2 returns SCD type 2 versions with their identities (key, __START_AT).
func rows2(rs ...r2) (*batch.Batch, []string, []string) {
	b := batch.New(scd2Schema, len(rs))
	keys := make([]string, 0, len(rs))
	seqs := make([]string, 0, len(rs))
	for _, r := range rs {
		b.Vectors[0].AppendInt(r.id)
		if r.name == "" {
			b.Vectors[1].AppendNull()
		} else {
			b.Vectors[1].AppendString(r.name)
		}
		b.Vectors[2].AppendInt(r.start)
		if r.end == 0 {
			b.Vectors[3].AppendNull()
		} else {
			b.Vectors[3].AppendInt(r.end)
		}
		keys = append(keys, encKey(r.id))
		seqs = append(seqs, encSeq(r.start))
	}
	return b, keys, seqs
}

// cdcOp is one call on a CDC load.
type cdcOp func(ctx context.Context, ld sinks.CDCLoad) error

func upsert1(table string, rs ...r1) cdcOp {
	return func(ctx context.Context, ld sinks.CDCLoad) error {
		b, k, s := rows1(rs...)
		return ld.Upsert(ctx, table, b, k, s)
	}
}

func remove1(table string, rs ...r1) cdcOp {
	return func(ctx context.Context, ld sinks.CDCLoad) error {
		b, k, s := rows1(rs...)
		return ld.Remove(ctx, table, b, k, s)
	}
}

func upsert2(table string, rs ...r2) cdcOp {
	return func(ctx context.Context, ld sinks.CDCLoad) error {
		b, k, s := rows2(rs...)
		return ld.Upsert(ctx, table, b, k, s)
	}
}

func remove2(table string, rs ...r2) cdcOp {
	return func(ctx context.Context, ld sinks.CDCLoad) error {
		b, k, s := rows2(rs...)
		return ld.Remove(ctx, table, b, k, s)
	}
}

func truncateBelow(table string, seq int64) cdcOp {
	return func(ctx context.Context, ld sinks.CDCLoad) error {
		return ld.TruncateBelow(ctx, table, encSeq(seq))
	}
}

func putState(table string, entries ...sinks.StateEntry) cdcOp {
	return func(ctx context.Context, ld sinks.CDCLoad) error {
		return ld.PutState(ctx, table, entries)
	}
}

func writeRows(table string, b *batch.Batch) cdcOp {
	return func(ctx context.Context, ld sinks.CDCLoad) error {
		return ld.Write(ctx, table, b)
	}
}

// beginCDC begins a load and checks that it is a CDCLoad.
func (h *harness) beginCDC(s sinks.Sink, flow string, targets ...string) (sinks.CDCLoad, string) {
	h.t.Helper()
	id := h.loadID()
	ld, err := s.Begin(context.Background(), sinks.LoadMeta{LoadID: id, Pipeline: Pipeline, Flow: flow, Targets: targets, Generation: 1})
	if err != nil {
		h.t.Fatalf("Begin: %v", err)
	}
	cl, ok := ld.(sinks.CDCLoad)
	if !ok {
		ld.Abort(context.Background())
		h.t.Fatalf("Begin returned %T, which does not implement sinks.CDCLoad", ld)
	}
	return cl, id
}

// cdcCommit applies ops in one load and commits it, continuing the flow's
// position on topic "cdc" partition 0 from the ledger by one offset.
func (h *harness) cdcCommit(s sinks.Sink, flow string, ops ...cdcOp) (string, error) {
	h.t.Helper()
	ctx := context.Background()
	from := int64(-1)
	if off, ok := sinks.LedgerHeads(ledger(h.t, s), flow).Kafka()[batch.TopicPartition{Topic: "cdc", Partition: 0}]; ok {
		from = off
	}
	ld, id := h.beginCDC(s, flow, scd1Table.Name, scd2Table.Name)
	for i, op := range ops {
		if err := op(ctx, ld); err != nil {
			ld.Abort(ctx)
			h.t.Fatalf("load %s, call %d: %v", id, i, err)
		}
	}
	to := max(from, 0) + 1
	return id, ld.Commit(ctx, sinks.Commit{
		From: batch.Positions{kafka("cdc", 0, from)},
		To:   batch.Positions{kafka("cdc", 0, to)},
	})
}

// mustCDC is cdcCommit that fails the test on a commit error.
func (h *harness) mustCDC(s sinks.Sink, flow string, ops ...cdcOp) string {
	h.t.Helper()
	id, err := h.cdcCommit(s, flow, ops...)
	if err != nil {
		h.t.Fatalf("Commit of load %s: %v", id, err)
	}
	return id
}

// content renders a CDC target's logical content as sorted lines, after
// checking that Scan returns exactly the declared columns.
func content(t *testing.T, s sinks.Sink, table sinks.Table) []string {
	t.Helper()
	b := scan(t, s, table.Name)
	if got, want := b.Schema.Names(), table.Schema.Names(); !slices.Equal(got, want) {
		t.Fatalf("Scan %s: columns %v, want exactly the declared %v (no _sluice_ columns)", table.Name, got, want)
	}
	lines := make([]string, b.Len())
	for i := range b.Len() {
		var sb strings.Builder
		for c, v := range b.Row(i) {
			if c > 0 {
				sb.WriteByte('|')
			}
			if v == nil {
				sb.WriteString("NULL")
			} else {
				fmt.Fprint(&sb, v)
			}
		}
		lines[i] = sb.String()
	}
	slices.SortFunc(lines, compareLines)
	return lines
}

// compareLines orders rendered rows by their leading integer id, then
// bytewise.
func compareLines(a, b string) int {
	var x, y int64
	fmt.Sscan(strings.SplitN(a, "|", 2)[0], &x)
	fmt.Sscan(strings.SplitN(b, "|", 2)[0], &y)
	if x != y {
		if x < y {
			return -1
		}
		return 1
	}
	return strings.Compare(a, b)
}

func expectContent(t *testing.T, s sinks.Sink, table sinks.Table, what string, want ...string) {
	t.Helper()
	got := content(t, s, table)
	want = append([]string{}, want...)
	slices.SortFunc(want, compareLines)
	if !slices.Equal(got, want) {
		t.Fatalf("%s: %s holds\n  %s\nwant\n  %s", what, table.Name, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func stateReader(t *testing.T, s sinks.Sink) sinks.StateReader {
	t.Helper()
	r, ok := s.(sinks.StateReader)
	if !ok {
		t.Fatalf("%T does not implement sinks.StateReader", s)
	}
	return r
}

func getState(t *testing.T, s sinks.Sink, table string, keys ...string) map[string][]byte {
	t.Helper()
	got, err := stateReader(t, s).GetState(context.Background(), table, keys)
	if err != nil {
		t.Fatalf("GetState %s: %v", table, err)
	}
	return got
}

// expectState checks GetState of keys against want (absent keys have no
// state).
func expectState(t *testing.T, s sinks.Sink, table, what string, keys []string, want map[string][]byte) {
	t.Helper()
	got := getState(t, s, table, keys...)
	for k, v := range got {
		w, ok := want[k]
		switch {
		case !ok:
			t.Errorf("%s: GetState %s returned key %q, which has no state", what, table, k)
		case !bytes.Equal(v, w):
			t.Errorf("%s: GetState %s key %q = %q, want %q", what, table, k, v, w)
		}
	}
	for k := range want {
		if _, ok := got[k]; !ok {
			t.Errorf("%s: GetState %s lacks key %q", what, table, k)
		}
	}
}

func testCDCCapabilities(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, scd1Table, scd2Table)
	ensure(t, s, scd1Table, scd2Table) // idempotent
	recoverLedger(t, s)
	if _, ok := s.(sinks.StateReader); !ok {
		t.Errorf("%T does not implement sinks.StateReader", s)
	}
	if _, ok := s.(sinks.Leaser); !ok {
		t.Errorf("%T does not implement sinks.Leaser", s)
	}
	ld, _ := h.beginCDC(s, "f", scd1Table.Name)
	if err := ld.Abort(context.Background()); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	expectContent(t, s, scd1Table, "new table")
	expectContent(t, s, scd2Table, "new table")
	if got := getState(t, s, scd1Table.Name, encKey(1), ""); len(got) != 0 {
		t.Fatalf("GetState of a new table: %d entries, want none", len(got))
	}
	if got := getState(t, s, scd1Table.Name); len(got) != 0 {
		t.Fatalf("GetState of no keys: %d entries, want none", len(got))
	}
	// Changing a target's kind or keys is refused.
	for _, tc := range []struct {
		name  string
		table sinks.Table
	}{
		{"kind changed", sinks.Table{Name: scd1Table.Name, Schema: scd1Schema, Kind: sinks.KindAppend}},
		{"scd type changed", sinks.Table{Name: scd1Table.Name, Schema: scd1Schema, Kind: sinks.KindSCD2, Keys: []string{"id"}}},
		{"keys changed", sinks.Table{Name: scd1Table.Name, Schema: scd1Schema, Kind: sinks.KindSCD1, Keys: []string{"id", "name"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.Ensure(context.Background(), []sinks.Table{tc.table}); err == nil {
				t.Fatalf("Ensure accepted %s", tc.name)
			}
		})
	}
}

func testSCD1(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, scd1Table, scd2Table)
	h.mustCDC(s, "f", upsert1(scd1Table.Name,
		r1{1, "ann", 10, 1}, r1{2, "bob", -1, 1}, r1{3, "", 30, 1}, r1{4, "dan", 40, 2}, r1{5, "eve", 50, 2}))
	expectContent(t, s, scd1Table, "after inserts",
		"1|ann|10", "2|bob|NULL", "3|NULL|30", "4|dan|40", "5|eve|50")

	// Replace 2 and 4, remove 3 and 5, insert 6; removing a key that has no
	// row changes nothing.
	h.mustCDC(s, "f",
		upsert1(scd1Table.Name, r1{2, "bobby", 21, 3}, r1{6, "fay", 60, 3}),
		upsert1(scd1Table.Name, r1{4, "", -1, 4}),
		remove1(scd1Table.Name, r1{3, "", 30, 1}, r1{5, "eve", 50, 2}, r1{99, "ghost", 1, 1}))
	want := []string{"1|ann|10", "2|bobby|21", "4|NULL|NULL", "6|fay|60"}
	expectContent(t, s, scd1Table, "after replace and remove", want...)
	expectContent(t, s, scd2Table, "the other target", []string{}...)

	// A removed key comes back.
	h.mustCDC(s, "f", upsert1(scd1Table.Name, r1{3, "cy", 33, 5}))
	want = []string{"1|ann|10", "2|bobby|21", "3|cy|33", "4|NULL|NULL", "6|fay|60"}
	expectContent(t, s, scd1Table, "after re-insert", want...)

	recoverLedger(t, s)
	expectContent(t, s, scd1Table, "after Recover", want...)
	s2 := h.sink()
	recoverLedger(t, s2)
	expectContent(t, s2, scd1Table, "after reopening", want...)
	if n := len(ledger(t, s2).Loads); n != 3 {
		t.Fatalf("ledger has %d loads, want 3", n)
	}
}

func testSCD1Order(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, scd1Table, scd2Table)
	h.mustCDC(s, "f", upsert1(scd1Table.Name, r1{1, "a", 1, 1}, r1{2, "b", 2, 1}, r1{3, "c", 3, 1}))
	// Calls come in any order; the load removes first, then upserts: a key
	// removed and upserted in one load keeps the upserted row.
	h.mustCDC(s, "f",
		upsert1(scd1Table.Name, r1{1, "a2", 11, 2}),
		remove1(scd1Table.Name, r1{1, "a", 1, 1}),
		upsert1(scd1Table.Name, r1{4, "d", 4, 2}),
		remove1(scd1Table.Name, r1{2, "b", 2, 1}))
	expectContent(t, s, scd1Table, "after one load of upserts and removes", "1|a2|11", "3|c|3", "4|d|4")
	// Within one load, the later of two upserts of an identity wins.
	h.mustCDC(s, "f",
		upsert1(scd1Table.Name, r1{3, "c2", 32, 3}),
		upsert1(scd1Table.Name, r1{3, "c3", 33, 4}))
	expectContent(t, s, scd1Table, "after two upserts of one key", "1|a2|11", "3|c3|33", "4|d|4")
}

func testSCD1Many(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, scd1Table, scd2Table)
	const n = 3000
	var rs []r1
	for i := range int64(n) {
		rs = append(rs, r1{i, fmt.Sprintf("n%d", i), i, 1})
	}
	h.mustCDC(s, "f", upsert1(scd1Table.Name, rs...))
	// Replace every third, remove every fifth (some both: the upsert wins),
	// add a few.
	var up, rm []r1
	for i := range int64(n) {
		if i%3 == 0 {
			up = append(up, r1{i, fmt.Sprintf("m%d", i), -1, 2})
		}
		if i%5 == 0 {
			rm = append(rm, rs[i])
		}
	}
	for i := int64(n); i < n+10; i++ {
		up = append(up, r1{i, "new", i, 2})
	}
	h.mustCDC(s, "f", upsert1(scd1Table.Name, up...), remove1(scd1Table.Name, rm...))
	var want []string
	for i := range int64(n + 10) {
		switch {
		case i >= n:
			want = append(want, fmt.Sprintf("%d|new|%d", i, i))
		case i%3 == 0:
			want = append(want, fmt.Sprintf("%d|m%d|NULL", i, i))
		case i%5 == 0:
		default:
			want = append(want, fmt.Sprintf("%d|n%d|%d", i, i, i))
		}
	}
	expectContent(t, s, scd1Table, "after a large load", want...)
	expectContent(t, h.sink(), scd1Table, "in a new sink", want...)
}

func testSCD2(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, scd1Table, scd2Table)
	h.mustCDC(s, "f", upsert2(scd2Table.Name, r2{1, "a", 10, 0}, r2{2, "p", 10, 0}))
	expectContent(t, s, scd2Table, "after inserts", "1|a|10|NULL", "2|p|10|NULL")

	// A new version closes the current one: the closed version replaces the
	// row of its identity (key, __START_AT); the new one is another row.
	h.mustCDC(s, "f", upsert2(scd2Table.Name, r2{1, "a", 10, 20}, r2{1, "b", 20, 0}))
	expectContent(t, s, scd2Table, "after a new version", "1|a|10|20", "1|b|20|NULL", "2|p|10|NULL")

	// A late version splits history: the version it lands in is replaced
	// (shortened), the late one added. A delete closes key 2.
	h.mustCDC(s, "f",
		upsert2(scd2Table.Name, r2{1, "a", 10, 15}, r2{1, "late", 15, 20}),
		upsert2(scd2Table.Name, r2{2, "p", 10, 25}))
	want := []string{"1|a|10|15", "1|late|15|20", "1|b|20|NULL", "2|p|10|25"}
	expectContent(t, s, scd2Table, "after a late version", want...)

	// Removing one version of a key leaves its other versions; a removed
	// version and a new one at the same start in one load: the new one.
	h.mustCDC(s, "f",
		upsert2(scd2Table.Name, r2{1, "a", 10, 20}, r2{1, "b2", 20, 0}),
		remove2(scd2Table.Name, r2{1, "late", 15, 20}, r2{1, "b", 20, 0}))
	want = []string{"1|a|10|20", "1|b2|20|NULL", "2|p|10|25"}
	expectContent(t, s, scd2Table, "after removing versions", want...)

	// An earliest version, before all history.
	h.mustCDC(s, "f", upsert2(scd2Table.Name, r2{2, "early", 5, 10}))
	want = []string{"1|a|10|20", "1|b2|20|NULL", "2|early|5|10", "2|p|10|25"}
	expectContent(t, s, scd2Table, "after an earliest version", want...)
	expectContent(t, h.sink(), scd2Table, "in a new sink", want...)
}

func testTruncateBelow(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, scd1Table, scd2Table)
	var rs []r1
	for i := int64(1); i <= 8; i++ {
		rs = append(rs, r1{i, fmt.Sprintf("n%d", i), i, i})
	}
	h.mustCDC(s, "f", upsert1(scd1Table.Name, rs...))
	// The truncate applies first, whatever the call order: rows below seq 5
	// go, the load's own rows (all at or above it) stay, and the removal of
	// a row the truncate already removed is harmless.
	h.mustCDC(s, "f",
		upsert1(scd1Table.Name, r1{2, "two", 2, 9}, r1{9, "nine", 9, 9}),
		remove1(scd1Table.Name, r1{3, "n3", 3, 3}, r1{6, "n6", 6, 6}),
		truncateBelow(scd1Table.Name, 5),
		putState(scd1Table.Name, sinks.StateEntry{Key: "", Value: []byte("barrier 5")}))
	want := []string{"2|two|2", "5|n5|5", "7|n7|7", "8|n8|8", "9|nine|9"}
	expectContent(t, s, scd1Table, "after truncate below 5", want...)
	// A truncate at or below every row removes nothing; applying it again
	// too.
	h.mustCDC(s, "f", truncateBelow(scd1Table.Name, 5))
	h.mustCDC(s, "f", truncateBelow(scd1Table.Name, 1))
	expectContent(t, s, scd1Table, "after truncates that remove nothing", want...)
	// A truncate above everything empties the table.
	h.mustCDC(s, "f", truncateBelow(scd1Table.Name, 100), upsert1(scd1Table.Name, r1{10, "ten", 10, 100}))
	expectContent(t, s, scd1Table, "after truncate below 100", "10|ten|10")
	expectState(t, s, scd1Table.Name, "table state", []string{""}, map[string][]byte{"": []byte("barrier 5")})
}

func testStates(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, scd1Table, scd2Table)
	k1, k2, k3 := encKey(1), encKey(2), encKey(3)
	binary := []byte{0, 1, 2, 0xff, 0, '\n'}
	h.mustCDC(s, "f",
		upsert1(scd1Table.Name, r1{1, "a", 1, 1}),
		putState(scd1Table.Name,
			sinks.StateEntry{Key: k1, Value: []byte("state of 1")},
			sinks.StateEntry{Key: k2, Value: binary},
			sinks.StateEntry{Key: "", Value: []byte("table")}),
		putState(scd2Table.Name, sinks.StateEntry{Key: k1, Value: []byte("other table")}))
	keys := []string{k1, k2, k3, ""}
	want := map[string][]byte{k1: []byte("state of 1"), k2: binary, "": []byte("table")}
	expectState(t, s, scd1Table.Name, "after the first load", keys, want)
	expectState(t, s, scd2Table.Name, "the other table", keys, map[string][]byte{k1: []byte("other table")})
	expectState(t, s, scd1Table.Name, "one key", []string{k2}, map[string][]byte{k2: binary})

	// A nil value removes a key's state; states replace.
	h.mustCDC(s, "f", putState(scd1Table.Name,
		sinks.StateEntry{Key: k1, Value: nil},
		sinks.StateEntry{Key: k2, Value: []byte("2 again")},
		sinks.StateEntry{Key: k3, Value: []byte("three")}))
	want = map[string][]byte{k2: []byte("2 again"), k3: []byte("three"), "": []byte("table")}
	expectState(t, s, scd1Table.Name, "after the second load", keys, want)

	// An uncommitted load's states are not visible.
	ld, _ := h.beginCDC(s, "f", scd1Table.Name)
	if err := ld.PutState(context.Background(), scd1Table.Name, []sinks.StateEntry{{Key: k1, Value: []byte("uncommitted")}, {Key: "", Value: nil}}); err != nil {
		t.Fatal(err)
	}
	expectState(t, s, scd1Table.Name, "during an open load", keys, want)
	if err := ld.Abort(context.Background()); err != nil {
		t.Fatal(err)
	}
	expectState(t, s, scd1Table.Name, "after an aborted load", keys, want)

	// Removing the table state.
	h.mustCDC(s, "f", putState(scd1Table.Name, sinks.StateEntry{Key: "", Value: nil}))
	delete(want, "")
	expectState(t, s, scd1Table.Name, "after removing the table state", keys, want)
	s2 := h.sink()
	recoverLedger(t, s2)
	expectState(t, s2, scd1Table.Name, "in a new sink", keys, want)
	expectContent(t, s2, scd1Table, "rows beside states", "1|a|1")
}

// testKeyStateProbe checks HasKeyStates: no key state in a new table, nor
// with a table state alone or an open load's; a committed key state shows,
// in its own table only, and stays while removed.
func testKeyStateProbe(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, scd1Table, scd2Table)
	p, ok := s.(sinks.KeyStateProber)
	if !ok {
		t.Fatalf("%T does not implement sinks.KeyStateProber", s)
	}
	expect := func(what string, s sinks.Sink, table string, want bool) {
		t.Helper()
		has, err := s.(sinks.KeyStateProber).HasKeyStates(context.Background(), table)
		if err != nil || has != want {
			t.Fatalf("%s: HasKeyStates %s = %v, %v; want %v", what, table, has, err, want)
		}
	}
	expect("a new table", s, scd1Table.Name, false)
	h.mustCDC(s, "f", putState(scd1Table.Name, sinks.StateEntry{Key: "", Value: []byte("table")}))
	expect("a table state alone", s, scd1Table.Name, false)

	ld, _ := h.beginCDC(s, "f", scd1Table.Name)
	if err := ld.PutState(context.Background(), scd1Table.Name, []sinks.StateEntry{{Key: encKey(1), Value: []byte("open")}}); err != nil {
		t.Fatal(err)
	}
	expect("during an open load", s, scd1Table.Name, false)
	if err := ld.Abort(context.Background()); err != nil {
		t.Fatal(err)
	}
	expect("after an aborted load", s, scd1Table.Name, false)

	h.mustCDC(s, "f", putState(scd1Table.Name, sinks.StateEntry{Key: encKey(1), Value: []byte("one")}))
	expect("after a committed key state", s, scd1Table.Name, true)
	expect("the other table", s, scd2Table.Name, false)
	s2 := h.sink()
	recoverLedger(t, s2)
	expect("in a new sink", s2, scd1Table.Name, true)
	if _, err := p.HasKeyStates(context.Background(), "no_such_table"); err == nil {
		t.Fatal("HasKeyStates of an unknown table succeeded")
	}
}

func testStatesMany(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, scd1Table, scd2Table)
	const n = 5000
	entries := make([]sinks.StateEntry, 0, n)
	keys := make([]string, 0, n+100)
	for i := range int64(n) {
		entries = append(entries, sinks.StateEntry{Key: encKey(i), Value: []byte(fmt.Sprintf("v%d", i))})
		keys = append(keys, encKey(i))
	}
	h.mustCDC(s, "f", putState(scd1Table.Name, entries...))
	for i := int64(n); i < n+100; i++ {
		keys = append(keys, encKey(i))
	}
	got := getState(t, s, scd1Table.Name, keys...)
	if len(got) != n {
		t.Fatalf("GetState of %d keys: %d states, want %d", len(keys), len(got), n)
	}
	for i := range int64(n) {
		if v := got[encKey(i)]; string(v) != fmt.Sprintf("v%d", i) {
			t.Fatalf("key %d: state %q, want v%d", i, v, i)
		}
	}
}

// replayLoad is the engine output the replay test applies twice.
func replayLoad() []cdcOp {
	return []cdcOp{
		truncateBelow(scd1Table.Name, 2),
		remove1(scd1Table.Name, r1{3, "c", 3, 3}),
		upsert1(scd1Table.Name, r1{1, "a2", 11, 4}, r1{5, "e", 5, 4}),
		upsert2(scd2Table.Name, r2{1, "x", 1, 4}, r2{1, "y", 4, 0}),
		remove2(scd2Table.Name, r2{2, "gone", 2, 0}),
		putState(scd1Table.Name, sinks.StateEntry{Key: encKey(1), Value: []byte("s1@4")},
			sinks.StateEntry{Key: encKey(3), Value: []byte("tomb@4")}, sinks.StateEntry{Key: "", Value: []byte("t@2")}),
		putState(scd2Table.Name, sinks.StateEntry{Key: encKey(2), Value: nil}),
	}
}

func testCDCReplay(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, scd1Table, scd2Table)
	h.mustCDC(s, "f",
		upsert1(scd1Table.Name, r1{1, "a", 1, 1}, r1{2, "b", 2, 2}, r1{3, "c", 3, 3}, r1{4, "d", 4, 4}),
		upsert2(scd2Table.Name, r2{1, "x", 1, 0}, r2{2, "gone", 2, 0}),
		putState(scd2Table.Name, sinks.StateEntry{Key: encKey(2), Value: []byte("v2")}))
	h.mustCDC(s, "f", replayLoad()...)
	want1 := []string{"1|a2|11", "2|b|2", "4|d|4", "5|e|5"}
	want2 := []string{"1|x|1|4", "1|y|4|NULL"}
	keys := []string{encKey(1), encKey(2), encKey(3), ""}
	st1 := map[string][]byte{encKey(1): []byte("s1@4"), encKey(3): []byte("tomb@4"), "": []byte("t@2")}
	check := func(s sinks.Sink, what string) {
		t.Helper()
		expectContent(t, s, scd1Table, what, want1...)
		expectContent(t, s, scd2Table, what, want2...)
		expectState(t, s, scd1Table.Name, what, keys, st1)
		expectState(t, s, scd2Table.Name, what, keys, map[string][]byte{})
	}
	check(s, "after the load")
	// The same changes again in a new load (a batch replayed after a crash
	// whose engine output was recomputed): nothing changes.
	h.mustCDC(s, "f", replayLoad()...)
	check(s, "after the replayed load")
	s2 := h.sink()
	h.mustCDC(s2, "f", replayLoad()...)
	recoverLedger(t, s2)
	check(s2, "after a replay in a new sink")
}

func testCDCUncommitted(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, scd1Table, scd2Table)
	h.mustCDC(s, "f",
		upsert1(scd1Table.Name, r1{1, "a", 1, 1}, r1{2, "b", 2, 1}),
		upsert2(scd2Table.Name, r2{1, "x", 1, 0}),
		putState(scd1Table.Name, sinks.StateEntry{Key: encKey(1), Value: []byte("one")}, sinks.StateEntry{Key: "", Value: []byte("t")}))
	ctx := context.Background()
	ld, _ := h.beginCDC(s, "f", scd1Table.Name, scd2Table.Name)
	for i, op := range []cdcOp{
		truncateBelow(scd1Table.Name, 5),
		upsert1(scd1Table.Name, r1{3, "c", 3, 6}),
		remove1(scd1Table.Name, r1{2, "b", 2, 1}),
		upsert2(scd2Table.Name, r2{1, "x", 1, 6}, r2{1, "y", 6, 0}),
		putState(scd1Table.Name, sinks.StateEntry{Key: encKey(1), Value: nil}, sinks.StateEntry{Key: encKey(3), Value: []byte("three")},
			sinks.StateEntry{Key: "", Value: []byte("t2")}),
		writeRows(batch.DeadLettersTable, batch.DeadLetterBatch([]batch.DeadLetter{{Pipeline: Pipeline, Flow: "f", Target: scd1Table.Name,
			Source: "cdc", Position: "0/9", Reason: batch.ReasonNullKey, Error: "key id is null", At: time.Now().UTC()}})),
	} {
		if err := op(ctx, ld); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	// The writer goes away without Commit or Abort; a new process recovers.
	s2 := h.sink()
	if l := recoverLedger(t, s2); len(l.Loads) != 1 {
		t.Fatalf("Recover returned %d loads, want 1", len(l.Loads))
	}
	keys := []string{encKey(1), encKey(2), encKey(3), ""}
	st := map[string][]byte{encKey(1): []byte("one"), "": []byte("t")}
	expectContent(t, s2, scd1Table, "after an uncommitted load", "1|a|1", "2|b|2")
	expectContent(t, s2, scd2Table, "after an uncommitted load", "1|x|1|NULL")
	expectState(t, s2, scd1Table.Name, "after an uncommitted load", keys, st)
	if n := scan(t, s2, batch.DeadLettersTable).Len(); n != 0 {
		t.Fatalf("%d dead letters of an uncommitted load", n)
	}
	// The destination takes the next load.
	h.mustCDC(s2, "f", upsert1(scd1Table.Name, r1{2, "b2", 22, 2}))
	expectContent(t, s2, scd1Table, "after the next load", "1|a|1", "2|b2|22")
	expectState(t, s2, scd1Table.Name, "after the next load", keys, st)
}

func testCDCAbort(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, scd1Table, scd2Table)
	h.mustCDC(s, "f", upsert1(scd1Table.Name, r1{1, "a", 1, 1}))
	ctx := context.Background()
	ld, _ := h.beginCDC(s, "f", scd1Table.Name)
	for i, op := range []cdcOp{
		truncateBelow(scd1Table.Name, 5),
		upsert1(scd1Table.Name, r1{2, "b", 2, 6}),
		putState(scd1Table.Name, sinks.StateEntry{Key: encKey(2), Value: []byte("two")}),
	} {
		if err := op(ctx, ld); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if err := ld.Abort(ctx); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	if err := ld.Commit(ctx, sinks.Commit{To: batch.Positions{kafka("cdc", 0, 9)}}); err == nil {
		t.Fatal("Commit after Abort succeeded")
	}
	expectContent(t, s, scd1Table, "after an aborted load", "1|a|1")
	expectState(t, s, scd1Table.Name, "after an aborted load", []string{encKey(2)}, map[string][]byte{})
}

func testCDCSeveralTargets(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, scd1Table, scd2Table, ordersTable)
	// One load writes two CDC targets, an append target and states.
	h.mustCDC(s, "f",
		upsert1(scd1Table.Name, r1{1, "a", 1, 1}),
		upsert2(scd2Table.Name, r2{1, "a", 1, 0}),
		writeRows(ordersTable.Name, orders(0, 3)),
		putState(scd1Table.Name, sinks.StateEntry{Key: encKey(1), Value: []byte("1")}),
		putState(scd2Table.Name, sinks.StateEntry{Key: encKey(1), Value: []byte("2")}))
	for _, s := range []sinks.Sink{s, h.sink()} {
		expectContent(t, s, scd1Table, "first target", "1|a|1")
		expectContent(t, s, scd2Table, "second target", "1|a|1|NULL")
		if got := ids(t, scan(t, s, ordersTable.Name), "id"); !slices.Equal(got, seq(0, 3)) {
			t.Fatalf("orders ids %v, want 0..2", got)
		}
		expectState(t, s, scd1Table.Name, "first target", []string{encKey(1)}, map[string][]byte{encKey(1): []byte("1")})
		expectState(t, s, scd2Table.Name, "second target", []string{encKey(1)}, map[string][]byte{encKey(1): []byte("2")})
	}
}

func testCDCDeadLetters(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, scd1Table, scd2Table)
	at := time.Date(2025, 5, 6, 7, 8, 9, 0, time.UTC)
	dls := []batch.DeadLetter{{Pipeline: Pipeline, Flow: "f", Target: scd1Table.Name, Source: "cdc", Position: "0/3",
		Reason: batch.ReasonNullSequence, Error: "sequence seq is null", Payload: []byte(`{"id":2}`), At: at}}
	id := h.mustCDC(s, "f",
		upsert1(scd1Table.Name, r1{1, "a", 1, 1}),
		writeRows(batch.DeadLettersTable, batch.DeadLetterBatch(dls)))
	expectContent(t, s, scd1Table, "beside dead letters", "1|a|1")
	b := scan(t, s, batch.DeadLettersTable)
	if b.Len() != 1 {
		t.Fatalf("%d dead letters, want 1", b.Len())
	}
	row := b.Row(0)
	if got, want := fmt.Sprint(row[:7]), fmt.Sprint([]any{Pipeline, "f", scd1Table.Name, "cdc", "0/3", batch.ReasonNullSequence, "sequence seq is null"}); got != want {
		t.Errorf("dead letter %s, want %s", got, want)
	}
	if got := b.Column(batch.LoadIDColumn).Strs[0]; got != id {
		t.Errorf("dead letter of load %s, want %s", got, id)
	}
}

func leaser(t *testing.T, s sinks.Sink) sinks.Leaser {
	t.Helper()
	l, ok := s.(sinks.Leaser)
	if !ok {
		t.Fatalf("%T does not implement sinks.Leaser", s)
	}
	return l
}

func testLease(t *testing.T, h *harness) {
	ctx := context.Background()
	s1, s2 := h.sink(), h.sink()
	ensure(t, s1, scd1Table, scd2Table)
	l1, l2 := leaser(t, s1), leaser(t, s2)
	const ttl = time.Minute
	if err := l1.AcquireLease(ctx, scd1Table.Name, "holder-1", ttl); err != nil {
		t.Fatalf("first AcquireLease: %v", err)
	}
	if err := l1.AcquireLease(ctx, scd1Table.Name, "holder-1", ttl); err != nil {
		t.Fatalf("renewing the lease: %v", err)
	}
	tests := []struct {
		name   string
		l      sinks.Leaser
		table  string
		holder string
		want   error
	}{
		{"another holder in another sink", l2, scd1Table.Name, "holder-2", sinks.ErrLeaseHeld},
		{"another holder in the same sink", l1, scd1Table.Name, "holder-3", sinks.ErrLeaseHeld},
		{"another table", l2, scd2Table.Name, "holder-2", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.l.AcquireLease(ctx, tc.table, tc.holder, ttl); !errors.Is(err, tc.want) && (err != nil || tc.want != nil) {
				t.Fatalf("AcquireLease %s by %s: %v, want %v", tc.table, tc.holder, err, tc.want)
			}
		})
	}
	// Releasing a lease one does not hold changes nothing.
	if err := l2.ReleaseLease(ctx, scd1Table.Name, "holder-2"); err != nil {
		t.Fatalf("ReleaseLease by a non-holder: %v", err)
	}
	if err := l2.AcquireLease(ctx, scd1Table.Name, "holder-2", ttl); !errors.Is(err, sinks.ErrLeaseHeld) {
		t.Fatalf("AcquireLease after a non-holder's release: %v, want ErrLeaseHeld", err)
	}
	// The lease holder writes.
	h.mustCDC(s1, "f", upsert1(scd1Table.Name, r1{1, "a", 1, 1}))
	if err := l1.ReleaseLease(ctx, scd1Table.Name, "holder-1"); err != nil {
		t.Fatalf("ReleaseLease: %v", err)
	}
	if err := l2.AcquireLease(ctx, scd1Table.Name, "holder-2", ttl); err != nil {
		t.Fatalf("AcquireLease after release: %v", err)
	}
	if err := l1.AcquireLease(ctx, scd1Table.Name, "holder-1", ttl); !errors.Is(err, sinks.ErrLeaseHeld) {
		t.Fatalf("AcquireLease by the former holder: %v, want ErrLeaseHeld", err)
	}
	h.mustCDC(s2, "f", upsert1(scd1Table.Name, r1{2, "b", 2, 2}))
	expectContent(t, s2, scd1Table, "after writes by both holders", "1|a|1", "2|b|2")
	if err := l2.ReleaseLease(ctx, scd1Table.Name, "holder-2"); err != nil {
		t.Fatal(err)
	}
	if err := l2.ReleaseLease(ctx, scd2Table.Name, "holder-2"); err != nil {
		t.Fatal(err)
	}
}

func testCDCEnsureAdd(t *testing.T, h *harness) {
	s := h.sink()
	ensure(t, s, scd1Table, scd2Table)
	h.mustCDC(s, "f", upsert1(scd1Table.Name, r1{1, "a", 1, 1}, r1{2, "b", 2, 1}))
	wider := batch.Schema{Columns: append(slices.Clone(scd1Schema.Columns), batch.Column{Name: "note", Type: batch.String, Nullable: true})}
	widerTable := sinks.Table{Name: scd1Table.Name, Schema: wider, Kind: sinks.KindSCD1, Keys: []string{"id"}}
	s2 := h.sink()
	ensure(t, s2, widerTable, scd2Table)
	b := batch.New(wider, 1)
	b.Vectors[0].AppendInt(2)
	b.Vectors[1].AppendString("b2")
	b.Vectors[2].AppendNull()
	b.Vectors[3].AppendString("noted")
	h.mustCDC(s2, "f", func(ctx context.Context, ld sinks.CDCLoad) error {
		return ld.Upsert(ctx, scd1Table.Name, b, []string{encKey(2)}, []string{encSeq(2)})
	})
	expectContent(t, s2, widerTable, "after adding a column", "1|a|1|NULL", "2|b2|NULL|noted")
}

// testLeaseFenced: a holder that stopped renewing its lease (paused, cut
// off) is taken over once the lease expired, although its Sink lives; from
// then on its commits of the target are refused with ErrLeaseLost, a load
// it began before the takeover included, and its next AcquireLease says
// the lease was lost. It then competes again like any other holder.
func testLeaseFenced(t *testing.T, h *harness) {
	ctx := context.Background()
	s1, s2 := h.sink(), h.sink()
	ensure(t, s1, scd1Table, scd2Table)
	l1, l2 := leaser(t, s1), leaser(t, s2)
	if err := l1.AcquireLease(ctx, scd1Table.Name, "holder-1", time.Minute); err != nil {
		t.Fatalf("AcquireLease: %v", err)
	}
	h.mustCDC(s1, "f", upsert1(scd1Table.Name, r1{1, "a", 1, 1}))
	// A load staged before the takeover, committed after it.
	ld, _ := h.beginCDC(s1, "f", scd1Table.Name)
	if err := upsert1(scd1Table.Name, r1{9, "late", 9, 9})(ctx, ld); err != nil {
		t.Fatal(err)
	}
	if err := l2.AcquireLease(ctx, scd1Table.Name, "holder-2", time.Minute); !errors.Is(err, sinks.ErrLeaseHeld) {
		t.Fatalf("AcquireLease of a live lease: %v, want ErrLeaseHeld", err)
	}
	// Its last renewal, for a second; then it stops renewing.
	if err := l1.AcquireLease(ctx, scd1Table.Name, "holder-1", time.Second); err != nil {
		t.Fatalf("renewing: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := l2.AcquireLease(ctx, scd1Table.Name, "holder-2", time.Minute)
		if err == nil {
			break
		}
		if !errors.Is(err, sinks.ErrLeaseHeld) || time.Now().After(deadline) {
			t.Fatalf("AcquireLease after the holder stopped renewing: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	err := ld.Commit(ctx, sinks.Commit{From: batch.Positions{kafka("cdc", 0, 1)}, To: batch.Positions{kafka("cdc", 0, 2)}})
	if !errors.Is(err, sinks.ErrLeaseLost) {
		t.Fatalf("commit of a load begun before the takeover: %v, want ErrLeaseLost", err)
	}
	if _, err := h.cdcCommit(s1, "f", upsert1(scd1Table.Name, r1{8, "after", 8, 8})); !errors.Is(err, sinks.ErrLeaseLost) && !errors.Is(err, sinks.ErrLeaseHeld) {
		t.Fatalf("commit of the old holder after the takeover: %v, want a lease error", err)
	}
	if err := l1.AcquireLease(ctx, scd1Table.Name, "holder-1", time.Second); !errors.Is(err, sinks.ErrLeaseLost) {
		t.Fatalf("renewal of the old holder: %v, want ErrLeaseLost", err)
	}
	if err := l1.AcquireLease(ctx, scd1Table.Name, "holder-1", time.Second); !errors.Is(err, sinks.ErrLeaseHeld) {
		t.Fatalf("the old holder competing again: %v, want ErrLeaseHeld", err)
	}
	h.mustCDC(s2, "f", upsert1(scd1Table.Name, r1{2, "b", 2, 2}))
	expectContent(t, s2, scd1Table, "after the takeover", "1|a|1", "2|b|2")
	if err := l2.ReleaseLease(ctx, scd1Table.Name, "holder-2"); err != nil {
		t.Fatal(err)
	}
	if err := l1.AcquireLease(ctx, scd1Table.Name, "holder-1", time.Minute); err != nil {
		t.Fatalf("the old holder after the release: %v", err)
	}
	h.mustCDC(s1, "f", upsert1(scd1Table.Name, r1{3, "c", 3, 3}))
	expectContent(t, s1, scd1Table, "after the old holder took it again", "1|a|1", "2|b|2", "3|c|3")
	if err := l1.ReleaseLease(ctx, scd1Table.Name, "holder-1"); err != nil {
		t.Fatal(err)
	}
}
