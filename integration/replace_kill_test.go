package integration

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
)

// An incremental flow with write: replace_partitions, killed with SIGKILL
// while it swaps partitions in: every partition is at all times wholly as
// the previous run left it or wholly rebuilt, and the run that finally
// completes leaves every partition rebuilt once.

const replaceSpec = `pipeline: replace
kafka: {brokers: ["127.0.0.1:1"]}
destination: %s
tables:
  - name: sales
    columns:
      - {name: id, type: int64}
      - {name: day, type: date}
    partition_by: [day]
flows:
  - name: daily
    target: sales
    kind: append
    write: replace_partitions
    source: {files: {path: "sales/day=*/*.parquet"}}
    incremental: {cursor: day, lag: 365}
    batch: {bytes: 1}
`

const replaceDays = 30

type saleID struct {
	ID int64 `parquet:"id"`
}

// replaceRows is the number of rows of a day in a generation: they differ,
// so that a mix of generations shows in the counts too.
func replaceRows(gen, day int) int { return 400 + gen*50 + day }

// saleIDOf encodes a row's generation and day in its id.
func saleIDOf(gen, day, i int) int64 { return int64(gen)*1_000_000 + int64(day)*10_000 + int64(i) }

func writeGeneration(t testing.TB, dir string, gen int) {
	t.Helper()
	for day := 1; day <= replaceDays; day++ {
		rows := make([]saleID, replaceRows(gen, day))
		for i := range rows {
			rows[i].ID = saleIDOf(gen, day, i)
		}
		path := filepath.Join(dir, "sales", fmt.Sprintf("day=2024-03-%02d", day), "part-0.parquet")
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		tmp := path + ".tmp" // hidden from the flow's glob until renamed
		if err := parquet.WriteFile(tmp, rows); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
}

// checkGenerations fails unless every day holds exactly the rows of one
// generation; it returns the generation of each day.
func checkGenerations(t testing.TB, d destination, spec string) map[int]int {
	t.Helper()
	counts := map[[2]int]int{} // (day, gen) -> rows
	for _, id := range d.ids(t, spec, "sales", "id") {
		gen, day := int(id/1_000_000), int(id%1_000_000/10_000)
		counts[[2]int{day, gen}]++
	}
	gens := map[int]int{}
	for day := 1; day <= replaceDays; day++ {
		var found []string
		for gen := 1; gen <= 2; gen++ {
			if n := counts[[2]int{day, gen}]; n > 0 {
				found = append(found, fmt.Sprintf("gen %d: %d rows", gen, n))
				if n != replaceRows(gen, day) {
					t.Errorf("day %d holds %d rows of generation %d, want %d", day, n, gen, replaceRows(gen, day))
				}
				gens[day] = gen
			}
		}
		if len(found) != 1 {
			t.Errorf("day %d: %s, want exactly one generation", day, strings.Join(found, ", "))
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return gens
}

func TestReplacePartitionsKilledLeavesWholePartitions(t *testing.T) {
	forEachDestination(t, func(t *testing.T, d destination) {
		spec := writeSpecText(t, fmt.Sprintf(replaceSpec, d.yaml()))
		dir := filepath.Dir(spec)
		writeGeneration(t, dir, 1)
		mustSluice(t, append([]string{"update", "-f", spec}, fastArgs...)...)
		for day, gen := range checkGenerations(t, d, spec) {
			if gen != 1 {
				t.Fatalf("run 1: day %d is generation %d", day, gen)
			}
		}

		// Every day is restated; the next run rebuilds all 30, one load
		// each, and is killed three times on the way.
		writeGeneration(t, dir, 2)
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
		swapped := 0
		for kill := range 3 {
			cmd, out := start(t, append([]string{"update", "-f", spec, "--log-level", "debug"}, fastArgs...)...)
			waitFor(t, time.Minute, "a load to start", func() bool { return strings.Contains(out.String(), "incremental run") })
			time.Sleep(time.Duration(rng.IntN(400)) * time.Millisecond)
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			cmd.Wait()
			n := 0
			for _, gen := range checkGenerations(t, d, spec) {
				if gen == 2 {
					n++
				}
			}
			t.Logf("kill %d: %d of %d days rebuilt", kill+1, n, replaceDays)
			if n < swapped {
				t.Fatalf("kill %d: %d days rebuilt, %d before: a swapped partition went back", kill+1, n, swapped)
			}
			swapped = n
		}
		mustSluice(t, append([]string{"update", "-f", spec}, fastArgs...)...)
		for day, gen := range checkGenerations(t, d, spec) {
			if gen != 2 {
				t.Errorf("after the last update: day %d is generation %d, want 2", day, gen)
			}
		}
		// One more run rebuilds everything again and changes nothing.
		mustSluice(t, append([]string{"update", "-f", spec}, fastArgs...)...)
		for day, gen := range checkGenerations(t, d, spec) {
			if gen != 2 {
				t.Errorf("after a further update: day %d is generation %d, want 2", day, gen)
			}
		}
	})
}
