package clickhouse

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/sluicehq/sluice/checkpoint"
	checkpointch "github.com/sluicehq/sluice/checkpoint/clickhouse"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
)

// conn is what the sink uses of a connection; clickhouse-go's driver.Conn
// has it.
type conn interface {
	chsql.Conn
	PrepareBatch(ctx context.Context, query string, opts ...driver.PrepareBatchOption) (driver.Batch, error)
	Close() error
}

// Sink is a ClickHouse destination. It is safe for concurrent use.
type Sink struct {
	conn    conn
	opts    Options
	version string
	feat    features
	log     *slog.Logger
	// leaseGrace: see leaseLockGrace. Tests shorten it.
	leaseGrace time.Duration
	// afterMerge, when set, runs between a compaction's merge and its
	// deletion of markers (tests load there).
	afterMerge func()

	resolveMu sync.Mutex // one resolvePending at a time
	mntMu     sync.Mutex // one maintenance (Recover, periodic, background) at a time

	stopCleanup func()        // cancels the background cleanup; nil when none runs
	cleanupDone chan struct{} // closed when the background cleanup returned

	mu          sync.Mutex
	systemReady bool                  // ensureSystem succeeded
	stateShards bool                  // ensureShardState succeeded
	own         chsql.Cluster         // of sluice's own tables, once ensureSystem read it (ownCluster)
	dropSync    string                // " SYNC" in an Atomic database, so that a drop waits for running queries
	tables      map[string]*tableInfo // by table name; dropped by Ensure
	forgets     uint64                // how many times forget ran: info caches no description older than the last
	inflight    map[string]*load      // by encoded load id: between Begin and the end of Commit or Abort
	pending     map[string]*load      // own loads whose commit or publication is unresolved
	owner       string                // id of the latest heartbeat this process wrote
	lastMnt     time.Time
	hbSeq       uint64
	grace       time.Duration // Options.Grace; see graceTime

	// CDC targets (see cdc.go).
	cdc     map[string]*cdcTable // described CDC targets by name; dropped by Ensure
	settled map[string]bool      // CDC targets whose committed loads this sink saw published
	floors  map[string]uint64    // per CDC target: the highest version base known

	// resetStop, when set (by tests), is asked at each step of Reset after
	// its commit point whether to stop there as a crash would.
	resetStop func(point string) bool
	// failPublish, when set (by tests), fails the next publication of a
	// committed load once, as a server failing at that moment would.
	failPublish atomic.Bool
	// takeoverWait, when set (by tests), replaces takeoverWait (publish.go).
	takeoverWait time.Duration
	lastBase     uint64               // the last version base this sink gave a load
	leases       map[string]heldLease // the leases this sink took, by target

	// On a cluster (cluster.go): the ZooKeeper session every commit goes
	// through; in the sink Open returns, the sinks of the cluster's
	// servers that loads go through (srv); in each of those, the server it
	// speaks to and the sink that opened it.
	zk     *coord
	srv    *servers
	server string
	shard  uint32 // of server, in the cluster (1-based)
	shards uint32 // of the cluster
	parent *Sink
}

var (
	_ sinks.Sink           = (*Sink)(nil)
	_ sinks.StateReader    = (*Sink)(nil)
	_ sinks.KeyStateProber = (*Sink)(nil)
	_ sinks.Leaser         = (*Sink)(nil)
	_ sinks.CDCLoad        = (*load)(nil)
)

// Open connects to the server and detects its version. The database is
// created by Ensure, not here.
func Open(ctx context.Context, opts Options) (*Sink, error) {
	opts.withDefaults()
	if opts.Cluster == "" && len(opts.ZooKeeper) > 0 {
		return nil, errors.New("clickhouse: zookeeper is set without cluster: name the cluster of the servers' remote_servers in cluster, or leave zookeeper out")
	}
	s, err := openServer(ctx, opts, nil)
	if err != nil {
		return nil, err
	}
	if opts.Cluster == "" {
		s.startCleanup(opts.CleanupEvery)
		return s, nil
	}
	// The maintenance runs in the servers' sinks (cluster.go): this one's
	// connections go to whichever server answers.
	if err := s.clusterOpen(ctx); err != nil {
		s.conn.Close()
		return nil, err
	}
	return s, nil
}

