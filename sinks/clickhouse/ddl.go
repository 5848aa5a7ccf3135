package clickhouse

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"strings"

	"github.com/hashicorp/go-multierror"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
	"github.com/sluicehq/sluice/sinks/clickhouse/chsql"
)

// tableInfo is an existing table as the sink reads it back from the server.
type tableInfo struct {
	name         string
	alterName    string // what an ALTER of its columns names: the shard tables ON CLUSTER on several shards
	alterNote    string // what follows such an ALTER, said after it
	engine       string
	partitionKey string
	sortingKey   string
	columns      []column // declared columns in table order, without _sluice_ columns
	hasLoadID    bool
	// hidden are the other _sluice_ columns (those of a CDC target's
	// physical table) by name, with their type and comment.
	hidden map[string]hiddenColumn
	// comments are those commentsColumn holds (a table on a cluster), by
	// column; hasComments says the table has that column.
	comments    map[string]string
	hasComments bool
}

type hiddenColumn struct{ typ, comment string }

func (t *tableInfo) schema() batch.Schema {
	s := batch.Schema{Columns: make([]batch.Column, len(t.columns))}
	for i, c := range t.columns {
		s.Columns[i] = c.Column
	}
	return s
}

// names returns the names of the declared columns, in table order.
func (t *tableInfo) names() []string {
	out := make([]string, len(t.columns))
	for i, c := range t.columns {
		out[i] = c.Name
	}
	return out
}

func (t *tableInfo) column(name string) (column, bool) {
	for _, c := range t.columns {
		if c.Name == name {
			return c, true
		}
	}
	return column{}, false
}

// Ensure creates the database, sluice's own tables and the targets when
// missing, adds nullable columns the spec added, and refuses every other
// difference between the spec and an existing table with a message saying
// what to do. It reports the problems of all tables at once.
func (s *Sink) Ensure(ctx context.Context, tables []sinks.Table) error {
	if err := s.ensureSystem(ctx); err != nil {
		return err
	}
	var errs *multierror.Error
	for _, t := range tables {
		if err := s.ensureTable(ctx, t); err != nil {
			errs = multierror.Append(errs, err)
		}
	}
	return errs.ErrorOrNil()
}

