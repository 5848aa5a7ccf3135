package spec

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata"
	"unicode" // timezone names resolve on machines without zoneinfo

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/parser"

	"github.com/sluicehq/sluice/backfill"
	"github.com/sluicehq/sluice/cdc"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/naming"
)

var (
	pipelineName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	identifier   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	topicName    = regexp.MustCompile(`^[A-Za-z0-9._-]{1,249}$`)
)

// reservedPrefix starts the names of sluice's own tables and columns.
const reservedPrefix = "_sluice_"

// checker collects the problems of one pipeline.
type checker struct {
	p     *Pipeline
	probs Problems
	bad   map[string]bool
}

func (c *checker) add(path, format string, args ...any) {
	if c.bad[path] {
		return
	}
	at := c.p.pos.at(path)
	c.probs = append(c.probs, Problem{File: c.p.File, Line: at.line, Column: at.col, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// written reports whether the key at path was written in the spec. For a
// pipeline built in code (no positions), a value counts as written when it
// differs from its zero value and from its default.
func (c *checker) written(path string, v any, def any) bool {
	if c.p.pos != nil {
		return c.p.pos.has(path)
	}
	rv := reflect.ValueOf(v)
	if !rv.IsValid() || rv.IsZero() {
		return false
	}
	return def == nil || !reflect.DeepEqual(v, def)
}

// Validate checks every rule of the spec that needs no I/O, resolves each
// table's schema, and on success fills in the defaults. An invalid spec
// returns Problems, every one of them, sorted by line. Parse and Load call
// it; call it again after changing a pipeline in code.
func (p *Pipeline) Validate() error {
	if probs := p.check(nil); len(probs) > 0 {
		probs.sort()
		return probs
	}
	p.applyDefaults()
	return nil
}

// check runs every rule. Problems at a path in bad (whose value did not
// decode, and was reported so) are dropped: they would only repeat it.
func (p *Pipeline) check(bad map[string]bool) Problems {
	c := &checker{p: p, bad: bad}
	c.top()
	c.kafka()
	c.destination()
	c.tables()
	c.flows()
	c.targets()
	return c.probs
}

func (p *Pipeline) applyDefaults() {
	if p.Timezone == "" {
		p.Timezone = DefaultTimezone
	}
	if p.Naming == "" {
		p.Naming = NamingSnakeCase
	}
	p.Location, _ = time.LoadLocation(p.Timezone)
	if p.Kafka != nil && p.Kafka.SASL != nil {
		p.Kafka.SASL.Mechanism = strings.ToUpper(p.Kafka.SASL.Mechanism)
		if p.Kafka.SASL.Mechanism == "" {
			p.Kafka.SASL.Mechanism = SASLPlain
		}
	}
	if ch := p.Destination.ClickHouse; ch != nil {
		if ch.Database == "" {
			ch.Database = "default"
		}
		if ch.Username == "" {
			ch.Username = "default"
		}
		if ch.Cluster != "" {
			if ch.ZooKeeperPath == "" {
				ch.ZooKeeperPath = DefaultZooKeeperPath
			}
			if ch.ReplicaName == "" {
				ch.ReplicaName = DefaultReplicaName
			}
		}
	}
	for i := range p.Flows {
		f := &p.Flows[i]
		if f.OnError == "" {
			f.OnError = OnErrorDeadLetter
		}
		if f.Start == "" {
			f.Start = StartEarliest
		}
		if f.Write == "" {
			f.Write = WriteAppend
		}
		if f.StoredAsSCDType == 0 {
			f.StoredAsSCDType = DefaultSCDType
		}
		if f.TombstoneRetention == 0 {
			f.TombstoneRetention = DefaultTombstoneRetention
		}
		if k := f.Source.Kafka; k != nil && k.Format == "" {
			k.Format = FormatJSON
		}
		if s := f.Source.Files; s != nil && s.Format == "" {
			s.Format = formatFromPath(s.Path)
		}
		if s := f.Source.Snapshots; s != nil && s.Format == "" {
			s.Format = formatFromPath(s.Path)
		}
		if in := f.Incremental; in != nil {
			if in.LastValueFunc == "" {
				in.LastValueFunc = LastValueMax
			}
		}
		if f.Kind == KindAutoCDCFromSnapshot && f.SnapshotVersionType.Kind == batch.KindInvalid && f.SnapshotVersion != "" {
			f.SnapshotVersionType = inferVersionType(f.SnapshotVersion)
		}
	}
}

func (c *checker) top() {
	p := c.p
	switch {
	case p.Pipeline == "":
		c.add("pipeline", "required: the pipeline's name, [a-z][a-z0-9_]*")
	case !pipelineName.MatchString(p.Pipeline):
		c.add("pipeline", "%q is not a pipeline name: write [a-z][a-z0-9_]* (lowercase letters, digits, _)", p.Pipeline)
	}
	switch p.Naming {
	case "", NamingSnakeCase, NamingDirect:
	default:
		c.add("naming", "unknown value %q: snake_case or direct (how names from the data become column names)", p.Naming)
	}
	if p.Timezone != "" {
		if _, err := time.LoadLocation(p.Timezone); err != nil {
			c.add("timezone", "unknown time zone %q: write an IANA name such as UTC or Europe/Berlin", p.Timezone)
		}
	}
	if m := p.Metrics; m != nil {
		if m.Listen == "" {
			c.add("metrics.listen", "required: the address to serve metrics on, e.g. :9090")
		} else if err := checkHostPort(m.Listen, true); err != nil {
			c.add("metrics.listen", "%v", err)
		}
	}
}

// checkHostPort checks host:port; the host may be empty when emptyHost.
func checkHostPort(s string, emptyHost bool) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q is not host:port", s)
	}
	if host == "" && !emptyHost {
		return fmt.Errorf("%q has no host", s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q has no valid port", s)
	}
	return nil
}

func (c *checker) kafka() {
	k := c.p.Kafka
	if k == nil {
		for i := range c.p.Flows {
			if c.p.Flows[i].Source.Kafka != nil {
				c.add(fmt.Sprintf("flows[%d].source.kafka", i), "a kafka source needs the top-level kafka section with brokers")
				return
			}
		}
		return
	}
	if len(k.Brokers) == 0 {
		c.add("kafka.brokers", "required: a list of host:port")
	}
	for i, b := range k.Brokers {
		if err := checkHostPort(b, false); err != nil {
			c.add(indexPath("kafka.brokers", i), "%v", err)
		}
	}
	if c.written("kafka.session_timeout", k.SessionTimeout, nil) && k.SessionTimeout <= 0 {
		c.add("kafka.session_timeout", "must be positive")
	}
	if c.written("kafka.group", k.Group, nil) && strings.TrimSpace(k.Group) == "" {
		c.add("kafka.group", "must not be empty")
	}
	c.tls("kafka.tls", k.TLS)
	if s := k.SASL; s != nil {
		switch strings.ToUpper(s.Mechanism) {
		case "", SASLPlain, SASLScramSHA256, SASLScramSHA512:
		default:
			c.add("kafka.sasl.mechanism", "unknown SASL mechanism %q: one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512", s.Mechanism)
		}
		if s.User == "" {
			c.add("kafka.sasl.user", "required")
		}
		if s.Password == "" {
			c.add("kafka.sasl.password", "required")
		}
	}
}

func (c *checker) tls(path string, t *TLS) {
	if t == nil {
		return
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		if t.CertFile == "" {
			c.add(path+".cert_file", "required with key_file")
		} else {
			c.add(path+".key_file", "required with cert_file")
		}
	}
}

func (c *checker) destination() {
	d := c.p.Destination
	switch {
	case d.Local == nil && d.ClickHouse == nil:
		c.add("destination", "required: set one of local or clickhouse")
	case d.Local != nil && d.ClickHouse != nil:
		c.add("destination.clickhouse", "set only one of local or clickhouse")
	}
	if l := d.Local; l != nil && l.Path == "" {
		c.add("destination.local.path", "required: the folder for tables and state")
	}
	ch := d.ClickHouse
	if ch == nil {
		return
	}
	if len(ch.Addr) == 0 {
		c.add("destination.clickhouse.addr", "required: a list of host:port")
	}
	for i, a := range ch.Addr {
		if err := checkHostPort(a, false); err != nil {
			c.add(indexPath("destination.clickhouse.addr", i), "%v", err)
		}
	}
	if c.written("destination.clickhouse.dial_timeout", ch.DialTimeout, nil) && ch.DialTimeout <= 0 {
		c.add("destination.clickhouse.dial_timeout", "must be positive")
	}
	if c.written("destination.clickhouse.read_timeout", ch.ReadTimeout, nil) && ch.ReadTimeout <= 0 {
		c.add("destination.clickhouse.read_timeout", "must be positive")
	}
	for _, k := range sortedKeys(ch.Settings) {
		if !identifier.MatchString(k) {
			c.add(joinPath("destination.clickhouse.settings", k), "%q is not a setting name", k)
		}
	}
	switch ch.Compression {
	case "", "lz4", "zstd", "none":
	default:
		c.add("destination.clickhouse.compression", "%q: use lz4, zstd or none", ch.Compression)
	}
	c.tls("destination.clickhouse.tls", ch.TLS)
	c.cluster(ch)
}

// clusterName is what a cluster of remote_servers may be called here: it
// is written into statements (ON CLUSTER `name`).
var clusterName = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// cluster checks the keys of a ClickHouse cluster destination.
func (c *checker) cluster(ch *ClickHouse) {
	const path = "destination.clickhouse"
	opt := []struct{ key, v string }{{"zookeeper_path", ch.ZooKeeperPath}, {"replica_name", ch.ReplicaName}}
	if ch.Cluster == "" {
		if c.written(path+".zookeeper", ch.ZooKeeper, nil) {
			c.add(path+".zookeeper", "applies with cluster only: set cluster to the cluster of the servers (a name in their remote_servers), or remove zookeeper")
		}
		for _, k := range opt {
			if c.written(path+"."+k.key, k.v, nil) {
				c.add(path+"."+k.key, "applies with cluster only: set cluster, or remove %s", k.key)
			}
		}
		return
	}
	if !clusterName.MatchString(ch.Cluster) {
		c.add(path+".cluster", "%q is not a cluster name: use letters, digits, '_', '-' and '.'", ch.Cluster)
	} else if len(ch.ZooKeeper) == 0 {
		c.add(path+".cluster", "requires zookeeper: the host:port list of the cluster's ZooKeeper ensemble")
	}
	for i, a := range ch.ZooKeeper {
		if err := checkHostPort(a, false); err != nil {
			c.add(indexPath(path+".zookeeper", i), "%v", err)
		}
	}
	for _, k := range opt {
		if !c.written(path+"."+k.key, k.v, nil) {
			continue
		}
		switch {
		case strings.TrimSpace(k.v) == "":
			c.add(path+"."+k.key, "must not be empty")
		case strings.ContainsAny(k.v, "'`\\") || strings.IndexFunc(k.v, unicode.IsControl) >= 0:
			c.add(path+"."+k.key, "%q: no quotes, backslashes or control characters", k.v)
		case k.key == "zookeeper_path" && !strings.Contains(k.v, "{table}"):
			c.add(path+"."+k.key, "%q names no {table}: every table needs a path of its own, such as %s", k.v, DefaultZooKeeperPath)
		}
	}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// last returns, of the paths written, the one written last in the file
// (the one that conflicts with those before it).
func (c *checker) last(paths ...string) string {
	best, line := paths[len(paths)-1], -1
	for _, p := range paths {
		if at, ok := c.p.pos[p]; ok && (at.line > line) {
			best, line = p, at.line
		}
	}
	return best
}

// name checks a table or flow name.
func (c *checker) name(path, what, name string) bool {
	switch {
	case name == "":
		c.add(path, "required: the %s's name", what)
	case !identifier.MatchString(name):
		c.add(path, "%q is not a %s name: write letters, digits and _, not starting with a digit", name, what)
	case strings.HasPrefix(name, reservedPrefix):
		c.add(path, "%q starts with %s, which is reserved for sluice's own tables", name, reservedPrefix)
	default:
		return true
	}
	return false
}

func (c *checker) tables() {
	seen := map[string]int{}
	for i := range c.p.Tables {
		t := &c.p.Tables[i]
		path := indexPath("tables", i)
		if c.name(path+".name", "table", t.Name) {
			if j, dup := seen[t.Name]; dup {
				c.add(path+".name", "table %q is already declared at line %d", t.Name, c.p.Tables[j].Line)
			} else {
				seen[t.Name] = i
			}
		}
		c.columns(path+".columns", t.Columns)
		c.nameList(path+".order_by", t.OrderBy)
		c.nameList(path+".partition_by", t.PartitionBy)
		for _, key := range []struct {
			name  string
			names []string
		}{{"order_by", t.OrderBy}, {"partition_by", t.PartitionBy}} {
			for j, n := range key.names {
				for _, col := range t.Columns {
					if col.Name == n && col.Type.Kind == batch.KindArray {
						c.add(indexPath(path+"."+key.name, j), "column %s is %v: %s takes scalar columns", n, col.Type, key.name)
					}
				}
			}
		}
		if c.written(path+".state_cache", t.StateCache, nil) && t.StateCache <= 0 {
			c.add(path+".state_cache", "must be positive")
		}
	}
}

// columns checks a list of declared columns.
func (c *checker) columns(path string, cols []Column) {
	seen := map[string]bool{}
	for j, col := range cols {
		cp := indexPath(path, j)
		switch {
		case col.Name == "":
			c.add(cp+".name", "required: the column's name")
		case strings.HasPrefix(col.Name, reservedPrefix):
			c.add(cp+".name", "%q starts with %s, which is reserved for sluice's metadata columns", col.Name, reservedPrefix)
		case seen[col.Name]:
			c.add(cp+".name", "column %q is declared twice", col.Name)
		case c.p.Destination.ClickHouse != nil && !identifier.MatchString(col.Name):
			c.add(cp+".name", "ClickHouse cannot hold the column name %q: use letters, digits and underscores, not starting with a digit, for example %s", col.Name, naming.SnakeCase(col.Name))
		}
		seen[col.Name] = true
		if col.Type.Kind == batch.KindInvalid && !c.bad[cp+".type"] {
			c.add(cp+".type", "required: one of string, int64, float64, bool, timestamp, date, decimal(P,S), bytes, array(T)")
		}
		if col.Type.Kind == batch.KindArray && col.Nullable {
			c.add(cp+".nullable", "column %s is %v, and an array is never null (ClickHouse has no nullable arrays): remove nullable; a missing or null list is then a dead letter, and an empty list an empty array", col.Name, col.Type)
		}
		if col.Path != "" && slices.Contains(strings.Split(col.Path, "."), "") {
			c.add(cp+".path", "%q has an empty segment: name the nested field by its fields' names joined with dots, customer.address.zip", col.Path)
		}
		switch {
		case col.Unit == "":
		case col.Unit != "s" && col.Unit != "ms" && col.Unit != "us" && col.Unit != "ns":
			c.add(cp+".unit", "unknown unit %q: s, ms, us or ns (what an integer timestamp counts since the epoch)", col.Unit)
		case col.Type.Scalar().Kind != batch.KindTimestamp && col.Type.Kind != batch.KindInvalid:
			c.add(cp+".unit", "a unit applies to timestamp columns; %s is %v", col.Name, col.Type)
		}
	}
}

// nameList checks that a list of column names has no empty or repeated name.
func (c *checker) nameList(path string, names []string) {
	seen := map[string]bool{}
	for j, n := range names {
		switch {
		case n == "":
			c.add(indexPath(path, j), "empty column name")
		case seen[n]:
			c.add(indexPath(path, j), "column %q is listed twice", n)
		}
		seen[n] = true
	}
}

// flowKeyKinds lists the flow keys that only some kinds take.
var flowKeyKinds = []struct {
	key   string
	kinds []string
}{
	{"write", []string{KindAppend}},
	{"schema_contract", []string{KindAppend}},
	{"max_nesting", []string{KindAppend, KindAutoCDC}},
	{"incremental", []string{KindAppend, KindAutoCDC}},
	{"keys", []string{KindAutoCDC, KindAutoCDCFromSnapshot}},
	{"sequence_by", []string{KindAutoCDC}},
	{"apply_as_deletes", []string{KindAutoCDC}},
	{"apply_as_truncates", []string{KindAutoCDC}},
	{"column_list", []string{KindAutoCDC, KindAutoCDCFromSnapshot}},
	{"except_column_list", []string{KindAutoCDC, KindAutoCDCFromSnapshot}},
	{"stored_as_scd_type", []string{KindAutoCDC, KindAutoCDCFromSnapshot}},
	{"track_history_column_list", []string{KindAutoCDC, KindAutoCDCFromSnapshot}},
	{"track_history_except_column_list", []string{KindAutoCDC, KindAutoCDCFromSnapshot}},
	{"ignore_null_updates", []string{KindAutoCDC}},
	{"ignore_null_updates_column_list", []string{KindAutoCDC}},
	{"ignore_null_updates_except_column_list", []string{KindAutoCDC}},
	{"tombstone_retention", []string{KindAutoCDC, KindAutoCDCFromSnapshot}},
	{"replay_valid_to", []string{KindAutoCDC}},
	{"snapshot_version", []string{KindAutoCDCFromSnapshot}},
	{"computed_columns", []string{KindAppend, KindAutoCDC}},
	{"where", []string{KindAppend, KindAutoCDC}},
	{"expectations", []string{KindAppend, KindAutoCDC}},
	{"snapshot_version_type", []string{KindAutoCDCFromSnapshot}},
}

// flowDefaults are the defaults a flow built in code may already carry.
var flowDefaults = map[string]any{
	"write":               WriteAppend,
	"stored_as_scd_type":  DefaultSCDType,
	"tombstone_retention": DefaultTombstoneRetention,
	"start":               StartEarliest,
	"on_error":            OnErrorDeadLetter,
}

// flowKey returns the value of the flow field with the given YAML key.
func flowKey(f *Flow, key string) any {
	fi := infoOf(reflect.TypeFor[Flow]()).fields[key]
	return reflect.ValueOf(f).Elem().Field(fi.index).Interface()
}

// fwritten reports whether a flow key was written.
func (c *checker) fwritten(i int, f *Flow, key string) bool {
	return c.written(fmt.Sprintf("flows[%d].%s", i, key), flowKey(f, key), flowDefaults[key])
}

func kindList(kinds []string) string {
	if len(kinds) == 1 {
		return kinds[0]
	}
	return strings.Join(kinds[:len(kinds)-1], ", ") + " and " + kinds[len(kinds)-1]
}

func (c *checker) flows() {
	seen := map[string]int{}
	for i := range c.p.Flows {
		f := &c.p.Flows[i]
		path := indexPath("flows", i)
		if c.name(path+".name", "flow", f.Name) {
			if j, dup := seen[f.Name]; dup {
				c.add(path+".name", "flow %q is already declared at line %d", f.Name, c.p.Flows[j].Line)
			} else {
				seen[f.Name] = i
			}
		}
		var target *Table
		if f.Target == "" {
			c.add(path+".target", "required: the table the flow writes")
		} else if target = c.p.Table(f.Target); target == nil && !c.bad["tables"] {
			c.add(path+".target", "unknown table %q (declare it under tables)", f.Target)
		}
		kindOK := true
		switch f.Kind {
		case KindAppend, KindAutoCDC, KindAutoCDCFromSnapshot:
		case "":
			c.add(path+".kind", "required: one of append, auto_cdc, auto_cdc_from_snapshot")
			kindOK = false
		default:
			c.add(path+".kind", "unknown flow kind %q: one of append, auto_cdc, auto_cdc_from_snapshot", f.Kind)
			kindOK = false
		}
		f.fallback = batch.Schema{}
		if target != nil && len(f.Source.Columns()) == 0 && needsColumns(&f.Source) {
			// The target's columns, but those the flow computes.
			f.fallback = targetSourceColumns(target)
			f.fallback.Columns = slices.DeleteFunc(f.fallback.Columns, func(col batch.Column) bool {
				return f.computes(col.Name)
			})
		}
		c.source(i, f, kindOK, target)
		c.common(i, f)
		c.rules(i, f)
		if !kindOK {
			continue
		}
		for _, kk := range flowKeyKinds {
			if !slices.Contains(kk.kinds, f.Kind) && c.fwritten(i, f, kk.key) {
				c.add(path+"."+kk.key, "%s applies to %s flows only, not to %s", kk.key, kindList(kk.kinds), f.Kind)
			}
		}
		if f.Kind == KindAppend {
			c.appendFlow(i, f)
		} else {
			c.cdcFlow(i, f)
		}
	}
}

// decodesJSON reports whether a source's records are JSON objects decoded
// into its columns: Kafka format json, JSONL files and snapshots.
func decodesJSON(s *Source) bool {
	switch {
	case s.Kafka != nil:
		return s.Kafka.ReadsJSON()
	case s.Files != nil:
		return effectiveFormat(s.Files.Format, s.Files.Path) == FormatJSONL
	case s.Snapshots != nil:
		return effectiveFormat(s.Snapshots.Format, s.Snapshots.Path) == FormatJSONL
	}
	return false
}

// needsColumns reports whether a source's records need declared columns to
// decode: every source but Parquet files.
func needsColumns(s *Source) bool {
	switch {
	case s.Kafka != nil:
		return true
	case s.Files != nil:
		return effectiveFormat(s.Files.Format, s.Files.Path) == FormatJSONL
	case s.Snapshots != nil:
		return effectiveFormat(s.Snapshots.Format, s.Snapshots.Path) == FormatJSONL
	}
	return false
}

// targetSourceColumns is what a source without declared columns decodes: the
// target's declared columns without the SCD type 2 interval columns.
func targetSourceColumns(t *Table) batch.Schema {
	var s batch.Schema
	for _, col := range t.Columns {
		if col.Name == StartAtColumn || col.Name == EndAtColumn {
			continue
		}
		s.Columns = append(s.Columns, col.Batch())
	}
	return s
}

func formatFromPath(p string) string {
	switch strings.ToLower(filepath.Ext(p)) {
	case ".parquet":
		return FormatParquet
	case ".jsonl", ".ndjson":
		return FormatJSONL
	}
	return ""
}

func effectiveFormat(format, path string) string {
	if format != "" {
		return format
	}
	return formatFromPath(path)
}

func (c *checker) source(i int, f *Flow, kindOK bool, target *Table) {
	path := indexPath("flows", i) + ".source"
	s := &f.Source
	n := 0
	for _, set := range []bool{s.Kafka != nil, s.Files != nil, s.Snapshots != nil} {
		if set {
			n++
		}
	}
	switch {
	case n == 0:
		c.add(path, "required: set one of kafka, files, snapshots")
		return
	case n > 1:
		c.add(path, "set only one of kafka, files, snapshots")
		return
	}
	sp := path + "." + s.Name()
	if kindOK {
		switch {
		case s.Snapshots != nil && f.Kind != KindAutoCDCFromSnapshot:
			c.add(sp, "a snapshots source is for auto_cdc_from_snapshot flows, not %s", f.Kind)
		case s.Kafka != nil && f.Kind == KindAutoCDCFromSnapshot:
			c.add(sp, "an auto_cdc_from_snapshot flow reads files or snapshots, not kafka")
		}
	}
	switch {
	case s.Kafka != nil:
		k := s.Kafka
		switch {
		case k.Topic == "":
			c.add(sp+".topic", "required: the topic to read")
		case !topicName.MatchString(k.Topic):
			c.add(sp+".topic", "%q is not a topic name: letters, digits, '.', '_', '-', at most 249", k.Topic)
		}
		switch k.Format {
		case "", FormatJSON:
			if k.SchemaRegistry != nil {
				c.add(sp+".schema_registry", "format json reads no schemas: set format avro or protobuf (or debezium), or remove schema_registry")
			}
		case FormatDebezium:
			if kindOK && f.Kind != KindAutoCDC {
				c.add(sp+".format", "format debezium is for auto_cdc flows, not %s", f.Kind)
			}
		case FormatAvro, FormatProtobuf:
			if k.SchemaRegistry == nil {
				c.add(sp+".schema_registry", "required for format %s: the registry holding the messages' writer schemas (url, and username, password, tls when needed)", k.Format)
			}
		default:
			c.add(sp+".format", "unknown kafka format %q: json, debezium, avro or protobuf", k.Format)
		}
		c.schemaRegistry(sp+".schema_registry", k.SchemaRegistry)
		if k.UnavailableValuePlaceholder != "" && k.Format != FormatDebezium {
			c.add(sp+".unavailable_value_placeholder", "applies to format debezium: the text Debezium puts in a value it did not capture")
		}
		c.tombstones(path, sp, f, k)
		c.columns(sp+".columns", k.Columns)
	case s.Files != nil:
		c.filesLike(sp, s.Files.Path, s.Files.Format, s.Files.Columns, false)
		if c.written(sp+".parallel", s.Files.Parallel, nil) && s.Files.Parallel <= 0 {
			c.add(sp+".parallel", "must be positive")
		}
	case s.Snapshots != nil:
		c.filesLike(sp, s.Snapshots.Path, s.Snapshots.Format, s.Snapshots.Columns, true)
	}
	// Metadata fields declared as columns, on the source or on the target
	// whose columns it decodes, keep their natural types.
	cols, colsPath := s.Columns(), sp+".columns"
	if len(cols) == 0 && len(f.fallback.Columns) > 0 {
		cols, colsPath = target.Columns, indexPath("tables", slices.IndexFunc(c.p.Tables, func(t Table) bool { return t.Name == target.Name }))+".columns"
	}
	for j, col := range cols {
		if col.Type.Kind == batch.KindInvalid {
			continue
		}
		natural, ok := batch.KafkaFields[col.Name]
		if s.Kafka == nil {
			natural, ok = batch.String, col.Name == FieldFilePath
		}
		switch {
		case !ok || col.Type == natural:
		case col.Name == batch.FieldKafkaKey && col.Type == batch.String:
		case col.Name == batch.FieldKafkaKey:
			c.add(indexPath(colsPath, j)+".type", "metadata field %s is bytes or string, not %s", col.Name, col.Type)
		default:
			c.add(indexPath(colsPath, j)+".type", "metadata field %s is %s, not %s", col.Name, natural, col.Type)
		}
	}
	if s.Kafka != nil && s.Kafka.Format == FormatDebezium {
		for j, col := range cols {
			switch col.Type.Scalar().Kind {
			case batch.KindTimestamp, batch.KindDate, batch.KindDecimal:
				if col.Type.Kind == batch.KindArray {
					c.add(indexPath(colsPath, j)+".type", "a Debezium envelope's %v elements are encoded by the logical type of its schema, which sluice reads for single values only: declare the column array(string) or array(int64), as the envelope holds them", col.Type)
				}
			}
		}
	}
	if !decodesJSON(s) {
		for j, col := range cols {
			if col.Path != "" {
				c.add(indexPath(colsPath, j)+".path", "a path names a nested field of JSON: it applies to kafka sources of format json and to JSONL files")
			}
		}
	}
	if len(s.Columns()) == 0 && needsColumns(s) && !f.InfersJSON() && target != nil && len(target.Columns) == 0 {
		c.add(sp+".columns", "required: declare the columns to decode here or on table %s", target.Name)
	}
}

func (c *checker) filesLike(sp, path, format string, cols []Column, snapshots bool) {
	if path == "" {
		c.add(sp+".path", "required: a file path or glob")
	} else {
		pattern := strings.ReplaceAll(path, "**", "*")
		if _, err := filepath.Match(pattern, ""); err != nil {
			c.add(sp+".path", "%q is not a valid glob: %v", path, err)
		}
		if snapshots {
			n := 0
			for _, seg := range strings.Split(filepath.ToSlash(path), "/") {
				if seg == VersionPlaceholder {
					n++
				} else if strings.Contains(seg, VersionPlaceholder) {
					n = -1
					break
				}
			}
			if n != 1 {
				c.add(sp+".path", "%q: exactly one whole path segment must be {version}, e.g. snapshots/{version}/*.parquet", path)
			}
		}
	}
	switch format {
	case FormatParquet, FormatJSONL:
	case "":
		if path != "" && formatFromPath(path) == "" {
			c.add(sp+".format", "required: parquet or jsonl (the path does not end in .parquet or .jsonl)")
		}
	default:
		c.add(sp+".format", "unknown file format %q: parquet or jsonl", format)
	}
	c.columns(sp+".columns", cols)
}

// common checks the keys every flow kind takes.
func (c *checker) common(i int, f *Flow) {
	path := indexPath("flows", i)
	switch f.OnError {
	case "", OnErrorDeadLetter, OnErrorFail:
	default:
		c.add(path+".on_error", "unknown value %q: dead_letter or fail", f.OnError)
	}
	switch f.Start {
	case "", StartEarliest, StartLatest:
		if f.Source.Kafka == nil && f.Source.Name() != "" && c.fwritten(i, f, "start") {
			c.add(path+".start", "start applies to kafka sources only")
		}
	default:
		c.add(path+".start", "unknown value %q: earliest or latest", f.Start)
	}
	b := f.Batch
	if c.written(path+".batch.rows", b.Rows, nil) && b.Rows <= 0 {
		c.add(path+".batch.rows", "must be positive")
	}
	if c.written(path+".batch.bytes", b.Bytes, nil) && b.Bytes <= 0 {
		c.add(path+".batch.bytes", "must be positive")
	}
	if c.written(path+".batch.wait", b.Wait, nil) && b.Wait <= 0 {
		c.add(path+".batch.wait", "must be positive")
	}
	if c.written(path+".tombstone_retention", f.TombstoneRetention, nil) && f.TombstoneRetention <= 0 {
		c.add(path+".tombstone_retention", "must be positive")
	}
}

// schemaOf returns the flow's source schema and whether it is known.
func schemaOf(f *Flow) (batch.Schema, bool) {
	if len(f.SourceSchema().Columns) == 0 {
		return batch.Schema{}, false
	}
	return f.RecordSchema(), true
}

// recordEnv is the environment a flow's rules (computed columns, where,
// expectations) compile against: the record's columns so far, by name.
func recordEnv(s batch.Schema) map[string]any {
	env := make(map[string]any, len(s.Columns))
	for _, col := range s.Columns {
		if col.Type.Kind != batch.KindInvalid {
			env[col.Name] = reflect.Zero(ExprType(col.Type)).Interface()
		}
	}
	return env
}

// rules checks a flow's computed columns, where and expectations: each
// expression compiles against the record's columns before it (only its
// syntax when the source's columns are not known before its data).
func (c *checker) rules(i int, f *Flow) {
	path := indexPath("flows", i)
	src := f.SourceSchema()
	known := len(src.Columns) > 0
	env := map[string]any(nil)
	if known {
		env = recordEnv(src)
	}
	seen := map[string]bool{}
	for j, cc := range f.ComputedColumns {
		cp := indexPath(path+".computed_columns", j)
		switch {
		case cc.Name == "":
			c.add(cp+".name", "required: the column's name")
		case !identifier.MatchString(cc.Name) || strings.HasPrefix(cc.Name, reservedPrefix):
			c.add(cp+".name", "%q is not a column name: letters, digits and underscores, not starting with a digit or %s", cc.Name, reservedPrefix)
		case src.Index(cc.Name) >= 0 || seen[cc.Name]:
			c.add(cp+".name", "column %q exists already: a computed column adds a new one", cc.Name)
		}
		seen[cc.Name] = true
		if cc.Type.Kind == batch.KindInvalid && !c.bad[cp+".type"] {
			c.add(cp+".type", "required: one of string, int64, float64, bool, timestamp, date, decimal(P,S), bytes, array(T)")
		}
		if cc.Expr == "" {
			c.add(cp+".expr", "required: the expression giving the column's value")
		} else if err := compileAny(cc.Expr, env); err != nil {
			c.add(cp+".expr", "%v", err)
		} else if dec := decimalRefs(cc.Expr, src, f.ComputedColumns[:j]); len(dec) > 0 {
			c.add(cp+".expr", "reads the decimal column %s, which an expression sees as a float64: its result would not be exact; compute it from other columns, or store the decimal column as it is", strings.Join(dec, ", "))
		}
		if env != nil && cc.Type.Kind != batch.KindInvalid {
			env[cc.Name] = reflect.Zero(ExprType(cc.Type)).Interface()
		}
	}
	if f.ReplayValidTo != "" && (len(f.ComputedColumns) > 0 || f.Where != "" || len(f.Expectations) > 0) {
		c.add(path+".replay_valid_to", "computed_columns, where and expectations do not apply to a replay with replay_valid_to: filter the files instead")
	}
	if f.Where != "" {
		if err := compileBool(f.Where, env); err != nil {
			c.add(path+".where", "%v", err)
		}
	}
	names := map[string]bool{}
	for j, e := range f.Expectations {
		ep := indexPath(path+".expectations", j)
		switch {
		case e.Name == "":
			c.add(ep+".name", "required: the expectation's name")
		case names[e.Name]:
			c.add(ep+".name", "expectation %q is declared twice", e.Name)
		}
		names[e.Name] = true
		if e.Expr == "" {
			c.add(ep+".expr", "required: a boolean expression over the record")
		} else if err := compileBool(e.Expr, env); err != nil {
			c.add(ep+".expr", "%v", err)
		}
		switch e.OnViolation {
		case "", ViolationWarn, ViolationDrop, ViolationFail:
		default:
			c.add(ep+".on_violation", "unknown value %q: warn, drop or fail", e.OnViolation)
		}
	}
}

func (c *checker) appendFlow(i int, f *Flow) {
	path := indexPath("flows", i)
	switch f.Write {
	case "", WriteAppend:
	case WriteReplacePartitions:
		switch {
		case f.Source.Files == nil:
			c.add(path+".write", "replace_partitions applies to files sources only")
		case f.Incremental == nil:
			c.add(path+".write", "replace_partitions rebuilds the partitions an incremental window touches: add incremental")
		case f.Once:
			c.add(path+".write", "replace_partitions re-reads partitions on every run; a once-flow reads its files once")
		}
		if t := c.p.Table(f.Target); t != nil && len(t.PartitionBy) == 0 {
			c.add(path+".write", "replace_partitions swaps whole partitions: target %s needs partition_by (the source's Hive partition columns)", f.Target)
		}
	default:
		c.add(path+".write", "unknown value %q: append or replace_partitions", f.Write)
	}
	c.incremental(i, f)
	c.schemaContract(i, f)
	if f.MaxNesting != nil {
		path := indexPath("flows", i) + ".max_nesting"
		switch {
		case *f.MaxNesting < 0:
			c.add(path, "must be 0 or more: how many levels of nested objects become columns")
		case !f.TypedByMessages(c.p):
			c.add(path, "max_nesting applies to a table typed by its JSON messages: leave out the columns of table %s and of the flow's source", f.Target)
		}
	}
}

// schemaContract checks an append flow's schema_contract.
func (c *checker) schemaContract(i int, f *Flow) {
	sc := f.SchemaContract
	if sc == nil {
		return
	}
	path := indexPath("flows", i) + ".schema_contract"
	inferred := f.TypedByMessages(c.p)
	kafkaJSON := f.Source.Kafka != nil && f.Source.Kafka.ReadsJSON()
	if !kafkaJSON && !inferred {
		c.add(path, "a schema contract governs the fields of records: it applies to kafka sources of format json, avro or protobuf, and to JSONL files read into a table typed by its lines")
		return
	}
	for _, k := range []struct{ key, val string }{{"columns", sc.Columns}, {"data_type", sc.DataType}} {
		switch k.val {
		case "", ContractFreeze, ContractDiscardRow, ContractDiscardValue:
		case ContractEvolve:
			if !inferred {
				c.add(path+"."+k.key, "evolve applies to a table typed by its messages: leave out the columns of table %s and of the flow's source, or choose freeze, discard_row or discard_value", f.Target)
			}
		default:
			c.add(path+"."+k.key, "unknown value %q: evolve, freeze, discard_row or discard_value", k.val)
		}
	}
}

func (c *checker) incremental(i int, f *Flow) {
	in := f.Incremental
	if in == nil {
		return
	}
	path := indexPath("flows", i) + ".incremental"
	if f.Source.Files == nil && f.Source.Name() != "" {
		c.add(path, "incremental applies to files sources only")
	}
	if f.Once {
		c.add(path, "incremental reads a window on every run; a once-flow reads its files once")
	}
	schema, known := schemaOf(f)
	t := in.Type
	switch {
	case in.Cursor == "":
		c.add(path+".cursor", "required: the column that orders the rows")
	case known:
		if j := schema.Index(in.Cursor); j < 0 {
			c.add(path+".cursor", "unknown column %q (source columns: %s)", in.Cursor, strings.Join(schema.Names(), ", "))
		} else if ct := schema.Columns[j].Type; t.Kind == batch.KindInvalid {
			t = ct
		} else if ct.Kind != batch.KindInvalid && ct != t && !convertibleCursor(ct, t) {
			c.add(path+".type", "cursor column %s is %s, not %s", in.Cursor, ct, t)
		}
	}
	switch t.Kind {
	case batch.KindBool, batch.KindBytes, batch.KindArray:
		c.add(path+".type", "a cursor is int64, float64, decimal, timestamp, date or string, not %s", t)
		t = batch.Type{}
	}
	for _, v := range []struct{ key, val string }{{"initial_value", in.InitialValue}, {"end_value", in.EndValue}} {
		if v.val != "" && t.Kind != batch.KindInvalid {
			if err := parseValue(t, v.val); err != nil {
				c.add(path+"."+v.key, "%v", err)
			}
		}
	}
	switch in.LastValueFunc {
	case "", LastValueMax, LastValueMin:
		// lag works both ways: max re-reads below last_value, min above it.
	default:
		c.add(path+".last_value_func", "unknown value %q: max or min", in.LastValueFunc)
	}
	if in.Lag == "" {
		return
	}
	if f.Kind == KindAppend && f.Write != WriteReplacePartitions {
		c.add(path+".lag", "lag on an append flow re-reads rows already loaded: it needs write: replace_partitions")
	}
	if err := checkLag(t, in.Lag); err != nil {
		c.add(path+".lag", "%v", err)
	}
}

// convertibleCursor reports whether a column of type from holds cursors of
// type to: text is parsed as the declared type (the declared type wins over
// the data), a date and a timestamp convert into each other, an int64 into a
// float64.
func convertibleCursor(from, to batch.Type) bool {
	switch {
	case from.Kind == batch.KindString:
		return true
	case from.Kind == batch.KindDate && to.Kind == batch.KindTimestamp, from.Kind == batch.KindTimestamp && to.Kind == batch.KindDate:
		return true
	case from.Kind == batch.KindInt64 && to.Kind == batch.KindFloat64:
		return true
	}
	return false
}

// checkLag checks a lag against the cursor type (backfill.ParseLag): seconds or a duration for timestamps,
// days (7d or 7) for dates, a number for numbers.
func checkLag(t batch.Type, lag string) error {
	switch t.Kind {
	case batch.KindInvalid:
		if x, err := strconv.ParseFloat(lag, 64); err == nil && x >= 0 {
			return nil
		}
		if d, err := parseDuration(lag); err != nil || d < 0 {
			return fmt.Errorf("lag %q: want a duration (1h, 2d) or a non-negative number", lag)
		}
		return nil
	case batch.KindString:
		return fmt.Errorf("lag needs a numeric, date or timestamp cursor, not string")
	}
	_, err := backfill.ParseLag(lag, t)
	return err
}

// parseValue checks that text is a value of type t.
func parseValue(t batch.Type, text string) error {
	var err error
	switch t.Kind {
	case batch.KindInt64:
		_, err = strconv.ParseInt(text, 10, 64)
	case batch.KindFloat64:
		_, err = strconv.ParseFloat(text, 64)
	case batch.KindBool:
		_, err = strconv.ParseBool(text)
	case batch.KindTimestamp:
		_, err = time.Parse(time.RFC3339Nano, text)
	case batch.KindDate:
		_, err = time.Parse(time.DateOnly, text)
	case batch.KindDecimal:
		_, err = batch.ParseDecimal(text, t.Precision, t.Scale)
	}
	if err != nil {
		return fmt.Errorf("%q is not a %s value", text, t)
	}
	return nil
}

// inferVersionType types a snapshot version written in the spec: int64 when
// an integer, date when YYYY-MM-DD, timestamp when RFC 3339, else string.
func inferVersionType(v string) batch.Type {
	for _, t := range []batch.Type{batch.Int64, batch.Date, batch.Timestamp} {
		if parseValue(t, v) == nil {
			return t
		}
	}
	return batch.String
}

// sequenceKinds are the types sequence_by columns and snapshot versions may have.
var sequenceKinds = []batch.Kind{batch.KindInt64, batch.KindTimestamp, batch.KindDate, batch.KindString, batch.KindDecimal}

// selected returns the source columns a CDC flow keeps, in source order.
func selected(f *Flow, s batch.Schema) batch.Schema {
	var out batch.Schema
	for _, col := range s.Columns {
		switch {
		case len(f.ColumnList) > 0 && !slices.Contains(f.ColumnList, col.Name):
		case slices.Contains(f.ExceptColumnList, col.Name):
		default:
			out.Columns = append(out.Columns, col)
		}
	}
	return out
}

func (c *checker) unknownColumns(path string, names []string, s batch.Schema, what string) {
	for j, n := range names {
		if n != "" && s.Index(n) < 0 {
			c.add(indexPath(path, j), "unknown column %q (%s: %s)", n, what, strings.Join(s.Names(), ", "))
		}
	}
}

func (c *checker) cdcFlow(i int, f *Flow) {
	path := indexPath("flows", i)
	schema, known := schemaOf(f)
	snapshot := f.Kind == KindAutoCDCFromSnapshot

	if len(f.Keys) == 0 {
		c.add(path+".keys", "required: the key columns")
	}
	c.nameList(path+".keys", f.Keys)
	if known {
		c.unknownColumns(path+".keys", f.Keys, schema, "source columns")
		for j, n := range f.Keys {
			if k := schema.Index(n); k >= 0 && schema.Columns[k].Type.Kind == batch.KindArray {
				c.add(indexPath(path+".keys", j), "key column %s is %v: a key is made of scalar columns", n, schema.Columns[k].Type)
			}
		}
	}

	if !snapshot {
		if len(f.SequenceBy) == 0 {
			c.add(path+".sequence_by", "required: a column, or a list of columns, that orders the changes")
		}
		c.nameList(path+".sequence_by", f.SequenceBy)
		if known {
			seqPath := path + ".sequence_by"
			for j, n := range f.SequenceBy {
				p := seqPath
				if len(f.SequenceBy) > 1 || c.p.pos.has(indexPath(seqPath, 0)) {
					p = indexPath(seqPath, j)
				}
				k := schema.Index(n)
				if n == "" {
					continue
				}
				if k < 0 {
					c.add(p, "unknown column %q (source columns: %s)", n, strings.Join(schema.Names(), ", "))
					continue
				}
				if t := schema.Columns[k].Type; t.Kind != batch.KindInvalid && !slices.Contains(sequenceKinds, t.Kind) {
					c.add(p, "sequence column %s is %s: a sequence is int64, timestamp, date, string or decimal", n, t)
				}
			}
		}
	}

	if c.fwritten(i, f, "column_list") && c.fwritten(i, f, "except_column_list") {
		c.add(c.last(path+".column_list", path+".except_column_list"), "column_list and except_column_list exclude each other")
	}
	if known {
		c.unknownColumns(path+".column_list", f.ColumnList, schema, "source columns")
		c.unknownColumns(path+".except_column_list", f.ExceptColumnList, schema, "source columns")
	}
	c.nameList(path+".column_list", f.ColumnList)
	c.nameList(path+".except_column_list", f.ExceptColumnList)
	for _, k := range f.Keys {
		if len(f.ColumnList) > 0 && !slices.Contains(f.ColumnList, k) {
			c.add(path+".column_list", "key column %q must remain: add it to column_list", k)
		}
		if j := slices.Index(f.ExceptColumnList, k); j >= 0 {
			c.add(indexPath(path+".except_column_list", j), "key column %q must remain: remove it from except_column_list", k)
		}
	}
	sel := selected(f, schema)

	scd := f.StoredAsSCDType
	switch {
	case scd == 1 || scd == 2:
	case scd == 0 && !c.p.pos.has(path+".stored_as_scd_type"):
		scd = DefaultSCDType
	default:
		c.add(path+".stored_as_scd_type", "want 1 or 2, got %d", f.StoredAsSCDType)
	}
	if scd == 2 && f.ApplyAsTruncates != "" {
		c.add(path+".apply_as_truncates", "truncates apply to SCD type 1 only: remove apply_as_truncates or use stored_as_scd_type: 1")
	}
	thc, the := c.fwritten(i, f, "track_history_column_list"), c.fwritten(i, f, "track_history_except_column_list")
	if scd != 2 {
		if thc {
			c.add(path+".track_history_column_list", "track_history_column_list applies to stored_as_scd_type: 2 only")
		}
		if the {
			c.add(path+".track_history_except_column_list", "track_history_except_column_list applies to stored_as_scd_type: 2 only")
		}
	} else if thc && the {
		c.add(c.last(path+".track_history_column_list", path+".track_history_except_column_list"), "track_history_column_list and track_history_except_column_list exclude each other")
	}
	c.nameList(path+".track_history_column_list", f.TrackHistoryColumnList)
	c.nameList(path+".track_history_except_column_list", f.TrackHistoryExceptColumnList)
	if known {
		c.unknownColumns(path+".track_history_column_list", f.TrackHistoryColumnList, sel, "selected columns")
		c.unknownColumns(path+".track_history_except_column_list", f.TrackHistoryExceptColumnList, sel, "selected columns")
	}

	var forms []string
	if f.IgnoreNullUpdates {
		forms = append(forms, path+".ignore_null_updates")
	}
	for _, key := range []string{"ignore_null_updates_column_list", "ignore_null_updates_except_column_list"} {
		if c.fwritten(i, f, key) {
			forms = append(forms, path+"."+key)
		}
	}
	if len(forms) > 1 {
		c.add(c.last(forms...), "ignore_null_updates, ignore_null_updates_column_list and ignore_null_updates_except_column_list exclude each other")
	}
	c.nameList(path+".ignore_null_updates_column_list", f.IgnoreNullUpdatesColumnList)
	c.nameList(path+".ignore_null_updates_except_column_list", f.IgnoreNullUpdatesExceptColumnList)
	if known {
		c.unknownColumns(path+".ignore_null_updates_column_list", f.IgnoreNullUpdatesColumnList, sel, "selected columns")
		c.unknownColumns(path+".ignore_null_updates_except_column_list", f.IgnoreNullUpdatesExceptColumnList, sel, "selected columns")
	}
	for j, n := range f.IgnoreNullUpdatesColumnList {
		if slices.Contains(f.Keys, n) {
			c.add(indexPath(path+".ignore_null_updates_column_list", j), "key column %q never ignores nulls", n)
		}
	}

	env := exprEnv(f, schema, known)
	if f.ApplyAsDeletes != "" {
		if err := compileBool(f.ApplyAsDeletes, env); err != nil {
			c.add(path+".apply_as_deletes", "%v", err)
		}
	}
	if f.ApplyAsTruncates != "" {
		if err := compileBool(f.ApplyAsTruncates, env); err != nil {
			c.add(path+".apply_as_truncates", "%v", err)
		}
	}

	if f.ReplayValidTo != "" && f.Kind == KindAutoCDC {
		switch {
		case f.Source.Files == nil:
			c.add(path+".replay_valid_to", "replays a legacy table from files: needs a files source")
		case len(f.SequenceBy) != 1:
			c.add(path+".replay_valid_to", "needs a single sequence_by column (the legacy valid_from)")
		case f.ApplyAsDeletes != "" || f.ApplyAsTruncates != "":
			c.add(path+".replay_valid_to", "every legacy row is a version: apply_as_deletes and apply_as_truncates do not apply")
		}
	}
	if f.ReplayValidTo != "" && known {
		if k := schema.Index(f.ReplayValidTo); k < 0 {
			c.add(path+".replay_valid_to", "unknown column %q (source columns: %s)", f.ReplayValidTo, strings.Join(schema.Names(), ", "))
		} else if seq, ok := sequenceType(f, schema); ok && len(seq) == 1 && schema.Columns[k].Type != seq[0] {
			c.add(path+".replay_valid_to", "column %s is %s but the sequence is %s", f.ReplayValidTo, schema.Columns[k].Type, seq[0])
		}
	}

	if snapshot {
		c.snapshotFlow(i, f)
	} else {
		c.incremental(i, f)
	}
}

func (c *checker) snapshotFlow(i int, f *Flow) {
	path := indexPath("flows", i)
	t := f.SnapshotVersionType
	if t.Kind != batch.KindInvalid && !slices.Contains(sequenceKinds, t.Kind) {
		c.add(path+".snapshot_version_type", "a snapshot version is int64, timestamp, date, string or decimal, not %s", t)
		t = batch.Type{}
	}
	switch {
	case f.Source.Files != nil && f.SnapshotVersion == "":
		c.add(path+".snapshot_version", "required with a files source: the version of the snapshot")
	case f.Source.Snapshots != nil && f.SnapshotVersion != "":
		c.add(path+".snapshot_version", "a snapshots source reads the version from the path ({version}), not from snapshot_version")
	case f.SnapshotVersion != "" && t.Kind != batch.KindInvalid:
		if err := parseValue(t, f.SnapshotVersion); err != nil {
			c.add(path+".snapshot_version", "%v", err)
		}
	}
}

// versionType returns the type of a snapshot flow's versions when the spec
// tells it.
func versionType(f *Flow) (batch.Type, bool) {
	if f.SnapshotVersionType.Kind != batch.KindInvalid {
		return f.SnapshotVersionType, true
	}
	if f.SnapshotVersion != "" {
		return inferVersionType(f.SnapshotVersion), true
	}
	return batch.Type{}, false
}

// sequenceType returns the types of an auto_cdc flow's sequence columns when
// they are all known.
func sequenceType(f *Flow, s batch.Schema) ([]batch.Type, bool) {
	if len(f.SequenceBy) == 0 {
		return nil, false
	}
	out := make([]batch.Type, len(f.SequenceBy))
	for j, n := range f.SequenceBy {
		k := s.Index(n)
		if k < 0 || s.Columns[k].Type.Kind == batch.KindInvalid {
			return nil, false
		}
		out[j] = s.Columns[k].Type
	}
	return out, true
}

func typesString(ts []batch.Type) string {
	if len(ts) == 1 {
		return ts[0].String()
	}
	parts := make([]string, len(ts))
	for i, t := range ts {
		parts[i] = t.String()
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// ExprEnv returns the environment a flow's expressions (apply_as_deletes,
// apply_as_truncates) are compiled against: one entry per source column,
// plus the source's metadata fields not declared as columns, each holding
// the zero value of ExprType of its type. It returns nil when the source's
// columns are only known from its data.
func ExprEnv(f *Flow) map[string]any {
	s, known := schemaOf(f)
	return exprEnv(f, s, known)
}

func exprEnv(f *Flow, s batch.Schema, known bool) map[string]any {
	if !known {
		return nil
	}
	return cdc.ExprEnv(s, f.Source.Kafka != nil)
}

// ExprType is the Go type a value of column type t has in an expression
// (cdc.ExprType).
func ExprType(t batch.Type) reflect.Type { return cdc.ExprType(t) }

// decimalRefs returns the decimal columns an expression names (of the
// source, or computed before it).
func decimalRefs(src string, source batch.Schema, before []ComputedColumn) []string {
	tree, err := parser.Parse(src)
	if err != nil {
		return nil
	}
	var out []string
	ast.Find(tree.Node, func(n ast.Node) bool {
		id, ok := n.(*ast.IdentifierNode)
		if !ok || slices.Contains(out, id.Value) {
			return false
		}
		if k := source.Index(id.Value); k >= 0 && source.Columns[k].Type.Scalar().Kind == batch.KindDecimal {
			out = append(out, id.Value)
		}
		for _, cc := range before {
			if cc.Name == id.Value && cc.Type.Scalar().Kind == batch.KindDecimal {
				out = append(out, id.Value)
			}
		}
		return false
	})
	return out
}

// compileAny compiles an expression of any type against env; a nil env
// checks the syntax only.
func compileAny(src string, env map[string]any) error { return compile(src, env, false) }

// compileBool compiles a boolean expression against env; a nil env checks
// the syntax only.
func compileBool(src string, env map[string]any) error { return compile(src, env, true) }

func compile(src string, env map[string]any, asBool bool) error {
	opts := []expr.Option{expr.AllowUndefinedVariables()}
	if env != nil {
		opts = []expr.Option{expr.Env(env)}
		if asBool {
			opts = append(opts, expr.AsBool())
		}
	}
	_, err := expr.Compile(src, opts...)
	if err == nil {
		return nil
	}
	var fe *file.Error
	if errors.As(err, &fe) {
		return fmt.Errorf("expression %q: %s (at character %d)", src, fe.Message, fe.Column+1)
	}
	msg, _, _ := strings.Cut(err.Error(), "\n")
	return fmt.Errorf("expression %q: %s", src, msg)
}

// schemaRegistry checks a source's registry connection.
func (c *checker) schemaRegistry(path string, r *SchemaRegistry) {
	if r == nil {
		return
	}
	switch u, err := url.Parse(r.URL); {
	case r.URL == "":
		c.add(path+".url", "required: the registry's base URL, e.g. http://localhost:8081")
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		c.add(path+".url", "%q is not an http:// or https:// URL", r.URL)
	case r.TLS != nil && u.Scheme != "https":
		c.add(path+".tls", "applies to an https:// url")
	}
	switch {
	case r.Username != "" && r.Password == "":
		c.add(path+".username", "needs a password: username and password go together (HTTP basic authentication)")
	case r.Username == "" && r.Password != "":
		c.add(path+".password", "needs a username: username and password go together (HTTP basic authentication)")
	}
	if r.TLS != nil {
		if _, err := r.TLS.ClientConfig(); err != nil {
			c.add(path+".tls", "%v", err)
		}
	}
}

// tombstones checks what a Kafka source's tombstones become, and how
// their message keys name the key they delete.
func (c *checker) tombstones(path, sp string, f *Flow, k *KafkaSource) {
	switch k.Tombstones {
	case "", TombstonesDelete, TombstonesSkip, TombstonesDeadLetter:
	default:
		c.add(sp+".tombstones", "unknown %q: delete, skip or dead_letter", k.Tombstones)
		return
	}
	if k.Tombstones != "" && f.Kind != KindAutoCDC {
		c.add(sp+".tombstones", "applies to auto_cdc flows: a tombstone deletes a key of a CDC target (an append flow's tombstones are dead letters)")
		return
	}
	switch k.KeyFormat {
	case "", "json":
	case "string":
		if k.Format == FormatDebezium {
			c.add(sp+".key_format", "a Debezium message key is a JSON object of the key columns: leave key_format unset")
		} else if len(f.Keys) != 1 {
			c.add(sp+".key_format", "string names one key column, and flow %s has %d keys: use json", f.Name, len(f.Keys))
		}
	default:
		c.add(sp+".key_format", "unknown %q: json or string", k.KeyFormat)
	}
	if f.Kind != KindAutoCDC || k.TombstoneMode(f) != TombstonesDelete {
		if k.KeyFormat != "" {
			c.add(sp+".key_format", "applies when tombstones: delete: it says how a tombstone's message key names the key it deletes")
		}
		return
	}
	for j, key := range f.Keys {
		if f.computes(key) {
			c.add(indexPath(strings.TrimSuffix(path, ".source")+".keys", j), "key %s is a computed column, which a tombstone's message key cannot give: set tombstones: dead_letter or skip", key)
		}
	}
}
