/*
 * softrnic.h: the C libraries' own objects. Each wraps the libibverbs
 * structure an application sees (first or at a known member, so that
 * container_of finds it) and the Go side's handle.
 */
#ifndef SOFTRNIC_C_H
#define SOFTRNIC_C_H

#include <infiniband/verbs.h>
#include <pthread.h>

#include "../srn.h"

#ifndef SOFTRNIC_VERSION
#define SOFTRNIC_VERSION "dev"
#endif

/* As rxe reports them: no IEEE OUI, part 0. */
#define SOFTRNIC_VENDOR_ID 0xffffff
#define SOFTRNIC_VENDOR_PART_ID 0

#define SRN_MAX_DEVICES 32
#define SRN_BATCH 32 /* work requests or completions per call into Go; postBatch there */

struct srn_device {
	struct ibv_device dev;
	char netdev[SRN_NAME_LEN];
	uint8_t mac[6];
	int index;
};

struct srn_context {
	int h;
	struct srn_dev_attr attr;
	int async_pipe[2];
	struct verbs_context vctx; /* last: its ibv_context is the last member */
};

static inline struct srn_context *srn_ctx(struct ibv_context *ctx)
{
	return (struct srn_context *)((char *)ctx - offsetof(struct srn_context, vctx.context));
}

struct srn_async_event {
	uint32_t type;
	uint32_t port;
};

struct srn_pd {
	struct ibv_pd pd;
	int h;
};

struct srn_mr {
	struct ibv_mr mr;
	int h;
};

struct srn_channel {
	struct ibv_comp_channel ch;
	int wfd; /* the pipe's write end: the NIC writes a CQ's pointer there */
	pthread_mutex_t mu; /* drop_events against itself */
};

struct srn_cq {
	struct ibv_cq_ex cqx; /* starts as struct ibv_cq does */
	int h;
	uint32_t events_got; /* under cq.mutex */
	struct srn_wc cur;   /* the extended poll's current completion */
};

static inline struct srn_cq *srn_cq_of(struct ibv_cq *cq)
{
	return (struct srn_cq *)((char *)cq - offsetof(struct srn_cq, cqx));
}

struct srn_srq {
	struct ibv_srq srq;
	int h;
	int max_wr, max_sge;
};

struct srn_qp {
	struct ibv_qp_ex qpx; /* qpx.qp_base is the ibv_qp */
	int h;
	int sig_all;
	uint64_t send_ops; /* created with ibv_create_qp_ex's send_ops_flags: an ibv_qp_ex */
	struct ibv_qp_cap cap;
	pthread_mutex_t mu; /* attr; and the ibv_wr_* batch from start to complete */
	struct ibv_qp_attr attr;
	int wr_n, wr_err;
	struct srn_send_wr wr[SRN_BATCH];
	uint8_t wr_inline[SRN_BATCH][SRN_MAX_INLINE];
};

static inline struct srn_qp *srn_qp_of(struct ibv_qp *qp)
{
	return (struct srn_qp *)((char *)qp - offsetof(struct srn_qp, qpx.qp_base));
}

struct srn_ah {
	struct ibv_ah ah;
	int h;
};

#endif
