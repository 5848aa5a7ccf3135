package backfill

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/sluicehq/sluice/flows/batch"
)

// filesOf writes n files (JSONL and Parquet alternately) of rows ids each
// and plans them.
func filesOf(t *testing.T, n, rows int) (string, []File) {
	t.Helper()
	dir := t.TempDir()
	for i := range n {
		if i%2 == 0 {
			var b strings.Builder
			for r := range rows {
				fmt.Fprintf(&b, `{"id": %d}`+"\n", r)
			}
			writeFile(t, filepath.Join(dir, fmt.Sprintf("f%02d.jsonl", i)), b.String())
			continue
		}
		vals := make([]any, rows)
		for r := range vals {
			vals[r] = parquet.Int64Value(int64(r))
		}
		writeParquet(t, filepath.Join(dir, fmt.Sprintf("f%02d.parquet", i)), []pcol{{name: "id", node: parquet.Leaf(parquet.Int64Type), vals: vals}}, 7)
	}
	files, err := Plan(dir, "f*")
	if err != nil {
		t.Fatal(err)
	}
	return dir, files
}

func openByExt(s batch.Schema, maxRows int) func(context.Context, File) (Reader, error) {
	return func(_ context.Context, f File) (Reader, error) {
		return Open(f, FormatOf(f.Name), s, ReadOptions{MaxRows: maxRows})
	}
}

func TestReadFiles(t *testing.T) {
	_, files := filesOf(t, 9, 50)
	s := cols(col("id", batch.Int64, false))
	p := NewProgress(files)
	next := map[string]int64{}
	done := map[string]bool{}
	err := ReadFiles(context.Background(), files, ReadFilesOptions{Parallel: 3, Open: openByExt(s, 8), Progress: p},
		func(_ context.Context, c *Chunk) error {
			if done[c.File] {
				t.Errorf("%s: chunk after the last", c.File)
			}
			for _, id := range c.Batch.Vectors[0].Ints {
				if id != next[c.File] {
					t.Errorf("%s: id %d, want %d: chunks out of order", c.File, id, next[c.File])
				}
				next[c.File]++
			}
			done[c.File] = c.Done
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if next[f.Name] != 50 || !done[f.Name] {
			t.Errorf("%s: %d rows, done %v", f.Name, next[f.Name], done[f.Name])
		}
	}
	st := p.State()
	var size int64
	for _, f := range files {
		size += f.Size
	}
	if st.Files != 9 || st.FilesDone != 9 || st.Rows != 9*50 || st.BytesDone != size || st.Bytes != size || st.ETA != 0 {
		t.Errorf("progress %+v, file bytes %d", st, size)
	}
}

func TestReadFilesErrors(t *testing.T) {
	dir, files := filesOf(t, 6, 40)
	writeFile(t, filepath.Join(dir, "f99.parquet"), "PAR1 not really PAR1")
	writeFile(t, filepath.Join(dir, "f98.parquet"), "garbage")
	files, err := Plan(dir, "f*")
	if err != nil {
		t.Fatal(err)
	}
	s := cols(col("id", batch.Int64, false))
	t.Run("corrupt files are reported together", func(t *testing.T) {
		// Both corrupt files are opened at once; each must be named.
		both := []File{files[len(files)-2], files[len(files)-1]}
		err := ReadFiles(context.Background(), both, ReadFilesOptions{Parallel: 2, Open: openByExt(s, 10)},
			func(context.Context, *Chunk) error { return nil })
		var fe *FileError
		if !errors.As(err, &fe) {
			t.Fatalf("error %v, want a *FileError", err)
		}
		msg := err.Error()
		if !strings.Contains(msg, "f98.parquet") && !strings.Contains(msg, "f99.parquet") {
			t.Errorf("error %q names no file", msg)
		}
	})
	t.Run("a corrupt file stops the others", func(t *testing.T) {
		var delivered atomic.Int64
		err := ReadFiles(context.Background(), files, ReadFilesOptions{Parallel: 2, Open: openByExt(s, 5)},
			func(context.Context, *Chunk) error { delivered.Add(1); return nil })
		var fe *FileError
		if !errors.As(err, &fe) || !strings.Contains(fe.File, "f9") {
			t.Fatalf("error %v, want a *FileError of f98 or f99", err)
		}
	})
	t.Run("deliver's error is returned", func(t *testing.T) {
		boom := errors.New("boom")
		calls := 0
		err := ReadFiles(context.Background(), files[:6], ReadFilesOptions{Parallel: 2, Open: openByExt(s, 5)},
			func(context.Context, *Chunk) error {
				calls++
				if calls == 3 {
					return boom
				}
				return nil
			})
		if !errors.Is(err, boom) || calls != 3 {
			t.Errorf("error %v after %d calls, want boom after 3", err, calls)
		}
	})
	t.Run("cancelled context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		err := ReadFiles(ctx, files[:6], ReadFilesOptions{Parallel: 2, Open: openByExt(s, 5)},
			func(context.Context, *Chunk) error { cancel(); return nil })
		if !errors.Is(err, context.Canceled) {
			t.Errorf("error %v, want context.Canceled", err)
		}
	})
	t.Run("no Open", func(t *testing.T) {
		if err := ReadFiles(context.Background(), files, ReadFilesOptions{}, nil); err == nil {
			t.Error("no error without Open")
		}
	})
}

