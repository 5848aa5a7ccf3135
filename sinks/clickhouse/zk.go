package clickhouse

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
)

// On a cluster (Options.Cluster) the commit point of a load is in
// ZooKeeper, not in one server's ledger: replicas see each other's rows
// late, and nothing SQL-visible on 18.16 is a cluster-wide compare-and-set
// (docs/clickhouse.md, "The protocol on a cluster"). Under the sink's root,
// /sluice/<cluster>/<database>:
//
//	loads/<load>                 one node per load in progress: open, then committed
//	heads/<pipeline>/<flow>/<slot>  where the committed loads left a slot
//	own                          the ZooKeeper path and replica of sluice's own tables
//
// A commit is one multi: the load node's version is checked and its data
// set to the committed ledger row (recovery fences a load by deleting its
// node), and each slot's head node is set from the version read when the
// chain was checked (created when the slot had none). Exactly one of two
// loads continuing a slot from the same head wins, whichever replica they
// write through. Path segments are encodeID's, which never hold a slash.

// coord is the sink's ZooKeeper session.
type coord struct {
	conn *zk.Conn
	root string
}

// zkSession is the session timeout asked of ZooKeeper: an owner that
// stopped loses its ephemeral state after it; nothing here relies on
// ephemeral nodes, so it only bounds how long a lost connection goes
// unnoticed.
const zkSession = 10 * time.Second

func openCoord(addrs []string, cluster, database string, log *slog.Logger) (*coord, error) {
	if len(addrs) == 0 {
		return nil, errors.New("clickhouse: cluster " + cluster + ": no zookeeper addresses: list the ensemble's host:port in zookeeper")
	}
	conn, _, err := zk.Connect(addrs, zkSession, zk.WithLogger(zkLogger{log}))
	if err != nil {
		return nil, fmt.Errorf("clickhouse: connect to zookeeper %v: %w", addrs, err)
	}
	c := &coord{conn: conn, root: path.Join("/sluice", encodeID(cluster), encodeID(database))}
	for _, dir := range []string{"/sluice", path.Dir(c.root), c.root, c.root + "/loads", c.root + "/heads"} {
		if err := c.ensure(dir); err != nil {
			conn.Close()
			return nil, zkErr(fmt.Sprintf("%v: create %s", addrs, dir), err)
		}
	}
	return c, nil
}

func (c *coord) close() { c.conn.Close() }

// ensure creates a persistent node with no data when missing.
func (c *coord) ensure(p string) error {
	_, err := c.conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll))
	if err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return err
	}
	return nil
}

// settle returns the data of node p, creating it with data when missing:
// the first writer's data wins, and every later reader gets it.
func (c *coord) settle(p string, data []byte) ([]byte, error) {
	for {
		n, err := c.get(p)
		if err != nil {
			return nil, err
		}
		if n.found {
			return n.data, nil
		}
		_, err = c.conn.Create(p, data, 0, zk.WorldACL(zk.PermAll))
		if err == nil {
			return data, nil
		}
		if !errors.Is(err, zk.ErrNodeExists) {
			return nil, zkErr("create "+p, err)
		}
	}
}

// ensureParents creates the missing folders above p.
func (c *coord) ensureParents(p string) error {
	dir := path.Dir(p)
	if dir == c.root || !strings.HasPrefix(dir, c.root+"/") {
		return nil
	}
	var missing []string
	for d := dir; d != c.root+"/heads" && d != c.root+"/loads" && d != c.root; d = path.Dir(d) {
		missing = append(missing, d)
	}
	slices.Reverse(missing)
	for _, d := range missing {
		if err := c.ensure(d); err != nil {
			return err
		}
	}
	return nil
}

func (c *coord) loadPath(enc string) string { return c.root + "/loads/" + enc }

func (c *coord) flowPath(pipeline, flow string) string {
	return c.root + "/heads/" + encodeID(pipeline) + "/" + encodeID(flow)
}

func (c *coord) headPath(pipeline, flow, slot string) string {
	return c.flowPath(pipeline, flow) + "/" + encodeID(slot)
}

