package clickhouse

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/sluicehq/sluice/checkpoint"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
	"github.com/sluicehq/sluice/sinks/clickhouse/chtest"
)

// The cluster tests share one test cluster (chtest.SharedCluster), stopped
// here after the package's tests.
func TestMain(m *testing.M) {
	code := m.Run()
	chtest.StopSharedCluster()
	os.Exit(code)
}

// clusterSink opens a sink on db of the shared cluster's replicated
// cluster, connected to replica 1 only, and a plain connection to each
// replica for looking.
func clusterSink(t *testing.T) (s *Sink, replicas []driver.Conn, cl *chtest.Cluster) {
	t.Helper()
	cl = chtest.SharedCluster(t)
	db := chtest.NewClusterDatabase(t, cl)
	s = openSink(t, cl.Addrs[0], db, func(o *Options) {
		o.Cluster, o.ZooKeeper, o.Pipeline = cl.Name, []string{cl.ZooKeeper}, "p"
	})
	for _, addr := range cl.Addrs {
		c, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, DialTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		replicas = append(replicas, c)
	}
	return s, replicas, cl
}

// waitCount waits, bounded, until query answers want on c: a replica
// fetches the parts another attached within moments, one restarted within
// about 10 s steps.
func waitCount(t *testing.T, c driver.Conn, query string, want uint64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var n uint64
	var err error
	for time.Now().Before(deadline) {
		if err = c.QueryRow(context.Background(), query).Scan(&n); err == nil && n == want {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: %d (err %v) after 30 s, want %d", query, n, err, want)
}

// engineOf reads a table's engine and its full engine clause on c.
func engineOf(t *testing.T, c driver.Conn, db, table string) (engine, full string) {
	t.Helper()
	rows, err := c.Query(context.Background(), "SELECT engine, engine_full FROM system.tables WHERE database = ? AND name = ?", db, table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := rows.Scan(&engine, &full); err != nil {
			t.Fatal(err)
		}
	}
	return engine, full
}

// histRows returns SCD type 2 rows of id with name, starting at start.
func histRows(id int64, name string, start int64) (*batch.Batch, []string, []string) {
	b := batch.New(histSchema, 1)
	b.Vectors[0].AppendInt(id)
	b.Vectors[1].AppendString(name)
	b.Vectors[2].AppendInt(start)
	b.Vectors[3].AppendNull()
	return b, []string{ckey(id)}, []string{cseq(start)}
}

// TestClusterTargets: with Cluster set, one sink connected to replica 1
// creates the targets and sluice's tables ON CLUSTER, replicated; the rows
// of its loads, a schema change and a full refresh show on both replicas;
// its staging tables are plain MergeTree tables that never merge, on
// replica 1 alone.
func TestClusterTargets(t *testing.T) {
	s, replicas, cl := clusterSink(t)
	ctx := context.Background()
	db := s.opts.Database
	if err := s.Ensure(ctx, []sinks.Table{eventsTable, custTable, histTable}); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	q := func(format string, table string) string { return strings.ReplaceAll(format, "%t", s.table(table)) }
	at := batch.Column{Name: "at", Type: batch.Timestamp, Nullable: true}
	raw := batch.Column{Name: "raw", Type: batch.Bytes, Nullable: true}
	ev, cu := eventsTable, custTable
	ev.Schema = batch.Schema{Columns: append(slices.Clone(eventsTable.Schema.Columns), at)}
	cu.Schema = batch.Schema{Columns: append(slices.Clone(custSchema.Columns), raw)}

	t.Run("replicated_on_both", func(t *testing.T) {
		want := map[string]string{
			"events": "ReplicatedMergeTree", physName("cust"): "ReplicatedReplacingMergeTree", physName("hist"): "ReplicatedReplacingMergeTree",
			"cust": "View", "hist": "View",
			batch.LoadsTable: "ReplicatedMergeTree", batch.DeadLettersTable: "ReplicatedMergeTree", stateTable: "ReplicatedReplacingMergeTree",
			heartbeatsTable: "ReplicatedReplacingMergeTree", cdcStateTable: "ReplicatedReplacingMergeTree", resetsTable: "ReplicatedMergeTree",
			leasesTable: "ReplicatedReplacingMergeTree", headsTable: "ReplicatedReplacingMergeTree",
		}
		for i, c := range replicas {
			for table, engine := range want {
				// Targets per shard, sluice's own tables one across the shards.
				path := "'/clickhouse/tables/{shard}/{database}/{table}', '{replica}'"
				if strings.HasPrefix(table, sluicePrefix) && table != physName("cust") && table != physName("hist") {
					path = "'/clickhouse/tables/all-" + s.opts.Cluster + "/{database}/{table}', '{shard}-{replica}'"
				}
				if got, full := engineOf(t, c, db, table); got != engine || engine != "View" && !strings.Contains(full, path) {
					t.Errorf("replica %d: %s is %q (%s), want %s with the path %s", i+1, table, got, full, engine, path)
				}
			}
		}
	})

	if err := commitEvents(ctx, s, "l1", 0, 30); err != nil {
		t.Fatalf("load into events: %v", err)
	}
	if err := cdcLoad(ctx, s, "c1", 0, up(crow{1, "a", 1}, crow{2, "b", 1})); err != nil {
		t.Fatalf("load into cust: %v", err)
	}
	hl, err := s.Begin(ctx, sinks.LoadMeta{LoadID: "h1", Pipeline: "p", Flow: "h", Targets: []string{histTable.Name}})
	if err != nil {
		t.Fatal(err)
	}
	hb, hk, hs := histRows(1, "a", 1)
	if err := hl.(sinks.CDCLoad).Upsert(ctx, histTable.Name, hb, hk, hs); err != nil {
		t.Fatal(err)
	}
	if err := hl.Commit(ctx, sinks.Commit{To: batch.Positions{{Topic: "h", Offset: 1}}}); err != nil {
		t.Fatalf("load into hist: %v", err)
	}
	t.Run("rows_on_both", func(t *testing.T) {
		for _, c := range replicas {
			waitCount(t, c, q("SELECT count() FROM %t", "events"), 30)
			waitCount(t, c, q("SELECT count() FROM %t", "cust"), 2)
			waitCount(t, c, q("SELECT count() FROM %t", "hist"), 1)
			waitCount(t, c, q("SELECT count() FROM %t WHERE payload IS NULL", batch.DeadLettersTable), 1)
			waitCount(t, c, q("SELECT count() FROM %t", batch.LoadsTable), 3)
		}
		// The dead letters' payload is bytes: read back through the
		// comments that the alias column holds.
		if info, err := s.describe(ctx, batch.DeadLettersTable); err != nil || info == nil {
			t.Fatalf("describe %s: %v", batch.DeadLettersTable, err)
		} else if c, _ := info.column("payload"); c.Type != batch.Bytes {
			t.Fatalf("%s.payload reads as %v, want bytes", batch.DeadLettersTable, c.Type)
		}
	})

	t.Run("schema_change_on_both", func(t *testing.T) {
		if err := s.Ensure(ctx, []sinks.Table{ev, cu, histTable}); err != nil {
			t.Fatalf("Ensure with new columns: %v", err)
		}
		for i, c := range replicas {
			waitCount(t, c, "SELECT count() FROM system.columns WHERE database = '"+db+"' AND table = 'events' AND name = 'at'", 1)
			waitCount(t, c, "SELECT count() FROM system.columns WHERE database = '"+db+"' AND table = 'cust' AND name = 'raw'", 1)
			var expr string
			if err := c.QueryRow(ctx, "SELECT default_expression FROM system.columns WHERE database = ? AND table = ? AND name = ?",
				db, physName("cust"), commentsColumn).Scan(&expr); err != nil {
				t.Fatal(err)
			}
			if got := parseComments(expr); got["raw"] != bytesComment || got[keyColumn] != keysComment+"id" {
				t.Errorf("replica %d: comments of %s: %q", i+1, physName("cust"), expr)
			}
		}
		s.forget("events")
		info, err := s.describe(ctx, "events")
		if err != nil || info == nil {
			t.Fatalf("describe events: %v", err)
		}
		if c, _ := info.column("at"); c.Type != batch.Timestamp {
			t.Fatalf("events.at reads as %v, want a timestamp", c.Type)
		}
		// A load with the new column: its staging table copies it.
		b := batch.New(ev.Schema, 5)
		old := events(30, 35)
		for i := range 3 {
			b.Vectors[i] = old.Vectors[i]
		}
		for i := range 5 {
			b.Vectors[3].AppendInt(int64(1700000000123456 + i))
		}
		ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: "l2", Pipeline: "p", Flow: "f", Targets: []string{"events"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := ld.Write(ctx, "events", b); err != nil {
			t.Fatal(err)
		}
		if err := ld.Commit(ctx, sinks.Commit{From: kafkaPos(30), To: kafkaPos(35), Rows: 5}); err != nil {
			t.Fatalf("load with the new column: %v", err)
		}
		for _, c := range replicas {
			waitCount(t, c, q("SELECT count() FROM %t WHERE at = 1700000000123458", "events"), 1)
		}
	})

	t.Run("staging_plain_on_one_server", func(t *testing.T) {
		ld, err := s.Begin(ctx, sinks.LoadMeta{LoadID: "st", Pipeline: "p", Flow: "g", Targets: []string{"events", "cust"}})
		if err != nil {
			t.Fatal(err)
		}
		defer ld.Abort(ctx)
		b := batch.New(cu.Schema, 1)
		b.Vectors[0].AppendInt(3)
		b.Vectors[1].AppendString("c")
		b.Vectors[2].AppendBytes([]byte{0, 1})
		if err := ld.(sinks.CDCLoad).Upsert(ctx, custTable.Name, b, []string{ckey(3)}, []string{cseq(1)}); err != nil {
			t.Fatalf("Upsert: %v", err)
		}
		l := ld.(*load)
		for table, order := range map[string]string{physName("cust"): "ORDER BY (id, _sluice_key)"} {
			stage := l.stages[table]
			engine, full := engineOf(t, replicas[0], db, stage)
			want := "MergeTree " + order + " SETTINGS max_bytes_to_merge_at_max_space_in_pool = 1, max_bytes_to_merge_at_min_space_in_pool = 1"
			if engine != "MergeTree" || !strings.HasPrefix(full, want) {
				t.Errorf("staging table %s of %s: %s, want %s", stage, table, full, want)
			}
			if engine, _ := engineOf(t, replicas[1], db, stage); engine != "" {
				t.Errorf("staging table %s is on replica 2 too (%s)", stage, engine)
			}
		}
		stage, err := l.ensureStage(ctx, "events")
		if err != nil {
			t.Fatal(err)
		}
		if _, full := engineOf(t, replicas[0], db, stage); !strings.HasPrefix(full, "MergeTree PARTITION BY day ORDER BY id SETTINGS max_bytes_to_merge_at_max_space_in_pool = 1") {
			t.Errorf("staging table of events: %s", full)
		}
	})

	t.Run("checkpoints", func(t *testing.T) {
		store, err := s.OpenCheckpoints(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		key := checkpoint.Key{Pipeline: "p", Kind: checkpoint.KindCursor, Flow: "f"}
		var rev uint64
		for _, v := range []string{"1", "2", "1"} { // set back to an earlier value
			if err := store.Put(ctx, key, checkpoint.Entry{Value: []byte(v), Revision: rev}); err != nil {
				t.Fatalf("Put %s: %v", v, err)
			}
			e, err := store.Get(ctx, key)
			if err != nil || string(e.Value) != v || e.Revision != rev+1 {
				t.Fatalf("Get after Put %s: %q at %d, %v", v, e.Value, e.Revision, err)
			}
			rev = e.Revision
		}
		for _, c := range replicas {
			waitCount(t, c, q("SELECT count() FROM %t", stateTable), 3)
		}
	})

	t.Run("insert_deduplicate", func(t *testing.T) {
		// The same block twice lands twice through the sink's connection;
		// an insert that asks for the deduplication in its own settings
		// gets it (the server applies them after the connection's).
		tbl := s.table("dedup")
		if err := s.conn.Exec(ctx, "CREATE TABLE "+tbl+" ON CLUSTER "+chsql.Quote(cl.Name)+" (k String) ENGINE = "+s.opts.cluster().Engine("MergeTree")+" ORDER BY k"); err != nil {
			t.Fatal(err)
		}
		dedup := clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"insert_deduplicate": 1}))
		for _, c := range []context.Context{ctx, ctx, dedup, dedup} {
			if err := s.conn.Exec(c, "INSERT INTO "+tbl+" SELECT 'same'"); err != nil {
				t.Fatal(err)
			}
		}
		waitCount(t, replicas[1], "SELECT count() FROM "+tbl, 3)
	})

	t.Run("full_refresh_on_both", func(t *testing.T) {
		if err := s.Reset(ctx, []string{"events", "cust", "hist"}, []string{"f", "g", "h"}); err != nil {
			t.Fatalf("Reset: %v", err)
		}
		for _, c := range replicas {
			for _, table := range []string{"events", "cust", "hist"} {
				waitCount(t, c, q("SELECT count() FROM %t", table), 0)
			}
			waitCount(t, c, q("SELECT count() FROM %t WHERE target = 'cust'", cdcStateTable), 0)
		}
	})
}

// TestClusterRefusals: a target of one server is refused on a cluster, and
// sluice's replicated tables without one, each naming the remedy.
func TestClusterRefusals(t *testing.T) {
	s, replicas, cl := clusterSink(t)
	ctx := context.Background()
	db := s.opts.Database
	if err := s.Ensure(ctx, nil); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if err := replicas[0].Exec(ctx, "CREATE TABLE "+s.table("local")+" (id Int64, `_sluice_load_id` String) ENGINE = MergeTree ORDER BY id"); err != nil {
		t.Fatal(err)
	}
	local := sinks.Table{Name: "local", Schema: batch.Schema{Columns: []batch.Column{{Name: "id", Type: batch.Int64}}}}
	err := s.Ensure(ctx, []sinks.Table{local})
	if err == nil || !strings.Contains(err.Error(), "table local does not match the spec") ||
		!strings.Contains(err.Error(), "MergeTree, on this server alone, while destination.clickhouse.cluster is set") {
		t.Fatalf("Ensure of a one-server target on a cluster: %v", err)
	}
	one := openSink(t, cl.Addrs[0], db, func(o *Options) { o.Pipeline = "p" })
	err = one.Ensure(ctx, nil)
	if err == nil || !strings.Contains(err.Error(), "holds replicated tables of sluice") || !strings.Contains(err.Error(), "set destination.clickhouse.cluster") {
		t.Fatalf("Ensure without a cluster on a cluster's database: %v", err)
	}
}

// TestClusterOptions: the cluster options that Open refuses, the defaults,
// and insert_deduplicate = 0 sent with every query on a cluster only.
func TestClusterOptions(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string // substring of the error; "" valid
	}{
		{"one server", Options{}, ""},
		{"cluster", Options{Cluster: "c", ZooKeeper: []string{"zk:2181"}}, ""},
		{"cluster without zookeeper", Options{Cluster: "c"}, "needs ZooKeeper"},
		{"zookeeper without cluster", Options{ZooKeeper: []string{"zk:2181"}}, "without Cluster: set Cluster"},
		{"path without cluster", Options{ZooKeeperPath: "/t/{table}"}, "apply to a Cluster only"},
		{"path without table", Options{Cluster: "c", ZooKeeper: []string{"zk:2181"}, ZooKeeperPath: "/t"}, "names no {table}"},
		{"deduplicating on a cluster", Options{Cluster: "c", ZooKeeper: []string{"zk:2181"}, Settings: map[string]any{"insert_deduplicate": "1"}}, "leave the setting out"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			o.withDefaults()
			err := o.validateCluster()
			var settings clickhouse.Settings
			if err == nil {
				settings, err = connSettings(o)
			}
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("%v; want an error saying %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			v, ok := settings[dedupSetting]
			if o.Cluster != "" && (o.ZooKeeperPath != chsql.DefaultZooKeeperPath || o.ReplicaName != chsql.DefaultReplica || !ok || v != 0) {
				t.Fatalf("on a cluster: path %q replica %q, %s = %v", o.ZooKeeperPath, o.ReplicaName, dedupSetting, v)
			}
			if o.Cluster == "" && (ok || o.ZooKeeperPath != "" || o.ReplicaName != "") {
				t.Fatalf("on one server: path %q replica %q, settings %v", o.ZooKeeperPath, o.ReplicaName, settings)
			}
		})
	}
}

