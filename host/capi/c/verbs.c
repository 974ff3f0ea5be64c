/*
 * softrnic's libibverbs.so.1: rdma-core's libibverbs ABI (Debian 12,
 * rdma-core 44), with softrnic's NIC in the process (libsoftrnic.so)
 * behind it instead of a kernel driver. The structures, the inline data
 * path calls through ibv_context.ops and struct verbs_context, and the
 * symbol versions are the header's and libibverbs.map's; every verb turns
 * into a call of srn.h on a handle the Go side gave.
 *
 * Built against the installed <infiniband/verbs.h> (libibverbs-dev) by
 * `make libs`.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../srn.h"
#include "softrnic.h"

#define EXPORT __attribute__((visibility("default")))
#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

/* Devices: one per netdev softrnic is configured on, for the process's
 * life (as libibverbs keeps its device list). */
static pthread_mutex_t dev_mu = PTHREAD_MUTEX_INITIALIZER;
static struct srn_device *devs[SRN_MAX_DEVICES];
static int ndevs;

static struct srn_device *find_or_add_device(const char *netdev)
{
	for (int i = 0; i < ndevs; i++)
		if (strcmp(devs[i]->netdev, netdev) == 0)
			return devs[i];
	if (ndevs == SRN_MAX_DEVICES)
		return NULL;
	struct srn_device *d = calloc(1, sizeof(*d));
	if (!d)
		return NULL;
	snprintf(d->netdev, sizeof(d->netdev), "%.63s", netdev);
	d->dev.node_type = IBV_NODE_CA;
	d->dev.transport_type = IBV_TRANSPORT_IB;
	snprintf(d->dev.name, sizeof(d->dev.name), "softrnic_%.50s", netdev);
	snprintf(d->dev.dev_name, sizeof(d->dev.dev_name), "uverbs_%.50s", d->dev.name);
	snprintf(d->dev.dev_path, sizeof(d->dev.dev_path), "/sys/class/infiniband_verbs/%s", d->dev.dev_name);
	snprintf(d->dev.ibdev_path, sizeof(d->dev.ibdev_path), "/sys/class/infiniband/%s", d->dev.name);
	d->index = ndevs;
	devs[ndevs++] = d;
	return d;
}

EXPORT struct ibv_device **ibv_get_device_list(int *num_devices)
{
	char names[4096];
	int n = srn_device_names(names, sizeof(names));
	if (n < 0) {
		errno = -n;
		if (num_devices)
			*num_devices = 0;
		return NULL;
	}
	struct ibv_device **list = calloc(n + 1, sizeof(*list));
	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_lock(&dev_mu);
	int k = 0;
	const char *p = names;
	for (int i = 0; i < n; i++) {
		struct srn_device *d = find_or_add_device(p);
		if (d)
			list[k++] = &d->dev;
		p += strlen(p) + 1;
	}
	pthread_mutex_unlock(&dev_mu);
	if (num_devices)
		*num_devices = k;
	return list;
}

EXPORT void ibv_free_device_list(struct ibv_device **list) { free(list); }

EXPORT const char *ibv_get_device_name(struct ibv_device *device)
{
	return device ? device->name : NULL;
}

EXPORT int ibv_get_device_index(struct ibv_device *device)
{
	return device ? container_of(device, struct srn_device, dev)->index : -1;
}

/* The node GUID: EUI-64 from the MAC, as rxe makes it. */
static __be64 guid_from_mac(const uint8_t *m)
{
	uint8_t g[8] = {m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]};
	__be64 v;
	memcpy(&v, g, 8);
	return v;
}

EXPORT __be64 ibv_get_device_guid(struct ibv_device *device)
{
	struct srn_device *d = container_of(device, struct srn_device, dev);
	return guid_from_mac(d->mac);
}

