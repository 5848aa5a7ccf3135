package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
)

// schemaJSON is a table's definition as stored in
// _sluice/tables/<table>/schema.json.
type schemaJSON struct {
	Columns     []columnJSON `json:"columns"`
	PartitionBy []string     `json:"partition_by,omitempty"`
	Kind        string       `json:"kind,omitempty"` // "scd1" or "scd2"; append targets have none
	Keys        []string     `json:"keys,omitempty"` // CDC targets: the key columns
}

// tableDef is what the sink keeps of a table's declaration.
type tableDef struct {
	Schema      batch.Schema
	PartitionBy []string
	Kind        sinks.TableKind
	Keys        []string // CDC targets only
}

func (d tableDef) cdc() bool { return d.Kind != sinks.KindAppend }

func defOf(t sinks.Table) tableDef {
	d := tableDef{Schema: t.Schema, PartitionBy: t.PartitionBy, Kind: t.Kind}
	if d.cdc() {
		d.Keys = t.Keys
	}
	return d
}

type columnJSON struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Nullable bool   `json:"nullable,omitempty"`
}

func encodeSchema(d tableDef) []byte {
	j := schemaJSON{PartitionBy: d.PartitionBy, Keys: d.Keys}
	if d.cdc() {
		j.Kind = d.Kind.String()
	}
	for _, c := range d.Schema.Columns {
		j.Columns = append(j.Columns, columnJSON{Name: c.Name, Type: c.Type.String(), Nullable: c.Nullable})
	}
	out, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		panic(fmt.Sprintf("local: schema does not encode: %v", err))
	}
	return append(out, '\n')
}

func decodeSchema(data []byte) (tableDef, error) {
	var j schemaJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return tableDef{}, err
	}
	d := tableDef{PartitionBy: j.PartitionBy, Keys: j.Keys}
	switch j.Kind {
	case "":
	case "scd1":
		d.Kind = sinks.KindSCD1
	case "scd2":
		d.Kind = sinks.KindSCD2
	default:
		return tableDef{}, fmt.Errorf("unknown table kind %q", j.Kind)
	}
	for _, c := range j.Columns {
		t, err := batch.ParseType(c.Type)
		if err != nil {
			return tableDef{}, fmt.Errorf("column %s: %w", c.Name, err)
		}
		d.Schema.Columns = append(d.Schema.Columns, batch.Column{Name: c.Name, Type: t, Nullable: c.Nullable})
	}
	return d, nil
}

// readTable reads a table's stored definition (fs.ErrNotExist when the
// table does not exist) and caches it.
func (s *Sink) readTable(table string) (tableDef, error) {
	data, err := s.disk.ReadFile(s.lay.schemaFile(table))
	if err != nil {
		return tableDef{}, err
	}
	d, err := decodeSchema(data)
	if err != nil {
		return tableDef{}, fmt.Errorf("%s: %w", s.lay.schemaFile(table), err)
	}
	s.schemaMu.Lock()
	s.schemas[table] = d
	s.schemaMu.Unlock()
	return d, nil
}

// table returns a table's definition, from the cache when it has it.
func (s *Sink) table(table string) (tableDef, error) {
	s.schemaMu.Lock()
	d, ok := s.schemas[table]
	s.schemaMu.Unlock()
	if ok {
		return d, nil
	}
	return s.readTable(table)
}

// checkColumns validates a declared schema.
func checkColumns(t sinks.Table) error {
	var errs *multierror.Error
	seen := map[string]bool{}
	for _, c := range t.Schema.Columns {
		switch {
		case c.Name == "":
			errs = multierror.Append(errs, errors.New("a column has no name"))
		case strings.HasPrefix(c.Name, "_sluice_") && !batch.IsLinkColumn(c.Name):
			errs = multierror.Append(errs, fmt.Errorf("column %s: names starting with _sluice_ are reserved", c.Name))
		case seen[c.Name]:
			errs = multierror.Append(errs, fmt.Errorf("column %s is declared twice", c.Name))
		}
		seen[c.Name] = true
		if _, err := batch.ParseType(c.Type.String()); err != nil || c.Type.Kind == batch.KindInvalid {
			errs = multierror.Append(errs, fmt.Errorf("column %s has invalid type %v", c.Name, c.Type))
		}
	}
	seenPart := map[string]bool{}
	for _, p := range t.PartitionBy {
		switch {
		case t.Schema.Index(p) < 0:
			errs = multierror.Append(errs, fmt.Errorf("partition_by column %s is not a column of the table", p))
		case seenPart[p]:
			errs = multierror.Append(errs, fmt.Errorf("partition_by names %s twice", p))
		}
		seenPart[p] = true
	}
	switch t.Kind {
	case sinks.KindAppend:
	case sinks.KindSCD1, sinks.KindSCD2:
		if len(t.Keys) == 0 {
			errs = multierror.Append(errs, errors.New("a CDC target needs key columns"))
		}
		seenKey := map[string]bool{}
		for _, k := range t.Keys {
			switch {
			case t.Schema.Index(k) < 0:
				errs = multierror.Append(errs, fmt.Errorf("key column %s is not a column of the table", k))
			case seenKey[k]:
				errs = multierror.Append(errs, fmt.Errorf("keys name %s twice", k))
			}
			seenKey[k] = true
		}
	default:
		errs = multierror.Append(errs, fmt.Errorf("unknown table kind %d", int(t.Kind)))
	}
	return errs.ErrorOrNil()
}

