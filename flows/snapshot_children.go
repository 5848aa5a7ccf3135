package flows

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/zeebo/xxh3"

	"github.com/sluicehq/sluice/backfill"
	"github.com/sluicehq/sluice/cdc"
	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
)

// The lists of a snapshot's files (docs/schema.md#child-tables-of-a-cdc-target).
// A snapshot row's _sluice_id names the content of its lists: its first
// 64 bits hash the row's child rows (their paths under the row and their
// values), its last 64 bits that hash with the key and the version that
// brought the content. A row whose key's row at the version (SCD type 1:
// its row; SCD type 2: the version open at it) has an id with the same
// first half keeps that id, and its child rows, which the target has
// already; any other row gets a new id, and its child rows are written in
// the version's load, for the rows the engine writes. So an unchanged key
// is not rewritten by its lists (SCD type 2: it starts no version), a key
// whose lists changed gets the new ones, and an absent key is deleted, its
// child rows joining no row any more.

// snapshotKids is what a snapshot's lists carry besides its rows.
type snapshotKids struct {
	schemas map[string]batch.Schema // the child tables, by suffix
	order   []string                // their suffixes, sorted: each after its parent's
	rows    map[string]*spill       // their rows, by the key of their record, its ordinal theirs
	cur     *spill                  // the ids of the target's rows at the version, by key
	idCol   int                     // batch.IDColumn in the snapshot's columns
}

// newSnapshotKids returns the lists of a snapshot whose columns are src,
// nil when its target has no child tables.
func (a *snapshotApply) newSnapshotKids() *snapshotKids {
	if !a.flow.HasChildren(a.r.p) {
		return nil
	}
	schemas := a.r.childSchemas(a.flow.Target)
	idCol := a.src.Index(batch.IDColumn)
	if len(schemas) == 0 || idCol < 0 {
		return nil
	}
	return &snapshotKids{schemas: schemas, order: slices.Sorted(maps.Keys(schemas)), rows: map[string]*spill{}, idCol: idCol}
}

// spillChunk replaces the provisional ids of a chunk's rows (those of their
// file and row) with the hash of their child rows, and spills the child
// rows by the keys of their records (keys and ords, by row).
func (a *snapshotApply) spillChunk(ch *backfill.Chunk, keys []string, ords []int64) error {
	k := a.kids
	ids := ch.Batch.Vectors[k.idCol]
	rowOf := make(map[string]int, ch.Batch.Len())
	for i := range ch.Batch.Len() {
		rowOf[ids.Strs[i]] = i
	}
	content := make([][]byte, ch.Batch.Len())
	rel := map[string]string{} // a child row's provisional id -> its path under its record
	for n, suffix := range k.order {
		b := ch.Children[suffix]
		if b == nil {
			continue
		}
		roots, parents := b.Column(batch.RootIDColumn), b.Column(batch.ParentIDColumn)
		idxs, own := b.Column(batch.ListIdxColumn), b.Column(batch.IDColumn)
		if k.rows[suffix] == nil {
			k.rows[suffix] = newSpill(a.dir, "kids"+strconv.Itoa(n), k.schemas[suffix], snapshotParts, a.rows.seed)
		}
		for j := range b.Len() {
			i, ok := rowOf[roots.Strs[j]]
			if !ok {
				return fmt.Errorf("file %s: a row of %s__%s has no record", ch.File, a.flow.Target, suffix)
			}
			path := rel[parents.Strs[j]] + "/" + suffix + "[" + strconv.FormatInt(idxs.Ints[j], 10) + "]"
			rel[own.Strs[j]] = path
			buf := append(append(content[i], path...), 0)
			for c, col := range b.Schema.Columns {
				if batch.IsLinkColumn(col.Name) || col.Name == batch.LoadIDColumn || b.Vectors[c].IsNull(j) {
					continue // a column added later, null in every row before, changes no hash
				}
				buf = appendSpilled(append(append(buf, col.Name...), '='), b.Vectors[c], j)
			}
			content[i] = buf
			if err := k.rows[suffix].add(keys[i], b, j, ords[i]); err != nil {
				return err
			}
		}
	}
	for i := range ch.Batch.Len() {
		sum := xxh3.Hash128(content[i]).Bytes()
		ids.Strs[i] = string(sum[:8])
	}
	return nil
}

// snapshotID is the id of a row whose child rows hash to content (8 bytes),
// of key, first brought by version.
func snapshotID(content, key, version string) string {
	buf := make([]byte, 0, len(content)+len(key)+len(version)+binary.MaxVarintLen64)
	// An encoded key may hold any byte: its length keeps key and version apart.
	buf = binary.AppendUvarint(append(buf, content...), uint64(len(key)))
	buf = append(append(buf, key...), version...)
	sum := xxh3.Hash128(buf).Bytes()
	id := append([]byte(content), sum[:8]...)
	return base64.RawURLEncoding.EncodeToString(id)
}

// sameContent reports whether id is that of a row whose child rows hash
// to content.
func sameContent(id, content string) bool {
	raw, err := base64.RawURLEncoding.DecodeString(id)
	return err == nil && len(raw) == 16 && string(raw[:8]) == content
}

