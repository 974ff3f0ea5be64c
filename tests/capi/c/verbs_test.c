/*
 * verbs_test: libibverbs conformance checks for softrnic's C library
 * (lib/libibverbs.so.1), written as an ordinary libibverbs program: it is
 * built against the system's <infiniband/verbs.h> and linked with
 * -libverbs, and runs on softrnic through LD_LIBRARY_PATH.
 *
 *	gcc -std=gnu11 -O1 -g -Wall -Wextra -Werror -o verbs_test verbs_test.c -libverbs
 *
 * Modes:
 *
 *	verbs_test [-d DEV] [-r PEER_IPV4] local
 *	verbs_test [-d DEV] server
 *	verbs_test [-d DEV] client HOST
 *	verbs_test [-d DEV] exit-server
 *	verbs_test [-d DEV] exit-client HOST
 *
 * local checks one device in one process: the device list, the device,
 * port and GID queries, PD and MR, the error paths libibverbs documents,
 * the RC QP state machine (its RTR address is PEER_IPV4's RoCE v2 GID; with
 * no -r those checks are skipped), and a completion channel woken by a
 * flushed receive.
 *
 * server and client are two processes (two hosts, or two network
 * namespaces) that exchange their QPs' numbers and PSNs, GIDs and a
 * buffer's address and R_Key over TCP port 18600, then run RC, UC and UD
 * traffic with the data checked byte for byte. exit-server and
 * exit-client connect the same way; the server takes one SEND and exits
 * without closing its device, and the client's SEND must still complete.
 *
 * Each check prints "ok NAME" or "FAIL NAME: DETAIL" (or "skip NAME:
 * WHY"); the last line is "N passed, M failed", and the exit status is 0
 * only when nothing failed. Every wait is bounded.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <ifaddrs.h>
#include <infiniband/verbs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define TCP_PORT "18600"
#define TIMEOUT_MS 10000	 /* one completion, one fd */
#define BARRIER_TIMEOUT_MS 60000 /* the peer's step, which may wait on several completions */
#define GID_INDEX 1		 /* the RoCE v2 GID of the netdev's IPv4 address */
#define UD_QKEY 0x11111111u

#include "report.h"

/* pattern fills n bytes with a sequence both sides can recompute. */
static void pattern(uint8_t *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(seed * 29u + i * 13u + (i >> 8) * 7u + 1u);
}

/* check_pattern reports whether n bytes at p are pattern(seed, from
 * offset off of the sequence). */
static int check_pattern(const char *name, const uint8_t *p, size_t n, unsigned seed, size_t off)
{
	uint8_t *want = malloc(off + n);
	if (!want)
		return check(name, 0, "out of memory");
	pattern(want, off + n, seed);
	for (size_t i = 0; i < n; i++) {
		if (p[i] != want[off + i]) {
			int r = check(name, 0, "byte %zu of %zu is 0x%02x, want 0x%02x", i, n, p[i], want[off + i]);
			free(want);
			return r;
		}
	}
	free(want);
	return check(name, 1, "%s", "");
}

static const char *wc_opcode_str(int op)
{
	switch (op) {
	case IBV_WC_SEND: return "SEND";
	case IBV_WC_RDMA_WRITE: return "RDMA_WRITE";
	case IBV_WC_RDMA_READ: return "RDMA_READ";
	case IBV_WC_COMP_SWAP: return "COMP_SWAP";
	case IBV_WC_FETCH_ADD: return "FETCH_ADD";
	case IBV_WC_RECV: return "RECV";
	case IBV_WC_RECV_RDMA_WITH_IMM: return "RECV_RDMA_WITH_IMM";
	default: return "?";
	}
}


/* expect_wc waits for a completion and checks its status, opcode and
 * wr_id; it returns 1 when they are as wanted. */
static int expect_wc(struct ibv_cq *cq, struct ibv_wc *wc, const char *name, enum ibv_wc_status status, int opcode,
		     uint64_t wr_id)
{
	memset(wc, 0, sizeof(*wc));
	if (!wait_wc(cq, wc, TIMEOUT_MS, name))
		return 0;
	if (wc->status != status)
		return check(name, 0, "status %d (%s), want %d (%s); wr_id %llu, opcode %d", wc->status,
			     ibv_wc_status_str(wc->status), status, ibv_wc_status_str(status),
			     (unsigned long long)wc->wr_id, wc->opcode);
	if (wc->wr_id != wr_id)
		return check(name, 0, "wr_id %llu, want %llu", (unsigned long long)wc->wr_id, (unsigned long long)wr_id);
	if (opcode >= 0 && (int)wc->opcode != opcode)
		return check(name, 0, "opcode %d (%s), want %d (%s)", wc->opcode, wc_opcode_str(wc->opcode), opcode,
			     wc_opcode_str(opcode));
	return check(name, 1, "%s", "");
}

static const char *mtu_str(enum ibv_mtu m)
{
	switch (m) {
	case IBV_MTU_256: return "256";
	case IBV_MTU_512: return "512";
	case IBV_MTU_1024: return "1024";
	case IBV_MTU_2048: return "2048";
	case IBV_MTU_4096: return "4096";
	}
	return "?";
}

static int mtu_bytes(enum ibv_mtu m) { return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128 << m : 0; }

static void gid_str(const union ibv_gid *g, char *buf, size_t len)
{
	inet_ntop(AF_INET6, g->raw, buf, len);
}

static void v4_gid(union ibv_gid *g, struct in_addr a)
{
	memset(g, 0, sizeof(*g));
	g->raw[10] = g->raw[11] = 0xff;
	memcpy(g->raw + 12, &a, 4);
}

/* --- the device ------------------------------------------------------- */

static const char *dev_name; /* -d */

static struct ibv_context *open_dev(int report)
{
	int n = -1;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (report)
		check("get_device_list", list && n >= 1, "ibv_get_device_list: %p, %d devices (errno %d %s)", (void *)list, n,
		      errno, strerror(errno));
	if (!list || n < 1)
		fatal("open_device", "no device");
	struct ibv_device *dev = NULL;
	for (int i = 0; i < n; i++) {
		const char *name = ibv_get_device_name(list[i]);
		if (report) {
			char label[64];
			snprintf(label, sizeof(label), "device_name[%d]", i);
			check(label, name && strncmp(name, "softrnic_", 9) == 0 && strcmp(name, list[i]->name) == 0,
			      "name %s, want softrnic_<netdev>", name ? name : "(null)");
		}
		if (!dev && (!dev_name || (name && strcmp(name, dev_name) == 0)))
			dev = list[i];
	}
	if (!dev) {
		ibv_free_device_list(list);
		fatal("open_device", "no device of that name");
	}
	if (report) {
		check("device_node_type", dev->node_type == IBV_NODE_CA && dev->transport_type == IBV_TRANSPORT_IB,
		      "node type %d, transport %d", dev->node_type, dev->transport_type);
		check("device_index", ibv_get_device_index(dev) >= 0, "ibv_get_device_index %d", ibv_get_device_index(dev));
	}
	struct ibv_context *ctx = ibv_open_device(dev);
	if (report)
		check("open_device", ctx != NULL, "ibv_open_device(%s): errno %d %s", dev->name, errno, strerror(errno));
	ibv_free_device_list(list);
	if (!ctx)
		fatal("open_device", "cannot open the device");
	struct ibv_device_attr da;
	if (ibv_query_device(ctx, &da) == 0)
		printf("# device %s fw_ver %s\n", ibv_get_device_name(ctx->device), da.fw_ver);
	return ctx;
}

static const char *netdev_of(struct ibv_context *ctx) { return ibv_get_device_name(ctx->device) + strlen("softrnic_"); }

static int netdev_ipv4(const char *ifname, struct in_addr *out)
{
	struct ifaddrs *ifa, *p;
	int found = 0;
	if (getifaddrs(&ifa) != 0)
		return 0;
	for (p = ifa; p; p = p->ifa_next) {
		if (p->ifa_addr && p->ifa_addr->sa_family == AF_INET && strcmp(p->ifa_name, ifname) == 0) {
			*out = ((struct sockaddr_in *)p->ifa_addr)->sin_addr;
			found = 1;
			break;
		}
	}
	freeifaddrs(ifa);
	return found;
}

static int netdev_mtu(const char *ifname)
{
	struct ifreq ifr;
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -1;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname);
	int rc = ioctl(s, SIOCGIFMTU, &ifr);
	close(s);
	return rc == 0 ? ifr.ifr_mtu : -1;
}

/* --- QP transitions ---------------------------------------------------- */

static int qp_init(struct ibv_qp *qp, unsigned access)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = 1;
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	if (qp->qp_type == IBV_QPT_UD) {
		a.qkey = UD_QKEY;
		mask |= IBV_QP_QKEY;
	} else {
		a.qp_access_flags = access;
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	return ibv_modify_qp(qp, &a, mask);
}

static int qp_rtr(struct ibv_qp *qp, enum ibv_mtu mtu, uint32_t dest_qpn, uint32_t rq_psn, const union ibv_gid *dgid)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	int mask = IBV_QP_STATE;
	if (qp->qp_type != IBV_QPT_UD) {
		a.path_mtu = mtu;
		a.dest_qp_num = dest_qpn;
		a.rq_psn = rq_psn;
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = *dgid;
		a.ah_attr.grh.sgid_index = GID_INDEX;
		a.ah_attr.grh.hop_limit = 64;
		a.ah_attr.port_num = 1;
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
		if (qp->qp_type == IBV_QPT_RC) {
			a.max_dest_rd_atomic = 4;
			a.min_rnr_timer = 12;
			mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		}
	}
	return ibv_modify_qp(qp, &a, mask);
}

static int qp_rts(struct ibv_qp *qp, uint32_t sq_psn)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = sq_psn;
	int mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (qp->qp_type == IBV_QPT_RC) {
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 4;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	}
	return ibv_modify_qp(qp, &a, mask);
}

static int qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia) != 0)
		return -1;
	return a.qp_state;
}

static struct ibv_qp *make_qp(struct ibv_pd *pd, enum ibv_qp_type type, struct ibv_cq *scq, struct ibv_cq *rcq,
			      struct ibv_srq *srq, uint32_t send_sge, uint32_t recv_sge, uint32_t inl)
{
	struct ibv_qp_init_attr ia;
	memset(&ia, 0, sizeof(ia));
	ia.qp_type = type;
	ia.send_cq = scq;
	ia.recv_cq = rcq;
	ia.srq = srq;
	ia.cap.max_send_wr = 32;
	ia.cap.max_recv_wr = srq ? 0 : 32;
	ia.cap.max_send_sge = send_sge;
	ia.cap.max_recv_sge = srq ? 0 : recv_sge;
	ia.cap.max_inline_data = inl;
	return ibv_create_qp(pd, &ia);
}

/* --- local ------------------------------------------------------------- */

