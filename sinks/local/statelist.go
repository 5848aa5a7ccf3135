package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	bolt "go.etcd.io/bbolt"

	"github.com/sluicehq/sluice/sinks"
)

var _ sinks.StateLister = (*Sink)(nil)

// StateKeys pages through the keys of a CDC target's state.db in key
// order, as of the last committed load (GetState publishes first when a
// committed load's states are missing).
func (s *Sink) StateKeys(ctx context.Context, table, after string, limit int) ([]string, error) {
	if _, err := s.GetState(ctx, table, nil); err != nil {
		return nil, err
	}
	db, err := s.openState(table, true)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("local: state keys of %s: %w", table, err)
	}
	defer db.Close()
	var out []string
	err = db.View(func(tx *bolt.Tx) error {
		if cb := tx.Bucket(stateChunks); cb != nil {
			out, err = chunkKeys(cb, after, limit)
			return err
		}
		kb := tx.Bucket(stateKeys) // a file made before chunks
		if kb == nil {
			return nil
		}
		c := kb.Cursor()
		k, _ := c.Seek([]byte(after))
		if k != nil && after != "" && bytes.Equal(k, []byte(after)) {
			k, _ = c.Next()
		}
		for ; k != nil && len(out) < limit; k, _ = c.Next() {
			out = append(out, string(k))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("local: state keys of %s: %w", table, err)
	}
	return out, nil
}

// chunkKeys returns up to limit keys of the chunks of b that follow after
// ("" for the first), in key order.
func chunkKeys(b *bolt.Bucket, after string, limit int) ([]string, error) {
	var out []string
	c := b.Cursor()
	var k, v []byte
	if after == "" {
		k, v = c.First()
	} else {
		// The chunk after belongs to, or the first when it is below them.
		if k, v = seekChunk(c, after); k == nil {
			k, v = c.First()
		}
	}
	var states []stateKV
	for ; k != nil && len(out) < limit; k, v = c.Next() {
		var err error
		if states, err = decodeChunk(v, states[:0]); err != nil {
			return nil, err
		}
		for _, e := range states {
			if len(out) == limit {
				break
			}
			if after == "" || e.k > after {
				out = append(out, strings.Clone(e.k))
			}
		}
	}
	return out, nil
}
