package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"

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
		kb := tx.Bucket(stateKeys)
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
