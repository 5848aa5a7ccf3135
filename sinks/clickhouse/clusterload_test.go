package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
	"github.com/sluicehq/sluice/sinks/clickhouse/chtest"
	"github.com/sluicehq/sluice/sinks/sinktest"
)

// dialCluster opens a sink on the replicated test cluster whose loads go
// to replica first (0 or 1) while it answers; the caller closes it.
func dialCluster(t testing.TB, c *chtest.Cluster, db string, first int, mod ...func(*Options)) *Sink {
	t.Helper()
	addrs := []string{c.Addrs[first], c.Addrs[1-first]}
	return dial(t, addrs[0], db, append([]func(*Options){func(o *Options) {
		o.Addr, o.Cluster, o.ZooKeeper = addrs, c.Name, []string{c.ZooKeeper}
		o.CleanupEvery = time.Second
	}}, mod...)...)
}

// TestClusterChainAcrossReplicas: two writers on different replicas
// continue the same slot from the same head; exactly one commits, at once,
// however late the replicas see each other's ledger rows, and the rows are
// on both replicas once.
func TestClusterChainAcrossReplicas(t *testing.T) {
	c := chtest.SharedCluster(t)
	db := chtest.NewClusterDatabase(t, c)
	ctx := context.Background()
	a := dialCluster(t, c, db, 0)
	defer a.Close()
	b := dialCluster(t, c, db, 1)
	defer b.Close()
	table := sinks.Table{Name: "ev", Schema: batch.Schema{Columns: []batch.Column{{Name: "id", Type: batch.Int64}}}}
	for _, s := range []*Sink{a, b} {
		if err := s.Ensure(ctx, []sinks.Table{table}); err != nil {
			t.Fatalf("Ensure: %v", err)
		}
	}
	ids := func(lo, hi int64) *batch.Batch {
		b := batch.New(table.Schema, int(hi-lo))
		for i := lo; i < hi; i++ {
			b.Vectors[0].AppendInt(i)
		}
		return b
	}
	pos := func(off int64) batch.Positions {
		return batch.Positions{{Topic: "t", Partition: 0, Offset: off}}
	}
	const rounds = 8
	var mu sync.Mutex
	won := map[string]int{}
	head := int64(-1)
	for r := range rounds {
		from, to := head, head+10
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, s := range []*Sink{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, err := s.Begin(ctx, sinks.LoadMeta{LoadID: fmt.Sprintf("r%d-%d", r, i), Pipeline: sinktest.Pipeline, Flow: "f", Targets: []string{"ev"}})
				if err == nil {
					lo := max(from, 0)
					if err = l.Write(ctx, "ev", ids(lo, to)); err == nil {
						err = l.Commit(ctx, sinks.Commit{From: pos(from), To: pos(to), Rows: to - lo})
					}
					if err != nil {
						_ = l.Abort(ctx)
					}
				}
				errs[i] = err
			}()
		}
		wg.Wait()
		ok := 0
		for i, err := range errs {
			switch {
			case err == nil:
				ok++
				mu.Lock()
				won[[]string{"a", "b"}[i]]++
				mu.Unlock()
			case errors.Is(err, sinks.ErrStale), a.Retryable(err):
			default:
				t.Fatalf("round %d: writer %d: %v", r, i, err)
			}
		}
		if ok > 1 {
			t.Fatalf("round %d: both writers committed the same slot from %d", r, from)
		}
		if ok == 1 {
			head = to
		}
	}
	if head < 0 {
		t.Fatal("no round committed")
	}
	for _, s := range []*Sink{a, b} {
		h, err := s.Heads(ctx, sinktest.Pipeline, "f", []string{"k/t/0"})
		if err != nil {
			t.Fatal(err)
		}
		if got := h["k/t/0"]; got.Offset != head {
			t.Fatalf("head on %s %v, want %d", s.opts.Addr[0], got, head)
		}
	}
	want := make([]int64, 0, head)
	for i := range head {
		want = append(want, i)
	}
	for i, addr := range c.Addrs {
		waitIDs(t, addr, db, "ev", want, fmt.Sprintf("replica %d", i+1))
	}
	t.Logf("rounds won: %v, head %d", won, head)
}

