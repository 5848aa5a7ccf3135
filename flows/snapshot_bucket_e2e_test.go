package flows_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/flows"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks/destination"
)

// Snapshots applied in many small buckets: the same results as whole, one
// load per version, a key twice across files refusing the snapshot, and a
// load stopped midway leaves nothing behind and applies exactly once on the
// next update.

// snapshotBucketRows makes buckets of about this many rows: the snapshots
// below (tens of rows) take a dozen buckets or more.
const snapshotBucketRows = 3

// names returns rows id from..to with names by f.
func names(from, to int64, f func(id int64) string) []rawRow {
	var out []rawRow
	for id := from; id <= to; id++ {
		out = append(out, rawRow{id, f(id)})
	}
	return out
}

// snapshotFiles writes snapshot version v as one file per part (ready).
func snapshotFiles(t *testing.T, dir, v string, parts ...[]rawRow) {
	t.Helper()
	for i, rows := range parts {
		writeParquet(t, filepath.Join(dir, "snaps", v, fmt.Sprintf("part-%d.parquet", i)), rows)
	}
	if err := os.WriteFile(filepath.Join(dir, "snaps", v, "_SUCCESS"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func rowTexts(rows []rawRow) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = fmt.Sprintf("%d,%s", r.ID, r.Name)
	}
	return out
}

// loadsOf counts the committed loads of a flow.
func (s *stepper) loadsOf(flow string) int {
	s.t.Helper()
	ctx := context.Background()
	sink, err := destination.Open(ctx, s.p, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	defer sink.Close()
	b, err := sink.Scan(ctx, batch.LoadsTable)
	if err != nil {
		s.t.Fatal(err)
	}
	n := 0
	for _, f := range b.Column("flow").Strs {
		if f == flow {
			n++
		}
	}
	return n
}

// updateCtx runs one update under ctx and returns its error.
func (s *stepper) updateCtx(ctx context.Context) error {
	s.t.Helper()
	sink, err := destination.Open(context.Background(), s.p, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	defer sink.Close()
	opts := flows.Options{Mode: flows.ModeUpdate, HeartbeatEvery: 200 * time.Millisecond, HeartbeatTTL: time.Second}
	return flows.Execute(ctx, s.p, sink, opts)
}

func TestSnapshotBucketsEndToEnd(t *testing.T) {
	dests := destinations(t)
	broker := startBroker(t)
	t.Cleanup(flows.SetSnapshotBuckets(snapshotBucketRows, nil))
	t.Run("group", func(t *testing.T) {
		for _, dname := range slices.Sorted(maps.Keys(dests)) {
			dest := dests[dname]
			t.Run(dname+"/SCD1", func(t *testing.T) {
				t.Parallel()
				topic := "bucket1_" + dname
				s := newStepper(t, broker.Addr(), dest(t), snapshotFlow(1, "", "")+fmt.Sprintf(cdcOnT, topic))
				// Newer CDC events win over the snapshot, and stay
				// under its truncate.
				s.produce(topic, `{"id":3,"name":"cdc","op":"U","seq":150}`, `{"id":7,"op":"D","seq":150}`,
					`{"id":45,"name":"new","op":"U","seq":150}`, `{"id":12,"name":"old","op":"U","seq":50}`)
				v100 := names(1, 40, func(id int64) string { return fmt.Sprint("a", id) })
				snapshotFiles(t, s.dir, "100", v100[:15], v100[15:])
				s.update()
				var want []string
				for _, r := range rowTexts(v100) {
					switch r {
					case "3,a3":
						want = append(want, "3,cdc")
					case "7,a7":
					default:
						want = append(want, r)
					}
				}
				want = append(want, "45,new")
				if got := s.rows("t"); !slices.Equal(got, want) {
					t.Fatalf("version 100: got %q, want %q", got, want)
				}
				// A newer version replaces everything older than it.
				v200 := names(11, 50, func(id int64) string { return fmt.Sprint("b", id) })
				snapshotFiles(t, s.dir, "200", v200[:20], v200[20:])
				s.update()
				if got, want := s.rows("t"), rowTexts(v200); !slices.Equal(got, want) {
					t.Fatalf("version 200: got %q, want %q", got, want)
				}
				if got := s.loadsOf("s"); got != 2 {
					t.Fatalf("%d loads of the snapshot flow, want one per version (2)", got)
				}
			})
			t.Run(dname+"/SCD2", func(t *testing.T) {
				t.Parallel()
				s := newStepper(t, broker.Addr(), dest(t), snapshotFlow(2, "", ""))
				v1 := names(1, 30, func(id int64) string { return fmt.Sprint("a", id) })
				snapshotFiles(t, s.dir, "1", v1[:10], v1[10:])
				s.update()
				v2 := names(5, 35, func(id int64) string {
					if id%5 == 0 {
						return fmt.Sprint("b", id)
					}
					return fmt.Sprint("a", id)
				})
				snapshotFiles(t, s.dir, "2", v2[20:], v2[:20])
				s.update()
				var want []string
				for id := int64(1); id <= 35; id++ {
					switch {
					case id < 5:
						want = append(want, fmt.Sprintf("%d,a%d,1,2", id, id))
					case id > 30 && id%5 == 0:
						want = append(want, fmt.Sprintf("%d,b%d,2,∞", id, id))
					case id > 30:
						want = append(want, fmt.Sprintf("%d,a%d,2,∞", id, id))
					case id%5 == 0:
						want = append(want, fmt.Sprintf("%d,a%d,1,2", id, id), fmt.Sprintf("%d,b%d,2,∞", id, id))
					default:
						want = append(want, fmt.Sprintf("%d,a%d,1,∞", id, id))
					}
				}
				if got := s.rows("t"); !slices.Equal(got, want) {
					t.Fatalf("got %q\nwant %q", got, want)
				}
			})
			t.Run(dname+"/duplicate-across-files", func(t *testing.T) {
				t.Parallel()
				s := newStepper(t, broker.Addr(), dest(t), snapshotFlow(2, "", ""))
				v1 := names(1, 20, func(id int64) string { return fmt.Sprint("a", id) })
				snapshotFiles(t, s.dir, "1", v1)
				s.update()
				// Key 17 is in both files of version 2.
				snapshotFiles(t, s.dir, "2", names(1, 17, func(int64) string { return "x" }), names(17, 25, func(int64) string { return "y" }))
				if err := s.tryUpdateWith(flows.Options{}); !errors.Is(err, flows.ErrDuplicateKey) {
					t.Fatalf("update: %v, want ErrDuplicateKey", err)
				}
				want := make([]string, 0, len(v1))
				for _, r := range rowTexts(v1) {
					want = append(want, r+",1,∞")
				}
				if got := s.rows("t"); !slices.Equal(got, want) {
					t.Fatalf("after the refused version: got %q, want %q", got, want)
				}
				if got := s.loadsOf("s"); got != 1 {
					t.Fatalf("%d loads of the snapshot flow, want 1", got)
				}
			})
		}
	})
	// A load stopped midway (an error, or the process cancelled) commits
	// nothing, and the next update applies the version exactly once.
	for _, dname := range slices.Sorted(maps.Keys(dests)) {
		dest := dests[dname]
		for _, stop := range []string{"error", "cancel"} {
			t.Run(dname+"/stopped-by-"+stop, func(t *testing.T) {
				s := newStepper(t, broker.Addr(), dest(t), snapshotFlow(1, "", ""))
				v1 := names(1, 30, func(id int64) string { return fmt.Sprint("a", id) })
				snapshotFiles(t, s.dir, "1", v1)
				s.update()
				v2 := names(10, 45, func(id int64) string { return fmt.Sprint("b", id) })
				snapshotFiles(t, s.dir, "2", v2[:18], v2[18:])

				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				errStop := errors.New("stopped at bucket 2")
				staged := 0
				restore := flows.SetSnapshotBuckets(snapshotBucketRows, func(bucket int) error {
					staged++
					if bucket < 2 {
						return nil
					}
					if stop == "cancel" {
						cancel()
						return ctx.Err()
					}
					return errStop
				})
				err := s.updateCtx(ctx)
				restore()
				if stop == "error" && !errors.Is(err, errStop) {
					t.Fatalf("update: %v, want the injected error", err)
				}
				if staged != 3 {
					t.Fatalf("%d buckets staged before the stop, want 3", staged)
				}
				if got, want := s.rows("t"), rowTexts(v1); !slices.Equal(got, want) {
					t.Fatalf("after the stop: got %q, want version 1 %q", got, want)
				}
				if got := s.loadsOf("s"); got != 1 {
					t.Fatalf("after the stop: %d loads of the snapshot flow, want 1", got)
				}
				s.update()
				if got, want := s.rows("t"), rowTexts(v2); !slices.Equal(got, want) {
					t.Fatalf("after the next update: got %q, want version 2 %q", got, want)
				}
				s.update()
				if got := s.loadsOf("s"); got != 2 {
					t.Fatalf("%d loads of the snapshot flow, want 2", got)
				}
			})
		}
	}
}
