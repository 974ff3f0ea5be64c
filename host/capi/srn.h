/*
 * srn.h: the interface between softrnic's C libraries (libibverbs.so.1,
 * librdmacm.so.1, built from host/capi/c) and the NIC in Go
 * (libsoftrnic.so, built from host/capi). Handles are small integers the
 * Go side hands out; a negative return is -errno. Numbers (QP types and
 * states, opcodes, flags, masks, WC status codes) are libibverbs' own.
 *
 * This header is softrnic's; it includes nothing of rdma-core's, so that
 * the Go side builds without rdma-core's headers.
 */
#ifndef SOFTRNIC_SRN_H
#define SOFTRNIC_SRN_H

#include <stdint.h>

#define SRN_MAX_GIDS 16
#define SRN_MAX_SEND_SGE 4
#define SRN_MAX_RECV_SGE 3
#define SRN_MAX_INLINE 256
#define SRN_NAME_LEN 64
#define SRN_ERR_LEN 512

/* What the device is: ibv_query_device, ibv_query_port, the GID table. */
struct srn_dev_attr {
	char netdev[SRN_NAME_LEN];
	char port_kind[8]; /* "xsk" or "udp" */
	uint8_t mac[6];
	uint8_t pad[2];
	uint32_t netdev_mtu; /* bytes */
	uint32_t active_mtu; /* enum ibv_mtu */
	uint32_t queues;
	uint32_t gid_count;
	uint8_t gid[SRN_MAX_GIDS][16];
	uint32_t max_qp, max_qp_wr, max_sge, max_recv_sge, max_inline;
	uint32_t max_cq, max_cqe, max_mr, max_pd, max_srq, max_srq_wr;
	uint32_t max_rd_atomic, max_ah;
	uint32_t max_mcast_grp, max_mcast_qp_attach; /* 0 where the port takes no multicast */
	uint64_t max_mr_size;
};

struct srn_sge {
	uint64_t addr;
	uint32_t length;
	uint32_t lkey;
};

/* A send work request: ibv_send_wr, flattened. */
struct srn_send_wr {
	uint64_t wr_id;
	uint32_t opcode, flags, num_sge;
	uint32_t imm; /* immediate data in host order, or the R_Key to invalidate */
	uint64_t remote_addr;
	uint32_t rkey;
	int32_t ah; /* UD: an AH handle */
	uint64_t compare_add, swap;
	uint32_t remote_qpn, remote_qkey;
	const void *inline_data; /* with IBV_SEND_INLINE: the data, gathered */
	uint32_t inline_len;
	uint32_t pad;
	struct srn_sge sge[SRN_MAX_SEND_SGE];
};

struct srn_recv_wr {
	uint64_t wr_id;
	uint32_t num_sge;
	uint32_t pad;
	struct srn_sge sge[SRN_MAX_RECV_SGE];
};

/* A work completion: ibv_wc less what RoCE does not fill. */
struct srn_wc {
	uint64_t wr_id;
	uint32_t status, opcode, byte_len, qp_num, src_qp, wc_flags;
	uint32_t imm; /* host order */
	uint32_t pad;
};

struct srn_qp_init {
	uint32_t qp_type;
	int32_t send_cq, recv_cq, srq; /* handles; srq -1 for none */
	uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline;
	uint32_t qp_num; /* out */
};

/* What ibv_modify_qp hands over that softrnic uses. */
struct srn_qp_attr {
	uint32_t qp_state, cur_qp_state, path_mtu, qkey;
	uint32_t rq_psn, sq_psn, dest_qp_num, qp_access_flags;
	uint32_t pkey_index, port_num, timeout, retry_cnt;
	uint32_t rnr_retry, min_rnr_timer, max_rd_atomic, max_dest_rd_atomic;
	uint8_t dgid[16]; /* the AV's destination GID */
	uint32_t sgid_index;
	uint32_t traffic_class; /* the AV's GRH traffic class */
};

/* Connection manager events (librdmacm): enum rdma_cm_event_type. */
#define SRN_CM_PRIVATE 256

