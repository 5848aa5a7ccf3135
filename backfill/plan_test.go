package backfill

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/flows/batch"
)

func tree(t *testing.T, paths ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, p := range paths {
		writeFile(t, filepath.Join(dir, filepath.FromSlash(p)), "x")
	}
	return dir
}

func names(files []File) []string {
	out := []string{}
	for _, f := range files {
		out = append(out, f.Name)
	}
	return out
}

func TestPlanGlobs(t *testing.T) {
	dir := tree(t,
		"a.parquet", "b.parquet", "c.jsonl", ".hidden.parquet", "_tmp.parquet",
		"history/year=2023/month=12/p1.parquet",
		"history/year=2024/month=01/p1.parquet",
		"history/year=2024/month=01/p2.parquet",
		"history/year=2024/month=02/deep/p3.parquet",
		"history/year=2024/_temporary/x.parquet",
		"history/.git/y.parquet",
		"history/year=2024/_SUCCESS",
		"logs/2024/x1.jsonl", "logs/2024/y1.jsonl", "logs/2025/z1.jsonl",
	)
	if err := os.Mkdir(filepath.Join(dir, "dir.parquet"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		pattern string
		want    []string
	}{
		{"star", "*.parquet", []string{"a.parquet", "b.parquet"}},
		{"literal hidden name", "_tmp.parquet", []string{"_tmp.parquet"}},
		{"question mark and class", "[ac].*", []string{"a.parquet", "c.jsonl"}},
		{"hive folders", "history/year=*/month=*/*.parquet", []string{
			"history/year=2023/month=12/p1.parquet", "history/year=2024/month=01/p1.parquet", "history/year=2024/month=01/p2.parquet"}},
		{"double star", "history/**/*.parquet", []string{
			"history/year=2023/month=12/p1.parquet", "history/year=2024/month=01/p1.parquet", "history/year=2024/month=01/p2.parquet",
			"history/year=2024/month=02/deep/p3.parquet"}},
		{"double star in the middle matches zero folders", "history/year=2024/**/p?.parquet", []string{
			"history/year=2024/month=01/p1.parquet", "history/year=2024/month=01/p2.parquet", "history/year=2024/month=02/deep/p3.parquet"}},
		{"trailing double star", "logs/**", []string{"logs/2024/x1.jsonl", "logs/2024/y1.jsonl", "logs/2025/z1.jsonl"}},
		{"two double stars list each file once", "**/**/*1.jsonl", []string{"logs/2024/x1.jsonl", "logs/2024/y1.jsonl", "logs/2025/z1.jsonl"}},
		{"folder with a literal segment", "logs/2024/*", []string{"logs/2024/x1.jsonl", "logs/2024/y1.jsonl"}},
		{"missing folder", "nothing/*.parquet", []string{}},
		{"dot segments are cleaned", "./logs/../logs/2025/z1.jsonl", []string{"logs/2025/z1.jsonl"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			files, err := Plan(dir, tc.pattern)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, names(files)); diff != "" {
				t.Errorf("files (-want +got):\n%s", diff)
			}
			for _, f := range files {
				if f.Path != filepath.Join(dir, filepath.FromSlash(f.Name)) || f.Size != 1 || f.ModTime.IsZero() {
					t.Errorf("file %+v", f)
				}
			}
		})
	}
	t.Run("absolute pattern", func(t *testing.T) {
		files, err := Plan("/elsewhere", filepath.ToSlash(dir)+"/logs/*/x*.jsonl")
		if err != nil {
			t.Fatal(err)
		}
		want := []string{filepath.ToSlash(dir) + "/logs/2024/x1.jsonl"}
		if diff := cmp.Diff(want, names(files)); diff != "" {
			t.Errorf("files (-want +got):\n%s", diff)
		}
	})
}