// answerConn answers every statement with err.
type answerConn struct {
	conn
	err error
}

func (c answerConn) Exec(context.Context, string, ...any) error { return c.err }

// TestClusterLag: on a cluster an ALTER that a replica applies later (Code
// 341) and an ON CLUSTER statement that a down server keeps from finishing
// (Code 159) are successes with lag; on one server, and other codes, are
// failures.
func TestClusterLag(t *testing.T) {
	ex := func(code int32) error { return &clickhouse.Exception{Code: code, Message: "x"} }
	tests := []struct {
		name      string
		cluster   string
		err       error
		alter, dd bool // succeeded
	}{
		{"unfinished alter on a cluster", "c", ex(chsql.CodeUnfinished), true, false},
		{"ddl timeout on a cluster", "c", ex(chsql.CodeTimeoutExceeded), false, true},
		{"unfinished alter on one server", "", ex(chsql.CodeUnfinished), false, false},
		{"ddl timeout on one server", "", ex(chsql.CodeTimeoutExceeded), false, false},
		{"other code on a cluster", "c", ex(chsql.CodeUnknownTable), false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSink(answerConn{err: tc.err}, Options{Cluster: tc.cluster}, testLogger(t))
			if err := s.alter(context.Background(), "alter", "ALTER"); (err == nil) != tc.alter {
				t.Errorf("alter: %v", err)
			}
			if err := s.ddl(context.Background(), "create", "CREATE"); (err == nil) != tc.dd {
				t.Errorf("ddl: %v", err)
			}
		})
	}
}