static int post_recv1(struct ibv_qp *qp, uint64_t wr_id, void *addr, uint32_t len, uint32_t lkey)
{
	struct ibv_sge sge = {.addr = (uintptr_t)addr, .length = len, .lkey = lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad = NULL;
	return ibv_post_recv(qp, &wr, &bad);
}

/* init_ah_checks: ibv_init_ah_from_wc on made-up GRHs, as a UD receive
 * leaves them: an IPv6 header (twice: once with a source GID whose 13th
 * byte, where an IPv4 header's version would be, reads 0x40), and, for
 * RoCE v2 over IPv4, 20 zero bytes and the IPv4 header. */
static void init_ah_checks(struct ibv_context *ctx, const union ibv_gid *own6, struct in_addr own4)
{
	struct ibv_wc wc;
	struct ibv_ah_attr ah;
	uint8_t b[40];
	struct ibv_grh *grh = (struct ibv_grh *)b;
	char s1[INET6_ADDRSTRLEN], s2[INET6_ADDRSTRLEN];
	static const char *const srcs[2] = {"fd47::2", "fd47::4000:2"};
	static const char *const names[2] = {"init_ah_from_wc_ipv6", "init_ah_from_wc_ipv6_sgid_byte12_0x40"};
	memset(&wc, 0, sizeof(wc));
	wc.wc_flags = IBV_WC_GRH;
	for (int i = 0; i < 2; i++) {
		union ibv_gid src;
		inet_pton(AF_INET6, srcs[i], src.raw);
		memset(b, 0, sizeof(b));
		grh->version_tclass_flow = htonl(6u << 28 | 0x20u << 20 | 0x12345u);
		grh->next_hdr = 17;
		grh->hop_limit = 64;
		grh->sgid = src;
		grh->dgid = *own6; /* GID index 0 */
		memset(&ah, 0xff, sizeof(ah));
		errno = 0;
		int rc = ibv_init_ah_from_wc(ctx, 1, &wc, grh, &ah);
		check(names[i],
		      rc == 0 && ah.is_global == 1 && memcmp(&ah.grh.dgid, &src, 16) == 0 && ah.grh.sgid_index == 0 &&
			      ah.grh.traffic_class == 0x20 && ah.grh.flow_label == 0x12345 && ah.port_num == 1,
		      "returned %d (errno %d %s): dgid %s (want %s), sgid_index %u (want 0), traffic_class 0x%x, "
		      "flow_label 0x%x",
		      rc, errno, strerror(errno), (gid_str(&ah.grh.dgid, s1, sizeof(s1)), s1),
		      (gid_str(&src, s2, sizeof(s2)), s2), ah.grh.sgid_index, ah.grh.traffic_class, ah.grh.flow_label);
	}
	struct in_addr src4;
	union ibv_gid want;
	inet_pton(AF_INET, "192.0.2.7", &src4);
	v4_gid(&want, src4);
	memset(b, 0, sizeof(b));
	b[20] = 0x45; /* IPv4, 20-byte header */
	b[21] = 0x10; /* the traffic class */
	b[28] = 64;   /* TTL */
	b[29] = 17;   /* UDP */
	memcpy(b + 32, &src4, 4);
	memcpy(b + 36, &own4, 4);
	memset(&ah, 0xff, sizeof(ah));
	errno = 0;
	int rc = ibv_init_ah_from_wc(ctx, 1, &wc, grh, &ah);
	check("init_ah_from_wc_ipv4",
	      rc == 0 && ah.is_global == 1 && memcmp(&ah.grh.dgid, &want, 16) == 0 && ah.grh.sgid_index == GID_INDEX &&
		      ah.grh.traffic_class == 0x10,
	      "returned %d (errno %d %s): dgid %s (want %s), sgid_index %u (want %d), traffic_class 0x%x", rc, errno,
	      strerror(errno), (gid_str(&ah.grh.dgid, s1, sizeof(s1)), s1), (gid_str(&want, s2, sizeof(s2)), s2),
	      ah.grh.sgid_index, GID_INDEX, ah.grh.traffic_class);
	wc.wc_flags = 0;
	errno = 0;
	rc = ibv_init_ah_from_wc(ctx, 1, &wc, grh, &ah);
	check("init_ah_from_wc_no_grh", rc != 0, "returned %d for a completion without IBV_WC_GRH", rc);
}

static int run_local(const char *peer)
{
	struct ibv_context *ctx = open_dev(1);
	const char *nd = netdev_of(ctx);
	int rc;

	/* the device */
	struct ibv_device_attr da;
	memset(&da, 0, sizeof(da));
	rc = ibv_query_device(ctx, &da);
	check("query_device", rc == 0, "returned %d", rc);
	check("query_device_caps",
	      da.max_qp > 0 && da.max_qp_wr > 0 && da.max_sge >= 3 && da.max_cq > 0 && da.max_cqe > 0 && da.max_mr > 0 &&
		      da.max_pd > 0 && da.max_mr_size > 0 && da.phys_port_cnt == 1 && da.max_srq > 0 && da.max_srq_wr > 0 &&
		      da.max_srq_sge > 0 && da.max_qp_rd_atom > 0 && da.atomic_cap != IBV_ATOMIC_NONE && da.fw_ver[0] &&
		      da.node_guid != 0 && da.max_pkeys >= 1,
	      "max_qp %d max_qp_wr %d max_sge %d max_cq %d max_cqe %d max_mr %d max_pd %d max_mr_size %llu ports %u "
	      "max_srq %d/%d/%d rd_atom %d atomic_cap %d fw '%s' guid %llx pkeys %u",
	      da.max_qp, da.max_qp_wr, da.max_sge, da.max_cq, da.max_cqe, da.max_mr, da.max_pd,
	      (unsigned long long)da.max_mr_size, da.phys_port_cnt, da.max_srq, da.max_srq_wr, da.max_srq_sge,
	      da.max_qp_rd_atom, da.atomic_cap, da.fw_ver, (unsigned long long)da.node_guid, da.max_pkeys);

	/* the port, through the header's inline ibv_query_port */
	struct ibv_port_attr pa;
	memset(&pa, 0, sizeof(pa));
	rc = ibv_query_port(ctx, 1, &pa);
	check("query_port", rc == 0, "returned %d", rc);
	check("port_state_active", pa.state == IBV_PORT_ACTIVE, "state %d (%s)", pa.state, ibv_port_state_str(pa.state));
	check("port_link_layer_ethernet", pa.link_layer == IBV_LINK_LAYER_ETHERNET, "link_layer %u", pa.link_layer);
	int mtu = netdev_mtu(nd);
	int am = mtu_bytes(pa.active_mtu);
	check("port_active_mtu",
	      am > 0 && pa.active_mtu <= pa.max_mtu && mtu > 0 && am < mtu && (pa.active_mtu == IBV_MTU_4096 || 2 * am > mtu - 100),
	      "active_mtu %d (%s), max_mtu %d, netdev %s MTU %d", pa.active_mtu, mtu_str(pa.active_mtu), pa.max_mtu, nd, mtu);
	check("port_gid_tbl_len", pa.gid_tbl_len >= 2 && pa.pkey_tbl_len >= 1, "gid_tbl_len %d pkey_tbl_len %u",
	      pa.gid_tbl_len, pa.pkey_tbl_len);
	struct ibv_port_attr pa2;
	rc = ibv_query_port(ctx, 2, &pa2);
	check("query_port_2_einval", rc == EINVAL, "ibv_query_port(port 2) returned %d, want EINVAL", rc);

	/* the GIDs */
	struct in_addr ip = {0};
	int have_ip = netdev_ipv4(nd, &ip);
	check("netdev_ipv4", have_ip, "%s has no IPv4 address", nd);
	union ibv_gid g0, g1, want;
	char s1[INET6_ADDRSTRLEN], s2[INET6_ADDRSTRLEN];
	rc = ibv_query_gid(ctx, 1, 0, &g0);
	check("query_gid_0_link_local", rc == 0 && g0.raw[0] == 0xfe && (g0.raw[1] & 0xc0) == 0x80,
	      "rc %d, gid %s", rc, (gid_str(&g0, s1, sizeof(s1)), s1));
	rc = ibv_query_gid(ctx, 1, 1, &g1);
	v4_gid(&want, ip);
	check("query_gid_1_ipv4", rc == 0 && memcmp(&g1, &want, 16) == 0, "rc %d, gid %s, want %s", rc,
	      (gid_str(&g1, s1, sizeof(s1)), s1), (gid_str(&want, s2, sizeof(s2)), s2));
	struct ibv_gid_entry ge;
	memset(&ge, 0, sizeof(ge));
	rc = ibv_query_gid_ex(ctx, 1, 1, &ge, 0);
	check("query_gid_ex", rc == 0 && ge.gid_type == IBV_GID_TYPE_ROCE_V2 && ge.gid_index == 1 && ge.port_num == 1 &&
				      memcmp(&ge.gid, &want, 16) == 0 && ge.ndev_ifindex == if_nametoindex(nd),
	      "rc %d, type %u, index %u, port %u, gid %s, ifindex %u (want %u)", rc, ge.gid_type, ge.gid_index,
	      ge.port_num, (gid_str(&ge.gid, s1, sizeof(s1)), s1), ge.ndev_ifindex, if_nametoindex(nd));
	struct ibv_gid_entry tbl[64];
	memset(tbl, 0, sizeof(tbl));
	ssize_t nt = ibv_query_gid_table(ctx, tbl, 64, 0);
	int tbl_ok = nt >= 2;
	for (ssize_t i = 0; tbl_ok && i < nt; i++)
		tbl_ok = tbl[i].gid_type == IBV_GID_TYPE_ROCE_V2 && tbl[i].port_num == 1;
	if (tbl_ok)
		tbl_ok = tbl[1].gid_index == 1 && memcmp(&tbl[1].gid, &want, 16) == 0;
	check("query_gid_table", tbl_ok, "returned %zd entries; entry 1: type %u index %u gid %s", nt, tbl[1].gid_type,
	      tbl[1].gid_index, (gid_str(&tbl[1].gid, s1, sizeof(s1)), s1));
	init_ah_checks(ctx, &g0, ip);
	__be16 pkey = 0;
	rc = ibv_query_pkey(ctx, 1, 0, &pkey);
	check("query_pkey", rc == 0 && pkey == htons(0xffff), "rc %d, pkey 0x%04x", rc, ntohs(pkey));

	/* PD and MRs */
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	check("alloc_pd", pd != NULL, "errno %d %s", errno, strerror(errno));
	if (!pd)
		fatal("alloc_pd", "no PD");
	size_t len = 8192;
	uint8_t *raw = malloc(len + 16);
	uint8_t *odd = raw + 1; /* an unaligned address */
	unsigned acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	struct ibv_mr *mr = ibv_reg_mr(pd, odd, len, acc);
	check("reg_mr_unaligned",
	      mr && mr->addr == odd && mr->length == len && mr->pd == pd && mr->context == ctx,
	      "mr %p (errno %d %s), addr %p want %p, length %zu", (void *)mr, errno, strerror(errno),
	      mr ? mr->addr : NULL, (void *)odd, mr ? mr->length : 0);
	uint8_t *raw2 = malloc(4096);
	struct ibv_mr *mr2 = ibv_reg_mr_iova2(pd, raw2, 4096, 0x100000, IBV_ACCESS_LOCAL_WRITE);
	check("reg_mr_iova2", mr2 && mr2->addr == raw2 && mr2->length == 4096, "mr %p (errno %d %s)", (void *)mr2, errno,
	      strerror(errno));

	/* error paths */
	errno = 0;
	struct ibv_mr *bad_mr = ibv_reg_mr(pd, raw2, 4096, IBV_ACCESS_REMOTE_WRITE);
	check("reg_mr_remote_write_without_local_write_einval", !bad_mr && errno == EINVAL, "mr %p, errno %d (%s)",
	      (void *)bad_mr, errno, strerror(errno));
	if (bad_mr)
		ibv_dereg_mr(bad_mr);
	errno = 0;
	struct ibv_cq *bad_cq = ibv_create_cq(ctx, 0, NULL, NULL, 0);
	check("create_cq_0_einval", !bad_cq && errno == EINVAL, "cq %p, errno %d (%s)", (void *)bad_cq, errno,
	      strerror(errno));
	if (bad_cq)
		ibv_destroy_cq(bad_cq);
	errno = 0;
	bad_cq = ibv_create_cq(ctx, da.max_cqe + 1, NULL, NULL, 0);
	check("create_cq_above_max_cqe_einval", !bad_cq && errno == EINVAL, "cqe %d: cq %p, errno %d (%s)", da.max_cqe + 1,
	      (void *)bad_cq, errno, strerror(errno));
	if (bad_cq)
		ibv_destroy_cq(bad_cq);

	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	check("create_cq", cq && cq->cqe >= 16, "cq %p (errno %d %s), cqe %d", (void *)cq, errno, strerror(errno),
	      cq ? cq->cqe : 0);
	if (!cq)
		fatal("create_cq", "no CQ");

	errno = 0;
	struct ibv_qp *bad_qp = make_qp(pd, IBV_QPT_RC, cq, cq, NULL, da.max_sge + 1, 1, 0);
	check("create_qp_too_many_sge_einval", !bad_qp && errno == EINVAL, "max_send_sge %d: qp %p, errno %d (%s)",
	      da.max_sge + 1, (void *)bad_qp, errno, strerror(errno));
	if (bad_qp)
		ibv_destroy_qp(bad_qp);

	struct ibv_qp_init_attr ia;
	memset(&ia, 0, sizeof(ia));
	ia.qp_type = IBV_QPT_RC;
	ia.send_cq = cq;
	ia.recv_cq = cq;
	ia.cap.max_send_wr = 8;
	ia.cap.max_recv_wr = 8;
	ia.cap.max_send_sge = 2;
	ia.cap.max_recv_sge = 1;
	ia.cap.max_inline_data = 64;
	ia.qp_context = &ia;
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	check("create_qp_rc", qp && qp->qp_num > 1 && qp->state == IBV_QPS_RESET && qp->qp_type == IBV_QPT_RC &&
				      ia.cap.max_send_wr >= 8 && ia.cap.max_recv_wr >= 8 && ia.cap.max_inline_data >= 64,
	      "qp %p (errno %d %s), qp_num %u, state %d, caps %u/%u/%u", (void *)qp, errno, strerror(errno),
	      qp ? qp->qp_num : 0, qp ? (int)qp->state : -1, ia.cap.max_send_wr, ia.cap.max_recv_wr,
	      ia.cap.max_inline_data);
	if (!qp)
		fatal("create_qp_rc", "no QP");

	/* posting to a QP in RESET */
	uint8_t *buf = odd;
	struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 64, .lkey = mr ? mr->lkey : 0};
	struct ibv_send_wr swr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED};
	struct ibv_send_wr *sbad = NULL;
	rc = ibv_post_send(qp, &swr, &sbad);
	check("post_send_in_reset_fails", rc != 0 && sbad == &swr, "ibv_post_send returned %d (%s), bad_wr %p (want %p)",
	      rc, strerror(rc), (void *)sbad, (void *)&swr);
	struct ibv_recv_wr rwr = {.wr_id = 2, .sg_list = &sge, .num_sge = 1}, *rbad = NULL;
	rc = ibv_post_recv(qp, &rwr, &rbad);
	check("post_recv_in_reset_fails", rc != 0 && rbad == &rwr, "ibv_post_recv returned %d (%s), bad_wr %p (want %p)",
	      rc, strerror(rc), (void *)rbad, (void *)&rwr);

	/* RESET -> RTR is not a transition, whatever the attributes */
	struct ibv_qp_attr qa;
	memset(&qa, 0, sizeof(qa));
	qa.qp_state = IBV_QPS_RTR;
	qa.path_mtu = pa.active_mtu;
	qa.dest_qp_num = 0x123;
	qa.rq_psn = 0x1234;
	qa.max_dest_rd_atomic = 1;
	qa.min_rnr_timer = 12;
	rc = ibv_modify_qp(qp, &qa,
			   IBV_QP_STATE | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				   IBV_QP_MIN_RNR_TIMER);
	check("modify_qp_reset_to_rtr_einval", rc == EINVAL, "returned %d (%s), want EINVAL (%d)", rc, strerror(rc), EINVAL);
	check("qp_still_reset", qp_state(qp) == IBV_QPS_RESET, "state %d", qp_state(qp));

	/* the state machine: RESET -> INIT -> RTR -> RTS */
	struct ibv_qp_init_attr qi;
	rc = qp_init(qp, acc);
	memset(&qa, 0, sizeof(qa));
	int qrc = ibv_query_qp(qp, &qa, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PORT | IBV_QP_PKEY_INDEX, &qi);
	check("modify_qp_init", rc == 0 && qrc == 0 && qa.qp_state == IBV_QPS_INIT && qa.qp_access_flags == acc &&
					qa.port_num == 1 && qa.pkey_index == 0 && qp->state == IBV_QPS_INIT,
	      "modify %d, query %d: state %d, access 0x%x (want 0x%x), port %u, pkey_index %u", rc, qrc, qa.qp_state,
	      qa.qp_access_flags, acc, qa.port_num, qa.pkey_index);
	check("query_qp_init_attr", qi.qp_type == IBV_QPT_RC && qi.send_cq == cq && qi.recv_cq == cq &&
					    qi.qp_context == &ia && qi.cap.max_send_sge >= 2 && qi.cap.max_inline_data >= 64,
	      "qp_type %d, cqs %p %p, qp_context %p, max_send_sge %u, max_inline %u", qi.qp_type, (void *)qi.send_cq,
	      (void *)qi.recv_cq, qi.qp_context, qi.cap.max_send_sge, qi.cap.max_inline_data);

	/* too many receive SGEs: EINVAL, and bad_wr is that request */
	struct ibv_sge two[2] = {sge, sge};
	struct ibv_recv_wr r2 = {.wr_id = 4, .sg_list = two, .num_sge = 2};
	struct ibv_recv_wr r1 = {.wr_id = 3, .sg_list = &sge, .num_sge = 1, .next = &r2};
	rbad = NULL;
	rc = ibv_post_recv(qp, &r1, &rbad);
	check("post_recv_too_many_sge_einval", rc == EINVAL && rbad == &r2,
	      "returned %d (%s), bad_wr %p (the first %p, the second %p)", rc, strerror(rc), (void *)rbad, (void *)&r1,
	      (void *)&r2);

	if (peer) {
		struct in_addr pip = {0};
		union ibv_gid pgid;
		inet_pton(AF_INET, peer, &pip);
		v4_gid(&pgid, pip);
		rc = qp_rtr(qp, pa.active_mtu, 0x123, 0x1234, &pgid);
		memset(&qa, 0, sizeof(qa));
		qrc = ibv_query_qp(qp, &qa, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN,
				   &qi);
		check("modify_qp_rtr",
		      rc == 0 && qrc == 0 && qa.qp_state == IBV_QPS_RTR && qa.path_mtu == pa.active_mtu &&
			      qa.dest_qp_num == 0x123 && qa.rq_psn == 0x1234 && qa.max_dest_rd_atomic == 4 &&
			      qa.min_rnr_timer == 12 && qa.ah_attr.is_global == 1 &&
			      memcmp(&qa.ah_attr.grh.dgid, &pgid, 16) == 0 && qa.ah_attr.grh.sgid_index == GID_INDEX,
		      "modify %d (%s), query %d: state %d, path_mtu %d, dest_qp 0x%x, rq_psn 0x%x, max_dest_rd_atomic %u, "
		      "min_rnr_timer %u, is_global %u, dgid %s, sgid_index %u",
		      rc, strerror(rc), qrc, qa.qp_state, qa.path_mtu, qa.dest_qp_num, qa.rq_psn, qa.max_dest_rd_atomic,
		      qa.min_rnr_timer, qa.ah_attr.is_global, (gid_str(&qa.ah_attr.grh.dgid, s1, sizeof(s1)), s1),
		      qa.ah_attr.grh.sgid_index);
		rc = qp_rts(qp, 0x4321);
		memset(&qa, 0, sizeof(qa));
		qrc = ibv_query_qp(qp, &qa, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT, &qi);
		check("modify_qp_rts",
		      rc == 0 && qrc == 0 && qa.qp_state == IBV_QPS_RTS && qa.sq_psn == 0x4321 && qa.timeout == 14 &&
			      qa.retry_cnt == 7 && qa.rnr_retry == 7 && qa.max_rd_atomic == 4 && qp->state == IBV_QPS_RTS,
		      "modify %d (%s), query %d: state %d, sq_psn 0x%x, timeout %u, retry_cnt %u, rnr_retry %u, "
		      "max_rd_atomic %u",
		      rc, strerror(rc), qrc, qa.qp_state, qa.sq_psn, qa.timeout, qa.retry_cnt, qa.rnr_retry,
		      qa.max_rd_atomic);
	} else {
		skip("modify_qp_rtr", "no -r PEER_IPV4: no address for the RTR transition");
		skip("modify_qp_rts", "no -r PEER_IPV4");
	}

	/* busy: a CQ a QP uses, a channel a CQ uses */
	rc = ibv_destroy_cq(cq);
	check("destroy_cq_in_use_ebusy", rc == EBUSY, "returned %d (%s), want EBUSY", rc, strerror(rc));

	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	check("create_comp_channel", ch && ch->fd >= 0, "channel %p (errno %d %s)", (void *)ch, errno, strerror(errno));
	if (!ch)
		fatal("create_comp_channel", "no channel");
	int cq_ctx_marker = 0;
	struct ibv_cq *ecq = ibv_create_cq(ctx, 8, &cq_ctx_marker, ch, 0);
	check("create_cq_on_channel", ecq && ecq->channel == ch && ecq->cq_context == &cq_ctx_marker,
	      "cq %p (errno %d %s)", (void *)ecq, errno, strerror(errno));
	if (!ecq)
		fatal("create_cq_on_channel", "no CQ");
	rc = ibv_destroy_comp_channel(ch);
	check("destroy_comp_channel_in_use_ebusy", rc == EBUSY, "returned %d (%s), want EBUSY", rc, strerror(rc));

	/* the strings */
	check("wc_status_str_success", strcmp(ibv_wc_status_str(IBV_WC_SUCCESS), "success") == 0, "'%s'",
	      ibv_wc_status_str(IBV_WC_SUCCESS));
	check("wc_status_str_flush", strcmp(ibv_wc_status_str(IBV_WC_WR_FLUSH_ERR), "Work Request Flushed Error") == 0,
	      "'%s'", ibv_wc_status_str(IBV_WC_WR_FLUSH_ERR));
	check("event_type_str", strcmp(ibv_event_type_str(IBV_EVENT_PORT_ACTIVE), "port active") == 0 &&
					strcmp(ibv_event_type_str(IBV_EVENT_QP_FATAL), "local work queue catastrophic error") == 0,
	      "'%s', '%s'", ibv_event_type_str(IBV_EVENT_PORT_ACTIVE), ibv_event_type_str(IBV_EVENT_QP_FATAL));
	check("port_state_str", strcmp(ibv_port_state_str(IBV_PORT_ACTIVE), "active") == 0 &&
					strcmp(ibv_port_state_str(IBV_PORT_DOWN), "down") == 0,
	      "'%s', '%s'", ibv_port_state_str(IBV_PORT_ACTIVE), ibv_port_state_str(IBV_PORT_DOWN));
	check("node_type_str", strcmp(ibv_node_type_str(IBV_NODE_CA), "InfiniBand channel adapter") == 0, "'%s'",
	      ibv_node_type_str(IBV_NODE_CA));

	/* a completion channel: armed, quiet, then woken by a flushed receive */
	struct ibv_qp *fq = make_qp(pd, IBV_QPT_RC, ecq, ecq, NULL, 1, 1, 0);
	check("create_qp_flush", fq != NULL, "errno %d %s", errno, strerror(errno));
	if (!fq)
		fatal("create_qp_flush", "no QP");
	rc = qp_init(fq, acc);
	check("modify_qp_flush_init", rc == 0, "returned %d (%s)", rc, strerror(rc));
	rc = post_recv1(fq, 77, buf + 100, 100, mr ? mr->lkey : 0);
	check("post_recv_init", rc == 0, "returned %d (%s)", rc, strerror(rc));
	rc = ibv_req_notify_cq(ecq, 0);
	check("req_notify_cq", rc == 0, "returned %d (%s)", rc, strerror(rc));
	struct pollfd pfd = {.fd = ch->fd, .events = POLLIN};
	rc = poll(&pfd, 1, 100);
	check("channel_quiet", rc == 0, "poll() on the channel's fd returned %d (revents 0x%x) with nothing completed",
	      rc, pfd.revents);
	memset(&qa, 0, sizeof(qa));
	qa.qp_state = IBV_QPS_ERR;
	rc = ibv_modify_qp(fq, &qa, IBV_QP_STATE);
	check("modify_qp_err", rc == 0 && qp_state(fq) == IBV_QPS_ERR, "returned %d (%s), state %d", rc, strerror(rc),
	      qp_state(fq));
	pfd.revents = 0;
	rc = poll(&pfd, 1, TIMEOUT_MS);
	int woke = check("channel_readable_after_flush", rc == 1 && (pfd.revents & POLLIN),
			 "poll() returned %d (revents 0x%x), want the fd readable", rc, pfd.revents);
	if (!woke && rc == 0)
		timed_out();
	if (woke) {
		struct ibv_cq *evcq = NULL;
		void *evctx = NULL;
		rc = ibv_get_cq_event(ch, &evcq, &evctx);
		check("get_cq_event", rc == 0 && evcq == ecq && evctx == &cq_ctx_marker,
		      "returned %d (errno %d), cq %p (want %p), cq_context %p (want %p)", rc, errno, (void *)evcq,
		      (void *)ecq, evctx, (void *)&cq_ctx_marker);
		if (rc == 0)
			ibv_ack_cq_events(evcq, 1);
	}
	struct ibv_wc wc;
	if (expect_wc(ecq, &wc, "flushed_recv", IBV_WC_WR_FLUSH_ERR, -1, 77))
		check("flushed_recv_qp_num", wc.qp_num == fq->qp_num, "qp_num %u, want %u", wc.qp_num, fq->qp_num);
	int fl = fcntl(ch->fd, F_GETFL);
	rc = fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK);
	check("channel_nonblock", fl >= 0 && rc == 0, "fcntl: %s", strerror(errno));
	struct ibv_cq *evcq = NULL;
	void *evctx = NULL;
	errno = 0;
	rc = ibv_get_cq_event(ch, &evcq, &evctx);
	check("get_cq_event_nonblock_eagain", rc == -1 && errno == EAGAIN, "returned %d, errno %d (%s), want -1, EAGAIN",
	      rc, errno, strerror(errno));

	/* A CQ destroyed with an event still unread: the event goes with it
	 * (the kernel drops a destroyed CQ's pending events), or a later
	 * ibv_get_cq_event would hand out the freed CQ. Its arm is
	 * solicited-only: an error completion (the flush) is a solicited
	 * event too. */
	struct ibv_cq *dcq = ibv_create_cq(ctx, 8, NULL, ch, 0);
	struct ibv_qp *dq = dcq ? make_qp(pd, IBV_QPT_RC, dcq, dcq, NULL, 1, 1, 0) : NULL;
	if (check("destroyed_cq_setup", dcq && dq && qp_init(dq, acc) == 0 &&
						post_recv1(dq, 78, buf + 200, 100, mr ? mr->lkey : 0) == 0 &&
						ibv_req_notify_cq(dcq, 1) == 0,
		  "CQ %p, QP %p: errno %d %s", (void *)dcq, (void *)dq, errno, strerror(errno))) {
		memset(&qa, 0, sizeof(qa));
		qa.qp_state = IBV_QPS_ERR;
		ibv_modify_qp(dq, &qa, IBV_QP_STATE);
		pfd.revents = 0;
		rc = poll(&pfd, 1, TIMEOUT_MS);
		check("destroyed_cq_event_pending", rc == 1,
		      "poll() returned %d: no event for the flushed receive (a solicited-only arm)", rc);
		int r1 = ibv_destroy_qp(dq), r2 = ibv_destroy_cq(dcq);
		check("destroyed_cq_destroy", r1 == 0 && r2 == 0, "ibv_destroy_qp %d, ibv_destroy_cq %d", r1, r2);
		pfd.revents = 0;
		rc = poll(&pfd, 1, 0);
		check("destroyed_cq_event_dropped", rc == 0,
		      "LIBRARY BUG (host/capi/c/verbs.c ibv_destroy_cq): the channel's fd is still readable (poll() %d, "
		      "revents 0x%x) after ibv_destroy_cq: the destroyed CQ's event stays in the channel's pipe, and "
		      "ibv_get_cq_event would return the freed CQ",
		      rc, pfd.revents);
	}

	/* everything goes */
	rc = ibv_destroy_qp(fq);
	check("destroy_qp_flush", rc == 0, "returned %d (%s)", rc, strerror(rc));
	rc = ibv_destroy_qp(qp);
	check("destroy_qp_rc", rc == 0, "returned %d (%s)", rc, strerror(rc));
	rc = ibv_destroy_cq(ecq);
	check("destroy_cq_channel", rc == 0, "returned %d (%s)", rc, strerror(rc));
	rc = ibv_destroy_cq(cq);
	check("destroy_cq", rc == 0, "returned %d (%s)", rc, strerror(rc));
	rc = ibv_destroy_comp_channel(ch);
	check("destroy_comp_channel", rc == 0, "returned %d (%s)", rc, strerror(rc));
	if (mr) {
		rc = ibv_dereg_mr(mr);
		check("dereg_mr", rc == 0, "returned %d (%s)", rc, strerror(rc));
	}
	if (mr2) {
		rc = ibv_dereg_mr(mr2);
		check("dereg_mr_iova2", rc == 0, "returned %d (%s)", rc, strerror(rc));
	}
	rc = ibv_dealloc_pd(pd);
	check("dealloc_pd", rc == 0, "returned %d (%s)", rc, strerror(rc));
	rc = ibv_close_device(ctx);
	check("close_device", rc == 0, "returned %d (%s)", rc, strerror(rc));
	free(raw);
	free(raw2);
	return summary();
}

