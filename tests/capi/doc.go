// Package capi tests softrnic's C libraries (lib/libibverbs.so.1 over
// lib/libsoftrnic.so, built by `make libs` from host/capi) the way an
// unmodified libibverbs program uses them: c/verbs_test.c is compiled
// against the system's <infiniband/verbs.h> and linked with -libverbs,
// then run with LD_LIBRARY_PATH pointing at lib/ inside the network
// namespaces of tests/topo, over both of softrnic's ports (xsk and udp).
//
// TestLocal runs its single-process checks (queries, error paths, the QP
// state machine, a completion channel); TestTwoHosts runs a server and a
// client in two namespaces, with RC, UC and UD traffic between them. The
// tests skip without root, gcc, the rdma-core headers or the built
// libraries, and fail instead under CI.
package capi
