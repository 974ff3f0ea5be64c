/*
 * verbs_calls: what a data-path verb costs a C program on softrnic's
 * libibverbs, in nanoseconds per call: ibv_poll_cq on an empty CQ,
 * ibv_post_recv of one work request, ibv_post_send of one unsignaled
 * inline SEND (to a peer QP that is not there: the frames leave and
 * nothing answers), and ibv_req_notify_cq. Run on the first device with
 * SOFTRNIC_POLL=sleep, so that a call is the call (in app mode an empty
 * poll also runs a turn of the NIC). Printed as "name ns/call".
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static void to_state(struct ibv_qp *qp, enum ibv_qp_state s, union ibv_gid *gid)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = s;
	int mask = IBV_QP_STATE;
	switch (s) {
	case IBV_QPS_INIT:
		a.port_num = 1;
		a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
		mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
		break;
	case IBV_QPS_RTR:
		a.path_mtu = IBV_MTU_1024;
		a.dest_qp_num = 0x123;
		a.ah_attr.is_global = 1;
		a.ah_attr.port_num = 1;
		a.ah_attr.grh.dgid = *gid;
		a.ah_attr.grh.sgid_index = 1;
		a.ah_attr.grh.hop_limit = 64;
		a.max_dest_rd_atomic = 1;
		a.min_rnr_timer = 12;
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			IBV_QP_MIN_RNR_TIMER;
		break;
	case IBV_QPS_RTS:
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 1;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
		break;
	default:
		break;
	}
	if (ibv_modify_qp(qp, &a, mask))
		die("ibv_modify_qp");
}

int main(int argc, char **argv)
{
	const char *peer = argc > 1 ? argv[1] : NULL;
	enum { N = 4000, ROUNDS = 25 };
	struct ibv_device **list = ibv_get_device_list(NULL);
	if (!list || !list[0])
		die("no device");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx)
		die("ibv_open_device");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	static char buf[4096];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 2 * N, NULL, ch, 0);
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = N, .max_recv_wr = N, .max_send_sge = 1, .max_recv_sge = 1, .max_inline_data = 64}};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	if (!pd || !mr || !cq || !qp)
		die("setup");
	union ibv_gid gid;
	ibv_query_gid(ctx, 1, 1, &gid);
	if (peer) { /* the peer's IPv4 address as its GID */
		unsigned a, b, c, d;
		if (sscanf(peer, "%u.%u.%u.%u", &a, &b, &c, &d) == 4) {
			memset(&gid, 0, sizeof(gid));
			gid.raw[10] = gid.raw[11] = 0xff;
			gid.raw[12] = a, gid.raw[13] = b, gid.raw[14] = c, gid.raw[15] = d;
		}
	}
	struct ibv_wc wc[16];
	double best_poll = 1e18, best_recv = 1e18, best_send = 1e18, best_arm = 1e18;
	for (int r = 0; r < ROUNDS; r++) {
		double t = now();
		for (int i = 0; i < N; i++)
			if (ibv_poll_cq(cq, 16, wc) < 0)
				die("ibv_poll_cq");
		best_poll = (now() - t) / N < best_poll ? (now() - t) / N : best_poll;

		t = now();
		for (int i = 0; i < 100; i++)
			ibv_req_notify_cq(cq, 0);
		double arm = (now() - t) / 100;
		best_arm = arm < best_arm ? arm : best_arm;

		to_state(qp, IBV_QPS_RESET, NULL);
		to_state(qp, IBV_QPS_INIT, NULL);
		struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey};
		struct ibv_recv_wr rwr = {.sg_list = &sge, .num_sge = 1}, *rbad;
		t = now();
		for (int i = 0; i < N; i++)
			if (ibv_post_recv(qp, &rwr, &rbad))
				die("ibv_post_recv");
		double recv = (now() - t) / N;
		best_recv = recv < best_recv ? recv : best_recv;

		to_state(qp, IBV_QPS_RTR, &gid);
		to_state(qp, IBV_QPS_RTS, NULL);
		struct ibv_send_wr swr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_INLINE}, *sbad;
		sge.length = 8;
		t = now();
		for (int i = 0; i < N; i++)
			if (ibv_post_send(qp, &swr, &sbad))
				die("ibv_post_send");
		double send = (now() - t) / N;
		best_send = send < best_send ? send : best_send;
	}
	printf("ibv_poll_cq(empty) %.0f\n", best_poll);
	printf("ibv_post_recv %.0f\n", best_recv);
	printf("ibv_post_send(inline) %.0f\n", best_send);
	printf("ibv_req_notify_cq %.0f\n", best_arm);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_destroy_comp_channel(ch);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
