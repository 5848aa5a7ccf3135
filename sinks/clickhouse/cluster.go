package clickhouse

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/hashicorp/go-multierror"

	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
)

// servers are the sinks of a cluster destination's servers, one per
// address, each with connections to that server alone. A load is begun,
// staged, committed and published through one of them (its objects and
// its publication are on one server, as the protocol needs), and each
// runs the maintenance of what loads left on its server. The sink Open
// returns keeps its own connections, to whichever address answers, for
// tables, reads and heartbeats.
type servers struct {
	parent *Sink
	addrs  []string

	mu     sync.Mutex
	open   map[string]*Sink
	down   map[string]time.Time // when a server did not answer, for shardAddr
	cur    int                  // index in addrs of the server loads go to
	closed bool                 // by close: no server is connected again

	stop func()
	done chan struct{}
}

func newServers(parent *Sink, addrs []string) *servers {
	return &servers{parent: parent, addrs: addrs, open: map[string]*Sink{}, down: map[string]time.Time{}}
}

// get returns the sink of a server, connecting to it on first use.
func (v *servers) get(ctx context.Context, addr string) (*Sink, error) {
	v.mu.Lock()
	ss, closed := v.open[addr], v.closed
	v.mu.Unlock()
	if closed {
		return nil, errors.New("clickhouse: the destination is closed")
	}
	if ss != nil {
		return ss, nil
	}
	p := v.parent
	opts := p.opts
	opts.Addr = []string{addr}
	ss, err := openServer(ctx, opts, p.log.With("server", addr))
	if err != nil {
		return nil, err
	}
	ss.zk, ss.server, ss.parent = p.zk, addr, p
	shard, shards, err := ss.shardOf(ctx)
	if err == nil && shards != p.shards {
		err = fmt.Errorf("clickhouse: server %s lists %d shards in cluster %s, server %v %d: give the servers the same remote_servers", addr, shards, p.opts.Cluster, p.opts.Addr, p.shards)
	}
	if err != nil {
		ss.Close()
		return nil, err
	}
	ss.shard, ss.shards = shard, shards
	if err := ss.ensureSystem(ctx); err != nil {
		ss.Close()
		return nil, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if have := v.open[addr]; have != nil || v.closed {
		ss.Close()
		if have == nil {
			return nil, errors.New("clickhouse: the destination is closed")
		}
		return have, nil
	}
	v.open[addr] = ss
	ss.startCleanup(opts.CleanupEvery)
	return ss, nil
}

// shardOf reads which shard of the cluster the sink's server is, and how
// many the cluster has (system.clusters).
func (s *Sink) shardOf(ctx context.Context) (shard, shards uint32, err error) {
	rows, err := s.conn.Query(ctx, "SELECT shard_num, is_local FROM system.clusters WHERE cluster = ?", s.opts.Cluster)
	if err != nil {
		return 0, 0, fmt.Errorf("clickhouse: read cluster %s: %w", s.opts.Cluster, err)
	}
	defer rows.Close()
	seen := map[uint32]bool{}
	for rows.Next() {
		var n uint32
		var local uint8
		if err := rows.Scan(&n, &local); err != nil {
			return 0, 0, fmt.Errorf("clickhouse: read cluster %s: %w", s.opts.Cluster, err)
		}
		seen[n] = true
		if local != 0 {
			shard = n
		}
	}
	if err := rows.Err(); err != nil {
		return 0, 0, fmt.Errorf("clickhouse: read cluster %s: %w", s.opts.Cluster, err)
	}
	if len(seen) == 0 {
		return 0, 0, fmt.Errorf("clickhouse: server %v has no cluster %s in its remote_servers: name a cluster it lists (SELECT cluster FROM system.clusters)", s.opts.Addr, s.opts.Cluster)
	}
	if shard == 0 {
		return 0, 0, fmt.Errorf("clickhouse: server %v is not one of cluster %s's servers (none is local in system.clusters): list only the cluster's servers in addr", s.opts.Addr, s.opts.Cluster)
	}
	return shard, uint32(len(seen)), nil
}

// current returns the sink of the server loads go to.
func (v *servers) current(ctx context.Context) (*Sink, error) {
	v.mu.Lock()
	i := v.cur
	v.mu.Unlock()
	ss, err := v.get(ctx, v.addrs[i])
	if err != nil {
		v.next(i, err)
	}
	return ss, err
}

// failed makes the address after addr current when err says addr's
// server did not answer and addr is current.
func (v *servers) failed(addr string, err error) {
	if i := slices.Index(v.addrs, addr); i >= 0 {
		v.next(i, err)
	}
	if v.parent.sharded() && serverDown(err) {
		v.passOver(addr) // loads are placed by shard, not by the current server
	}
}

// next makes the address after i current, unless another failure did.
func (v *servers) next(i int, err error) {
	if !serverDown(err) || len(v.addrs) < 2 {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.cur == i {
		v.cur = (i + 1) % len(v.addrs)
		v.parent.log.Warn("server does not answer; loads go to the next one", "server", v.addrs[i], "next", v.addrs[v.cur], "err", err)
	}
}

// begin begins a load on the current server, or on the server of the
// lease of a CDC target among its targets; when that server does not
// answer, the next address becomes current (and the lease's server is
// forgotten, for the next renewal to catch another one up) and the error
// is returned: the runner's retry begins the load there.
func (v *servers) begin(ctx context.Context, meta sinks.LoadMeta) (sinks.Load, error) {
	v.mu.Lock()
	i := v.cur
	v.mu.Unlock()
	addr := v.addrs[i]
	leased := ""
	for _, t := range meta.Targets {
		if h, ok := v.parent.heldLease(t); ok && h.server != "" {
			addr, leased = h.server, t
			break
		}
	}
	placed := false
	if v.parent.sharded() && leased == "" && len(meta.Slots) > 0 {
		if a := v.shardAddr(ctx, slotShard(meta.Slots[0], v.parent.shards)); a != "" {
			addr, placed = a, true
		}
	}
	ss, err := v.get(ctx, addr)
	if err == nil {
		var l sinks.Load
		if l, err = ss.Begin(ctx, meta); err == nil {
			return l, nil
		}
	}
	if serverDown(err) {
		if leased != "" {
			v.parent.forgetLeaseServer(leased, addr)
		}
		if placed {
			v.passOver(addr)
		}
		if addr == v.addrs[i] {
			v.next(i, err)
		}
	}
	return nil, err
}

// serverDown reports whether err says a server cannot take loads: it did
// not answer (unreachable), or it answered that its replicated tables are
// read-only or its ZooKeeper is gone (Code 242, 225, 999: its own session
// with ZooKeeper was lost). Another server takes them meanwhile: the commit
// point is ZooKeeper's, whichever server a load goes through.
func serverDown(err error) bool {
	return unreachable(err) || chsql.IsCode(err, chsql.CodeTableIsReadOnly) || chsql.IsCode(err, chsql.CodeNoZooKeeper) || chsql.IsCode(err, chsql.CodeKeeperException)
}

// unreachable reports whether err says a server did not answer (refused,
// reset, timed out), as opposed to an answer refusing the work or a
// transient state of the protocol.
func unreachable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var ex *clickhouse.Exception
	var te *chsql.TransientError
	return !errors.As(err, &ex) && !errors.As(err, &te) && chsql.Retryable(err)
}

// each runs fn on the sink of every server that answers. A server that
// does not is an error when all is set, and logged otherwise unless no
// server answers.
func (v *servers) each(ctx context.Context, all bool, fn func(*Sink) error) error {
	var first error
	var errs *multierror.Error
	ok := 0
	for _, addr := range v.addrs {
		ss, err := v.get(ctx, addr)
		if err != nil {
			if all {
				return fmt.Errorf("clickhouse: server %s: %w", addr, err)
			}
			v.parent.log.Warn("server does not answer; what loads left on it waits for it", "server", addr, "err", err)
			if first == nil {
				first = err
			}
			continue
		}
		ok++
		if err := fn(ss); err != nil {
			errs = multierror.Append(errs, fmt.Errorf("server %s: %w", addr, err)) // the others still run
		}
	}
	if ok == 0 {
		return first
	}
	return errs.ErrorOrNil()
}

// connectLater connects, in the background, to the servers that did not
// answer yet, so that each server's maintenance runs once it is up.
func (v *servers) connectLater(every time.Duration) {
	if every <= 0 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	v.stop, v.done = cancel, make(chan struct{})
	go func() {
		defer close(v.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			// Like the background cleanup of one server, nothing is
			// connected (and so created) until this process set up
			// sluice's tables: a process that only reads creates nothing.
			for _, addr := range v.addrs {
				v.mu.Lock()
				have := v.open[addr] != nil
				v.mu.Unlock()
				if !have && ctx.Err() == nil && v.parent.isReady() {
					if _, err := v.get(ctx, addr); err != nil && ctx.Err() == nil {
						v.parent.log.Debug("server still does not answer", "server", addr, "err", err)
					}
				}
			}
			if err := v.parent.sweepLoads(ctx); err != nil && ctx.Err() == nil {
				v.parent.log.Warn("zookeeper load nodes not swept; retried later", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// sweepLoads fences the open load nodes of stopped processes older than
// the grace period: a Begin cut short before its marker leaves one that no
// server's maintenance finds; one with a marker is then dropped by its
// server's maintenance as a load that can no longer commit.
func (s *Sink) sweepLoads(ctx context.Context) error {
	if !s.isReady() {
		return nil
	}
	names, _, err := s.zk.conn.Children(s.zk.root + "/loads")
	if err != nil {
		return zkErr("list loads", err)
	}
	var alive map[string]bool
	for _, enc := range names {
		rec, n, err := s.zk.readLoad(enc)
		if err != nil {
			return err
		}
		if !n.found || rec.State != zkOpen || time.Since(time.UnixMilli(n.ctime)) < s.graceTime() {
			continue
		}
		if alive == nil {
			if alive, err = s.aliveOwners(ctx); err != nil {
				return err
			}
		}
		if rec.Owner != "" && alive[rec.Owner] {
			continue
		}
		committed, err := s.zk.fenceLoad(enc)
		if err != nil {
			return err
		}
		if committed == nil {
			s.log.Info("open load node of a stopped process removed", "load", enc, "server", rec.Server)
		}
	}
	return nil
}

func (v *servers) close() error {
	v.mu.Lock()
	v.closed = true
	v.mu.Unlock()
	if v.stop != nil {
		v.stop()
		<-v.done
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	var first error
	for addr, ss := range v.open {
		if err := ss.Close(); err != nil && first == nil {
			first = err
		}
		delete(v.open, addr)
	}
	return first
}

// forget drops what every server's sink knows of a table (Ensure, Drop
// and Reset changed it).
func (v *servers) forget(name string) {
	v.mu.Lock()
	open := make([]*Sink, 0, len(v.open))
	for _, ss := range v.open {
		open = append(open, ss)
	}
	v.mu.Unlock()
	for _, ss := range open {
		ss.forget(name)
	}
}

// unpublished counts the loads of every server's sink left unresolved.
func (v *servers) unpublished(ctx context.Context) (int, error) {
	n := 0
	err := v.each(ctx, false, func(ss *Sink) error {
		k, err := ss.Unpublished(ctx)
		n += k
		return err
	})
	return n, err
}

// clusterOpen opens the cluster parts of a sink: the ZooKeeper session and
// the servers' sinks.
func (s *Sink) clusterOpen(ctx context.Context) error {
	if s.opts.Cluster == "" {
		return nil
	}
	_, shards, err := s.shardOf(ctx)
	if err != nil {
		return err
	}
	if shards > 1 && !strings.Contains(s.opts.ZooKeeperPath, "{shard}") {
		return fmt.Errorf("clickhouse: cluster %s has %d shards and zookeeper_path %q names no {shard}: the shards' tables would be one replicated table, each shard holding every row; put {shard} in the path", s.opts.Cluster, shards, s.opts.ZooKeeperPath)
	}
	s.shards = shards
	if shards > 1 {
		s.warnUncovered(ctx)
	}
	c, err := openCoord(s.opts.ZooKeeper, s.opts.Cluster, s.opts.Database, s.log)
	if err != nil {
		return err
	}
	s.zk = c
	s.srv = newServers(s, s.opts.Addr)
	s.srv.connectLater(s.opts.CleanupEvery)
	return nil
}

// isReady reports whether sluice's tables were set up by this sink.
func (s *Sink) isReady() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.systemReady
}
