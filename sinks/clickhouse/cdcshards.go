package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/go-zookeeper/zk"
	"github.com/hashicorp/go-multierror"

	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
)

// CDC targets on a cluster of several shards (docs/clickhouse.md, "CDC
// targets on shards"). The physical table _sluice_phys_<target> is a
// replicated table of each shard, and _sluice_dphys_<target> a Distributed
// table over them sharded by cityHash64(_sluice_key): every version and
// marker of a key is on the key's shard, so FINAL, which each shard applies
// to its own rows, sees all of a key's versions, and the view reads
// SELECT ... FROM _sluice_dphys_<target> FINAL WHERE _sluice_deleted = 0.
//
// A load stages its versions on one server as everywhere, and its commit
// point is the same ZooKeeper multi; publication inserts the staging table
// into the Distributed table synchronously (insert_distributed_sync), each
// row onto its key's shard, where an attach could only fill this server's
// shard. An insert is not idempotent as an attach of a partition is made
// to be, and needs not be: a version is a row the load's key, sequence
// and version identify, and a row repeated (by a publication retried after
// a lost answer, or by recovery racing the writer) is the same row, which
// the ReplacingMergeTree keeps once. Compaction publishes every committed
// load first and deletes only markers at or below the versions it found,
// so no repeated row can reappear under a marker it deleted: a repeat
// needs the load's staging table, which is gone once the load is
// published.
//
// The shard count is fixed for a target: the Distributed table places a
// key by its hash modulo the shards' weights, and another count would put
// new versions of a key on a shard its old ones are not on. ZooKeeper
// keeps the count the target was created with (cdc/<target> under the
// sink's root); Ensure refuses a cluster with another.

const (
	dphysPrefix = sluicePrefix + "dphys_"
	// shardStateTable is the hidden state's table of each shard, and
	// dstateTable the Distributed table over them, sharded by key.
	shardStateTable = shardPrefix + "cdc_state"
	dstateTable     = sluicePrefix + "dcdc_state"
)

func dphysName(table string) string { return dphysPrefix + table }

// cdcShardKey is the sharding key of a CDC target's Distributed table.
var cdcShardKey = "cityHash64(" + chsql.Quote(keyColumn) + ")"

// cdcDist is a CDC target's Distributed table over its physical tables.
func cdcDist(table string) distTable {
	return distTable{name: dphysName(table), local: physName(table), key: cdcShardKey, what: "the name " + dphysName(table)}
}

// stateDist is the Distributed table over the shards' state tables.
var stateDist = distTable{name: dstateTable, local: shardStateTable, key: "cityHash64(key)", what: "the name " + dstateTable}

// stateLocal returns the table of CDC targets' hidden state that loads
// stage into and publish: each shard's own on several shards, else
// _sluice_cdc_state.
func (s *Sink) stateLocal() string {
	if s.sharded() {
		return shardStateTable
	}
	return cdcStateTable
}

// stateRead returns the table the hidden state is read from: the
// Distributed table over the shards' on several shards.
func (s *Sink) stateRead() string {
	if s.sharded() {
		return dstateTable
	}
	return cdcStateTable
}

// ensureShardState makes, once per sink, what every CDC target on several
// shards needs: the load balancing checkBalancing asks for (table names
// the target refused otherwise), the state table of each shard and the
// Distributed table over them.
func (s *Sink) ensureShardState(ctx context.Context, table string) error {
	s.mu.Lock()
	done := s.stateShards
	s.mu.Unlock()
	if done {
		return nil
	}
	if err := s.checkBalancing(ctx, table); err != nil {
		return err
	}
	if err := s.ddl(ctx, "create table "+shardStateTable, s.createStateSQL(shardStateTable, s.opts.cluster())); err != nil {
		return err
	}
	if err := s.ensureDistributed(ctx, stateDist); err != nil {
		return err
	}
	s.mu.Lock()
	s.stateShards = true
	s.mu.Unlock()
	return nil
}

// cdcRead returns the table that a CDC target's rows are read from: its
// Distributed table on several shards, else its physical table.
func (s *Sink) cdcRead(table string) string {
	if s.sharded() {
		return dphysName(table)
	}
	return physName(table)
}

// shardedInsert returns the Distributed table that publication inserts a
// staging table of table through: on several shards, for a CDC target's
// physical table and the state table; "" for the others, which are
// attached.
func (s *Sink) shardedInsert(table string) string {
	switch {
	case !s.sharded():
		return ""
	case strings.HasPrefix(table, physPrefix):
		return dphysName(strings.TrimPrefix(table, physPrefix))
	case table == shardStateTable:
		return dstateTable
	}
	return ""
}

