package clickhouse

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
)

func TestEncodeIDRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		id := rapid.StringN(0, 64, -1).Draw(t, "id")
		enc := encodeID(id)
		if strings.Trim(enc, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != "" {
			t.Fatalf("encodeID(%q) = %q is not identifier-safe", id, enc)
		}
		if strings.Contains(enc, "__") {
			t.Fatalf("encodeID(%q) = %q holds __", id, enc)
		}
		back, err := decodeID(enc)
		if err != nil || back != id {
			t.Fatalf("decodeID(%q) = %q, %v; want %q", enc, back, err, id)
		}
		table := rapid.StringMatching(`[a-z_][a-z0-9_]{0,20}`).Draw(t, "table")
		epoch := rapid.IntRange(0, 1000).Draw(t, "epoch")
		e, gotEnc, gotTable, ok := parseStage(stageName(epoch, enc, table))
		if enc != "" && (!ok || e != epoch || gotEnc != enc || gotTable != table) {
			t.Fatalf("parseStage(stageName(%d, %q, %q)) = %d, %q, %q, %v", epoch, enc, table, e, gotEnc, gotTable, ok)
		}
	})
}

func TestParseNames(t *testing.T) {
	tests := []struct {
		name  string
		stage bool
		enc   string
		table string
	}{
		{"_sluice_stage0_abc__orders", true, "abc", "orders"},
		{"_sluice_stage12_load_2d1__my__table", true, "load_2d1", "my__table"},
		{"_sluice_state", false, "", ""},
		{"_sluice_stage_abc__orders", false, "", ""},
		{"_sluice_stage0___orders", false, "", ""},
		{"_sluice_stage0_abc__", false, "", ""},
		{"orders", false, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, enc, table, ok := parseStage(tc.name)
			if ok != tc.stage || enc != tc.enc || table != tc.table {
				t.Fatalf("parseStage(%q) = %q, %q, %v", tc.name, enc, table, ok)
			}
		})
	}
	if enc, ok := parseMarker(markerName("a_2d1")); !ok || enc != "a_2d1" {
		t.Fatalf("parseMarker: %q %v", enc, ok)
	}
	if _, err := decodeID("ab_2"); err == nil {
		t.Fatal("decodeID accepted a cut escape")
	}
}

func TestPartitionIDs(t *testing.T) {
	for _, tc := range []struct {
		part, id string
		valid    bool
	}{
		{"all_1_1_0", "all", true},
		{"202401_3_9_2", "202401", true},
		{"-5-20240101_1_1_0", "-5-20240101", true},
		{"6a3f0c_2_2_0_5", "6a3f0c", true},
	} {
		if got := partitionOfPart(tc.part); got != tc.id || validPartitionID(got) != tc.valid {
			t.Errorf("partitionOfPart(%q) = %q (valid %v)", tc.part, got, validPartitionID(got))
		}
	}
	for _, bad := range []string{"", "a'b", "a b", "x\\"} {
		if validPartitionID(bad) {
			t.Errorf("validPartitionID(%q) = true", bad)
		}
	}
}

