package clickhouse

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
)

// On a cluster of several shards (docs/clickhouse.md, "Shards") an append
// target is a table on each shard, _sluice_shard_<target>, replicated among
// the shard's replicas, and under the target's own name a Distributed table
// over them for readers. A load goes whole to one shard and is published
// there; sluice's own tables are one replicated table across every server
// (chsql.Cluster.Own), so the ledger, the heads and the ZooKeeper commit
// point stay those of one cluster.

// shardPrefix names the table of each shard under an append target of a
// cluster of several shards.
const shardPrefix = sluicePrefix + "shard_"

// sharded reports whether the sink writes a cluster of several shards.
func (s *Sink) sharded() bool { return s.shards > 1 }

// local returns the table that holds a target's rows on the server: the
// target's table of the shard on a cluster of several shards, else the
// target itself. sluice's own tables, staging tables and CDC physical
// tables are their own.
func (s *Sink) local(name string) string {
	if !s.sharded() || strings.HasPrefix(name, sluicePrefix) {
		return name
	}
	return shardPrefix + name
}

// slotShard returns the shard (1-based) that a load continuing slot goes
// to among shards: the FNV-1a hash of the slot's name, so that each Kafka
// partition or file keeps to one shard while its servers answer.
func slotShard(slot string, shards uint32) uint32 {
	h := fnv.New32a()
	h.Write([]byte(slot))
	return 1 + h.Sum32()%shards
}

// distributedSQL renders the Distributed table of an append target over
// its shards' tables. Readers query it; nothing is inserted into it (each
// load attaches its parts into one shard's table), so it has no sharding
// key.
func (s *Sink) distributedSQL(name string) string {
	cl := s.opts.cluster()
	return "CREATE TABLE IF NOT EXISTS " + s.table(name) + cl.OnCluster() + " AS " + s.table(s.local(name)) +
		" ENGINE = Distributed(" + chsql.Quote(s.opts.Cluster) + ", " + chsql.Quote(s.opts.Database) + ", " + chsql.Quote(s.local(name)) + ")"
}

// ensureDistributed creates the Distributed table of an append target when
// missing, and refuses a table of that name that is not one over the
// target's shard tables. anew drops and creates it (after columns were
// added: 18.16 cannot ALTER a Distributed table ON CLUSTER of a cluster
// whose shards replicate internally, Code 371, and the Distributed table
// takes its columns from the shard table when it is created).
func (s *Sink) ensureDistributed(ctx context.Context, name string, anew bool) error {
	have, err := s.engines(ctx, []string{name})
	if err != nil {
		return fmt.Errorf("clickhouse: table %s: %w", name, err)
	}
	switch engine, ok := have[name]; {
	case ok && engine != "Distributed":
		return fmt.Errorf("clickhouse: table %s is %s: on cluster %s of %d shards an append target's name is a Distributed table over its shards' tables %s; drop or rename the table, or give the target another name",
			name, engine, s.opts.Cluster, s.shards, s.local(name))
	case ok && !anew:
		return nil
	case ok:
		if err := s.ddl(ctx, "drop the distributed table "+name, s.dropTargetStmt(name)); err != nil {
			return err
		}
	}
	if err := s.ddl(ctx, "create the distributed table "+name, s.distributedSQL(name)); err != nil {
		return err
	}
	if have, err = s.engines(ctx, []string{name}); err != nil {
		return fmt.Errorf("clickhouse: table %s: %w", name, err)
	}
	if _, ok := have[name]; !ok {
		return s.notHere("the distributed table " + name)
	}
	return nil
}

// truncate empties an append target. On a cluster of several shards it
// empties the table of each shard through one server of the shard that
// answers (a replicated TRUNCATE reaches the shard's other replicas through
// its replication log, in order with later attaches); an ON CLUSTER one
// would run late on a server that was down, after loads published there.
// A shard none of whose servers in addr answers is an error: the reset
// stays unapplied, and Recover completes it.
func (s *Sink) truncate(ctx context.Context, table string) error {
	if !s.sharded() {
		if err := s.exec(ctx, "reset "+table, "TRUNCATE TABLE "+s.table(table)); err != nil && !chsql.Gone(err) {
			return err
		}
		return nil
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
		if err := ss.exec(ctx, "reset "+table+" on shard "+fmt.Sprint(ss.shard), "TRUNCATE TABLE "+ss.table(ss.local(table))); err != nil && !chsql.Gone(err) {
			errs = multierror.Append(errs, fmt.Errorf("server %s: %w", addr, err))
			continue
		}
		done[ss.shard] = true
	}
	if uint32(len(done)) < s.shards {
		return fmt.Errorf("clickhouse: reset %s: %d of the %d shards of cluster %s emptied: each needs a server of it in addr that answers (%w)",
			table, len(done), s.shards, s.opts.Cluster, errs.ErrorOrNil())
	}
	return nil
}

// errCDCShards refuses a CDC target on a cluster of several shards
// (docs/clickhouse.md, "Limits").
func (s *Sink) errCDCShards(table string) error {
	return fmt.Errorf("clickhouse: table %s: an AUTO CDC target on cluster %s of %d shards: sluice writes CDC targets on a cluster of one shard (its replicas) so far, and append targets on any; name a cluster of one shard in a destination of its own for the CDC targets, or make the target an append target",
		table, s.opts.Cluster, s.shards)
}

// errReplaceShards refuses replace_partitions on a cluster of several
// shards: a partition's rows are on every shard that a load wrote them to,
// and one shard's REPLACE PARTITION would leave the others'.
func (s *Sink) errReplaceShards(table string) error {
	return fmt.Errorf("clickhouse: replace partitions of %s: on cluster %s of %d shards a partition's rows are spread over the shards, and no statement replaces them on all at once; write: append, or a cluster of one shard", table, s.opts.Cluster, s.shards)
}

// shardDownFor is how long a server that did not answer is passed over
// when loads are placed on its shard: the load goes to the current server
// meanwhile (any shard takes any load; the commit point is ZooKeeper's).
const shardDownFor = 30 * time.Second

// shardAddr returns the address loads of shard go to: the first in addr
// order, from the current one, of a server of that shard not passed over;
// "" when none is known to answer. A server whose shard is unknown yet is
// connected to find out.
func (v *servers) shardAddr(ctx context.Context, shard uint32) string {
	v.mu.Lock()
	start := v.cur
	v.mu.Unlock()
	for k := range v.addrs {
		addr := v.addrs[(start+k)%len(v.addrs)]
		v.mu.Lock()
		ss, down := v.open[addr], time.Since(v.down[addr]) < shardDownFor
		v.mu.Unlock()
		if down {
			continue
		}
		if ss == nil {
			var err error
			if ss, err = v.get(ctx, addr); err != nil {
				v.passOver(addr)
				continue
			}
		}
		if ss.shard == shard {
			return addr
		}
	}
	return ""
}

// passOver makes shardAddr pass over addr for shardDownFor.
func (v *servers) passOver(addr string) {
	v.mu.Lock()
	v.down[addr] = time.Now()
	v.mu.Unlock()
}

// onShards returns " ON CLUSTER c" on a cluster of several shards, for the
// ALTERs of targets' shard tables; "" otherwise (a replicated ALTER reaches
// the replicas of its table by itself).
func (s *Sink) onShards() string {
	if !s.sharded() {
		return ""
	}
	return s.opts.cluster().OnCluster()
}
