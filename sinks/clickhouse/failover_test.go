package clickhouse

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
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

// TestUncoveredShards names the shards of which addr lists no server, by
// host name or address.
func TestUncoveredShards(t *testing.T) {
	hosts := []clusterHost{
		{shard: 1, name: "ch1", ip: "10.0.0.1", port: 9000},
		{shard: 1, name: "ch2", ip: "10.0.0.2", port: 9000},
		{shard: 2, name: "ch3", ip: "10.0.0.3", port: 9000},
		{shard: 3, name: "ch4", ip: "10.0.0.4", port: 9000},
	}
	for _, tc := range []struct {
		addrs []string
		want  []uint32
	}{
		{[]string{"ch2:9000", "10.0.0.3:9000", "ch4:9000"}, nil},
		{[]string{"ch1:9000"}, []uint32{2, 3}},
		{[]string{"ch3:9001", "10.0.0.4:9000"}, []uint32{1, 2}},
	} {
		if got := uncoveredShards(hosts, tc.addrs); !slices.Equal(got, tc.want) {
			t.Errorf("addr %v: uncovered shards %v, want %v", tc.addrs, got, tc.want)
		}
	}
}
