package integration

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/sluicehq/sluice/flows/batch"
)

// backfillRow is a row of the backfill tests' and benchmarks' Parquet
// files: eight columns of the usual kinds (int64 ids, a timestamp, strings,
// a decimal, a nullable string). Every value follows from the id.
type backfillRow struct {
	ID         int64     `parquet:"id"`
	CustomerID int64     `parquet:"customer_id"`
	CreatedAt  time.Time `parquet:"created_at,timestamp(microsecond)"`
	Status     string    `parquet:"status,dict"`
	Country    string    `parquet:"country,dict"`
	Amount     int64     `parquet:"amount,decimal(2:12)"` // cents
	Note       *string   `parquet:"note,optional"`
	Items      int64     `parquet:"items"`
}

var (
	backfillStatuses  = []string{"new", "paid", "shipped", "delivered", "cancelled"}
	backfillCountries = []string{"DE", "FR", "US", "JP", "BR", "IN", "NG"}
	backfillEpoch     = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
)

// newBackfillRow returns the row of id.
func newBackfillRow(id int64) backfillRow {
	r := backfillRow{
		ID:         id,
		CustomerID: id % 9973,
		CreatedAt:  backfillEpoch.Add(time.Duration(id)*time.Second + time.Duration(id%1000)*time.Microsecond),
		Status:     backfillStatuses[id%int64(len(backfillStatuses))],
		Country:    backfillCountries[id%int64(len(backfillCountries))],
		Amount:     id % 1_000_000,
		Items:      1 + id%9,
	}
	if id%7 != 0 {
		n := "note " + strconv.FormatInt(id, 10)
		r.Note = &n
	}
	return r
}

// backfillColumns are the columns of backfillRow as a spec declares them.
const backfillColumns = `      - {name: id, type: int64}
      - {name: customer_id, type: int64}
      - {name: created_at, type: timestamp}
      - {name: status, type: string}
      - {name: country, type: string}
      - {name: amount, type: "decimal(12,2)"}
      - {name: note, type: string, nullable: true}
      - {name: items, type: int64}
`

// backfillFile is one written input file.
type backfillFile struct {
	name        string // relative to the spec's folder
	first, rows int64  // ids first..first+rows-1
	year, month int64  // Hive segments; 0 when the file has none
}

