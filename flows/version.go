package flows

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"sync"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/flows/spec"
	"github.com/sluicehq/sluice/sinks"
)

// The schema history (docs/schema.md#schema-history): the pipeline's
// schema as JSON, hashed; the first load committed under a hash that
// _sluice_version does not hold yet writes its row, with the next version
// number.

// schemaVersions is what the runner knows of the pipeline's schema version.
type schemaVersions struct {
	mu      sync.Mutex
	version int64
	hash    string
	doc     string
	written bool // _sluice_version holds the row of hash
	claimed bool // a load in flight carries it
}

// schemaDoc is the pipeline's schema as _sluice_version stores it.
type schemaDoc struct {
	Pipeline string        `json:"pipeline"`
	Tables   []schemaTable `json:"tables"`
	Flows    []schemaFlow  `json:"flows,omitempty"`
}

// schemaFlow maps the field names of a flow's messages that became other
// column names (naming: snake_case) to those names.
type schemaFlow struct {
	Name  string            `json:"name"`
	Names map[string]string `json:"names"`
}

type schemaTable struct {
	Name    string         `json:"name"`
	Parent  string         `json:"parent,omitempty"` // a child table's parent table
	Root    string         `json:"root,omitempty"`   // a child table's table typed by the messages
	Kind    string         `json:"kind"`
	Keys    []string       `json:"keys,omitempty"`
	Columns []schemaColumn `json:"columns"`
}

type schemaColumn struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Nullable bool   `json:"nullable,omitempty"`
}

// schemaJSON renders the pipeline's resolved tables; the caller holds
// dataMu.
func (r *runner) schemaJSON() (doc, hash string) {
	d := schemaDoc{Pipeline: r.p.Pipeline, Tables: []schemaTable{}}
	for _, t := range r.tables() {
		c := r.children[t.Name]
		st := schemaTable{Name: t.Name, Parent: c.parent, Root: c.root, Kind: t.Kind.String(), Keys: t.Keys, Columns: []schemaColumn{}}
		for _, c := range t.Schema.Columns {
			st.Columns = append(st.Columns, schemaColumn{Name: c.Name, Type: c.Type.String(), Nullable: c.Nullable})
		}
		d.Tables = append(d.Tables, st)
	}
	for i := range r.p.Flows {
		f := &r.p.Flows[i]
		if names := r.names[f.Name]; len(names) > 0 {
			d.Flows = append(d.Flows, schemaFlow{Name: f.Name, Names: names})
		}
	}
	b, _ := json.Marshal(d)
	sum := sha256.Sum256(b)
	return string(b), hex.EncodeToString(sum[:])
}

// loadVersions reads the pipeline's latest version from _sluice_version
// and compares the schema of this start with it.
func (r *runner) loadVersions(ctx context.Context) error {
	var latest versionRow
	err := r.retry(ctx, "read "+batch.VersionTable, func(ctx context.Context) error {
		var err error
		latest, err = latestVersion(ctx, r.sink, r.p.Pipeline)
		return err
	})
	if err != nil {
		return err
	}
	r.dataMu.Lock()
	r.names = map[string]map[string]string{}
	var last schemaDoc
	if latest.Schema != "" && json.Unmarshal([]byte(latest.Schema), &last) == nil {
		// The names the messages were seen with so far: a start has not
		// seen them yet.
		for _, sf := range last.Flows {
			if f := r.p.Flow(sf.Name); f != nil && f.TypedByMessages(r.p) {
				r.names[sf.Name] = sf.Names
			}
		}
		// The child tables the last version had, with their columns as
		// the destination has them now.
		for _, st := range last.Tables {
			if _, known := r.children[st.Name]; known || st.Root == "" || r.p.ChildRoot(st.Name) == nil {
				continue // typed by the files there are, or no child table now
			}
			stored, err := r.storedColumns(ctx, st.Name)
			if err != nil {
				r.dataMu.Unlock()
				return err
			}
			if len(stored.Columns) > 0 {
				r.children[st.Name] = childTable{root: st.Root, parent: st.Parent, schema: stored}
			}
		}
	}
	doc, hash := r.schemaJSON()
	r.dataMu.Unlock()
	v := &r.versions
	v.mu.Lock()
	defer v.mu.Unlock()
	v.doc, v.hash = doc, hash
	v.version, v.written = latest.Version, latest.Hash == hash
	if !v.written {
		v.version++
	}
	return nil
}