static int srn_post_send_op(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
static int srn_post_recv_op(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
static int srn_post_srq_recv_op(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
static int srn_poll_cq_op(struct ibv_cq *cq, int n, struct ibv_wc *wc);
static int srn_req_notify_cq_op(struct ibv_cq *cq, int solicited_only);
static int srn_query_port_op(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr, size_t len);
static int srn_query_device_ex_op(struct ibv_context *ctx, const struct ibv_query_device_ex_input *in,
				  struct ibv_device_attr_ex *attr, size_t len);
static struct ibv_qp *srn_create_qp_ex_op(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr);
static struct ibv_srq *srn_create_srq_ex_op(struct ibv_context *ctx, struct ibv_srq_init_attr_ex *attr);
static struct ibv_cq_ex *srn_create_cq_ex_op(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *attr);
static int srn_get_srq_num_op(struct ibv_srq *srq, uint32_t *num);

static void report_open_error(const char *name, int rc, const char *why)
{
	fprintf(stderr, "softrnic: cannot open %s: %s\n", name, why[0] ? why : strerror(-rc));
}

EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
	if (!device) {
		errno = EINVAL;
		return NULL;
	}
	struct srn_device *d = container_of(device, struct srn_device, dev);
	struct srn_context *c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	char why[SRN_ERR_LEN] = "";
	int h = srn_open(d->netdev, &c->attr, why, sizeof(why));
	if (h < 0) {
		report_open_error(device->name, h, why);
		free(c);
		errno = -h;
		return NULL;
	}
	memcpy(d->mac, c->attr.mac, 6);
	c->h = h;
	if (pipe2(c->async_pipe, O_CLOEXEC) != 0) {
		int e = errno;
		srn_close(h);
		free(c);
		errno = e;
		return NULL;
	}
	fcntl(c->async_pipe[1], F_SETFL, fcntl(c->async_pipe[1], F_GETFL) | O_NONBLOCK);
	srn_async(h, c->async_pipe[1], 1); /* port and GID events */
	struct verbs_context *v = &c->vctx;
	struct ibv_context *ctx = &v->context;
	ctx->device = device;
	ctx->cmd_fd = c->async_pipe[1];
	ctx->async_fd = c->async_pipe[0];
	ctx->num_comp_vectors = 1;
	pthread_mutex_init(&ctx->mutex, NULL);
	ctx->abi_compat = __VERBS_ABI_IS_EXTENDED;
	ctx->ops.post_send = srn_post_send_op;
	ctx->ops.post_recv = srn_post_recv_op;
	ctx->ops.post_srq_recv = srn_post_srq_recv_op;
	ctx->ops.poll_cq = srn_poll_cq_op;
	ctx->ops.req_notify_cq = srn_req_notify_cq_op;
	v->sz = sizeof(*v);
	v->query_port = srn_query_port_op;
	v->query_device_ex = srn_query_device_ex_op;
	v->create_qp_ex = srn_create_qp_ex_op;
	v->create_srq_ex = srn_create_srq_ex_op;
	v->create_cq_ex = srn_create_cq_ex_op;
	v->get_srq_num = srn_get_srq_num_op;
	return ctx;
}

EXPORT int ibv_close_device(struct ibv_context *ctx)
{
	struct srn_context *c = srn_ctx(ctx);
	srn_async(c->h, c->async_pipe[1], 0);
	int rc = srn_close(c->h);
	close(c->async_pipe[0]);
	close(c->async_pipe[1]);
	pthread_mutex_destroy(&ctx->mutex);
	free(c);
	return rc < 0 ? -rc : 0;
}

/* --- device and port ------------------------------------------------ */

static void fill_device_attr(struct srn_context *c, struct ibv_device_attr *a)
{
	struct srn_dev_attr *s = &c->attr;
	memset(a, 0, sizeof(*a));
	snprintf(a->fw_ver, sizeof(a->fw_ver), "softrnic %s (%s, %u queue%s)", SOFTRNIC_VERSION, s->port_kind,
		 s->queues, s->queues == 1 ? "" : "s");
	a->node_guid = guid_from_mac(s->mac);
	a->sys_image_guid = a->node_guid;
	a->max_mr_size = s->max_mr_size;
	a->page_size_cap = 0xfffff000;
	a->vendor_id = SOFTRNIC_VENDOR_ID;
	a->vendor_part_id = SOFTRNIC_VENDOR_PART_ID;
	a->hw_ver = 1;
	a->max_qp = s->max_qp;
	a->max_qp_wr = s->max_qp_wr;
	a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SRQ_RESIZE | IBV_DEVICE_PORT_ACTIVE_EVENT;
	a->max_sge = s->max_sge;
	a->max_sge_rd = s->max_sge;
	a->max_cq = s->max_cq;
	a->max_cqe = s->max_cqe;
	a->max_mr = s->max_mr;
	a->max_pd = s->max_pd;
	a->max_qp_rd_atom = s->max_rd_atomic;
	a->max_qp_init_rd_atom = s->max_rd_atomic;
	a->max_res_rd_atom = s->max_rd_atomic * s->max_qp;
	a->atomic_cap = IBV_ATOMIC_HCA;
	a->max_ah = s->max_ah;
	a->max_srq = s->max_srq;
	a->max_srq_wr = s->max_srq_wr;
	a->max_srq_sge = s->max_recv_sge;
	a->max_mcast_grp = s->max_mcast_grp;
	a->max_mcast_qp_attach = s->max_mcast_qp_attach;
	a->max_total_mcast_qp_attach = s->max_mcast_grp * s->max_mcast_qp_attach;
	a->max_pkeys = 1;
	a->local_ca_ack_delay = 15;
	a->phys_port_cnt = 1;
}

EXPORT int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
	struct srn_context *c = srn_ctx(ctx);
	int rc = srn_query(c->h, &c->attr);
	if (rc < 0)
		return -rc;
	fill_device_attr(c, attr);
	return 0;
}

static int srn_query_device_ex_op(struct ibv_context *ctx, const struct ibv_query_device_ex_input *in,
				  struct ibv_device_attr_ex *attr, size_t len)
{
	struct ibv_device_attr_ex a;
	if (in && in->comp_mask)
		return EINVAL;
	memset(&a, 0, sizeof(a));
	int rc = ibv_query_device(ctx, &a.orig_attr);
	if (rc)
		return rc;
	a.phys_port_cnt_ex = 1;
	memcpy(attr, &a, len < sizeof(a) ? len : sizeof(a));
	return 0;
}

static int srn_query_port_op(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr, size_t len)
{
	struct srn_context *c = srn_ctx(ctx);
	struct ibv_port_attr a;
	if (port != 1)
		return EINVAL;
	int rc = srn_query(c->h, &c->attr);
	if (rc < 0)
		return -rc;
	int state = srn_port_state(c->h);
	memset(&a, 0, sizeof(a));
	a.state = state;
	a.max_mtu = IBV_MTU_4096;
	a.active_mtu = c->attr.active_mtu;
	a.gid_tbl_len = SRN_MAX_GIDS;
	a.port_cap_flags = IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS;
	a.max_msg_sz = 1u << 31;
	a.pkey_tbl_len = 1;
	a.max_vl_num = 1;
	a.active_width = 1;	  /* 1X */
	a.active_speed = 32;  /* 25 Gbit/s per lane, as rxe reports on most links */
	a.phys_state = state == IBV_PORT_ACTIVE ? 5 : 3; /* LinkUp or Disabled */
	a.link_layer = IBV_LINK_LAYER_ETHERNET;
	memcpy(attr, &a, len < sizeof(a) ? len : sizeof(a));
	return 0;
}

/* The exported ibv_query_port, for programs built against old headers:
 * the header's inline version goes through verbs_context. */
#undef ibv_query_port
EXPORT int ibv_query_port(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *attr)
{
	/* an older, shorter struct: up to link_layer */
	return srn_query_port_op(ctx, port, (struct ibv_port_attr *)attr, offsetof(struct ibv_port_attr, link_layer) + 1);
}

EXPORT int ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid)
{
	struct srn_context *c = srn_ctx(ctx);
	if (port != 1 || index < 0 || index >= SRN_MAX_GIDS)
		return -1;
	srn_query(c->h, &c->attr);
	if ((uint32_t)index >= c->attr.gid_count)
		memset(gid, 0, sizeof(*gid)); /* an empty entry, as the kernel reports one */
	else
		memcpy(gid->raw, c->attr.gid[index], 16);
	return 0;
}

EXPORT int _ibv_query_gid_ex(struct ibv_context *ctx, uint32_t port, uint32_t index, struct ibv_gid_entry *entry,
			     uint32_t flags, size_t entry_size)
{
	struct srn_context *c = srn_ctx(ctx);
	struct ibv_gid_entry e;
	if (flags || entry_size < sizeof(e))
		return EINVAL;
	if (port != 1)
		return EINVAL;
	srn_query(c->h, &c->attr);
	if (index >= c->attr.gid_count)
		return index < SRN_MAX_GIDS ? ENODATA : EINVAL;
	memset(&e, 0, sizeof(e));
	memcpy(e.gid.raw, c->attr.gid[index], 16);
	e.gid_index = index;
	e.port_num = 1;
	e.gid_type = IBV_GID_TYPE_ROCE_V2;
	e.ndev_ifindex = if_nametoindex(c->attr.netdev);
	memcpy(entry, &e, sizeof(e));
	return 0;
}

EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *ctx, struct ibv_gid_entry *entries, size_t max,
				    uint32_t flags, size_t entry_size)
{
	struct srn_context *c = srn_ctx(ctx);
	if (flags || entry_size < sizeof(struct ibv_gid_entry))
		return -EINVAL;
	srn_query(c->h, &c->attr);
	size_t n = 0;
	for (uint32_t i = 0; i < c->attr.gid_count; i++) {
		if (n == max)
			return -EINVAL;
		int rc = _ibv_query_gid_ex(ctx, 1, i, (struct ibv_gid_entry *)((char *)entries + n * entry_size), 0,
					   entry_size);
		if (rc)
			return -rc;
		n++;
	}
	return n;
}

/* ibv_query_gid_type is a private symbol (IBVERBS_PRIVATE_34) that
 * perftest calls: the type as sysfs names it, 1 for RoCE v2. */
enum srn_gid_type_sysfs { SRN_GID_TYPE_SYSFS_IB_ROCE_V1, SRN_GID_TYPE_SYSFS_ROCE_V2 };

EXPORT int ibv_query_gid_type(struct ibv_context *ctx, uint8_t port, unsigned int index, enum srn_gid_type_sysfs *type)
{
	struct srn_context *c = srn_ctx(ctx);
	if (port != 1 || index >= SRN_MAX_GIDS) {
		errno = EINVAL;
		return -1;
	}
	srn_query(c->h, &c->attr);
	if (index >= c->attr.gid_count) {
		errno = EINVAL;
		return -1;
	}
	*type = SRN_GID_TYPE_SYSFS_ROCE_V2;
	return 0;
}