// spillTargetIDs spills into the parts of the snapshot's rows the keys and
// ids of the target's rows at the version: every row for SCD type 1, the
// version open at it for SCD type 2.
func (a *snapshotApply) spillTargetIDs(ctx context.Context) error {
	var cols []batch.Column
	for _, key := range a.flow.Keys {
		i := a.target.table.Schema.Index(key)
		if i < 0 {
			return fmt.Errorf("key %s is not a column of table %s", key, a.target.name)
		}
		cols = append(cols, a.target.table.Schema.Columns[i])
	}
	nk := len(cols)
	cur := batch.Schema{Columns: append(slices.Clone(cols), batch.Column{Name: batch.IDColumn, Type: batch.String, Nullable: true})}
	a.kids.cur = newSpill(a.dir, "ids", cur, snapshotParts, a.rows.seed)
	names := cur.Names()
	var where sinks.KeyFilter
	scd2 := a.flow.StoredAsSCDType == 2
	if scd2 {
		names = append(names, cdc.StartAtColumn, cdc.EndAtColumn)
		after := batch.NewVector(a.version.value.Type, 1)
		a.version.value.AppendTo(after, 1)
		where = sinks.KeyFilter{Column: cdc.EndAtColumn, After: after}
	}
	add := func(b *batch.Batch) error {
		rows := &batch.Batch{Schema: cur, Vectors: b.Vectors[:nk+1]}
		for i := range b.Len() {
			if b.Vectors[nk].IsNull(i) {
				continue // a row without child rows
			}
			if scd2 {
				start, end := b.Vectors[nk+1], b.Vectors[nk+2]
				if !end.IsNull(i) && backfill.ValueAt(end, i).Compare(a.version.value) <= 0 ||
					start.IsNull(i) || backfill.ValueAt(start, i).Compare(a.version.value) > 0 {
					continue // not open at the version
				}
			}
			k, err := a.keyer.KeyOf(rows, i)
			if err != nil {
				return err
			}
			if err := a.kids.cur.add(k, rows, i, 0); err != nil {
				return err
			}
		}
		return nil
	}
	var err error
	if ks, ok := a.r.sink.(sinks.KeyScanner); ok {
		err = ks.ScanKeys(ctx, a.flow.Target, names, where, add)
	} else {
		err = a.scanColumns(ctx, names, add)
	}
	if err != nil && !errors.Is(err, sinks.ErrUnknownTable) {
		return err
	}
	return a.kids.cur.finish()
}

// assignIDs gives the rows of a bucket's input (ords by row) their ids:
// the id of their key's row when their child rows are the same, else a new
// one. It returns the new ids by ordinal.
func (a *snapshotApply) assignIDs(in *cdc.Input, from, to int, ords []int64) (map[int64]string, error) {
	k := a.kids
	cur := batch.New(k.cur.schema, int(k.cur.rowsIn(from, to)))
	for p := from; p < to; p++ {
		if _, err := k.cur.read(p, cur, nil); err != nil {
			return nil, err
		}
	}
	ids := make(map[string]string, cur.Len())
	for i := range cur.Len() {
		key, err := a.keyer.KeyOf(cur, i)
		if err != nil {
			return nil, err
		}
		ids[key] = cur.Vectors[len(cur.Vectors)-1].Strs[i]
	}
	v := in.Batch.Vectors[k.idCol]
	fresh := map[int64]string{}
	for i, ord := range ords {
		key, err := a.keyer.KeyOf(in.Batch, i)
		if err != nil {
			return nil, err
		}
		content := v.Strs[i]
		if id, ok := ids[key]; ok && sameContent(id, content) {
			v.Strs[i] = id
			continue
		}
		v.Strs[i] = snapshotID(content, key, a.version.text)
		fresh[ord] = v.Strs[i]
	}
	return fresh, nil
}

// writeKids stages into ld the child rows of the rows of parts [from, to)
// that got a new id and that out writes, linked by their new ids.
func (a *snapshotApply) writeKids(ctx context.Context, ld sinks.Load, from, to int, fresh map[int64]string, out *cdc.Output) error {
	if len(fresh) == 0 || out.Upserts.Len() == 0 {
		return nil
	}
	written := map[string]bool{}
	if v := out.Upserts.Batch.Column(batch.IDColumn); v != nil {
		for i := range out.Upserts.Len() {
			if !v.IsNull(i) {
				written[v.Strs[i]] = true
			}
		}
	}
	ids := map[string]string{} // a child row's provisional id -> its id
	for _, suffix := range a.kids.order {
		s := a.kids.rows[suffix]
		if s == nil {
			continue
		}
		b := batch.New(s.schema, int(s.rowsIn(from, to)))
		var ords []int64
		for p := from; p < to; p++ {
			var err error
			if ords, err = s.read(p, b, ords); err != nil {
				return err
			}
		}
		roots, parents := b.Column(batch.RootIDColumn), b.Column(batch.ParentIDColumn)
		idxs, own := b.Column(batch.ListIdxColumn), b.Column(batch.IDColumn)
		kept := batch.New(s.schema, b.Len())
		kr, kp, ko := kept.Column(batch.RootIDColumn), kept.Column(batch.ParentIDColumn), kept.Column(batch.IDColumn)
		var key []byte
		var text [22]byte
		for j, ord := range ords {
			root, ok := fresh[ord]
			if !ok || !written[root] {
				continue
			}
			parent := root
			if parents.Strs[j] != roots.Strs[j] {
				if parent, ok = ids[parents.Strs[j]]; !ok {
					return fmt.Errorf("a row of %s__%s has no parent row", a.flow.Target, suffix)
				}
			}
			key = append(append(append(append(key[:0], parent...), 0), suffix...), 0)
			key = strconv.AppendInt(key, idxs.Ints[j], 10)
			id := string(batch.AppendLinkID(text[:0], key))
			ids[own.Strs[j]] = id
			kept.AppendRow(b, j)
			last := kept.Len() - 1
			kr.Strs[last], kp.Strs[last], ko.Strs[last] = root, parent, id
		}
		if kept.Len() > 0 {
			if err := a.r.writeRows(ctx, ld, a.flow.Target+"__"+suffix, kept); err != nil {
				return err
			}
		}
	}
	return nil
}
