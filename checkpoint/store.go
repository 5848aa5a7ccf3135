package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Kinds of state sluice keeps. Other kinds may be added; a kind is any
// non-empty text.
const (
	// KindOnce: a once-flow's start and completion (OnceState).
	KindOnce = "once"
	// KindSnapshot: the snapshot versions a snapshot flow applied
	// (SnapshotState).
	KindSnapshot = "snapshot"
	// KindCursor: where an incremental file source's cursor stands
	// (CursorState).
	KindCursor = "cursor"
	// KindFirstOffsets: per topic and partition (the key's Name), the first
	// Kafka offset a flow ever consumed (FirstOffset).
	KindFirstOffsets = "first_offsets"
	// KindCutOver: the live changes of a flow that came older than their
	// key's last replayed change (CutOverState).
	KindCutOver = "cutover"
	// KindTarget: per CDC target (the key's Name), what its rows and key
	// states were written under: its keys, SCD type and sequence type.
	KindTarget = "target"
)

var (
	// ErrNotFound: the key has no value (it was never written, or it was
	// deleted). Get returns it together with the key's revision.
	ErrNotFound = errors.New("checkpoint: not found")
	// ErrStale: a Put named a revision that is not the stored one, so it was
	// based on a stale read; nothing was written. Read again and decide.
	ErrStale = errors.New("checkpoint: stale revision")
	// ErrClosed: the Store was closed.
	ErrClosed = errors.New("checkpoint: store closed")
)

// Key names one entry. Pipeline and Kind are required; Flow and Name are
// optional (Name tells apart the entries of one flow and kind, such as one
// per topic and partition).
//
// As a prefix (Delete, List) a Key selects every entry whose parts equal
// its non-empty parts: Key{Pipeline: "p"} selects the whole pipeline,
// Key{Pipeline: "p", Flow: "f"} every kind of flow f, Key{Pipeline: "p",
// Kind: KindCursor} every cursor of the pipeline.
type Key struct {
	Pipeline, Kind, Flow, Name string
}

// Entry is a stored value and its revision.
type Entry struct {
	// Value is the stored bytes; Put refuses an empty one (use Delete).
	Value []byte
	// Revision counts the writes of the key: 0 means never written, and
	// every successful Put or Delete of the key stores Revision+1, so a
	// revision never repeats, even across a Delete. Put takes the revision
	// its caller read; Get returns it also with ErrNotFound.
	Revision uint64
	// UpdatedAt is when the writer stored it, by the writer's clock
	// (implementations may keep whole seconds only). Put ignores it.
	UpdatedAt time.Time
}

// KeyEntry is one entry of a List.
type KeyEntry struct {
	Key Key
	Entry
}

// Store keeps sluice's checkpoints. Implementations are safe for concurrent
// use by goroutines and by several processes sharing one destination.
//
// An error other than ErrNotFound and ErrStale leaves the outcome of a Put
// or Delete unknown (it may have been applied): read again before deciding.
type Store interface {
	// Get returns the entry of key, or ErrNotFound with an Entry whose
	// Revision is the one a Put must give to create it (0 for a key never
	// written, else the revision of its deletion).
	Get(ctx context.Context, key Key) (Entry, error)
	// Put stores e.Value under key with revision e.Revision+1 if the stored
	// revision is e.Revision, else returns ErrStale and writes nothing. It
	// is durable when it returns: a Store opened afterwards on the same
	// destination reads it.
	Put(ctx context.Context, key Key, e Entry) error
	// Delete removes every entry the prefix selects (full refresh); each
	// keeps its revision count. Entries created while it runs may survive.
	// The prefix must name a Pipeline.
	Delete(ctx context.Context, prefix Key) error
	// List returns the entries the prefix selects, ordered by Pipeline,
	// Kind, Flow and Name. Deleted entries are not listed.
	List(ctx context.Context, prefix Key) ([]KeyEntry, error)
	// Close releases the Store's resources; later calls fail with ErrClosed.
	Close() error
}

// Validate reports whether k can name an entry: Pipeline and Kind are set.
func (k Key) Validate() error {
	if k.Pipeline == "" || k.Kind == "" {
		return fmt.Errorf("checkpoint: key %s: pipeline and kind are required", k)
	}
	return nil
}