// checkBalancing refuses CDC targets on a cluster whose shards have
// several replicas unless the servers send a query's reads and inserts to
// the same replica of each shard: each load's publication inserts into
// one replica of each shard, and the next load's reads (the state, the
// version floor, TruncateBelow) must see it there. load_balancing =
// 'in_order' does, the first replica that answers in remote_servers
// order; it is read from the profile of sluice's user, since 18.16's
// protocol carries integer settings only.
func (s *Sink) checkBalancing(ctx context.Context, table string) error {
	var replicas uint64
	var balancing string
	rows, err := s.conn.Query(ctx, "SELECT toUInt64(max(replica_num)), (SELECT value FROM system.settings WHERE name = 'load_balancing') FROM system.clusters WHERE cluster = ?", s.opts.Cluster)
	if err == nil {
		for rows.Next() {
			err = rows.Scan(&replicas, &balancing)
		}
		err = errors.Join(err, rows.Err())
		rows.Close()
	}
	if err != nil {
		return fmt.Errorf("clickhouse: read the replicas of cluster %s and load_balancing: %w", s.opts.Cluster, err)
	}
	return balancingProblem(table, s.opts.Cluster, replicas, balancing)
}

// balancingProblem is checkBalancing's rule.
func balancingProblem(table, cluster string, replicas uint64, balancing string) error {
	if replicas <= 1 || balancing == "in_order" {
		return nil
	}
	return fmt.Errorf("clickhouse: table %s: an AUTO CDC target on cluster %s, whose shards have %d replicas, needs load_balancing = 'in_order' for sluice's user (it is %q): a load's rows go to one replica of each shard and the next load must read them there; set it in the user's profile on every server (<load_balancing>in_order</load_balancing> in users.xml), or use shards of one replica",
		table, cluster, replicas, balancing)
}

// publishShards publishes a staging table by inserting its rows into the
// Distributed table target (shardedInsert), which puts each onto its key's
// shard and returns once every shard has them.
func (s *Sink) publishShards(ctx context.Context, target, stage string) error {
	cols, err := s.insertable(ctx, stage)
	if err != nil {
		return err
	}
	if len(cols) == 0 {
		// As the server says of a table it does not have, for the callers'
		// chsql.Gone: recovery renamed the staging table to publish it.
		return fmt.Errorf("clickhouse: publish %s: %w", stage, &clickhouse.Exception{Code: chsql.CodeUnknownTable, Message: "staging table " + stage + " is gone"})
	}
	list := strings.Join(cols, ", ")
	q := "INSERT INTO " + s.table(target) + " (" + list + ") SELECT " + list + " FROM " + s.table(stage)
	sync := clickhouse.Context(ctx, clickhouse.WithSettings(clickhouse.Settings{"insert_distributed_sync": 1}))
	err = s.conn.Exec(sync, q)
	switch {
	case err == nil:
		return nil
	case chsql.Gone(err):
		return fmt.Errorf("clickhouse: publish %s into %s: %w", stage, target, err)
	}
	// Another shard's server may have refused the rows (read-only, down):
	// retried, without the code that would pass this server over.
	return chsql.Transient("clickhouse: publish %s into %s (on a shard of cluster %s): %v", stage, target, s.opts.Cluster, err)
}

// insertable lists the columns of a table that an INSERT names, in order
// (not an ALIAS or MATERIALIZED one); none when the table is gone.
func (s *Sink) insertable(ctx context.Context, table string) ([]string, error) {
	var out []string
	err := retrySystem(ctx, func() error {
		out = out[:0]
		rows, err := s.conn.Query(ctx, "SELECT name FROM system.columns WHERE database = ? AND table = ? AND default_kind NOT IN ('ALIAS', 'MATERIALIZED')", s.opts.Database, table)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				return err
			}
			out = append(out, chsql.Quote(name))
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("clickhouse: columns of %s: %w", table, err)
	}
	return out, nil
}

