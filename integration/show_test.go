package integration

import (
	"os"
	"strings"
	"testing"
	"time"
)

// showIDs runs show with args in jsonl and returns the id of each row
// printed, in order.
func showIDs(t *testing.T, args ...string) []int64 {
	t.Helper()
	rows := jsonl(t, mustSluice(t, append([]string{"show", "--format", "jsonl"}, args...)...).stdout)
	ids := make([]int64, len(rows))
	for i, r := range rows {
		ids[i] = int64(r["id"].(float64))
	}
	return ids
}

func TestShowLimitAndWhere(t *testing.T) {
	t.Parallel()
	forEachDestination(t, func(t *testing.T, d destination) {
		b := startBroker(t, map[string]int32{"events": 2})
		produce(t, b.Addr(), "events", 1, 101)
		spec := writeSpec(t, d, b.Addr(), 30)
		mustSluice(t, "update", "-f", spec)

		// --limit: that many rows of the table, in storage order.
		res := mustSluice(t, "show", "-f", spec, "events", "--format", "jsonl", "--limit", "3")
		rows := jsonl(t, res.stdout)
		seen := map[int64]bool{}
		for _, r := range rows {
			id := int64(r["id"].(float64))
			if id < 1 || id > 100 || seen[id] {
				t.Fatalf("--limit 3 printed id %d (rows %v)", id, rows)
			}
			seen[id] = true
		}
		if len(rows) != 3 || !strings.Contains(res.stderr, "the first 3 rows") {
			t.Fatalf("--limit 3: %d rows, stderr %q", len(rows), res.stderr)
		}
		if ids := showIDs(t, "-f", spec, "events", "--limit", "0"); len(ids) != 100 || ids[0] != 1 || ids[99] != 100 {
			t.Fatalf("--limit 0: %d rows from %v, want 1..100 sorted", len(ids), ids[:min(3, len(ids))])
		}
		if res := mustSluice(t, "show", "-f", spec, "events", "--limit", "100", "--format", "csv"); strings.Contains(res.stderr, "first") ||
			strings.Count(res.stdout, "\n") != 101 {
			t.Fatalf("--limit 100 of 100 rows: stderr %q, %d lines", res.stderr, strings.Count(res.stdout, "\n"))
		}

		// --where, alone: every row it keeps, sorted as without it.
		if ids := showIDs(t, "-f", spec, "events", "--where", "id > 95"); len(ids) != 5 || ids[0] != 96 || ids[4] != 100 {
			t.Fatalf(`--where "id > 95": %v`, ids)
		}
		if ids := showIDs(t, "-f", spec, "events", "--where", `id in [7, 9] or name == "n-42"`); len(ids) != 3 || ids[0] != 7 || ids[1] != 9 || ids[2] != 42 {
			t.Fatalf("--where on a nullable column: %v", ids)
		}
		// A decimal column reads as a float64, as in a flow's where; not
		// translated for ClickHouse, it filters as rows stream.
		if ids := showIDs(t, "-f", spec, "events", "--where", "amount > 50.5 and id <= 60"); len(ids) != 10 || ids[0] != 51 {
			t.Fatalf("--where on a decimal: %v", ids)
		}
		// With --limit: the first rows that pass.
		ids := showIDs(t, "-f", spec, "events", "--where", "id % 10 == 0", "--limit", "4")
		if len(ids) != 4 {
			t.Fatalf("--where with --limit 4: %v", ids)
		}
		for _, id := range ids {
			if id%10 != 0 {
				t.Fatalf("--where id %% 10 == 0 printed %d", id)
			}
		}
		if ids := showIDs(t, "-f", spec, "events", "--where", "name != nil && id > 98", "--limit", "5"); len(ids) != 2 {
			t.Fatalf("--where with a limit above its rows: %v", ids)
		}
		if ids := showIDs(t, "-f", spec, "events", "--where", "id > 1000"); len(ids) != 0 {
			t.Fatalf("--where that keeps nothing: %v", ids)
		}
		if res := mustSluice(t, "show", "-f", spec, "events", "--where", "id == 5"); !strings.Contains(res.stdout, "(1 row)") {
			t.Fatalf("table format with --where:\n%s", res.stdout)
		}

		// A bad expression is a usage error that says what is wrong.
		for _, bad := range []string{"id >", "nope > 1", "name + 1", "id"} {
			res := sluice(t, "show", "-f", spec, "events", "--where", bad)
			if res.code != 2 || !strings.Contains(res.stderr, "--where") {
				t.Fatalf("--where %q: exit %d, stderr %q; want 2 naming --where", bad, res.code, res.stderr)
			}
		}
		if res := sluice(t, "show", "-f", spec, "events", "--limit", "-1"); res.code != 2 {
			t.Fatalf("--limit -1: exit %d, want 2", res.code)
		}
		// sluice's own tables stream too.
		if rows := jsonl(t, mustSluice(t, "show", "-f", spec, "_sluice_loads", "--format", "jsonl", "--limit", "1").stdout); len(rows) != 1 {
			t.Fatalf("_sluice_loads --limit 1: %d rows", len(rows))
		}
	})
}