// ValidatePrefix reports whether k can select entries to delete: Pipeline
// is set.
func (k Key) ValidatePrefix() error {
	if k.Pipeline == "" {
		return fmt.Errorf("checkpoint: prefix %s: pipeline is required", k)
	}
	return nil
}

// ValidatePut reports whether Put may store e under key.
func ValidatePut(key Key, e Entry) error {
	if err := key.Validate(); err != nil {
		return err
	}
	if len(e.Value) == 0 {
		return fmt.Errorf("checkpoint: put %s: empty value (use Delete)", key)
	}
	return nil
}

// Matches reports whether k, as a prefix, selects other: each non-empty part
// of k equals the same part of other.
func (k Key) Matches(other Key) bool {
	return (k.Pipeline == "" || k.Pipeline == other.Pipeline) &&
		(k.Kind == "" || k.Kind == other.Kind) &&
		(k.Flow == "" || k.Flow == other.Flow) &&
		(k.Name == "" || k.Name == other.Name)
}

// Compare orders keys by Pipeline, Kind, Flow and Name.
func (k Key) Compare(other Key) int {
	for _, p := range [][2]string{{k.Pipeline, other.Pipeline}, {k.Kind, other.Kind}, {k.Flow, other.Flow}, {k.Name, other.Name}} {
		if c := strings.Compare(p[0], p[1]); c != 0 {
			return c
		}
	}
	return 0
}

// String is the key's stored form: its four parts escaped and joined by
// "/" (pipeline/kind/flow/name). In each part '%', '/' and control bytes
// are written %XX, so the parts never contain "/" and ParseKey reverses it.
func (k Key) String() string {
	var b strings.Builder
	b.Grow(len(k.Pipeline) + len(k.Kind) + len(k.Flow) + len(k.Name) + 3)
	escapeTo(&b, k.Pipeline)
	b.WriteByte('/')
	escapeTo(&b, k.Kind)
	b.WriteByte('/')
	escapeTo(&b, k.Flow)
	b.WriteByte('/')
	escapeTo(&b, k.Name)
	return b.String()
}

// ScanPrefix is a prefix of the stored form (String) that every key k
// selects starts with: its leading non-empty parts, each followed by "/".
// Implementations scan it and filter with Matches.
func (k Key) ScanPrefix() string {
	var b strings.Builder
	for _, p := range []string{k.Pipeline, k.Kind, k.Flow} {
		if p == "" {
			break
		}
		escapeTo(&b, p)
		b.WriteByte('/')
	}
	return b.String()
}

// ParseKey reverses Key.String.
func ParseKey(s string) (Key, error) {
	parts := strings.Split(s, "/")
	if len(parts) != 4 {
		return Key{}, fmt.Errorf("checkpoint: stored key %q: want 4 parts separated by /", s)
	}
	var out [4]string
	for i, p := range parts {
		u, err := unescape(p)
		if err != nil {
			return Key{}, fmt.Errorf("checkpoint: stored key %q: %w", s, err)
		}
		out[i] = u
	}
	return Key{Pipeline: out[0], Kind: out[1], Flow: out[2], Name: out[3]}, nil
}

const hexDigits = "0123456789ABCDEF"

func needsEscape(c byte) bool { return c == '%' || c == '/' || c < 0x20 || c == 0x7f }

func escapeTo(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if needsEscape(c) {
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
			continue
		}
		b.WriteByte(c)
	}
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func unescape(s string) (string, error) {
	if !strings.Contains(s, "%") {
		for i := 0; i < len(s); i++ {
			if needsEscape(s[i]) {
				return "", fmt.Errorf("unescaped byte %#x", s[i])
			}
		}
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			if needsEscape(c) {
				return "", fmt.Errorf("unescaped byte %#x", c)
			}
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(s) {
			return "", errors.New("escape cut short")
		}
		hi, ok1 := unhex(s[i+1])
		lo, ok2 := unhex(s[i+2])
		v := hi<<4 | lo
		if !ok1 || !ok2 || !needsEscape(v) {
			return "", fmt.Errorf("bad escape %q", s[i:i+3])
		}
		b.WriteByte(v)
		i += 2
	}
	return b.String(), nil
}