/* --- two hosts: the TCP side ---------------------------------------------- */

static int sock = -1;

/* io_all reads or writes n bytes, each wait at most ms. */
static int io_all(int fd, void *p, size_t n, int writing, int ms)
{
	uint8_t *b = p;
	while (n > 0) {
		struct pollfd pfd = {.fd = fd, .events = writing ? POLLOUT : POLLIN};
		int rc = poll(&pfd, 1, ms);
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc <= 0)
			return rc == 0 ? -ETIMEDOUT : -errno;
		ssize_t k = writing ? send(fd, b, n, MSG_NOSIGNAL) : recv(fd, b, n, 0);
		if (k < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (k < 0)
			return -errno;
		if (k == 0)
			return -ECONNRESET;
		b += k;
		n -= (size_t)k;
	}
	return 0;
}

/* barrier: both sides reach the same step before either goes on. */
static void barrier(const char *step)
{
	char out = 'B', in = 0;
	int rc = io_all(sock, &out, 1, 1, BARRIER_TIMEOUT_MS);
	if (rc == 0)
		rc = io_all(sock, &in, 1, 0, BARRIER_TIMEOUT_MS);
	if (rc != 0 || in != 'B') {
		char what[128];
		snprintf(what, sizeof(what), "barrier after %s: %s", step, rc ? strerror(-rc) : "out of step");
		fatal("barrier", what);
	}
}