// evolve checks a declared schema against the stored one. The only change
// allowed is new nullable columns; the stored columns must stay, in order,
// with their types and nullability.
func evolve(stored, declared batch.Schema) (added []string, err error) {
	var errs *multierror.Error
	j := 0
	for _, c := range declared.Columns {
		k := stored.Index(c.Name)
		if k < 0 {
			switch {
			case c.Type.Kind == batch.KindArray:
				errs = multierror.Append(errs, fmt.Errorf("column %s (%v) is new, and an array is never null: the rows already stored have no value for it; run a full refresh of the table's flows to load it from the start", c.Name, c.Type))
			case !c.Nullable:
				errs = multierror.Append(errs, fmt.Errorf("column %s is new and not nullable (only nullable columns can be added)", c.Name))
			}
			added = append(added, c.Name)
			continue
		}
		old := stored.Columns[k]
		if old.Type != c.Type {
			errs = multierror.Append(errs, fmt.Errorf("column %s changed type from %v to %v", c.Name, old.Type, c.Type))
		}
		if old.Nullable != c.Nullable {
			errs = multierror.Append(errs, fmt.Errorf("column %s changed from %s to %s", c.Name, nullability(old), nullability(c)))
		}
		if k < j {
			errs = multierror.Append(errs, fmt.Errorf("column %s moved", c.Name))
		}
		j = max(j, k)
	}
	for _, c := range stored.Columns {
		if declared.Index(c.Name) < 0 {
			errs = multierror.Append(errs, fmt.Errorf("column %s was removed", c.Name))
		}
	}
	return added, errs.ErrorOrNil()
}

func nullability(c batch.Column) string {
	if c.Nullable {
		return "nullable"
	}
	return "not nullable"
}

