package clickhouse

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
)

// TestLedgerGainsItsNewColumns checks that a ledger created before
// _sluice_loads had schema_version_hash gets the column when a sink starts
// on it, and that a load then records its schema hash.
func TestLedgerGainsItsNewColumns(t *testing.T) {
	ctx := context.Background()
	addr := serverAddr(t)
	db := newDatabase(t, addr)
	old := openSink(t, addr, db)
	if err := old.Ensure(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := old.exec(ctx, "drop column", "ALTER TABLE "+old.table(batch.LoadsTable)+" DROP COLUMN "+chsql.Quote(schemaHashColumn)); err != nil {
		t.Fatal(err)
	}
	old.Close()

	s := openSink(t, addr, db)
	tables := []sinks.Table{{Name: "t", Schema: batch.Schema{Columns: []batch.Column{{Name: "id", Type: batch.Int64}}}}}
	if err := s.Ensure(ctx, tables); err != nil {
		t.Fatal(err)
	}
	ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: "l1", Pipeline: "sinktest", Flow: "f", Targets: []string{"t"}})
	if err != nil {
		t.Fatal(err)
	}
	b := batch.New(tables[0].Schema, 1)
	b.Vectors[0].AppendInt(1)
	if err := ld.Write(ctx, "t", b); err != nil {
		t.Fatal(err)
	}
	c := sinks.Commit{To: batch.Positions{{Topic: "x", Partition: 0, Offset: 1}}, Rows: 1, SchemaHash: "abc"}
	if err := ld.Commit(ctx, c); err != nil {
		t.Fatal(err)
	}
	led, err := s.Ledger(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(led.Loads) != 1 || led.Loads[0].SchemaHash != "abc" {
		t.Fatalf("ledger %+v, want one load of schema abc", led.Loads)
	}
}
