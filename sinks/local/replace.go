package local

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
)

// replaceEntry is what a load's ledger line records of ReplacePartitions:
// the partition folders of an append target (as partition.go names them,
// relative to the version folder) whose files the load's version drops
// before adding its own.
type replaceEntry struct {
	Table string   `json:"table"`
	Dirs  []string `json:"dirs"`
}

// replaced returns the folders of table the entry replaces, or nil.
func (e *entry) replaced(table string) []string {
	for i := range e.Replace {
		if e.Replace[i].Table == table {
			return e.Replace[i].Dirs
		}
	}
	return nil
}

var _ sinks.PartitionLoad = (*load)(nil)

// ReplacePartitions makes the load replace the listed partitions of an
// append target with partition_by: when it is published, the table's new
// version holds the previous one's files minus every file in the listed
// partitions' folders, plus the load's files. parts has the table's
// partition_by columns, in order, with their declared names and types (its
// nullability may differ); one row per partition. Refused for a CDC
// target, a table without partition_by, and parts of other columns. The
// folders are recorded in the load's ledger line, so that publishing after
// a crash (Recover) replaces the same partitions.
func (l *load) ReplacePartitions(ctx context.Context, table string, parts *batch.Batch) error {
	if err := l.usable(); err != nil {
		return err
	}
	dirs, err := l.partitionDirs(table, parts)
	if err != nil {
		return fmt.Errorf("local: replace partitions of %s: %w", table, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if l.replace == nil {
		l.replace = map[string]map[string]bool{}
	}
	set := l.replace[table]
	if set == nil {
		set = map[string]bool{}
		l.replace[table] = set
	}
	for _, d := range dirs {
		set[d] = true
	}
	return nil
}

// partitionDirs checks that the partitions of a table may be replaced and
// returns their folders.
func (l *load) partitionDirs(table string, parts *batch.Batch) ([]string, error) {
	var def tableDef
	if tf := l.tables[table]; tf != nil {
		def = tf.def
	} else {
		if !tableName.MatchString(table) || table == batch.LoadsTable {
			return nil, sinks.ErrUnknownTable
		}
		var err error
		def, err = l.s.table(table)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w (Ensure creates tables)", sinks.ErrUnknownTable)
		}
		if err != nil {
			return nil, err
		}
	}
	if def.cdc() {
		return nil, errors.New("a CDC target changes through Upsert and Remove, not by partitions")
	}
	if len(def.PartitionBy) == 0 {
		return nil, errors.New("the table has no partition_by")
	}
	want := make([]batch.Column, len(def.PartitionBy))
	for i, name := range def.PartitionBy {
		want[i] = def.Schema.Columns[def.Schema.Index(name)]
	}
	same := len(parts.Schema.Columns) == len(want)
	for i := 0; same && i < len(want); i++ {
		got := parts.Schema.Columns[i]
		same = got.Name == want[i].Name && got.Type == want[i].Type
	}
	if !same {
		return nil, fmt.Errorf("partition columns %v differ from the table's partition_by %v",
			describe(parts.Schema), describe(batch.Schema{Columns: want}))
	}
	if err := parts.Check(); err != nil {
		return nil, err
	}
	if err := checkValues(parts); err != nil {
		return nil, err
	}
	p, err := newPartitioner(parts.Schema, def.PartitionBy)
	if err != nil {
		return nil, err
	}
	dirs, _, err := p.split(parts)
	return dirs, err
}

// replaceEntries returns the load's replacements for its ledger line, in
// table and folder order.
func (l *load) replaceEntries() []replaceEntry {
	out := make([]replaceEntry, 0, len(l.replace))
	for table, set := range l.replace {
		dirs := make([]string, 0, len(set))
		for d := range set {
			dirs = append(dirs, d)
		}
		slices.Sort(dirs)
		out = append(out, replaceEntry{Table: table, Dirs: dirs})
	}
	slices.SortFunc(out, func(a, b replaceEntry) int { return cmp.Compare(a.Table, b.Table) })
	return out
}

// dropReplaced removes from files those in the folders dirs.
func dropReplaced(files []fileEntry, dirs []string) []fileEntry {
	if len(dirs) == 0 {
		return files
	}
	set := make(map[string]bool, len(dirs))
	for _, d := range dirs {
		set[d] = true
	}
	return slices.DeleteFunc(files, func(f fileEntry) bool { return set[path.Dir(f.Name)] })
}