static int tcp_listen(void)
{
	struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai;
	if (getaddrinfo(NULL, TCP_PORT, &hints, &ai) != 0)
		return -1;
	int l = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
	int one = 1;
	setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (l < 0 || bind(l, ai->ai_addr, ai->ai_addrlen) != 0 || listen(l, 1) != 0) {
		freeaddrinfo(ai);
		return -1;
	}
	freeaddrinfo(ai);
	struct pollfd pfd = {.fd = l, .events = POLLIN};
	if (poll(&pfd, 1, 60000) != 1) {
		close(l);
		errno = ETIMEDOUT;
		return -1;
	}
	int s = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	close(l);
	return s;
}

static int tcp_connect(const char *host)
{
	struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai;
	if (getaddrinfo(host, TCP_PORT, &hints, &ai) != 0)
		return -1;
	long long deadline = now_ms() + 30000;
	for (;;) {
		int s = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
		if (s >= 0 && connect(s, ai->ai_addr, ai->ai_addrlen) == 0) {
			freeaddrinfo(ai);
			return s;
		}
		if (s >= 0)
			close(s);
		if (now_ms() > deadline) {
			freeaddrinfo(ai);
			return -1;
		}
		usleep(100000); /* the server may not listen yet */
	}
}

/* --- two hosts: the verbs side ------------------------------------------ */

enum { QP_RC, QP_UC, QP_UD, QP_SRQ, NQP };

/* What each side tells the other. */
struct info {
	uint32_t qpn[NQP];
	uint32_t psn[NQP];
	uint8_t gid[16];
	uint64_t addr;
	uint32_t rkey;
	uint32_t qkey; /* the UD QP's */
};

/* The buffer: receive slots, then the areas. */
#define SLOT 4096
#define NSLOT 16
#define OFF_SEND (NSLOT * SLOT)		  /* what this side sends from: 16 KiB */
#define OFF_WRITE (OFF_SEND + 16384)	  /* the peer's WRITEs land here: 16 KiB */
#define OFF_READSRC (OFF_WRITE + 16384)	  /* the peer READs this: 8 KiB */
#define OFF_READDST (OFF_READSRC + 8192) /* this side's READs land here: 8 KiB */
#define OFF_ATOMIC (OFF_READDST + 8192)  /* the word the peer's atomics change */
#define OFF_ATOMRES (OFF_ATOMIC + 64)	  /* this side's atomics' results */
#define BUF_LEN (OFF_ATOMRES + 4096)

