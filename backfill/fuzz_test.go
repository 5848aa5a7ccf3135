package backfill

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/flows/batch"
)

// FuzzJSONL reads arbitrary content as a JSONL file: the reader never fails
// on content, accounts for every line exactly once (a row, a dead letter or
// a blank line), and a read resumed after any chunk yields the same rest.
func FuzzJSONL(f *testing.F) {
	f.Add([]byte("{\"id\": 1, \"name\": \"a\"}\n\nnot json\n{\"id\": \"x\"}\r\n{\"id\": 3}"), uint8(2))
	f.Add([]byte("\n\n\n"), uint8(1))
	f.Add([]byte(`{"id": 1, "name": "`+strings.Repeat("long", 40)+`"}`+"\n"+`{"id": 2}`), uint8(3))
	f.Add([]byte{0xff, 0xfe, '\n', '{', '}'}, uint8(5))
	s := cols(col("id", batch.Int64, false), col("name", batch.String, true))
	f.Fuzz(func(t *testing.T, content []byte, maxRows uint8) {
		path := filepath.Join(t.TempDir(), "f.jsonl")
		writeFile(t, path, string(content))
		file := fileOf(t, path)
		opts := ReadOptions{MaxRows: int(maxRows%8) + 1, MaxLineBytes: 64}
		chunks, err := readAll(t, file, FormatJSONL, s, opts)
		if err != nil {
			t.Fatal(err)
		}
		lines := int64(bytes.Count(content, []byte("\n")))
		if len(content) > 0 && content[len(content)-1] != '\n' {
			lines++
		}
		last := chunks[len(chunks)-1]
		if !last.Done || last.Next != lines {
			t.Fatalf("last chunk: Done %v Next %d, file has %d lines", last.Done, last.Next, lines)
		}
		blank := int64(0)
		for _, l := range bytes.Split(content, []byte("\n")) {
			if len(bytes.TrimSpace(l)) == 0 {
				blank++
			}
		}
		if len(content) == 0 || content[len(content)-1] == '\n' {
			blank-- // the split's empty tail is no line
		}
		var rows, dls, size int64
		prev := int64(0)
		for _, c := range chunks {
			if c.FirstRow != prev {
				t.Fatalf("chunk starts at %d after one that ended at %d", c.FirstRow, prev)
			}
			prev = c.Next
			rows += int64(c.Batch.Len())
			dls += int64(len(c.DeadLetters))
			size += c.Bytes
			if c.Rows != nil && len(c.Rows) != c.Batch.Len() {
				t.Fatalf("Rows has %d entries for %d rows", len(c.Rows), c.Batch.Len())
			}
			for i := range c.Batch.Len() {
				if r := c.Row(i); r < c.FirstRow || r >= c.Next {
					t.Fatalf("row %d of a chunk of lines [%d, %d)", r, c.FirstRow, c.Next)
				}
			}
		}
		if rows+dls+blank != lines {
			t.Fatalf("%d rows + %d dead letters + %d blank lines != %d lines", rows, dls, blank, lines)
		}
		if size != int64(len(content)) {
			t.Fatalf("chunks account for %d bytes of %d", size, len(content))
		}
		mid := chunks[len(chunks)/2]
		opts.Start = mid.Next
		rest, err := readAll(t, file, FormatJSONL, s, opts)
		if err != nil {
			t.Fatal(err)
		}
		var want, got []string
		for _, c := range chunks[len(chunks)/2+1:] {
			want = append(want, rowsText([]*Chunk{c})...)
		}
		got = rowsText(rest)
		if strings.Join(want, "\n") != strings.Join(got, "\n") {
			t.Fatalf("resume at %d: rows %q, want %q", mid.Next, got, want)
		}
	})
}

// FuzzHiveSegment parses arbitrary folder names as Hive segments: a segment
// is name=value with an identifier name, and the type HiveTypes infers for
// its value always parses it.
func FuzzHiveSegment(f *testing.F) {
	for _, s := range []string{"year=2024", "day=2024-02-29", "x=%41%zz", "a=", "k=__HIVE_DEFAULT_PARTITION__", "n=-9223372036854775808", "=1", "a==b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, seg string) {
		h, ok := ParseHiveSegment(seg)
		if !ok {
			if name, _, found := strings.Cut(seg, "="); found && identifier(name) {
				t.Fatalf("%q not parsed though %q is an identifier", seg, name)
			}
			return
		}
		if !strings.HasPrefix(seg, h.Name+"=") || !identifier(h.Name) {
			t.Fatalf("%q parsed as name %q", seg, h.Name)
		}
		if value := seg[len(h.Name)+1:]; !strings.Contains(value, "%") && h.Text != value {
			t.Fatalf("%q: text %q, want %q", seg, h.Text, value)
		}
		files := []File{{Name: seg + "/f", Hive: []HiveValue{h}}}
		s, err := HiveTypes(files, batch.Schema{})
		if err != nil {
			t.Fatal(err)
		}
		v, err := HiveValueOf(files[0], s.Columns[0])
		if err != nil {
			t.Fatalf("%q typed %v does not parse: %v", seg, s.Columns[0].Type, err)
		}
		if v.Null != h.Null() {
			t.Fatalf("%q: null %v, segment null %v", seg, v.Null, h.Null())
		}
		if !v.Null && s.Columns[0].Type.Kind == batch.KindString && v.Str != h.Text {
			t.Fatalf("%q: string value %q, text %q", seg, v.Str, h.Text)
		}
	})
}
