package backfill

import (
	"bytes"
	"io"
	"strings"
	"sync"
	"unicode/utf8"
)

// Console is a terminal that a progress bar and log lines share. The bar
// redraws its line in place; a log line written to the Console (a
// slog handler's writer) first clears the bar's line, then goes out,
// and the bar is drawn again under it, so that log lines are never
// printed through the bar. Pass it to Progress.Bar as its writer. It is
// safe for concurrent use.
type Console struct {
	mu    sync.Mutex
	out   io.Writer
	frame []byte // the bar's line as drawn last; empty when none is shown
}

// NewConsole returns a Console writing to out.
func NewConsole(out io.Writer) *Console { return &Console{out: out} }

// Write writes log output: whole lines, as a log handler writes a record.
func (c *Console) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.frame) == 0 {
		return c.out.Write(p)
	}
	var b bytes.Buffer
	b.WriteByte('\r')
	b.WriteString(strings.Repeat(" ", utf8.RuneCount(c.frame)))
	b.WriteByte('\r')
	b.Write(p)
	if len(p) > 0 && p[len(p)-1] != '\n' {
		b.WriteByte('\n')
	}
	b.WriteByte('\r')
	b.Write(c.frame)
	if _, err := c.out.Write(b.Bytes()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Fd is the file descriptor of the terminal, when out has one: a Console
// on a terminal is a terminal (Progress.Bar draws a bar on it).
func (c *Console) Fd() uintptr {
	if f, ok := c.out.(interface{ Fd() uintptr }); ok {
		return f.Fd()
	}
	return ^uintptr(0)
}

// bar returns the writer a progress bar draws with: it keeps what the
// bar's line shows, to draw it again under a log line.
func (c *Console) bar() io.Writer { return barWriter{c} }

type barWriter struct{ c *Console }

func (w barWriter) Write(p []byte) (int, error) {
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	// The bar draws its line from a carriage return, and ends it with a
	// newline when done.
	line := p
	if i := bytes.LastIndexAny(line, "\r\n"); i >= 0 {
		c.frame = c.frame[:0]
		line = line[i+1:]
	}
	c.frame = append(c.frame, line...)
	return c.out.Write(p)
}
