package checkpoint

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Memory is a Store in memory, for tests and dry runs: nothing survives the
// process. It is safe for concurrent use; Close does nothing, so one Memory
// can stand for a destination that several Stores open.
type Memory struct {
	mu      sync.Mutex
	entries map[Key]memEntry
}

type memEntry struct {
	value    []byte // nil: deleted
	revision uint64
	at       time.Time
}

// NewMemory returns an empty Memory.
func NewMemory() *Memory { return &Memory{entries: map[Key]memEntry{}} }

var _ Store = (*Memory)(nil)

// Get implements Store.
func (m *Memory) Get(ctx context.Context, key Key) (Entry, error) {
	if err := key.Validate(); err != nil {
		return Entry{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	me := m.entries[key]
	if me.value == nil {
		return Entry{Revision: me.revision}, fmt.Errorf("checkpoint: get %s: %w", key, ErrNotFound)
	}
	return Entry{Value: slices.Clone(me.value), Revision: me.revision, UpdatedAt: me.at}, nil
}

// Put implements Store.
func (m *Memory) Put(ctx context.Context, key Key, e Entry) error {
	if err := ValidatePut(key, e); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	me := m.entries[key]
	if me.revision != e.Revision {
		return fmt.Errorf("checkpoint: put %s at revision %d, stored %d: %w", key, e.Revision, me.revision, ErrStale)
	}
	m.entries[key] = memEntry{value: slices.Clone(e.Value), revision: e.Revision + 1, at: time.Now().UTC()}
	return nil
}

// Delete implements Store.
func (m *Memory) Delete(ctx context.Context, prefix Key) error {
	if err := prefix.ValidatePrefix(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now().UTC()
	for k, me := range m.entries {
		if me.value != nil && prefix.Matches(k) {
			m.entries[k] = memEntry{revision: me.revision + 1, at: now}
		}
	}
	return nil
}

// List implements Store.
func (m *Memory) List(ctx context.Context, prefix Key) ([]KeyEntry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []KeyEntry
	for k, me := range m.entries {
		if me.value != nil && prefix.Matches(k) {
			out = append(out, KeyEntry{Key: k, Entry: Entry{Value: slices.Clone(me.value), Revision: me.revision, UpdatedAt: me.at}})
		}
	}
	SortEntries(out)
	return out, nil
}

// Close implements Store; it does nothing.
func (m *Memory) Close() error { return nil }

// SortEntries orders entries by key, as List returns them.
func SortEntries(entries []KeyEntry) {
	slices.SortFunc(entries, func(a, b KeyEntry) int { return a.Key.Compare(b.Key) })
}