// zkLoad is a load node's data.
type zkLoad struct {
	State    string     `json:"state"` // zkOpen or zkCommitted
	Owner    string     `json:"owner,omitempty"`
	Server   string     `json:"server"`
	Pipeline string     `json:"pipeline"`
	Flow     string     `json:"flow"`
	Targets  []string   `json:"targets,omitempty"`
	Row      *ledgerRow `json:"row,omitempty"` // when committed: the ledger row, inserted from here
}

const (
	zkOpen      = "open"
	zkCommitted = "committed"
)

// zkHead is a head node's data: the slot's position and the counts of the
// loads that reached it since the flow's reset (as _sluice_heads rows).
type zkHead struct {
	Position string `json:"position"` // batch.Positions{p}.Encode()
	At       int64  `json:"at"`       // commit time (µs)
	Loads    int64  `json:"loads"`
	Rows     int64  `json:"rows"`
	DLs      int64  `json:"dead_letters"`
	Load     string `json:"load"`
}

// zkNode is a node's data and version as read.
type zkNode struct {
	data    []byte
	version int32
	ctime   int64 // creation, ms since the epoch by ZooKeeper's clock
	found   bool
}

func (c *coord) get(p string) (zkNode, error) {
	data, st, err := c.conn.Get(p)
	if errors.Is(err, zk.ErrNoNode) {
		return zkNode{}, nil
	}
	if err != nil {
		return zkNode{}, zkErr("read "+p, err)
	}
	return zkNode{data: data, version: st.Version, ctime: st.Ctime, found: true}, nil
}

// readLoad reads a load node.
func (c *coord) readLoad(enc string) (zkLoad, zkNode, error) {
	n, err := c.get(c.loadPath(enc))
	if err != nil || !n.found {
		return zkLoad{}, n, err
	}
	var rec zkLoad
	if err := json.Unmarshal(n.data, &rec); err != nil {
		return zkLoad{}, n, fmt.Errorf("clickhouse: zookeeper load node %s: %w", enc, err)
	}
	return rec, n, nil
}

// createLoad creates an open load node; found reports that one existed.
func (c *coord) createLoad(enc string, rec zkLoad) (found bool, err error) {
	data, err := json.Marshal(rec)
	if err != nil {
		return false, err
	}
	_, err = c.conn.Create(c.loadPath(enc), data, 0, zk.WorldACL(zk.PermAll))
	if errors.Is(err, zk.ErrNodeExists) {
		return true, nil
	}
	if err != nil {
		return false, zkErr("create load node", err)
	}
	return false, nil
}

// fenceLoad settles an open load: it deletes the node unless it is
// committed, so that the load can never commit. It returns the committed
// record when the load committed (nil otherwise); a node already gone
// counts as not committed, since a committed node is deleted only after
// its ledger row was inserted on the load's server (see commitZK).
func (c *coord) fenceLoad(enc string) (*zkLoad, error) {
	for range 10 {
		rec, n, err := c.readLoad(enc)
		if err != nil {
			return nil, err
		}
		if !n.found {
			return nil, nil
		}
		if rec.State == zkCommitted {
			return &rec, nil
		}
		err = c.conn.Delete(c.loadPath(enc), n.version)
		if err == nil || errors.Is(err, zk.ErrNoNode) {
			return nil, nil
		}
		if !errors.Is(err, zk.ErrBadVersion) {
			return nil, zkErr("fence load node", err)
		}
		// It changed meanwhile (its commit): read it again.
	}
	return nil, chsql.Transient("clickhouse: zookeeper load node %s keeps changing; retry", enc)
}

// dropLoad deletes a load node whatever its version (after the load was
// published or discarded).
func (c *coord) dropLoad(enc string) error {
	err := c.conn.Delete(c.loadPath(enc), -1)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return zkErr("delete load node", err)
	}
	return nil
}

