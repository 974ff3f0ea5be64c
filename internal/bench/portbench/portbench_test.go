package portbench_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/softrnic/softrnic/internal/bench/portbench"
	"github.com/softrnic/softrnic/internal/testenv"
	"github.com/softrnic/softrnic/internal/topo"
)

// TestRun runs every method briefly: each must move frames (or bytes, for
// iperf3), and the two softrnic ports must not allocate per frame. Speed is
// for the benchmark command, not for this test.
func TestRun(t *testing.T) {
	topo.Pair(t, 1500, 1) // skips without root
	methods := []string{portbench.XSK, portbench.UDPPort, portbench.KernelUDP, portbench.UDPGSO}
	if _, err := exec.LookPath("iperf3"); err == nil {
		methods = append(methods, portbench.IPerf3)
	} else if testenv.CI() {
		t.Fatal("iperf3 is not installed; .ci/run installs it")
	} else {
		t.Log("iperf3 not installed: skipping its rows")
	}
	results, err := portbench.Run(portbench.Config{Payloads: []int{64, 4096}, Duration: 300 * time.Millisecond, Methods: methods})
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2*len(methods)+boolInt(slices.Contains(methods, portbench.IPerf3)) {
		t.Fatalf("%d results", len(results))
	}
	for _, r := range results {
		if r.Err != nil {
			t.Errorf("%s %d: %v", r.Method, r.Payload, r.Err)
			continue
		}
		if r.Bytes == 0 && r.Payload > 0 || !strings.HasPrefix(r.Method, portbench.IPerf3) && r.Frames == 0 {
			t.Errorf("%s %d: nothing received: %+v", r.Method, r.Payload, r)
		}
		if (r.Method == portbench.XSK || r.Method == portbench.UDPPort) && r.Allocs > 0.01 {
			t.Errorf("%s %d: %.3f allocations per frame", r.Method, r.Payload, r.Allocs)
		}
		t.Logf("%-16s %5d B: %9.0f pps %6.2f Gbit/s, %.2f allocs/frame", r.Method, r.Payload, r.PPS(), r.Gbps(), r.Allocs)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
