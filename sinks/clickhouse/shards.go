package clickhouse

import (
	"context"
	"fmt"
	"hash/fnv"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

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

// distTable is a Distributed table sluice keeps over a table of each
// shard: an append target's, under the target's name (nothing is inserted
// into it: each load attaches its parts into one shard's table, so it has
// no sharding key), or a CDC target's physical tables, under
// _sluice_dphys_<target> (publication inserts through it, sharded by the
// key: see cdcshards.go).
type distTable struct {
	name  string // the Distributed table
	local string // the table of each shard
	key   string // the sharding key, "" for none
	what  string // what the name is, for a refusal
}

// appendDist is an append target's Distributed table.
func (s *Sink) appendDist(name string) distTable {
	return distTable{name: name, local: s.local(name), what: "an append target's name"}
}

// engine renders the Distributed engine of d.
func (s *Sink) distEngine(d distTable) string {
	e := "Distributed(" + chsql.Quote(s.opts.Cluster) + ", " + chsql.Quote(s.opts.Database) + ", " + chsql.Quote(d.local)
	if d.key != "" {
		e += ", " + d.key
	}
	return e + ")"
}

// checkDistributed refuses a table under d's name that is not its
// Distributed table (another engine, or a Distributed table over other
// tables or sharded otherwise), and reports whether it exists.
func (s *Sink) checkDistributed(ctx context.Context, d distTable) (bool, error) {
	var engine, full string
	found := false
	err := retrySystem(ctx, func() error {
		rows, err := s.conn.Query(ctx, "SELECT engine, engine_full FROM system.tables WHERE database = ? AND name = ?", s.opts.Database, d.name)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			found = true
			if err := rows.Scan(&engine, &full); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	if err != nil {
		return false, fmt.Errorf("clickhouse: table %s: %w", d.name, err)
	}
	if found && (engine != "Distributed" || normEngine(full) != normEngine(s.distEngine(d))) {
		return false, fmt.Errorf("clickhouse: table %s is %s: on cluster %s of %d shards %s is sluice's Distributed table over its shards' tables %s (%s); drop or rename the table, or give the target another name",
			d.name, full, s.opts.Cluster, s.shards, d.what, d.local, s.distEngine(d))
	}
	return found, nil
}

// normEngine drops the quotes and spaces of an engine clause, which
// system.tables shows as it was written.
func normEngine(e string) string {
	return strings.NewReplacer("`", "", "'", "", " ", "").Replace(e)
}

// ensureDistributed creates a Distributed table when missing, and swaps in
// a new one when its columns are not those of this server's shard table:
// a Distributed table takes its columns from the shard table when it is
// created, and 18.16 cannot ALTER one ON CLUSTER of a cluster whose shards
// replicate internally (Code 371). Checking at every Ensure, not only after
// adding columns, catches one that a stopped process or a replica applying
// the ALTER late left behind. The new table is made under another name and
// renamed in, so readers miss the table only for the moment of the RENAME,
// not while a down server holds up the ON CLUSTER statements
// (distributed_ddl_task_timeout).
func (s *Sink) ensureDistributed(ctx context.Context, d distTable) error {
	found, err := s.checkDistributed(ctx, d)
	if err != nil {
		return err
	}
	on, local := s.opts.cluster().OnCluster(), s.table(d.local)
	create := func(t string) string {
		return "CREATE TABLE IF NOT EXISTS " + s.table(t) + on + " AS " + local + " ENGINE = " + s.distEngine(d)
	}
	if !found {
		if err := s.ddl(ctx, "create the distributed table "+d.name, create(d.name)); err != nil {
			return err
		}
	} else {
		have, err := s.columnList(ctx, d.name)
		if err != nil {
			return err
		}
		want, err := s.columnList(ctx, d.local)
		if err != nil {
			return err
		}
		if have == want {
			return nil
		}
		next, prev := sluicePrefix+"distnew_"+d.name, sluicePrefix+"distold_"+d.name
		if base, ours := strings.CutPrefix(d.name, sluicePrefix); ours {
			// Apart from an append target's: one may be named dphys_x.
			next, prev = sluicePrefix+"dnew_"+base, sluicePrefix+"dold_"+base
		}
		steps := []struct{ what, stmt string }{
			{"drop a leftover distributed table of " + d.name, s.dropTargetStmt(next)},
			{"drop a leftover distributed table of " + d.name, s.dropTargetStmt(prev)},
			{"create the distributed table of " + d.name + " anew", create(next)},
			{"swap in the distributed table of " + d.name, "RENAME TABLE " + s.table(d.name) + " TO " + s.table(prev) + ", " + s.table(next) + " TO " + s.table(d.name) + on},
			{"drop the previous distributed table of " + d.name, s.dropTargetStmt(prev)},
		}
		for _, st := range steps {
			if err := s.ddl(ctx, st.what, st.stmt); err != nil {
				return err
			}
		}
		s.log.Info("distributed table made anew with its shards' columns", "table", d.name)
	}
	if found, err = s.checkDistributed(ctx, d); err != nil {
		return err
	}
	if !found {
		return s.notHere("the distributed table " + d.name)
	}
	return nil
}

// columnList returns a table's columns as this server has them, in order:
// names, types and defaults (an alias column's expression too).
func (s *Sink) columnList(ctx context.Context, table string) (string, error) {
	var b strings.Builder
	err := retrySystem(ctx, func() error {
		b.Reset()
		rows, err := s.conn.Query(ctx, "SELECT name, type, default_kind, default_expression FROM system.columns WHERE database = ? AND table = ?", s.opts.Database, table)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var name, typ, kind, expr string
			if err := rows.Scan(&name, &typ, &kind, &expr); err != nil {
				return err
			}
			fmt.Fprintf(&b, "%s %s %s %s\n", name, typ, kind, expr)
		}
		return rows.Err()
	})
	if err != nil {
		return "", fmt.Errorf("clickhouse: columns of %s: %w", table, err)
	}
	return b.String(), nil
}

// truncate empties an append target. On a cluster of several shards it
// empties the table of each shard through one server of the shard that
// answers (eachShard): a replicated TRUNCATE reaches the shard's other
// replicas through its replication log, in order with later attaches; an
// ON CLUSTER one would run late on a server that was down, after loads
// published there. A shard none of whose servers in addr answers is an
// error: the reset stays unapplied, and Recover completes it.
func (s *Sink) truncate(ctx context.Context, table string) error {
	local := s.local(table)
	if local == table { // one table (across the shards, for sluice's own)
		if err := s.exec(ctx, "reset "+table, "TRUNCATE TABLE "+s.table(table)); err != nil && !chsql.Gone(err) {
			return err
		}
		return nil
	}
	err := s.eachShard(ctx, "reset "+table, func(ss *Sink) error {
		if err := ss.exec(ctx, "reset "+table+" on shard "+fmt.Sprint(ss.shard), "TRUNCATE TABLE "+ss.table(local)); err != nil && !chsql.Gone(err) {
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w (Recover completes the reset once one answers)", err)
	}
	return nil
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

// clusterHost is a server of the cluster as system.clusters lists it.
type clusterHost struct {
	shard    uint32
	name, ip string
	port     uint16
}

// warnUncovered logs the shards of the cluster that no address in addr
// names, as system.clusters lists their servers: the loads of their slots
// go to other shards, and a reset cannot be completed while one is
// missing. Only a warning: addr may name a server otherwise (a DNS name
// where the cluster lists its IP address).
func (s *Sink) warnUncovered(ctx context.Context) {
	rows, err := s.conn.Query(ctx, "SELECT shard_num, host_name, host_address, port FROM system.clusters WHERE cluster = ?", s.opts.Cluster)
	if err != nil {
		return
	}
	defer rows.Close()
	var hosts []clusterHost
	for rows.Next() {
		var h clusterHost
		if rows.Scan(&h.shard, &h.name, &h.ip, &h.port) != nil {
			return
		}
		hosts = append(hosts, h)
	}
	if rows.Err() != nil {
		return
	}
	if missing := uncoveredShards(hosts, s.opts.Addr); len(missing) > 0 {
		s.log.Warn("shards of the cluster have no server in addr: their slots' loads go to other shards, and a reset cannot complete; list a server of every shard in addr",
			"cluster", s.opts.Cluster, "shards", missing)
	}
}

// uncoveredShards returns the shards none of whose servers is in addrs
// (by host name or address, and port).
func uncoveredShards(hosts []clusterHost, addrs []string) []uint32 {
	in := map[string]bool{}
	for _, a := range addrs {
		in[a] = true
	}
	covered := map[uint32]bool{}
	var all []uint32
	for _, h := range hosts {
		if !slices.Contains(all, h.shard) {
			all = append(all, h.shard)
		}
		port := strconv.Itoa(int(h.port))
		if in[net.JoinHostPort(h.name, port)] || in[net.JoinHostPort(h.ip, port)] {
			covered[h.shard] = true
		}
	}
	var out []uint32
	for _, k := range all {
		if !covered[k] {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}
