package backfill

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sluicehq/sluice/flows/batch"
)

func jsonlSchema() batch.Schema {
	return cols(
		col("id", batch.Int64, false),
		col("name", batch.String, true),
		col("amount", batch.Decimal(10, 2), true),
		col("at", batch.Timestamp, true),
	)
}

func TestJSONLGoodAndBadLines(t *testing.T) {
	content := strings.Join([]string{
		`{"id": 1, "name": "a", "amount": "12.50", "at": "2024-01-02T03:04:05.123456789Z"}`,
		`{"id": 2, "name": null}`,
		``,
		`not json`,
		`{"id": "three"}`,
		"   \t",
		`{"name": "no id"}`,
		`{"id": 6, "amount": 1.234}`,
		"{\"id\": 7, \"name\": \"crlf\"}\r",
		`[1, 2]`,
		`{"id": 9, "at": 1700000000123}`,
	}, "\n") // no newline after the last line
	path := filepath.Join(t.TempDir(), "in.jsonl")
	writeFile(t, path, content)
	f := fileOf(t, path)
	chunks, err := readAll(t, f, FormatJSONL, jsonlSchema(), ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) != 1 {
		t.Fatalf("%d chunks, want 1", len(chunks))
	}
	c := chunks[0]
	want := []string{
		"1|a|12.50|2024-01-02T03:04:05.123456Z",
		"2|NULL|NULL|NULL",
		"7|crlf|NULL|NULL",
		"9|NULL|NULL|2023-11-14T22:13:20.123Z",
	}
	if diff := cmp.Diff(want, rowsText(chunks)); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int64{0, 1, 8, 10}, c.Rows); diff != "" {
		t.Errorf("Rows (-want +got):\n%s", diff)
	}
	type dl struct{ Source, Position, Reason, Payload string }
	var got []dl
	for _, d := range c.DeadLetters {
		got = append(got, dl{d.Source, d.Position, d.Reason, string(d.Payload)})
		if d.Error == "" {
			t.Errorf("dead letter at line %s has no error", d.Position)
		}
	}
	wantDL := []dl{
		{"in.jsonl", "4", batch.ReasonUndecodable, "not json"},
		{"in.jsonl", "5", batch.ReasonTypeMismatch, `{"id": "three"}`},
		{"in.jsonl", "7", batch.ReasonMissingField, `{"name": "no id"}`},
		{"in.jsonl", "8", batch.ReasonTypeMismatch, `{"id": 6, "amount": 1.234}`},
		{"in.jsonl", "10", batch.ReasonUndecodable, `[1, 2]`},
	}
	if diff := cmp.Diff(wantDL, got); diff != "" {
		t.Errorf("dead letters (-want +got):\n%s", diff)
	}
	if c.Next != 11 || !c.Done || c.FirstRow != 0 || c.RowGroup != -1 {
		t.Errorf("Next %d Done %v FirstRow %d RowGroup %d", c.Next, c.Done, c.FirstRow, c.RowGroup)
	}
	if c.Bytes != f.Size {
		t.Errorf("Bytes %d, file has %d", c.Bytes, f.Size)
	}
}

func jsonlLines(n int) string {
	var b strings.Builder
	for i := range n {
		if i%10 == 3 {
			b.WriteString("oops\n")
			continue
		}
		fmt.Fprintf(&b, `{"id": %d, "name": "n%d"}`+"\n", i, i)
	}
	return b.String()
}

func TestJSONLResume(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.jsonl")
	writeFile(t, path, jsonlLines(97))
	f := fileOf(t, path)
	s := cols(col("id", batch.Int64, false), col("name", batch.String, false))
	full, err := readAll(t, f, FormatJSONL, s, ReadOptions{MaxRows: 1000})
	if err != nil {
		t.Fatal(err)
	}
	all := rowsText(full)
	fileRows := map[int64]int{} // file row -> index in all
	for i := range full[0].Batch.Len() {
		fileRows[full[0].Row(i)] = i
	}
	for _, first := range []int{1, 7, 40} {
		chunks, err := readAll(t, f, FormatJSONL, s, ReadOptions{MaxRows: first})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range chunks {
			if c.Batch.Len()+len(c.DeadLetters) > first {
				t.Errorf("chunk of %d rows and %d dead letters with MaxRows %d", c.Batch.Len(), len(c.DeadLetters), first)
			}
			rest, err := readAll(t, f, FormatJSONL, s, ReadOptions{Start: c.Next, MaxRows: 13})
			if err != nil {
				t.Fatal(err)
			}
			from := len(all)
			for row := c.Next; row < 97; row++ {
				if i, ok := fileRows[row]; ok {
					from = i
					break
				}
			}
			if diff := cmp.Diff(all[from:], rowsText(rest), cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("resume at line %d (-want +got):\n%s", c.Next, diff)
			}
			if rest[0].FirstRow != c.Next || !rest[len(rest)-1].Done {
				t.Errorf("resume at %d: first chunk at %d, last Done %v", c.Next, rest[0].FirstRow, rest[len(rest)-1].Done)
			}
			bytes := rest[0].Skipped
			for _, r := range rest {
				bytes += r.Bytes
				for _, d := range r.DeadLetters {
					if d.Payload == nil || string(d.Payload) != "oops" {
						t.Errorf("dead letter payload %q", d.Payload)
					}
				}
			}
			if bytes != f.Size {
				t.Errorf("resume at %d: bytes add up to %d, file has %d", c.Next, bytes, f.Size)
			}
		}
	}
}

