package local

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// TestRunJobs checks the concurrent rewrite of bucket groups: the parts
// come back in job order whatever the order of completion, and the first
// error stops the jobs not yet started.
func TestRunJobs(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name    string
		jobs    int
		workers int
		failAt  int // -1: none
	}{
		{name: "one worker", jobs: 5, workers: 1, failAt: -1},
		{name: "more workers than jobs", jobs: 3, workers: 8, failAt: -1},
		{name: "two workers", jobs: 20, workers: 2, failAt: -1},
		{name: "no jobs", jobs: 0, workers: 2, failAt: -1},
		{name: "an error", jobs: 50, workers: 1, failAt: 3},
		{name: "an error with two workers", jobs: 50, workers: 2, failAt: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var ran atomic.Int64
			jobs := make([]func(*planPart) error, tc.jobs)
			for i := range jobs {
				jobs[i] = func(part *planPart) error {
					ran.Add(1)
					// Early jobs finish last.
					time.Sleep(time.Duration(max(0, 5-i)) * time.Millisecond)
					if i == tc.failAt {
						return boom
					}
					part.drop = append(part.drop, fmt.Sprint(i))
					return nil
				}
			}
			parts, err := runJobs(context.Background(), jobs, tc.workers)
			if tc.failAt >= 0 {
				if !errors.Is(err, boom) {
					t.Fatalf("err = %v, want %v", err, boom)
				}
				// One worker stops at the error; with more, the others may
				// start jobs before they see it, so only the error counts.
				if n := ran.Load(); tc.workers == 1 && n != int64(tc.failAt+1) {
					t.Fatalf("%d of %d jobs ran, want none after the error at job %d", n, tc.jobs, tc.failAt)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(parts) != tc.jobs || ran.Load() != int64(tc.jobs) {
				t.Fatalf("%d parts, %d jobs ran, want %d", len(parts), ran.Load(), tc.jobs)
			}
			for i, p := range parts {
				if len(p.drop) != 1 || p.drop[0] != fmt.Sprint(i) {
					t.Fatalf("part %d holds %v", i, p.drop)
				}
			}
		})
	}
	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		var ran atomic.Int64
		jobs := []func(*planPart) error{func(*planPart) error { ran.Add(1); return nil }}
		if _, err := runJobs(ctx, jobs, 2); !errors.Is(err, context.Canceled) || ran.Load() != 0 {
			t.Fatalf("err = %v after %d jobs, want context.Canceled before any", err, ran.Load())
		}
	})
}
