package clickhouse

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"syscall"
	"testing"

	"github.com/ClickHouse/clickhouse-go/v2"

	"github.com/sluicehq/sluice/sinks"
)

// TestServerDownMovesLoads checks which failures of a server make the
// loads go to the next address: one that does not answer, and one whose
// replicated tables are read-only or whose ZooKeeper is gone (its own
// session lost); not a refusal of the work.
func TestServerDownMovesLoads(t *testing.T) {
	for _, tc := range []struct {
		err  error
		move bool
	}{
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), true},
		{&clickhouse.Exception{Code: 242, Message: "Table is in readonly mode"}, true},
		{fmt.Errorf("publish: %w", &clickhouse.Exception{Code: 242, Message: "Table is in readonly mode"}), true},
		{&clickhouse.Exception{Code: 225, Message: "Cannot use ZooKeeper table because ZooKeeper is not configured"}, true},
		{&clickhouse.Exception{Code: 999, Message: "Coordination::Exception: Connection loss"}, true},
		{&clickhouse.Exception{Code: 60, Message: "Table db.t doesn't exist"}, false},
		{fmt.Errorf("commit: %w", sinks.ErrStale), false},
		{errors.New("refused"), false},
	} {
		v := newServers(&Sink{log: slog.New(slog.NewTextHandler(io.Discard, nil))}, []string{"a:9000", "b:9000"})
		v.failed("a:9000", tc.err)
		if moved := v.cur == 1; moved != tc.move {
			t.Errorf("%v: loads moved on: %v, want %v", tc.err, moved, tc.move)
		}
	}
}
