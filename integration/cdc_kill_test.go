package integration

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/parquet-go/parquet-go"

	"github.com/sluicehq/sluice/consumer"
)

// changesTopic is the topic of the CDC tests and benchmarks.
const changesTopic = "changes"

// cdcSpec is a pipeline of one auto_cdc flow (format json) from the changes
// topic into target t, and optionally an append flow of the same messages
// into target raw. Arguments: pipeline, brokers, destination, then for the
// CDC flow its SCD type and batch rows.
const cdcSpec = `pipeline: %s
kafka:
  brokers: [%s]
  session_timeout: 2s
destination: %s
tables:
  - name: t
flows:
  - name: t_cdc
    target: t
    kind: auto_cdc
    source:
      kafka:
        topic: changes
        format: json
        columns:
          - {name: id, type: int64}
          - {name: name, type: string, nullable: true}
          - {name: amount, type: int64, nullable: true}
          - {name: op, type: string, nullable: true}
          - {name: seq, type: int64}
    keys: [id]
    sequence_by: seq
    apply_as_deletes: 'op == "D"'
    except_column_list: [op, seq]
    stored_as_scd_type: %d
    batch: {rows: %d, wait: 200ms}
`

// writeCDCSpec writes the CDC pipeline into a new folder and returns the
// spec's path.
func writeCDCSpec(t testing.TB, pipeline string, d destination, addr string, scd, batchRows int) string {
	t.Helper()
	return writeSpecText(t, cdcSpecText(pipeline, d, addr, scd, batchRows))
}

// cdcSpecText is cdcSpec filled in.
func cdcSpecText(pipeline string, d destination, addr string, scd, batchRows int) string {
	return fmt.Sprintf(cdcSpec, pipeline, addr, d.yaml(), scd, batchRows)
}

