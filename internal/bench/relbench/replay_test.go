package relbench_test

import (
	"strings"
	"testing"
	"time"

	"github.com/softrnic/softrnic/internal/bench/relbench"
)

// TestReport runs two short rows: each moves data, a QP with a small
// allocation behind a long round trip waits at the gate (stalls counted),
// and the table has a row per allocation. Speed is the command's
// business, not this test's.
func TestReport(t *testing.T) {
	cfg := relbench.Config{Allocations: []int{2, 8}, RTT: 4 * time.Millisecond, Duration: 200 * time.Millisecond}
	rtt, rows, err := relbench.Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rtt < cfg.RTT || len(rows) != 2 {
		t.Fatalf("RTT %v (added %v), %d rows", rtt, cfg.RTT, len(rows))
	}
	for _, r := range rows {
		if r.Gbits <= 0 || r.Predicted <= 0 || r.Stalls == 0 {
			t.Errorf("allocation %d: %+v", r.Allocation, r)
		}
	}
	var out strings.Builder
	if _, err := relbench.Report(&out, relbench.Config{Allocations: []int{4}, RTT: 2 * time.Millisecond, Duration: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "entries  Gbit/s  predicted") || !strings.Contains(out.String(), "measured with one entry") {
		t.Errorf("report:\n%s", out.String())
	}
}