// versionRow is one row of _sluice_version.
type versionRow struct {
	Version int64
	Hash    string
	Schema  string
	At      time.Time
}

// latestVersion returns a pipeline's row of _sluice_version with the
// greatest version; the zero row when there is none.
func latestVersion(ctx context.Context, sink sinks.Sink, pipeline string) (versionRow, error) {
	b, err := sink.Scan(ctx, batch.VersionTable)
	if errors.Is(err, sinks.ErrUnknownTable) {
		return versionRow{}, nil
	}
	if err != nil {
		return versionRow{}, err
	}
	var out versionRow
	p, ver, hash, doc, at := b.Column("pipeline"), b.Column("version"), b.Column("version_hash"), b.Column("schema"), b.Column("inserted_at")
	for i := range b.Len() {
		if p.Strs[i] != pipeline || ver.Ints[i] < out.Version {
			continue
		}
		out = versionRow{Version: ver.Ints[i], Hash: hash.Strs[i], Schema: doc.Strs[i], At: time.UnixMicro(at.Ints[i]).UTC()}
	}
	return out, nil
}

// noteNames records the field names a flow's messages were normalized
// from; a new one changes the schema.
func (r *runner) noteNames(f *spec.Flow, renamed [][2]string) {
	if len(renamed) == 0 {
		return
	}
	r.dataMu.RLock()
	known := r.names[f.Name]
	fresh := false
	for _, kv := range renamed {
		if known[kv[0]] != kv[1] {
			fresh = true
		}
	}
	r.dataMu.RUnlock()
	if !fresh {
		return
	}
	r.dataMu.Lock()
	defer r.dataMu.Unlock()
	names := maps.Clone(r.names[f.Name])
	if names == nil {
		names = map[string]string{}
	}
	for _, kv := range renamed {
		names[kv[0]] = kv[1]
	}
	r.names[f.Name] = names
	r.schemaChanged()
}

// schemaChanged notes a change of the tables' schemas (evolve); the
// caller holds dataMu.
func (r *runner) schemaChanged() {
	doc, hash := r.schemaJSON()
	v := &r.versions
	v.mu.Lock()
	defer v.mu.Unlock()
	if hash == v.hash {
		return
	}
	if v.written {
		v.version++
	}
	v.doc, v.hash, v.written = doc, hash, false
}

// claimVersion returns the hash of the schema a load of flow f is written
// under and, when no committed load holds its row and no other load in
// flight carries it, the row for the load to write, with the function to
// call once the load ended.
func (r *runner) claimVersion(f *spec.Flow) (hash string, row *batch.Batch, done func(committed bool)) {
	v := &r.versions
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.written || v.claimed || v.hash == "" {
		return v.hash, nil, nil
	}
	v.claimed = true
	b := batch.New(batch.VersionSchema, 1)
	b.Vectors[0].AppendString(r.p.Pipeline)
	b.Vectors[1].AppendInt(v.version)
	b.Vectors[2].AppendString(v.hash)
	b.Vectors[3].AppendString(v.doc)
	b.Vectors[4].AppendString(f.Name)
	b.Vectors[5].AppendInt(time.Now().UTC().UnixMicro())
	hash = v.hash
	return hash, b, func(committed bool) {
		v.mu.Lock()
		defer v.mu.Unlock()
		v.claimed = false
		if committed && v.hash == hash {
			v.written = true
		}
	}
}