func TestPlanErrors(t *testing.T) {
	dir := tree(t, "a.parquet", "x=1/y=2/x=3/f.parquet")
	cases := []struct {
		pattern string
		want    string
	}{
		{"", "empty path pattern"},
		{"a**/*.parquet", "** must be a whole segment"},
		{"[a-/*.parquet", "syntax error in pattern"},
		{".", "names no file"},
		{"**/*.parquet", "hive segment x appears twice"},
	}
	for _, tc := range cases {
		t.Run(tc.pattern, func(t *testing.T) {
			_, err := Plan(dir, tc.pattern)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestPlanHiveSegments(t *testing.T) {
	dir := tree(t,
		"data/year=2024/month=01/day=2024-01-05/a.parquet",
		"data/year=2024/month=02/day=2024-02-29/a.parquet",
		"data/year=2025/month=__HIVE_DEFAULT_PARTITION__/day=2025-01-01/a.parquet",
		"data/year=2025/month=/day=2025-01-02/a.parquet",
	)
	files, err := Plan(dir, "data/year=*/*/*/a.parquet")
	if err != nil {
		t.Fatal(err)
	}
	var got [][]HiveValue
	for _, f := range files {
		got = append(got, f.Hive)
	}
	want := [][]HiveValue{
		{{"year", "2024"}, {"month", "01"}, {"day", "2024-01-05"}},
		{{"year", "2024"}, {"month", "02"}, {"day", "2024-02-29"}},
		{{"year", "2025"}, {"month", ""}, {"day", "2025-01-02"}},
		{{"year", "2025"}, {"month", "__HIVE_DEFAULT_PARTITION__"}, {"day", "2025-01-01"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("hive (-want +got):\n%s", diff)
	}
	t.Run("a literal segment with = is a Hive column", func(t *testing.T) {
		files, err := Plan(dir, "data/year=2024/month=01/*/a.parquet")
		if err != nil || len(files) != 1 {
			t.Fatalf("%v %v", files, err)
		}
		if len(files[0].Hive) != 3 {
			t.Errorf("hive %v, want year, month and day", files[0].Hive)
		}
	})
}

func TestParseHiveSegment(t *testing.T) {
	cases := []struct {
		seg  string
		want HiveValue
		ok   bool
	}{
		{"year=2024", HiveValue{"year", "2024"}, true},
		{"a_b1=x=y", HiveValue{"a_b1", "x=y"}, true},
		{"city=S%C3%A3o%20Paulo", HiveValue{"city", "São Paulo"}, true},
		{"p=50%", HiveValue{"p", "50%"}, true},
		{"p=%zz1", HiveValue{"p", "%zz1"}, true},
		{"k=", HiveValue{"k", ""}, true},
		{"1year=2024", HiveValue{}, false},
		{"=2024", HiveValue{}, false},
		{"my-col=1", HiveValue{}, false},
		{"plain", HiveValue{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.seg, func(t *testing.T) {
			got, ok := ParseHiveSegment(tc.seg)
			if ok != tc.ok || got != tc.want {
				t.Errorf("got %+v %v, want %+v %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func hiveFiles(paths ...string) []File {
	var out []File
	for _, p := range paths {
		segs := strings.Split(p, "/")
		h, err := parseHive(segs[:len(segs)-1])
		if err != nil {
			panic(err)
		}
		out = append(out, File{Name: p, Hive: h})
	}
	return out
}

func TestHiveTypes(t *testing.T) {
	cases := []struct {
		name     string
		files    []File
		declared batch.Schema
		want     batch.Schema
		err      string
	}{
		{
			name:  "integers, dates and strings",
			files: hiveFiles("year=2024/day=2024-01-01/k=a/f", "year=-7/day=1999-12-31/k=12/f"),
			want:  cols(col("year", batch.Int64, false), col("day", batch.Date, false), col("k", batch.String, false)),
		},
		{
			name:  "a bad date makes strings",
			files: hiveFiles("day=2024-01-01/f", "day=2024-02-30/f"),
			want:  cols(col("day", batch.String, false)),
		},
		{
			name:  "an integer out of range makes strings",
			files: hiveFiles("n=1/f", "n=99999999999999999999/f"),
			want:  cols(col("n", batch.String, false)),
		},
		{
			name:  "null values and missing segments make nullable columns",
			files: hiveFiles("a=1/b=x/f", "a=__HIVE_DEFAULT_PARTITION__/f", "a=/b=y/f"),
			want:  cols(col("a", batch.Int64, true), col("b", batch.String, true)),
		},
		{
			name:  "only nulls: string",
			files: hiveFiles("a=/f"),
			want:  cols(col("a", batch.String, true)),
		},
		{
			name:     "declared types win",
			files:    hiveFiles("year=2024/amount=1.5/ok=true/f"),
			declared: cols(col("id", batch.Int64, false), col("year", batch.String, false), col("amount", batch.Decimal(5, 2), true), col("ok", batch.Bool, false)),
			want:     cols(col("year", batch.String, false), col("amount", batch.Decimal(5, 2), true), col("ok", batch.Bool, false)),
		},
		{
			name:     "declared type that does not parse",
			files:    hiveFiles("year=2024/f", "year=later/f"),
			declared: cols(col("year", batch.Int64, false)),
			err:      `later/f: hive column year: "later" is not an int64`,
		},
		{
			name:     "declared not nullable but missing",
			files:    hiveFiles("year=2024/f", "other/f"),
			declared: cols(col("year", batch.Int64, false)),
			err:      "other/f: hive column year is NULL here but not nullable",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := HiveTypes(tc.files, tc.declared)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("schema (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseValue(t *testing.T) {
	cases := []struct {
		text string
		typ  batch.Type
		want string // Value.String(); "" for an error
	}{
		{"42", batch.Int64, "42"},
		{"4.2", batch.Int64, ""},
		{"2.5e3", batch.Float64, "2500"},
		{"true", batch.Bool, "true"},
		{"yes", batch.Bool, ""},
		{"2024-02-29", batch.Date, "2024-02-29"},
		{"2023-02-29", batch.Date, ""},
		{"2024-1-01", batch.Date, ""},
		{"1969-12-31", batch.Date, "1969-12-31"},
		{"2024-01-02T03:04:05.1234567+02:00", batch.Timestamp, "2024-01-02T01:04:05.123456Z"},
		{"2024-01-02", batch.Timestamp, ""},
		{"-12.5", batch.Decimal(5, 2), "-12.50"},
		{"1.234", batch.Decimal(5, 2), ""},
		{"any text", batch.String, "any text"},
		{"raw", batch.Bytes, "raw"},
	}
	for _, tc := range cases {
		t.Run(tc.typ.String()+"/"+tc.text, func(t *testing.T) {
			v, err := ParseValue(tc.text, tc.typ)
			if tc.want == "" {
				if err == nil {
					t.Errorf("parsed as %s, want an error", v)
				}
				return
			}
			if err != nil || v.String() != tc.want {
				t.Errorf("got %s %v, want %s", v, err, tc.want)
			}
		})
	}
}