// openServer connects to the server (the first of opts.Addr that answers)
// and detects its version; log nil: opts.Logger.
func openServer(ctx context.Context, opts Options, log *slog.Logger) (*Sink, error) {
	if !chsql.ValidIdent(opts.Database) {
		return nil, fmt.Errorf("clickhouse: database name %q: use letters, digits and underscores", opts.Database)
	}
	if err := opts.validateCluster(); err != nil {
		return nil, err
	}
	settings, err := connSettings(opts)
	if err != nil {
		return nil, err
	}
	comp, err := compression(opts.Compression)
	if err != nil {
		return nil, err
	}
	c, err := clickhouse.Open(&clickhouse.Options{
		Addr:            opts.Addr,
		Auth:            clickhouse.Auth{Username: opts.Username, Password: opts.Password},
		TLS:             opts.TLS,
		DialTimeout:     opts.DialTimeout,
		ReadTimeout:     opts.ReadTimeout,
		Settings:        settings,
		Compression:     comp,
		MaxOpenConns:    8,
		MaxIdleConns:    4,
		ConnMaxLifetime: time.Hour,
	})
	if err != nil {
		return nil, fmt.Errorf("clickhouse: connect to %v: %w", opts.Addr, err)
	}
	if err := c.Ping(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("clickhouse: connect to %v: %w", opts.Addr, err)
	}
	v, err := c.ServerVersion()
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("clickhouse: server version: %w", err)
	}
	if bad := textSettings(settings); len(bad) > 0 && v.Revision <= settingsAsStrings {
		c.Close()
		return nil, fmt.Errorf("clickhouse: settings %v have text values, which ClickHouse %d.%d cannot receive (only numbers and booleans, before 19.11): give numbers, or leave them out",
			bad, v.Version.Major, v.Version.Minor)
	}
	if log == nil {
		log = opts.Logger
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := newSink(c, opts, log)
	s.version = fmt.Sprintf("%d.%d.%d", v.Version.Major, v.Version.Minor, v.Version.Patch)
	s.feat = featuresOf(int(v.Version.Major), int(v.Version.Minor))
	log.Info("clickhouse connected", "addr", opts.Addr, "database", opts.Database, "cluster", opts.Cluster, "version", s.version, "compression", opts.Compression,
		"datetime64", s.feat.dateTime64, "date32", s.feat.date32, "is_deleted", s.feat.isDeleted)
	return s, nil
}

func newSink(c conn, opts Options, log *slog.Logger) *Sink {
	return &Sink{
		conn:       c,
		opts:       opts,
		log:        log,
		grace:      cmp.Or(max(opts.Grace, 0), defaultGrace),
		leaseGrace: leaseLockGrace,
		tables:     map[string]*tableInfo{},
		inflight:   map[string]*load{},
		pending:    map[string]*load{},
		cdc:        map[string]*cdcTable{},
		settled:    map[string]bool{},
		floors:     map[string]uint64{},
		leases:     map[string]heldLease{},
	}
}

// connSettings are the settings sent with every query: the configured
// ones and, on a cluster, insert_deduplicate = 0. A replicated table drops
// an insert whose block equals a recent one's, by content, and answers
// success: a row written again on purpose (a state set back to an earlier
// value, a lease or heartbeat row repeated) would be lost. On the
// connection, the setting covers every insert of the sink and of the
// checkpoint store sharing it; an insert that wants the deduplication (a
// byte-identical retry) asks for it in its own settings, which the server
// applies after these. The deduplication of ATTACH PARTITION is not
// governed by it.
func connSettings(opts Options) (clickhouse.Settings, error) {
	settings := normalizeSettings(opts.Settings)
	if opts.Cluster == "" {
		return settings, nil
	}
	if v, ok := settings[dedupSetting]; ok && v != 0 && v != false {
		return nil, fmt.Errorf("clickhouse: setting %s = %v: on a cluster sluice inserts with %s = 0, so that a row written again on purpose is not dropped as a repeat; leave the setting out", dedupSetting, v, dedupSetting)
	}
	settings[dedupSetting] = 0
	return settings, nil
}

