package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/sinks"
)

// heartbeatGrace is how long an expired heartbeat file stays before
// Heartbeats removes it (a process killed without EndBeat).
const heartbeatGrace = time.Hour

// Beat writes or renews a heartbeat: _sluice/heartbeats/<pipeline>/<id>.json,
// replaced atomically (a temporary file renamed over it). Heartbeats are not
// synced: after a machine crash no process of the pipeline is alive anyway.
func (s *Sink) Beat(ctx context.Context, hb sinks.Heartbeat) error {
	if s.closed.Load() {
		return errClosed
	}
	if hb.Pipeline == "" || hb.ID == "" {
		return errors.New("local: beat: heartbeat needs a pipeline and an id")
	}
	dir := s.lay.heartbeatDir(hb.Pipeline)
	if err := s.disk.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("local: beat: %w", err)
	}
	data, err := json.Marshal(hb)
	if err != nil {
		return fmt.Errorf("local: beat: %w", err)
	}
	path := filepath.Join(dir, fsName(hb.ID)+".json")
	tmp := filepath.Join(dir, ".tmp-"+randomSuffix())
	if err := s.disk.WriteFile(tmp, data, 0o644); err != nil {
		s.disk.Remove(tmp)
		return fmt.Errorf("local: beat: %w", err)
	}
	if err := s.disk.Rename(tmp, path); err != nil {
		s.disk.Remove(tmp)
		return fmt.Errorf("local: beat: %w", err)
	}
	return nil
}

// Heartbeats returns the pipeline's heartbeats that expire after now, by id.
// Files expired for more than an hour are removed.
func (s *Sink) Heartbeats(ctx context.Context, pipeline string, now time.Time) ([]sinks.Heartbeat, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	dir := s.lay.heartbeatDir(pipeline)
	ents, err := s.disk.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("local: heartbeats: %w", err)
	}
	var out []sinks.Heartbeat
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		data, err := s.disk.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // ended meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("local: heartbeats: %w", err)
		}
		var hb sinks.Heartbeat
		if err := json.Unmarshal(data, &hb); err != nil {
			return nil, fmt.Errorf("local: heartbeats: %s: %w", path, err)
		}
		if hb.Expires.After(now) {
			out = append(out, hb)
		} else if now.Sub(hb.Expires) > heartbeatGrace {
			s.disk.Remove(path)
		}
	}
	slices.SortFunc(out, func(a, b sinks.Heartbeat) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// EndBeat removes a heartbeat; a missing one is not an error.
func (s *Sink) EndBeat(ctx context.Context, pipeline, id string) error {
	if s.closed.Load() {
		return errClosed
	}
	err := s.disk.Remove(filepath.Join(s.lay.heartbeatDir(pipeline), fsName(id)+".json"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("local: end beat: %w", err)
	}
	return nil
}
