package cdc

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"unsafe"
)

// StateStore reads the committed state of a target back from where the
// sink keeps it (hidden state in the destination). Sinks implement it;
// Cache sits in front of it.
type StateStore interface {
	// Get returns the committed state of those keys that have one; keys
	// without state are absent from the map. Keys are the encodings of
	// Rows.Keys and KeyChange.Key. The states returned must not be
	// modified.
	Get(ctx context.Context, keys []string) (map[string]*KeyState, error)
	// Table returns the committed table-wide state (the zero value when
	// there is none).
	Table(ctx context.Context) (TableState, error)
}

// Cache is a StateStore that keeps recently used key states in memory,
// bounded in bytes, in front of the sink's store. It keeps states in their
// encoded form (what MarshalBinary returns and sinks store), which is
// compact and holds no pointers, and returns them so: an engine decodes a
// state when it applies the key. It only
// ever holds committed state: Commit it with an Output after the load that
// wrote the Output committed, and Reset it when a load's outcome is
// unknown, after a full refresh, or when the target's lease was lost. A
// Cache is safe for concurrent use; share one per target between the flows
// that write it.
type Cache struct {
	store StateStore
	max   int64

	mu   sync.Mutex
	used int64
	// changes counts Commits and Resets: a state read from the store
	// while one ran may be older than what the cache was told, so it is
	// not kept.
	changes uint64
	items   map[string]*cacheItem
	head    cacheItem // sentinel of the LRU ring: head.next is the most recent
	table   *TableState
}

type cacheItem struct {
	key        string
	data       string // the state's encoding; "" when known to have no state
	size       int64
	prev, next *cacheItem
}

// cacheItemOverhead is the bookkeeping each cached key costs besides its
// key and encoded state: the item and its map entry.
const cacheItemOverhead = int64(unsafe.Sizeof(cacheItem{})) + 48

// NewCache returns a cache over store holding at most maxBytes of encoded
// states and their keys. maxBytes <= 0 caches nothing.
func NewCache(store StateStore, maxBytes int64) *Cache {
	c := &Cache{store: store, max: maxBytes, items: map[string]*cacheItem{}}
	c.head.prev, c.head.next = &c.head, &c.head
	return c
}

// Get returns the states of keys, reading the ones it does not hold from
// the store and keeping them.
func (c *Cache) Get(ctx context.Context, keys []string) (map[string]*KeyState, error) {
	out := make(map[string]*KeyState, len(keys))
	var miss []string
	states := make([]KeyState, 0, len(keys))
	c.mu.Lock()
	changes := c.changes
	for _, k := range keys {
		if it, ok := c.items[k]; ok {
			c.touch(it)
			if it.data != "" {
				states = append(states, KeyState{enc: it.data})
				out[k] = &states[len(states)-1]
			}
			continue
		}
		miss = append(miss, k)
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
		if s := got[k]; s != nil {
			if encs[i], err = s.Encoding(); err != nil {
				return nil, fmt.Errorf("state of key %x: %w", k, err)
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	keep := c.changes == changes
	for i, k := range miss {
		s := got[k]
		if it, ok := c.items[k]; ok && it.data != encs[i] { // a Commit in between is newer
			s = nil
			if it.data != "" {
				s = &KeyState{enc: it.data}
			}
		} else if !ok && keep {
			c.put(k, encs[i])
		}
		if s != nil {
			out[k] = s
		}
	}
	return out, nil
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
	clear(c.items)
	c.head.prev, c.head.next = &c.head, &c.head
	c.used = 0
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
	return len(c.items)
}

// put keeps the encoded state of key ("": none).
func (c *Cache) put(key string, data string) {
	size := cacheItemOverhead + int64(len(key)) + int64(len(data))
	it, ok := c.items[key]
	switch {
	case size > c.max:
		c.forget(key)
		return
	case ok: // updated in place: no new item, no map write
		c.used += size - it.size
		it.data, it.size = data, size
		c.touch(it)
	default:
		it = &cacheItem{key: key, data: data, size: size}
		c.items[key] = it
		c.used += size
		c.link(it)
	}
	for c.used > c.max {
		old := c.head.prev
		c.unlink(old)
		delete(c.items, old.key)
		c.used -= old.size
	}
}

func (c *Cache) forget(key string) {
	if it, ok := c.items[key]; ok {
		c.unlink(it)
		delete(c.items, key)
		c.used -= it.size
	}
}

func (c *Cache) touch(it *cacheItem) {
	c.unlink(it)
	c.link(it)
}

func (c *Cache) link(it *cacheItem) {
	it.prev, it.next = &c.head, c.head.next
	c.head.next.prev = it
	c.head.next = it
}

func (c *Cache) unlink(it *cacheItem) {
	it.prev.next = it.next
	it.next.prev = it.prev
	it.prev, it.next = nil, nil
}

// MemStore is a StateStore in memory that keeps states in their serialized
// form, the way a sink does: for tests and for embedding. Commit it with an
// Output the way a sink commits a load.
type MemStore struct {
	mu    sync.Mutex
	keys  map[string][]byte
	table []byte
}

// NewMemStore returns an empty store.
func NewMemStore() *MemStore { return &MemStore{keys: map[string][]byte{}} }

// Get implements StateStore.
func (m *MemStore) Get(_ context.Context, keys []string) (map[string]*KeyState, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]*KeyState, len(keys))
	for _, k := range keys {
		data, ok := m.keys[k]
		if !ok {
			continue
		}
		s := &KeyState{}
		if err := s.UnmarshalBinary(data); err != nil {
			return nil, fmt.Errorf("key %x: %w", k, err)
		}
		out[k] = s
	}
	return out, nil
}

// Table implements StateStore.
func (m *MemStore) Table(context.Context) (TableState, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var t TableState
	if m.table == nil {
		return t, nil
	}
	err := t.UnmarshalBinary(m.table)
	return t, err
}

// Commit stores the states of out.
func (m *MemStore) Commit(out *Output) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, kc := range out.States {
		if kc.State == nil {
			delete(m.keys, kc.Key)
			continue
		}
		data, err := kc.State.MarshalBinary()
		if err != nil {
			return err
		}
		m.keys[kc.Key] = data
	}
	if out.Table != nil {
		data, err := out.Table.MarshalBinary()
		if err != nil {
			return err
		}
		m.table = data
	}
	return nil
}

// Keys returns the keys that have state, sorted.
func (m *MemStore) Keys() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.keys))
	for k := range m.keys {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