// eachShard runs fn on the sink of one server of every shard, the first
// in addr that answers; off several shards on s itself. A shard none of
// whose servers answers is an error naming it, after fn ran on the others.
func (s *Sink) eachShard(ctx context.Context, what string, fn func(ss *Sink) error) error {
	if !s.sharded() {
		return fn(s)
	}
	root := s
	if s.parent != nil {
		root = s.parent
	}
	done := map[uint32]bool{}
	var errs *multierror.Error
	for _, addr := range root.srv.addrs {
		ss, err := root.srv.get(ctx, addr)
		if err != nil {
			errs = multierror.Append(errs, fmt.Errorf("server %s: %w", addr, err))
			continue
		}
		if done[ss.shard] {
			continue
		}
		if err := fn(ss); err != nil {
			errs = multierror.Append(errs, fmt.Errorf("server %s: %w", addr, err))
			continue
		}
		done[ss.shard] = true
	}
	if uint32(len(done)) == s.shards {
		return nil
	}
	var missing []string
	for k := uint32(1); k <= s.shards; k++ {
		if !done[k] {
			missing = append(missing, fmt.Sprint(k))
		}
	}
	err := fmt.Errorf("clickhouse: %s: shard %s of cluster %s not done: no server of it in addr answered; list a server of every shard in addr", what, strings.Join(missing, ", "), s.opts.Cluster)
	if errs != nil {
		err = fmt.Errorf("%w: %w", err, errs)
	}
	return err
}

// shardsPath is the ZooKeeper node recording the shards (numbers and
// weights) a CDC target was created on.
func (c *coord) shardsPath(table string) string { return c.root + "/cdc/" + encodeID(table) }

// shardLayout describes the cluster's shards as a key's shard depends on
// them: each shard's number and weight, "1:1,2:1".
func (s *Sink) shardLayout(ctx context.Context) (string, error) {
	var parts []string
	err := retrySystem(ctx, func() error {
		parts = parts[:0]
		rows, err := s.conn.Query(ctx, "SELECT shard_num, any(shard_weight) FROM system.clusters WHERE cluster = ? GROUP BY shard_num ORDER BY shard_num", s.opts.Cluster)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var n, w uint32
			if err := rows.Scan(&n, &w); err != nil {
				return err
			}
			parts = append(parts, fmt.Sprintf("%d:%d", n, w))
		}
		return rows.Err()
	})
	if err != nil {
		return "", fmt.Errorf("clickhouse: read the shards of cluster %s: %w", s.opts.Cluster, err)
	}
	return strings.Join(parts, ","), nil
}

// checkShards records the shards of a cluster that a CDC target's
// physical tables were just created on (created), or refuses a target
// created on other shards: a key's versions and state stay on the shard
// its hash chose among them. A target without a record is one another
// process just created, or one made on a cluster of one shard by a sluice
// that kept none: recorded, unless on several shards it holds rows (they
// would all be on the first shard).
func (s *Sink) checkShards(ctx context.Context, table string, created bool) error {
	want, err := s.shardLayout(ctx)
	if err != nil {
		return err
	}
	p := s.zk.shardsPath(table)
	if err := s.zk.ensureParents(p); err != nil {
		return zkErr("create cdc folder", err)
	}
	n, err := s.zk.get(p)
	if err != nil {
		return err
	}
	have := string(n.data)
	if !n.found {
		rows := uint64(0)
		if !created && s.sharded() {
			err := s.eachShard(ctx, "count the rows of "+table, func(ss *Sink) error {
				n, err := ss.queryUint(ctx, "SELECT count() FROM "+ss.table(physName(table)))
				rows += n
				return err
			})
			if err != nil {
				return err
			}
		}
		if rows > 0 {
			return fmt.Errorf("clickhouse: table %s has no record of the shards it was created on (ZooKeeper node %s) and holds rows: it was made on a cluster of one shard, and its rows would be read by a hash of their keys on cluster %s of %d shards; write the target anew into another name (a full refresh), or keep it on a cluster of one shard",
				table, p, s.opts.Cluster, s.shards)
		}
		data, err := s.zk.settle(p, []byte(want))
		if err != nil {
			return err
		}
		have = string(data)
	}
	if have != want {
		return fmt.Errorf("clickhouse: table %s was created on shards %s (number:weight) and cluster %s has %s: a key's versions and state stay on the shard its hash chose among the first; write the target anew into another name (a full refresh), or restore the cluster's shards (after dropping its tables by hand, delete ZooKeeper node %s too)",
			table, have, s.opts.Cluster, want, p)
	}
	return nil
}

// dropShardsRecord deletes the record of a CDC target's shards (Drop).
func (s *Sink) dropShardsRecord(table string) error {
	if s.zk == nil {
		return nil
	}
	if err := s.zk.conn.Delete(s.zk.shardsPath(table), -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return zkErr("delete the record of the shards of "+table, err)
	}
	return nil
}