EXPORT int ibv_query_pkey(struct ibv_context *ctx, uint8_t port, int index, __be16 *pkey)
{
	(void)ctx;
	if (port != 1 || index != 0)
		return -1;
	*pkey = htons(0xffff);
	return 0;
}

EXPORT int ibv_get_pkey_index(struct ibv_context *ctx, uint8_t port, __be16 pkey)
{
	(void)ctx;
	if (port == 1 && ntohs(pkey) == 0xffff)
		return 0;
	return -1;
}

/* --- async events ---------------------------------------------------- */

EXPORT int ibv_get_async_event(struct ibv_context *ctx, struct ibv_async_event *event)
{
	struct srn_async_event e;
	ssize_t n = read(ctx->async_fd, &e, sizeof(e));
	if (n != sizeof(e))
		return -1;
	memset(event, 0, sizeof(*event));
	event->event_type = e.type;
	event->element.port_num = e.port;
	return 0;
}

EXPORT void ibv_ack_async_event(struct ibv_async_event *event) { (void)event; }

/* --- PD and MR ------------------------------------------------------- */

EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx)
{
	struct srn_context *c = srn_ctx(ctx);
	struct srn_pd *p = calloc(1, sizeof(*p));
	if (!p) {
		errno = ENOMEM;
		return NULL;
	}
	int h = srn_alloc_pd(c->h);
	if (h < 0) {
		free(p);
		errno = -h;
		return NULL;
	}
	p->h = h;
	p->pd.context = ctx;
	p->pd.handle = h;
	return &p->pd;
}

EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
	struct srn_pd *p = container_of(pd, struct srn_pd, pd);
	int rc = srn_dealloc_pd(p->h);
	if (rc < 0)
		return -rc;
	free(p);
	return 0;
}

EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
				       unsigned int access)
{
	if (!pd || !addr || length == 0) {
		errno = EINVAL;
		return NULL;
	}
	unsigned int known = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			     IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_RELAXED_ORDERING | IBV_ACCESS_OPTIONAL_RANGE;
	if ((access & ~known) ||
	    ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE))) {
		errno = EINVAL; /* remote write or atomic without local write: as the kernel refuses it */
		return NULL;
	}
	struct srn_pd *p = container_of(pd, struct srn_pd, pd);
	struct srn_mr *m = calloc(1, sizeof(*m));
	if (!m) {
		errno = ENOMEM;
		return NULL;
	}
	uint32_t lkey, rkey;
	int h = srn_reg_mr(p->h, addr, length, iova, access & 0xf, &lkey, &rkey);
	if (h < 0) {
		free(m);
		errno = -h;
		return NULL;
	}
	m->h = h;
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = addr;
	m->mr.length = length;
	m->mr.handle = h;
	m->mr.lkey = lkey;
	m->mr.rkey = rkey;
	return &m->mr;
}

#undef ibv_reg_mr
#undef ibv_reg_mr_iova
EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, access);
}

EXPORT struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, iova, access);
}

EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
	struct srn_mr *m = container_of(mr, struct srn_mr, mr);
	int rc = srn_dereg_mr(m->h);
	if (rc < 0)
		return -rc;
	free(m);
	return 0;
}

/* --- completion channels and CQs -------------------------------------- */

EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *ctx)
{
	struct srn_channel *ch = calloc(1, sizeof(*ch));
	int fds[2];
	if (!ch) {
		errno = ENOMEM;
		return NULL;
	}
	if (pipe2(fds, O_CLOEXEC) != 0) {
		free(ch);
		return NULL;
	}
	/* The NIC never blocks on the pipe: a program that arms and never
	 * reads its channel loses events past the pipe's 8192, not the NIC. */
	fcntl(fds[1], F_SETFL, fcntl(fds[1], F_GETFL) | O_NONBLOCK);
	ch->ch.context = ctx;
	ch->ch.fd = fds[0];
	ch->ch.refcnt = 0;
	ch->wfd = fds[1];
	pthread_mutex_init(&ch->mu, NULL);
	return &ch->ch;
}

EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
	struct srn_channel *ch = container_of(channel, struct srn_channel, ch);
	if (channel->refcnt)
		return EBUSY;
	close(ch->ch.fd);
	close(ch->wfd);
	pthread_mutex_destroy(&ch->mu);
	free(ch);
	return 0;
}

static struct srn_cq *create_cq(struct ibv_context *ctx, int cqe, void *cq_context, struct ibv_comp_channel *channel,
				int comp_vector)
{
	struct srn_context *c = srn_ctx(ctx);
	if (cqe < 1 || (uint32_t)cqe > c->attr.max_cqe || comp_vector < 0 || comp_vector >= ctx->num_comp_vectors) {
		errno = EINVAL;
		return NULL;
	}
	struct srn_cq *q = calloc(1, sizeof(*q));
	if (!q) {
		errno = ENOMEM;
		return NULL;
	}
	struct ibv_cq *cq = ibv_cq_ex_to_cq(&q->cqx);
	int wfd = channel ? container_of(channel, struct srn_channel, ch)->wfd : -1;
	int actual = 0;
	int h = srn_create_cq(c->h, cqe, wfd, (uint64_t)(uintptr_t)cq, &actual);
	if (h < 0) {
		free(q);
		errno = -h;
		return NULL;
	}
	q->h = h;
	cq->context = ctx;
	cq->channel = channel;
	cq->cq_context = cq_context;
	cq->handle = h;
	cq->cqe = actual;
	pthread_mutex_init(&cq->mutex, NULL);
	pthread_cond_init(&cq->cond, NULL);
	if (channel) {
		pthread_mutex_lock(&ctx->mutex);
		channel->refcnt++;
		pthread_mutex_unlock(&ctx->mutex);
	}
	return q;
}

EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
				    struct ibv_comp_channel *channel, int comp_vector)
{
	struct srn_cq *q = create_cq(ctx, cqe, cq_context, channel, comp_vector);
	return q ? ibv_cq_ex_to_cq(&q->cqx) : NULL;
}

EXPORT int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	(void)cq;
	(void)cqe;
	return EOPNOTSUPP;
}

/* drop_events takes a destroyed CQ's events, not yet got, out of its
 * channel, as the kernel drops them: ibv_get_cq_event never returns a
 * CQ that is gone. The NIC writes none for it any more. */
static void drop_events(struct ibv_comp_channel *channel, struct ibv_cq *cq)
{
	struct srn_channel *ch = container_of(channel, struct srn_channel, ch);
	uint64_t keep[512];
	int n = 0;
	struct pollfd pfd = {.fd = channel->fd, .events = POLLIN};
	pthread_mutex_lock(&ch->mu);
	while (n < (int)(sizeof(keep) / sizeof(keep[0])) && poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLIN)) {
		uint64_t cookie;
		if (read(channel->fd, &cookie, sizeof(cookie)) != sizeof(cookie))
			break;
		if (cookie != (uint64_t)(uintptr_t)cq)
			keep[n++] = cookie;
	}
	for (int i = 0; i < n; i++) /* the other CQs' events go back, in order */
		if (write(ch->wfd, &keep[i], sizeof(keep[i])) != sizeof(keep[i]))
			break;
	pthread_mutex_unlock(&ch->mu);
}