struct srn_cm_event {
	uint32_t event;
	int32_t status;	     /* 0, -errno, or a REJ reason / SIDR status for REJECTED */
	int32_t id;	     /* the id's handle (for CONNECT_REQUEST, the new id's) */
	int32_t listen_id;   /* CONNECT_REQUEST: the listener's handle; else -1 */
	uint64_t cookie;     /* the id's C pointer (0 for a new id) */
	uint64_t listen_cookie;
	char netdev[SRN_NAME_LEN]; /* the device the id is on now */
	uint8_t src[16], dst[16];  /* IPv4-mapped addresses */
	uint16_t src_port, dst_port;
	uint32_t private_len;
	uint8_t private_data[SRN_CM_PRIVATE];
	/* rdma_conn_param */
	uint8_t responder_resources, initiator_depth, retry_count, rnr_retry_count, srq;
	uint8_t pad[3];
	uint32_t qp_num;
	/* rdma_ud_param */
	uint32_t ud_qp_num, ud_qkey;
};

/* What rdma_connect and rdma_accept hand over. */
struct srn_cm_param {
	int32_t qp; /* the id's QP's handle, or -1 */
	uint32_t qp_num, qkey;
	uint8_t responder_resources, initiator_depth, retry_count, rnr_retry_count;
	uint32_t private_len;
	uint32_t tos; /* rdma_set_option(RDMA_OPTION_ID_TOS): the connection's traffic class */
	const void *private_data;
};

#ifndef SRN_GO
/* The Go side's exports (libsoftrnic.so). */
extern int srn_device_names(char *buf, int len);
extern int srn_open(const char *netdev, struct srn_dev_attr *attr, char *err, int errlen);
extern int srn_close(int dev);
extern void srn_exit(void);
extern int srn_query(int dev, struct srn_dev_attr *attr);
extern int srn_port_state(int dev);
extern int srn_async(int dev, int fd, int add);
extern int srn_alloc_pd(int dev);
extern int srn_dealloc_pd(int pd);
extern int srn_reg_mr(int pd, void *addr, uint64_t len, uint64_t iova, int access, uint32_t *lkey, uint32_t *rkey);
extern int srn_dereg_mr(int mr);
extern int srn_create_cq(int dev, int cqe, int fd, uint64_t cookie, int *actual);
extern int srn_destroy_cq(int cq);
extern int srn_poll_cq(int cq, int n, struct srn_wc *wc);
extern int srn_arm_cq(int cq, int solicited_only);
extern int srn_create_srq(int pd, int max_wr, int max_sge, int *actual_wr);
extern int srn_destroy_srq(int srq);
extern int srn_post_srq_recv(int srq, int n, struct srn_recv_wr *wr, int *bad);
extern int srn_create_qp(int pd, struct srn_qp_init *init);
extern int srn_modify_qp(int qp, struct srn_qp_attr *attr, int mask);
extern int srn_qp_state(int qp);
extern int srn_destroy_qp(int qp);
extern int srn_post_send(int qp, int n, struct srn_send_wr *wr, int *bad);
extern int srn_post_recv(int qp, int n, struct srn_recv_wr *wr, int *bad);
extern int srn_create_ah(int pd, const uint8_t *dgid, uint8_t tclass, uint8_t *dmac);
extern int srn_attach_mcast(int qp, const uint8_t *gid, int detach);
extern int srn_destroy_ah(int ah);
extern int srn_last_error(char *buf, int len);
extern int srn_cm_channel(int fd);
extern int srn_cm_close_channel(int ch);
extern int srn_cm_get_event(int ch, struct srn_cm_event *ev);
extern int srn_cm_create_id(int ch, int ps, uint64_t cookie);
extern int srn_cm_migrate(int id, int ch, uint64_t cookie);
extern int srn_cm_destroy_id(int id);
extern int srn_cm_bind(int id, const uint8_t *addr, uint16_t port, char *netdev);
extern int srn_cm_resolve_addr(int id, const uint8_t *src, const uint8_t *dst, uint16_t port, int timeout_ms);
extern int srn_cm_resolve_route(int id);
extern int srn_cm_join(int id, const uint8_t *group);
extern int srn_cm_listen(int id);
extern int srn_cm_connect(int id, struct srn_cm_param *p);
extern int srn_cm_accept(int id, struct srn_cm_param *p);
extern int srn_cm_reject(int id, const void *private_data, int len);
extern int srn_cm_disconnect(int id);
#endif

#endif
