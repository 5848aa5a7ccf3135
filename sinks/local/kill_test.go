package local

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/sluicehq/sluice/flows/batch"
	"github.com/sluicehq/sluice/sinks"
)

const childEnv = "SLUICE_LOCAL_KILL_CHILD"

// TestKillDuringCommits runs a writer in a child process, kills it with
// SIGKILL at arbitrary moments (mid-load, mid-commit, mid-publish,
// mid-compaction) while this process commits to the same destination, and
// checks after each kill that recovery leaves exactly the committed rows.
func TestKillDuringCommits(t *testing.T) {
	if dir := os.Getenv(childEnv); dir != "" {
		killChild(dir)
		return
	}
	ctx := context.Background()
	dir := t.TempDir()
	opts := testOpts(dir)
	opts.CompactMinFiles = 4
	s := openTest(t, opts)
	if err := s.Ensure(ctx, []sinks.Table{ordersTable}); err != nil {
		t.Fatal(err)
	}
	from := int64(-1)
	for round := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestKillDuringCommits$", "-test.count=1")
		cmd.Env = append(os.Environ(), childEnv+"="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait until the child committed something, then let it run a while.
		sc := bufio.NewScanner(out)
		if !sc.Scan() {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("round %d: the child did not start committing", round)
		}
		go func() {
			for sc.Scan() {
			}
		}()
		deadline := time.Now().Add(time.Duration(50+round*70) * time.Millisecond)
		for time.Now().Before(deadline) {
			if _, err := commitOrders(ctx, s, 0, from, int(max(from, 0)), 7); err != nil {
				t.Fatalf("round %d: parent commit: %v", round, err)
			}
			from = max(from, 0) + 7
		}
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		cmd.Wait()
		if err := s.Recover(ctx); err != nil {
			t.Fatalf("round %d: Recover: %v", round, err)
		}
		checkConsistent(t, s, "orders")
	}
	led, err := s.Ledger(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Scan(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	child := sinks.LedgerHeads(led, "f").Kafka()[batch.TopicPartition{Topic: "orders", Partition: 1}]
	var childRows int64
	for _, id := range b.Column("order_id").Ints {
		if id >= childBase {
			childRows++
		}
	}
	t.Logf("the child committed %d rows over 3 lives; %d loads in all", child, len(led.Loads))
	if child == 0 || childRows != child {
		t.Fatalf("the child's partition is at %d with %d rows in the table, want equal and above 0", child, childRows)
	}
}

const childBase = 1 << 40

// killChild commits loads of partition 1 until it is killed; the order ids
// are childBase + the Kafka offset, so a replay after a kill rewrites the
// same ids and any duplicate shows.
func killChild(dir string) {
	ctx := context.Background()
	opts := testOpts(dir)
	opts.CompactMinFiles = 4
	opts.CompactInterval = 3 * time.Millisecond
	s, err := Open(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := s.Recover(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tp := batch.TopicPartition{Topic: "orders", Partition: 1}
	for i := 0; ; i++ {
		led, err := s.Ledger(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		from, ok := sinks.LedgerHeads(led, "f").Kafka()[tp]
		if !ok {
			from = -1
		}
		_, err = commitOrders(ctx, s, 1, from, childBase+int(max(from, 0)), 5+i%7)
		if err != nil && !errors.Is(err, sinks.ErrStale) {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println("committed")
	}
}