EXPORT int ibv_destroy_cq(struct ibv_cq *cq)
{
	struct srn_cq *q = srn_cq_of(cq);
	int rc = srn_destroy_cq(q->h);
	if (rc < 0)
		return -rc;
	if (cq->channel) {
		drop_events(cq->channel, cq);
		pthread_mutex_lock(&cq->context->mutex);
		cq->channel->refcnt--;
		pthread_mutex_unlock(&cq->context->mutex);
	}
	/* libibverbs' contract: every event got must be acked first. */
	pthread_mutex_lock(&cq->mutex);
	while (cq->comp_events_completed != q->events_got)
		pthread_cond_wait(&cq->cond, &cq->mutex);
	pthread_mutex_unlock(&cq->mutex);
	free(q);
	return 0;
}

EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
	uint64_t cookie;
	for (;;) {
		ssize_t n = read(channel->fd, &cookie, sizeof(cookie));
		if (n == sizeof(cookie))
			break;
		if (n < 0 && errno == EINTR)
			continue;
		if (n >= 0)
			errno = EIO;
		return -1;
	}
	struct ibv_cq *c = (struct ibv_cq *)(uintptr_t)cookie;
	struct srn_cq *q = srn_cq_of(c);
	pthread_mutex_lock(&c->mutex);
	q->events_got++;
	pthread_mutex_unlock(&c->mutex);
	*cq = c;
	*cq_context = c->cq_context;
	return 0;
}

EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	pthread_mutex_lock(&cq->mutex);
	cq->comp_events_completed += nevents;
	pthread_cond_signal(&cq->cond);
	pthread_mutex_unlock(&cq->mutex);
}

static void to_ibv_wc(const struct srn_wc *s, struct ibv_wc *w)
{
	w->wr_id = s->wr_id;
	w->status = s->status;
	w->opcode = s->opcode;
	w->vendor_err = 0;
	w->byte_len = s->byte_len;
	w->wc_flags = s->wc_flags;
	if (s->wc_flags & IBV_WC_WITH_INV)
		w->invalidated_rkey = s->imm;
	else
		w->imm_data = htonl(s->imm);
	w->qp_num = s->qp_num;
	w->src_qp = s->src_qp;
	w->pkey_index = 0;
	w->slid = 0;
	w->sl = 0;
	w->dlid_path_bits = 0;
}

static int srn_poll_cq_op(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	struct srn_cq *q = srn_cq_of(cq);
	struct srn_wc buf[SRN_BATCH];
	int done = 0;
	if (n < 0)
		return -EINVAL;
	while (done < n) {
		int want = n - done < SRN_BATCH ? n - done : SRN_BATCH;
		int got = srn_poll_cq(q->h, want, buf);
		if (got < 0)
			return done ? done : got;
		for (int i = 0; i < got; i++)
			to_ibv_wc(&buf[i], &wc[done + i]);
		done += got;
		if (got < want)
			break;
	}
	return done;
}

static int srn_req_notify_cq_op(struct ibv_cq *cq, int solicited_only)
{
	struct srn_cq *q = srn_cq_of(cq);
	if (!cq->channel)
		return EINVAL;
	int rc = srn_arm_cq(q->h, solicited_only);
	return rc < 0 ? -rc : 0;
}

/* ibv_create_cq_ex: the extended poll (ibv_start_poll and the
 * ibv_wc_read_* calls) over the same CQ, one completion at a time. */
static struct srn_cq *cqx_of(struct ibv_cq_ex *cqx) { return container_of(cqx, struct srn_cq, cqx); }

static int cqx_next(struct ibv_cq_ex *cqx)
{
	struct srn_cq *q = cqx_of(cqx);
	int got = srn_poll_cq(q->h, 1, &q->cur);
	if (got < 0)
		return -got;
	if (got == 0)
		return ENOENT;
	cqx->wr_id = q->cur.wr_id;
	cqx->status = q->cur.status;
	return 0;
}

static int cqx_start_poll(struct ibv_cq_ex *cqx, struct ibv_poll_cq_attr *attr)
{
	if (attr && attr->comp_mask)
		return EINVAL;
	return cqx_next(cqx);
}
static void cqx_end_poll(struct ibv_cq_ex *cqx) { (void)cqx; }
static enum ibv_wc_opcode cqx_read_opcode(struct ibv_cq_ex *cqx) { return cqx_of(cqx)->cur.opcode; }
static uint32_t cqx_read_vendor_err(struct ibv_cq_ex *cqx) { (void)cqx; return 0; }
static uint32_t cqx_read_byte_len(struct ibv_cq_ex *cqx) { return cqx_of(cqx)->cur.byte_len; }
static __be32 cqx_read_imm_data(struct ibv_cq_ex *cqx) { return htonl(cqx_of(cqx)->cur.imm); }
static uint32_t cqx_read_qp_num(struct ibv_cq_ex *cqx) { return cqx_of(cqx)->cur.qp_num; }
static uint32_t cqx_read_src_qp(struct ibv_cq_ex *cqx) { return cqx_of(cqx)->cur.src_qp; }
static unsigned int cqx_read_wc_flags(struct ibv_cq_ex *cqx) { return cqx_of(cqx)->cur.wc_flags; }
static uint32_t cqx_read_zero32(struct ibv_cq_ex *cqx) { (void)cqx; return 0; }
static uint8_t cqx_read_zero8(struct ibv_cq_ex *cqx) { (void)cqx; return 0; }

static struct ibv_cq_ex *srn_create_cq_ex_op(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *attr)
{
	uint64_t known = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP |
			 IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL | IBV_WC_EX_WITH_DLID_PATH_BITS;
	if ((attr->wc_flags & ~known) || (attr->comp_mask & ~(uint32_t)IBV_CQ_INIT_ATTR_MASK_FLAGS)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	struct srn_cq *q = create_cq(ctx, attr->cqe, attr->cq_context, attr->channel, attr->comp_vector);
	if (!q)
		return NULL;
	struct ibv_cq_ex *x = &q->cqx;
	x->start_poll = cqx_start_poll;
	x->next_poll = cqx_next;
	x->end_poll = cqx_end_poll;
	x->read_opcode = cqx_read_opcode;
	x->read_vendor_err = cqx_read_vendor_err;
	x->read_byte_len = cqx_read_byte_len;
	x->read_imm_data = cqx_read_imm_data;
	x->read_qp_num = cqx_read_qp_num;
	x->read_src_qp = cqx_read_src_qp;
	x->read_wc_flags = cqx_read_wc_flags;
	x->read_slid = cqx_read_zero32;
	x->read_sl = cqx_read_zero8;
	x->read_dlid_path_bits = cqx_read_zero8;
	return x;
}

/* --- SRQ --------------------------------------------------------------- */

static struct ibv_srq *create_srq(struct ibv_pd *pd, void *srq_context, struct ibv_srq_attr *attr)
{
	struct srn_pd *p = container_of(pd, struct srn_pd, pd);
	struct srn_context *c = srn_ctx(pd->context);
	if (attr->max_wr < 1 || attr->max_wr > c->attr.max_srq_wr || attr->max_sge > c->attr.max_recv_sge ||
	    attr->srq_limit > attr->max_wr) {
		errno = EINVAL;
		return NULL;
	}
	struct srn_srq *s = calloc(1, sizeof(*s));
	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	int actual = 0;
	int h = srn_create_srq(p->h, attr->max_wr, attr->max_sge, &actual);
	if (h < 0) {
		free(s);
		errno = -h;
		return NULL;
	}
	s->h = h;
	s->max_wr = actual;
	s->max_sge = attr->max_sge ? attr->max_sge : 1;
	s->srq.context = pd->context;
	s->srq.srq_context = srq_context;
	s->srq.pd = pd;
	s->srq.handle = h;
	pthread_mutex_init(&s->srq.mutex, NULL);
	pthread_cond_init(&s->srq.cond, NULL);
	attr->max_wr = actual;
	attr->max_sge = s->max_sge;
	return &s->srq;
}

EXPORT struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *init)
{
	return create_srq(pd, init->srq_context, &init->attr);
}

