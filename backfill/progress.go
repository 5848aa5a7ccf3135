package backfill

import (
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// DefaultProgressInterval is how often Bar logs progress when its writer is
// not a terminal.
const DefaultProgressInterval = 5 * time.Second

// Progress tracks a backfill against its plan: files, rows and bytes done,
// and an estimate of the time left. It is safe for concurrent use.
type Progress struct {
	// Interval between log lines when Bar's writer is not a terminal;
	// default DefaultProgressInterval. Set before calling Bar.
	Interval time.Duration

	files int
	bytes int64
	now   func() time.Time

	mu          sync.Mutex
	start       time.Time
	filesDone   int
	rows        int64
	deadLetters int64
	bytesRead   int64 // read by this run
	bytesSkip   int64 // skipped by resumed reads: done before this run
}

// ProgressState is a snapshot of a Progress.
type ProgressState struct {
	Files, FilesDone int
	Rows             int64 // rows loaded
	DeadLetters      int64
	Bytes, BytesDone int64 // BytesDone includes what resumed reads skipped
	BytesRead        int64 // read by this run: BytesDone without what resumed reads skipped
	Elapsed          time.Duration
	ETA              time.Duration // -1 while unknown
	// RowsPerSec and BytesPerSec are the rates of this run: its rows and
	// BytesRead over Elapsed. What a resumed read skipped took no time of
	// it, so it does not count.
	RowsPerSec, BytesPerSec float64
}

// NewProgress returns the progress of reading files, starting now.
func NewProgress(files []File) *Progress {
	p := &Progress{files: len(files), now: time.Now}
	for _, f := range files {
		p.bytes += f.Size
	}
	p.start = p.now()
	return p
}

// Add counts a delivered chunk; one with Done completes its file.
func (p *Progress) Add(c *Chunk) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rows += int64(c.Batch.Len())
	p.deadLetters += int64(len(c.DeadLetters))
	p.bytesRead += c.Bytes
	p.bytesSkip += c.Skipped
	if c.Done {
		p.filesDone++
	}
}

// State returns the current counts and the estimated time left: the bytes
// left at the rate bytes were read so far.
func (p *Progress) State() ProgressState {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := ProgressState{
		Files: p.files, FilesDone: p.filesDone, Rows: p.rows, DeadLetters: p.deadLetters,
		Bytes: p.bytes, BytesDone: p.bytesRead + p.bytesSkip, BytesRead: p.bytesRead, Elapsed: p.now().Sub(p.start), ETA: -1,
	}
	if sec := s.Elapsed.Seconds(); sec > 0 {
		s.RowsPerSec, s.BytesPerSec = float64(s.Rows)/sec, float64(s.BytesRead)/sec
	}
	left := max(s.Bytes-s.BytesDone, 0)
	switch {
	case left == 0 && s.FilesDone >= s.Files:
		s.ETA = 0
	case p.bytesRead > 0 && s.Elapsed > 0:
		s.ETA = time.Duration(float64(s.Elapsed) * float64(left) / float64(p.bytesRead)).Round(time.Second)
	}
	return s
}

// Bar shows the progress on w until stop is called: a progress bar when w
// is a terminal, else an Info line on log every Interval (and a last one on
// stop). log may be nil (discard).
func (p *Progress) Bar(w io.Writer, log *slog.Logger) (stop func()) {
	return p.show(w, log, isTerminal(w))
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(f.Fd()))
}

func (p *Progress) show(w io.Writer, log *slog.Logger, terminal bool) (stop func()) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	interval := p.Interval
	if interval <= 0 {
		interval = DefaultProgressInterval
	}
	var bar *progressbar.ProgressBar
	var newline sync.Once // the bar ends its line once, whether it filled up or stopped short
	if terminal {
		interval = 200 * time.Millisecond
		out := w
		if c, ok := w.(*Console); ok {
			out = c.bar() // log lines written to c go above the bar
		}
		// The bar's own rate and time left would count what resumed reads
		// skipped as read in no time: the description carries this run's.
		bar = progressbar.NewOptions64(max(p.bytes, 1),
			progressbar.OptionSetWriter(out),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(0),
			progressbar.OptionOnCompletion(func() { newline.Do(func() { fmt.Fprintln(out) }) }),
		)
	}
	update := func() {
		s := p.State()
		if bar != nil {
			bar.Describe(s.describe())
			_ = bar.Set64(min(s.BytesDone, max(p.bytes, 1)))
			_ = bar.RenderBlank() // the description changes more often than the percentage
			return
		}
		eta := "unknown"
		if s.ETA >= 0 {
			eta = s.ETA.String()
		}
		log.Info("backfill progress", "files_done", s.FilesDone, "files", s.Files, "rows", s.Rows,
			"dead_letters", s.DeadLetters, "bytes_done", s.BytesDone, "bytes", s.Bytes, "eta", eta,
			"rows_per_s", int64(s.RowsPerSec), "bytes_per_s", int64(s.BytesPerSec))
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				update()
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			<-finished
			update()
			if bar != nil {
				_ = bar.Exit() // keeps the bar as it stands: an interrupted backfill is not shown full
			}
		})
	}
}

// describe is the text beside the progress bar: counts, this run's rates
// and the time left.
func (s ProgressState) describe() string {
	eta := "?"
	if s.ETA >= 0 {
		eta = s.ETA.String()
	}
	return fmt.Sprintf("files %d/%d, rows %d, %s of %s, %d rows/s, %s/s, eta %s",
		s.FilesDone, s.Files, s.Rows, humanBytes(float64(s.BytesDone)), humanBytes(float64(s.Bytes)),
		int64(s.RowsPerSec), humanBytes(s.BytesPerSec), eta)
}

// humanBytes writes a byte count with a decimal unit: 532 B, 12.3 MB.
func humanBytes(n float64) string {
	units := []string{"B", "kB", "MB", "GB", "TB", "PB"}
	i := 0
	for n >= 1000 && i < len(units)-1 {
		n /= 1000
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0f B", n)
	}
	return fmt.Sprintf("%.1f %s", n, units[i])
}
