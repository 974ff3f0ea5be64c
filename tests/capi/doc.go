// Package capi tests softrnic's C libraries (lib/libibverbs.so.1 and
// lib/librdmacm.so.1 over lib/libsoftrnic.so, built by `make libs` from
// host/capi) the way unmodified libibverbs and librdmacm programs use
// them: c/verbs_test.c is compiled against the system's
// <infiniband/verbs.h> and linked with -libverbs, c/cma_test.c against
// <rdma/rdma_cma.h> and <rdma/rdma_verbs.h> with -lrdmacm -libverbs, then
// run with LD_LIBRARY_PATH pointing at lib/ inside the network namespaces
// of internal/topo, over both of softrnic's ports (xsk and udp).
//
// TestLocal runs verbs_test's single-process checks (queries, error
// paths, the QP state machine, a completion channel); TestTwoHosts runs a
// server and a client in two namespaces, with RC, UC and UD traffic
// between them. TestCMATwoHosts runs cma_test's server and client there:
// an RC connection on an event channel with private data, SENDs, RDMA
// WRITE and READ, a rejected connection and one to no listener,
// rdma_migrate_id, rdma_set_option, rdma_event_str, synchronous endpoints
// (rdma_create_ep, rdma_get_request) and a UD service through the CM
// (SIDR). The tests skip without root, gcc, the rdma-core headers or the
// built libraries, and fail instead under CI.
package capi
