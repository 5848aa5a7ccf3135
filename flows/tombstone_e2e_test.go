package flows_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/sluicehq/sluice/consumer"
)

// produceKeyed writes messages with keys; a nil value is a tombstone.
func (s *stepper) produceKeyed(topic string, kv ...[]byte) {
	s.t.Helper()
	ctx := context.Background()
	if err := consumer.CreateTopic(ctx, []string{s.addr}, topic, 1); err != nil {
		s.t.Fatal(err)
	}
	var ms []consumer.Message
	for i := 0; i+1 < len(kv); i += 2 {
		ms = append(ms, consumer.Message{Key: kv[i], Value: kv[i+1], Partition: 0})
	}
	if err := consumer.Produce(ctx, []string{s.addr}, topic, ms); err != nil {
		s.t.Fatal(err)
	}
}

// TestTombstones deletes keys named only by tombstones: Debezium's on a
// compacted topic where a key's delete event is gone and its tombstone
// remains, the event-flattening transform's (deletes as tombstones only, in
// JSON with a plain-text key), and a flow that skips them.
func TestTombstones(t *testing.T) {
	change := func(op string, id int, name string, lsn int) []byte {
		return fmt.Appendf(nil, `{"before":null,"after":{"id":%d,"name":%q},"source":{"lsn":%d},"op":%q,"ts_ms":2}`, id, name, lsn, op)
	}
	dbzKey := func(id int) []byte {
		return fmt.Appendf(nil, `{"schema":{"type":"struct","fields":[{"type":"int64","optional":false,"field":"id"}]},"payload":{"id":%d}}`, id)
	}
	flat := func(id int, name string, lsn int) []byte {
		return fmt.Appendf(nil, `{"id":%d,"name":%q,"lsn":%d}`, id, name, lsn)
	}
	broker := startBroker(t)
	eachDestination(t, func(t *testing.T, dname string, dest func(*testing.T) string) {
		dbz, flatTopic := "dbz_"+dname, "flat_"+dname
		flow := func(name, target, topic, options, seq, extra string) string {
			return `  - name: ` + name + `
    target: ` + target + `
    kind: auto_cdc
    source:
      kafka:
        topic: ` + topic + options + `
        columns:
          - {name: id, type: int64}
          - {name: name, type: string, nullable: true}
          - {name: ` + seq + `, type: int64}
    keys: [id]
    sequence_by: ` + seq + "\n" + extra
		}
		const debezium = "\n        format: debezium"
		s := newStepper(t, broker.Addr(), dest(t), "tables:\n  - name: latest\n  - name: history\n  - name: flat\n  - name: skipped\nflows:\n"+
			flow("scd1", "latest", dbz, debezium, "_source_lsn", "")+
			flow("scd2", "history", dbz, debezium, "_source_lsn", "    stored_as_scd_type: 2\n")+
			flow("flattened", "flat", flatTopic, "\n        tombstones: delete\n        key_format: string", "lsn", "")+
			flow("skipping", "skipped", flatTopic, "\n        tombstones: skip", "lsn", ""))
		s.produceKeyed(dbz,
			dbzKey(1), change("c", 1, "a", 10),
			dbzKey(2), change("c", 2, "b", 20),
			dbzKey(3), change("c", 3, "c", 30),
			dbzKey(1), change("u", 1, "a2", 40),
		)
		s.produceKeyed(flatTopic, []byte("1"), flat(1, "a", 10), []byte("2"), flat(2, "b", 20), []byte("3"), flat(3, "c", 30))
		s.update()
		// Compaction removed key 1's delete event and key 2's later
		// changes: only their tombstones remain. Key 9 never existed.
		s.produceKeyed(dbz, dbzKey(1), nil, dbzKey(2), nil, dbzKey(9), nil)
		s.produceKeyed(flatTopic, []byte("2"), nil, []byte("9"), nil)
		s.update()
		if got, want := s.rows("latest"), []string{"3,c,30"}; !slices.Equal(got, want) {
			t.Errorf("latest %q, want %q", got, want)
		}
		// A tombstone ends the version at the key's newest sequence.
		if got, want := s.rows("history"), []string{"1,a,10,10,40", "1,a2,40,40,40", "2,b,20,20,20", "3,c,30,30,∞"}; !slices.Equal(got, want) {
			t.Errorf("history %q, want %q", got, want)
		}
		if got, want := s.rows("flat"), []string{"1,a,10", "3,c,30"}; !slices.Equal(got, want) {
			t.Errorf("flat %q, want %q", got, want)
		}
		if got, want := s.rows("skipped"), []string{"1,a,10", "2,b,20", "3,c,30"}; !slices.Equal(got, want) {
			t.Errorf("skipped %q, want %q", got, want)
		}
		// A change at key 2's last sequence, late, stays deleted; a newer
		// one brings the key back.
		s.produceKeyed(flatTopic, []byte("2"), flat(2, "late", 20), []byte("1"), flat(1, "new", 50))
		s.produceKeyed(dbz, dbzKey(2), change("u", 2, "b2", 60))
		s.update()
		if got, want := s.rows("flat"), []string{"1,new,50", "3,c,30"}; !slices.Equal(got, want) {
			t.Errorf("flat after more changes %q, want %q", got, want)
		}
		if got, want := s.rows("latest"), []string{"2,b2,60", "3,c,30"}; !slices.Equal(got, want) {
			t.Errorf("latest after more changes %q, want %q", got, want)
		}
		for _, f := range []string{"scd1", "scd2", "flattened", "skipping"} {
			if n := s.status(f).DeadLetters; n != 0 {
				t.Errorf("flow %s: %d dead letters, want none", f, n)
			}
		}
	})
}
