package capi

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/softrnic/softrnic/internal/testenv"
	"github.com/softrnic/softrnic/internal/topo"
)

// requireCMA stops the test unless lib/librdmacm.so.1 is built and the
// system's librdmacm headers are installed (librdmacm-dev).
func requireCMA(t *testing.T, root string) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(root, "lib", "librdmacm.so.1")); err != nil {
		testenv.Unavailable(t, "lib/librdmacm.so.1 is not built: run `make libs` first (%v)", err)
	}
	for _, h := range []string{"/usr/include/rdma/rdma_cma.h", "/usr/include/rdma/rdma_verbs.h"} {
		if _, err := os.Stat(h); err != nil {
			testenv.Unavailable(t, "librdmacm's headers are not installed (apt-get install librdmacm-dev, or run `make libs`, which installs them): %v", err)
		}
	}
}

// TestCMATwoHosts runs cma_test's server in namespace a and its client in
// namespace b (which connects to 10.47.0.1), on each port: an RC
// connection on an event channel with private data both ways, SENDs, an
// RDMA WRITE and READ, both sides' DISCONNECTED; a rejected connection
// and one to a port with no listener; rdma_migrate_id, rdma_set_option
// and rdma_event_str; synchronous endpoints as rdma_server and
// rdma_client use them; and a UD QP's service through the CM (SIDR) with
// a datagram to it. cma_test.c is built as an unmodified librdmacm
// program is (the system's headers, -lrdmacm -libverbs) and runs on
// lib/'s libraries; on the udp port both sides run as an unprivileged
// user, where setpriv is installed.
func TestCMATwoHosts(t *testing.T) {
	root := requireLibs(t)
	requireCMA(t, root)
	tp := topo.Pair(t, 1500, 1) // skips without root (fails under CI)
	bin := buildC(t, root, "cma_test", "-lrdmacm", "-libverbs")
	for _, port := range ports {
		t.Run(port, func(t *testing.T) { twoHosts(t, tp, root, port, bin, 3*time.Minute) })
	}
}
