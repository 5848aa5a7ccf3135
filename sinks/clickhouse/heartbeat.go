package clickhouse

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/sinks"
)

// Heartbeats live in _sluice_heartbeats, a ReplacingMergeTree(version)
// ordered by (pipeline, id) and read with FINAL: a beat inserts a row with a
// higher version, EndBeat a tombstone row (ended = 1) with a higher version
// still. Times are whole seconds.

// Beat writes or renews a heartbeat. The sink also remembers the id as the
// owner of the loads it begins from now on, so that recovery in another
// process leaves them alone while the heartbeat lives.
func (s *Sink) Beat(ctx context.Context, hb sinks.Heartbeat) error {
	if err := s.ensureSystem(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	s.owner = hb.ID
	v := s.nextVersion(hb.BeatAt)
	s.mu.Unlock()
	if err := s.insertBeat(ctx, hb, false, v); err != nil {
		return fmt.Errorf("clickhouse: heartbeat %s: %w", hb.ID, err)
	}
	return nil
}

// nextVersion returns a version above every one this sink wrote and at
// least the microseconds of at. Callers hold s.mu.
func (s *Sink) nextVersion(at time.Time) uint64 {
	v := max(uint64(max(at.UnixMicro(), time.Now().UnixMicro())), s.hbSeq+1)
	s.hbSeq = v
	return v
}

func (s *Sink) insertBeat(ctx context.Context, hb sinks.Heartbeat, ended bool, version uint64) error {
	b, err := s.conn.PrepareBatch(ctx, "INSERT INTO "+s.table(heartbeatsTable)+
		" (pipeline, id, kind, host, pid, beat_at, expires, ended, version)")
	if err != nil {
		return err
	}
	var end uint8
	if ended {
		end = 1
	}
	if err := b.Append(hb.Pipeline, hb.ID, hb.Kind, hb.Host, int64(hb.PID), hb.BeatAt.UTC().Truncate(time.Second),
		ceilSecond(hb.Expires), end, version); err != nil {
		b.Abort()
		return err
	}
	return b.Send()
}

// Heartbeats returns the pipeline's heartbeats that expire after now.
func (s *Sink) Heartbeats(ctx context.Context, pipeline string, now time.Time) ([]sinks.Heartbeat, error) {
	if err := s.ensureSystem(ctx); err != nil {
		return nil, err
	}
	all, err := s.readBeats(ctx, "pipeline = ?", pipeline)
	if err != nil {
		return nil, err
	}
	out := all[:0]
	for _, hb := range all {
		if hb.Expires.After(now) {
			out = append(out, hb)
		}
	}
	return out, nil
}

// readBeats reads the heartbeats that have not ended, with the condition.
func (s *Sink) readBeats(ctx context.Context, where string, args ...any) ([]sinks.Heartbeat, error) {
	rows, err := s.conn.Query(ctx, "SELECT pipeline, id, kind, host, pid, beat_at, expires, ended FROM "+
		s.table(heartbeatsTable)+" FINAL WHERE "+where, args...)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: read heartbeats: %w", err)
	}
	defer rows.Close()
	var out []sinks.Heartbeat
	for rows.Next() {
		var hb sinks.Heartbeat
		var pid int64
		var ended uint8
		if err := rows.Scan(&hb.Pipeline, &hb.ID, &hb.Kind, &hb.Host, &pid, &hb.BeatAt, &hb.Expires, &ended); err != nil {
			return nil, fmt.Errorf("clickhouse: read heartbeats: %w", err)
		}
		if ended != 0 {
			continue
		}
		hb.PID = int(pid)
		hb.BeatAt, hb.Expires = hb.BeatAt.UTC(), hb.Expires.UTC()
		out = append(out, hb)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("clickhouse: read heartbeats: %w", err)
	}
	return out, nil
}

// aliveOwners returns the ids of every heartbeat, of any pipeline, that has
// not expired by this machine's clock.
func (s *Sink) aliveOwners(ctx context.Context) (map[string]bool, error) {
	beats, err := s.readBeats(ctx, "1")
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := map[string]bool{}
	for _, hb := range beats {
		if hb.Expires.After(now) {
			out[hb.ID] = true
		}
	}
	return out, nil
}

// EndBeat removes a heartbeat by writing a tombstone that outranks it.
func (s *Sink) EndBeat(ctx context.Context, pipeline, id string) error {
	if err := s.ensureSystem(ctx); err != nil {
		return err
	}
	rows, err := s.conn.Query(ctx, "SELECT max(version), count() FROM "+s.table(heartbeatsTable)+" WHERE pipeline = ? AND id = ?", pipeline, id)
	if err != nil {
		return fmt.Errorf("clickhouse: end heartbeat %s: %w", id, err)
	}
	var last, n uint64
	for rows.Next() {
		if err := rows.Scan(&last, &n); err != nil {
			rows.Close()
			return fmt.Errorf("clickhouse: end heartbeat %s: %w", id, err)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("clickhouse: end heartbeat %s: %w", id, err)
	}
	if n == 0 {
		return nil
	}
	s.mu.Lock()
	v := max(s.nextVersion(time.Time{}), last+1)
	s.hbSeq = v
	s.mu.Unlock()
	now := time.Now()
	if err := s.insertBeat(ctx, sinks.Heartbeat{Pipeline: pipeline, ID: id, BeatAt: now, Expires: now}, true, v); err != nil {
		return fmt.Errorf("clickhouse: end heartbeat %s: %w", id, err)
	}
	return nil
}

// ceilSecond rounds t up to a whole second: a DateTime column keeps whole
// seconds, and an expiry rounded down would make a live heartbeat look
// expired between two renewals.
func ceilSecond(t time.Time) time.Time {
	t = t.UTC()
	if d := t.Truncate(time.Second); !d.Equal(t) {
		return d.Add(time.Second)
	}
	return t
}