func TestLedgerSlot(t *testing.T) {
	k := func(p int32) batch.Position { return batch.Position{Topic: "t", Partition: p, Offset: 1} }
	tests := []struct {
		name string
		to   batch.Positions
		want string
	}{
		{"none", nil, ""},
		{"one partition", batch.Positions{k(3)}, "k/t/3"},
		{"several", batch.Positions{k(1), k(2)}, "*"},
		{"file", batch.Positions{{File: "a.parquet", RowGroup: 2}}, "f/a.parquet"},
	}
	for _, tc := range tests {
		if got := ledgerSlot(tc.to); got != tc.want {
			t.Errorf("%s: ledgerSlot = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestTypeMapping: every sluice type maps to a ClickHouse type that maps
// back to it, on 18.16 and on a current server.
func TestTypeMapping(t *testing.T) {
	types := []batch.Type{batch.String, batch.Int64, batch.Float64, batch.Bool, batch.Timestamp, batch.Date,
		batch.Decimal(1, 0), batch.Decimal(12, 2), batch.Decimal(38, 38), batch.Bytes}
	for _, f := range []features{featuresOf(18, 16), featuresOf(24, 8)} {
		for _, typ := range types {
			for _, nullable := range []bool{false, true} {
				ch := chType(typ, nullable, f)
				comment := ""
				if typ.Kind == batch.KindBytes {
					comment = bytesComment
				}
				// system.columns writes "Decimal(12, 2)", "DateTime('UTC')".
				c, err := parseColumn("c", ch, comment)
				if err != nil {
					t.Fatalf("%v: parseColumn(%s): %v", f, ch, err)
				}
				if c.Type != typ || c.Nullable != nullable {
					t.Errorf("%v: %v nullable=%v -> %s -> %v nullable=%v", f, typ, nullable, ch, c.Type, c.Nullable)
				}
			}
		}
	}
	want := map[string]string{"timestamp": "DateTime('UTC')", "date": "Date", "bool": "UInt8", "decimal(12,2)": "Decimal(12, 2)"}
	for name, ch := range want {
		typ, _ := batch.ParseType(name)
		if got := chType(typ, false, featuresOf(18, 16)); got != ch {
			t.Errorf("18.16: %s -> %s, want %s", name, got, ch)
		}
	}
	if got := chType(batch.Timestamp, true, featuresOf(23, 3)); got != "Nullable(DateTime64(6, 'UTC'))" {
		t.Errorf("23.3: timestamp -> %s", got)
	}
	for ch, want := range map[string]batch.Type{"Array(String)": batch.ArrayOf(batch.String), "Array(Decimal(12, 2))": batch.ArrayOf(batch.Decimal(12, 2))} {
		if c, err := parseColumn("c", ch, ""); err != nil || c.Type != want || c.Nullable {
			t.Errorf("parseColumn(%s) = %+v, %v; want %v", ch, c.Column, err, want)
		}
	}
	for _, bad := range []string{"UInt64", "Array(UInt64)", "Array(Nullable(String))", "Array(Array(Int64))", "Nullable(Array(String))",
		"DateTime64(3, 'UTC')", "LowCardinality(String)", "Decimal(40, 2)"} {
		if _, err := parseColumn("c", bad, ""); err == nil {
			t.Errorf("parseColumn accepted %s", bad)
		}
	}
}

func TestNormKey(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""}, {"tuple()", ""}, {"a", "a"}, {"a, b", "a,b"}, {"(a, b)", "a,b"}, {"`a`", "a"},
		{"toYYYYMM(at)", "toYYYYMM(at)"},
	}
	for _, tc := range tests {
		if got := normKey(tc.in); got != tc.want {
			t.Errorf("normKey(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestReconcile: every difference between the spec and the table that
// sluice cannot apply is refused with what to do; nullable columns are added.
func TestReconcile(t *testing.T) {
	f := featuresOf(18, 16)
	col := func(name string, typ batch.Type, nullable bool) column {
		c, err := parseColumn(name, chType(typ, nullable, f), "")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	existing := &tableInfo{name: "t", engine: "MergeTree", sortingKey: "id", partitionKey: "day", hasLoadID: true,
		columns: []column{col("id", batch.Int64, false), col("day", batch.Date, false), col("v", batch.String, true)}}
	base := []batch.Column{{Name: "id", Type: batch.Int64}, {Name: "day", Type: batch.Date}, {Name: "v", Type: batch.String, Nullable: true}}
	with := func(cs ...batch.Column) sinks.Table {
		return sinks.Table{Name: "t", Schema: batch.Schema{Columns: cs}, OrderBy: []string{"id"}, PartitionBy: []string{"day"}}
	}
	tests := []struct {
		name  string
		table sinks.Table
		info  *tableInfo
		add   int
		want  string // substring of the error; "" for none
	}{
		{"same", with(base...), existing, 0, ""},
		{"nullable column added", with(append(base, batch.Column{Name: "w", Type: batch.Bytes, Nullable: true})...), existing, 1, ""},
		{"keys left out of the spec", sinks.Table{Name: "t", Schema: batch.Schema{Columns: base}}, existing, 0, ""},
		{"not nullable column added", with(append(base, batch.Column{Name: "w", Type: batch.Int64})...), existing, 0, "declare it nullable"},
		{"type changed", with(base[0], base[1], batch.Column{Name: "v", Type: batch.Int64, Nullable: true}), existing, 0, "sluice does not change column types"},
		{"nullability changed", with(base[0], base[1], batch.Column{Name: "v", Type: batch.String}), existing, 0, "migrate the data yourself"},
		{"column dropped from the spec", with(base[0], base[1]), existing, 0, "DROP COLUMN v"},
		{"order_by changed", sinks.Table{Name: "t", Schema: batch.Schema{Columns: base}, OrderBy: []string{"day"}}, existing, 0, "cannot change a sorting key"},
		{"partition_by changed", sinks.Table{Name: "t", Schema: batch.Schema{Columns: base}, PartitionBy: []string{"id"}}, existing, 0, "cannot repartition"},
		{"not a sluice table", with(base...), &tableInfo{name: "t", engine: "MergeTree", columns: existing.columns, sortingKey: "id", partitionKey: "day"}, 0, "did not create it"},
		{"another engine", with(base...), &tableInfo{name: "t", engine: "Log", columns: existing.columns, hasLoadID: true, sortingKey: "id", partitionKey: "day"}, 0, "not MergeTree"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			add, err := reconcile(tc.table, tc.info, false)
			if tc.want == "" {
				if err != nil || len(add) != tc.add {
					t.Fatalf("reconcile: %d columns to add, %v; want %d, nil", len(add), err, tc.add)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("reconcile: %v; want an error saying %q", err, tc.want)
			}
		})
	}
}

func TestValidateTable(t *testing.T) {
	ok := batch.Schema{Columns: []batch.Column{{Name: "id", Type: batch.Int64}, {Name: "n", Type: batch.String, Nullable: true}}}
	tests := []struct {
		name  string
		table sinks.Table
		want  string
	}{
		{"fine", sinks.Table{Name: "t", Schema: ok, OrderBy: []string{"id"}}, ""},
		{"bad table name", sinks.Table{Name: "t; DROP", Schema: ok}, "use letters"},
		{"reserved table name", sinks.Table{Name: "_sluice_x", Schema: ok}, "sluice's own"},
		{"bad column name", sinks.Table{Name: "t", Schema: batch.Schema{Columns: []batch.Column{{Name: "a`b", Type: batch.Int64}}}}, "use letters"},
		{"reserved column", sinks.Table{Name: "t", Schema: batch.Schema{Columns: []batch.Column{{Name: "_sluice_load_id", Type: batch.String}}}}, "sluice's own"},
		{"unknown key column", sinks.Table{Name: "t", Schema: ok, OrderBy: []string{"x"}}, "not a column"},
		{"nullable key column", sinks.Table{Name: "t", Schema: ok, PartitionBy: []string{"n"}}, "cannot hold NULL"},
		{"duplicate column", sinks.Table{Name: "t", Schema: batch.Schema{Columns: []batch.Column{ok.Columns[0], ok.Columns[0]}}}, "twice"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := validateTable(tc.table)
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("validateTable: %v, want %q", err, tc.want)
			}
		})
	}
}

// TestReconcileCluster: on a cluster a target must be replicated, without
// one it must not; either refusal is of a table sluice created, so that the
// runner offers the refresh that creates it anew.
func TestReconcileCluster(t *testing.T) {
	cols := []column{{Column: batch.Column{Name: "id", Type: batch.Int64}, chType: "Int64", storage: storeInt64}}
	spec := sinks.Table{Name: "t", Schema: batch.Schema{Columns: []batch.Column{{Name: "id", Type: batch.Int64}}}}
	cdcCols := map[string]hiddenColumn{keyColumn: {typ: "String", comment: keysComment + "id"}, seqColumn: {typ: "String"},
		deletedColumn: {typ: "UInt8"}, versionColumn: {typ: "UInt64"}}
	cdcSpec := sinks.Table{Name: "c", Schema: spec.Schema, Kind: sinks.KindSCD1, Keys: []string{"id"}}
	tests := []struct {
		name    string
		engine  string
		cdc     bool
		cluster bool
		want    string // substring of the error; "" for none
	}{
		{"plain, one server", "MergeTree", false, false, ""},
		{"replicated, cluster", "ReplicatedMergeTree", false, true, ""},
		{"plain on a cluster", "MergeTree", false, true, "is MergeTree, on this server alone, while destination.clickhouse.cluster is set"},
		{"replicated without a cluster", "ReplicatedMergeTree", false, false, "is ReplicatedMergeTree, while destination.clickhouse.cluster is not set: set cluster"},
		{"cdc replicated, cluster", "ReplicatedReplacingMergeTree", true, true, ""},
		{"cdc plain on a cluster", "ReplacingMergeTree", true, true, "its physical table _sluice_phys_c is ReplacingMergeTree, on this server alone"},
		{"cdc replicated without a cluster", "ReplicatedReplacingMergeTree", true, false, "while destination.clickhouse.cluster is not set"},
		{"cdc another engine", "ReplicatedMergeTree", true, true, "not ReplacingMergeTree"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.cdc {
				info := &tableInfo{name: physName("c"), engine: tc.engine, sortingKey: "id, _sluice_key", hasLoadID: true, columns: cols, hidden: cdcCols}
				_, err = reconcileCDC(cdcSpec, info, tc.cluster)
			} else {
				_, err = reconcile(spec, &tableInfo{name: "t", engine: tc.engine, hasLoadID: true, columns: cols}, tc.cluster)
			}
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v; want an error saying %q", err, tc.want)
			}
			if ours := tc.want != "not ReplacingMergeTree"; errors.Is(err, sinks.ErrTableChanged) != ours {
				t.Fatalf("%v: sinks.ErrTableChanged %v, want %v", err, !ours, ours)
			}
		})
	}
}

// TestComments: the comments a table on a cluster keeps in its alias
// column read back as system.columns shows them.
func TestComments(t *testing.T) {
	pairs := commentPairs(map[string]string{"b": bytesComment, keyColumn: keysComment + "a,b", "gone": "", "z": timestampComment}, []string{"a", "b"})
	if want := []string{"b=sluice:bytes", "_sluice_key=sluice:keys=a,b", "z=sluice:timestamp_us"}; !slices.Equal(pairs, want) {
		t.Fatalf("commentPairs = %q, want %q", pairs, want)
	}
	def := commentsDef(pairs)
	if want := "`_sluice_comments` String ALIAS 'b=sluice:bytes;_sluice_key=sluice:keys=a,b;z=sluice:timestamp_us'"; def != want {
		t.Fatalf("commentsDef = %s, want %s", def, want)
	}
	got := parseComments("'b=sluice:bytes;_sluice_key=sluice:keys=a,b;z=sluice:timestamp_us'")
	if len(got) != 3 || got["b"] != bytesComment || got[keyColumn] != keysComment+"a,b" || got["z"] != timestampComment {
		t.Fatalf("parseComments = %q", got)
	}
	if got := parseComments(""); len(got) != 0 {
		t.Fatalf("parseComments of nothing = %q", got)
	}
}