// ensureSystem creates the database and sluice's own tables once per Sink.
// On a cluster it creates only what this server lacks: an ON CLUSTER
// statement waits for every server of the cluster, and stalls while one is
// down (distributed_ddl_task_timeout, 180 s by default).
func (s *Sink) ensureSystem(ctx context.Context) error {
	s.mu.Lock()
	ready := s.systemReady
	s.mu.Unlock()
	if ready {
		return nil
	}
	engine, err := s.ensureDatabase(ctx)
	if err != nil {
		return err
	}
	own, err := s.ownCluster(ctx)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.own = own
	s.mu.Unlock()
	stmts := s.systemDDL()
	names := make([]string, len(stmts))
	for i, st := range stmts {
		names[i] = st.table
	}
	var have map[string]string
	err = retrySystem(ctx, func() error {
		var err error
		have, err = s.engines(ctx, names)
		return err
	})
	if err != nil {
		return fmt.Errorf("clickhouse: look for sluice's tables: %w", err)
	}
	if err := s.checkOwnEngines(have); err != nil {
		return err
	}
	_, had := have[headsTable]
	for _, st := range stmts {
		if _, ok := have[st.table]; ok && s.opts.Cluster != "" {
			continue
		}
		if err := s.ddl(ctx, "create "+st.table, st.sql); err != nil {
			return err
		}
	}
	if s.opts.Cluster != "" {
		if err := s.createdHere(ctx, names); err != nil {
			return err
		}
	}
	if !had {
		// A ledger from before the heads: write them from it, once.
		if n, err := s.queryUint(ctx, "SELECT count() FROM "+s.table(batch.LoadsTable)); err != nil {
			return err
		} else if n > 0 {
			if err := s.backfillHeads(ctx); err != nil {
				return err
			}
		}
	}
	for _, col := range []string{replacedColumn, schemaHashColumn} {
		if err := s.ensureLedgerColumn(ctx, col); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.systemReady = true
	s.dropSync = chsql.DropSuffix(engine)
	s.mu.Unlock()
	return nil
}

// ensureDatabase creates the database when missing (on a cluster, ON
// CLUSTER and only when this server lacks it) and returns its engine.
func (s *Sink) ensureDatabase(ctx context.Context) (string, error) {
	db := chsql.Quote(s.opts.Database)
	if s.opts.Cluster == "" {
		if err := s.exec(ctx, "create database", "CREATE DATABASE IF NOT EXISTS "+db); err != nil {
			return "", err
		}
	} else {
		engine, err := chsql.DatabaseEngine(ctx, s.conn, s.opts.Database)
		if err != nil {
			return "", fmt.Errorf("clickhouse: %w", err)
		}
		if engine != "" {
			return engine, nil
		}
		if err := s.ddl(ctx, "create database", "CREATE DATABASE IF NOT EXISTS "+db+s.opts.cluster().OnCluster()); err != nil {
			return "", err
		}
	}
	engine, err := chsql.DatabaseEngine(ctx, s.conn, s.opts.Database)
	if err != nil {
		return "", fmt.Errorf("clickhouse: %w", err)
	}
	if engine == "" && s.opts.Cluster != "" {
		return "", s.notHere("database " + s.opts.Database)
	}
	return engine, nil
}

// engines returns the engines of those of names that exist, by name.
func (s *Sink) engines(ctx context.Context, names []string) (map[string]string, error) {
	args := []any{s.opts.Database}
	for _, n := range names {
		args = append(args, n)
	}
	rows, err := s.conn.Query(ctx, "SELECT name, engine FROM system.tables WHERE database = ? AND name IN ("+chsql.Placeholders(len(names))+")", args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var name, engine string
		if err := rows.Scan(&name, &engine); err != nil {
			return nil, err
		}
		out[name] = engine
	}
	return out, rows.Err()
}

// checkOwnEngines refuses sluice's own tables made for the other mode:
// replicated ones without a cluster, one server's with a cluster. Their
// rows (the ledger, the states) cannot move between the two in place.
func (s *Sink) checkOwnEngines(have map[string]string) error {
	var wrong []string
	for _, name := range sortedKeys(have) {
		if chsql.IsReplicated(have[name]) != (s.opts.Cluster != "") {
			wrong = append(wrong, name+" ("+have[name]+")")
		}
	}
	if len(wrong) == 0 {
		return nil
	}
	if s.opts.Cluster != "" {
		return fmt.Errorf("clickhouse: database %s holds sluice's tables of one server, not replicated: %s; with destination.clickhouse.cluster set sluice keeps its state in replicated tables: use a new database for the cluster (sluice creates it ON CLUSTER), or leave cluster unset",
			s.opts.Database, strings.Join(wrong, ", "))
	}
	return fmt.Errorf("clickhouse: database %s holds replicated tables of sluice: %s; set destination.clickhouse.cluster (and zookeeper) to the cluster they are replicated on, or use another database for one server",
		s.opts.Database, strings.Join(wrong, ", "))
}

// createdHere checks that an ON CLUSTER statement made the tables on this
// server too: it does not when the server is not one of the cluster's.
func (s *Sink) createdHere(ctx context.Context, names []string) error {
	var have map[string]string
	err := retrySystem(ctx, func() error {
		var err error
		have, err = s.engines(ctx, names)
		return err
	})
	if err != nil {
		return fmt.Errorf("clickhouse: look for sluice's tables: %w", err)
	}
	for _, n := range names {
		if _, ok := have[n]; !ok {
			return s.notHere("table " + n)
		}
	}
	return nil
}

func (s *Sink) notHere(what string) error {
	return fmt.Errorf("clickhouse: %s is missing on the server right after its CREATE ... ON CLUSTER %s: is the server one of the cluster's (system.clusters)? Point addr at the cluster's servers", what, s.opts.Cluster)
}

// ddl runs a statement that creates or drops a table, view or database:
// on a cluster it is ON CLUSTER, and one that a down server keeps from
// finishing (Code 159, after distributed_ddl_task_timeout) is a success
// with lag: the servers up ran it, the others run it from the
// distributed DDL queue when they are back, and what this server lacks
// the caller finds missing.
func (s *Sink) ddl(ctx context.Context, what, stmt string) error {
	err := s.conn.Exec(ctx, stmt)
	if err != nil && s.opts.Cluster != "" && chsql.IsCode(err, chsql.CodeTimeoutExceeded) {
		s.log.Warn("statement not finished on every server of the cluster; the others run it when back", "what", what, "cluster", s.opts.Cluster, "err", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("clickhouse: %s: %w", what, err)
	}
	return nil
}

// alter runs an ALTER of a table's columns. A replicated table applies it
// on every replica by itself (no ON CLUSTER); with a replica down 18.16
// answers Code 341 "Alter is not finished because some replicas are
// inactive", having applied it here: a success with lag, which the replica
// catches up with when back.
//
// On a cluster of several shards the ALTER is ON CLUSTER (onShards), and
// Code 159 of a down server is a success with lag as for ddl.
func (s *Sink) alter(ctx context.Context, what, stmt string) error {
	err := s.conn.Exec(ctx, stmt)
	if err != nil && s.opts.Cluster != "" && (chsql.IsCode(err, chsql.CodeUnfinished) || s.sharded() && chsql.IsCode(err, chsql.CodeTimeoutExceeded)) {
		s.log.Warn("alter not finished on every replica; they apply it when back", "what", what, "err", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("clickhouse: %s: %w", what, err)
	}
	return nil
}

// ownCluster returns where sluice's own tables go on a cluster, as the
// database's ZooKeeper node own records it (every server then creates
// them at the same path, whichever server comes first); the first to set
// it up records where this server's first own table is, when it has any (a
// database set up by an older sluice keeps its path: a server creating
// them elsewhere would start an empty ledger of its own), else
// chsql.Cluster.Own's path.
func (s *Sink) ownCluster(ctx context.Context) (chsql.Cluster, error) {
	own, err := s.ownHere(ctx)
	if err != nil || s.zk == nil {
		return own, err
	}
	data, err := s.zk.settle(s.zk.root+"/own", []byte(own.Path+"\n"+own.Replica))
	if err != nil {
		return chsql.Cluster{}, err
	}
	p, r, ok := strings.Cut(string(data), "\n")
	if !ok {
		return chsql.Cluster{}, fmt.Errorf("clickhouse: zookeeper node %s/own holds %q, not a path and a replica", s.zk.root, data)
	}
	own.Path, own.Replica = p, r
	if s.sharded() && strings.Contains(own.Path, "{shard}") {
		return chsql.Cluster{}, fmt.Errorf("clickhouse: database %s keeps sluice's own tables per shard (ZooKeeper path %s, set up on a cluster of one shard): on cluster %s of %d shards they must be one table across the shards; use a new database for the cluster", s.opts.Database, own.Path, s.opts.Cluster, s.shards)
	}
	return own, nil
}

// ownHere is ownCluster as this server alone sees it.
func (s *Sink) ownHere(ctx context.Context) (chsql.Cluster, error) {
	cl := s.opts.cluster()
	if cl.Name == "" {
		return cl, nil
	}
	own := cl.Own()
	names := []string{batch.LoadsTable, headsTable, resetsTable, stateTable, heartbeatsTable, leasesTable, cdcStateTable,
		batch.DeadLettersTable, batch.ExpectationsTable, batch.ReplayedTable, batch.VersionTable}
	full := map[string]string{}
	err := retrySystem(ctx, func() error {
		args := []any{s.opts.Database}
		for _, n := range names {
			args = append(args, n)
		}
		rows, err := s.conn.Query(ctx, "SELECT name, engine_full FROM system.tables WHERE database = ? AND name IN ("+chsql.Placeholders(len(names))+")", args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var name, engine string
			if err := rows.Scan(&name, &engine); err != nil {
				return err
			}
			full[name] = engine
		}
		return rows.Err()
	})
	if err != nil {
		return chsql.Cluster{}, fmt.Errorf("clickhouse: look for sluice's tables: %w", err)
	}
	for _, n := range names {
		if path, replica, ok := chsql.EngineArgs(full[n]); ok {
			own.Path, own.Replica = path, replica
			break
		}
	}
	return own, nil
}

// ownTables returns the cluster of sluice's own tables as ensureSystem
// found it, or chsql.Cluster.Own's before.
func (s *Sink) ownTables() chsql.Cluster {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.own.Name != "" {
		return s.own
	}
	return s.opts.cluster().Own()
}

// ddlStmt is a statement creating one of sluice's own tables.
type ddlStmt struct{ table, sql string }

// systemDDL returns the statements creating sluice's own tables, in order.
func (s *Sink) systemDDL() []ddlStmt {
	ts := chType(batch.Timestamp, false, s.feat)
	cl := s.ownTables()
	on := cl.OnCluster()
	return []ddlStmt{
		{batch.LoadsTable, "CREATE TABLE IF NOT EXISTS " + s.table(batch.LoadsTable) + on + ` (
	load_id String, pipeline String, flow String, targets String, positions String,
	rows Int64, dead_letters Int64, generation Int64, committed_at ` + ts + `,
	from_positions String, slot String, committed_us UInt32, ` + chsql.Quote(replacedColumn) + ` String,
	` + chsql.Quote(schemaHashColumn) + ` String
) ENGINE = ` + cl.Engine("MergeTree") + ` ORDER BY (pipeline, flow, slot, committed_at, load_id)`},
		{batch.DeadLettersTable, s.createSQL(batch.DeadLettersTable, batch.DeadLetterSchema.Columns,
			[]string{"pipeline", "flow", "at"}, "toYYYYMM(at)")},
		{batch.ExpectationsTable, s.createSQL(batch.ExpectationsTable, batch.ExpectationsSchema.Columns,
			[]string{"pipeline", "flow", "at"}, "toYYYYMM(at)")},
		{batch.ReplayedTable, s.createSQL(batch.ReplayedTable, batch.ReplayedSchema.Columns,
			[]string{"pipeline", "flow", "at"}, "toYYYYMM(at)")},
		{batch.VersionTable, s.createSQL(batch.VersionTable, batch.VersionSchema.Columns,
			[]string{"pipeline", "version"}, "")},
		{stateTable, chsql.StateDDL(s.opts.Database, cl)},
		{heartbeatsTable, "CREATE TABLE IF NOT EXISTS " + s.table(heartbeatsTable) + on + ` (
	pipeline String, id String, kind String, host String, pid Int64,
	beat_at DateTime('UTC'), expires DateTime('UTC'), ended UInt8, version UInt64
) ENGINE = ` + cl.Engine("ReplacingMergeTree", "version") + ` ORDER BY (pipeline, id)`},
		{cdcStateTable, s.createStateSQL(cdcStateTable, cl)},
		{resetsTable, "CREATE TABLE IF NOT EXISTS " + s.table(resetsTable) + on + ` (
	reset_id String, pipeline String, kind String, flows String, tables String,
	at ` + ts + `, at_us UInt32
) ENGINE = ` + cl.Engine("MergeTree") + ` ORDER BY (pipeline, reset_id, kind)`},
		{leasesTable, "CREATE TABLE IF NOT EXISTS " + s.table(leasesTable) + on + ` (
	target String, holder String, expires DateTime('UTC'), version UInt64
) ENGINE = ` + cl.Engine("ReplacingMergeTree", "version") + ` ORDER BY target`},
		{headsTable, "CREATE TABLE IF NOT EXISTS " + s.table(headsTable) + on + ` (
	pipeline String, flow String, slot String, position String,
	loads Int64, rows Int64, dead_letters Int64, version UInt64, load_id String
) ENGINE = ` + cl.Engine("ReplacingMergeTree", "version") + ` ORDER BY (pipeline, flow, slot)`},
	}
}

// createStateSQL renders the CREATE TABLE of a table of CDC targets' hidden
// state: _sluice_cdc_state, or on several shards the table of each shard
// (cdcshards.go).
func (s *Sink) createStateSQL(name string, cl chsql.Cluster) string {
	return "CREATE TABLE IF NOT EXISTS " + s.table(name) + cl.OnCluster() + ` (
	target String, key String, value String, deleted UInt8, version UInt64, ` + chsql.Quote(batch.LoadIDColumn) + ` String
) ENGINE = ` + s.replacing(cl, "version", "deleted") + ` PARTITION BY target ORDER BY (target, key)`
}

// createSQL renders CREATE TABLE IF NOT EXISTS for a table of sluice's
// columns plus _sluice_load_id.
func (s *Sink) createSQL(name string, cols []batch.Column, orderBy []string, partitionBy string) string {
	cl := s.opts.cluster()
	if batch.IsOwnTable(name) {
		cl = s.ownTables()
	}
	cm := s.newComments()
	var b strings.Builder
	b.WriteString("CREATE TABLE IF NOT EXISTS ")
	b.WriteString(s.table(name) + cl.OnCluster())
	b.WriteString(" (\n")
	for _, c := range cols {
		b.WriteString("\t")
		b.WriteString(columnDef(c, s.feat, batch.IsOwnTable(name), cm))
		b.WriteString(",\n")
	}
	b.WriteString("\t" + chsql.Quote(batch.LoadIDColumn) + " String" + cm.column() + "\n) ENGINE = " + cl.Engine("MergeTree"))
	if partitionBy != "" {
		b.WriteString(" PARTITION BY " + partitionBy)
	}
	b.WriteString(" ORDER BY " + keyExpr(orderBy))
	return b.String()
}

// stageSQL returns the statement creating a load's staging table (or a
// partition list table) of table. On one server it copies the table,
// engine included. On a cluster it is a plain MergeTree with the table's
// keys, on this server only: a copy would take the Replicated engine and
// register a replica of its own in ZooKeeper; ATTACH PARTITION compares
// the columns and keys, not the engine family. Its parts never merge: a
// replicated target deduplicates the attach of the same parts (a publish
// repeated after a crash), and merged parts would be attached again.
func (s *Sink) stageSQL(ctx context.Context, stage, table string) (string, error) {
	table = s.local(table)
	stmt := "CREATE TABLE " + s.table(stage) + " AS " + s.table(table)
	if s.opts.Cluster == "" {
		return stmt, nil
	}
	// The keys from system.tables: sluice's own tables (_sluice_cdc_state)
	// have columns no description of a target maps.
	var engine, partitionKey, sortingKey string
	found := false
	err := retrySystem(ctx, func() error {
		rows, err := s.conn.Query(ctx, "SELECT engine, partition_key, sorting_key FROM system.tables WHERE database = ? AND name = ?", s.opts.Database, table)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			found = true
			if err := rows.Scan(&engine, &partitionKey, &sortingKey); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	if err != nil {
		return "", fmt.Errorf("clickhouse: keys of %s: %w", table, err)
	}
	if !found {
		return "", fmt.Errorf("clickhouse: table %s: %w", table, sinks.ErrUnknownTable)
	}
	stmt += " ENGINE = MergeTree"
	if partitionKey != "" {
		stmt += " PARTITION BY (" + partitionKey + ")"
	}
	order := "tuple()"
	if sortingKey != "" {
		order = "(" + sortingKey + ")"
	}
	return stmt + " ORDER BY " + order + " SETTINGS max_bytes_to_merge_at_max_space_in_pool = 1, max_bytes_to_merge_at_min_space_in_pool = 1, parts_to_delay_insert = 1000000, parts_to_throw_insert = 1000000", nil
}

// columnDef renders a column of a new table, its comment going to cm; own
// says the table is sluice's own (chType), else a target's (columnType).
func columnDef(c batch.Column, f features, own bool, cm *comments) string {
	if own {
		comment := ""
		if c.Type.Scalar().Kind == batch.KindBytes {
			comment = bytesComment
		}
		return cm.def(c.Name, chType(c.Type, c.Nullable, f), comment)
	}
	typ, comment := columnType(c.Type, c.Nullable, f)
	return cm.def(c.Name, typ, comment)
}

// commentsColumn holds, on a cluster, the comments of a table's columns:
// ClickHouse 18.16 cannot create a replicated table with a column comment
// (Code 122 "Table structure in ZooKeeper is too different from local table
// structure": it writes the comment to ZooKeeper quoted twice), and its
// ALTER ... COMMENT COLUMN of one never finishes (Code 341 after
// replication_alter_columns_timeout, the comment lost). An ALIAS column
// stores nothing, is left out of SELECT * and of inserts, replicates with
// the table's structure and is copied by CREATE TABLE ... AS, so it travels
// with the columns it describes. Its value lists name=comment pairs,
// separated by ';' (names are identifiers, comments sluice's own words).
const commentsColumn = "_sluice_comments"

// comments collects the comments of a new table's columns: written inline
// on one server, gathered for commentsColumn on a cluster.
type comments struct {
	inline bool
	list   []string
}

func (s *Sink) newComments() *comments { return &comments{inline: s.opts.Cluster == ""} }

// def renders a column with its comment.
func (cm *comments) def(name, typ, comment string) string {
	def := chsql.Quote(name) + " " + typ
	switch {
	case comment == "":
	case cm.inline:
		def += " COMMENT '" + comment + "'"
	default:
		cm.list = append(cm.list, name+"="+comment)
	}
	return def
}

// column renders the commentsColumn definition that ends a column list,
// with its leading comma: nothing inline or without comments.
func (cm *comments) column() string {
	if len(cm.list) == 0 {
		return ""
	}
	return ",\n\t" + commentsDef(cm.list)
}

// commentsDef is commentsColumn's definition for name=comment pairs.
func commentsDef(pairs []string) string {
	return chsql.Quote(commentsColumn) + " String ALIAS '" + strings.Join(pairs, ";") + "'"
}

// parseComments reads commentsColumn's default expression, as
// system.columns shows it ('a=sluice:bytes;b=...'), back into comments by
// column.
func parseComments(expr string) map[string]string {
	expr = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(expr), "'"), "'")
	out := map[string]string{}
	for _, pair := range strings.Split(expr, ";") {
		if name, comment, ok := strings.Cut(pair, "="); ok && name != "" {
			out[name] = comment
		}
	}
	return out
}

// commentPairs renders comments by column as commentsDef's pairs, in
// column order (cols), then any others by name.
func commentPairs(byName map[string]string, cols []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, c := range cols {
		if v := byName[c]; v != "" && !seen[c] {
			out = append(out, c+"="+v)
			seen[c] = true
		}
	}
	for _, c := range sortedKeys(byName) {
		if v := byName[c]; v != "" && !seen[c] {
			out = append(out, c+"="+v)
		}
	}
	return out
}

// keyExpr renders a column list as a ClickHouse key: tuple() for none, the
// column for one, a tuple for several.
func keyExpr(cols []string) string {
	switch len(cols) {
	case 0:
		return "tuple()"
	case 1:
		return chsql.Quote(cols[0])
	}
	q := make([]string, len(cols))
	for i, c := range cols {
		q[i] = chsql.Quote(c)
	}
	return "(" + strings.Join(q, ", ") + ")"
}

// normKey normalizes a key expression as system.tables shows it, for
// comparison: no spaces, quotes or outer parentheses; tuple() is empty.
func normKey(k string) string {
	k = strings.NewReplacer(" ", "", "`", "", "\"", "").Replace(k)
	if k == "tuple()" {
		return ""
	}
	if strings.HasPrefix(k, "(") && strings.HasSuffix(k, ")") && !strings.Contains(k[1:len(k)-1], "(") {
		k = k[1 : len(k)-1]
	}
	return k
}

func validateTable(t sinks.Table) error {
	if !chsql.ValidIdent(t.Name) {
		return fmt.Errorf("clickhouse: table name %q: use letters, digits and underscores", t.Name)
	}
	if strings.HasPrefix(strings.ToLower(t.Name), sluicePrefix) {
		return fmt.Errorf("clickhouse: table name %s: names starting with %s are sluice's own", t.Name, sluicePrefix)
	}
	if len(t.Schema.Columns) == 0 {
		return fmt.Errorf("clickhouse: table %s has no columns", t.Name)
	}
	seen := map[string]batch.Column{}
	for _, c := range t.Schema.Columns {
		if !chsql.ValidIdent(c.Name) {
			return fmt.Errorf("clickhouse: table %s: column name %q: use letters, digits and underscores", t.Name, c.Name)
		}
		if strings.HasPrefix(strings.ToLower(c.Name), sluicePrefix) && !batch.IsLinkColumn(c.Name) {
			return fmt.Errorf("clickhouse: table %s: column %s: names starting with %s are sluice's own", t.Name, c.Name, sluicePrefix)
		}
		if _, dup := seen[c.Name]; dup {
			return fmt.Errorf("clickhouse: table %s: column %s is declared twice", t.Name, c.Name)
		}
		if c.Type.Kind == batch.KindArray && c.Nullable {
			return fmt.Errorf("clickhouse: table %s: column %s: ClickHouse has no nullable arrays", t.Name, c.Name)
		}
		switch c.Type.Scalar().Kind {
		case batch.KindString, batch.KindInt64, batch.KindFloat64, batch.KindBool, batch.KindTimestamp,
			batch.KindDate, batch.KindBytes:
		case batch.KindDecimal:
			if c.Type.Precision < 1 || c.Type.Precision > batch.MaxDecimalPrecision || c.Type.Scale < 0 || c.Type.Scale > c.Type.Precision {
				return fmt.Errorf("clickhouse: table %s: column %s: invalid type %v", t.Name, c.Name, c.Type)
			}
		default:
			return fmt.Errorf("clickhouse: table %s: column %s: invalid type %v", t.Name, c.Name, c.Type)
		}
		seen[c.Name] = c
	}
	for _, key := range []struct {
		what string
		cols []string
	}{{"order_by", t.OrderBy}, {"partition_by", t.PartitionBy}} {
		used := map[string]bool{}
		for _, name := range key.cols {
			c, ok := seen[name]
			switch {
			case !ok:
				return fmt.Errorf("clickhouse: table %s: %s names %s, which is not a column of the table", t.Name, key.what, name)
			case c.Nullable:
				return fmt.Errorf("clickhouse: table %s: %s names %s, which is nullable: ClickHouse keys cannot hold NULL; declare the column not nullable or leave it out of %s", t.Name, key.what, name, key.what)
			case used[name]:
				return fmt.Errorf("clickhouse: table %s: %s names %s twice", t.Name, key.what, name)
			}
			used[name] = true
		}
	}
	return nil
}

func (s *Sink) ensureTable(ctx context.Context, t sinks.Table) error {
	if t.Kind != sinks.KindAppend {
		return s.ensureCDC(ctx, t)
	}
	if err := validateTable(t); err != nil {
		return err
	}
	s.forget(t.Name)
	info, err := s.describe(ctx, t.Name)
	if err != nil {
		return err
	}
	if info == nil && s.sharded() {
		// Refused before the shard tables are made for nothing.
		if _, err := s.checkDistributed(ctx, s.appendDist(t.Name)); err != nil {
			return err
		}
	}
	if info == nil {
		partition := ""
		if len(t.PartitionBy) > 0 {
			partition = keyExpr(t.PartitionBy)
		}
		if err := s.ddl(ctx, "create table "+t.Name, s.createSQL(s.local(t.Name), t.Schema.Columns, t.OrderBy, partition)); err != nil {
			return err
		}
		s.log.Info("table created", "table", t.Name, "order_by", t.OrderBy, "partition_by", t.PartitionBy)
		// Another process may have created it first: check what is there.
		if info, err = s.describe(ctx, t.Name); err != nil {
			return err
		}
		if info == nil {
			return fmt.Errorf("clickhouse: table %s: missing right after CREATE TABLE", t.Name)
		}
	}
	add, err := reconcile(t, info, s.opts.Cluster != "")
	if err != nil {
		return err
	}
	if err := s.addColumns(ctx, t.Name, info, add, t.Schema); err != nil {
		return err
	}
	s.forget(t.Name)
	if s.sharded() {
		return s.ensureDistributed(ctx, s.appendDist(t.Name))
	}
	return nil
}

// addColumns adds nullable columns to an existing table where the
// declared schema has them: after the column before them there (as the
// local destination orders them), else after the table's last declared
// column. On a cluster a column's comment goes into commentsColumn, in the
// same ALTER.
func (s *Sink) addColumns(ctx context.Context, table string, info *tableInfo, add []batch.Column, declared batch.Schema) error {
	last := ""
	if n := len(info.columns); n > 0 {
		last = info.columns[n-1].Name
	}
	var byName map[string]string
	if s.opts.Cluster != "" {
		byName = maps.Clone(info.comments)
		if byName == nil {
			byName = map[string]string{}
		}
	}
	hasComments := info.hasComments
	for _, c := range add {
		after := last
		if i := declared.Index(c.Name); i > 0 {
			after = declared.Columns[i-1].Name
		}
		typ, comment := columnType(c.Type, true, s.feat)
		// On several shards each shard's table is a replicated table of
		// its own: ON CLUSTER reaches them all.
		stmt := "ALTER TABLE " + s.table(s.local(table)) + s.onShards() + " ADD COLUMN " + chsql.Quote(c.Name) + " " + typ
		if after != "" {
			stmt += " AFTER " + chsql.Quote(after)
		}
		if comment != "" && byName != nil {
			byName[c.Name] = comment
			verb := "MODIFY"
			if !hasComments {
				verb = "ADD"
			}
			stmt += ", " + verb + " COLUMN " + commentsDef(commentPairs(byName, info.names()))
			hasComments = true
		}
		if err := s.alter(ctx, "add column "+c.Name+" to "+table, stmt); err != nil {
			return err
		}
		if comment != "" && byName == nil {
			if err := s.exec(ctx, "comment column "+c.Name+" of "+table, "ALTER TABLE "+s.table(table)+
				" COMMENT COLUMN "+chsql.Quote(c.Name)+" '"+comment+"'"); err != nil {
				return err
			}
		}
		s.log.Info("column added", "table", table, "column", c.Name, "type", c.Type.String())
		if after == last {
			last = c.Name
		}
	}
	return nil
}

// reconcile compares the spec's table with the existing one and returns the
// nullable columns to add, or every difference it cannot apply safely.
func reconcile(t sinks.Table, info *tableInfo, cluster bool) ([]batch.Column, error) {
	var problems []string
	if info.engine != "MergeTree" && info.engine != "ReplicatedMergeTree" {
		what := "the table's engine is " + info.engine + ", not MergeTree: sluice appends into MergeTree tables it creates itself; rename or drop the existing table, or give the target another name"
		if info.engine == "View" {
			what = "the table is a view (a CDC target, or not sluice's): an append target is a MergeTree table; a target changing between append and CDC needs a new table"
		}
		problems = append(problems, what)
	}
	if !info.hasLoadID {
		problems = append(problems, fmt.Sprintf("the table has no %s String column, so sluice did not create it: rename or drop it, or give the target another name", batch.LoadIDColumn))
	}
	ours := len(problems) == 0
	if ours {
		problems = append(problems, modeProblem("the table", info.engine, cluster)...)
	}
	add, more := reconcileColumns(t, info)
	problems = append(problems, more...)
	if len(t.OrderBy) > 0 && normKey(info.sortingKey) != strings.Join(t.OrderBy, ",") {
		problems = append(problems, fmt.Sprintf("order_by is %v in the spec but the table is ordered by (%s): ClickHouse cannot change a sorting key in place; restore the spec's order_by, or create a new table", t.OrderBy, info.sortingKey))
	}
	if len(t.PartitionBy) > 0 && normKey(info.partitionKey) != strings.Join(t.PartitionBy, ",") {
		problems = append(problems, fmt.Sprintf("partition_by is %v in the spec but the table is partitioned by (%s): ClickHouse cannot repartition a table in place; restore the spec's partition_by, or create a new table", t.PartitionBy, info.partitionKey))
	}
	return add, mismatch(t.Name, problems, ours)
}

// modeProblem says what is wrong with a table of sluice's whose engine
// (what, "the table" or its physical table) is replicated without a
// cluster or not replicated on one: the rows of one server's table are on
// that server alone, a replicated table's on every replica.
func modeProblem(what, engine string, cluster bool) []string {
	switch replicated := chsql.IsReplicated(engine); {
	case cluster && !replicated:
		return []string{fmt.Sprintf("%s is %s, on this server alone, while destination.clickhouse.cluster is set: on a cluster sluice writes replicated tables it creates ON CLUSTER; drop the table (or give the target another name) so that sluice creates it replicated, or move its rows into a Replicated%s table on every replica yourself", what, engine, engine)}
	case !cluster && replicated:
		return []string{fmt.Sprintf("%s is %s, while destination.clickhouse.cluster is not set: set cluster (and zookeeper) to the cluster it is replicated on, or drop the table (or give the target another name) so that sluice creates it on this server", what, engine)}
	}
	return nil
}

// mismatch is Ensure's refusal of a table that does not match the spec:
// ErrTableChanged when sluice created the table (ours).
func mismatch(table string, problems []string, ours bool) error {
	if len(problems) == 0 {
		return nil
	}
	err := fmt.Errorf("clickhouse: table %s does not match the spec:\n  - %s", table, strings.Join(problems, "\n  - "))
	if ours {
		return fmt.Errorf("%w (%w)", err, sinks.ErrTableChanged)
	}
	return err
}

// reconcileColumns compares the declared columns with the table's: it
// returns the nullable columns to add and the differences it cannot apply.
func reconcileColumns(t sinks.Table, info *tableInfo) (add []batch.Column, problems []string) {
	declared := map[string]bool{}
	for _, c := range t.Schema.Columns {
		declared[c.Name] = true
		have, ok := info.column(c.Name)
		switch {
		case !ok && c.Nullable:
			add = append(add, c)
		case !ok && c.Type.Kind == batch.KindArray:
			problems = append(problems, fmt.Sprintf("column %s (%s) is new, and an array is never null: existing rows have no value for it; run a full refresh of the table's flows to load it from the start", c.Name, spelled(c)))
		case !ok:
			problems = append(problems, fmt.Sprintf("column %s (%s) is new and not nullable: existing rows have no value for it; declare it nullable: true, or create a new table", c.Name, spelled(c)))
		case have.Type != c.Type || have.Nullable != c.Nullable:
			problems = append(problems, fmt.Sprintf("column %s is %s in the table but %s in the spec: sluice does not change column types; restore the spec's type, or migrate the data yourself (a new table filled by INSERT INTO ... SELECT with the conversion) and point the spec at it", c.Name, have.describe(), spelled(c)))
		}
	}
	for _, c := range info.columns {
		if !declared[c.Name] {
			problems = append(problems, fmt.Sprintf("column %s (%s) is in the table but not in the spec: declare it again (nullable columns may stay NULL), or drop it yourself with ALTER TABLE %s DROP COLUMN %s%s", c.Name, c.describe(), info.alterName, c.Name, info.alterNote))
		}
	}
	return add, problems
}

// describe reads an existing table, or returns nil when there is none:
// an append target of a cluster of several shards by its shard's table
// (local).
func (s *Sink) describe(ctx context.Context, name string) (*tableInfo, error) {
	return s.describeAt(ctx, name, s.local(name))
}

// describeFront reads the table or view under a target's own name, the
// Distributed table of an append target on several shards, the view of a
// CDC target.
func (s *Sink) describeFront(ctx context.Context, name string) (*tableInfo, error) {
	return s.describeAt(ctx, name, name)
}

// describeAt describes name by the table at, which holds its columns.
func (s *Sink) describeAt(ctx context.Context, name, at string) (*tableInfo, error) {
	var info *tableInfo
	err := retrySystem(ctx, func() error {
		var err error
		info, err = s.readTable(ctx, name, at)
		return err
	})
	return info, err
}

// readTable describes a table as the server holds it, by the table at.
func (s *Sink) readTable(ctx context.Context, name, at string) (*tableInfo, error) {
	rows, err := s.conn.Query(ctx, "SELECT engine, partition_key, sorting_key FROM system.tables WHERE database = ? AND name = ?",
		s.opts.Database, at)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: describe %s: %w", name, err)
	}
	var info *tableInfo
	for rows.Next() {
		info = &tableInfo{name: name, alterName: name}
		if l := at; l != name {
			info.alterName = l + s.onShards()
			info.alterNote = " (sluice then makes the Distributed table " + name + " anew)"
		} else if s.sharded() && strings.HasPrefix(name, physPrefix) {
			info.alterName = name + s.onShards()
			info.alterNote = " (sluice then makes the Distributed table " + dphysName(strings.TrimPrefix(name, physPrefix)) + " anew)"
		}
		if err := rows.Scan(&info.engine, &info.partitionKey, &info.sortingKey); err != nil {
			rows.Close()
			return nil, fmt.Errorf("clickhouse: describe %s: %w", name, err)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("clickhouse: describe %s: %w", name, err)
	}
	if info == nil {
		return nil, nil
	}
	rows, err = s.conn.Query(ctx, "SELECT name, type, comment, default_kind, default_expression FROM system.columns WHERE database = ? AND table = ?",
		s.opts.Database, at)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: describe %s: %w", name, err)
	}
	defer rows.Close()
	type col struct{ name, typ, comment string }
	var cols []col
	for rows.Next() {
		var c col
		var kind, expr string
		if err := rows.Scan(&c.name, &c.typ, &c.comment, &kind, &expr); err != nil {
			return nil, fmt.Errorf("clickhouse: describe %s: %w", name, err)
		}
		if c.name == commentsColumn && kind == "ALIAS" {
			info.comments, info.hasComments = parseComments(expr), true
			continue
		}
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("clickhouse: describe %s: %w", name, err)
	}
	for _, c := range cols {
		comment := cmp.Or(c.comment, info.comments[c.name])
		if c.name == batch.LoadIDColumn {
			info.hasLoadID = c.typ == "String"
			continue
		}
		if strings.HasPrefix(c.name, sluicePrefix) && !batch.IsLinkColumn(c.name) {
			if info.hidden == nil {
				info.hidden = map[string]hiddenColumn{}
			}
			info.hidden[c.name] = hiddenColumn{typ: c.typ, comment: comment}
			continue
		}
		pc, err := parseColumn(c.name, c.typ, comment)
		if err != nil {
			return nil, fmt.Errorf("clickhouse: table %s: %w", name, err)
		}
		info.columns = append(info.columns, pc)
	}
	return info, nil
}

// info returns a table's description, cached until Ensure changes it.
// ErrUnknownTable when the table does not exist.
func (s *Sink) info(ctx context.Context, name string) (*tableInfo, error) {
	s.mu.Lock()
	info, gen := s.tables[name], s.forgets
	s.mu.Unlock()
	if info != nil {
		return info, nil
	}
	info, err := s.describe(ctx, name)
	if err != nil {
		return nil, err
	}
	if info == nil || !info.hasLoadID {
		return nil, fmt.Errorf("clickhouse: table %s: %w", name, sinks.ErrUnknownTable)
	}
	s.mu.Lock()
	if s.forgets == gen {
		// Else an Ensure changed a table meanwhile: this description may
		// predate it, and the next call describes the table again.
		s.tables[name] = info
	}
	s.mu.Unlock()
	return info, nil
}

// forget drops the cached description of a table, or of the CDC target
// whose physical table it is.
func (s *Sink) forget(name string) {
	s.mu.Lock()
	s.forgets++
	delete(s.tables, name)
	delete(s.cdc, name)
	delete(s.cdc, strings.TrimPrefix(name, physPrefix))
	s.mu.Unlock()
	if s.srv != nil {
		s.srv.forget(name)
	}
}

// Columns returns a table's columns as the server has them.
func (s *Sink) Columns(ctx context.Context, table string) (batch.Schema, error) {
	info, err := s.describe(ctx, table)
	if err == nil && info == nil && s.sharded() {
		// A CDC target on shards has no shard table: its view has its columns.
		info, err = s.describeFront(ctx, table)
	}
	if err != nil {
		return batch.Schema{}, err
	}
	if info == nil {
		return batch.Schema{}, fmt.Errorf("clickhouse: table %s: %w", table, sinks.ErrUnknownTable)
	}
	return info.schema(), nil
}