func writeSpecText(t testing.TB, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// change is one CDC event of the changes topic.
type change struct {
	id, seq int64
	del     bool
	name    *string // nil is JSON null
	amount  *int64
}

func (c change) json() []byte {
	if c.del {
		return fmt.Appendf(nil, `{"id":%d,"op":"D","seq":%d}`, c.id, c.seq)
	}
	name, amount := "null", "null"
	if c.name != nil {
		name = strconv.Quote(*c.name)
	}
	if c.amount != nil {
		amount = strconv.FormatInt(*c.amount, 10)
	}
	return fmt.Appendf(nil, `{"id":%d,"name":%s,"amount":%s,"op":"U","seq":%d}`, c.id, name, amount, c.seq)
}

// changes returns n events over the given number of keys, deterministic for
// a seed, in a shuffled order. Each key's sequences are distinct (so no
// event's place depends on arrival order), about one event in ten is a
// delete, and values come from small sets so that consecutive versions are
// often equal (which SCD type 2 merges).
func changes(seed uint64, n, keys int) []change {
	rng := rand.New(rand.NewPCG(seed, 7))
	names := []string{"ada", "bob", "cyd", "dee"}
	out := make([]change, n)
	for i := range out {
		// Key i%keys gets its (i/keys)-th event; its sequence leaves gaps
		// and the shuffle below puts the events out of order.
		c := change{id: int64(i % keys), seq: int64(i/keys)*10 + rng.Int64N(10)}
		switch r := rng.IntN(20); {
		case r < 2:
			c.del = true
		default:
			if r != 2 {
				c.name = &names[rng.IntN(len(names))]
			}
			if r != 3 {
				a := rng.Int64N(3) * 100
				c.amount = &a
			}
		}
		out[i] = c
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// changeMessages turns events into messages with random keys and random
// partitions, so that a key's events spread over every partition.
func changeMessages(seed uint64, cs []change, partitions int) []consumer.Message {
	rng := rand.New(rand.NewPCG(seed, 8))
	msgs := make([]consumer.Message, len(cs))
	for i, c := range cs {
		msgs[i] = consumer.Message{Key: strconv.AppendUint(nil, rng.Uint64(), 36), Value: c.json(), Partition: int32(rng.IntN(partitions))}
	}
	return msgs
}

// currentRows is what an SCD type 1 target of the events holds: per key,
// its latest event's values unless that event is a delete; rows rendered as
// by targetRows (id,name,amount; ∞ for NULL), sorted.
func currentRows(cs []change) []string {
	last := map[int64]change{}
	for _, c := range cs {
		if l, ok := last[c.id]; !ok || c.seq > l.seq {
			last[c.id] = c
		}
	}
	var out []string
	for _, c := range last {
		if c.del {
			continue
		}
		name, amount := "∞", "∞"
		if c.name != nil {
			name = *c.name
		}
		if c.amount != nil {
			amount = strconv.FormatInt(*c.amount, 10)
		}
		out = append(out, fmt.Sprintf("%d,%s,%s", c.id, name, amount))
	}
	slices.Sort(out)
	return out
}

// targetColumns are the columns of target t for an SCD type.
func targetColumns(scd int) []string {
	if scd == 2 {
		return []string{"id", "name", "amount", "__START_AT", "__END_AT"}
	}
	return []string{"id", "name", "amount"}
}

// targetRows reads the logical rows of a CDC target from the destination
// directly (Parquet files through parquet-go, ClickHouse through its view),
// as comma-separated values with ∞ for NULL, sorted.
func targetRows(t testing.TB, d destination, spec, table string, columns []string) []string {
	t.Helper()
	var out []string
	switch d := d.(type) {
	case localDest:
		var cols [][]parquet.Value
		for _, c := range columns {
			cols = append(cols, readColumn(t, tableDir(spec, table), c))
		}
		for i := range cols[0] {
			parts := make([]string, len(cols))
			for j, col := range cols {
				if len(col) != len(cols[0]) {
					t.Fatalf("%s: column %s has %d values, %s %d", table, columns[j], len(col), columns[0], len(cols[0]))
				}
				parts[j] = "∞"
				if !col[i].IsNull() {
					parts[j] = col[i].String()
				}
			}
			out = append(out, strings.Join(parts, ","))
		}
	case *clickHouseDest:
		exprs := make([]string, len(columns))
		for i, c := range columns {
			exprs[i] = fmt.Sprintf("ifNull(toString(%s), '∞')", c)
		}
		d.query(t, func(r driver.Rows) error {
			var s string
			err := r.Scan(&s)
			out = append(out, s)
			return err
		}, fmt.Sprintf("SELECT arrayStringConcat([%s], ',') FROM %s.%s", strings.Join(exprs, ", "), d.db, table))
	default:
		t.Fatalf("unknown destination %T", d)
	}
	slices.Sort(out)
	return out
}

// current keeps the rows of an SCD type 2 target whose __END_AT is NULL,
// without __START_AT and __END_AT.
func current(rows []string) []string {
	var out []string
	for _, r := range rows {
		if rest, ok := strings.CutSuffix(r, ",∞"); ok {
			out = append(out, rest[:strings.LastIndexByte(rest, ',')])
		}
	}
	slices.Sort(out)
	return out
}

// TestCDCKilledRunsThenUpdateMatchOneUpdate loads 100k change events over
// 10k keys, shuffled over three partitions (so each key's events arrive out
// of order, across partitions), into SCD type 1 and 2 targets: once with a
// single `sluice update`, and once with `sluice run` killed by SIGKILL at
// five random moments (three into ClickHouse) while it consumes (the events
// produced in as many parts, one before each run; each kill from 0.4 to 2 s
// after the run's assignment; up to three more, 2.4 to 4 s after, while
// none came after a commit), then an update. Both targets must be equal, row for
// row, and their current rows those of the events' latest changes.
func TestCDCKilledRunsThenUpdateMatchOneUpdate(t *testing.T) {
	t.Parallel()
	const n, keys = 100_000, 10_000
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	cs := changes(seed, n, keys)
	msgs := changeMessages(seed, cs, 3)
	want := currentRows(cs)
	for _, scd := range []int{1, 2} {
		t.Run(fmt.Sprintf("scd%d", scd), func(t *testing.T) {
			t.Parallel()
			forEachDestination(t, func(t *testing.T, d destination) {
				b := startBroker(t, map[string]int32{changesTopic: 3})
				columns := targetColumns(scd)

				// The kill runs, one part of the events before each.
				killSpec := writeCDCSpec(t, "cdckill", d, b.Addr(), scd, 2_000)
				rng := rand.New(rand.NewPCG(seed, uint64(scd)))
				committed := 0
				rounds := 5
				if d.name() == "clickhouse" {
					// A killed writer's lease on the target outlives it by up to
					// its TTL (3 s), which the next process waits out, and loads
					// cost more: fewer kills keep the test short.
					rounds = 3
				}
				// On a loaded machine no kill may have come after a commit: up
				// to three more rounds, later, make sure one did.
				for round := 0; round < rounds || committed == 0 && round < rounds+3; round++ {
					// At least one batch's load (a few hundred ms into ClickHouse) before the kill.
					after := time.Duration(400+rng.IntN(1600)) * time.Millisecond
					if round < rounds {
						produceMsgs(t, b.Addr(), changesTopic, msgs[round*n/rounds:(round+1)*n/rounds])
					} else {
						after += 2 * time.Second
					}
					loads := killConsumingRunAfter(t, killSpec, after)
					committed += loads
					t.Logf("round %d: killed %s after its assignment, having committed %d loads", round, after, loads)
				}
				if committed == 0 {
					t.Fatal("no killed run committed a load: the kills hit no consumption")
				}
				began := time.Now()
				reapDeadMembers(t, b.Addr(), "cdckill.t_cdc")
				t.Logf("dead members gone after %s", time.Since(began).Round(time.Millisecond))
				began = time.Now()
				mustSluice(t, append([]string{"update", "-f", killSpec}, fastArgs...)...)
				t.Logf("update after the kills took %s", time.Since(began).Round(time.Millisecond))
				killed := targetRows(t, d, killSpec, "t", columns)

				// The reference: one update of every event into a destination
				// of its own.
				ref := d
				if ch, ok := d.(*clickHouseDest); ok {
					ref = newClickHouseDest(t, ch.addr)
				}
				refSpec := writeCDCSpec(t, "cdcref", ref, b.Addr(), scd, 2_000)
				began = time.Now()
				mustSluice(t, append([]string{"update", "-f", refSpec}, fastArgs...)...)
				t.Logf("reference update took %s", time.Since(began).Round(time.Millisecond))
				once := targetRows(t, ref, refSpec, "t", columns)

				if !slices.Equal(killed, once) {
					t.Errorf("after kills: %d rows; one update: %d rows; first differences:\n%s", len(killed), len(once), diffRows(killed, once, 10))
				}
				got := once
				if scd == 2 {
					got = current(once)
					if len(once) <= len(got) {
						t.Errorf("SCD type 2 target holds %d rows, %d of them current: no history", len(once), len(got))
					}
				}
				if !slices.Equal(got, want) {
					t.Errorf("current rows: %d, want %d from the events; first differences:\n%s", len(got), len(want), diffRows(got, want, 10))
				}
				checkLeftoversRecovered(t, d, killSpec)
			})
		})
	}
}

// killConsumingRunAfter starts `sluice run`, waits for its consumer's
// partitions, kills it with SIGKILL after the delay and waits for it. It
// returns the loads the run committed. Waiting for the assignment keeps the
// kill out of the first join (see killRunAfter) and in the consumption: a
// run started while a killed one is still in the group waits for the
// broker's session timeout before it is assigned anything.
func killConsumingRunAfter(t testing.TB, spec string, after time.Duration) int {
	t.Helper()
	cmd, out := start(t, append([]string{"run", "-f", spec, "--log-level", "debug"}, fastArgs...)...)
	waitFor(t, time.Minute, "partitions assigned", func() bool { return strings.Contains(out.String(), "partitions assigned") })
	time.Sleep(after)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	return strings.Count(out.String(), "load committed")
}

// diffRows lists up to max rows that are in only one of two sorted lists.
func diffRows(got, want []string, max int) string {
	var b strings.Builder
	i, j, k := 0, 0, 0
	for (i < len(got) || j < len(want)) && k < max {
		switch {
		case j >= len(want) || i < len(got) && got[i] < want[j]:
			fmt.Fprintf(&b, "  only in the first:  %s\n", got[i])
			i++
		case i >= len(got) || want[j] < got[i]:
			fmt.Fprintf(&b, "  only in the second: %s\n", want[j])
			j++
		default:
			i, j = i+1, j+1
			continue
		}
		k++
	}
	return b.String()
}
