package clickhouse

import (
	"strings"
	"testing"
)

// TestBalancingProblem: a CDC target on shards of several replicas needs
// in_order load balancing, and the refusal names the remedy; shards of one
// replica need nothing.
func TestBalancingProblem(t *testing.T) {
	for _, tc := range []struct {
		replicas  uint64
		balancing string
		refused   bool
	}{
		{1, "random", false},
		{0, "", false},
		{2, "in_order", false},
		{2, "random", true},
		{3, "nearest_hostname", true},
	} {
		err := balancingProblem("cur", "c", tc.replicas, tc.balancing)
		if (err != nil) != tc.refused {
			t.Errorf("%d replicas, %s: %v, refused %v", tc.replicas, tc.balancing, err, tc.refused)
		}
		if err != nil && !strings.Contains(err.Error(), "<load_balancing>in_order</load_balancing>") {
			t.Errorf("the refusal names no remedy: %v", err)
		}
	}
}