const dedupSetting = "insert_deduplicate"

// settingsAsStrings is the protocol revision from which the server takes
// settings as text (19.11); before, the driver sends only integers and
// booleans.
const settingsAsStrings = 54429

// normalizeSettings turns the text of integers and booleans (as a spec
// gives settings) into numbers, which every server version accepts.
func normalizeSettings(in map[string]any) clickhouse.Settings {
	out := clickhouse.Settings{}
	for k, v := range in {
		switch x := v.(type) {
		case string:
			if i, err := strconv.Atoi(x); err == nil {
				out[k] = i
				continue
			}
			if b, err := strconv.ParseBool(x); err == nil {
				out[k] = b
				continue
			}
		case int64:
			out[k] = int(x)
			continue
		case uint64:
			out[k] = int(x)
			continue
		case float64:
			if x == float64(int(x)) {
				out[k] = int(x)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// textSettings lists the settings that are neither integers nor booleans.
func textSettings(s clickhouse.Settings) []string {
	var out []string
	for k, v := range s {
		switch v.(type) {
		case int, bool:
		default:
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// ServerVersion returns the server's version as major.minor.patch.
func (s *Sink) ServerVersion() string { return s.version }

// Close stops the background cleanup and closes the connections. Loads
// still open are left to recovery.
func (s *Sink) Close() error {
	s.endCleanup()
	var first error
	if s.srv != nil {
		first = s.srv.close()
	}
	if s.zk != nil && s.parent == nil {
		s.zk.close()
	}
	if err := s.conn.Close(); err != nil {
		return fmt.Errorf("clickhouse: close: %w", err)
	}
	if first != nil {
		return fmt.Errorf("clickhouse: close: %w", first)
	}
	return nil
}

// table returns the quoted, database-qualified name of a table.
func (s *Sink) table(name string) string { return chsql.Table(s.opts.Database, name) }

// exec runs a statement, wrapping its error with what it was doing.
func (s *Sink) exec(ctx context.Context, what, query string, args ...any) error {
	if err := s.conn.Exec(ctx, query, args...); err != nil {
		return fmt.Errorf("clickhouse: %s: %w", what, err)
	}
	return nil
}

// dropStmt returns the statement dropping a table or view.
func (s *Sink) dropStmt(name string) string {
	return chsql.Drop(s.opts.Database, name, s.dropSuffix())
}

// dropTargetStmt returns the statement dropping a target's table or view:
// on a cluster ON CLUSTER, since dropping a replicated table on one server
// drops only that server's replica.
func (s *Sink) dropTargetStmt(name string) string {
	if s.opts.Cluster == "" {
		return s.dropStmt(name)
	}
	return "DROP TABLE IF EXISTS " + s.table(name) + s.opts.cluster().OnCluster() + s.dropSuffix()
}

// dropSuffix is chsql.DropSuffix of the database, once ensureSystem read
// its engine.
func (s *Sink) dropSuffix() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dropSync
}

func (s *Sink) currentOwner() string {
	if s.parent != nil {
		return s.parent.currentOwner()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.owner
}

// OpenCheckpoints opens the checkpoint store in the sink's database, on its
// connection (sinks.CheckpointKeeper).
func (s *Sink) OpenCheckpoints(ctx context.Context, log *slog.Logger) (checkpoint.Store, error) {
	own, err := s.ownCluster(ctx)
	if err != nil {
		return nil, err
	}
	return checkpointch.Open(ctx, s.conn, checkpointch.Options{Database: s.opts.Database, Cluster: own, Logger: log})
}

// Conn returns the sink's connection and database, for tools and tests
// that read the destination directly.
func (s *Sink) Conn() (chsql.Conn, string) { return s.conn, s.opts.Database }