static struct {
	int server;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	uint8_t *buf;
	struct ibv_mr *mr;
	struct ibv_comp_channel *ch;
	struct ibv_cq *scq, *rcq, *ocq; /* sends; the RC QP's receives; the others' receives */
	struct ibv_srq *srq;
	struct ibv_qp *qp[NQP];
	struct ibv_port_attr port;
	union ibv_gid gid;
	struct info me, peer;
	int rcq_ctx;
} S;

static uint8_t *slot(int i) { return S.buf + (size_t)i * SLOT; }

static int post_recv_sges(struct ibv_qp *qp, struct ibv_srq *srq, uint64_t wr_id, struct ibv_sge *sg, int n)
{
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = sg, .num_sge = n}, *bad = NULL;
	return srq ? ibv_post_srq_recv(srq, &wr, &bad) : ibv_post_recv(qp, &wr, &bad);
}

static int post_slot(struct ibv_qp *qp, struct ibv_srq *srq, uint64_t wr_id, int s, uint32_t len)
{
	struct ibv_sge sg = {.addr = (uintptr_t)slot(s), .length = len, .lkey = S.mr->lkey};
	return post_recv_sges(qp, srq, wr_id, &sg, 1);
}

static int post_send_wr(struct ibv_qp *qp, struct ibv_send_wr *wr, const char *name)
{
	struct ibv_send_wr *bad = NULL;
	int rc = ibv_post_send(qp, wr, &bad);
	if (rc)
		check(name, 0, "ibv_post_send returned %d (%s)", rc, strerror(rc));
	return rc == 0;
}

static struct ibv_sge sge_at(size_t off, uint32_t len)
{
	struct ibv_sge s = {.addr = (uintptr_t)(S.buf + off), .length = len, .lkey = S.mr->lkey};
	return s;
}

static const char *qp_names[NQP] = {"rc", "uc", "ud", "srq_rc"};

/* Receive slots and wr_ids (100 + slot): server: 0..5 RC (5 WRs, the last
 * of 2 SGEs: slots 4 and 5), 6..7 UC, 8..9 the SRQ, 10 UD; client: 0 RC,
 * 1 UD. */
enum {
	SRV_RC_SEND = 0,
	SRV_RC_IMM = 1,
	SRV_RC_INLINE = 2,
	SRV_RC_WIMM = 3,
	SRV_RC_MSGE = 4, /* and 5 */
	SRV_UC_SEND = 6,
	SRV_UC_WIMM = 7,
	SRV_SRQ0 = 8,
	SRV_SRQ1 = 9,
	SRV_UD = 10,
	CLI_RC = 0,
	CLI_UD = 1,
	CLI_SOL = 12, /* and 13: the solicited-event step's */
};

static void setup(void)
{
	int rc;
	S.ctx = open_dev(0);
	rc = ibv_query_port(S.ctx, 1, &S.port);
	if (rc)
		fatal("setup", "ibv_query_port failed");
	if (ibv_query_gid(S.ctx, 1, GID_INDEX, &S.gid))
		fatal("setup", "ibv_query_gid failed");
	S.pd = ibv_alloc_pd(S.ctx);
	if (posix_memalign((void **)&S.buf, 4096, BUF_LEN))
		fatal("setup", "out of memory");
	memset(S.buf, 0, BUF_LEN);
	pattern(S.buf + OFF_READSRC, 8192, S.server ? 11 : 12);
	*(uint64_t *)(S.buf + OFF_ATOMIC) = 100;
	S.mr = S.pd ? ibv_reg_mr(S.pd, S.buf, BUF_LEN,
				 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
					 IBV_ACCESS_REMOTE_ATOMIC)
		     : NULL;
	check("setup_pd_mr", S.pd && S.mr, "pd %p mr %p: errno %d %s", (void *)S.pd, (void *)S.mr, errno, strerror(errno));
	if (!S.mr)
		fatal("setup", "no MR");
	if (!S.server) {
		S.ch = ibv_create_comp_channel(S.ctx);
		check("setup_comp_channel", S.ch != NULL, "errno %d %s", errno, strerror(errno));
		if (!S.ch)
			fatal("setup", "no channel");
	}
	S.scq = ibv_create_cq(S.ctx, 64, NULL, NULL, 0);
	S.rcq = ibv_create_cq(S.ctx, 64, &S.rcq_ctx, S.ch, 0);
	S.ocq = ibv_create_cq(S.ctx, 64, NULL, NULL, 0);
	check("setup_cqs", S.scq && S.rcq && S.ocq, "errno %d %s", errno, strerror(errno));
	if (!S.scq || !S.rcq || !S.ocq)
		fatal("setup", "no CQs");
	struct ibv_srq_init_attr si;
	memset(&si, 0, sizeof(si));
	si.attr.max_wr = 16;
	si.attr.max_sge = 1;
	S.srq = ibv_create_srq(S.pd, &si);
	check("setup_srq", S.srq != NULL, "errno %d %s", errno, strerror(errno));
	if (!S.srq)
		fatal("setup", "no SRQ");
	struct ibv_qp_init_attr ia;
	memset(&ia, 0, sizeof(ia));
	ia.qp_type = IBV_QPT_RC;
	ia.send_cq = S.scq;
	ia.recv_cq = S.rcq;
	ia.cap.max_send_wr = 32;
	ia.cap.max_recv_wr = 32;
	ia.cap.max_send_sge = 3;
	ia.cap.max_recv_sge = 2;
	ia.cap.max_inline_data = 256; /* softrnic's most */
	S.qp[QP_RC] = ibv_create_qp(S.pd, &ia);
	check("setup_qp_rc", S.qp[QP_RC] && ia.cap.max_inline_data >= 256 && ia.cap.max_send_sge >= 3 &&
				     ia.cap.max_recv_sge >= 2,
	      "qp %p (errno %d %s), max_inline_data %u, sge %u/%u", (void *)S.qp[QP_RC], errno, strerror(errno),
	      ia.cap.max_inline_data, ia.cap.max_send_sge, ia.cap.max_recv_sge);
	S.qp[QP_UC] = make_qp(S.pd, IBV_QPT_UC, S.scq, S.ocq, NULL, 1, 1, 0);
	S.qp[QP_UD] = make_qp(S.pd, IBV_QPT_UD, S.scq, S.ocq, NULL, 1, 1, 0);
	S.qp[QP_SRQ] = make_qp(S.pd, IBV_QPT_RC, S.scq, S.ocq, S.srq, 1, 0, 0);
	for (int i = 0; i < NQP; i++) {
		char name[32];
		snprintf(name, sizeof(name), "setup_qp_%s", qp_names[i]);
		if (i != QP_RC)
			check(name, S.qp[i] != NULL, "errno %d %s", errno, strerror(errno));
		if (!S.qp[i])
			fatal("setup", "no QP");
		rc = qp_init(S.qp[i], IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
					      IBV_ACCESS_REMOTE_ATOMIC);
		snprintf(name, sizeof(name), "init_qp_%s", qp_names[i]);
		check(name, rc == 0, "ibv_modify_qp to INIT returned %d (%s)", rc, strerror(rc));
	}
	srand48(getpid() ^ time(NULL));
	for (int i = 0; i < NQP; i++) {
		S.me.qpn[i] = S.qp[i]->qp_num;
		S.me.psn[i] = (uint32_t)lrand48() & 0xffffff;
	}
	memcpy(S.me.gid, S.gid.raw, 16);
	S.me.addr = (uintptr_t)S.buf;
	S.me.rkey = S.mr->rkey;
	S.me.qkey = UD_QKEY;

	/* Every receive, before the peer can send. */
	int ok = 1;
	if (S.server) {
		ok &= post_slot(S.qp[QP_RC], NULL, 100 + SRV_RC_SEND, SRV_RC_SEND, SLOT) == 0;
		ok &= post_slot(S.qp[QP_RC], NULL, 100 + SRV_RC_IMM, SRV_RC_IMM, SLOT) == 0;
		ok &= post_slot(S.qp[QP_RC], NULL, 100 + SRV_RC_INLINE, SRV_RC_INLINE, SLOT) == 0;
		ok &= post_slot(S.qp[QP_RC], NULL, 100 + SRV_RC_WIMM, SRV_RC_WIMM, SLOT) == 0;
		struct ibv_sge two[2] = {
			{.addr = (uintptr_t)slot(SRV_RC_MSGE), .length = 400, .lkey = S.mr->lkey},
			{.addr = (uintptr_t)slot(SRV_RC_MSGE + 1), .length = 400, .lkey = S.mr->lkey},
		};
		ok &= post_recv_sges(S.qp[QP_RC], NULL, 100 + SRV_RC_MSGE, two, 2) == 0;
		ok &= post_slot(S.qp[QP_UC], NULL, 100 + SRV_UC_SEND, SRV_UC_SEND, SLOT) == 0;
		ok &= post_slot(S.qp[QP_UC], NULL, 100 + SRV_UC_WIMM, SRV_UC_WIMM, SLOT) == 0;
		ok &= post_slot(NULL, S.srq, 100 + SRV_SRQ0, SRV_SRQ0, SLOT) == 0;
		ok &= post_slot(NULL, S.srq, 100 + SRV_SRQ1, SRV_SRQ1, SLOT) == 0;
		ok &= post_slot(S.qp[QP_UD], NULL, 100 + SRV_UD, SRV_UD, SLOT) == 0;
	} else {
		ok &= post_slot(S.qp[QP_RC], NULL, 100 + CLI_RC, CLI_RC, SLOT) == 0;
		ok &= post_slot(S.qp[QP_UD], NULL, 100 + CLI_UD, CLI_UD, SLOT) == 0;
	}
	check("post_receives", ok, "an ibv_post_recv or ibv_post_srq_recv failed");
}

static void connect_qps(void)
{
	union ibv_gid pgid;
	memcpy(pgid.raw, S.peer.gid, 16);
	char g[INET6_ADDRSTRLEN];
	gid_str(&pgid, g, sizeof(g));
	printf("# peer: gid %s, rc qpn 0x%x, uc 0x%x, ud 0x%x, srq_rc 0x%x, addr 0x%llx, rkey 0x%x, qkey 0x%x\n", g,
	       S.peer.qpn[QP_RC], S.peer.qpn[QP_UC], S.peer.qpn[QP_UD], S.peer.qpn[QP_SRQ],
	       (unsigned long long)S.peer.addr, S.peer.rkey, S.peer.qkey);
	for (int i = 0; i < NQP; i++) {
		char name[32];
		int rc = qp_rtr(S.qp[i], S.port.active_mtu, S.peer.qpn[i], S.peer.psn[i], &pgid);
		snprintf(name, sizeof(name), "rtr_qp_%s", qp_names[i]);
		check(name, rc == 0 && qp_state(S.qp[i]) == IBV_QPS_RTR, "ibv_modify_qp to RTR returned %d (%s)", rc,
		      strerror(rc));
		rc = qp_rts(S.qp[i], S.me.psn[i]);
		snprintf(name, sizeof(name), "rts_qp_%s", qp_names[i]);
		check(name, rc == 0 && qp_state(S.qp[i]) == IBV_QPS_RTS, "ibv_modify_qp to RTS returned %d (%s)", rc,
		      strerror(rc));
	}
}