static struct ibv_srq *srn_create_srq_ex_op(struct ibv_context *ctx, struct ibv_srq_init_attr_ex *init)
{
	(void)ctx;
	if (!(init->comp_mask & IBV_SRQ_INIT_ATTR_PD) || (init->comp_mask & ~(uint32_t)(IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE)) ||
	    ((init->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && init->srq_type != IBV_SRQT_BASIC)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	return create_srq(init->pd, init->srq_context, &init->attr);
}

static int srn_get_srq_num_op(struct ibv_srq *srq, uint32_t *num)
{
	(void)srq;
	(void)num;
	return EOPNOTSUPP; /* an XRC SRQ's number; softrnic has no XRC */
}

EXPORT int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask)
{
	struct srn_srq *s = container_of(srq, struct srn_srq, srq);
	if (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT))
		return EINVAL;
	if (mask & IBV_SRQ_MAX_WR)
		return EOPNOTSUPP; /* softrnic's SRQs are not resized */
	if (mask & IBV_SRQ_LIMIT) {
		if (attr->srq_limit > (uint32_t)s->max_wr)
			return EINVAL;
		return EOPNOTSUPP; /* no SRQ limit event yet */
	}
	return 0;
}

EXPORT int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	struct srn_srq *s = container_of(srq, struct srn_srq, srq);
	attr->max_wr = s->max_wr;
	attr->max_sge = s->max_sge;
	attr->srq_limit = 0;
	return 0;
}

EXPORT int ibv_destroy_srq(struct ibv_srq *srq)
{
	struct srn_srq *s = container_of(srq, struct srn_srq, srq);
	int rc = srn_destroy_srq(s->h);
	if (rc < 0)
		return -rc;
	free(s);
	return 0;
}

/* convert_recv fills up to SRN_BATCH srn_recv_wrs from a chain; it
 * returns how many, or -1 with *bad at a request with too many SGEs. */
static int convert_recv(struct ibv_recv_wr *wr, int max_sge, struct srn_recv_wr *out, struct ibv_recv_wr **bad,
			struct ibv_recv_wr **next)
{
	int n = 0;
	for (; wr && n < SRN_BATCH; wr = wr->next, n++) {
		if (wr->num_sge < 0 || wr->num_sge > max_sge) {
			*bad = wr;
			*next = wr;
			return -(n + 1);
		}
		out[n].wr_id = wr->wr_id;
		out[n].num_sge = wr->num_sge;
		for (int j = 0; j < wr->num_sge; j++) {
			out[n].sge[j].addr = wr->sg_list[j].addr;
			out[n].sge[j].length = wr->sg_list[j].length;
			out[n].sge[j].lkey = wr->sg_list[j].lkey;
		}
	}
	*next = wr;
	return n;
}

static int post_recv_chain(int h, int max_sge, int (*post)(int, int, struct srn_recv_wr *, int *),
			   struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct srn_recv_wr buf[SRN_BATCH];
	while (wr) {
		struct ibv_recv_wr *next, *first = wr;
		int n = convert_recv(wr, max_sge, buf, bad, &next);
		int refused = n < 0;
		if (refused)
			n = -n - 1;
		if (n > 0) {
			int posted = 0;
			int rc = post(h, n, buf, &posted);
			if (rc < 0) {
				struct ibv_recv_wr *b = first;
				for (int i = 0; i < posted; i++)
					b = b->next;
				*bad = b;
				return -rc;
			}
		}
		if (refused)
			return EINVAL;
		wr = next;
	}
	return 0;
}

static int srn_post_srq_recv_op(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct srn_srq *s = container_of(srq, struct srn_srq, srq);
	return post_recv_chain(s->h, s->max_sge, srn_post_srq_recv, wr, bad);
}

/* --- QP ---------------------------------------------------------------- */

static void qpx_setup(struct srn_qp *q);

static struct ibv_qp *create_qp(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_qp_init_attr_ex *a)
{
	struct srn_context *c = srn_ctx(ctx);
	if (!pd || !a->send_cq || !a->recv_cq) {
		errno = EINVAL;
		return NULL;
	}
	if (a->qp_type != IBV_QPT_RC && a->qp_type != IBV_QPT_UC && a->qp_type != IBV_QPT_UD) {
		errno = EOPNOTSUPP; /* XRC and raw packet QPs */
		return NULL;
	}
	struct ibv_qp_cap *cap = &a->cap;
	if (cap->max_send_wr > c->attr.max_qp_wr || cap->max_recv_wr > c->attr.max_qp_wr ||
	    cap->max_send_sge > c->attr.max_sge || cap->max_recv_sge > c->attr.max_recv_sge ||
	    cap->max_inline_data > c->attr.max_inline) {
		errno = EINVAL;
		return NULL;
	}
	struct srn_qp *q = calloc(1, sizeof(*q));
	if (!q) {
		errno = ENOMEM;
		return NULL;
	}
	struct srn_qp_init init = {
		.qp_type = a->qp_type,
		.send_cq = srn_cq_of(a->send_cq)->h,
		.recv_cq = srn_cq_of(a->recv_cq)->h,
		.srq = a->srq ? container_of(a->srq, struct srn_srq, srq)->h : -1,
		.max_send_wr = cap->max_send_wr ? cap->max_send_wr : 1,
		.max_recv_wr = a->srq ? 1 : (cap->max_recv_wr ? cap->max_recv_wr : 1),
		.max_send_sge = cap->max_send_sge ? cap->max_send_sge : 1,
		.max_recv_sge = cap->max_recv_sge ? cap->max_recv_sge : 1,
		.max_inline = cap->max_inline_data,
	};
	int h = srn_create_qp(container_of(pd, struct srn_pd, pd)->h, &init);
	if (h < 0) {
		free(q);
		errno = -h;
		return NULL;
	}
	q->h = h;
	q->sig_all = a->sq_sig_all;
	q->cap.max_send_wr = init.max_send_wr;
	q->cap.max_recv_wr = a->srq ? 0 : init.max_recv_wr;
	q->cap.max_send_sge = init.max_send_sge;
	q->cap.max_recv_sge = a->srq ? 0 : init.max_recv_sge;
	q->cap.max_inline_data = init.max_inline;
	*cap = q->cap;
	struct ibv_qp *qp = &q->qpx.qp_base;
	qp->context = ctx;
	qp->qp_context = a->qp_context;
	qp->pd = pd;
	qp->send_cq = a->send_cq;
	qp->recv_cq = a->recv_cq;
	qp->srq = a->srq;
	qp->handle = h;
	qp->qp_num = init.qp_num;
	qp->state = IBV_QPS_RESET;
	qp->qp_type = a->qp_type;
	pthread_mutex_init(&qp->mutex, NULL);
	pthread_cond_init(&qp->cond, NULL);
	q->attr.qp_state = IBV_QPS_RESET;
	q->attr.cap = q->cap;
	q->attr.port_num = 1;
	if ((a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) && a->send_ops_flags) {
		q->send_ops = a->send_ops_flags;
		qpx_setup(q);
	}
	pthread_mutex_init(&q->mu, NULL);
	return qp;
}

EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *init)
{
	struct ibv_qp_init_attr_ex a;
	if (!pd || !init) {
		errno = EINVAL;
		return NULL;
	}
	memset(&a, 0, sizeof(a));
	memcpy(&a, init, sizeof(*init));
	a.comp_mask = IBV_QP_INIT_ATTR_PD;
	a.pd = pd;
	struct ibv_qp *qp = create_qp(pd->context, pd, &a);
	if (qp)
		init->cap = a.cap;
	return qp;
}

static struct ibv_qp *srn_create_qp_ex_op(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *a)
{
	uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	uint64_t ops = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
		       IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
		       IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_SEND_WITH_INV;
	if ((a->comp_mask & ~known) || !(a->comp_mask & IBV_QP_INIT_ATTR_PD) ||
	    ((a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) && (a->send_ops_flags & ~ops))) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	return create_qp(ctx, a->pd, a);
}

EXPORT struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	struct srn_qp *q = srn_qp_of(qp);
	if (!q->send_ops)
		return NULL;
	return &q->qpx;
}

static void copy_ah_attr(struct ibv_ah_attr *dst, const struct ibv_ah_attr *src) { *dst = *src; }

EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	struct srn_qp *q = srn_qp_of(qp);
	struct srn_qp_attr a;
	memset(&a, 0, sizeof(a));
	a.qp_state = attr->qp_state;
	a.cur_qp_state = attr->cur_qp_state;
	a.path_mtu = attr->path_mtu;
	a.qkey = attr->qkey;
	a.rq_psn = attr->rq_psn;
	a.sq_psn = attr->sq_psn;
	a.dest_qp_num = attr->dest_qp_num;
	a.qp_access_flags = attr->qp_access_flags;
	a.pkey_index = attr->pkey_index;
	a.port_num = attr->port_num;
	a.timeout = attr->timeout;
	a.retry_cnt = attr->retry_cnt;
	a.rnr_retry = attr->rnr_retry;
	a.min_rnr_timer = attr->min_rnr_timer;
	a.max_rd_atomic = attr->max_rd_atomic;
	a.max_dest_rd_atomic = attr->max_dest_rd_atomic;
	if (mask & IBV_QP_PORT && attr->port_num != 1)
		return EINVAL;
	if (mask & IBV_QP_PKEY_INDEX && attr->pkey_index != 0)
		return EINVAL;
	if (mask & IBV_QP_AV) {
		if (!attr->ah_attr.is_global)
			return EINVAL; /* RoCE needs a GRH: the destination GID */
		if (attr->ah_attr.port_num != 0 && attr->ah_attr.port_num != 1)
			return EINVAL;
		memcpy(a.dgid, attr->ah_attr.grh.dgid.raw, 16);
		a.sgid_index = attr->ah_attr.grh.sgid_index;
		a.traffic_class = attr->ah_attr.grh.traffic_class;
	}
	pthread_mutex_lock(&q->mu);
	int rc = srn_modify_qp(q->h, &a, mask & ~(IBV_QP_CAP | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE |
						  IBV_QP_EN_SQD_ASYNC_NOTIFY));
	if (rc < 0) {
		pthread_mutex_unlock(&q->mu);
		return -rc;
	}
	/* Keep what was set, for ibv_query_qp. */
	struct ibv_qp_attr *k = &q->attr;
	if (mask & IBV_QP_STATE) {
		k->qp_state = attr->qp_state;
		qp->state = attr->qp_state;
	}
	if (mask & IBV_QP_ACCESS_FLAGS)
		k->qp_access_flags = attr->qp_access_flags;
	if (mask & IBV_QP_PKEY_INDEX)
		k->pkey_index = attr->pkey_index;
	if (mask & IBV_QP_PORT)
		k->port_num = attr->port_num;
	if (mask & IBV_QP_QKEY)
		k->qkey = attr->qkey;
	if (mask & IBV_QP_AV)
		copy_ah_attr(&k->ah_attr, &attr->ah_attr);
	if (mask & IBV_QP_PATH_MTU)
		k->path_mtu = attr->path_mtu;
	if (mask & IBV_QP_TIMEOUT)
		k->timeout = attr->timeout;
	if (mask & IBV_QP_RETRY_CNT)
		k->retry_cnt = attr->retry_cnt;
	if (mask & IBV_QP_RNR_RETRY)
		k->rnr_retry = attr->rnr_retry;
	if (mask & IBV_QP_RQ_PSN)
		k->rq_psn = attr->rq_psn;
	if (mask & IBV_QP_MAX_QP_RD_ATOMIC)
		k->max_rd_atomic = attr->max_rd_atomic;
	if (mask & IBV_QP_MIN_RNR_TIMER)
		k->min_rnr_timer = attr->min_rnr_timer;
	if (mask & IBV_QP_SQ_PSN)
		k->sq_psn = attr->sq_psn;
	if (mask & IBV_QP_MAX_DEST_RD_ATOMIC)
		k->max_dest_rd_atomic = attr->max_dest_rd_atomic;
	if (mask & IBV_QP_DEST_QPN)
		k->dest_qp_num = attr->dest_qp_num;
	pthread_mutex_unlock(&q->mu);
	return 0;
}

EXPORT int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init)
{
	struct srn_qp *q = srn_qp_of(qp);
	(void)mask; /* every attribute is filled, as providers do */
	pthread_mutex_lock(&q->mu);
	*attr = q->attr;
	pthread_mutex_unlock(&q->mu);
	int state = srn_qp_state(q->h);
	if (state >= 0) {
		attr->qp_state = state;
		attr->cur_qp_state = state;
		qp->state = state;
	}
	attr->cap = q->cap;
	if (init) {
		memset(init, 0, sizeof(*init));
		init->qp_context = qp->qp_context;
		init->send_cq = qp->send_cq;
		init->recv_cq = qp->recv_cq;
		init->srq = qp->srq;
		init->cap = q->cap;
		init->qp_type = qp->qp_type;
		init->sq_sig_all = q->sig_all;
	}
	return 0;
}

EXPORT int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
	(void)qp;
	(void)op;
	(void)flags;
	return 0; /* data may be placed out of order (selective repeat) */
}

EXPORT int ibv_destroy_qp(struct ibv_qp *qp)
{
	struct srn_qp *q = srn_qp_of(qp);
	int rc = srn_destroy_qp(q->h);
	if (rc < 0)
		return -rc;
	pthread_mutex_destroy(&q->mu);
	free(q);
	return 0;
}

/* convert_send turns one ibv_send_wr into an srn_send_wr; inline data of
 * several SGEs is gathered into scratch (SRN_MAX_INLINE bytes). */
