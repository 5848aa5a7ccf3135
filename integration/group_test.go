package integration

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// itGroup is the consumer group of the events pipeline's flow.
const itGroup = "sluice-it.events_in"

// killRunAfter starts `sluice run`, kills it with SIGKILL after the delay and
// waits for it. It returns the moment of the kill since the start.
//
// A kill due while the run's consumer joins the group for the first time
// (after "flow starting", before "partitions assigned") is moved to a
// moment among the first loads after the assignment. kfake, the in-process broker, loses a member killed
// in that window: the JoinGroup answer cannot be delivered, so no session
// timer is armed for the member, and the survivor's SyncGroup clears the
// timer that would have removed it; the dead member then keeps its
// partitions for good. A real broker arms the session timer of every member
// when the join completes.
func killRunAfter(t testing.TB, spec string, after time.Duration) time.Duration {
	t.Helper()
	started := time.Now()
	cmd, out := start(t, append([]string{"run", "-f", spec}, fastArgs...)...)
	time.Sleep(after)
	joining := func() bool {
		s := out.String()
		return strings.Contains(s, "flow starting") && !strings.Contains(s, "partitions assigned")
	}
	if joining() {
		deadline := time.Now().Add(time.Minute)
		for joining() && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		// Spread the moved kills over the first loads.
		time.Sleep(after % (700 * time.Millisecond))
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Since(started)
	cmd.Wait()
	return killed
}

// reapDeadMembers waits, while no sluice process runs, for the broker to
// expire the members of killed runs from the group, and removes those it
// keeps longer (see killRunAfter) with a LeaveGroup on their behalf, so that
// the next process is not left waiting for partitions a dead member holds.
func reapDeadMembers(t testing.TB, brokerAddr, group string) {
	t.Helper()
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_4_0_0 // LeaveGroup v3 names members
	client, err := sarama.NewClient([]string{brokerAddr}, cfg)
	if err != nil {
		t.Fatalf("kafka client: %v", err)
	}
	defer client.Close()
	members := func() []string {
		coord, err := client.Coordinator(group)
		if err != nil {
			t.Fatalf("coordinator of %s: %v", group, err)
		}
		resp, err := coord.DescribeGroups(&sarama.DescribeGroupsRequest{Groups: []string{group}})
		if err != nil {
			t.Fatalf("describe group %s: %v", group, err)
		}
		var ids []string
		for _, g := range resp.Groups {
			for id := range g.Members {
				ids = append(ids, id)
			}
		}
		return ids
	}
	// Session timeout and rebalance timeout (both 2 s in the test specs),
	// with a margin.
	deadline := time.Now().Add(6 * time.Second)
	ids := members()
	for len(ids) > 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		ids = members()
	}
	if len(ids) == 0 {
		return
	}
	t.Logf("the broker kept %d member(s) of killed runs in %s past their session: removing %v", len(ids), group, ids)
	coord, err := client.Coordinator(group)
	if err != nil {
		t.Fatalf("coordinator of %s: %v", group, err)
	}
	req := &sarama.LeaveGroupRequest{Version: 3, GroupId: group}
	for _, id := range ids {
		req.Members = append(req.Members, sarama.MemberIdentity{MemberId: id})
	}
	if _, err := coord.LeaveGroup(req); err != nil {
		t.Fatalf("remove dead members of %s: %v", group, err)
	}
}