// syncBuffer is a bytes.Buffer safe for the log handler's goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestReadFilesWarnsWhileBlocked(t *testing.T) {
	old := blockedWarn
	blockedWarn = 20 * time.Millisecond
	defer func() { blockedWarn = old }()
	_, files := filesOf(t, 2, 30)
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	s := cols(col("id", batch.Int64, false))
	err := ReadFiles(context.Background(), files, ReadFilesOptions{Parallel: 2, Open: openByExt(s, 5), Log: log},
		func(context.Context, *Chunk) error { time.Sleep(30 * time.Millisecond); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "file reader waiting for the sink") {
		t.Errorf("no warning while blocked; log:\n%s", logs.String())
	}
}

func TestProgress(t *testing.T) {
	files := []File{{Name: "a", Size: 1000}, {Name: "b", Size: 3000}}
	p := NewProgress(files)
	now := p.start
	p.now = func() time.Time { return now }
	if s := p.State(); s.ETA != -1 || s.Bytes != 4000 || s.Files != 2 {
		t.Fatalf("initial state %+v", s)
	}
	rows := func(n int) *batch.Batch {
		b := batch.New(cols(col("id", batch.Int64, false)), n)
		for i := range n {
			b.Vectors[0].AppendInt(int64(i))
		}
		return b
	}
	now = now.Add(10 * time.Second)
	p.Add(&Chunk{Batch: rows(10), Bytes: 1000, Done: true})
	// A resumed read skipped 1000 bytes: done, but not part of the rate.
	now = now.Add(10 * time.Second)
	p.Add(&Chunk{Batch: rows(5), Bytes: 500, Skipped: 1000, DeadLetters: make([]batch.DeadLetter, 2)})
	s := p.State()
	want := ProgressState{Files: 2, FilesDone: 1, Rows: 15, DeadLetters: 2, Bytes: 4000, BytesDone: 2500, BytesRead: 1500,
		Elapsed: 20 * time.Second, ETA: 20 * time.Second, // 1500 left at 1500 bytes per 20 s
		RowsPerSec: 0.75, BytesPerSec: 75}
	if s != want {
		t.Errorf("state %+v, want %+v", s, want)
	}
}

func TestProgressLogLines(t *testing.T) {
	p := NewProgress([]File{{Name: "a", Size: 100}})
	p.Interval = 5 * time.Millisecond
	var logs syncBuffer
	stop := p.Bar(&logs, slog.New(slog.NewTextHandler(&logs, nil)))
	b := batch.New(cols(col("id", batch.Int64, false)), 0)
	p.Add(&Chunk{Batch: b, Bytes: 40})
	time.Sleep(30 * time.Millisecond)
	p.Add(&Chunk{Batch: b, Bytes: 60, Done: true})
	stop()
	stop() // a second stop is harmless
	out := logs.String()
	lines := strings.Count(out, "backfill progress")
	if lines < 2 {
		t.Errorf("%d progress lines, want several:\n%s", lines, out)
	}
	last := out[strings.LastIndex(out, "backfill progress"):]
	for _, want := range []string{"files_done=1", "files=1", "bytes_done=100", "bytes=100", "eta=0s"} {
		if !strings.Contains(last, want) {
			t.Errorf("last line %q lacks %s", last, want)
		}
	}
}

func TestProgressBarOnTerminal(t *testing.T) {
	p := NewProgress([]File{{Name: "a", Size: 2048}, {Name: "b", Size: 2048}})
	var out syncBuffer
	stop := p.show(&out, nil, true)
	b := batch.New(cols(col("id", batch.Int64, false)), 0)
	b.Vectors[0].AppendInt(1)
	p.Add(&Chunk{Batch: b, Bytes: 2048, Done: true})
	stop()
	got := out.String()
	if !strings.Contains(got, "files 1/2, rows 1") || !strings.Contains(got, "50%") {
		t.Errorf("bar output %q lacks the description or the percentage", got)
	}
	if isTerminal(&out) {
		t.Error("a buffer is taken for a terminal")
	}
}
