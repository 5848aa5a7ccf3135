package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/consumer"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/spec"
	"github.com/sluicehq/sluice/sinks"
	sinkdest "github.com/sluicehq/sluice/sinks/destination"
)

// TestVerify compares a target with its topic day by day: an intact
// target passes, one with a row added behind sluice's back fails naming
// the day, in both destinations.
func TestVerify(t *testing.T) {
	t.Parallel()
	forEachDestination(t, func(t *testing.T, d destination) {
		b := startBroker(t, map[string]int32{"events": 2})
		var msgs []consumer.Message
		for id := range 300 {
			msgs = append(msgs, consumer.Message{Partition: int32(id % 2),
				Value: fmt.Appendf(nil, `{"id":%d,"name":"n","amount":"1.00","at":"2026-03-0%dT10:00:00Z"}`, id, 1+id%3)})
		}
		msgs = append(msgs, consumer.Message{Value: []byte(`{"id":"bad"}`), Partition: 0})
		produceMsgs(t, b.Addr(), "events", msgs)
		specPath := writeSpec(t, d, b.Addr(), 100)
		mustSluice(t, "update", "-f", specPath)
		res := mustSluice(t, "verify", "events", "--day", "at", "--max", "id", "-f", specPath)
		if !strings.Contains(res.stdout, "3 day(s), 0 differ") {
			t.Errorf("verify of an intact target:\n%s", res.stdout)
		}

		// A row added by hand, not from the topic.
		p, err := spec.Load(specPath)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		sink, err := sinkdest.Open(ctx, p, nil)
		if err != nil {
			t.Fatal(err)
		}
		row := batch.New(p.Table("events").Schema, 1)
		row.Vectors[0].AppendInt(100_000)
		row.Vectors[1].AppendNull()
		row.Vectors[2].AppendNull()
		row.Vectors[3].AppendInt(time.Date(2026, 3, 2, 23, 0, 0, 0, time.UTC).UnixMicro())
		ld, err := sink.Begin(ctx, sinks.LoadMeta{LoadID: "manual-0001", Pipeline: p.Pipeline, Flow: "by_hand", Targets: []string{"events"}})
		if err == nil {
			err = ld.Write(ctx, "events", row)
		}
		if err == nil {
			err = ld.Commit(ctx, sinks.Commit{Rows: 1})
		}
		sink.Close()
		if err != nil {
			t.Fatal(err)
		}
		res = sluice(t, "verify", "events", "--day", "at", "--max", "id", "--format", "json", "-f", specPath)
		var rep struct {
			Differ int `json:"days_that_differ"`
			Days   []struct {
				Day        string
				TargetRows int64 `json:"target_rows"`
				SourceRows int64 `json:"source_rows"`
			} `json:"days"`
		}
		if err := json.Unmarshal([]byte(res.stdout), &rep); err != nil || res.code != 1 || rep.Differ != 1 {
			t.Fatalf("verify after a row was added: exit %d, %v\n%s\n%s", res.code, err, res.stdout, res.stderr)
		}
		for _, day := range rep.Days {
			if (day.Day == "2026-03-02") != (day.TargetRows == 101) {
				t.Errorf("day %+v", day)
			}
		}
		res = sluice(t, "verify", "events", "--day", "at", "--from", "2026-03-03", "-f", specPath)
		if res.code != 0 || !strings.Contains(res.stdout, "1 day(s), 0 differ") {
			t.Errorf("verify --from 2026-03-03: exit %d\n%s%s", res.code, res.stdout, res.stderr)
		}
	})
}
