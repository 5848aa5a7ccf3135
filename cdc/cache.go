package cdc

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"unsafe"
)

// Cache is a StateStore that keeps recently used key states in memory,
// bounded in bytes, in front of the sink's store. It keeps states in their
// encoded form (what MarshalBinary returns and sinks store), which is
// compact, and returns them so: an engine decodes a state when it applies
// the key. It only ever holds committed state: Commit it with an Output
// after the load that wrote the Output committed, and Reset it when a
// load's outcome is unknown, after a full refresh, or when the target's
// lease was lost. A Cache is safe for concurrent use; share one per target
// between the flows that write it.
//
// Nothing it holds per key is a pointer, so the garbage collector does not
// walk it: keys and encodings are appended to large byte segments, and
// each key has a slot in one slice, found through a map from the key's
// hash. A cache of millions of keys would otherwise be millions of objects
// that every collection marks: 10 million keys into ClickHouse with a 2 GiB
// cache took 111 s of CPU when each key was an object (44 s with a 32 MiB
// cache), 52 s with segments.
// Segments are only appended to, so a state handed out keeps its bytes
// even once the cache dropped or replaced it; when replaced and dropped
// bytes exceed a quarter of the bound, the live ones are copied into new
// segments and the old ones are left to the collector.
type Cache struct {
	store StateStore
	max   int64

	mu   sync.Mutex
	used int64 // cacheItemOverhead and the bytes of each held key and state
	// changes counts Commits and Resets: a state read from the store
	// while one ran may be older than what the cache was told, so it is
	// not kept.
	changes uint64
	hash    func(key string) uint64
	index   map[uint64]int32 // a key's hash -> its first slot (chained through slot.chain)
	held    int              // keys held
	slots   []cacheSlot
	free    int32 // first free slot, chained through slot.chain; -1 when none
	head    int32 // most recently used slot; -1 when empty
	tail    int32 // least recently used
	segs    [][]byte
	dead    int64 // bytes of the segments no slot refers to any more
	table   *TableState
	// whole is set while the cache holds every key that has a committed
	// state: a probe of the store (KeyStateProber) found none, and the
	// cache has dropped no state since. Misses then read nothing. losses
	// counts what ends it (a clear, a state dropped or not kept); probed
	// is set once a probe ran, or runs, since the last clear.
	whole, probed bool
	losses        uint64
}

// cacheSlot is a held key: where its key and its encoded state ("" when
// known to have no state) are in the segments, and its neighbours in
// recency.
type cacheSlot struct {
	hash             uint64
	kseg, koff, klen int32
	dseg, doff, dlen int32
	prev, next       int32
	chain            int32 // next slot whose key has the same hash
}

// cacheItemOverhead is the bookkeeping each cached key costs besides its
// key and encoded state: its slot and its index entry.
const cacheItemOverhead = int64(unsafe.Sizeof(cacheSlot{})) + 16

// cacheSegment is the size of a segment: large enough that the segments
// are few, small enough that one kept alive by a state handed out holds
// little else. (A variable for tests.)
var cacheSegment = 1 << 20

// NewCache returns a cache over store holding at most maxBytes of encoded
// states and their keys. maxBytes <= 0 caches nothing.
func NewCache(store StateStore, maxBytes int64) *Cache {
	seed := maphash.MakeSeed()
	c := &Cache{store: store, max: maxBytes, hash: func(key string) uint64 { return maphash.String(seed, key) }}
	c.clear()
	return c
}

func (c *Cache) clear() {
	c.lose()
	c.probed = false
	c.index = map[uint64]int32{}
	c.slots = nil
	c.free, c.head, c.tail = -1, -1, -1
	c.held = 0
	c.segs = nil
	c.dead = 0
	c.used = 0
}