// heads reads the head nodes of a flow's slots (of every slot with a head
// when slots is nil).
func (c *coord) heads(pipeline, flow string, slots []string) (map[string]zkHead, map[string]int32, error) {
	if slots == nil {
		names, _, err := c.conn.Children(c.flowPath(pipeline, flow))
		if errors.Is(err, zk.ErrNoNode) {
			return map[string]zkHead{}, map[string]int32{}, nil
		}
		if err != nil {
			return nil, nil, zkErr("list heads", err)
		}
		for _, name := range names {
			sl, err := decodeID(name)
			if err != nil {
				continue // not a node of sluice's
			}
			slots = append(slots, sl)
		}
	}
	heads := make(map[string]zkHead, len(slots))
	versions := make(map[string]int32, len(slots))
	for _, sl := range slots {
		n, err := c.get(c.headPath(pipeline, flow, sl))
		if err != nil {
			return nil, nil, err
		}
		if !n.found {
			continue
		}
		var h zkHead
		if err := json.Unmarshal(n.data, &h); err != nil {
			return nil, nil, fmt.Errorf("clickhouse: zookeeper head of %s in flow %s: %w", sl, flow, err)
		}
		heads[sl], versions[sl] = h, n.version
	}
	return heads, versions, nil
}

// multiOutcome is how a commit's multi ended.
type multiOutcome uint8

const (
	multiDone    multiOutcome = iota
	multiUnknown              // the answer was lost: settle with fenceLoad
	multiFenced               // the load node changed: recovery fenced the load
	multiStale                // a head moved: another load continued a slot first
	multiLease                // a lease's node moved: another holder took it over
)

// zkOp is one operation of a commit's multi and what its failure means.
type zkOp struct {
	op     any
	onFail multiOutcome
}

func (c *coord) multi(ops []zkOp) (multiOutcome, error) {
	reqs := make([]any, len(ops))
	for i, o := range ops {
		reqs[i] = o.op
	}
	res, err := c.conn.Multi(reqs...)
	if err == nil {
		return multiDone, nil
	}
	for i, r := range res {
		if i < len(ops) && r.Error != nil && (errors.Is(r.Error, zk.ErrBadVersion) || errors.Is(r.Error, zk.ErrNoNode) || errors.Is(r.Error, zk.ErrNodeExists)) {
			return ops[i].onFail, err
		}
	}
	if errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrNodeExists) {
		return multiStale, err // not said which: the caller reads again
	}
	return multiUnknown, zkErr("commit", err)
}

// maxMulti bounds the data of one commit's multi: ZooKeeper refuses a
// request above jute.maxbuffer (1 MB by default) by dropping the
// connection, which would read as an unknown outcome for ever.
const maxMulti = 900 << 10

// multiSize is what a multi's operations carry: paths and data.
func multiSize(ops []zkOp) int {
	n := 0
	for _, o := range ops {
		switch r := o.op.(type) {
		case *zk.SetDataRequest:
			n += len(r.Path) + len(r.Data) + 16
		case *zk.CreateRequest:
			n += len(r.Path) + len(r.Data) + 32
		case *zk.CheckVersionRequest:
			n += len(r.Path) + 8
		case *zk.DeleteRequest:
			n += len(r.Path) + 8
		}
	}
	return n
}

// zkErr wraps a ZooKeeper failure: a lost connection or session and an
// unreachable ensemble are retryable, as a ClickHouse server that does not
// answer is.
func zkErr(what string, err error) error {
	switch {
	case errors.Is(err, zk.ErrConnectionClosed), errors.Is(err, zk.ErrSessionExpired), errors.Is(err, zk.ErrNoServer),
		errors.Is(err, zk.ErrSessionMoved), errors.Is(err, zk.ErrClosing):
		return chsql.Transient("clickhouse: zookeeper: %s: %w", what, err)
	}
	return fmt.Errorf("clickhouse: zookeeper: %s: %w", what, err)
}

// zkLogger sends the client's messages to the sink's logger at Debug: it
// reports every reconnection, which the sink's own errors already say.
type zkLogger struct{ log *slog.Logger }

func (l zkLogger) Printf(format string, args ...any) {
	l.log.Debug("zookeeper: " + fmt.Sprintf(format, args...))
}