// Ensure creates missing tables (an empty first version and the stored
// schema) and _sluice_dead_letters, and checks existing ones: a declared
// schema may add nullable columns to a stored one (rows loaded before read
// them as NULL); any other difference is an error naming it.
func (s *Sink) Ensure(ctx context.Context, tables []sinks.Table) error {
	var all []sinks.Table
	for _, own := range batch.OwnTables {
		all = append(all, sinks.Table{Name: own, Schema: batch.OwnSchema(own)})
	}
	all = append(all, tables...)
	var errs *multierror.Error
	seen := map[string]bool{}
	for i, t := range all {
		switch {
		case !tableName.MatchString(t.Name) || t.Name == stateDir:
			errs = multierror.Append(errs, fmt.Errorf("table %q: not a valid table name", t.Name))
		case i >= len(batch.OwnTables) && strings.HasPrefix(t.Name, "_sluice"):
			errs = multierror.Append(errs, fmt.Errorf("table %s: names starting with _sluice are reserved", t.Name))
		case seen[t.Name]:
			errs = multierror.Append(errs, fmt.Errorf("table %s is declared twice", t.Name))
		}
		seen[t.Name] = true
		if err := checkColumns(t); err != nil {
			errs = multierror.Append(errs, fmt.Errorf("table %s: %w", t.Name, err))
		}
	}
	if err := errs.ErrorOrNil(); err != nil {
		return fmt.Errorf("local: ensure: %w", err)
	}
	unlock, err := s.lock(ctx)
	if err != nil {
		return fmt.Errorf("local: ensure: %w", err)
	}
	defer unlock()
	// Check every table before changing any.
	exists := make([]bool, len(all))
	added := make([][]string, len(all))
	for i, t := range all {
		if st, err := s.disk.Lstat(s.lay.link(t.Name)); err == nil && st.Mode()&fs.ModeSymlink == 0 {
			errs = multierror.Append(errs, fmt.Errorf("table %s: %s exists and is not a table folder of sluice (a symlink)",
				t.Name, s.lay.link(t.Name)))
			continue
		}
		stored, err := s.readTable(t.Name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err == nil {
			exists[i] = true
			added[i], err = evolve(stored.Schema, t.Schema)
			if !slices.Equal(stored.PartitionBy, t.PartitionBy) {
				err = multierror.Append(err, fmt.Errorf("partition_by changed from %v to %v", stored.PartitionBy, t.PartitionBy))
			}
			if d := defOf(t); stored.Kind != d.Kind {
				err = multierror.Append(err, fmt.Errorf("kind changed from %s to %s: the SCD type of a target cannot change in place; restore stored_as_scd_type, or write a new table (a full refresh into another name)", stored.Kind.String(), d.Kind.String()))
			} else if !slices.Equal(stored.Keys, d.Keys) {
				err = multierror.Append(err, fmt.Errorf("keys changed from %v to %v: the keys of a target cannot change in place; restore the keys, or write a new table (a full refresh into another name)", stored.Keys, d.Keys))
			}
			if err != nil {
				err = fmt.Errorf("stored schema differs (%w): %w", sinks.ErrTableChanged, err)
			}
		}
		if err != nil {
			errs = multierror.Append(errs, fmt.Errorf("table %s: %w", t.Name, err))
		}
	}
	if err := errs.ErrorOrNil(); err != nil {
		return fmt.Errorf("local: ensure: %w", err)
	}
	for i, t := range all {
		if err := s.ensureTable(t, exists[i], added[i]); err != nil {
			return fmt.Errorf("local: ensure: table %s: %w", t.Name, err)
		}
	}
	return nil
}

// ensureTable creates a table or applies its new columns, then makes sure
// its folder exists. Runs under the destination lock.
func (s *Sink) ensureTable(t sinks.Table, exists bool, added []string) error {
	switch {
	case !exists:
		if err := s.disk.MkdirAll(s.lay.tableDir(t.Name), 0o755); err != nil {
			return err
		}
		if err := s.disk.SyncDir(s.lay.tables()); err != nil {
			return err
		}
		if err := writeAtomic(s.disk, s.lay.schemaFile(t.Name), encodeSchema(defOf(t))); err != nil {
			return err
		}
		s.log.Info("table created", "table", t.Name, "columns", len(t.Schema.Columns), "kind", t.Kind.String())
	case len(added) > 0:
		if err := writeAtomic(s.disk, s.lay.schemaFile(t.Name), encodeSchema(defOf(t))); err != nil {
			return err
		}
		s.log.Info("schema changed", "table", t.Name, "added", added)
	}
	s.schemaMu.Lock()
	s.schemas[t.Name] = defOf(t)
	s.schemaMu.Unlock()
	if t.Kind != sinks.KindAppend {
		if err := s.createState(t.Name); err != nil {
			return err
		}
	}

	// The table's folder: a symlink to its current version; a new table gets
	// an empty version 0 (a CDC target's with one bucket).
	st, err := s.disk.Lstat(s.lay.link(t.Name))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// Through the ledger's last load: no load before the table existed
		// (those of a table of that name dropped and created anew) is ever
		// published into it.
		s.led.mu.Lock()
		err := s.led.refresh(true)
		last := s.led.lastSeq()
		s.led.mu.Unlock()
		if err != nil {
			return err
		}
		empty := manifest{Version: 0, Through: last, Created: time.Now().UTC()}
		if t.Kind != sinks.KindAppend {
			empty.Buckets = 1
		}
		if err := s.writeVersion(t.Name, empty, nil); err != nil {
			return err
		}
		return s.swap(t.Name, 0)
	case err != nil:
		return err
	case st.Mode()&fs.ModeSymlink == 0:
		return fmt.Errorf("%s exists and is not a table folder of sluice (a symlink)", s.lay.link(t.Name))
	}
	_, err = s.current(t.Name)
	return err
}

// Columns returns a table's stored columns.
func (s *Sink) Columns(_ context.Context, table string) (batch.Schema, error) {
	d, err := s.readTable(table)
	if errors.Is(err, fs.ErrNotExist) {
		return batch.Schema{}, fmt.Errorf("local: table %s: %w", table, sinks.ErrUnknownTable)
	}
	if err != nil {
		return batch.Schema{}, fmt.Errorf("local: table %s: %w", table, err)
	}
	return d.Schema, nil
}