func TestShowListsTables(t *testing.T) {
	t.Parallel()
	forEachDestination(t, func(t *testing.T, d destination) {
		b := startBroker(t, map[string]int32{"events": 1})
		produce(t, b.Addr(), "events", 1, 11)
		spec := writeSpec(t, d, b.Addr(), 100)
		mustSluice(t, "update", "-f", spec)
		rows := jsonl(t, mustSluice(t, "show", "-f", spec, "--format", "jsonl").stdout)
		byName := map[string]map[string]any{}
		var names []string
		for _, r := range rows {
			byName[r["table"].(string)] = r
			names = append(names, r["table"].(string))
		}
		want := []string{"events", "_sluice_loads", "_sluice_dead_letters", "_sluice_expectations", "_sluice_version"}
		if strings.Join(names, ",") != strings.Join(want, ",") {
			t.Fatalf("tables %v, want %v", names, want)
		}
		if r := byName["events"]; r["kind"] != "append" || r["rows"] != float64(10) {
			t.Fatalf("events listed as %v, want an append table of 10 rows", r)
		}
		if r := byName["_sluice_dead_letters"]; r["kind"] != "sluice" || r["rows"] != float64(0) {
			t.Fatalf("_sluice_dead_letters listed as %v", r)
		}
		table := mustSluice(t, "show", "-f", spec).stdout
		if !strings.Contains(table, "events") || !strings.Contains(table, "(5 rows)") {
			t.Fatalf("table list:\n%s", table)
		}
		if res := sluice(t, "show", "-f", spec, "--limit", "3"); res.code != 2 {
			t.Fatalf("--limit without a table: exit %d, want 2", res.code)
		}
	})
}

// TestStatusWatch checks that status --watch prints the status again every
// --interval, in separate blocks when stdout is no terminal, and exits 0
// on SIGINT.
func TestStatusWatch(t *testing.T) {
	t.Parallel()
	b := startBroker(t, map[string]int32{"events": 1})
	produce(t, b.Addr(), "events", 1, 11)
	spec := writeSpec(t, localDest{}, b.Addr(), 100)
	mustSluice(t, "update", "-f", spec)
	cmd, out := start(t, "status", "-f", spec, "--watch", "--interval", "300ms")
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(out.String(), "sluice status at") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no second refresh within 30s:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if err != nil {
		t.Fatalf("status --watch after SIGINT: %v, want exit 0\n%s", err, out.String())
	}
	text := out.String()
	if strings.Contains(text, "\x1b[") {
		t.Fatalf("escape sequences written to a pipe:\n%q", text)
	}
	blocks := strings.Split(text, "sluice status at ")[1:]
	refreshes := 0
	for _, bl := range blocks {
		if !strings.Contains(bl, "pipeline it:") || !strings.Contains(bl, "events_in") || !strings.HasSuffix(bl, "\n\n") {
			t.Fatalf("a refresh without the status, or not ending in a blank line:\n%s", bl)
		}
		refreshes++
	}
	if refreshes < 2 {
		t.Fatalf("%d refreshes in:\n%s", refreshes, text)
	}
	if res := sluice(t, "status", "-f", spec, "--interval", "1s"); res.code != 2 {
		t.Fatalf("--interval without --watch: exit %d, want 2", res.code)
	}
}