static uint64_t raddr(size_t off) { return S.peer.addr + off; }

/* send_op posts one signaled work request on qp and waits for its
 * completion on the send CQ. */
static int send_op(const char *name, int q, struct ibv_send_wr *wr, int opcode)
{
	struct ibv_wc wc;
	wr->send_flags |= IBV_SEND_SIGNALED;
	if (!post_send_wr(S.qp[q], wr, name))
		return 0;
	return expect_wc(S.scq, &wc, name, IBV_WC_SUCCESS, opcode, wr->wr_id);
}

/* The steps. Each side runs each, then they meet at a barrier. */

static void step_rc_send(void)
{
	char n[64];
	if (!S.server) {
		pattern(S.buf + OFF_SEND + 1, 3500, 1);
		struct ibv_sge sg = sge_at(OFF_SEND + 1, 3500); /* an odd address; several packets */
		struct ibv_send_wr wr = {.wr_id = 1001, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_SEND};
		send_op("rc_send_completion", QP_RC, &wr, IBV_WC_SEND);
		pattern(S.buf + OFF_SEND + 1, 500, 2);
		wr.wr_id = 1002;
		wr.opcode = IBV_WR_SEND_WITH_IMM;
		wr.imm_data = htonl(0x12345678);
		sg.length = 500;
		send_op("rc_send_imm_completion", QP_RC, &wr, IBV_WC_SEND);
		return;
	}
	struct ibv_wc wc;
	if (expect_wc(S.rcq, &wc, "rc_recv", IBV_WC_SUCCESS, IBV_WC_RECV, 100 + SRV_RC_SEND)) {
		check("rc_recv_wc", wc.byte_len == 3500 && !(wc.wc_flags & IBV_WC_WITH_IMM) &&
					    wc.qp_num == S.qp[QP_RC]->qp_num,
		      "byte_len %u, wc_flags 0x%x, qp_num 0x%x (want 3500, no IMM, 0x%x)", wc.byte_len, wc.wc_flags,
		      wc.qp_num, S.qp[QP_RC]->qp_num);
		check_pattern("rc_recv_data", slot(SRV_RC_SEND), 3500, 1, 0);
	}
	if (expect_wc(S.rcq, &wc, "rc_recv_imm", IBV_WC_SUCCESS, IBV_WC_RECV, 100 + SRV_RC_IMM)) {
		check("rc_recv_imm_wc", wc.byte_len == 500 && (wc.wc_flags & IBV_WC_WITH_IMM) &&
						wc.imm_data == htonl(0x12345678),
		      "byte_len %u, wc_flags 0x%x, imm_data 0x%08x (network order; want 500, WITH_IMM, 0x%08x)",
		      wc.byte_len, wc.wc_flags, wc.imm_data, htonl(0x12345678));
		snprintf(n, sizeof(n), "rc_recv_imm_data");
		check_pattern(n, slot(SRV_RC_IMM), 500, 2, 0);
	}
}

static void step_rc_inline(void)
{
	if (!S.server) {
		uint8_t msg[200]; /* on the stack, not registered */
		pattern(msg, sizeof(msg), 3);
		struct ibv_sge sg = {.addr = (uintptr_t)msg, .length = sizeof(msg), .lkey = 0};
		struct ibv_send_wr wr = {.wr_id = 1003, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED};
		struct ibv_send_wr *bad = NULL;
		int rc = ibv_post_send(S.qp[QP_RC], &wr, &bad);
		memset(msg, 0xee, sizeof(msg)); /* inline: the data was taken at the post */
		check("rc_send_inline_post", rc == 0, "ibv_post_send returned %d (%s)", rc, strerror(rc));
		struct ibv_wc wc;
		if (rc == 0)
			expect_wc(S.scq, &wc, "rc_send_inline_completion", IBV_WC_SUCCESS, IBV_WC_SEND, 1003);
		return;
	}
	struct ibv_wc wc;
	if (expect_wc(S.rcq, &wc, "rc_recv_inline", IBV_WC_SUCCESS, IBV_WC_RECV, 100 + SRV_RC_INLINE)) {
		check("rc_recv_inline_len", wc.byte_len == 200, "byte_len %u, want 200", wc.byte_len);
		check_pattern("rc_recv_inline_data", slot(SRV_RC_INLINE), 200, 3, 0);
	}
}

static void step_rc_write(void)
{
	if (!S.server) {
		pattern(S.buf + OFF_SEND, 3000, 4);
		struct ibv_sge sg = sge_at(OFF_SEND, 3000);
		struct ibv_send_wr wr = {.wr_id = 1004, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE};
		wr.wr.rdma.remote_addr = raddr(OFF_WRITE);
		wr.wr.rdma.rkey = S.peer.rkey;
		send_op("rc_write_completion", QP_RC, &wr, IBV_WC_RDMA_WRITE);
	}
	barrier("rc_write");
	if (S.server)
		check_pattern("rc_write_data", S.buf + OFF_WRITE, 3000, 4, 0);
}

static void step_rc_write_imm(void)
{
	if (!S.server) {
		pattern(S.buf + OFF_SEND, 2000, 5);
		struct ibv_sge sg = sge_at(OFF_SEND, 2000);
		struct ibv_send_wr wr = {.wr_id = 1005, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM};
		wr.imm_data = htonl(0xdeadbeef);
		wr.wr.rdma.remote_addr = raddr(OFF_WRITE + 4096);
		wr.wr.rdma.rkey = S.peer.rkey;
		send_op("rc_write_imm_completion", QP_RC, &wr, IBV_WC_RDMA_WRITE);
		return;
	}
	struct ibv_wc wc;
	if (expect_wc(S.rcq, &wc, "rc_recv_write_imm", IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, 100 + SRV_RC_WIMM)) {
		check("rc_recv_write_imm_wc", (wc.wc_flags & IBV_WC_WITH_IMM) && wc.imm_data == htonl(0xdeadbeef) &&
						      (wc.byte_len == 0 || wc.byte_len == 2000),
		      "wc_flags 0x%x, imm_data 0x%08x (want WITH_IMM, 0x%08x), byte_len %u (want 0 or 2000)", wc.wc_flags,
		      wc.imm_data, htonl(0xdeadbeef), wc.byte_len);
		check_pattern("rc_write_imm_data", S.buf + OFF_WRITE + 4096, 2000, 5, 0);
	}
}

static void step_rc_read(void)
{
	if (S.server)
		return;
	memset(S.buf + OFF_READDST, 0, 8192);
	struct ibv_sge sg = sge_at(OFF_READDST, 3000);
	struct ibv_send_wr wr = {.wr_id = 1006, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_RDMA_READ};
	wr.wr.rdma.remote_addr = raddr(OFF_READSRC + 100);
	wr.wr.rdma.rkey = S.peer.rkey;
	if (send_op("rc_read_completion", QP_RC, &wr, IBV_WC_RDMA_READ))
		check_pattern("rc_read_data", S.buf + OFF_READDST, 3000, 11, 100);
}

static int atomic_op(const char *name, uint64_t wr_id, enum ibv_wr_opcode op, uint64_t compare_add, uint64_t swap,
		     size_t res_off)
{
	*(uint64_t *)(S.buf + res_off) = 0xffffffffffffffffull;
	struct ibv_sge sg = sge_at(res_off, 8);
	struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sg, .num_sge = 1, .opcode = op};
	wr.wr.atomic.remote_addr = raddr(OFF_ATOMIC);
	wr.wr.atomic.rkey = S.peer.rkey;
	wr.wr.atomic.compare_add = compare_add;
	wr.wr.atomic.swap = swap;
	return send_op(name, QP_RC, &wr, op == IBV_WR_ATOMIC_CMP_AND_SWP ? IBV_WC_COMP_SWAP : IBV_WC_FETCH_ADD);
}

static void step_rc_atomics(void)
{
	if (!S.server) {
		uint64_t *res = (uint64_t *)(S.buf + OFF_ATOMRES);
		if (atomic_op("rc_cas_completion", 1007, IBV_WR_ATOMIC_CMP_AND_SWP, 100, 200, OFF_ATOMRES))
			check("rc_cas_old_value", res[0] == 100, "returned %llu, want 100 (and the word swapped to 200)",
			      (unsigned long long)res[0]);
		if (atomic_op("rc_cas_mismatch_completion", 1008, IBV_WR_ATOMIC_CMP_AND_SWP, 100, 300, OFF_ATOMRES + 8))
			check("rc_cas_mismatch_old_value", res[1] == 200, "returned %llu, want 200 (and no swap)",
			      (unsigned long long)res[1]);
		if (atomic_op("rc_fetch_add_completion", 1009, IBV_WR_ATOMIC_FETCH_AND_ADD, 5, 0, OFF_ATOMRES + 16))
			check("rc_fetch_add_old_value", res[2] == 200, "returned %llu, want 200", (unsigned long long)res[2]);
		res[3] = 0;
		struct ibv_sge sg = sge_at(OFF_ATOMRES + 24, 8);
		struct ibv_send_wr wr = {.wr_id = 1010, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_RDMA_READ};
		wr.wr.rdma.remote_addr = raddr(OFF_ATOMIC);
		wr.wr.rdma.rkey = S.peer.rkey;
		if (send_op("rc_atomic_read_back_completion", QP_RC, &wr, IBV_WC_RDMA_READ))
			check("rc_atomic_remote_value", res[3] == 205, "the remote word reads %llu, want 205 (100, CAS to 200, +5)",
			      (unsigned long long)res[3]);
	}
	barrier("rc_atomics");
	if (S.server) {
		uint64_t v = *(volatile uint64_t *)(S.buf + OFF_ATOMIC);
		check("rc_atomic_local_value", v == 205, "the word is %llu, want 205", (unsigned long long)v);
	}
}

static void step_rc_multi_sge(void)
{
	if (!S.server) {
		/* 600 bytes of pattern 6 in three pieces, from scattered places */
		uint8_t whole[600];
		pattern(whole, sizeof(whole), 6);
		memcpy(S.buf + OFF_SEND + 0, whole, 100);
		memcpy(S.buf + OFF_SEND + 2001, whole + 100, 200);
		memcpy(S.buf + OFF_SEND + 5003, whole + 300, 300);
		struct ibv_sge sg[3] = {sge_at(OFF_SEND, 100), sge_at(OFF_SEND + 2001, 200), sge_at(OFF_SEND + 5003, 300)};
		struct ibv_send_wr wr = {.wr_id = 1011, .sg_list = sg, .num_sge = 3, .opcode = IBV_WR_SEND};
		send_op("rc_send_3_sge_completion", QP_RC, &wr, IBV_WC_SEND);
		return;
	}
	struct ibv_wc wc;
	if (expect_wc(S.rcq, &wc, "rc_recv_2_sge", IBV_WC_SUCCESS, IBV_WC_RECV, 100 + SRV_RC_MSGE)) {
		check("rc_recv_2_sge_len", wc.byte_len == 600, "byte_len %u, want 600", wc.byte_len);
		check_pattern("rc_recv_2_sge_data_first", slot(SRV_RC_MSGE), 400, 6, 0);
		check_pattern("rc_recv_2_sge_data_second", slot(SRV_RC_MSGE + 1), 200, 6, 400);
	}
}

