package flows_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/flows"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/destination"
)

// TestVerifyFiles compares a files flow's target with its files read
// again: equal after the load, one day off after a row is added by hand.
func TestVerifyFiles(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		s := newStepper(t, broker.Addr(), dest(t), `tables:
  - name: raw
    columns:
      - {name: id, type: int64}
      - {name: name, type: string}
flows:
  - name: bf
    target: raw
    kind: append
    source: {files: {path: "in/*.parquet"}}
    batch: {rows: 3}
`)
		for f := range 2 {
			var rows []rawRow
			for i := range 5 {
				rows = append(rows, rawRow{int64(f*10 + i), fmt.Sprintf("2026-04-0%d", 1+i%2)})
			}
			writeParquet(t, filepath.Join(s.dir, "in", fmt.Sprintf("p%d.parquet", f)), rows)
		}
		s.update()
		ctx := context.Background()
		verify := func() *flows.VerifyReport {
			sink, err := destination.Open(ctx, s.p, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer sink.Close()
			rep, err := flows.Verify(ctx, s.p, sink, flows.VerifyOptions{Table: "raw", Day: "name", Max: "id"})
			if err != nil {
				t.Fatal(err)
			}
			return rep
		}
		if rep := verify(); rep.Differ != 0 || len(rep.Days) != 2 || rep.Days[0].TargetRows != 6 || rep.Days[0].TargetMax != "14" {
			t.Fatalf("intact: %+v", rep)
		}
		sink, err := destination.Open(ctx, s.p, nil)
		if err != nil {
			t.Fatal(err)
		}
		row := batch.New(s.p.Table("raw").Schema, 1)
		row.Vectors[0].AppendInt(99)
		row.Vectors[1].AppendString("2026-04-02")
		ld, err := sink.Begin(ctx, sinks.LoadMeta{LoadID: "by-hand-1", Pipeline: s.p.Pipeline, Flow: "by_hand", Targets: []string{"raw"}})
		if err == nil {
			err = ld.Write(ctx, "raw", row)
		}
		if err == nil {
			err = ld.Commit(ctx, sinks.Commit{Rows: 1})
		}
		sink.Close()
		if err != nil {
			t.Fatal(err)
		}
		rep := verify()
		if rep.Differ != 1 || rep.Days[1].Day != "2026-04-02" || rep.Days[1].TargetRows != 5 || rep.Days[1].SourceRows != 4 || rep.Days[1].TargetMax != "99" {
			t.Fatalf("after a row by hand: %+v", rep)
		}
	})
}
