package local

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"sort"
	"strings"
	"sync"
	"unsafe"

	bolt "go.etcd.io/bbolt"
)

// Key states are kept in chunks: bucket "chunks" of state.db maps the
// first key of each chunk to the chunk, the states of a run of keys in key
// order, each a uvarint length and the key, then a uvarint length and the
// state. The chunks partition the keys: a key belongs to the chunk with the
// greatest first key not above it.
//
// A load rewrites the chunks its keys fall in, a few hundred values of about
// chunkTarget bytes, rather than putting each key's state into the B-tree
// on its own: bbolt's work then follows the bytes a load changes, not its
// number of keys, and its pages are written a chunk at a time. A read
// decodes the chunk of each key asked for, once for the keys it holds.
//
// A state file made before chunks keeps one state per key in bucket "keys";
// the first load applied to it moves them into chunks in the same
// transaction, and readers read either.
var stateChunks = []byte("chunks")

// chunkTarget is the size a load cuts the chunks it rewrites to.
var chunkTarget = 32 << 10

// stateKV is a key's state, or its removal (del), in a load or a chunk.
// Strings built over a transaction's memory are valid during it only.
type stateKV struct {
	k, v string
	del  bool
}

var errChunkCorrupt = errors.New("state chunk is corrupt")

// bytesStr returns a string sharing b's bytes, which must not change while
// it is used.
func bytesStr(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// appendChunkEntry appends a key's state to a chunk.
func appendChunkEntry(buf []byte, k, v string) []byte {
	buf = binary.AppendUvarint(buf, uint64(len(k)))
	buf = append(buf, k...)
	buf = binary.AppendUvarint(buf, uint64(len(v)))
	return append(buf, v...)
}

// decodeChunk appends a chunk's states to dst, as strings sharing data.
func decodeChunk(data []byte, dst []stateKV) ([]stateKV, error) {
	off := 0
	field := func() (string, error) {
		n, k := binary.Uvarint(data[off:])
		if k <= 0 || uint64(len(data)-off-k) < n {
			return "", errChunkCorrupt
		}
		s := bytesStr(data[off+k : off+k+int(n)])
		off += k + int(n)
		return s, nil
	}
	for off < len(data) {
		k, err := field()
		if err != nil {
			return nil, err
		}
		v, err := field()
		if err != nil {
			return nil, err
		}
		dst = append(dst, stateKV{k: k, v: v})
	}
	return dst, nil
}

// countChunk returns the number of states a chunk holds (a bound when it
// is corrupt, which decodeChunk reports).
func countChunk(data []byte) int {
	off, n := 0, 0
	for off < len(data) {
		for range 2 {
			l, k := binary.Uvarint(data[off:])
			if k <= 0 {
				return n
			}
			off += k + int(min(l, uint64(len(data))))
		}
		n++
	}
	return n
}

// sortedStates returns the states of a load's pairs (key, state or absent)
// in key order, the last entry of each key; the table's own state (key "")
// is returned apart, with whether the load has one.
func sortedStates(p *pairs) (ents []stateKV, table stateKV, hasTable bool) {
	order := make([]int, p.len())
	sorted := true
	for i := range order {
		order[i] = i
		if i > 0 && p.a[i-1] > p.a[i] {
			sorted = false
		}
	}
	if !sorted {
		slices.SortStableFunc(order, func(a, b int) int { return strings.Compare(p.a[a], p.a[b]) })
	}
	ents = make([]stateKV, 0, len(order))
	for j, i := range order {
		if j+1 < len(order) && p.a[order[j+1]] == p.a[i] {
			continue // a later entry of the key wins
		}
		e := stateKV{k: p.a[i], v: p.b[i], del: p.absent != nil && p.absent[i]}
		if e.k == "" {
			table, hasTable = e, true
			continue
		}
		ents = append(ents, e)
	}
	return ents, table, hasTable
}

// putStates applies ents (in key order, distinct) to the chunks of b,
// rewriting at most about maxChunks of them, and returns how many entries
// it applied: all of them, or the ones below the first chunk it left
// alone (at least one). Consecutive chunks that entries fall in are merged
// with them and cut again into chunks of about chunkTarget bytes: chunks
// shrunk by removals join their neighbours.
func putStates(b *bolt.Bucket, ents []stateKV, maxChunks int, arena *pieceArena) (int, error) {
	if len(ents) == 0 {
		return 0, nil
	}
	var firsts []string // every chunk's first key, in order (copied)
	c := b.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		firsts = append(firsts, string(k))
	}
	// owner returns the chunk a key belongs to; a key below every chunk
	// joins the first.
	owner := func(k string) int {
		return max(0, sort.Search(len(firsts), func(i int) bool { return firsts[i] > k })-1)
	}
	var old []stateKV
	touched := 0
	for i := 0; i < len(ents); {
		if touched >= maxChunks {
			return i, nil
		}
		// A run: the entries whose chunks follow one another, lo to hi,
		// cut where the chunks rewritten would pass maxChunks.
		j, lo, hi := i, -1, -1
		if len(firsts) == 0 {
			j = len(ents)
		} else {
			lo = owner(ents[i].k)
			hi = lo
			for j < len(ents) {
				o := hi
				if hi+1 < len(firsts) && ents[j].k >= firsts[hi+1] {
					o = owner(ents[j].k)
				}
				if o > hi+1 || (o > hi && touched+o-lo+1 > maxChunks) {
					break
				}
				hi = o
				j++
			}
			touched += hi - lo + 1
		}
		var vals [][]byte
		n := 0
		for x := lo; x >= 0 && x <= hi; x++ {
			v := b.Get([]byte(firsts[x]))
			if v == nil {
				return i, errChunkCorrupt
			}
			vals = append(vals, v)
			n += countChunk(v)
		}
		old = slices.Grow(old[:0], n)
		for _, v := range vals {
			var err error
			if old, err = decodeChunk(v, old); err != nil {
				return i, err
			}
		}
		pieces := mergeChunks(old, ents[i:j], arena)
		// The old chunks go once their states are copied into pieces.
		for x := lo; x >= 0 && x <= hi; x++ {
			if err := b.Delete([]byte(firsts[x])); err != nil {
				return i, err
			}
		}
		if err := putPieces(b, pieces); err != nil {
			return i, err
		}
		i = j
	}
	return len(ents), nil
}