static void step_uc(void)
{
	if (!S.server) {
		pattern(S.buf + OFF_SEND, 800, 7);
		struct ibv_sge sg = sge_at(OFF_SEND, 800);
		struct ibv_send_wr wr = {.wr_id = 1012, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_SEND};
		send_op("uc_send_completion", QP_UC, &wr, IBV_WC_SEND);
		pattern(S.buf + OFF_SEND + 4096, 1500, 8);
		struct ibv_sge sg2 = sge_at(OFF_SEND + 4096, 1500);
		struct ibv_send_wr w2 = {.wr_id = 1013, .sg_list = &sg2, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM};
		w2.imm_data = htonl(0xabcd0001);
		w2.wr.rdma.remote_addr = raddr(OFF_WRITE + 8192);
		w2.wr.rdma.rkey = S.peer.rkey;
		send_op("uc_write_imm_completion", QP_UC, &w2, IBV_WC_RDMA_WRITE);
		return;
	}
	struct ibv_wc wc;
	if (expect_wc(S.ocq, &wc, "uc_recv", IBV_WC_SUCCESS, IBV_WC_RECV, 100 + SRV_UC_SEND)) {
		check("uc_recv_wc", wc.byte_len == 800 && wc.qp_num == S.qp[QP_UC]->qp_num,
		      "byte_len %u, qp_num 0x%x (want 800, 0x%x)", wc.byte_len, wc.qp_num, S.qp[QP_UC]->qp_num);
		check_pattern("uc_recv_data", slot(SRV_UC_SEND), 800, 7, 0);
	}
	if (expect_wc(S.ocq, &wc, "uc_recv_write_imm", IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, 100 + SRV_UC_WIMM)) {
		check("uc_recv_write_imm_wc", (wc.wc_flags & IBV_WC_WITH_IMM) && wc.imm_data == htonl(0xabcd0001),
		      "wc_flags 0x%x, imm_data 0x%08x, want 0x%08x", wc.wc_flags, wc.imm_data, htonl(0xabcd0001));
		check_pattern("uc_write_imm_data", S.buf + OFF_WRITE + 8192, 1500, 8, 0);
	}
}

static void step_srq(void)
{
	if (!S.server) {
		pattern(S.buf + OFF_SEND, 300, 9);
		pattern(S.buf + OFF_SEND + 1024, 301, 10);
		struct ibv_sge sg = sge_at(OFF_SEND, 300);
		struct ibv_send_wr wr = {.wr_id = 1014, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_SEND};
		send_op("srq_send_1_completion", QP_SRQ, &wr, IBV_WC_SEND);
		sg = sge_at(OFF_SEND + 1024, 301);
		wr.wr_id = 1015;
		send_op("srq_send_2_completion", QP_SRQ, &wr, IBV_WC_SEND);
		return;
	}
	struct ibv_wc wc;
	if (expect_wc(S.ocq, &wc, "srq_recv_1", IBV_WC_SUCCESS, IBV_WC_RECV, 100 + SRV_SRQ0)) {
		check("srq_recv_1_wc", wc.byte_len == 300 && wc.qp_num == S.qp[QP_SRQ]->qp_num,
		      "byte_len %u, qp_num 0x%x (want 300, the SRQ's RC QP 0x%x)", wc.byte_len, wc.qp_num,
		      S.qp[QP_SRQ]->qp_num);
		check_pattern("srq_recv_1_data", slot(SRV_SRQ0), 300, 9, 0);
	}
	if (expect_wc(S.ocq, &wc, "srq_recv_2", IBV_WC_SUCCESS, IBV_WC_RECV, 100 + SRV_SRQ1)) {
		check("srq_recv_2_wc", wc.byte_len == 301 && wc.qp_num == S.qp[QP_SRQ]->qp_num,
		      "byte_len %u, qp_num 0x%x (want 301, 0x%x)", wc.byte_len, wc.qp_num, S.qp[QP_SRQ]->qp_num);
		check_pattern("srq_recv_2_data", slot(SRV_SRQ1), 301, 10, 0);
	}
}

static struct ibv_ah *ud_ah; /* the client's (ibv_create_ah) or the server's (from the WC) */

static void step_ud(void)
{
	struct ibv_wc wc;
	if (!S.server) {
		struct ibv_ah_attr aa;
		memset(&aa, 0, sizeof(aa));
		aa.is_global = 1;
		memcpy(aa.grh.dgid.raw, S.peer.gid, 16);
		aa.grh.sgid_index = GID_INDEX;
		aa.grh.hop_limit = 64;
		aa.port_num = 1;
		ud_ah = ibv_create_ah(S.pd, &aa);
		if (!check("ud_create_ah", ud_ah != NULL, "errno %d %s", errno, strerror(errno)))
			return;
		pattern(S.buf + OFF_SEND, 512, 13);
		struct ibv_sge sg = sge_at(OFF_SEND, 512);
		struct ibv_send_wr wr = {.wr_id = 1016, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_SEND};
		wr.wr.ud.ah = ud_ah;
		wr.wr.ud.remote_qpn = S.peer.qpn[QP_UD];
		wr.wr.ud.remote_qkey = S.peer.qkey;
		send_op("ud_send_completion", QP_UD, &wr, IBV_WC_SEND);
		if (expect_wc(S.ocq, &wc, "ud_reply_recv", IBV_WC_SUCCESS, IBV_WC_RECV, 100 + CLI_UD)) {
			check("ud_reply_wc", wc.byte_len == 40 + 256 && (wc.wc_flags & IBV_WC_GRH) &&
						     wc.src_qp == S.peer.qpn[QP_UD] && wc.qp_num == S.qp[QP_UD]->qp_num,
			      "byte_len %u (want 296), wc_flags 0x%x (want GRH), src_qp 0x%x (want 0x%x), qp_num 0x%x",
			      wc.byte_len, wc.wc_flags, wc.src_qp, S.peer.qpn[QP_UD], wc.qp_num);
			check_pattern("ud_reply_data", slot(CLI_UD) + 40, 256, 14, 0);
		}
		return;
	}
	if (!expect_wc(S.ocq, &wc, "ud_recv", IBV_WC_SUCCESS, IBV_WC_RECV, 100 + SRV_UD))
		return;
	check("ud_recv_wc", wc.byte_len == 40 + 512 && (wc.wc_flags & IBV_WC_GRH) && wc.src_qp == S.peer.qpn[QP_UD] &&
				    wc.qp_num == S.qp[QP_UD]->qp_num,
	      "byte_len %u (want 552), wc_flags 0x%x (want GRH), src_qp 0x%x (want 0x%x), qp_num 0x%x", wc.byte_len,
	      wc.wc_flags, wc.src_qp, S.peer.qpn[QP_UD], wc.qp_num);
	check_pattern("ud_recv_data", slot(SRV_UD) + 40, 512, 13, 0);
	const uint8_t *grh = slot(SRV_UD);
	check("ud_recv_grh_ipv4", (grh[20] >> 4) == 4 && memcmp(grh + 32, S.peer.gid + 12, 4) == 0 &&
					  memcmp(grh + 36, S.me.gid + 12, 4) == 0,
	      "IP version %d, source %u.%u.%u.%u, destination %u.%u.%u.%u", grh[20] >> 4, grh[32], grh[33], grh[34],
	      grh[35], grh[36], grh[37], grh[38], grh[39]);
	ud_ah = ibv_create_ah_from_wc(S.pd, &wc, (struct ibv_grh *)slot(SRV_UD), 1);
	if (!check("ud_create_ah_from_wc", ud_ah != NULL, "errno %d %s", errno, strerror(errno)))
		return;
	pattern(S.buf + OFF_SEND, 256, 14);
	struct ibv_sge sg = sge_at(OFF_SEND, 256);
	struct ibv_send_wr wr = {.wr_id = 1017, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_SEND};
	wr.wr.ud.ah = ud_ah;
	wr.wr.ud.remote_qpn = wc.src_qp;
	wr.wr.ud.remote_qkey = S.peer.qkey;
	send_op("ud_reply_completion", QP_UD, &wr, IBV_WC_SEND);
}

/* The client sleeps on its completion channel for the server's SEND. */
static void step_channel(void)
{
	if (!S.server) {
		int rc = ibv_req_notify_cq(S.rcq, 0);
		check("channel_req_notify_cq", rc == 0, "returned %d (%s)", rc, strerror(rc));
		barrier("channel armed"); /* the server sends only now */
		struct pollfd pfd = {.fd = S.ch->fd, .events = POLLIN};
		long long t0 = now_ms();
		rc = poll(&pfd, 1, TIMEOUT_MS);
		int woke = check("channel_poll_readable", rc == 1 && (pfd.revents & POLLIN),
				 "poll() on the channel's fd returned %d (revents 0x%x) after %lld ms", rc, pfd.revents,
				 now_ms() - t0);
		if (!woke && rc == 0)
			timed_out();
		if (woke) {
			struct ibv_cq *cq = NULL;
			void *ctx = NULL;
			rc = ibv_get_cq_event(S.ch, &cq, &ctx);
			check("channel_get_cq_event", rc == 0 && cq == S.rcq && ctx == &S.rcq_ctx,
			      "returned %d (errno %d), cq %p (want %p), cq_context %p (want %p)", rc, errno, (void *)cq,
			      (void *)S.rcq, ctx, (void *)&S.rcq_ctx);
			if (rc == 0)
				ibv_ack_cq_events(cq, 1);
		}
		struct ibv_wc wc;
		if (expect_wc(S.rcq, &wc, "channel_recv", IBV_WC_SUCCESS, IBV_WC_RECV, 100 + CLI_RC)) {
			check("channel_recv_len", wc.byte_len == 700, "byte_len %u, want 700", wc.byte_len);
			check_pattern("channel_recv_data", slot(CLI_RC), 700, 15, 0);
		}
		return;
	}
	barrier("channel armed");
	pattern(S.buf + OFF_SEND, 700, 15);
	struct ibv_sge sg = sge_at(OFF_SEND, 700);
	struct ibv_send_wr wr = {.wr_id = 1018, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_SEND};
	send_op("channel_send_completion", QP_RC, &wr, IBV_WC_SEND);
}

/* A solicited-only arm (ibv_req_notify_cq(cq, 1)): the server's first
 * SEND, without IBV_SEND_SOLICITED, wakes no one; its second, with it,
 * does; both complete. */