static int convert_send(struct srn_qp *q, struct ibv_send_wr *wr, struct srn_send_wr *o, uint8_t *scratch)
{
	memset(o, 0, offsetof(struct srn_send_wr, sge));
	if (wr->num_sge < 0 || wr->num_sge > (int)q->cap.max_send_sge)
		return EINVAL;
	o->wr_id = wr->wr_id;
	o->opcode = wr->opcode;
	o->flags = wr->send_flags;
	if (q->sig_all)
		o->flags |= IBV_SEND_SIGNALED;
	o->num_sge = wr->num_sge;
	o->ah = -1;
	switch (wr->opcode) {
	case IBV_WR_SEND_WITH_IMM:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		o->imm = ntohl(wr->imm_data);
		break;
	case IBV_WR_SEND_WITH_INV:
		o->imm = wr->invalidate_rkey;
		break;
	default:
		break;
	}
	struct ibv_qp *qp = &q->qpx.qp_base;
	if (qp->qp_type == IBV_QPT_UD) {
		if (!wr->wr.ud.ah)
			return EINVAL;
		o->ah = container_of(wr->wr.ud.ah, struct srn_ah, ah)->h;
		o->remote_qpn = wr->wr.ud.remote_qpn;
		o->remote_qkey = wr->wr.ud.remote_qkey;
	} else if (wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		o->remote_addr = wr->wr.atomic.remote_addr;
		o->rkey = wr->wr.atomic.rkey;
		o->compare_add = wr->wr.atomic.compare_add;
		o->swap = wr->wr.atomic.swap;
	} else {
		o->remote_addr = wr->wr.rdma.remote_addr;
		o->rkey = wr->wr.rdma.rkey;
	}
	if (wr->send_flags & IBV_SEND_INLINE) {
		uint32_t total = 0;
		for (int j = 0; j < wr->num_sge; j++)
			total += wr->sg_list[j].length;
		if (total > q->cap.max_inline_data)
			return EINVAL;
		if (wr->num_sge == 1) {
			o->inline_data = (const void *)(uintptr_t)wr->sg_list[0].addr;
		} else {
			uint32_t off = 0;
			for (int j = 0; j < wr->num_sge; j++) {
				memcpy(scratch + off, (const void *)(uintptr_t)wr->sg_list[j].addr, wr->sg_list[j].length);
				off += wr->sg_list[j].length;
			}
			o->inline_data = scratch;
		}
		o->inline_len = total;
		o->num_sge = 0;
		return 0;
	}
	for (int j = 0; j < wr->num_sge; j++) {
		o->sge[j].addr = wr->sg_list[j].addr;
		o->sge[j].length = wr->sg_list[j].length;
		o->sge[j].lkey = wr->sg_list[j].lkey;
	}
	return 0;
}

static int srn_post_send_op(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct srn_qp *q = srn_qp_of(qp);
	struct srn_send_wr buf[SRN_BATCH];
	static __thread uint8_t scratch[SRN_BATCH][SRN_MAX_INLINE];
	while (wr) {
		struct ibv_send_wr *first = wr;
		int n = 0, refused = 0;
		for (; wr && n < SRN_BATCH; wr = wr->next, n++) {
			if ((refused = convert_send(q, wr, &buf[n], scratch[n])) != 0)
				break;
		}
		if (n > 0) {
			int posted = 0;
			int rc = srn_post_send(q->h, n, buf, &posted);
			if (rc < 0) {
				struct ibv_send_wr *b = first;
				for (int i = 0; i < posted; i++)
					b = b->next;
				*bad = b;
				return -rc;
			}
		}
		if (refused) {
			*bad = wr;
			return refused;
		}
	}
	return 0;
}

static int srn_post_recv_op(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct srn_qp *q = srn_qp_of(qp);
	if (qp->srq) {
		*bad = wr;
		return EINVAL;
	}
	return post_recv_chain(q->h, q->cap.max_recv_sge, srn_post_recv, wr, bad);
}

/* --- the extended post API (ibv_wr_*) on an ibv_qp_ex ------------------- */

static struct srn_qp *qpx_of(struct ibv_qp_ex *x) { return container_of(x, struct srn_qp, qpx); }

static struct srn_send_wr *qpx_new(struct ibv_qp_ex *x, enum ibv_wr_opcode op)
{
	struct srn_qp *q = qpx_of(x);
	if (q->wr_n == SRN_BATCH && q->wr_err == 0) {
		int posted = 0;
		int rc = srn_post_send(q->h, q->wr_n, q->wr, &posted);
		if (rc < 0)
			q->wr_err = -rc;
		q->wr_n = 0;
	}
	if (q->wr_n == SRN_BATCH) {
		q->wr_err = q->wr_err ? q->wr_err : ENOMEM;
		q->wr_n = SRN_BATCH - 1; /* keep writing somewhere; the batch fails */
	}
	struct srn_send_wr *o = &q->wr[q->wr_n++];
	memset(o, 0, sizeof(*o));
	o->wr_id = x->wr_id;
	o->opcode = op;
	o->flags = x->wr_flags | (q->sig_all ? IBV_SEND_SIGNALED : 0);
	o->ah = -1;
	return o;
}

static struct srn_send_wr *qpx_cur(struct ibv_qp_ex *x)
{
	struct srn_qp *q = qpx_of(x);
	return q->wr_n ? &q->wr[q->wr_n - 1] : NULL;
}

static void qpx_start(struct ibv_qp_ex *x)
{
	struct srn_qp *q = qpx_of(x);
	pthread_mutex_lock(&q->mu);
	q->wr_n = 0;
	q->wr_err = 0;
}

static int qpx_complete(struct ibv_qp_ex *x)
{
	struct srn_qp *q = qpx_of(x);
	int rc = q->wr_err;
	if (!rc && q->wr_n) {
		int posted = 0;
		int r = srn_post_send(q->h, q->wr_n, q->wr, &posted);
		if (r < 0)
			rc = -r;
	}
	q->wr_n = 0;
	pthread_mutex_unlock(&q->mu);
	return rc;
}

static void qpx_abort(struct ibv_qp_ex *x)
{
	struct srn_qp *q = qpx_of(x);
	q->wr_n = 0;
	pthread_mutex_unlock(&q->mu);
}

static void qpx_send(struct ibv_qp_ex *x) { qpx_new(x, IBV_WR_SEND); }
static void qpx_send_imm(struct ibv_qp_ex *x, __be32 imm) { qpx_new(x, IBV_WR_SEND_WITH_IMM)->imm = ntohl(imm); }
static void qpx_send_inv(struct ibv_qp_ex *x, uint32_t rkey) { qpx_new(x, IBV_WR_SEND_WITH_INV)->imm = rkey; }

static void qpx_rdma(struct ibv_qp_ex *x, enum ibv_wr_opcode op, uint32_t rkey, uint64_t addr)
{
	struct srn_send_wr *o = qpx_new(x, op);
	o->rkey = rkey;
	o->remote_addr = addr;
}
static void qpx_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr) { qpx_rdma(x, IBV_WR_RDMA_WRITE, rkey, addr); }
static void qpx_write_imm(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, __be32 imm)
{
	qpx_rdma(x, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, addr);
	qpx_cur(x)->imm = ntohl(imm);
}
static void qpx_read(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr) { qpx_rdma(x, IBV_WR_RDMA_READ, rkey, addr); }
static void qpx_cas(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, uint64_t compare, uint64_t swap)
{
	qpx_rdma(x, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, addr);
	qpx_cur(x)->compare_add = compare;
	qpx_cur(x)->swap = swap;
}
static void qpx_fadd(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, uint64_t add)
{
	qpx_rdma(x, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, addr);
	qpx_cur(x)->compare_add = add;
}

static void qpx_set_sge_list(struct ibv_qp_ex *x, size_t n, const struct ibv_sge *sg)
{
	struct srn_qp *q = qpx_of(x);
	struct srn_send_wr *o = qpx_cur(x);
	if (!o)
		return;
	if (n > q->cap.max_send_sge) {
		q->wr_err = EINVAL;
		return;
	}
	o->num_sge = n;
	for (size_t j = 0; j < n; j++) {
		o->sge[j].addr = sg[j].addr;
		o->sge[j].length = sg[j].length;
		o->sge[j].lkey = sg[j].lkey;
	}
}

