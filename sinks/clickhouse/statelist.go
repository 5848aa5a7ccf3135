package clickhouse

import (
	"context"
	"fmt"

	"github.com/sluicehq/sluice/sinks"
)

var _ sinks.StateLister = (*Sink)(nil)

// StateKeys pages through the keys of a CDC target's state in
// _sluice_cdc_state, in key order, as of the last committed load.
func (s *Sink) StateKeys(ctx context.Context, table, after string, limit int) ([]string, error) {
	if ss, err := s.cdcServer(ctx, table); err != nil || ss != nil {
		if err != nil {
			return nil, err
		}
		return ss.StateKeys(ctx, table, after, limit)
	}
	if _, err := s.GetState(ctx, table, nil); err != nil { // settles the target's committed loads
		return nil, err
	}
	rows, err := s.conn.Query(ctx, "SELECT key FROM "+s.table(s.stateRead())+
		" WHERE target = ? AND key > ? GROUP BY key HAVING argMax(deleted, version) = 0 ORDER BY key LIMIT ?", table, after, uint64(limit))
	if err != nil {
		return nil, fmt.Errorf("clickhouse: state keys of %s: %w", table, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, fmt.Errorf("clickhouse: state keys of %s: %w", table, err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("clickhouse: state keys of %s: %w", table, err)
	}
	return out, nil
}
