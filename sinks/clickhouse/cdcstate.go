package clickhouse

import (
	"context"
	"fmt"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/ext"
	chcol "github.com/ClickHouse/clickhouse-go/v2/lib/column"
)

// Hidden CDC state lives in _sluice_cdc_state, a ReplacingMergeTree(version)
// partitioned by target and ordered by (target, key): one row per state
// version, value the engine's serialized state, deleted = 1 for a removed
// state. Loads stage their states like their rows and publish them together,
// so GetState, which reads only published rows, first makes sure that every
// committed load of the target is published (settle).

// stateChunk is how many keys one GetState query sends as external data.
const stateChunk = 100_000

// GetState returns the state of each key that has one, as of the last
// committed load of table. The keys travel as external data (a temporary
// table of the query), not in the query text, so any number of them fits
// in max_query_size.
func (s *Sink) GetState(ctx context.Context, table string, keys []string) (map[string][]byte, error) {
	if ss, err := s.cdcServer(ctx, table); err != nil || ss != nil {
		if err != nil {
			return nil, err
		}
		return ss.GetState(ctx, table, keys)
	}
	if _, err := s.stateReady(ctx, table, "read state of"); err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(keys))
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), stateChunk)]
		keys = keys[len(chunk):]
		if err := s.readStates(ctx, table, chunk, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// HasKeyStates reports whether any key of table has a state row (a
// removed one counts, until a compaction drops it), as of the last
// committed load of table.
func (s *Sink) HasKeyStates(ctx context.Context, table string) (bool, error) {
	if ss, err := s.cdcServer(ctx, table); err != nil || ss != nil {
		if err != nil {
			return false, err
		}
		return ss.HasKeyStates(ctx, table)
	}
	if _, err := s.stateReady(ctx, table, "probe key states of"); err != nil {
		return false, err
	}
	n, err := s.queryUint(ctx, "SELECT count() FROM (SELECT key FROM "+s.table(s.stateRead())+" WHERE target = ? AND key != '' LIMIT 1)", table)
	if err != nil {
		return false, fmt.Errorf("clickhouse: probe key states of %s: %w", table, err)
	}
	return n > 0, nil
}

func (s *Sink) readStates(ctx context.Context, table string, keys []string, out map[string][]byte) error {
	keyTable, err := ext.NewTable("sluice_keys", ext.Column("key", chcol.Type("String")))
	if err != nil {
		return fmt.Errorf("clickhouse: read state of %s: %w", table, err)
	}
	if _, err := keyTable.Block().Columns[0].Append(keys); err != nil {
		return fmt.Errorf("clickhouse: read state of %s: %w", table, err)
	}
	ctx = clickhouse.Context(ctx, clickhouse.WithExternalTable(keyTable))
	in := " IN "
	if s.sharded() {
		in = " GLOBAL IN " // the keys go to each shard with the query
	}
	rows, err := s.conn.Query(ctx, "SELECT key, argMax(value, version), argMax(deleted, version) FROM "+s.table(s.stateRead())+
		" WHERE target = ? AND key"+in+"(SELECT key FROM sluice_keys) GROUP BY key", table)
	if err != nil {
		return fmt.Errorf("clickhouse: read state of %s: %w", table, err)
	}
	defer rows.Close()
	for rows.Next() {
		var key, value string
		var deleted uint8
		if err := rows.Scan(&key, &value, &deleted); err != nil {
			return fmt.Errorf("clickhouse: read state of %s: %w", table, err)
		}
		if deleted == 0 {
			out[key] = []byte(value)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("clickhouse: read state of %s: %w", table, err)
	}
	return nil
}

// stateReady prepares work on a CDC target's committed state: the system
// tables exist, table is a CDC target (its info is returned), and its
// committed loads are published (settle). what names the work in errors,
// before the table's name.
func (s *Sink) stateReady(ctx context.Context, table, what string) (*cdcTable, error) {
	if err := s.ensureSystem(ctx); err != nil {
		return nil, err
	}
	ct, err := s.cdcInfo(ctx, table)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: %s %s: %w", what, table, err)
	}
	return ct, s.settle(ctx, table)
}

// settle makes the committed state of a CDC target readable from its
// published tables: this process's own unresolved loads are resolved (every
// time: cheap when there are none), and committed loads of any process that
// are still unpublished and wrote the target or the state table are
// published, the first time this sink reads the target and after it takes
// the target's lease over. A writer holding the lease is the only one to
// commit loads of the target, so nothing else can appear in between.
func (s *Sink) settle(ctx context.Context, table string) error {
	if err := s.resolvePending(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	done := s.settled[table]
	s.mu.Unlock()
	if done {
		return nil
	}
	if err := s.publishCommitted(ctx, map[string]bool{physName(table): true, s.stateLocal(): true}); err != nil {
		return err
	}
	s.mu.Lock()
	s.settled[table] = true
	s.mu.Unlock()
	return nil
}

// publishCommitted publishes the committed loads, of any process, that have
// a staging table for one of tables, except this process's loads in flight.
// Publication is fenced (see rollForward), so racing with their writer or
// with another recovery is safe.
func (s *Sink) publishCommitted(ctx context.Context, tables map[string]bool) error {
	ages, err := s.objectAges(ctx)
	if err != nil {
		return err
	}
	busy := s.busyLoads()
	loads, _ := groupObjects(ages)
	relevant := map[string]bool{}
	for enc, lo := range loads {
		for name := range lo.stages {
			if _, _, table, _ := parseStage(name); tables[table] && !busy[enc] {
				relevant[enc] = true
			}
		}
	}
	var ids []string
	for enc := range relevant {
		id, err := decodeID(enc)
		if err != nil {
			continue
		}
		loads[enc].id = id
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return nil
	}
	committed, err := s.committedAt(ctx, ids)
	if err != nil {
		return err
	}
	for _, enc := range sortedKeys(relevant) {
		lo := loads[enc]
		if _, ok := committed[lo.id]; !ok || lo.id == "" {
			continue
		}
		if err := s.finishCommitted(ctx, lo); err != nil {
			return err
		}
	}
	return nil
}
