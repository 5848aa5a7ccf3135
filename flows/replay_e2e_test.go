package flows_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
)

type legacyRow struct {
	ID        int64  `parquet:"id"`
	Name      string `parquet:"name"`
	ValidFrom int64  `parquet:"valid_from"`
	ValidTo   *int64 `parquet:"valid_to,optional"`
}

func until(v int64) *int64 { return &v }

// TestReplayLegacySCD2EndToEnd migrates a legacy SCD type 2 table: it is
// replayed as events with replay_valid_to, then live CDC takes over per key,
// and status reports a live change older than its key's last replayed one.
func TestReplayLegacySCD2EndToEnd(t *testing.T) {
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		topic := "on3_" + dname
		s := newStepper(t, broker.Addr(), dest(t), fmt.Sprintf(`tables:
  - name: dim
flows:
  - name: legacy
    target: dim
    kind: auto_cdc
    once: true
    source:
      files:
        path: "legacy/*.parquet"
        columns:
          - {name: id, type: int64}
          - {name: name, type: string, nullable: true}
          - {name: valid_from, type: int64}
          - {name: valid_to, type: int64, nullable: true}
    keys: [id]
    sequence_by: valid_from
    replay_valid_to: valid_to
    except_column_list: [valid_from, valid_to]
    stored_as_scd_type: 2
  - name: live
    target: dim
    kind: auto_cdc
    source:
      kafka:
        topic: %s
        columns:
          - {name: id, type: int64}
          - {name: name, type: string, nullable: true}
          - {name: op, type: string, nullable: true}
          - {name: seq, type: int64}
    keys: [id]
    sequence_by: seq
    apply_as_deletes: 'op == "D"'
    except_column_list: [op, seq]
    stored_as_scd_type: 2
`, topic))
		// Key 1: a then b, b current. Key 2: ended at 30 without a
		// successor. Key 3: ended at 15, back at 25. The files split a
		// key's versions, so the successor check spans files.
		writeParquet(t, filepath.Join(s.dir, "legacy", "part-0.parquet"), []legacyRow{
			{1, "a", 10, until(20)}, {2, "x", 10, until(30)}, {3, "y", 5, until(15)},
		})
		writeParquet(t, filepath.Join(s.dir, "legacy", "part-1.parquet"), []legacyRow{
			{1, "b", 20, nil}, {3, "z", 25, nil},
		})
		s.produce(topic) // the replay runs first, alone
		s.update()
		want := []string{
			"1,a,10,20", "1,b,20,∞",
			"2,x,10,30",
			"3,y,5,15", "3,z,25,∞",
		}
		if got := s.rows("dim"); !slices.Equal(got, want) {
			t.Fatalf("replayed: %q\nwant %q", got, want)
		}
		// Live CDC takes over per key; key 3's first live change is
		// older than its last replayed one: it lands in history and
		// status reports it.
		s.produce(topic, `{"id":1,"name":"c","op":"U","seq":40}`, `{"id":2,"name":"w","op":"U","seq":35}`,
			`{"id":3,"name":"late","op":"U","seq":20}`)
		s.update()
		want = []string{
			"1,a,10,20", "1,b,20,40", "1,c,40,∞",
			"2,x,10,30", "2,w,35,∞",
			"3,y,5,15", "3,late,20,25", "3,z,25,∞",
		}
		if got := s.rows("dim"); !slices.Equal(got, want) {
			t.Fatalf("dim: %q\nwant %q", got, want)
		}
		st := s.status("live")
		if st.CutOvers != 1 || len(st.CutOverKeys) != 1 || st.CutOverKeys[0].Key != "3" || st.CutOverKeys[0].Seq != "20" || st.CutOverKeys[0].ReplayFlow != "legacy" {
			t.Fatalf("cut-over report: %d changes, keys %+v; want key 3 at 20 replayed by legacy", st.CutOvers, st.CutOverKeys)
		}
		if st := s.status("legacy"); st.CutOvers != 0 {
			t.Fatalf("the replay reports %d cut-overs", st.CutOvers)
		}
	})
}