// Get returns the states of keys, reading the ones it does not hold from
// the store and keeping them (unless it holds every key with a state:
// see KeyStateProber).
func (c *Cache) Get(ctx context.Context, keys []string) ([]*KeyState, error) {
	if err := c.probe(ctx); err != nil {
		return nil, err
	}
	out := make([]*KeyState, len(keys))
	var miss []string
	var missAt []int // miss[j] is keys[missAt[j]]
	states := make([]KeyState, 0, len(keys))
	c.mu.Lock()
	changes := c.changes
	for at, k := range keys {
		if i, _ := c.find(k); i >= 0 {
			c.touch(i)
			if data := c.data(i); data != "" {
				states = append(states, KeyState{enc: data})
				out[at] = &states[len(states)-1]
			}
			continue
		}
		if c.whole {
			continue // no state
		}
		miss = append(miss, k)
		missAt = append(missAt, at)
	}
	c.mu.Unlock()
	if len(miss) == 0 {
		return out, nil
	}
	got, err := c.store.Get(ctx, miss)
	if err != nil {
		return nil, err
	}
	encs := make([]string, len(miss))
	for i, k := range miss {
		if s := got[i]; s != nil {
			if encs[i], err = s.Encoding(); err != nil {
				return nil, fmt.Errorf("state of key %x: %w", k, err)
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	keep := c.changes == changes
	for i, k := range miss {
		s := got[i]
		if j, h := c.find(k); j >= 0 && c.data(j) != encs[i] { // a Commit in between is newer
			s = nil
			if data := c.data(j); data != "" {
				s = &KeyState{enc: data}
			}
		} else if j < 0 && keep {
			c.set(k, h, j, encs[i])
		}
		out[missAt[i]] = s
	}
	return out, nil
}

// probe asks a KeyStateProber store, once after each clear, whether any
// key has a state; when none has, the cache holds them all from then on.
// A probe that fails is tried again at the next Get.
func (c *Cache) probe(ctx context.Context) error {
	p, ok := c.store.(KeyStateProber)
	if !ok || c.max <= 0 {
		return nil
	}
	c.mu.Lock()
	if c.whole || c.probed {
		c.mu.Unlock()
		return nil
	}
	c.probed = true
	losses := c.losses
	c.mu.Unlock()
	none, err := p.NoKeyStates(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	// A clear or a state dropped meanwhile makes the answer stale: a later
	// probe (after a clear) owns probed.
	current := c.losses == losses
	if err != nil {
		if current {
			c.probed = false
		}
		return fmt.Errorf("probe key states: %w", err)
	}
	// A load committed during the probe either shows in it, or its states
	// reach the cache through Commit after it: both ways none is missed.
	if current {
		c.whole = none
	}
	return nil
}

// lose ends whole: the cache no longer holds every key with a state.
func (c *Cache) lose() {
	c.whole = false
	c.losses++
}

// Table returns the table state, reading it from the store once.
func (c *Cache) Table(ctx context.Context) (TableState, error) {
	c.mu.Lock()
	if c.table != nil {
		t := *c.table
		c.mu.Unlock()
		return t, nil
	}
	changes := c.changes
	c.mu.Unlock()
	t, err := c.store.Table(ctx)
	if err != nil {
		return TableState{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.table != nil: // a Commit in between is newer
		t = *c.table
	case c.changes == changes:
		c.table = &t
	}
	return t, nil
}

// Commit records the states of a committed Output.
func (c *Cache) Commit(out *Output) {
	encs := make([]string, len(out.States))
	bad := make([]bool, len(out.States))
	for i, kc := range out.States {
		if kc.State != nil {
			var err error
			encs[i], err = kc.State.Encoding()
			bad[i] = err != nil
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.changes++
	for i, kc := range out.States {
		if bad[i] {
			c.forget(kc.Key) // the store has it: read it back when needed
			c.lose()
			continue
		}
		c.put(kc.Key, encs[i])
	}
	if out.Table != nil {
		t := *out.Table
		c.table = &t
	}
}

// Reset forgets everything.
func (c *Cache) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.changes++
	c.clear()
	c.table = nil
}

// Max returns the bound of the bytes held.
func (c *Cache) Max() int64 { return c.max }

// Bytes returns the estimated bytes held.
func (c *Cache) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.used
}

// Len returns the number of keys held, with or without state.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.held
}

// key and data return a slot's key and encoded state, sharing the
// segments' bytes (never written again).
func (c *Cache) key(i int32) string {
	s := &c.slots[i]
	return unsafe.String(unsafe.SliceData(c.segs[s.kseg][s.koff:]), s.klen)
}

func (c *Cache) data(i int32) string {
	s := &c.slots[i]
	if s.dlen == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(c.segs[s.dseg][s.doff:]), s.dlen)
}

// find returns the slot of key (-1 when it is not held) and its hash.
func (c *Cache) find(key string) (int32, uint64) {
	h := c.hash(key)
	i, ok := c.index[h]
	if !ok {
		return -1, h
	}
	for ; i >= 0; i = c.slots[i].chain {
		if c.key(i) == key {
			return i, h
		}
	}
	return -1, h
}

// appendBytes appends b to the segments and returns where it is.
func (c *Cache) appendBytes(b string) (seg, off int32) {
	n := len(c.segs)
	if n == 0 || cap(c.segs[n-1])-len(c.segs[n-1]) < len(b) {
		c.segs = append(c.segs, make([]byte, 0, max(cacheSegment, len(b))))
		n++
	}
	s := c.segs[n-1]
	c.segs[n-1] = append(s, b...)
	return int32(n - 1), int32(len(s))
}

// put keeps the encoded state of key ("": none).
func (c *Cache) put(key string, data string) {
	i, h := c.find(key)
	c.set(key, h, i, data)
}

// set is put once key's slot i (-1: none) and hash h are known.
func (c *Cache) set(key string, h uint64, i int32, data string) {
	size := cacheItemOverhead + int64(len(key)) + int64(len(data))
	if size > c.max {
		if i >= 0 {
			c.remove(i)
		}
		if data != "" {
			c.lose() // a state not kept
		}
		return
	}
	if i >= 0 { // updated in place: no new slot
		s := &c.slots[i]
		c.used += int64(len(data)) - int64(s.dlen)
		c.dead += int64(s.dlen)
		c.setData(s, data)
		c.touch(i)
	} else {
		if i = c.free; i >= 0 {
			c.free = c.slots[i].chain
		} else {
			i = int32(len(c.slots))
			c.slots = append(c.slots, cacheSlot{})
		}
		s := &c.slots[i]
		*s = cacheSlot{hash: h, klen: int32(len(key)), chain: -1}
		s.kseg, s.koff = c.appendBytes(key)
		c.setData(s, data)
		if first, ok := c.index[h]; ok {
			s.chain = first
		}
		c.index[h] = i
		c.link(i)
		c.used += size
		c.held++
	}
	for c.used > c.max {
		c.remove(c.tail)
	}
	if c.dead > max(c.max/4, int64(cacheSegment)) {
		c.compact()
	}
}

// setData points slot s at a copy of data in the segments.
func (c *Cache) setData(s *cacheSlot, data string) {
	s.dseg, s.doff, s.dlen = 0, 0, int32(len(data))
	if data != "" {
		s.dseg, s.doff = c.appendBytes(data)
	}
}

func (c *Cache) forget(key string) {
	if i, _ := c.find(key); i >= 0 {
		c.remove(i)
	}
}

// remove drops slot i.
func (c *Cache) remove(i int32) {
	s := &c.slots[i]
	if s.dlen > 0 {
		c.lose()
	}
	c.unlink(i)
	if first := c.index[s.hash]; first == i {
		if s.chain >= 0 {
			c.index[s.hash] = s.chain
		} else {
			delete(c.index, s.hash)
		}
	} else {
		p := first
		for c.slots[p].chain != i {
			p = c.slots[p].chain
		}
		c.slots[p].chain = s.chain
	}
	c.used -= cacheItemOverhead + int64(s.klen) + int64(s.dlen)
	c.dead += int64(s.klen) + int64(s.dlen)
	*s = cacheSlot{chain: c.free}
	c.free = i
	c.held--
}

// compact copies the held keys and states into new segments.
func (c *Cache) compact() {
	old := c.segs
	c.segs = nil
	for i := c.head; i >= 0; i = c.slots[i].next {
		s := &c.slots[i]
		k := unsafe.String(unsafe.SliceData(old[s.kseg][s.koff:]), s.klen)
		s.kseg, s.koff = c.appendBytes(k)
		if s.dlen > 0 {
			d := unsafe.String(unsafe.SliceData(old[s.dseg][s.doff:]), s.dlen)
			s.dseg, s.doff = c.appendBytes(d)
		}
	}
	c.dead = 0
}

func (c *Cache) touch(i int32) {
	if c.head == i {
		return
	}
	c.unlink(i)
	c.link(i)
}

// link makes slot i the most recent.
func (c *Cache) link(i int32) {
	s := &c.slots[i]
	s.prev, s.next = -1, c.head
	if c.head >= 0 {
		c.slots[c.head].prev = i
	}
	c.head = i
	if c.tail < 0 {
		c.tail = i
	}
}

func (c *Cache) unlink(i int32) {
	s := &c.slots[i]
	if s.prev >= 0 {
		c.slots[s.prev].next = s.next
	} else {
		c.head = s.next
	}
	if s.next >= 0 {
		c.slots[s.next].prev = s.prev
	} else {
		c.tail = s.prev
	}
	s.prev, s.next = -1, -1
}