func TestJSONLLongLines(t *testing.T) {
	long := `{"id": 2, "name": "` + strings.Repeat("x", 300_000) + `"}`
	fits := `{"id": 3, "name": "` + strings.Repeat("y", 90_000) + `"}`
	content := `{"id": 1}` + "\n" + long + "\n" + fits + "\n" + strings.Repeat("z", 200_000) + "\n" + `{"id": 5}` + "\n"
	path := filepath.Join(t.TempDir(), "long.jsonl")
	writeFile(t, path, content)
	f := fileOf(t, path)
	s := cols(col("id", batch.Int64, false), col("name", batch.String, true))
	chunks, err := readAll(t, f, FormatJSONL, s, ReadOptions{MaxLineBytes: 100_000})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	var dls []string
	for _, c := range chunks {
		ids = append(ids, c.Batch.Vectors[0].Ints...)
		for _, d := range c.DeadLetters {
			dls = append(dls, d.Position+" "+d.Reason+" "+d.Error)
			if len(d.Payload) == 0 || len(d.Payload) > payloadCap {
				t.Errorf("payload of %d bytes", len(d.Payload))
			}
		}
	}
	if diff := cmp.Diff([]int64{1, 3, 5}, ids); diff != "" {
		t.Errorf("ids (-want +got):\n%s", diff)
	}
	wantDL := []string{
		"2 undecodable the line is longer than 100000 bytes",
		"4 undecodable the line is longer than 100000 bytes",
	}
	if diff := cmp.Diff(wantDL, dls); diff != "" {
		t.Errorf("dead letters (-want +got):\n%s", diff)
	}
	if got := chunks[0].Batch.Vectors[1].Strs[1]; got != strings.Repeat("y", 90_000) {
		t.Errorf("the line that fits read as %d bytes", len(got))
	}
}

func TestJSONLMaxBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.jsonl")
	writeFile(t, path, jsonlLines(100))
	f := fileOf(t, path)
	chunks, err := readAll(t, f, FormatJSONL, cols(col("id", batch.Int64, false)), ReadOptions{MaxBytes: 200})
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, c := range chunks {
		if c.Bytes > 200+40 {
			t.Errorf("chunk of %d bytes with MaxBytes 200", c.Bytes)
		}
		total += c.Bytes
	}
	if total != f.Size || len(chunks) < 5 {
		t.Errorf("%d chunks of %d bytes in all, file has %d", len(chunks), total, f.Size)
	}
}

func TestJSONLHiveAndFilePath(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "region=eu%2Fwest", "n=7", "a.jsonl"), `{"id": 1, "region": "ignored"}`+"\n")
	files, err := Plan(dir, "region=*/n=*/*.jsonl")
	if err != nil || len(files) != 1 {
		t.Fatalf("Plan: %v %v", files, err)
	}
	hive, err := HiveTypes(files, batch.Schema{})
	if err != nil {
		t.Fatal(err)
	}
	s := cols(col("region", batch.String, false), col("id", batch.Int64, false), col("n", batch.Int64, false), col(FieldFilePath, batch.String, false))
	chunks, err := readAll(t, files[0], FormatJSONL, s, ReadOptions{Hive: hive})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"eu/west|1|7|region=eu%2Fwest/n=7/a.jsonl"}
	if diff := cmp.Diff(want, rowsText(chunks)); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
}

func TestJSONLEmptyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "e.jsonl")
	writeFile(t, path, "")
	chunks, err := readAll(t, fileOf(t, path), FormatJSONL, cols(col("id", batch.Int64, false)), ReadOptions{Start: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) != 1 || chunks[0].Batch.Len() != 0 || !chunks[0].Done || chunks[0].Next != 0 {
		t.Fatalf("chunks %+v, want one empty chunk with Done", chunks)
	}
}

func TestReadFileEach(t *testing.T) {
	path := filepath.Join(t.TempDir(), "e.jsonl")
	writeFile(t, path, jsonlLines(25))
	f := fileOf(t, path)
	s := cols(col("id", batch.Int64, false), col("name", batch.String, false))
	rows, chunks := 0, 0
	err := ReadFile(t.Context(), f, FormatJSONL, s, ReadOptions{MaxRows: 10}, func(c *Chunk) error {
		rows += c.Batch.Len() + len(c.DeadLetters) // every tenth line is bad
		chunks++
		return nil
	})
	if err != nil || rows != 25 || chunks != 3 {
		t.Fatalf("ReadFile: %v after %d lines in %d chunks, want 25 lines in 3", err, rows, chunks)
	}
	stop := errors.New("stop")
	chunks = 0
	err = ReadFile(t.Context(), f, FormatJSONL, s, ReadOptions{MaxRows: 10}, func(*Chunk) error { chunks++; return stop })
	if !errors.Is(err, stop) || chunks != 1 {
		t.Fatalf("ReadFile: %v after %d chunks, want fn's error after the first", err, chunks)
	}
}

// TestJSONLLines checks ReadOptions.Lines: the lines come undecoded, each
// a record of its file and line number, blank lines left out and a line
// too long a dead letter; a resumed read starts at its line.
func TestJSONLLines(t *testing.T) {
	long := `{"id": 4, "name": "` + strings.Repeat("x", 2_000) + `"}`
	content := strings.Join([]string{`{"id": 1}`, ``, `not json`, long, "{\"id\": 5}\r", `{"id": 6}`}, "\n") + "\n"
	path := filepath.Join(t.TempDir(), "in.jsonl")
	writeFile(t, path, content)
	f := fileOf(t, path)
	read := func(opts ReadOptions) (recs []string, dls []string, next []int64) {
		t.Helper()
		opts.Lines, opts.MaxLineBytes = true, 1_000
		chunks, err := readAll(t, f, FormatJSONL, batch.Schema{}, opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range chunks {
			if c.Batch != nil {
				t.Fatalf("chunk has a batch of %d rows", c.Batch.Len())
			}
			for _, r := range c.Records {
				if r.Topic != f.Name || r.Partition != batch.LinePartition {
					t.Fatalf("record %+v is not of the file's lines", r)
				}
				recs = append(recs, r.Position()+" "+string(r.Value))
			}
			for _, d := range c.DeadLetters {
				dls = append(dls, d.Position+" "+d.Error)
			}
			next = append(next, c.Next)
		}
		return recs, dls, next
	}
	recs, dls, next := read(ReadOptions{MaxRows: 3})
	want := []string{`1 {"id": 1}`, `3 not json`, `5 {"id": 5}`, `6 {"id": 6}`}
	if diff := cmp.Diff(want, recs); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"4 the line is longer than 1000 bytes"}, dls); diff != "" {
		t.Errorf("dead letters (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int64{3, 6}, next); diff != "" {
		t.Errorf("resume points (-want +got):\n%s", diff)
	}
	recs, _, _ = read(ReadOptions{Start: 3})
	if diff := cmp.Diff(want[2:], recs); diff != "" {
		t.Errorf("records from line 4 (-want +got):\n%s", diff)
	}
}

// TestJSONLPaths checks that a JSONL column takes its nested field.
func TestJSONLPaths(t *testing.T) {
	path := filepath.Join(t.TempDir(), "in.jsonl")
	writeFile(t, path, `{"id": 1, "customer": {"zip": "1000"}}`+"\n"+`{"id": 2, "customer": {"zip": 2}}`+"\n")
	s := cols(col("id", batch.Int64, false), col("zip", batch.String, true))
	chunks, err := readAll(t, fileOf(t, path), FormatJSONL, s, ReadOptions{Paths: map[string]string{"zip": "customer.zip"}})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"1|1000"}, rowsText(chunks)); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	if dls := chunks[0].DeadLetters; len(dls) != 1 || !strings.Contains(dls[0].Error, `field "customer.zip": 2 is not a string`) {
		t.Errorf("dead letters %v, want line 2's zip named by its path", dls)
	}
}