// waitIDs waits (bounded) until the table on the server at addr holds
// exactly want as its id column, sorted; more rows fail at once.
func waitIDs(t testing.TB, addr, db, table string, want []int64, where string) {
	t.Helper()
	conn, err := clickhouse.Open(&clickhouse.Options{Addr: []string{addr}, DialTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		rows, err := conn.Query(context.Background(), "SELECT id FROM `"+db+"`.`"+table+"` ORDER BY id")
		var got []int64
		if err == nil {
			for rows.Next() {
				var v int64
				if err = rows.Scan(&v); err != nil {
					break
				}
				got = append(got, v)
			}
			rows.Close()
		}
		if err == nil && slices.Equal(got, want) {
			return
		}
		if err == nil && len(got) > len(want) {
			t.Fatalf("%s: %d rows, want %d (a load published twice?)", where, len(got), len(want))
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: after 60 s: %d rows (err %v), want %d", where, len(got), err, len(want))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// dialSharded is dialCluster on the cluster of two shards, first server
// first.
func dialSharded(t testing.TB, c *chtest.Cluster, db string, first int, mod ...func(*Options)) *Sink {
	t.Helper()
	addrs := []string{c.ShardAddrs[first], c.ShardAddrs[1-first]}
	return dial(t, addrs[0], db, append([]func(*Options){func(o *Options) {
		o.Addr, o.Cluster, o.ZooKeeper = addrs, c.ShardedName, []string{c.ZooKeeper}
		o.CleanupEvery = time.Second
	}}, mod...)...)
}

// TestClusterShards: on the cluster of two shards each load goes whole to
// the shard of its slot, readers see every row once through the target's
// Distributed table, a column added reaches both shards and the
// Distributed table, a reset empties both shards, and CDC targets and
// replace_partitions are refused naming the remedy.
func TestClusterShards(t *testing.T) {
	c := chtest.SharedCluster(t)
	db := chtest.NewClusterDatabase(t, c)
	ctx := context.Background()
	a := dialSharded(t, c, db, 0)
	defer a.Close()
	b := dialSharded(t, c, db, 1)
	defer b.Close()
	table := sinks.Table{Name: "ev", Schema: batch.Schema{Columns: []batch.Column{{Name: "id", Type: batch.Int64}}}}
	for _, s := range []*Sink{a, b} {
		if err := s.Ensure(ctx, []sinks.Table{table}); err != nil {
			t.Fatalf("Ensure: %v", err)
		}
	}
	const parts, per = 8, 25
	var want []int64
	for p := range int32(parts) {
		s := []*Sink{a, b}[p%2] // both writers place by slot, whichever server they list first
		pos := batch.Positions{{Topic: "t", Partition: p, Offset: per}}
		l, err := s.Begin(ctx, sinks.LoadMeta{LoadID: fmt.Sprintf("p%d", p), Pipeline: sinktest.Pipeline, Flow: "f",
			Targets: []string{"ev"}, Slots: []string{sinks.Slot(pos[0])}})
		if err != nil {
			t.Fatal(err)
		}
		rows := batch.New(table.Schema, per)
		for i := range int64(per) {
			id := int64(p)*1000 + i
			rows.Vectors[0].AppendInt(id)
			want = append(want, id)
		}
		if err := l.Write(ctx, "ev", rows); err != nil {
			t.Fatal(err)
		}
		if err := l.Commit(ctx, sinks.Commit{From: batch.Positions{{Topic: "t", Partition: p, Offset: -1}}, To: pos, Rows: per}); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(want)
	// Each shard holds the loads of the slots its hash picks, whole.
	var held []int64
	for i, addr := range c.ShardAddrs {
		var mine []int64
		for p := range int32(parts) {
			if slotShard(sinks.Slot(batch.Position{Topic: "t", Partition: p}), 2) == uint32(i+1) {
				for k := range int64(per) {
					mine = append(mine, int64(p)*1000+k)
				}
			}
		}
		if len(mine) == 0 || len(mine) == len(want) {
			t.Fatalf("the hash puts %d of %d rows on shard %d: pick other slots", len(mine), len(want), i+1)
		}
		waitIDs(t, addr, db, shardPrefix+"ev", mine, fmt.Sprintf("shard %d's table", i+1))
		held = append(held, mine...)
	}
	slices.Sort(held)
	if !slices.Equal(held, want) {
		t.Fatalf("the shards hold %d rows, want %d", len(held), len(want))
	}
	for i, addr := range c.ShardAddrs {
		waitIDs(t, addr, db, "ev", want, fmt.Sprintf("the distributed table through server %d", i+1))
	}
	got, err := b.Scan(ctx, "ev")
	if err != nil {
		t.Fatal(err)
	}
	if got.Len() != len(want) {
		t.Fatalf("Scan: %d rows, want %d", got.Len(), len(want))
	}

	// A column added: both shards' tables and the Distributed table have it.
	wider := table
	wider.Schema = batch.Schema{Columns: append(slices.Clone(table.Schema.Columns), batch.Column{Name: "note", Type: batch.String, Nullable: true})}
	if err := a.Ensure(ctx, []sinks.Table{wider}); err != nil {
		t.Fatalf("Ensure with a column added: %v", err)
	}
	for i, addr := range c.ShardAddrs {
		for _, name := range []string{shardPrefix + "ev", "ev"} {
			probe := dial(t, addr, db)
			cols, err := probe.conn.Query(ctx, "SELECT note FROM `"+db+"`.`"+name+"` LIMIT 1")
			if err != nil {
				t.Fatalf("server %d, %s: %v", i+1, name, err)
			}
			cols.Close()
			probe.Close()
		}
	}
	if err := b.Ensure(ctx, []sinks.Table{wider}); err != nil {
		t.Fatalf("Ensure on the other server: %v", err)
	}
	hasColumn := func(addr, table, col string) bool {
		t.Helper()
		probe := dial(t, addr, db)
		defer probe.Close()
		n, err := probe.queryUint(ctx, "SELECT count() FROM system.columns WHERE database = ? AND table = ? AND name = ?", db, table, col)
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	// A column the shard tables got without the Distributed table (a
	// process stopped between the two): the next Ensure swaps in a
	// Distributed table that has it.
	if err := a.exec(ctx, "add a column behind sluice's back", "ALTER TABLE "+a.table(shardPrefix+"ev")+a.onShards()+" ADD COLUMN extra Nullable(String)"); err != nil {
		t.Fatal(err)
	}
	widest := wider
	widest.Schema = batch.Schema{Columns: append(slices.Clone(wider.Schema.Columns), batch.Column{Name: "extra", Type: batch.String, Nullable: true})}
	if hasColumn(c.ShardAddrs[0], "ev", "extra") {
		t.Fatal("the Distributed table has the column before Ensure")
	}
	if err := a.Ensure(ctx, []sinks.Table{widest}); err != nil {
		t.Fatalf("Ensure of the column the shard tables have: %v", err)
	}
	for i, addr := range c.ShardAddrs {
		if !hasColumn(addr, "ev", "extra") {
			t.Errorf("server %d: the Distributed table lacks the shard tables' column after Ensure", i+1)
		}
	}
	waitIDs(t, c.ShardAddrs[1], db, "ev", want, "the distributed table made anew")

	// A table of the user's under a target's name is refused before any
	// shard table is made for it.
	if err := a.exec(ctx, "a table of the user's", "CREATE TABLE "+a.table("mine")+a.onShards()+" (id Int64) ENGINE = MergeTree ORDER BY id"); err != nil {
		t.Fatal(err)
	}
	mine := sinks.Table{Name: "mine", Schema: table.Schema}
	if err := a.Ensure(ctx, []sinks.Table{mine}); err == nil || !strings.Contains(err.Error(), "Distributed") {
		t.Fatalf("Ensure over a table of the user's: %v, want a refusal", err)
	}
	if hasColumn(c.ShardAddrs[0], shardPrefix+"mine", "id") {
		t.Error("a shard table was made for a refused target")
	}

	// A reset empties both shards.
	if err := a.Reset(ctx, []string{"ev"}, []string{"f"}); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	for i, addr := range c.ShardAddrs {
		waitIDs(t, addr, db, "ev", nil, fmt.Sprintf("server %d after the reset", i+1))
	}

	l, err := a.Begin(ctx, sinks.LoadMeta{LoadID: "replace", Pipeline: sinktest.Pipeline, Flow: "g", Targets: []string{"ev"}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Abort(ctx)
	if err := l.(sinks.PartitionLoad).ReplacePartitions(ctx, "ev", batch.New(batch.Schema{}, 0)); err == nil || !strings.Contains(err.Error(), "write: append") {
		t.Fatalf("ReplacePartitions on 2 shards: %v, want a refusal naming the remedy", err)
	}
}

// TestClusterShardedCDC: a CDC target on two shards keeps each key's
// versions on one shard, the one its hash picks, whichever server a load
// went through; its view through either server shows the whole content;
// compaction drops the markers of both shards; TruncateBelow reads both;
// the state too is split by key; and a target recorded on other shards,
// or without a record while it holds rows, is refused.
func TestClusterShardedCDC(t *testing.T) {
	c := chtest.SharedCluster(t)
	db := chtest.NewClusterDatabase(t, c)
	ctx := context.Background()
	a := dialSharded(t, c, db, 0)
	defer a.Close()
	b := dialSharded(t, c, db, 1)
	defer b.Close()
	schema := batch.Schema{Columns: []batch.Column{{Name: "id", Type: batch.Int64}, {Name: "name", Type: batch.String}}}
	cur := sinks.Table{Name: "cur", Kind: sinks.KindSCD1, Keys: []string{"id"}, Schema: schema}
	hist := sinks.Table{Name: "hist", Kind: sinks.KindSCD2, Keys: []string{"id"}, Schema: schema}
	for _, s := range []*Sink{a, b} {
		if err := s.Ensure(ctx, []sinks.Table{cur, hist}); err != nil {
			t.Fatalf("Ensure: %v", err)
		}
	}
	// The columns of a target are its view's: it has no shard table.
	for _, s := range []*Sink{a, b} {
		if got, err := s.Columns(ctx, "cur"); err != nil || !slices.Equal(got.Names(), schema.Names()) {
			t.Fatalf("Columns of cur: %v (%v), want %v", got.Names(), err, schema.Names())
		}
	}
	const keys = 60
	rows := func(lo, hi int64, name string) (*batch.Batch, []string, []string) {
		bt := batch.New(schema, int(hi-lo))
		var ks, seqs []string
		for id := lo; id < hi; id++ {
			bt.Vectors[0].AppendInt(id)
			bt.Vectors[1].AppendString(fmt.Sprintf("%s%d", name, id))
			ks = append(ks, fmt.Sprintf("k%03d", id))
			seqs = append(seqs, name)
		}
		return bt, ks, seqs
	}
	load := func(s *Sink, id string, fn func(l sinks.CDCLoad) error) {
		t.Helper()
		l, err := s.Begin(ctx, sinks.LoadMeta{LoadID: id, Pipeline: sinktest.Pipeline, Flow: "f", Targets: []string{"cur", "hist"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := fn(l.(sinks.CDCLoad)); err != nil {
			t.Fatal(err)
		}
		if err := l.Commit(ctx, sinks.Commit{To: batch.Positions{{Topic: "t", Partition: 0, Offset: 1}}}); err != nil {
			t.Fatal(err)
		}
	}
	// Every key in a load through server 1, then half of them again, and
	// a removal, through server 2.
	load(a, "one", func(l sinks.CDCLoad) error {
		bt, ks, seqs := rows(0, keys, "a")
		if err := l.Upsert(ctx, "cur", bt, ks, seqs); err != nil {
			return err
		}
		var states []sinks.StateEntry
		for _, k := range ks {
			states = append(states, sinks.StateEntry{Key: k, Value: []byte("s" + k)})
		}
		if err := l.PutState(ctx, "cur", states); err != nil {
			return err
		}
		return l.Upsert(ctx, "hist", bt, ks, seqs)
	})
	load(b, "two", func(l sinks.CDCLoad) error {
		bt, ks, seqs := rows(0, keys/2, "b")
		if err := l.Upsert(ctx, "cur", bt, ks, seqs); err != nil {
			return err
		}
		if err := l.Upsert(ctx, "hist", bt, ks, seqs); err != nil {
			return err
		}
		gone, gk, gs := rows(keys-1, keys, "b")
		return l.Remove(ctx, "cur", gone, gk, gs)
	})
	shardKeys := func(addr, phys string) map[string]int {
		t.Helper()
		probe := dial(t, addr, db)
		defer probe.Close()
		r, err := probe.conn.Query(ctx, "SELECT _sluice_key, count() FROM `"+db+"`.`"+phys+"` GROUP BY _sluice_key")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		out := map[string]int{}
		for r.Next() {
			var k string
			var n uint64
			if err := r.Scan(&k, &n); err != nil {
				t.Fatal(err)
			}
			out[k] = int(n)
		}
		return out
	}
	for _, phys := range []string{physName("cur"), physName("hist")} {
		seen := map[string]int{}
		for i, addr := range c.ShardAddrs {
			mine := shardKeys(addr, phys)
			if len(mine) == 0 || len(mine) == keys {
				t.Fatalf("%s: shard %d holds %d of %d keys, want some", phys, i+1, len(mine), keys)
			}
			for k := range mine {
				if _, twice := seen[k]; twice {
					t.Fatalf("%s: key %s has versions on both shards", phys, k)
				}
				seen[k] = i
			}
		}
		if len(seen) != keys {
			t.Fatalf("%s: the shards hold %d keys, want %d", phys, len(seen), keys)
		}
	}
	// The states too are split by key, and read whole through either server.
	stateKeys := 0
	for i, addr := range c.ShardAddrs {
		probe := dial(t, addr, db)
		n, err := probe.queryUint(ctx, "SELECT uniqExact(key) FROM "+probe.table(shardStateTable)+" WHERE target = 'cur'")
		probe.Close()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 || n == keys {
			t.Fatalf("shard %d holds the states of %d of %d keys, want some", i+1, n, keys)
		}
		stateKeys += int(n)
	}
	if stateKeys != keys {
		t.Fatalf("the shards hold the states of %d keys, want each of %d once", stateKeys, keys)
	}
	var all []string
	for id := range int64(keys) {
		all = append(all, fmt.Sprintf("k%03d", id))
	}
	for _, s := range []*Sink{a, b} {
		got, err := s.GetState(ctx, "cur", all)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != keys || string(got["k007"]) != "sk007" {
			t.Fatalf("GetState through %s: %d states (k007: %q), want %d", s.opts.Addr[0], len(got), got["k007"], keys)
		}
		listed, err := s.StateKeys(ctx, "cur", "", 1000)
		if err != nil || len(listed) != keys || !slices.IsSorted(listed) {
			t.Fatalf("StateKeys through %s: %d keys (sorted %v), err %v; want %d", s.opts.Addr[0], len(listed), slices.IsSorted(listed), err, keys)
		}
	}

	wantCur := map[int64]string{}
	for id := range int64(keys - 1) {
		wantCur[id] = fmt.Sprintf("a%d", id)
		if id < keys/2 {
			wantCur[id] = fmt.Sprintf("b%d", id)
		}
	}
	for _, s := range []*Sink{a, b} {
		got, err := s.Scan(ctx, "cur")
		if err != nil {
			t.Fatal(err)
		}
		if got.Len() != len(wantCur) {
			t.Fatalf("the view of cur through %s: %d rows, want %d", s.opts.Addr[0], got.Len(), len(wantCur))
		}
		for i := range got.Len() {
			id, name := got.Vectors[0].Ints[i], got.Vectors[1].Strs[i]
			if wantCur[id] != name {
				t.Fatalf("the view of cur through %s: id %d is %q, want %q", s.opts.Addr[0], id, name, wantCur[id])
			}
		}
		h, err := s.Scan(ctx, "hist")
		if err != nil {
			t.Fatal(err)
		}
		if h.Len() != keys+keys/2 {
			t.Fatalf("the view of hist through %s: %d versions, want %d", s.opts.Addr[0], h.Len(), keys+keys/2)
		}
	}

	// TruncateBelow marks the rows of every shard older than its sequence.
	load(a, "three", func(l sinks.CDCLoad) error {
		return l.TruncateBelow(ctx, "cur", "b")
	})
	got, err := b.Scan(ctx, "cur")
	if err != nil {
		t.Fatal(err)
	}
	if got.Len() != keys/2 {
		t.Fatalf("after TruncateBelow: %d rows, want the %d of sequence b", got.Len(), keys/2)
	}
	dropped, err := a.CompactCDC(ctx, "cur")
	if err != nil {
		t.Fatalf("CompactCDC: %v", err)
	}
	if dropped < keys/2 {
		t.Fatalf("CompactCDC dropped %d rows, want at least the %d markers", dropped, keys/2)
	}
	for i, addr := range c.ShardAddrs {
		probe := dial(t, addr, db)
		n, err := probe.queryUint(ctx, "SELECT count() FROM "+probe.table(physName("cur"))+" WHERE _sluice_deleted = 1")
		probe.Close()
		if err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("shard %d keeps %d markers after compaction", i+1, n)
		}
	}
	if got, err := b.Scan(ctx, "cur"); err != nil || got.Len() != keys/2 {
		t.Fatalf("after compaction: %v rows, err %v; want %d", got.Len(), err, keys/2)
	}

	// The record names both shards; a target recorded on other shards is
	// refused, by a process whatever server it reaches first (one whose
	// server has no physical table yet does not record its own), and so
	// is one without a record.
	rec, _, err := a.zk.conn.Get(a.zk.shardsPath("cur"))
	if err != nil || string(rec) != "1:1,2:1" {
		t.Fatalf("the record of cur's shards: %q, %v; want 1:1,2:1", rec, err)
	}
	if _, err := a.zk.conn.Set(a.zk.shardsPath("cur"), []byte("1:1"), -1); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*Sink{a, b} {
		if err := s.Ensure(ctx, []sinks.Table{cur}); err == nil || !strings.Contains(err.Error(), "created on shards 1:1 (number:weight) and cluster sharded has 1:1,2:1") {
			t.Fatalf("Ensure of a target created on one shard: %v, want a refusal", err)
		}
	}
	if err := a.zk.conn.Delete(a.zk.shardsPath("cur"), -1); err != nil {
		t.Fatal(err)
	}
	if err := b.Ensure(ctx, []sinks.Table{cur}); err == nil || !strings.Contains(err.Error(), "no record of the shards") {
		t.Fatalf("Ensure of a target without a record: %v, want a refusal", err)
	}
	// Drop removes the target and its record, and it is made anew.
	if err := a.Drop(ctx, "hist"); err != nil {
		t.Fatalf("Drop: %v", err)
	}
	if ok, _, err := a.zk.conn.Exists(a.zk.shardsPath("hist")); err != nil || ok {
		t.Fatalf("the record of a dropped target: exists %v, %v", ok, err)
	}
	if err := b.Ensure(ctx, []sinks.Table{hist}); err != nil {
		t.Fatalf("Ensure after Drop: %v", err)
	}
	if h, err := b.Scan(ctx, "hist"); err != nil || h.Len() != 0 {
		t.Fatalf("hist made anew: %v rows, %v; want none", h.Len(), err)
	}
	// An empty target without a record is one another process is making:
	// recorded, not refused.
	if err := a.zk.conn.Delete(a.zk.shardsPath("hist"), -1); err != nil {
		t.Fatal(err)
	}
	if err := a.Ensure(ctx, []sinks.Table{hist}); err != nil {
		t.Fatalf("Ensure of an empty target without a record: %v", err)
	}
	if rec, _, err := a.zk.conn.Get(a.zk.shardsPath("hist")); err != nil || string(rec) != "1:1,2:1" {
		t.Fatalf("the record of hist: %q, %v; want 1:1,2:1", rec, err)
	}
}

// TestClusterOwnTablesKeepTheirPath: a database whose ledger an older
// sluice made at the targets' path (with {shard}) gets the rest of
// sluice's own tables at that path too, so that every server keeps one
// ledger; a new database gets them at the path across the shards.
func TestClusterOwnTablesKeepTheirPath(t *testing.T) {
	c := chtest.SharedCluster(t)
	ctx := context.Background()
	paths := func(s *Sink) map[string]string {
		t.Helper()
		rows, err := s.conn.Query(ctx, "SELECT name, engine_full FROM system.tables WHERE database = ? AND name LIKE '\\_sluice\\_%'", s.opts.Database)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]string{}
		for rows.Next() {
			var name, full string
			if err := rows.Scan(&name, &full); err != nil {
				t.Fatal(err)
			}
			if path, replica, ok := chsql.EngineArgs(full); ok {
				out[name] = path + " " + replica
			}
		}
		return out
	}
	check := func(s *Sink, want string) {
		t.Helper()
		got := paths(s)
		if len(got) < 8 {
			t.Fatalf("%d replicated tables of sluice's, want its own tables: %v", len(got), got)
		}
		for name, p := range got {
			if p != want {
				t.Errorf("%s at %s, want %s", name, p, want)
			}
		}
	}

	fresh := dialCluster(t, c, chtest.NewClusterDatabase(t, c), 0)
	defer fresh.Close()
	if err := fresh.Ensure(ctx, nil); err != nil {
		t.Fatal(err)
	}
	check(fresh, "/clickhouse/tables/all-"+c.Name+"/{database}/{table} {shard}-{replica}")

	db := chtest.NewClusterDatabase(t, c)
	old := dialCluster(t, c, db, 0)
	defer old.Close()
	if _, err := old.ensureDatabase(ctx); err != nil {
		t.Fatal(err)
	}
	old.own = chsql.Cluster{Name: c.Name, Path: chsql.DefaultZooKeeperPath, Replica: chsql.DefaultReplica}
	ledger := old.systemDDL()[0]
	if ledger.table != batch.LoadsTable {
		t.Fatalf("the first of sluice's tables is %s, want the ledger", ledger.table)
	}
	if err := old.ddl(ctx, "create the ledger as an older sluice did", ledger.sql); err != nil {
		t.Fatal(err)
	}
	s := dialCluster(t, c, db, 1)
	defer s.Close()
	if err := s.Ensure(ctx, nil); err != nil {
		t.Fatal(err)
	}
	check(s, chsql.DefaultZooKeeperPath+" "+chsql.DefaultReplica)

	// Such a database is refused on a cluster of several shards: its own
	// tables are per shard there.
	db = chtest.NewClusterDatabase(t, c)
	old = dialSharded(t, c, db, 0)
	defer old.Close()
	if _, err := old.ensureDatabase(ctx); err != nil {
		t.Fatal(err)
	}
	old.own = chsql.Cluster{Name: c.ShardedName, Path: chsql.DefaultZooKeeperPath, Replica: chsql.DefaultReplica}
	if err := old.ddl(ctx, "create the ledger as an older sluice did", old.systemDDL()[0].sql); err != nil {
		t.Fatal(err)
	}
	s = dialSharded(t, c, db, 0)
	defer s.Close()
	if err := s.Ensure(ctx, nil); err == nil || !strings.Contains(err.Error(), "use a new database") {
		t.Fatalf("Ensure on 2 shards of a database with its own tables per shard: %v, want a refusal", err)
	}
}
