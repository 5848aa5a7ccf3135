package clickhouse

import (
	"context"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
)

// TestEnsureCreates checks the engines and keys of the tables Ensure
// creates, and that a second Ensure with other keys is refused.
func TestEnsureCreates(t *testing.T) {
	addr := serverAddr(t)
	db := newDatabase(t, addr)
	s := openSink(t, addr, db)
	ctx := context.Background()
	plain := sinks.Table{Name: "plain", Schema: batch.Schema{Columns: []batch.Column{{Name: "a", Type: batch.String}}}}
	for range 2 { // idempotent
		if err := s.Ensure(ctx, []sinks.Table{eventsTable, plain}); err != nil {
			t.Fatalf("Ensure: %v", err)
		}
	}
	tests := []struct {
		table                       string
		engine, partition, ordering string
	}{
		{"events", "MergeTree", "day", "id"},
		{"plain", "MergeTree", "", ""},
		{batch.DeadLettersTable, "MergeTree", "toYYYYMM(at)", "pipeline,flow,at"},
		{batch.LoadsTable, "MergeTree", "", "pipeline,flow,slot,committed_at,load_id"},
		{stateTable, "ReplacingMergeTree", "", "key"},
		{heartbeatsTable, "ReplacingMergeTree", "", "pipeline,id"},
	}
	for _, tc := range tests {
		t.Run(tc.table, func(t *testing.T) {
			info, err := s.keysOnly(ctx, tc.table)
			if err != nil || info == nil {
				t.Fatalf("describe: %v, %v", info, err)
			}
			if info.engine != tc.engine || normKey(info.partitionKey) != tc.partition || normKey(info.sortingKey) != tc.ordering {
				t.Fatalf("%s PARTITION BY %q ORDER BY %q; want %s, %q, %q", info.engine, info.partitionKey, info.sortingKey,
					tc.engine, tc.partition, tc.ordering)
			}
		})
	}
	other := eventsTable
	other.OrderBy = []string{"day", "id"}
	err := s.Ensure(ctx, []sinks.Table{other, {Name: "bad name", Schema: plain.Schema}})
	if err == nil || !strings.Contains(err.Error(), "cannot change a sorting key") || !strings.Contains(err.Error(), "bad name") {
		t.Fatalf("Ensure with a changed order_by and a bad name: %v; want both reported", err)
	}
}

// keysOnly reads a table's engine and keys from system.tables.
func (s *Sink) keysOnly(ctx context.Context, name string) (*tableInfo, error) {
	rows, err := s.conn.Query(ctx, "SELECT engine, partition_key, sorting_key FROM system.tables WHERE database = ? AND name = ?",
		s.opts.Database, name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var info *tableInfo
	for rows.Next() {
		info = &tableInfo{name: name}
		if err := rows.Scan(&info.engine, &info.partitionKey, &info.sortingKey); err != nil {
			return nil, err
		}
	}
	return info, rows.Err()
}

// TestTargetShowsOnlyCommitted: querying the target in ClickHouse, as any
// reader does, shows committed loads only, never staged rows.
func TestTargetShowsOnlyCommitted(t *testing.T) {
	ctx := context.Background()
	_, _, open := setup(t)
	s := open()
	count := func() uint64 {
		t.Helper()
		rows, err := s.conn.Query(ctx, "SELECT count() FROM "+s.table("events"))
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var n uint64
		for rows.Next() {
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
		}
		return n
	}
	ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: "x", Pipeline: "p", Flow: "f", Targets: []string{"events"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ld.Write(ctx, "events", events(0, 50)); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Fatalf("%d rows visible before the commit", n)
	}
	if err := ld.Commit(ctx, sinks.Commit{To: kafkaPos(50)}); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 50 {
		t.Fatalf("%d rows visible after the commit, want 50", n)
	}
}