static void qpx_set_sge(struct ibv_qp_ex *x, uint32_t lkey, uint64_t addr, uint32_t length)
{
	struct ibv_sge s = {.addr = addr, .length = length, .lkey = lkey};
	qpx_set_sge_list(x, 1, &s);
}

static void qpx_set_inline_list(struct ibv_qp_ex *x, size_t n, const struct ibv_data_buf *bufs)
{
	struct srn_qp *q = qpx_of(x);
	struct srn_send_wr *o = qpx_cur(x);
	if (!o)
		return;
	size_t total = 0;
	for (size_t j = 0; j < n; j++)
		total += bufs[j].length;
	if (total > q->cap.max_inline_data) {
		q->wr_err = EINVAL;
		return;
	}
	uint8_t *dst = q->wr_inline[o - q->wr];
	size_t off = 0;
	for (size_t j = 0; j < n; j++) {
		memcpy(dst + off, bufs[j].addr, bufs[j].length);
		off += bufs[j].length;
	}
	o->flags |= IBV_SEND_INLINE;
	o->inline_data = dst;
	o->inline_len = total;
	o->num_sge = 0;
}

static void qpx_set_inline(struct ibv_qp_ex *x, void *addr, size_t length)
{
	struct ibv_data_buf b = {.addr = addr, .length = length};
	qpx_set_inline_list(x, 1, &b);
}

static void qpx_set_ud_addr(struct ibv_qp_ex *x, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey)
{
	struct srn_send_wr *o = qpx_cur(x);
	if (!o)
		return;
	o->ah = container_of(ah, struct srn_ah, ah)->h;
	o->remote_qpn = qpn;
	o->remote_qkey = qkey;
}

static void qpx_setup(struct srn_qp *q)
{
	struct ibv_qp_ex *x = &q->qpx;
	x->comp_mask = 0;
	x->wr_start = qpx_start;
	x->wr_complete = qpx_complete;
	x->wr_abort = qpx_abort;
	x->wr_send = qpx_send;
	x->wr_send_imm = qpx_send_imm;
	x->wr_send_inv = qpx_send_inv;
	x->wr_rdma_write = qpx_write;
	x->wr_rdma_write_imm = qpx_write_imm;
	x->wr_rdma_read = qpx_read;
	x->wr_atomic_cmp_swp = qpx_cas;
	x->wr_atomic_fetch_add = qpx_fadd;
	x->wr_set_sge = qpx_set_sge;
	x->wr_set_sge_list = qpx_set_sge_list;
	x->wr_set_inline_data = qpx_set_inline;
	x->wr_set_inline_data_list = qpx_set_inline_list;
	x->wr_set_ud_addr = qpx_set_ud_addr;
}

/* --- AH ---------------------------------------------------------------- */

EXPORT struct ibv_ah *ibv_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	if (!pd || !attr || !attr->is_global || (attr->port_num != 0 && attr->port_num != 1)) {
		errno = EINVAL;
		return NULL;
	}
	struct srn_ah *a = calloc(1, sizeof(*a));
	if (!a) {
		errno = ENOMEM;
		return NULL;
	}
	uint8_t mac[6];
	int h = srn_create_ah(container_of(pd, struct srn_pd, pd)->h, attr->grh.dgid.raw, attr->grh.traffic_class, mac);
	if (h < 0) {
		free(a);
		errno = -h;
		return NULL;
	}
	a->h = h;
	a->ah.context = pd->context;
	a->ah.pd = pd;
	a->ah.handle = h;
	return &a->ah;
}

EXPORT int ibv_destroy_ah(struct ibv_ah *ah)
{
	struct srn_ah *a = container_of(ah, struct srn_ah, ah);
	int rc = srn_destroy_ah(a->h);
	if (rc < 0)
		return -rc;
	free(a);
	return 0;
}

/* ibv_init_ah_from_wc: the reply's address from a UD receive's GRH (for
 * RoCEv2 over IPv4, the IPv4 header in its last 20 bytes). */
EXPORT int ibv_init_ah_from_wc(struct ibv_context *ctx, uint8_t port, struct ibv_wc *wc, struct ibv_grh *grh,
			       struct ibv_ah_attr *ah)
{
	struct srn_context *c = srn_ctx(ctx);
	if (!(wc->wc_flags & IBV_WC_GRH) || !grh) {
		errno = EINVAL;
		return -1;
	}
	memset(ah, 0, sizeof(*ah));
	ah->port_num = port;
	ah->is_global = 1;
	ah->grh.hop_limit = 64;
	const uint8_t *b = (const uint8_t *)grh;
	uint8_t src[16], dst[16];
	if ((b[0] >> 4) != 6 && (b[20] >> 4) == 4) { /* IPv4: no IPv6 header before it */
		memset(src, 0, 10);
		src[10] = src[11] = 0xff;
		memcpy(src + 12, b + 20 + 12, 4);
		memcpy(dst, src, 12);
		memcpy(dst + 12, b + 20 + 16, 4);
		ah->grh.traffic_class = b[21];
	} else {
		memcpy(src, grh->sgid.raw, 16);
		memcpy(dst, grh->dgid.raw, 16);
		uint32_t vtf = ntohl(grh->version_tclass_flow);
		ah->grh.traffic_class = (vtf >> 20) & 0xff;
		ah->grh.flow_label = vtf & 0xfffff;
	}
	memcpy(ah->grh.dgid.raw, src, 16);
	srn_query(c->h, &c->attr);
	for (uint32_t i = 0; i < c->attr.gid_count; i++) {
		if (memcmp(c->attr.gid[i], dst, 16) == 0) {
			ah->grh.sgid_index = i;
			return 0;
		}
	}
	errno = ENOENT; /* the datagram was not to one of this port's GIDs */
	return -1;
}

EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh, uint8_t port)
{
	struct ibv_ah_attr attr;
	if (ibv_init_ah_from_wc(pd->context, port, wc, grh, &attr))
		return NULL;
	return ibv_create_ah(pd, &attr);
}

/* --- multicast; memory windows, XRC, and what softrnic has not ------------ */

/* A UD QP joins a multicast group (an IPv4-mapped GID; the LID is
 * RoCE's, unused): it takes a copy of every datagram sent to the group,
 * on the xsk port (the udp port answers EOPNOTSUPP). */
EXPORT int ibv_attach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	(void)lid;
	if (!qp || !gid)
		return EINVAL;
	int rc = srn_attach_mcast(srn_qp_of(qp)->h, gid->raw, 0);
	return rc < 0 ? -rc : 0;
}

EXPORT int ibv_detach_mcast(struct ibv_qp *qp, const union ibv_gid *gid, uint16_t lid)
{
	(void)lid;
	if (!qp || !gid)
		return EINVAL;
	int rc = srn_attach_mcast(srn_qp_of(qp)->h, gid->raw, 1);
	return rc < 0 ? -rc : 0;
}

EXPORT int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access)
{
	(void)mr;
	(void)flags;
	(void)pd;
	(void)addr;
	(void)length;
	(void)access;
	errno = EOPNOTSUPP;
	return IBV_REREG_MR_ERR_INPUT;
}

EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova, int fd,
					int access)
{
	(void)pd;
	(void)offset;
	(void)length;
	(void)iova;
	(void)fd;
	(void)access;
	errno = EOPNOTSUPP;
	return NULL;
}
