package flows

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestStopped: in a continuous run whose context ended, an error that is
// the cancellation is the stop; anything else is still an error.
func TestStopped(t *testing.T) {
	live := context.Background()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	canceled := fmt.Errorf("checkpoint: get once/cursor/f/: read: %w", context.Canceled)
	for _, c := range []struct {
		mode Mode
		ctx  context.Context
		err  error
		want bool
	}{
		{ModeRun, ended, canceled, true},
		{ModeRun, ended, errors.New("disk full"), false},
		{ModeRun, live, canceled, false},
		{ModeUpdate, ended, canceled, false},
	} {
		r := &runner{opts: Options{Mode: c.mode}}
		if got := r.stopped(c.ctx, c.err); got != c.want {
			t.Errorf("mode %v, context ended %v, %v: stopped %v, want %v", c.mode, c.ctx.Err() != nil, c.err, got, c.want)
		}
	}
}