// putPieces puts chunks into b. bbolt keeps key and value until the
// transaction ends; each piece has buffers of its own.
func putPieces(b *bolt.Bucket, pieces []chunkPiece) error {
	for _, p := range pieces {
		if err := b.Put(p.first, p.data); err != nil {
			return err
		}
	}
	return nil
}

// pieceArena hands out the buffers of one transaction's chunk pieces from
// a slab that the next transaction reuses: bbolt keeps a Put's value until
// its transaction ends, and then has copied it into its pages. A full
// arena allocates.
type pieceArena struct {
	slab []byte
	off  int
}

// pieceArenas holds arenas of about a transaction's pieces
// (stateTxChunks chunks).
var pieceArenas = sync.Pool{New: func() any { return &pieceArena{slab: make([]byte, 5<<20)} }}

// take returns an empty buffer of capacity n.
func (a *pieceArena) take(n int) []byte {
	if a.off+n > len(a.slab) {
		return make([]byte, 0, n)
	}
	b := a.slab[a.off : a.off : a.off+n]
	a.off += n
	return b
}

// reset makes the whole slab free again, once no transaction uses it.
func (a *pieceArena) reset() { a.off = 0 }

// chunkPiece is a chunk to put: its first key and its encoding.
type chunkPiece struct {
	first, data []byte
}

// mergeChunks merges the states of old (in key order) with ents (in key
// order, distinct; an entry replaces or removes its key's state), cut into
// chunks of about chunkTarget bytes; a last chunk under a quarter of it
// joins the one before.
func mergeChunks(old, ents []stateKV, arena *pieceArena) []chunkPiece {
	var out []chunkPiece
	var cur chunkPiece
	emit := func(k, v string) {
		if cur.data == nil {
			cur = chunkPiece{first: []byte(k), data: arena.take(chunkTarget + len(k) + len(v) + 2*binary.MaxVarintLen64)}
		}
		cur.data = appendChunkEntry(cur.data, k, v)
		if len(cur.data) >= chunkTarget {
			out = append(out, cur)
			cur = chunkPiece{}
		}
	}
	i, j := 0, 0
	for i < len(old) || j < len(ents) {
		switch {
		case j == len(ents) || (i < len(old) && old[i].k < ents[j].k):
			emit(old[i].k, old[i].v)
			i++
		default:
			if i < len(old) && old[i].k == ents[j].k {
				i++ // replaced or removed
			}
			if !ents[j].del {
				emit(ents[j].k, ents[j].v)
			}
			j++
		}
	}
	if cur.data != nil {
		if n := len(out); n > 0 && len(cur.data) < chunkTarget/4 {
			out[n-1].data = append(out[n-1].data, cur.data...)
		} else {
			out = append(out, cur)
		}
	}
	return out
}

// chunkReader finds keys' states in the chunks of a bucket, decoding each
// chunk once for a run of keys asked for in order.
type chunkReader struct {
	c               *bolt.Cursor
	states          []stateKV // the decoded chunk
	first, next     string    // its first key, and the next chunk's ("" when last)
	loaded, hasNext bool
}

// get returns the state of key (nil when it has none), sharing the
// transaction's memory.
func (r *chunkReader) get(key string) ([]byte, error) {
	if !r.loaded || key < r.first || (r.hasNext && key >= r.next) {
		if err := r.seek(key); err != nil {
			return nil, err
		}
	}
	if !r.loaded {
		return nil, nil
	}
	i, ok := slices.BinarySearchFunc(r.states, key, func(e stateKV, k string) int { return strings.Compare(e.k, k) })
	if !ok {
		return nil, nil
	}
	return unsafe.Slice(unsafe.StringData(r.states[i].v), len(r.states[i].v)), nil
}

// seek decodes the chunk key belongs to; none is loaded when key is below
// every chunk.
func (r *chunkReader) seek(key string) error {
	r.loaded = false
	k, v := seekChunk(r.c, key)
	if k == nil {
		return nil
	}
	var err error
	if r.states, err = decodeChunk(v, r.states[:0]); err != nil {
		return err
	}
	r.first = bytesStr(k)
	nk, _ := r.c.Next()
	r.next, r.hasNext = bytesStr(nk), nk != nil
	r.loaded = true
	return nil
}

// seekChunk moves c to the chunk key belongs to, the one with the greatest
// first key not above it, and returns it; nil when key is below every
// chunk.
func seekChunk(c *bolt.Cursor, key string) (k, v []byte) {
	k, v = c.Seek([]byte(key))
	switch {
	case k == nil:
		return c.Last()
	case !bytes.Equal(k, []byte(key)):
		return c.Prev()
	}
	return k, v
}
