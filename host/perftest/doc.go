// Package perftest speaks linux-rdma perftest's out-of-band exchange and
// runs perftest's bandwidth and latency tests on a softrnic device,
// printing perftest's tables, so that `softrnic perf` and the ib_* tools
// are peers. The exchange (versions, page and cache-line sizes, MTU, the
// keys messages and their syncs, bandwidth reports) runs over TCP port
// 18515 (Dial, Accept), or as perftest -R and -z run it, over an RC
// connection set up through the connection manager (DialCM, AcceptCM;
// package cm), where with Config.RDMACM the test's QPs are connected
// through the CM too.
package perftest
