// Package perftest speaks linux-rdma perftest's out-of-band exchange (TCP
// port 18515: versions, page and cache-line sizes, MTU, the 108-byte keys
// messages and their syncs, bandwidth reports, "done") and runs perftest's
// bandwidth and latency tests on a softrnic device, printing perftest's
// tables, so that `softrnic perf` and the ib_* tools are peers.
package perftest
