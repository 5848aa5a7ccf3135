package backfill

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
)

// rowsChunk returns a chunk of n rows accounting for bytes of its file,
// after skipped bytes a resumed read did not read.
func rowsChunk(n int, bytes, skipped int64, done bool) *Chunk {
	b := batch.New(batch.Schema{Columns: []batch.Column{{Name: "id", Type: batch.Int64}}}, n)
	for i := range n {
		b.Vectors[0].AppendInt(int64(i))
	}
	return &Chunk{Batch: b, Bytes: bytes, Skipped: skipped, Done: done}
}

// TestProgressRate checks the rates of a run that resumed two files: rows
// and bytes read over the time since the run started, what the resumed
// reads skipped counting neither as read nor as time.
func TestProgressRate(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := NewProgress([]File{{Name: "a", Size: 10_000_000}, {Name: "b", Size: 10_000_000}})
	p.now = func() time.Time { return now }
	p.start = now
	if s := p.State(); s.RowsPerSec != 0 || s.BytesPerSec != 0 || s.ETA != -1 {
		t.Fatalf("before any chunk: %+v", s)
	}
	// File a was read to 9 MB before this run: its first chunk skips them.
	now = now.Add(2 * time.Second)
	p.Add(rowsChunk(1000, 1_000_000, 9_000_000, true))
	s := p.State()
	if s.BytesDone != 10_000_000 || s.BytesRead != 1_000_000 {
		t.Fatalf("bytes done %d, read %d; want 10 MB done, 1 MB read", s.BytesDone, s.BytesRead)
	}
	if s.RowsPerSec != 500 || s.BytesPerSec != 500_000 {
		t.Fatalf("rates %v rows/s, %v B/s; want 500 rows/s and 500 kB/s (the 9 MB skipped took no time)", s.RowsPerSec, s.BytesPerSec)
	}
	// 10 MB left at 1 MB per 2 s.
	if s.ETA != 20*time.Second {
		t.Fatalf("eta %s, want 20s", s.ETA)
	}
	now = now.Add(2 * time.Second)
	p.Add(rowsChunk(3000, 3_000_000, 0, false))
	if s := p.State(); s.RowsPerSec != 1000 || s.BytesPerSec != 1_000_000 || s.ETA != 7*time.Second {
		t.Fatalf("after 4 s: %v rows/s, %v B/s, eta %s; want 1000 rows/s, 1 MB/s, 7s", s.RowsPerSec, s.BytesPerSec, s.ETA)
	}
	if d := p.State().describe(); !strings.Contains(d, "1000 rows/s, 1.0 MB/s, eta 7s") || !strings.Contains(d, "13.0 MB of 20.0 MB") {
		t.Fatalf("bar description %q", d)
	}
}

// screen replays what a terminal shows of out: a carriage return goes
// back to the line's start, characters overwrite, a newline ends the line.
func screen(out string) []string {
	var lines []string
	var cur []rune
	col := 0
	for _, r := range out {
		switch r {
		case '\r':
			col = 0
		case '\n':
			lines = append(lines, strings.TrimRight(string(cur), " "))
			cur, col = nil, 0
		default:
			if col < len(cur) {
				cur[col] = r
			} else {
				cur = append(cur, r)
			}
			col++
		}
	}
	return append(lines, strings.TrimRight(string(cur), " "))
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestConsoleLogsAboveTheBar checks that a log line written while the bar
// is shown lands on a line of its own, and the bar is drawn again under it.
func TestConsoleLogsAboveTheBar(t *testing.T) {
	var out lockedBuffer
	c := NewConsole(&out)
	log := slog.New(slog.NewTextHandler(c, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}))
	p := NewProgress([]File{{Name: "a", Size: 1000}})
	stop := p.show(c, log, true)
	p.Add(rowsChunk(10, 400, 0, false))
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), "files 0/1") {
		if time.Now().After(deadline) {
			t.Fatalf("no bar drawn: %q", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	log.Info("a file was read", "file", "a")
	lines := screen(out.String())
	if n := len(lines); n < 2 || lines[n-2] != `level=INFO msg="a file was read" file=a` || !strings.Contains(lines[n-1], "files 0/1") {
		t.Fatalf("screen after a log line:\n%s\nwant the log line on its own, then the bar", strings.Join(lines, "\n"))
	}
	p.Add(rowsChunk(10, 600, 0, true))
	stop()
	log.Info("done")
	lines = screen(out.String())
	if n := len(lines); lines[n-1] != "" || lines[n-2] != `level=INFO msg=done` || !strings.Contains(lines[n-3], "files 1/1") {
		t.Fatalf("screen after the bar ended:\n%s\nwant the last bar, then the log line", strings.Join(lines, "\n"))
	}
	for _, l := range lines {
		if strings.Contains(l, "level=") && strings.Contains(l, "files") {
			t.Fatalf("a log line printed through the bar: %q", l)
		}
	}
}
