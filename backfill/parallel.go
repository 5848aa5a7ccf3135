package backfill

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/hashicorp/go-multierror"
	"golang.org/x/sync/errgroup"
)

// blockedWarn is how long a reader waits for the sink before it says so,
// and then how often it repeats it.
var blockedWarn = 10 * time.Second

// ReadFilesOptions tune ReadFiles.
type ReadFilesOptions struct {
	// Parallel is how many files are read at once; default GOMAXPROCS.
	Parallel int
	// Open opens one file (typically Open with the source's schema and the
	// file's resume point). Required.
	Open func(ctx context.Context, f File) (Reader, error)
	// Progress, when set, counts every chunk deliver accepted.
	Progress *Progress
	// Log receives a rate-limited warning while readers wait for deliver;
	// nil discards.
	Log *slog.Logger
}

// ReadFiles reads files, Parallel at a time in order of the list, and hands
// every chunk to deliver on the calling goroutine, one at a time: the chunks
// of one file arrive in order, those of different files interleave. At most
// Parallel chunks wait in between, so memory stays bounded by about
// 2×Parallel chunks.
//
// The first error stops the reading: an error of deliver is returned as is;
// files that failed (a *FileError each, several when files failed at once)
// are returned together. A file is only ever delivered in part when it failed
// after its first chunks: the caller commits a file's chunks as it sees fit
// (Chunk.Done marks the last).
func ReadFiles(ctx context.Context, files []File, o ReadFilesOptions, deliver func(ctx context.Context, c *Chunk) error) error {
	if o.Open == nil {
		return errors.New("backfill: ReadFiles without Open")
	}
	if o.Parallel <= 0 {
		o.Parallel = runtime.GOMAXPROCS(0)
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	chunks := make(chan *Chunk, o.Parallel)
	var (
		mu   sync.Mutex
		errs *multierror.Error
	)
	fail := func(err error) {
		mu.Lock()
		errs = multierror.Append(errs, err)
		mu.Unlock()
		cancel()
	}
	readOne := func(f File) {
		r, err := o.Open(ctx, f)
		if err != nil {
			if ctx.Err() == nil {
				fail(err)
			}
			return
		}
		defer r.Close()
		for {
			c, err := r.Next(ctx)
			if err == io.EOF {
				return
			}
			if err != nil {
				if ctx.Err() == nil {
					fail(err)
				}
				return
			}
			if !send(ctx, chunks, c, log) {
				return
			}
		}
	}
	go func() {
		defer close(chunks)
		var g errgroup.Group
		g.SetLimit(o.Parallel)
		for _, f := range files {
			if ctx.Err() != nil {
				break
			}
			g.Go(func() error { readOne(f); return nil })
		}
		_ = g.Wait() // the workers report through fail
	}()
	var deliverErr error
	for c := range chunks {
		if deliverErr != nil {
			continue // drain, so that the readers end
		}
		if err := deliver(ctx, c); err != nil {
			deliverErr = err
			cancel()
			continue
		}
		if o.Progress != nil {
			o.Progress.Add(c)
		}
	}
	switch {
	case deliverErr != nil:
		return deliverErr
	case errs != nil && len(errs.Errors) == 1:
		return errs.Errors[0]
	case errs != nil:
		return errs
	}
	return ctx.Err()
}

// send hands c over, saying so at Warn (every blockedWarn) while it waits.
// It reports false when ctx ended first.
func send(ctx context.Context, chunks chan<- *Chunk, c *Chunk, log *slog.Logger) bool {
	select {
	case chunks <- c:
		return true
	case <-ctx.Done():
		return false
	default:
	}
	start := time.Now()
	t := time.NewTimer(blockedWarn)
	defer t.Stop()
	for {
		select {
		case chunks <- c:
			return true
		case <-ctx.Done():
			return false
		case <-t.C:
			log.Warn("backfill: file reader waiting for the sink", "file", c.File, "waited", time.Since(start).Round(time.Second))
			t.Reset(blockedWarn)
		}
	}
}