// writeBackfillFiles writes files Parquet files of rowsPerFile rows each
// under dir/root, in row groups of rowGroupRows, with ids
// 0..files*rowsPerFile-1 in order. The first hive files lie in Hive folders
// year=2024/month=MM/, the others in flat/.
func writeBackfillFiles(t testing.TB, dir, root string, files, rowsPerFile, rowGroupRows, hive int) []backfillFile {
	t.Helper()
	out := make([]backfillFile, files)
	rows := make([]backfillRow, 0, rowGroupRows)
	for i := range out {
		f := backfillFile{first: int64(i * rowsPerFile), rows: int64(rowsPerFile)}
		if i < hive {
			f.year, f.month = 2024, int64(1+i%12)
			f.name = fmt.Sprintf("%s/year=%d/month=%02d/part-%03d.parquet", root, f.year, f.month, i)
		} else {
			f.name = fmt.Sprintf("%s/flat/part-%03d.parquet", root, i)
		}
		out[i] = f
		path := filepath.Join(dir, filepath.FromSlash(f.name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		fh, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		w := parquet.NewGenericWriter[backfillRow](fh, parquet.MaxRowsPerRowGroup(int64(rowGroupRows)))
		for lo := f.first; lo < f.first+f.rows; lo += int64(rowGroupRows) {
			rows = rows[:0]
			for id := lo; id < min(lo+int64(rowGroupRows), f.first+f.rows); id++ {
				rows = append(rows, newBackfillRow(id))
			}
			if _, err := w.Write(rows); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if err := w.Flush(); err != nil { // one row group
				t.Fatalf("%s: %v", path, err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if err := fh.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// backfillSpec is a pipeline of one append once-flow, hist, of the files
// under in/ (every file below, Hive folders too) into target t, whose year
// and month columns come from the Hive folders. Arguments: destination,
// batch rows.
const backfillSpec = `pipeline: bf
destination: %s
tables:
  - name: t
    columns:
` + backfillColumns + `      - {name: year, type: int64, nullable: true}
      - {name: month, type: int64, nullable: true}
flows:
  - name: hist
    target: t
    kind: append
    once: true
    source: {files: {path: "in/**", format: parquet}}
    batch: {rows: %d}
`

// flowStatus is a flow's part of `sluice status --json`.
type flowStatus struct {
	Name      string `json:"name"`
	Loads     int    `json:"loads"`
	Rows      int64  `json:"rows"`
	FilesDone int    `json:"files_done"`
	Once      string `json:"once"`
}

// statusOf returns a flow's state as `sluice status --json` reports it.
func statusOf(t testing.TB, spec, flow string) flowStatus {
	t.Helper()
	var rep struct {
		Flows []flowStatus `json:"flows"`
	}
	out := mustSluice(t, "status", "-f", spec, "--json").stdout
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	for _, f := range rep.Flows {
		if f.Name == flow {
			return f
		}
	}
	t.Fatalf("status lists no flow %s:\n%s", flow, out)
	return flowStatus{}
}

// fileProgress is how far the ledger says a flow read each file: the next
// row to read, and whether the file was read to its end.
type fileProgress struct {
	next int64
	done bool
}

// filesRead reads the ledger (`sluice show _sluice_loads`) and returns how
// far the flow's loads read each file.
func filesRead(t testing.TB, spec, flow string) map[string]fileProgress {
	t.Helper()
	out := map[string]fileProgress{}
	for _, l := range jsonl(t, mustSluice(t, "show", "-f", spec, "_sluice_loads", "--format", "jsonl").stdout) {
		if l["flow"] != flow {
			continue
		}
		text, _ := l["positions"].(string)
		ps, err := batch.DecodePositions(text)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			if p.File == "" {
				continue
			}
			cur := out[p.File]
			cur.next = max(cur.next, p.RowGroup)
			cur.done = cur.done || p.Done
			out[p.File] = cur
		}
	}
	return out
}

// partial lists the files read partly.
func partial(read map[string]fileProgress) []string {
	var out []string
	for name, p := range read {
		if !p.done {
			out = append(out, fmt.Sprintf("%s at row %d", name, p.next))
		}
	}
	slices.Sort(out)
	return out
}

// loadLine matches the debug log line of a committed load of target t: the
// ClickHouse sink logs each commit, the local sink each publication.
var loadLine = regexp.MustCompile(`(?m)msg="load committed"|msg=published .*table=t( |$)`)

// killUpdateAfterLoads starts `sluice update`, waits until it logged loads
// committed (or published) loads of target t and, when midFile, until the
// last load it committed left its file read partly; then it sleeps jitter
// and kills it with SIGKILL. It fails when the process ended by itself
// first. The log is looked at every 2 ms: a load takes longer, so the kill
// falls where it was aimed.
func killUpdateAfterLoads(t testing.TB, spec string, loads int, jitter time.Duration, midFile bool) {
	t.Helper()
	cmd, out := start(t, append([]string{"update", "-f", spec, "--log-level", "debug"}, fastArgs...)...)
	deadline := time.Now().Add(time.Minute)
	for running(cmd) {
		log := out.String()
		at := loadLine.FindAllStringIndex(log, -1)
		if len(at) >= loads && (!midFile || leftFilePartly(log)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %d loads within a minute", loads)
		}
		time.Sleep(2 * time.Millisecond)
	}
	time.Sleep(jitter)
	if !running(cmd) {
		cmd.Wait()
		t.Fatalf("update ended (%v) before its kill after %d loads:\n%s", cmd.ProcessState, loads, tail(out.String(), 4000))
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		t.Fatalf("update was not killed: %v", cmd.ProcessState)
	}
}

// leftFilePartly reports whether the last file chunk the log says was
// committed left its file read partly.
func leftFilePartly(log string) bool {
	i := strings.LastIndex(log, `msg="file chunk committed"`)
	if i < 0 {
		return false
	}
	line, _, _ := strings.Cut(log[i:], "\n")
	return strings.Contains(line, " done=false")
}

// backfillRows renders what a target must hold for the files, as
// targetRows renders the columns id, year, month, note (hive) or id, note.
func backfillRows(files []backfillFile, hive bool) []string {
	var out []string
	for _, f := range files {
		year, month := "∞", "∞"
		if f.year != 0 {
			year, month = strconv.FormatInt(f.year, 10), strconv.FormatInt(f.month, 10)
		}
		for id := f.first; id < f.first+f.rows; id++ {
			note := "∞"
			if r := newBackfillRow(id); r.Note != nil {
				note = *r.Note
			}
			if hive {
				out = append(out, fmt.Sprintf("%d,%s,%s,%s", id, year, month, note))
			} else {
				out = append(out, fmt.Sprintf("%d,%s", id, note))
			}
		}
	}
	slices.Sort(out)
	return out
}

// checkBackfill fails unless the table holds every row of the files
// exactly once (want from backfillRows; hive: with the Hive columns), and no
// dead letters were written. The rows read back, ids included, must equal
// want, which holds each id once: that checks the count, the distinct ids
// and their set; ClickHouse counts them by SQL as well.
func checkBackfill(t testing.TB, d destination, spec, table string, hive bool, want []string) {
	t.Helper()
	if ch, ok := d.(*clickHouseDest); ok {
		total := int64(len(want))
		if rows, distinct := ch.count(t, spec, table, "id"); rows != total || distinct != total {
			t.Fatalf("%s: count() %d, uniqExact(id) %d; want %d each", table, rows, distinct, total)
		}
	}
	cols := []string{"id", "note"}
	if hive {
		cols = []string{"id", "year", "month", "note"}
	}
	if got := targetRows(t, d, spec, table, cols); !slices.Equal(got, want) {
		t.Fatalf("%s: %d rows, want %d; first differences:\n%s", table, len(got), len(want), diffRows(got, want, 10))
	}
	if dls := d.deadLetters(t, spec); len(dls) > 0 {
		t.Fatalf("%d dead letters, want none; first: %+v", len(dls), dls[0])
	}
}

// TestBackfillKilledThreeTimesLoadsEachRowOnce writes 50 Parquet files of
// 6,000 rows each (20 files in Hive folders), in row groups of 2,000 read in
// chunks of 1,000 (ClickHouse: 3,000, across row groups) by an
// append once-flow, and kills `sluice update` with SIGKILL three times at
// random moments of its run, two of them aimed at the middle of a file (at
// least one kill must leave the ledger showing a file read partly: up to
// three more kills aimed so are made until one does); an
// update to the end then leaves every row in the target exactly once. A further update reads no
// file again, and a full refresh loads every row once more, exactly once.
func TestBackfillKilledThreeTimesLoadsEachRowOnce(t *testing.T) {
	t.Parallel()
	const nFiles, perFile, rowGroup, hive = 50, 6_000, 2_000, 20
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	forEachDestination(t, func(t *testing.T, d destination) {
		// Chunks of half a row group, so that kills fall mid-file and
		// mid-row group. A ClickHouse load costs more (a staging table and
		// a publication each): there, chunks of a row group and a half.
		batchRows := rowGroup / 2
		if d.name() == "clickhouse" {
			batchRows = rowGroup * 3 / 2
		}
		perFileLoads := perFile / batchRows
		totalLoads := nFiles * perFileLoads
		spec := writeSpecText(t, fmt.Sprintf(backfillSpec, d.yaml(), batchRows))
		files := writeBackfillFiles(t, filepath.Dir(spec), "in", nFiles, perFile, rowGroup, hive)
		want := backfillRows(files, true)
		rng := rand.New(rand.NewPCG(seed, uint64(len(d.name())))) // one stream per destination

		// Three kills, and up to three more while none left a file read
		// partly: a kill aimed at the middle of a file can land after a
		// load still in flight has finished that file.
		var midFile int
		for round := 0; round < 3 || (midFile == 0 && round < 6); round++ {
			aim := round != 2
			read := filesRead(t, spec, "hist")
			committed := 0
			for _, p := range read {
				committed += int(p.next) / batchRows
			}
			// A random moment within what is left of the run, in loads:
			// every round but round 2 aims at the middle of a file (files
			// are read two at a time, so the aim is rough: the ledger tells
			// where each kill fell), round 2 anywhere, after a random pause
			// of up to 30 ms.
			loads := 1 + rng.IntN(max(1, (totalLoads-committed)/3))
			jitter := time.Duration(rng.IntN(30)) * time.Millisecond
			if aim {
				loads += (perFileLoads/2 - (committed+loads)%perFileLoads + perFileLoads) % perFileLoads
				jitter = 0
			}
			killUpdateAfterLoads(t, spec, loads, jitter, aim)
			read = filesRead(t, spec, "hist")
			var rows int64
			done := 0
			for _, p := range read {
				rows += p.next
				if p.done {
					done++
				}
			}
			part := partial(read)
			if len(part) > 0 {
				midFile++
			}
			t.Logf("round %d: killed after %d loads (+%s): %d rows committed, %d files done, read partly: %v",
				round, loads, jitter, rows, done, part)
			if st := statusOf(t, spec, "hist"); st.Once != "running" {
				t.Fatalf("after kill %d: once-flow state %q, want running", round, st.Once)
			}
		}
		if midFile == 0 {
			t.Fatal("no kill left a file read partly: the kills all fell between files")
		}

		began := time.Now()
		mustSluice(t, append([]string{"update", "-f", spec}, fastArgs...)...)
		t.Logf("update to the end took %s", time.Since(began).Round(time.Millisecond))
		checkBackfill(t, d, spec, "t", true, want)
		st := statusOf(t, spec, "hist")
		if st.Once != "complete" || st.FilesDone != nFiles || st.Rows != int64(len(want)) {
			t.Fatalf("status of hist: %+v; want complete, %d files read, %d rows", st, nFiles, len(want))
		}
		checkLeftoversRecovered(t, d, spec)

		// Complete: the next update reads no file.
		before := len(d.loads(t, spec))
		res := mustSluice(t, append([]string{"update", "-f", spec, "--log-level", "debug"}, fastArgs...)...)
		if after := len(d.loads(t, spec)); after != before {
			t.Fatalf("update of a complete once-flow committed %d loads, want 0", after-before)
		}
		if strings.Contains(res.stderr, "reading files") || !strings.Contains(res.stderr, "once-flow already complete") {
			t.Fatalf("update of a complete once-flow did not skip it:\n%s", tail(res.stderr, 4000))
		}
		if rows, distinct := d.count(t, spec, "t", "id"); rows != int64(len(want)) || distinct != rows {
			t.Fatalf("t after the update of a complete once-flow: %d rows, %d distinct ids; want %d each", rows, distinct, len(want))
		}

		// A full refresh loads every file again, once.
		began = time.Now()
		mustSluice(t, append([]string{"update", "-f", spec, "--full-refresh"}, fastArgs...)...)
		t.Logf("full refresh took %s", time.Since(began).Round(time.Millisecond))
		checkBackfill(t, d, spec, "t", true, want)
		if st := statusOf(t, spec, "hist"); st.Once != "complete" || st.FilesDone != nFiles {
			t.Fatalf("status of hist after the refresh: %+v; want complete with %d files read", st, nFiles)
		}
		checkNoLeftovers(t, d)
	})
}
