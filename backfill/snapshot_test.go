package backfill

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/flows/batch"
)

type snap struct {
	Text  string
	Value string
	Ready bool
	Files []string
}

func snaps(vs []SnapshotVersion) []snap {
	var out []snap
	for _, v := range vs {
		out = append(out, snap{v.Text, v.Value.String(), v.Ready, names(v.Files)})
	}
	return out
}

func TestPlanSnapshots(t *testing.T) {
	typ := func(t batch.Type) *batch.Type { return &t }
	cases := []struct {
		name     string
		paths    []string
		pattern  string
		declared *batch.Type
		kind     batch.Kind
		want     []snap
	}{
		{
			name: "integers sort numerically",
			paths: []string{"s/10/a.parquet", "s/10/_SUCCESS", "s/9/a.parquet", "s/9/b.parquet", "s/9/_SUCCESS",
				"s/100/a.parquet", "s/_tmp/a.parquet", "s/.x/a.parquet"},
			pattern: "s/{version}/*.parquet",
			kind:    batch.KindInt64,
			want: []snap{
				{"9", "9", true, []string{"s/9/a.parquet", "s/9/b.parquet"}},
				{"10", "10", true, []string{"s/10/a.parquet"}},
				{"100", "100", false, []string{"s/100/a.parquet"}},
			},
		},
		{
			name:    "dates",
			paths:   []string{"s/2024-02-01/a.jsonl", "s/2024-02-01/_SUCCESS", "s/2023-12-31/a.jsonl", "s/2023-12-31/_SUCCESS"},
			pattern: "s/{version}/*.jsonl",
			kind:    batch.KindDate,
			want: []snap{
				{"2023-12-31", "2023-12-31", true, []string{"s/2023-12-31/a.jsonl"}},
				{"2024-02-01", "2024-02-01", true, []string{"s/2024-02-01/a.jsonl"}},
			},
		},
		{
			name: "timestamps in other offsets sort by instant",
			paths: []string{"s/2024-01-01T10:00:00+02:00/a.parquet", "s/2024-01-01T09:00:00Z/a.parquet",
				"s/2024-01-01T09:00:00Z/_SUCCESS"},
			pattern: "s/{version}/a.parquet",
			kind:    batch.KindTimestamp,
			want: []snap{
				{"2024-01-01T10:00:00+02:00", "2024-01-01T08:00:00Z", false, []string{"s/2024-01-01T10:00:00+02:00/a.parquet"}},
				{"2024-01-01T09:00:00Z", "2024-01-01T09:00:00Z", true, []string{"s/2024-01-01T09:00:00Z/a.parquet"}},
			},
		},
		{
			name:    "strings compare bytewise",
			paths:   []string{"s/b/x.parquet", "s/B/x.parquet", "s/a10/x.parquet", "s/a9/x.parquet", "s/a9/_SUCCESS"},
			pattern: "s/{version}/x.parquet",
			kind:    batch.KindString,
			want: []snap{
				{"B", "B", false, []string{"s/B/x.parquet"}},
				{"a10", "a10", false, []string{"s/a10/x.parquet"}},
				{"a9", "a9", true, []string{"s/a9/x.parquet"}},
				{"b", "b", false, []string{"s/b/x.parquet"}},
			},
		},
		{
			name:     "declared decimal",
			paths:    []string{"s/1.5/x.parquet", "s/1.25/x.parquet", "s/1.25/_SUCCESS"},
			pattern:  "s/{version}/x.parquet",
			declared: typ(batch.Decimal(5, 2)),
			kind:     batch.KindDecimal,
			want: []snap{
				{"1.25", "1.25", true, []string{"s/1.25/x.parquet"}},
				{"1.5", "1.50", false, []string{"s/1.5/x.parquet"}},
			},
		},
		{
			name:     "declared string keeps integers as text",
			paths:    []string{"s/10/x.parquet", "s/9/x.parquet"},
			pattern:  "s/{version}/x.parquet",
			declared: typ(batch.String),
			kind:     batch.KindString,
			want: []snap{
				{"10", "10", false, []string{"s/10/x.parquet"}},
				{"9", "9", false, []string{"s/9/x.parquet"}},
			},
		},
		{
			name:    "files below the version with globs and Hive folders; an empty ready version",
			paths:   []string{"db/v/3/region=eu/p.parquet", "db/v/3/region=us/q/p.parquet", "db/v/3/_SUCCESS", "db/v/4/_SUCCESS"},
			pattern: "db/*/{version}/**/*.parquet",
			kind:    batch.KindInt64,
			want: []snap{
				{"3", "3", true, []string{"db/v/3/region=eu/p.parquet", "db/v/3/region=us/q/p.parquet"}},
				{"4", "4", true, []string{}},
			},
		},
		{
			name:    "a _SUCCESS folder is not a marker",
			paths:   []string{"s/1/x.parquet", "s/1/_SUCCESS/y"},
			pattern: "s/{version}/x.parquet",
			kind:    batch.KindInt64,
			want:    []snap{{"1", "1", false, []string{"s/1/x.parquet"}}},
		},
		{
			name:    "no snapshots folder",
			pattern: "nothing/{version}/x.parquet",
			kind:    batch.KindString,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := tree(t, tc.paths...)
			got, err := PlanSnapshots(dir, tc.pattern, tc.declared)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, snaps(got)); diff != "" {
				t.Errorf("versions (-want +got):\n%s", diff)
			}
			for _, v := range got {
				if v.Value.Type.Kind != tc.kind {
					t.Errorf("version %s typed %v, want %v", v.Text, v.Value.Type, tc.kind)
				}
			}
			if tc.name == "files below the version with globs and Hive folders; an empty ready version" {
				if h := got[0].Files[0].Hive; len(h) != 1 || h[0] != (HiveValue{"region", "eu"}) {
					t.Errorf("hive of a snapshot file: %v", h)
				}
				if p := got[0].Files[0].Path; p != filepath.Join(dir, "db", "v", "3", "region=eu", "p.parquet") {
					t.Errorf("path %s", p)
				}
			}
		})
	}
}

func TestPlanSnapshotsErrors(t *testing.T) {
	typ := func(t batch.Type) *batch.Type { return &t }
	cases := []struct {
		name     string
		paths    []string
		pattern  string
		declared *batch.Type
		want     string
	}{
		{name: "no placeholder", pattern: "s/*/x.parquet", want: "has no {version} segment"},
		{name: "placeholder inside a segment", pattern: "s/v{version}/x.parquet", want: "must be a whole segment"},
		{name: "placeholder twice", pattern: "{version}/{version}/x.parquet", want: "twice"},
		{name: "placeholder names the file", pattern: "s/{version}", want: "must name a folder"},
		{name: "declared type that does not parse", paths: []string{"s/1/x", "s/two/x"}, pattern: "s/{version}/x",
			declared: typ(batch.Int64), want: `snapshot version folder s/two: "two" is not an int64`},
		{name: "declared type not allowed", pattern: "s/{version}/x", declared: typ(batch.Bool), want: "want int64, date, timestamp"},
		{name: "equal versions", paths: []string{"s/7/x", "s/07/x"}, pattern: "s/{version}/x", want: "hold the same version 7"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := tree(t, tc.paths...)
			_, err := PlanSnapshots(dir, tc.pattern, tc.declared)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}