static void step_solicited(void)
{
	if (!S.server) {
		int ok = post_slot(S.qp[QP_RC], NULL, 100 + CLI_SOL, CLI_SOL, SLOT) == 0 &&
			 post_slot(S.qp[QP_RC], NULL, 101 + CLI_SOL, CLI_SOL + 1, SLOT) == 0;
		int rc = ibv_req_notify_cq(S.rcq, 1);
		check("solicited_arm", ok && rc == 0, "post_recv %d, ibv_req_notify_cq returned %d (%s)", ok, rc, strerror(rc));
		barrier("solicited armed");
		struct pollfd pfd = {.fd = S.ch->fd, .events = POLLIN};
		barrier("unsolicited sent"); /* its completion is in the client's CQ, or on its way */
		rc = poll(&pfd, 1, 300);
		check("solicited_not_woken_by_unsolicited", rc == 0, "poll() returned %d (revents 0x%x): an unsolicited SEND woke a solicited-only arm",
		      rc, pfd.revents);
		barrier("solicited go");
		pfd.revents = 0;
		rc = poll(&pfd, 1, TIMEOUT_MS);
		int woke = check("solicited_woken", rc == 1 && (pfd.revents & POLLIN), "poll() returned %d after the solicited SEND", rc);
		if (!woke && rc == 0)
			timed_out();
		if (woke) {
			struct ibv_cq *cq = NULL;
			void *ctx = NULL;
			rc = ibv_get_cq_event(S.ch, &cq, &ctx);
			check("solicited_get_cq_event", rc == 0 && cq == S.rcq, "returned %d, cq %p (want %p)", rc, (void *)cq,
			      (void *)S.rcq);
			if (rc == 0)
				ibv_ack_cq_events(cq, 1);
		}
		struct ibv_wc wc;
		expect_wc(S.rcq, &wc, "solicited_recv_first", IBV_WC_SUCCESS, IBV_WC_RECV, 100 + CLI_SOL);
		expect_wc(S.rcq, &wc, "solicited_recv_second", IBV_WC_SUCCESS, IBV_WC_RECV, 101 + CLI_SOL);
		return;
	}
	barrier("solicited armed");
	pattern(S.buf + OFF_SEND, 64, 16);
	struct ibv_sge sg = sge_at(OFF_SEND, 64);
	struct ibv_send_wr wr = {.wr_id = 1019, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_SEND};
	send_op("unsolicited_send_completion", QP_RC, &wr, IBV_WC_SEND);
	barrier("unsolicited sent");
	barrier("solicited go");
	wr.wr_id = 1020;
	wr.send_flags = IBV_SEND_SOLICITED;
	send_op("solicited_send_completion", QP_RC, &wr, IBV_WC_SEND);
}

/* A WRITE with a wrong R_Key: REM_ACCESS_ERR at the requester. Last:
 * the RC QPs end in ERR. */
static void step_bad_rkey(void)
{
	if (S.server)
		return;
	pattern(S.buf + OFF_SEND, 64, 16);
	struct ibv_sge sg = sge_at(OFF_SEND, 64);
	struct ibv_send_wr wr = {.wr_id = 1019, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED};
	wr.wr.rdma.remote_addr = raddr(OFF_WRITE);
	wr.wr.rdma.rkey = S.peer.rkey ^ 0x00a5a500u;
	struct ibv_wc wc;
	if (post_send_wr(S.qp[QP_RC], &wr, "bad_rkey_write") &&
	    expect_wc(S.scq, &wc, "bad_rkey_write_rem_access_err", IBV_WC_REM_ACCESS_ERR, -1, 1019)) {
		int st = qp_state(S.qp[QP_RC]);
		check("bad_rkey_qp_err", st == IBV_QPS_ERR, "the QP's state is %d, want ERR (%d)", st, IBV_QPS_ERR);
	}
}

static void teardown(void)
{
	int rc;
	char n[48];
	if (ud_ah) {
		rc = ibv_destroy_ah(ud_ah);
		check("destroy_ah", rc == 0, "returned %d (%s)", rc, strerror(rc));
	}
	for (int i = 0; i < NQP; i++) {
		rc = ibv_destroy_qp(S.qp[i]);
		snprintf(n, sizeof(n), "destroy_qp_%s", qp_names[i]);
		check(n, rc == 0, "returned %d (%s)", rc, strerror(rc));
	}
	rc = ibv_destroy_srq(S.srq);
	check("destroy_srq", rc == 0, "returned %d (%s)", rc, strerror(rc));
	rc = ibv_destroy_cq(S.scq);
	check("destroy_cq_send", rc == 0, "returned %d (%s)", rc, strerror(rc));
	rc = ibv_destroy_cq(S.rcq);
	check("destroy_cq_recv", rc == 0, "returned %d (%s)", rc, strerror(rc));
	rc = ibv_destroy_cq(S.ocq);
	check("destroy_cq_other", rc == 0, "returned %d (%s)", rc, strerror(rc));
	if (S.ch) {
		rc = ibv_destroy_comp_channel(S.ch);
		check("destroy_comp_channel", rc == 0, "returned %d (%s)", rc, strerror(rc));
	}
	rc = ibv_dereg_mr(S.mr);
	check("dereg_mr", rc == 0, "returned %d (%s)", rc, strerror(rc));
	rc = ibv_dealloc_pd(S.pd);
	check("dealloc_pd", rc == 0, "returned %d (%s)", rc, strerror(rc));
	rc = ibv_close_device(S.ctx);
	check("close_device", rc == 0, "returned %d (%s)", rc, strerror(rc));
	free(S.buf);
}

/* pair_connect sets this side up, exchanges the QPs' addresses with the
 * peer over TCP and takes the QPs to RTS; it reports whether that went. */
static int pair_connect(int server, const char *host)
{
	S.server = server;
	setup();
	sock = server ? tcp_listen() : tcp_connect(host);
	if (!check("tcp_connect", sock >= 0, "%s port %s: %s", server ? "listen on" : host, TCP_PORT, strerror(errno)))
		return 0;
	int one = 1;
	setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	int rc = io_all(sock, &S.me, sizeof(S.me), 1, BARRIER_TIMEOUT_MS);
	if (rc == 0)
		rc = io_all(sock, &S.peer, sizeof(S.peer), 0, BARRIER_TIMEOUT_MS);
	if (!check("exchange", rc == 0, "%s", strerror(-rc)))
		return 0;
	connect_qps();
	barrier("connect");
	return 1;
}

static int run_pair(int server, const char *host)
{
	if (!pair_connect(server, host))
		return summary();

	step_rc_send();
	barrier("rc_send");
	step_rc_inline();
	barrier("rc_inline");
	step_rc_write(); /* with its own barrier */
	step_rc_write_imm();
	barrier("rc_write_imm");
	step_rc_read();
	barrier("rc_read");
	step_rc_atomics(); /* with its own barrier */
	step_rc_multi_sge();
	barrier("rc_multi_sge");
	step_uc();
	barrier("uc");
	step_srq();
	barrier("srq");
	step_ud();
	barrier("ud");
	step_channel(); /* with its own barrier */
	barrier("channel");
	step_solicited(); /* with its own barriers */
	barrier("solicited");
	step_bad_rkey();
	barrier("bad_rkey");

	teardown();
	close(sock);
	return summary();
}

/* run_exit: the server takes one SEND on its RC QP and exits at once,
 * its device open and nothing called after the poll that took the
 * receive (as a tutorial's server does); the client's SEND must complete
 * in success: the ACK the server's NIC held for that program's next call
 * leaves as it exits. */
static int run_exit(int server, const char *host)
{
	if (!pair_connect(server, host))
		return summary();
	if (server) {
		struct ibv_wc wc;
		expect_wc(S.rcq, &wc, "exit_recv", IBV_WC_SUCCESS, IBV_WC_RECV, 100 + SRV_RC_SEND);
		return summary(); /* no teardown, no ibv_close_device */
	}
	pattern(S.buf + OFF_SEND, 64, 3);
	struct ibv_sge sg = sge_at(OFF_SEND, 64);
	struct ibv_send_wr wr = {.wr_id = 1001, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_SEND};
	send_op("exit_send_completion", QP_RC, &wr, IBV_WC_SEND);
	teardown();
	close(sock);
	return summary();
}

static void usage(void)
{
	fprintf(stderr, "usage: verbs_test [-d DEV] [-r PEER_IPV4] local\n"
			"       verbs_test [-d DEV] server\n"
			"       verbs_test [-d DEV] client HOST\n"
			"       verbs_test [-d DEV] exit-server\n"
			"       verbs_test [-d DEV] exit-client HOST\n");
	exit(2);
}

/* run_async: the device's async events as its port goes down and up: the
 * test takes the netdev down and up after the "# ready" line. Each wait
 * polls the async fd with a timeout. */
static int run_async(void)
{
	struct ibv_context *ctx = open_dev(0);
	if (!ctx)
		fatal("async_open", "no device");
	struct pollfd pfd = {.fd = ctx->async_fd, .events = POLLIN};
	check("async_fd_quiet", poll(&pfd, 1, 100) == 0, "the async fd is readable before any event");
	printf("# ready\n");
	enum ibv_event_type want[] = {IBV_EVENT_PORT_ERR, IBV_EVENT_PORT_ACTIVE};
	for (int i = 0; i < 2; i++) {
		struct ibv_async_event ev;
		int rc;
		do {
			pfd.revents = 0;
			rc = poll(&pfd, 1, 10000);
			if (rc != 1) {
				check(i ? "async_port_active" : "async_port_err", 0, "no event in 10 s (poll %d)", rc);
				return summary();
			}
			if (ibv_get_async_event(ctx, &ev)) {
				check("async_get", 0, "ibv_get_async_event: %s", strerror(errno));
				return summary();
			}
			ibv_ack_async_event(&ev);
		} while (ev.event_type == IBV_EVENT_GID_CHANGE); /* the netdev's addresses may come and go with it */
		check(i ? "async_port_active" : "async_port_err", ev.event_type == want[i] && ev.element.port_num == 1,
		      "event %s (%d) on port %d, want %s", ibv_event_type_str(ev.event_type), ev.event_type,
		      ev.element.port_num, ibv_event_type_str(want[i]));
		if (i == 1) {
			struct ibv_port_attr pa;
			check("async_port_state", ibv_query_port(ctx, 1, &pa) == 0 && pa.state == IBV_PORT_ACTIVE,
			      "port state %d after PORT_ACTIVE", pa.state);
		}
	}
	check("async_close", ibv_close_device(ctx) == 0, "ibv_close_device");
	return summary();
}

int main(int argc, char **argv)
{
	const char *peer = NULL;
	int c;
	setvbuf(stdout, NULL, _IOLBF, 0);
	while ((c = getopt(argc, argv, "+d:r:")) != -1) {
		switch (c) {
		case 'd': dev_name = optarg; break;
		case 'r': peer = optarg; break;
		default: usage();
		}
	}
	if (optind >= argc)
		usage();
	const char *mode = argv[optind];
	printf("# uid %d euid %d\n", (int)getuid(), (int)geteuid());
	if (strcmp(mode, "local") == 0 && optind + 1 == argc) {
		if (peer) {
			struct in_addr a;
			if (inet_pton(AF_INET, peer, &a) != 1)
				usage();
		}
		return run_local(peer);
	}
	if (strcmp(mode, "async") == 0 && optind + 1 == argc)
		return run_async();
	if (strcmp(mode, "server") == 0 && optind + 1 == argc)
		return run_pair(1, NULL);
	if (strcmp(mode, "client") == 0 && optind + 2 == argc)
		return run_pair(0, argv[optind + 1]);
	if (strcmp(mode, "exit-server") == 0 && optind + 1 == argc)
		return run_exit(1, NULL);
	if (strcmp(mode, "exit-client") == 0 && optind + 2 == argc)
		return run_exit(0, argv[optind + 1]);
	usage();
	return 2;
}
